"""The testing kit refuses what the runtime refuses, and stores state as the runtime does."""

from __future__ import annotations

import json

import httpx
import pytest
from pydantic import BaseModel

from chorus.base.errors import PersistentError
from chorus.contracts.lifecycle import WorkflowEnded, WorkflowStarted
from chorus.kernel.codec import Event
from chorus.kernel.service import Context, On, Outcome, ServiceSpec
from chorus.platform.gateway.adapters.readmodel import ReadModel, ReadModelUnavailableError
from chorus.testing import WorkflowHarness


class Seen(BaseModel):
    names: list[str] = []


async def records(event: Event[WorkflowStarted], state: Seen | None, ctx: Context[None]) -> Outcome[Seen]:
    seen = state or Seen()
    seen.names.append(event.payload.submitted_by)  # a mutation the runtime would not keep
    return Outcome(state=seen, emit=[WorkflowEnded(outcome="completed", ended_by="t")])


def spec(produces: frozenset[str]) -> ServiceSpec[Seen, None]:
    return ServiceSpec(
        name="t", version="0", handlers=[On(WorkflowStarted, records)], produces=produces, state=Seen
    )


async def test_an_undeclared_event_fails_in_the_harness_as_it_would_in_the_runtime() -> None:
    with pytest.raises(PersistentError, match="does not declare"):
        await WorkflowHarness(spec(frozenset())).deliver(
            WorkflowStarted(submitted_by="a", start_event_type="x")
        )


async def test_the_next_event_sees_the_stored_state_not_the_handlers_object() -> None:
    harness = WorkflowHarness(spec(frozenset({"workflow.ended"})))
    first = await harness.deliver(WorkflowStarted(submitted_by="a", start_event_type="x"), "wf")
    await harness.deliver(WorkflowStarted(submitted_by="b", start_event_type="x"), "wf")
    assert harness.state("wf").names == ["a", "b"]
    assert first.outcome.state is not harness.state("wf")


def read_model(status: int, content_type: str) -> ReadModel:
    def answer(_: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers={"content-type": content_type}, content=b"{}")

    return ReadModel(httpx.AsyncClient(transport=httpx.MockTransport(answer)), "http://projector")


async def test_the_gateway_reads_unknown_only_when_the_projector_says_so() -> None:
    assert await read_model(404, "application/problem+json").workflow("wf-1", for_whom="alice") is None
    with pytest.raises(ReadModelUnavailableError):  # a 404 from something else entirely
        await read_model(404, "text/plain").workflow("wf-1", for_whom="alice")
    with pytest.raises(ReadModelUnavailableError):
        await read_model(500, "application/problem+json").approval("a-1", for_whom="alice")


async def test_the_gateway_sends_a_read_again_once_when_the_projector_closed_a_pooled_connection() -> None:
    """The projector closing an idle keep-alive connection as the gateway reuses it is not
    an outage: a GET is safe to send again. Twice in a row is."""
    failures = iter([httpx.ReadError(""), httpx.ReadError("")])

    def answer(request: httpx.Request) -> httpx.Response:
        if failure := next(failures, None):
            raise failure
        return httpx.Response(200, json=status_view(request.url.path.rsplit("/", 1)[-1]))

    reads = ReadModel(httpx.AsyncClient(transport=httpx.MockTransport(answer)), "http://projector")
    with pytest.raises(ReadModelUnavailableError, match="ReadError"):
        await reads.workflow("wf-2", for_whom="alice")
    failures = iter([httpx.ReadError("")])
    found = await reads.workflow("wf-2", for_whom="alice")
    assert found is not None and found.workflow_id == "wf-2" and found.status == "running"


def status_view(workflow_id: str) -> dict[str, object]:
    """A workflow's status as the audit projector's read API answers it."""
    return {
        "workflow_id": workflow_id,
        "workflow_type": "procurement",
        "status": "running",
        "stage": "invoice.received",
        "waiting_for": None,
        "waiting_until": None,
        "attempts": 0,
        "outcome": None,
        "outcome_reason": None,
        "result": None,
        "started_at": "2026-03-01T10:00:00Z",
        "ended_at": None,
        "duration_s": None,
        "last_event_at": "2026-03-01T10:00:00Z",
        "events": 2,
        "subject_ref": None,
        "pending_approval": None,
    }


async def test_an_answer_the_projector_does_not_publish_is_unavailable_naming_the_field() -> None:
    """A malformed answer (a field missing, of the wrong type, not JSON at all) is the read
    model being unavailable (a 503 naming what was wrong), never a KeyError in a route."""
    broken = {k: v for k, v in status_view("wf-3").items() if k != "status"}
    for body in (json.dumps(broken).encode(), json.dumps({**broken, "status": 7}).encode(), b"<html>"):

        def answer(_: httpx.Request, body: bytes = body) -> httpx.Response:
            return httpx.Response(200, headers={"content-type": "application/json"}, content=body)

        reads = ReadModel(httpx.AsyncClient(transport=httpx.MockTransport(answer)), "http://projector")
        with pytest.raises(ReadModelUnavailableError, match="not its WorkflowStatusView"):
            await reads.workflow("wf-3", for_whom="alice")
