"""Handlers of the invoice agent."""

from __future__ import annotations

from pydantic import ValidationError

from chorus.codec import Event
from chorus.contracts.approvals import ApprovalDecided
from chorus.contracts.base import EventModel
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.contracts.procurement import (
    CheckResult,
    ExtractedInvoice,
    InvoiceCorrectionRequested,
    InvoiceLineAdded,
    InvoiceLineChecked,
    InvoiceReceived,
    InvoiceRejected,
    InvoiceValidated,
    InvoiceValidatedV2,
    Reading,
)
from chorus.llm import parse_json_output
from chorus.reference.invoice_agent.bootstrap import Deps
from chorus.reference.invoice_agent.domain import (
    SERVICE,
    InvoiceState,
    check_against_claim,
    extraction_prompt,
    from_claim,
    line_sum,
    only_a_line_missing,
)
from chorus.service import Context, Outcome


async def on_invoice_received(
    event: Event[InvoiceReceived], state: InvoiceState | None, ctx: Context[Deps]
) -> Outcome[InvoiceState]:
    if state is not None and state.validated:
        return Outcome()  # a second start event for the same workflow changes nothing
    invoice = event.payload
    # Known before the model reads it: when every reading fails and a person reviews it,
    # their decision (on_approval_decided) needs the invoice and the submitter's claim.
    # The document stays sealed in the checkpoint (minimisation): it is opened for each
    # reading, and erasing the subject leaves only ciphertext here.
    await ctx.checkpoint(InvoiceState(invoice=invoice))
    extracted = await read_invoice(invoice, ctx)
    return decide(InvoiceState(invoice=invoice, readings=1), extracted, ctx.deps, reading_of(ctx))


async def on_approval_decided(
    event: Event[ApprovalDecided], state: InvoiceState | None, ctx: Context[Deps]
) -> Outcome[InvoiceState]:
    """A reviewer asked for a revision (budget approval) or answered a review of a reading."""
    decision = event.payload
    if state is None or event.envelope.workflow_type != "procurement":
        return Outcome()
    own_review = decision.requested_by == SERVICE
    if decision.decision == "revise" and (own_review or decision.requested_by == "budget_agent"):
        extracted = await read_invoice(state.invoice, ctx, reviewer_comment=decision.comment)
        state = state.model_copy(update={"readings": state.readings + 1})
        return decide(state, extracted, ctx.deps, reading_of(ctx))
    if own_review and decision.decision == "approve":
        return decide(state, from_claim(state.invoice), ctx.deps, None, vouched=True)
    if own_review and decision.decision == "reject":
        # Who and why are personal data: the end's reason is sealed, the rejection's is not.
        why = f"rejected in review by {decision.decided_by}: {decision.comment}".strip(": ")
        return rejected(state, ["rejected in review"], ended_reason=why)
    return Outcome()


async def read_invoice(
    invoice: InvoiceReceived, ctx: Context[Deps], reviewer_comment: str = ""
) -> ExtractedInvoice:
    """Ask the LLM; an answer that fails the schema is a SemanticError (re-prompted with it)."""
    document = await ctx.open(invoice.document_text)
    messages = extraction_prompt(document, ctx.feedback, reviewer_comment)
    answer = await ctx.deps.llm.complete(messages, timeout_s=ctx.deps.llm_timeout_s)
    return parse_json_output(answer, ExtractedInvoice)


def reading_of(ctx: Context[Deps]) -> Reading:
    """This reading: the model, and the tries it took (earlier ones failed validation)."""
    return Reading(model=ctx.deps.llm.name, attempts=len(ctx.feedback) + 1)


async def on_line_added(
    event: Event[InvoiceLineAdded], state: InvoiceState | None, ctx: Context[Deps]
) -> Outcome[InvoiceState]:
    """The submitter's signal ``add_line``, answered in the same step: taken when the invoice
    waits for a line and, with it, its lines add up to the total (then it is validated and
    the workflow goes on to the budget); otherwise nothing changes and the answer says why."""
    signal = event.payload
    if state is None:
        return Outcome()  # no invoice of this workflow reached this agent: nothing to answer for
    waiting = state.awaiting_line
    if waiting is None:
        why = (
            "the invoice was validated already"
            if state.validated
            else "the invoice is not waiting for a line"
        )
        return Outcome(emit=[line_checked(signal, state, None, accepted=False, detail=why)])
    line = signal.line
    short_by = waiting.total_cents - line_sum(waiting)
    if line.quantity * line.unit_price_cents > short_by:
        detail = (
            f"the line is worth {line.quantity * line.unit_price_cents}, the lines fall short of the total "
            f"by {short_by}: not taken"
        )
        return Outcome(emit=[line_checked(signal, state, None, accepted=False, detail=detail)])
    try:  # the reading as a new one, checked as every reading is (a bound on its lines)
        completed = ExtractedInvoice.model_validate({**waiting.model_dump(), "lines": [*waiting.lines, line]})
    except ValidationError as exc:
        detail = f"with it the reading is no invoice: {exc.errors()[0]['msg']}: not taken"
        return Outcome(emit=[line_checked(signal, state, None, accepted=False, detail=detail)])
    lines_cents = line_sum(completed)
    if lines_cents != completed.total_cents:
        detail = (
            f"with it the lines add up to {lines_cents}, the total says {completed.total_cents}: not taken"
        )
        return Outcome(emit=[line_checked(signal, state, completed, accepted=False, detail=detail)])
    answer = line_checked(
        signal, state, completed, accepted=True, detail="the lines add up now: invoice validated"
    )
    resumed = state.model_copy(update={"awaiting_line": None, "awaiting_reading": None})
    done = decide(resumed, completed, ctx.deps, state.awaiting_reading, line_added=True)
    return Outcome(state=done.state, emit=[answer, *done.emit], ended=done.ended)


def line_checked(
    signal: InvoiceLineAdded,
    state: InvoiceState,
    completed: ExtractedInvoice | None,
    *,
    accepted: bool,
    detail: str,
) -> InvoiceLineChecked:
    reading = completed or state.awaiting_line
    return InvoiceLineChecked(
        signal_id=signal.signal_id,
        accepted=accepted,
        detail=detail,
        invoice_id=state.invoice.invoice_id,
        lines_cents=line_sum(reading) if reading else 0,
        total_cents=reading.total_cents if reading else state.invoice.total_cents,
    )


def decide(
    state: InvoiceState,
    extracted: ExtractedInvoice,
    deps: Deps,
    reading: Reading | None,
    vouched: bool = False,
    line_added: bool = False,
) -> Outcome[InvoiceState]:
    checks, reasons = check_against_claim(extracted, state.invoice)
    if only_a_line_missing(extracted, checks, reasons):
        # Everything else reads as claimed: the submitter may add the line (signal add_line).
        missing = extracted.total_cents - line_sum(extracted)
        asked = InvoiceCorrectionRequested(
            invoice_id=state.invoice.invoice_id, reasons=reasons, missing_cents=missing
        )
        waiting = state.model_copy(update={"awaiting_line": extracted, "awaiting_reading": reading})
        return Outcome(state=waiting, emit=[asked])
    if reasons:
        return rejected(state, reasons)
    if vouched:
        checks.append("reading confirmed by the reviewer who approved it")
    if line_added:
        checks.append("a line the reading missed, added by the submitter")
    invoice_id = state.invoice.invoice_id
    validated: EventModel = (
        InvoiceValidatedV2(invoice_id=invoice_id, extracted=extracted, checks=checks)
        if deps.validated_version == 2
        else InvoiceValidated(
            invoice_id=invoice_id,
            extracted=extracted,
            checks=[CheckResult(check=c, passed=True) for c in checks],
            reading=reading,
        )
    )
    return Outcome(state=state.model_copy(update={"validated": True}), emit=[validated])


def rejected(state: InvoiceState, reasons: list[str], ended_reason: str = "") -> Outcome[InvoiceState]:
    events: list[EventModel] = [
        InvoiceRejected(invoice_id=state.invoice.invoice_id, reasons=reasons),
        WorkflowEnded(outcome="rejected", reason=ended_reason or "; ".join(reasons), ended_by=SERVICE),
    ]
    return Outcome(state=state, emit=events, ended="rejected")
