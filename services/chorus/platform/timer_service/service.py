"""The timer service's declaration: what it consumes, emits and runs beside the consumer."""

from __future__ import annotations

from chorus import __version__
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.contracts.platform import TimerCancel, TimerReschedule, TimerSchedule
from chorus.kernel.service import On, ServiceSpec
from chorus.platform.timer_service.adapters.repository import TimerRetention, migrate
from chorus.platform.timer_service.bootstrap import bootstrap
from chorus.platform.timer_service.firing import fire_due_timers
from chorus.platform.timer_service.handlers import (
    on_timer_cancel,
    on_timer_reschedule,
    on_timer_schedule,
    on_workflow_ended,
)

VERSION = __version__  # the release of Chorus it ships in

SPEC: ServiceSpec[None, None] = ServiceSpec(
    name="timer_service",
    version=VERSION,
    handlers=[
        On(TimerSchedule, on_timer_schedule, timeout_s=30),
        On(TimerCancel, on_timer_cancel, timeout_s=30),
        On(TimerReschedule, on_timer_reschedule, timeout_s=30),
        On(WorkflowEnded, on_workflow_ended, timeout_s=30),
    ],
    # Fired events are whatever the scheduler stored; the scheduler is their producer.
    produces=frozenset(),
    migrations=[migrate],
    owned_data=[TimerRetention()],
    bootstrap=bootstrap,
    workers=[fire_due_timers],
)
