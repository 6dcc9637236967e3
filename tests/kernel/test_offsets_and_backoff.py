"""Pure pieces of the runtime: commit offsets, backoff windows, the dead-letter guard."""

from __future__ import annotations

import random

from chorus.kernel.backoff import backoff_cap, full_jitter
from chorus.kernel.guard import DeadLetterGuard
from chorus.kernel.offsets import PartitionOffsets


def test_commit_offset_stops_at_the_first_unfinished_record() -> None:
    offsets = PartitionOffsets()
    for o in (10, 11, 12, 13):
        offsets.track(o)
    offsets.finish(12)
    offsets.finish(13)
    assert offsets.to_commit() is None  # 10 still runs: committing 14 would lose it on a crash
    offsets.finish(10)
    assert offsets.to_commit() == 11
    offsets.committed(11)
    assert offsets.to_commit() is None
    offsets.finish(11)
    assert offsets.to_commit() == 14
    assert offsets.in_flight == 0


def test_backoff_window_doubles_up_to_the_cap_and_jitter_stays_inside() -> None:
    assert [backoff_cap(n, 1.0, 10.0) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    rng = random.Random(7)
    for n in range(1, 8):
        draws = [full_jitter(n, 1.0, 10.0, rng) for _ in range(200)]
        assert all(0 <= d <= backoff_cap(n, 1.0, 10.0) for d in draws)
        assert max(draws) > 0.8 * backoff_cap(n, 1.0, 10.0)  # uses the whole window


def bug(guard: DeadLetterGuard, n: int = 0, error: str = "KeyError", event: str = "invoice.received") -> bool:
    """One dead letter the code caused, in workflow ``wf-n``."""
    return guard.record_dead_letter(
        error_class=error, event_type=event, workflow_id=f"wf-{n}", caused_by_input=False
    )


def bad_input(guard: DeadLetterGuard, n: int = 0) -> bool:
    return guard.record_dead_letter(
        error_class="RefusedByStoreError",
        event_type="invoice.received",
        workflow_id=f"wf-{n}",
        caused_by_input=True,
    )


def test_guard_trips_on_the_same_bug_across_workflows_and_resets_on_success() -> None:
    guard = DeadLetterGuard(max_consecutive=3, window=100)
    assert not any(bug(guard, n) for n in range(3))
    guard.record_success()
    assert not bug(guard, 10)
    for n in range(11, 13):
        bug(guard, n)
    assert bug(guard, 13)
    assert "4 dead letters in a row raising KeyError on invoice.received" in guard.describe()


def test_guard_never_counts_dead_letters_caused_by_input() -> None:
    guard = DeadLetterGuard(max_consecutive=3, window=10)
    assert not any(bad_input(guard, n) for n in range(500))
    assert guard.consecutive == 0


def test_guard_needs_one_exception_class_from_one_event_type() -> None:
    guard = DeadLetterGuard(max_consecutive=3, window=1000)
    errors = ["KeyError", "ValueError"]
    assert not any(bug(guard, n, error=errors[n % 2]) for n in range(50))
    assert not any(bug(guard, n, event=f"type.{n % 2}") for n in range(50))


def test_guard_ignores_one_workflow_failing_the_same_way_again_and_again() -> None:
    guard = DeadLetterGuard(max_consecutive=3, window=1000)
    assert not any(bug(guard, 7) for _ in range(50))


def test_guard_trips_on_ratio_when_dead_letters_dominate() -> None:
    guard = DeadLetterGuard(max_consecutive=1000, max_ratio=0.5, window=10)
    for i in range(9):
        if i % 3 == 0:
            guard.record_success()
        else:
            bug(guard, i)
    assert bug(guard, 9)  # 7 of 10 were dead letters
