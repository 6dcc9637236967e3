"""One hop of the 5-step workflow, stage by stage, from the runtime's hop trace.

The flow service records (monotonic ns, stage, event id) at each stage of a hop
(chorus.base.hoptrace) and links each handled event to the events its step
emitted. A hop runs from the fetch of a step's event to the fetch of the next
step's event in the same process; its parts are the step's own stages, then its
child's way out (relay, producer, broker) and back in. ``mark dispatched`` runs
beside the child's way back in, so it is shown but not part of the hop's sum.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from bench.stats import percentile

# (label, from stage, on which event, to stage, on which event); P = handled, C = emitted
SEGMENTS = (
    ("consumer -> pipeline (lane queue)", "fetched", "P", "dispatched", "P"),
    ("decode (JSON + pydantic)", "dispatched", "P", "decoded", "P"),
    ("dedupe + load (inbox, checkpoint)", "decoded", "P", "loaded", "P"),
    ("handler + classify", "loaded", "P", "handled", "P"),
    ("commit (inbox + checkpoint + outbox)", "handled", "P", "committed", "P"),
    ("commit -> relay has the row", "committed", "P", "relay_read", "C"),
    ("producer enqueue", "relay_read", "C", "sent", "C"),
    ("broker ack", "sent", "C", "acked", "C"),
    ("broker -> next fetch", "sent", "C", "fetched", "C"),
)
BESIDE = (("mark dispatched (beside the next hop)", "acked", "C", "marked", "C"),)
SERIAL = {label for label, *_ in SEGMENTS} - {"broker ack"}


def breakdown(traces: list[dict[str, Any]]) -> dict[str, Any]:
    """Per segment p50/p99 (ms) over every complete hop in ``traces`` (the flow worker's
    answers to ``hops``: marks and links)."""
    at: dict[str, dict[str, int]] = defaultdict(dict)
    for ns, stage, event_id in (m for t in traces for m in t["marks"]):
        at[event_id].setdefault(stage, int(ns))  # the first time (a redelivery is not the hop)
    samples: dict[str, list[float]] = defaultdict(list)
    for parent, child in (link for t in traces for link in t["links"]):
        p, c = at.get(parent, {}), at.get(child, {})
        if "fetched" not in p or "fetched" not in c:
            continue  # the last step's child leaves the service; only whole hops count
        ev = {"P": p, "C": c}
        samples["hop (fetch -> next fetch)"].append((c["fetched"] - p["fetched"]) / 1e6)
        for label, a, ea, b, eb in (*SEGMENTS, *BESIDE):
            if a in ev[ea] and b in ev[eb]:
                samples[label].append((ev[eb][b] - ev[ea][a]) / 1e6)
    hops = len(samples.get("hop (fetch -> next fetch)", []))
    rows = {
        label: {"p50": percentile(xs, 50), "p99": percentile(xs, 99), "n": len(xs)}
        for label, xs in samples.items()
    }
    order = ["hop (fetch -> next fetch)", *(s[0] for s in SEGMENTS), *(s[0] for s in BESIDE)]
    return {
        "what": "one hop of bench_flow, one workflow in flight (ms, monotonic clock in the service)",
        "hops": hops,
        "segments": {label: rows[label] for label in order if label in rows},
        "serial_p50_sum_ms": sum(rows[label]["p50"] for label in SERIAL if label in rows),
    }
