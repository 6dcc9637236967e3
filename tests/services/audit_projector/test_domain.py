"""The audit projector's pure rules: audit rows, the status fold, redaction, retention."""

from __future__ import annotations

import random
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from chorus.contracts.base import CATALOG, EventModel
from chorus.contracts.envelope import Envelope
from chorus.contracts.registry import default_registry
from chorus.platform.audit_projector.domain import (
    ATTENTION,
    ERASED,
    HUMAN_REVIEW,
    RUNNING,
    WAITING,
    AuditEntry,
    WorkflowFacts,
    approval_state,
    attributes_of,
    audit_entry,
    derive,
    fold,
    is_expired,
    redact_entry,
    redact_facts,
)
from chorus.platform.audit_projector.handlers import search_of
from chorus.platform.audit_projector.service import SPEC
from chorus.privacy.crypto import subject_hash
from chorus.privacy.datarequests import REQUESTS

REGISTRY = default_registry()
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
WF = "wf-unit-1"


def ev(
    event_type: str,
    minute: float,
    *,
    subject: str | None = "subject:unit-7",
    workflow_type: str = "procurement",
    **payload: Any,
) -> tuple[AuditEntry, EventModel]:
    """An event of ``event_type`` at T0 + ``minute``: the registry's example payload
    with ``payload`` overrides, in a fresh envelope of workflow WF."""
    version = REGISTRY.latest_version(event_type)  # what a consumer reads (older ones upcast)
    example = REGISTRY.examples[(event_type, version)][0].body
    body = {**example["payload"], **payload}
    model = CATALOG[(event_type, version)].model_validate(body)
    envelope = Envelope.model_validate(
        {
            **example,
            "event_id": str(uuid.uuid4()),
            "occurred_at": (T0 + timedelta(minutes=minute)).isoformat(),
            "workflow_id": WF,
            "workflow_type": workflow_type,
            "subject_ref": subject,
            "payload": model.model_dump(mode="json"),
        }
    )
    return audit_entry(envelope, model), model


def fold_all(events: list[tuple[AuditEntry, EventModel]]) -> WorkflowFacts:
    facts: WorkflowFacts | None = None
    for entry, model in events:
        facts = fold(facts, entry, model)
    assert facts is not None
    return facts


def procurement_run() -> list[tuple[AuditEntry, EventModel]]:
    return [
        ev("workflow.started", 0),
        ev("invoice.received", 1),
        ev("invoice.validated", 2),
        ev("budget.reserved", 3),
        ev("approval.requested", 4, approval_id="a1"),
        ev("approval.window_elapsed", 484, approval_id="a1", level=0),
        ev(
            "approval.escalated",
            485,
            approval_id="a1",
            level=1,
            from_tier="manager",
            to_tier="director",
            waiting_until=(T0 + timedelta(hours=20)).isoformat(),
        ),
        ev("approval.decision_submitted", 500, approval_id="a1", reviewer="dana"),
        ev("approval.decided", 501, approval_id="a1", decision="approve", decided_by="dana"),
        ev("payment.issued", 502),
        ev("workflow.ended", 503, outcome="completed"),
        ev("submitter.notified", 504),
    ]


# -- what the projector claims -----------------------------------------------------------------


def test_claims_exactly_the_event_types_of_the_topics_that_list_it_as_consumer() -> None:
    listed = {
        e.type
        for spec in REGISTRY.topics.values()
        if "audit_projector" in spec.consumers
        for e in spec.events
        if e.type not in REQUESTS  # erasure and retention requests: every runtime answers them
    }
    assert set(SPEC.consumes()) == listed
    assert len(SPEC.handlers) == len(listed)  # one On per event type


# -- audit rows --------------------------------------------------------------------------------


def test_audit_row_carries_decision_actor_and_external_calls() -> None:
    decided, _ = ev("approval.decided", 1, decision="reject", decided_by="dana")
    submitted, _ = ev("approval.decision_submitted", 1, decision="approve", reviewer="lee")
    rejected, _ = ev("invoice.rejected", 1)
    budget, _ = ev("budget.rejected", 1)
    paid, _ = ev("payment.issued", 1, provider_reference="PRV-991")
    delivered, _ = ev("report.delivered", 1, workflow_type="research_report", delivered_to="https://x.test/r")
    started, _ = ev("workflow.started", 0)
    told, _ = ev("submitter.notified", 2, channel="webhook", notice="waiting", outcome=None, approval_id="a1")
    assert (decided.decision, decided.actor) == ("reject", "dana")
    assert (submitted.decision, submitted.actor) == ("approve", "lee")
    assert rejected.decision == budget.decision == "reject"
    assert paid.external_call == "payment provider: PRV-991"
    assert delivered.external_call is not None and "https://x.test/r" in delivered.external_call
    assert told.external_call == "webhook to the submitter (waiting)"
    assert (started.decision, started.actor, started.external_call) == (None, None, None)
    assert started.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert started.payload["submitted_by"]  # the payload as sent


def test_redacted_row_keeps_what_happened_but_no_personal_data() -> None:
    entry, _ = ev("approval.decided", 1, decision="approve", decided_by="dana")
    redacted = redact_entry(entry)
    assert redacted.payload == ERASED
    assert (redacted.actor, redacted.external_call, redacted.subject_ref) == (None, None, None)
    assert (redacted.event_type, redacted.decision, redacted.occurred_at) == (
        "approval.decided",
        "approve",
        entry.occurred_at,
    )


def test_subject_hash_is_stable_and_does_not_contain_the_reference() -> None:
    assert subject_hash("subject:unit-7") == subject_hash("subject:unit-7")
    assert subject_hash("subject:unit-7") != subject_hash("subject:unit-8")
    assert "unit-7" not in subject_hash("subject:unit-7")


# -- status rules --------------------------------------------------------------------------------


def test_approval_request_waits_for_the_first_tier_until_its_window_ends() -> None:
    run = procurement_run()[:5]
    view = derive(fold_all(run))
    assert view.status == WAITING
    assert view.waiting_for == "approval by manager"
    assert view.waiting_until == T0 + timedelta(minutes=4, seconds=28800)
    assert view.pending_approval is not None
    assert (view.pending_approval.approval_id, view.pending_approval.tier, view.pending_approval.level) == (
        "a1",
        "manager",
        0,
    )
    context = view.pending_approval.context
    assert isinstance(context, dict) and context["summary"]  # in clear here: an unsealed event
    assert view.stage == "approval.requested"


def test_escalation_moves_the_wait_to_the_next_tier_and_its_deadline() -> None:
    view = derive(fold_all(procurement_run()[:7]))
    assert view.status == WAITING
    assert view.waiting_for == "approval by director"
    assert view.waiting_until == T0 + timedelta(hours=20)
    assert view.pending_approval is not None and view.pending_approval.level == 1


def test_a_submitted_decision_still_waits_and_the_final_one_resumes() -> None:
    run = procurement_run()
    assert derive(fold_all(run[:8])).status == WAITING
    after = derive(fold_all(run[:9]))
    assert (after.status, after.waiting_for, after.pending_approval) == (RUNNING, None, None)


def test_a_completed_run_reports_outcome_result_and_duration() -> None:
    view = derive(fold_all(procurement_run()))
    assert view.status == "completed"
    assert view.outcome == "completed"
    assert view.result == {"payment_id": "pay-0001", "amount_cents": 124000}
    assert (view.started_at, view.ended_at) == (T0, T0 + timedelta(minutes=503))
    assert view.duration_s == 503 * 60
    # The submitter being told, after the end, is in the log but is no stage of the work.
    assert view.stage == "workflow.ended"
    assert view.last_event_at == T0 + timedelta(minutes=504)
    assert view.events == 12
    assert view.workflow_type == "procurement"
    assert view.subject_ref == "subject:unit-7"


def test_an_approval_gate_is_pending_then_decided_or_closed_by_the_end() -> None:
    run = procurement_run()
    pending = approval_state(fold_all(run[:7]), "a1")
    assert pending is not None
    assert (pending.status, pending.tier, pending.level) == ("pending", "director", 1)
    assert pending.waiting_until == T0 + timedelta(hours=20)
    decided = approval_state(fold_all(run[:9]), "a1")
    assert decided is not None
    assert (decided.status, decided.decision) == ("decided", "approve")
    assert decided.decided_at == T0 + timedelta(minutes=501)
    never = fold_all([*run[:5], ev("workflow.ended", 30, outcome="cancelled")])
    closed = approval_state(never, "a1")
    assert closed is not None and closed.status == "closed"
    assert approval_state(never, "a-unknown") is None


@pytest.mark.parametrize("outcome", ["completed", "rejected", "failed", "timed_out"])
def test_a_terminal_status_is_never_left_whatever_arrives_later(outcome: str) -> None:
    facts = fold_all([ev("invoice.received", 0), ev("workflow.ended", 5, outcome=outcome)])
    for late in (
        ev("approval.requested", 9, approval_id="late"),
        ev("event.dead_lettered", 10),
        ev("review.requested", 11),
        ev("invoice.validated", 12),
    ):
        facts = fold(facts, *late)
        view = derive(facts)
        assert view.status == outcome
        assert (view.waiting_for, view.pending_approval) == (None, None)


def test_the_first_end_wins_when_a_workflow_is_ended_twice() -> None:
    facts = fold_all(
        [ev("workflow.ended", 9, outcome="timed_out"), ev("workflow.ended", 5, outcome="rejected")]
    )
    assert derive(facts).status == "rejected"


def test_a_dead_letter_needs_attention_until_the_workflow_moves_on() -> None:
    facts = fold_all([ev("invoice.received", 0), ev("event.dead_lettered", 1)])
    assert derive(facts).status == ATTENTION
    facts = fold(facts, *ev("invoice.validated", 30))  # redriven after a fix
    assert derive(facts).status == RUNNING
    # A dead letter older than the last progress (seen late, across topics) is history.
    late = fold_all([ev("invoice.validated", 30), ev("event.dead_lettered", 1)])
    assert derive(late).status == RUNNING


def test_a_review_request_waits_for_a_person_with_no_deadline() -> None:
    view = derive(fold_all([ev("invoice.received", 0), ev("review.requested", 2)]))
    assert (view.status, view.waiting_for, view.waiting_until) == (WAITING, HUMAN_REVIEW, None)


def test_attempts_count_dead_letters_reviews_and_the_retries_they_report() -> None:
    failures = [
        {"at": T0.isoformat(), "attempt": 1, "error_class": "X", "message": "m", "retry_in_s": 1.0},
        {"at": T0.isoformat(), "attempt": 2, "error_class": "X", "message": "m", "retry_in_s": 2.0},
        {"at": T0.isoformat(), "attempt": 3, "error_class": "X", "message": "m"},
    ]
    facts = fold_all(
        [
            ev("invoice.received", 0),
            ev("event.dead_lettered", 1, attempts=3, failures=failures),
            ev("review.requested", 2, attempts=3),
        ]
    )
    # 1 dead letter + 2 retries before it, 1 review + 2 re-prompts before it
    assert derive(facts).attempts == 6


def test_status_does_not_depend_on_the_order_events_arrive_in() -> None:
    run = [
        *procurement_run(),
        ev("event.dead_lettered", 2.5),
        ev("review.requested", 3.5),
        ev("approval.requested", 4, approval_id="a2"),  # a second gate, never decided
    ]
    expected = fold_all(run)
    rng = random.Random(7)
    for _ in range(300):
        shuffled = run[:]
        rng.shuffle(shuffled)
        assert fold_all(shuffled) == expected
    # Without the end, the open gate a2 decides the wait, whatever the order.
    open_run = [e for e in run if e[0].event_type not in ("workflow.ended",)]
    views = set()
    for _ in range(100):
        rng.shuffle(open_run)
        view = derive(fold_all(open_run))
        views.add(
            (view.status, view.waiting_for, view.pending_approval and view.pending_approval.approval_id)
        )
    assert views == {(WAITING, "approval by manager", "a2")}


def test_erasing_before_or_after_events_arrive_ends_in_the_same_facts() -> None:
    """Live: some events, erasure, more events (redacted on write). Replay: every event
    redacted on write. Both must give the same row, or the replay checksum breaks."""
    run = procurement_run()
    everything_redacted: WorkflowFacts | None = None
    for entry, model in run:
        everything_redacted = redact_facts(fold(everything_redacted, entry, model))
    rng = random.Random(11)
    for cut in range(len(run) + 1):
        order = run[:]
        rng.shuffle(order)
        live = fold_all(order[:cut]) if cut else None
        if live is not None:
            live = redact_facts(live)  # the erasure
        for entry, model in order[cut:]:
            live = redact_facts(fold(live, entry, model))
        assert live == everything_redacted
    assert everything_redacted is not None
    view = derive(everything_redacted)
    assert (view.status, view.subject_ref, view.result, view.outcome_reason) == (
        "completed",
        None,
        ERASED,
        None,
    )
    assert all(a.context is None for a in everything_redacted.approvals.values())


# -- retention ------------------------------------------------------------------------------------


def test_each_workflow_type_expires_after_its_own_lifetime() -> None:
    lifetimes = {"procurement": 90.0, "research_report": 30.0}
    start = T0
    assert not is_expired("procurement", start, start + timedelta(days=89), lifetimes, 30.0)
    assert is_expired("procurement", start, start + timedelta(days=90), lifetimes, 30.0)
    assert is_expired("research_report", start, start + timedelta(days=30), lifetimes, 30.0)
    assert not is_expired("research_report", start, start + timedelta(days=29), lifetimes, 30.0)
    assert is_expired("onboarding", start, start + timedelta(days=30), lifetimes, 30.0)
    assert not is_expired("onboarding", start, start + timedelta(days=29.9), lifetimes, 30.0)


def test_a_workflow_lists_under_its_submitter_and_business_key_until_its_subject_is_erased() -> None:
    keyed = "hmac-sha256:" + "ab" * 32
    started = ev("workflow.started", 0, submitter_ref=keyed, business_key="order-7")
    facts = fold_all([ev("invoice.received", 1), started])  # the start may arrive second
    view = derive(facts)
    assert (view.submitter_ref, view.business_key) == (keyed, "order-7")
    erased = derive(redact_facts(facts))
    # The submitter's own name for the work may name the subject; who submitted stays.
    assert (erased.submitter_ref, erased.business_key) == (keyed, None)


def test_search_attributes_are_the_latest_stated_whatever_order_events_arrive_in() -> None:
    """vendor and amount from invoice.received, cost_center from budget.reserved; a second
    invoice.received (a resubmission's reading) states newer values, and they win."""
    declared = search_of(REGISTRY)
    run = [
        ev("workflow.started", 0),
        ev("invoice.received", 1, vendor_id="vendor-acme", total_cents=124000),
        ev("budget.reserved", 3, cost_center="cc-42"),
        ev("invoice.received", 5, vendor_id="vendor-acme", total_cents=99000),
        ev("approval.requested", 6, approval_id="a1"),
    ]
    stated = [(entry, model, attributes_of(entry, model, declared)) for entry, model in run]
    assert stated[2][2] == {"cost_center": "cc-42"} and stated[0][2] == {} and stated[4][2] == {}
    expected = {
        "amount": 99000,
        "cost_center": "cc-42",
        "currency": "EUR",
        "po_number": "PO-7781",
        "vendor": "vendor-acme",
    }
    rng = random.Random(3)
    for _ in range(50):
        rng.shuffle(stated)
        facts: WorkflowFacts | None = None
        for entry, model, attributes in stated:
            facts = fold(facts, entry, model, attributes)
        assert facts is not None
        assert derive(facts).attributes == expected
        # Not personal (the registry refuses personal fields): an erasure keeps them.
        assert derive(redact_facts(facts)).attributes == expected
    # Another workflow type's events state nothing of procurement's attributes.
    entry, model = ev("report.requested", 1, workflow_type="research_report", topic="GPUs")
    assert attributes_of(entry, model, declared) == {"topic": "GPUs"}


def test_a_workflows_spend_is_the_sum_of_its_steps_records_in_any_order_and_no_stage() -> None:
    """Two steps' models (one of them a fallback's) spent for one workflow: its status says
    the sum, whichever record the projection read first, and the stage stays the domain's."""
    records = [
        ev("workflow.started", 0),
        ev("invoice.received", 1),
        ev("workflow.spend_recorded", 2, models=["gpt-4o-mini"], input_tokens=1000, cost_micro_usd=150),
        ev(
            "workflow.spend_recorded",
            3,
            service="report_agent",
            models=["small-fallback", "gpt-4o-mini"],
            model_turns=1,
            tool_calls=0,
            input_tokens=10,
            output_tokens=4,
            cost_micro_usd=1_000_001,
        ),
    ]
    forward, backward = derive(fold_all(records)), derive(fold_all(records[::-1]))
    assert forward == backward and forward.spend is not None
    assert (forward.spend.model_turns, forward.spend.tool_calls) == (4, 3)
    assert (forward.spend.input_tokens, forward.spend.output_tokens) == (1010, 100)
    assert (forward.spend.cost_micro_usd, forward.spend.cost_usd) == (1_000_151, 1.000151)
    assert forward.spend.models == ["gpt-4o-mini", "small-fallback"]
    assert forward.stage == "invoice.received"
    assert derive(fold_all(procurement_run())).spend is None  # no model used: no spend at all


def test_an_agent_loops_turn_is_a_timeline_row_naming_its_model_and_calls_and_no_stage() -> None:
    calls = ev("agent.turn_recorded", 2)
    answers = ev("agent.turn_recorded", 3, turn=2, tools_called=[], model="small-fallback")
    assert calls[0].external_call == "turn 1: gpt-4o-mini called lookup_customer, order_history"
    assert answers[0].external_call == "turn 2: small-fallback answered"
    view = derive(fold_all([ev("workflow.started", 0), ev("invoice.received", 1), calls, answers]))
    assert view.stage == "invoice.received" and view.events == 4


def test_what_a_model_is_writing_shows_on_the_status_until_anything_else_happens() -> None:
    """A long step's streamed answer: the latest shows while the step runs (whichever record
    the projection read first); the step's outcome, or the workflow's end, hides it."""
    writing = [
        ev("workflow.started", 0),
        ev("invoice.received", 1),
        ev("agent.output_streamed", 2, chars=24, text='{"category": "billing", '),
        ev("agent.output_streamed", 3, chars=48, text='{"category": "billing", "reply": "Dear Grace'),
    ]
    forward, backward = derive(fold_all(writing)), derive(fold_all(writing[::-1]))
    assert forward == backward and forward.streaming is not None
    assert (forward.streaming.chars, forward.streaming.turn, forward.streaming.step) == (48, 3, "triage")
    assert forward.streaming.text.endswith("Dear Grace") and forward.stage == "invoice.received"
    assert writing[2][0].external_call == "turn 3: gpt-4o-mini writing (24 characters so far)"
    answered = [*writing, ev("agent.turn_recorded", 4, turn=3, tools_called=[])]
    assert derive(fold_all(answered)).streaming is None
    assert derive(fold_all([*writing, ev("workflow.ended", 3.5)])).streaming is None
