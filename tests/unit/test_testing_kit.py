"""The testing kit refuses what the runtime refuses, and stores state as the runtime does."""

from __future__ import annotations

import httpx
import pytest
from pydantic import BaseModel

from chorus.base.errors import PersistentError
from chorus.kernel.codec import Event
from chorus.kernel.service import Context, On, Outcome, ServiceSpec
from chorus.testing import WorkflowHarness
from chorus_contracts.lifecycle import WorkflowEnded, WorkflowStarted
from gateway.adapters.readmodel import ReadModel, ReadModelUnavailableError


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
        return httpx.Response(200, json={"workflow_id": request.url.path.rsplit("/", 1)[-1]})

    reads = ReadModel(httpx.AsyncClient(transport=httpx.MockTransport(answer)), "http://projector")
    with pytest.raises(ReadModelUnavailableError, match="ReadError"):
        await reads.workflow("wf-2", for_whom="alice")
    failures = iter([httpx.ReadError("")])
    assert await reads.workflow("wf-2", for_whom="alice") == {"workflow_id": "wf-2"}
