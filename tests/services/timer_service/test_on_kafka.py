"""The timer service on real Kafka and PostgreSQL: a timer fires its event onto the target
topic once, when it is due; a cancelled one never fires."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from chorus.contracts.approvals import ApprovalWindowElapsed
from chorus.contracts.envelope import Envelope
from chorus.contracts.platform import TimerCancel, TimerReschedule, TimerSchedule
from chorus.kernel.outbox import fire_target
from chorus.platform.timer_service.config import Settings
from chorus.platform.timer_service.service import SPEC
from chorus.runtime.runner import running
from tests.support.kafka import (
    envelope,
    local_signer,
    local_verifier,
    publish,
    read_topic,
    refused_by,
    stated_by,
)
from tests.support.onkafka import OnKafka

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
    return elapsed, stated_by(envelope(command, workflow_id=workflow_id), "approval_gate")


async def test_a_due_timer_fires_its_event_once_and_a_cancelled_one_never(on_kafka: OnKafka) -> None:
    async with running(SPEC, on_kafka.settings(Settings, SPEC.name), registry=on_kafka.registry):
        # Due a few seconds after the service is up (its start can take longer than that on a
        # busy machine): the cancel right behind the doomed schedule comes well before then.
        due_at = datetime.now(timezone.utc) + timedelta(seconds=3)
        elapsed, schedule = window(on_kafka, f"wf-timer-{on_kafka.unique}", due_at)
        _, doomed = window(on_kafka, f"wf-cancelled-{on_kafka.unique}", due_at)
        cancel = stated_by(
            envelope(
                TimerCancel(timer_id=f"approval_gate:{doomed.workflow_id}:window-0", reason="decided"),
                workflow_id=doomed.workflow_id,
            ),
            "approval_gate",
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
    assert datetime.fromtimestamp(record.timestamp / 1000, timezone.utc) >= due_at


async def test_another_service_cannot_cancel_move_or_take_first_a_timer_of_the_gates(
    on_kafka: OnKafka,
) -> None:
    """Timer ids are predictable. The source fetcher (signing as itself) cancels and moves
    the gate's window and schedules a timer under the id of the gate's next one; a forger
    claims to be the gate without its signature. Each command is refused as unauthorized,
    the gate's window fires on time, and the gate's own next timer is its own."""
    unique = on_kafka.unique
    due_at = datetime.now(timezone.utc) + timedelta(seconds=4)
    elapsed, schedule = window(on_kafka, f"wf-owned-{unique}", due_at)
    timer_id = f"approval_gate:{schedule.workflow_id}:window-0"
    _, taken = window(on_kafka, f"wf-taken-{unique}", due_at)

    def command(payload: object, workflow_id: str, who: str) -> Envelope:
        return stated_by(envelope(payload, workflow_id=workflow_id), who)  # type: ignore[arg-type]

    by_fetcher = [
        command(TimerCancel(timer_id=timer_id, reason="x"), schedule.workflow_id, "source_fetcher"),
        command(
            TimerReschedule(timer_id=timer_id, due_at=due_at + timedelta(days=30)),
            schedule.workflow_id,
            "source_fetcher",
        ),
        command(TimerSchedule.model_validate(taken.payload), taken.workflow_id, "source_fetcher"),
    ]
    unsigned = command(TimerCancel(timer_id=timer_id, reason="x"), schedule.workflow_id, "approval_gate")
    topic = on_kafka.registry.physical_topic("timer.cancel")
    async with running(SPEC, on_kafka.settings(Settings, SPEC.name), registry=on_kafka.registry):
        await on_kafka.publish(schedule)
        await on_kafka.publish(*by_fetcher)
        await publish(on_kafka.bootstrap, topic, [unsigned], sign=False)
        for refused in (*by_fetcher, unsigned):
            await refused_by(on_kafka.bootstrap, on_kafka.registry, refused, {"timer_service"})
        await on_kafka.publish(taken)  # the gate's own, after the fetcher tried to take its id
        fired = await on_kafka.read(elapsed.event_type, count=2, settle_s=1.0)
    assert sorted(e.envelope.workflow_id for e in fired) == sorted([schedule.workflow_id, taken.workflow_id])
    assert all(datetime.fromtimestamp(0, timezone.utc) < e.envelope.occurred_at <= due_at for e in fired)
