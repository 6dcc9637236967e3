"""The source fetcher answers each fetch with the source, a refusal, or too late."""

from __future__ import annotations

from datetime import timedelta

import pytest

from chorus.base.errors import TransientError
from chorus.contracts.research import SourceFetched, SourceFetchFailed, SourceFetchRequested, SourceRef
from chorus.reference.source_fetcher.bootstrap import Deps
from chorus.reference.source_fetcher.service import SPEC
from chorus.testing import WorkflowHarness
from tests.support.fakes import FakeSources


@pytest.fixture
def sources() -> FakeSources:
    return FakeSources({"alpha": "Qubits sind fragil."}, failing=frozenset({"beta"}))


@pytest.fixture
def fetcher(sources: FakeSources) -> WorkflowHarness:
    return WorkflowHarness(SPEC, Deps(sources))


def asked(harness: WorkflowHarness, name: str, within_s: float = 60) -> SourceFetchRequested:
    return SourceFetchRequested(
        stage_id="sources",
        task=name,
        source=SourceRef(name=name, url=f"https://sources.example.test/{name}"),
        topic="量子計算",
        answer_by=harness.clock.now() + timedelta(seconds=within_s),
    )


async def test_a_source_that_answers_is_fetched(fetcher: WorkflowHarness) -> None:
    step = await fetcher.deliver(asked(fetcher, "alpha"), "wf-1")
    got = step.first(SourceFetched)
    assert (got.task, got.source.excerpt, got.started_at) == (
        "alpha",
        "Qubits sind fragil.",
        fetcher.clock.now(),
    )


async def test_a_source_that_refuses_is_reported_failed_not_retried(fetcher: WorkflowHarness) -> None:
    step = await fetcher.deliver(asked(fetcher, "beta"), "wf-2")
    assert "404" in step.first(SourceFetchFailed).reason


async def test_a_source_that_is_down_is_retried_and_a_retry_after_the_deadline_fetches_nothing(
    fetcher: WorkflowHarness, sources: FakeSources
) -> None:
    sources.down = frozenset({"alpha"})
    request = asked(fetcher, "alpha", within_s=60)
    with pytest.raises(TransientError):
        await fetcher.deliver(request, "wf-3")
    fetcher.clock.advance(61)
    step = await fetcher.deliver(request, "wf-3", attempt=2)
    assert "deadline" in step.first(SourceFetchFailed).reason
    assert sources.calls == ["alpha"]
