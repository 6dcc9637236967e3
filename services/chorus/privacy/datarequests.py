"""Erasure and retention in one service: what it does when the audit projector asks.

The projector decides (an operator asked to erase a subject; its janitor found workflows
past their lifetime) and publishes ``subject.erasure_requested`` / ``workflows.retired``
on chorus.data. Every service's runtime reads them and removes what it holds in its own
schema, in one transaction with its inbox row (a redelivered request changes nothing)
and its confirmation, ``data.removed``, which the projector records for the operator.
So no service ever writes another's tables, and a service that is down catches up
from the topic when it starts.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from chorus.base.logs import fields
from chorus.contracts.envelope import Envelope
from chorus.contracts.platform import DataRemoved, SubjectErasureRequested, WorkflowsRetired
from chorus.kernel.answering import Answering
from chorus.kernel.chain import Done, Finish, Item
from chorus.kernel.service import DataRequest, OwnedData
from chorus.kernel.steps.letters import Letters
from chorus.kernel.steps.route import uuid_or_dead_letter
from chorus.privacy.crypto import Sealer
from chorus.privacy.store import DataStore

log = logging.getLogger("chorus.datarequests")

REQUESTS: dict[str, int] = {
    SubjectErasureRequested.event_type: SubjectErasureRequested.version,
    WorkflowsRetired.event_type: WorkflowsRetired.version,
}
"""The requests every runtime answers (event type -> version its code reads)."""


@dataclass
class DataRequests:
    via: Answering
    store: DataStore
    owned: Sequence[OwnedData] = ()
    """The service's own per-workflow tables (ServiceSpec.owned_data)."""
    compensates: bool = False
    """The service handles ``workflow.ended``: an erased subject's running workflows keep
    their state until their end (``erased``) comes, so that it can compensate."""

    async def erase(self, envelope: Envelope, request: SubjectErasureRequested) -> None:
        async with self.via.transaction() as (conn, tx):
            if not await self.via.claim(conn, envelope):
                return
            rows, workflows = await self.store.erase_subject(
                conn, request.subject_hash, request.workflow_ids, keep_running=self.compensates
            )
            request_id = request.erasure_id if request.parts == 1 else f"{request.erasure_id}/{request.part}"
            asked = DataRequest(request_id, self.via.clock.now())
            for owned in self.owned:  # the service's own tables, in the same transaction
                rows = _merged(
                    rows, await owned.erase(conn, request.subject_hash, request.workflow_ids, asked)
                )
            await tx.publish(self._confirmation(envelope, "erasure", request_id, rows, workflows))

    async def retire(self, envelope: Envelope, request: WorkflowsRetired, run_id: uuid.UUID) -> None:
        async with self.via.transaction() as (conn, tx):
            if not await self.via.claim(conn, envelope):
                return
            rows, workflows = await self.store.retire(
                conn,
                request.workflow_ids,
                run_id=run_id,
                archive=request.mode == "archive",
                now=self.via.clock.now(),
            )
            request_id = f"{request.run_id}/{request.batch}"
            asked = DataRequest(request_id, self.via.clock.now())
            for owned in self.owned:  # the service's own tables, in the same transaction
                rows = _merged(rows, await owned.retire(conn, request.workflow_ids, asked))
            await tx.publish(self._confirmation(envelope, "retirement", request_id, rows, workflows))

    def _confirmation(
        self,
        envelope: Envelope,
        request: Literal["erasure", "retirement"],
        request_id: str,
        rows: dict[str, int],
        workflows: int,
    ) -> Envelope:
        log.info(
            "%s %s: removed %d row(s) of %d workflow(s)",
            request,
            request_id,
            sum(rows.values()),
            workflows,
            extra=fields(rows=rows),
        )
        confirmation = DataRemoved(
            request=request,
            request_id=request_id,
            service=self.via.producer.service,
            workflows=workflows,
            rows=rows,
        )
        return self.via.answer(envelope, confirmation, position="data.removed")


def _merged(rows: dict[str, int], removed: dict[str, int]) -> dict[str, int]:
    """``rows`` and the tables where ``removed`` counts something."""
    return {**rows, **{table: n for table, n in removed.items() if n}}


@dataclass
class Erasure:
    """``subject.erasure_requested``: every service removes what it holds of the subject,
    and forgets the subject's keys it cached."""

    requests: DataRequests
    sealer: Sealer | None

    def addressed(self, item: Item) -> bool:
        return True

    async def __call__(self, item: Item) -> Done:
        request = item.decoded.payload
        assert isinstance(request, SubjectErasureRequested)
        await self.requests.erase(item.decoded.envelope, request)
        if self.sealer is not None:
            self.sealer.forget(request.subject_hash, request.workflow_ids)
        return Done(Finish.CONTROL)


@dataclass
class Retirement:
    """``workflows.retired``: every service removes the rows of workflows past their lifetime."""

    requests: DataRequests
    letters: Letters

    def addressed(self, item: Item) -> bool:
        return True

    async def __call__(self, item: Item) -> Done:
        request = item.decoded.payload
        assert isinstance(request, WorkflowsRetired)
        run_id = await uuid_or_dead_letter(self.letters, item, request.run_id, "/payload/run_id")
        if run_id is None:
            return Done(Finish.DEAD_LETTERED)
        await self.requests.retire(item.decoded.envelope, request, run_id)
        return Done(Finish.CONTROL)
