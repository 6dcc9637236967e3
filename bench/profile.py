"""Top frames of a py-spy raw profile (collapsed stacks: ``frame;frame;... count``)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

# Stacks of process start and stop are not the hop; imports dominate them.
_EXCLUDE = ("_find_and_load", "ServiceRunner.start", "ServiceRunner.stop", "amain")
_START_ONLY = "(bench/worker.py"

# Where a sample's time goes, by the first of these found walking down from the root.
CATEGORIES = (
    ("handler", "on_durable_ping"),
    ("decode (json + pydantic)", "decode ("),
    ("outcome -> envelopes + encode", "Messages.outcome"),
    ("tracing span", "handling_span"),
    ("load: pool acquire + SELECT inbox/state", "ServiceStore.load"),
    ("commit: INSERT inbox, UPSERT state, INSERT outbox", "ServiceStore."),
    ("commit: BEGIN/COMMIT + pool acquire/release", "StepCommitter."),
    ("pool acquire/release (outside commit)", "pool.py"),
    ("handler call and classification", "HandlerCall."),
    ("pipeline other (log context, metrics, ...)", "Pipeline."),
    ("outbox relay", "OutboxRelay."),
    ("poll loop (KafkaEdge)", "KafkaEdge."),
    ("dispatcher", "Dispatcher."),
    ("aiokafka", "aiokafka"),
    ("asyncpg", "asyncpg"),
)


def _short(frame: str) -> str:
    """``func (path/to/file.py:12)`` -> ``func (to/file.py)``."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({'/'.join(path.split('/')[-2:])})"


# Frames every stack shares (interpreter start, the event loop's own dispatch):
# they say nothing about the hop, so the inclusive list leaves them out.
_BOILERPLATE = ("runpy", "asyncio/runners.py", "bench/worker.py", "base_events.py", "events.py")


def top_frames(path: Path, limit: int = 15) -> dict[str, Any]:
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    categories: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        if any(x in stack for x in _EXCLUDE):
            continue
        n = int(count)
        total += n
        own[_short(frames[-1])] += n
        for name in {_short(f) for f in frames}:
            if not any(b in name for b in _BOILERPLATE):
                inclusive[name] += n
        for label, needle in CATEGORIES:
            if needle in stack:
                categories[label] += n
                break
        else:
            categories["event loop / other"] += n
    if total == 0:
        raise RuntimeError(f"profile {path} has no samples of the hop")

    def share(counter: Counter[str]) -> list[dict[str, Any]]:
        return [{"frame": k, "samples": v, "share": v / total} for k, v in counter.most_common(limit)]

    return {
        "samples": total,
        "self": share(own),
        "inclusive": share(inclusive),
        "categories": share(categories),
    }
