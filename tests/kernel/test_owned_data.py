"""ErasedAsRetired: a service that names its per-workflow tables has them emptied of the
retired (or erased) workflows' rows, and says how many rows left each."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from chorus.kernel.service import DataRequest, ErasedAsRetired


class Tables(ErasedAsRetired):
    workflow_tables = ("svc.first", "svc.second")


class Connection:
    def __init__(self) -> None:
        self.statements: list[tuple[str, tuple[Any, ...]]] = []

    async def execute(self, sql: str, *args: Any) -> str:
        self.statements.append((sql, args))
        return f"DELETE {len(self.statements)}"


REQUEST = DataRequest("r-1", datetime(2026, 1, 1, tzinfo=timezone.utc))


async def test_retiring_deletes_the_workflows_rows_of_each_named_table() -> None:
    conn = Connection()
    removed = await Tables().retire(conn, ["wf-1", "wf-2"], REQUEST)
    assert removed == {"svc.first": 1, "svc.second": 2}
    assert conn.statements == [
        ("DELETE FROM svc.first WHERE workflow_id = ANY($1::text[])", (["wf-1", "wf-2"],)),
        ("DELETE FROM svc.second WHERE workflow_id = ANY($1::text[])", (["wf-1", "wf-2"],)),
    ]


async def test_erasing_a_subject_retires_its_workflows() -> None:
    conn = Connection()
    assert await Tables().erase(conn, "sha256:x", ["wf-1"], REQUEST) == {"svc.first": 1, "svc.second": 2}


async def test_without_tables_there_is_nothing_it_knows_to_delete() -> None:
    with pytest.raises(NotImplementedError):
        await ErasedAsRetired().retire(Connection(), ["wf-1"], REQUEST)
