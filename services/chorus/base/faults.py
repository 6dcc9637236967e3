"""Named fault-injection points for the reliability suite.

``CHORUS_FAULTS="after_db_commit:3,after_publish:1"``: this process SIGKILLs itself the 3rd
time it passes ``after_db_commit`` and the 1st it passes ``after_publish``. Unset
(production), a point costs one dict lookup. Points: ``after_inbox_insert`` (inside the
handling transaction), ``after_db_commit`` (outcome committed, Kafka offset not yet),
``after_publish`` (outbox rows published, not yet marked), ``mid_external_call`` (an
external request in flight); an agent loop's ``after_model_turn``, ``after_tool_call``
(kept in the checkpoint) and ``mid_tool_call`` (the tool answered, its result not kept).
"""

from __future__ import annotations

import os
import signal
import sys

_budget: dict[str, int] = {}
for _item in filter(None, os.environ.get("CHORUS_FAULTS", "").split(",")):
    _name, _, _count = _item.partition(":")
    _budget[_name.strip()] = int(_count or 1)


def fault_point(name: str) -> None:
    if not _budget or name not in _budget:
        return
    _budget[name] -= 1
    if _budget[name] == 0:
        sys.stderr.write(f"chorus fault injection: SIGKILL at {name}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
