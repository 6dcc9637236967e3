"""Handlers of the budget agent."""

from __future__ import annotations

from chorus.codec import Event
from chorus.contracts.approvals import ApprovalDecided
from chorus.contracts.base import EventModel
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.contracts.procurement import (
    BudgetRejected,
    BudgetReleased,
    BudgetReserved,
    InvoiceRejected,
    InvoiceValidated,
    PaymentFailed,
    budget_approval_id,
)
from chorus.reference.budget_agent.adapters.ledger import Release, Reserve
from chorus.reference.budget_agent.bootstrap import Deps
from chorus.reference.budget_agent.domain import (
    SERVICE,
    BudgetState,
    Refusal,
    approval_request,
    check_against_po,
    invoice_key,
    reservation_id,
    what_changed,
)
from chorus.service import Context, Outcome, Reset


async def on_invoice_validated(
    event: Event[InvoiceValidated], state: BudgetState | None, ctx: Context[Deps]
) -> Outcome[BudgetState]:
    validated = event.payload
    extracted = validated.extracted
    workflow_id = event.envelope.workflow_id
    if state is not None and state.status != "reserved":
        return Outcome()  # released or rejected already: a late revision changes nothing
    if state is not None and state.reservation_id is not None:
        # A revised reading of an invoice we already reserved for. The purchase order, the
        # invoice's claim and the amount were checked for what the first reading said; a
        # reading that says otherwise starts over as a new submission.
        changed = what_changed(state, extracted)
        if changed:
            reason = f"the revised reading changed the {', '.join(changed)}; submit the invoice again"
            return release(state, reason, outcome="rejected")
        state = state.model_copy(update={"approval_rounds": state.approval_rounds + 1})
        request = approval_request(state, validated, workflow_id, ctx.deps.chain, ctx.deps.fallback)
        return Outcome(state=state, emit=[request])
    amount = extracted.total_cents
    state = BudgetState(
        invoice_id=validated.invoice_id,
        cost_center="",
        amount_cents=amount,
        currency=extracted.currency,
        po_number=extracted.po_number,
        invoice_number=extracted.invoice_number,
    )
    po = await ctx.deps.ledger.purchase_order(extracted.po_number)
    refusal = check_against_po(extracted, po)
    if refusal is not None or po is None:
        return refused(state, refusal or Refusal("unknown_po", extracted.po_number))
    state = state.model_copy(update={"cost_center": po.cost_center, "vendor_id": po.vendor_id})
    invoice = invoice_key(po.vendor_id, extracted.invoice_number)
    holder = await ctx.deps.ledger.invoice_holder(invoice)
    if holder is not None and holder != workflow_id:
        # Not naming the other workflow: its submitter may be someone else.
        detail = f"invoice {extracted.invoice_number} from {po.vendor_id} is paid, or being paid, already"
        return refused(state, Refusal("duplicate_invoice", detail))
    available = await ctx.deps.ledger.available(po.cost_center)
    if available is None or available < amount:
        rejected = BudgetRejected(
            invoice_id=validated.invoice_id,
            cost_center=po.cost_center,
            requested_cents=amount,
            available_cents=available or 0,
        )
        ended = WorkflowEnded(
            outcome="rejected",
            reason=f"budget {po.cost_center} has {available or 0} cents, {amount} needed",
            ended_by=SERVICE,
        )
        return Outcome(
            state=state.model_copy(update={"status": "rejected"}),
            emit=[rejected, ended],
            ended="rejected",
        )
    res_id = reservation_id(workflow_id, validated.invoice_id)
    state = state.model_copy(update={"reservation_id": res_id, "approval_rounds": 1})
    reserved = BudgetReserved(
        invoice_id=validated.invoice_id,
        reservation_id=res_id,
        cost_center=po.cost_center,
        amount_cents=amount,
        currency=extracted.currency,
        po_number=po.po_number,
        vendor_id=po.vendor_id,
    )
    request = approval_request(state, validated, workflow_id, ctx.deps.chain, ctx.deps.fallback)
    return Outcome(
        state=state,
        emit=[reserved, request],
        effects=[Reserve(res_id, workflow_id, po.cost_center, amount, invoice, po.po_number)],
    )


def refused(state: BudgetState, refusal: Refusal) -> Outcome[BudgetState]:
    """The invoice is not paid, for good: nothing was reserved, so nothing is given back."""
    events: list[EventModel] = [
        InvoiceRejected(invoice_id=state.invoice_id, reasons=[refusal.detail], code=refusal.code),
        WorkflowEnded(outcome="rejected", reason=f"{refusal.code}: {refusal.detail}", ended_by=SERVICE),
    ]
    return Outcome(state=state.model_copy(update={"status": "rejected"}), emit=events, ended="rejected")


async def on_approval_decided(
    event: Event[ApprovalDecided], state: BudgetState | None, ctx: Context[Deps]
) -> Outcome[BudgetState]:
    decision = event.payload
    asked = budget_approval_id(event.envelope.workflow_id, state.approval_rounds) if state else None
    if state is None or decision.requested_by != SERVICE or decision.approval_id != asked:
        # Only the answer to what it asked, this round: a decision on another approval of
        # the workflow (a review someone else asked for, a superseded round) decides nothing.
        return Outcome()
    if decision.decision == "approve":  # the payment agent pays; remembered for the end
        return Outcome(state=state.model_copy(update={"approved": True}))
    if decision.decision != "reject":
        return Outcome()  # revise: the invoice agent re-reads
    # Who decided is personal data: it stays in the sealed approval.decided, not in the
    # budget events, whose reasons are plain text.
    who = "a reviewer" if not decision.automatic else "the fallback policy"
    return release(state, f"approval rejected by {who}", outcome="rejected")


async def on_payment_failed(
    event: Event[PaymentFailed], state: BudgetState | None, ctx: Context[Deps]
) -> Outcome[BudgetState]:
    if state is None:
        return Outcome()
    failed = event.payload
    # A payment given up on after timeouts may have gone through at the provider: the
    # invoice stays claimed until a person has checked (a refused one is free again).
    return release(
        state,
        f"payment failed: {failed.reason}",
        outcome="compensated",
        keep_invoice=failed.category == "exhausted_retries",
    )


async def on_workflow_ended(
    event: Event[WorkflowEnded], state: BudgetState | None, ctx: Context[Deps]
) -> Outcome[BudgetState]:
    """A workflow that timed out (or was cancelled, or its subject erased) must not keep its
    budget. Once approved,
    its payment may have reached the provider (a retry the end cut short): the invoice stays
    claimed until a person has checked, as after a payment given up on."""
    if state is None or event.payload.outcome not in ("timed_out", "cancelled", "erased"):
        return Outcome()
    reason = f"workflow {event.payload.outcome}"
    return release(state, reason, outcome=None, keep_invoice=state.approved)


def release(
    state: BudgetState, reason: str, *, outcome: str | None, keep_invoice: bool = False
) -> Outcome[BudgetState]:
    if state.status != "reserved" or state.reservation_id is None:
        return Outcome()
    events: list[EventModel] = [
        BudgetReleased(
            invoice_id=state.invoice_id,
            reservation_id=state.reservation_id,
            amount_cents=state.amount_cents,
            reason=reason,
        )
    ]
    if outcome is not None:
        events.append(WorkflowEnded(outcome=outcome, reason=reason, ended_by=SERVICE))  # type: ignore[arg-type]
    return Outcome(
        state=state.model_copy(update={"status": "released"}),
        emit=events,
        effects=[Release(state.reservation_id, keep_invoice=keep_invoice)],
        ended=outcome,
    )


async def on_reset(reset: Reset, deps: Deps) -> Outcome[BudgetState]:
    """An operator reset the workflow to a step before its reservation (workflows.yaml:
    budget.reserved is compensated): the reservation is given back, and the step that made
    it, run again, reserves anew. A reset to a later step keeps it."""
    before = BudgetState.model_validate(reset.before) if reset.before is not None else None
    after = BudgetState.model_validate(reset.after) if reset.after is not None else None
    if before is None or (after is not None and after.reservation_id == before.reservation_id):
        return Outcome()
    released = release(before, "the workflow was reset to a step before its reservation", outcome=None)
    return Outcome(emit=released.emit, effects=released.effects)
