"""Named fault-injection points for the reliability suite.

``CHORUS_FAULTS="after_db_commit:3,after_publish:1"``: this process SIGKILLs itself the 3rd
time it passes ``after_db_commit`` and the 1st it passes ``after_publish``. Unset
(production), a point costs one dict lookup. Points: ``after_inbox_insert`` (inside the
handling transaction), ``after_db_commit`` (outcome committed, Kafka offset not yet),
``after_publish`` (outbox rows published, not yet marked), ``mid_external_call`` (an
external request in flight); an agent loop's ``after_model_turn``, ``after_tool_call``
(kept in the checkpoint) and ``mid_tool_call`` (the tool answered, its result not kept).
``<point>:<n>:stop`` SIGSTOPs it there instead (the suite partitions it there, then SIGCONTs).
"""

from __future__ import annotations

import os
import signal
import sys

_armed: dict[str, tuple[int, signal.Signals]] = {}
for _item in filter(None, os.environ.get("CHORUS_FAULTS", "").split(",")):
    _name, _count, _action = [*_item.split(":"), "", ""][:3]
    _armed[_name.strip()] = (int(_count or 1), signal.SIGSTOP if _action == "stop" else signal.SIGKILL)


def fault_point(name: str) -> None:
    if name not in _armed:
        return
    left, sig = _armed[name] = (_armed[name][0] - 1, _armed[name][1])
    if left == 0:
        sys.stderr.write(f"chorus fault injection: {sig.name} at {name}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), sig)
