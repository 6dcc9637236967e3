"""The timer service on real Kafka and PostgreSQL: a timer fires its event onto the target
topic once, when it is due; a cancelled one never fires."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from chorus.kernel.outbox import fire_target
from chorus.runtime.runner import running
from chorus_contracts.approvals import ApprovalWindowElapsed
from chorus_contracts.envelope import Envelope
from chorus_contracts.platform import TimerCancel, TimerSchedule
from tests.support.kafka import envelope, local_signer, local_verifier, read_topic
from tests.support.onkafka import OnKafka
from timer_service.config import Settings
from timer_service.service import SPEC

pytestmark = pytest.mark.integration


def window(on_kafka: OnKafka, workflow_id: str, due_at: datetime) -> tuple[Envelope, Envelope]:
    """A gate's approval window as its runtime asks for it: (the event to fire, signed by
    the gate and occurring when it is due; the command)."""
    elapsed = envelope(
        ApprovalWindowElapsed(approval_id=f"appr-{workflow_id}", level=0), workflow_id=workflow_id
    ).model_copy(update={"occurred_at": due_at})
    command = TimerSchedule(
        timer_id=f"approval_gate:{workflow_id}:window-0",
        due_at=due_at,
        fire=fire_target(on_kafka.registry, elapsed, local_signer("approval_gate")),
        purpose="escalation",
    )
    return elapsed, envelope(command, workflow_id=workflow_id)


async def test_a_due_timer_fires_its_event_once_and_a_cancelled_one_never(on_kafka: OnKafka) -> None:
    async with running(SPEC, on_kafka.settings(Settings, SPEC.name), registry=on_kafka.registry):
        # Due a few seconds after the service is up (its start can take longer than that on a
        # busy machine): the cancel right behind the doomed schedule comes well before then.
        due_at = datetime.now(UTC) + timedelta(seconds=3)
        elapsed, schedule = window(on_kafka, f"wf-timer-{on_kafka.unique}", due_at)
        _, doomed = window(on_kafka, f"wf-cancelled-{on_kafka.unique}", due_at)
        cancel = envelope(
            TimerCancel(timer_id=f"approval_gate:{doomed.workflow_id}:window-0", reason="decided"),
            workflow_id=doomed.workflow_id,
        )
        # The schedule comes twice (a redelivery); the doomed timer is cancelled before it is due.
        await on_kafka.publish(schedule, schedule, doomed, cancel)
        everything_fired = await on_kafka.read(elapsed.event_type, settle_s=2.0)
    # Both were due in the same second: had the cancelled one fired, it would be here by now.
    assert [e.envelope.workflow_id for e in everything_fired] == [schedule.workflow_id]
    [fired] = everything_fired
    assert fired.payload == ApprovalWindowElapsed(approval_id=f"appr-{schedule.workflow_id}", level=0)
    assert fired.envelope.event_id == elapsed.event_id  # the scheduler's event, as it was stored
    # Verbatim: the gate's event as it stated and signed it (the timer service cannot sign),
    # published once it was due, never early.
    assert fired.envelope == elapsed
    [record] = await read_topic(
        on_kafka.bootstrap, [on_kafka.registry.physical_topic(elapsed.event_type)], until=bool
    )
    local_verifier(on_kafka.registry).check(elapsed, record.value, record.headers)
    assert datetime.fromtimestamp(record.timestamp / 1000, UTC) >= due_at
