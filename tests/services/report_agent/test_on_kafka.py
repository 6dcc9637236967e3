"""The report agent on real Kafka and PostgreSQL: a report request opens the sources stage
(one fetch per source and the stage's deadline with the timer service, once, even when the
request is delivered twice); when every source has answered, the draft is written by the
language model (the sandbox's) and an editor is asked, and the deadline is cancelled."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from chorus.contracts.research import GatheredSource, ReportRequested, SourceFetched, SourceRef
from chorus.reference.report_agent.config import Settings
from chorus.reference.report_agent.service import SPEC
from chorus.runtime.runner import running
from tests.support.kafka import envelope
from tests.support.onkafka import OnKafka, Outside

pytestmark = pytest.mark.integration

EXCERPTS = {"alpha": "Qubits are fragile.", "beta": "Error correction is the key."}


async def test_a_report_request_opens_the_sources_stage_and_drafts_when_all_answered(
    on_kafka: OnKafka, sandbox: Outside
) -> None:
    workflow_id = f"wf-report-{on_kafka.unique}"
    request = ReportRequested(
        topic="the state of quantum computing",
        sources=[SourceRef(name=name, url=f"https://sources.example.test/{name}") for name in EXCERPTS],
        min_words=20,
    )
    sent = envelope(request, workflow_id=workflow_id, workflow_type="research_report")
    settings = on_kafka.settings(Settings, SPEC.name, llm_base_url=f"{sandbox.url}/v1")
    async with running(SPEC, settings, registry=on_kafka.registry):
        await on_kafka.publish(sent, sent)  # the same request again: a redelivery
        asked = await on_kafka.read("source.fetch_requested", workflow_id, count=2, settle_s=2.0)
        [deadline] = await on_kafka.read("timer.schedule", workflow_id)
        # The source fetchers answer.
        await on_kafka.publish(
            *(
                envelope(
                    SourceFetched(
                        stage_id="sources",
                        task=name,
                        source=GatheredSource(name=name, excerpt=excerpt),
                        started_at=datetime.now(timezone.utc),
                    ),
                    workflow_id=workflow_id,
                    workflow_type="research_report",
                )
                for name, excerpt in EXCERPTS.items()
            )
        )
        [drafted] = await on_kafka.read("report.drafted", workflow_id)
        [approval] = await on_kafka.read("approval.requested", workflow_id)
        [stopped] = await on_kafka.read("timer.cancel", workflow_id)
    assert sorted(a.payload.task for a in asked) == ["alpha", "beta"]  # each source once
    answer_by = asked[0].payload.answer_by
    assert deadline.payload.timer_id == f"report_agent:{workflow_id}:stage:sources"
    assert deadline.payload.due_at == answer_by
    assert deadline.payload.fire.value["event_type"] == "stage.deadline_reached"
    draft = drafted.payload
    assert draft.sources_used == [GatheredSource(name=n, excerpt=e) for n, e in EXCERPTS.items()]
    assert (draft.citations, draft.sources_missing, draft.revision) == (["alpha", "beta"], [], 1)
    assert sandbox.world.llm_calls == {"draft_report": 1}
    assert (approval.payload.requested_by, [s.tier for s in approval.payload.chain]) == (
        "report_agent",
        ["editor"],
    )
    assert stopped.payload.timer_id == deadline.payload.timer_id  # every source answered first
