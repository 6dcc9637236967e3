"""The source fetcher on real Kafka and PostgreSQL: a fetch request of a report's sources
stage reads the source (the sandbox's) for the report's topic and answers source.fetched
once, even when the request is delivered twice."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from chorus.contracts.research import SourceFetchRequested, SourceRef
from chorus.reference.source_fetcher.config import Settings
from chorus.reference.source_fetcher.service import SPEC
from chorus.runtime.runner import running
from tests.support.kafka import envelope
from tests.support.onkafka import OnKafka, Outside

pytestmark = pytest.mark.integration


async def test_a_fetch_request_reads_the_source_and_answers_once(on_kafka: OnKafka, sandbox: Outside) -> None:
    topic = "durable execution for agents"
    asked = SourceFetchRequested(
        stage_id="sources",
        task="arxiv",
        source=SourceRef(name="arxiv", url=f"{sandbox.url}/sources/arxiv"),
        topic=topic,
        answer_by=datetime.now(timezone.utc) + timedelta(minutes=2),
    )
    sent = envelope(asked, workflow_id=f"wf-fetch-{on_kafka.unique}", workflow_type="research_report")
    async with running(SPEC, on_kafka.settings(Settings, SPEC.name), registry=on_kafka.registry):
        await on_kafka.publish(sent, sent)  # the same request again: a redelivery
        [fetched] = await on_kafka.read("source.fetched", sent.workflow_id, settle_s=2.0)
    answer = fetched.payload
    assert (answer.stage_id, answer.task, answer.source.name) == ("sources", "arxiv", "arxiv")
    assert answer.source.excerpt.startswith("arxiv reports that durable execution")
    assert answer.started_at <= fetched.envelope.occurred_at  # began before it answered
    # The report's topic went as a query parameter. Not counted: the two copies run at once
    # (per_workflow_order=False), so each may read the source (a GET); one answer is kept.
    assert set(sandbox.world.source_topics) == {f"{topic}/arxiv"}
