"""The timer service's declaration: what it consumes, emits and runs beside the consumer."""

from __future__ import annotations

from chorus.kernel.service import On, ServiceSpec
from chorus_contracts.lifecycle import WorkflowEnded
from chorus_contracts.platform import TimerCancel, TimerReschedule, TimerSchedule
from timer_service.adapters.repository import TimerRetention, migrate
from timer_service.bootstrap import bootstrap
from timer_service.firing import fire_due_timers
from timer_service.handlers import (
    on_timer_cancel,
    on_timer_reschedule,
    on_timer_schedule,
    on_workflow_ended,
)

VERSION = "0.1.0"

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
