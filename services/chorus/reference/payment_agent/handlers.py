"""Handlers of the payment agent."""

from __future__ import annotations

from chorus.codec import Event
from chorus.contracts.approvals import ApprovalDecided
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.contracts.procurement import (
    BudgetReserved,
    InvoiceValidated,
    PaymentFailed,
    PaymentIssued,
    is_budget_approval,
)
from chorus.errors import TransientError
from chorus.external import ExternalRejection
from chorus.reference.payment_agent.bootstrap import Deps
from chorus.reference.payment_agent.domain import (
    SERVICE,
    PaymentState,
    amount_mismatch,
    payee,
    payment_key,
    vendor_mismatch,
)
from chorus.service import Context, Outcome


async def on_invoice_validated(
    event: Event[InvoiceValidated], state: PaymentState | None, ctx: Context[Deps]
) -> Outcome[PaymentState]:
    state = state or PaymentState()
    updated = state.model_copy(
        update={
            "invoice_id": event.payload.invoice_id,
            "vendor_id": event.payload.extracted.vendor_id,
            "validated_cents": event.payload.extracted.total_cents,
        }
    )
    return await pay_when_possible(updated, event.envelope.workflow_id, ctx)


async def on_budget_reserved(
    event: Event[BudgetReserved], state: PaymentState | None, ctx: Context[Deps]
) -> Outcome[PaymentState]:
    reserved = event.payload
    state = state or PaymentState()
    updated = state.model_copy(
        update={
            "invoice_id": reserved.invoice_id,
            "amount_cents": reserved.amount_cents,
            "currency": reserved.currency,
            "reservation_id": reserved.reservation_id,
            "vendor_of_record": reserved.vendor_id or "",
        }
    )
    return await pay_when_possible(updated, event.envelope.workflow_id, ctx)


async def on_approval_decided(
    event: Event[ApprovalDecided], state: PaymentState | None, ctx: Context[Deps]
) -> Outcome[PaymentState]:
    decision = event.payload
    workflow_id = event.envelope.workflow_id
    if (
        decision.requested_by != "budget_agent"
        or decision.decision != "approve"
        or not is_budget_approval(decision.approval_id, workflow_id)
    ):
        # Money moves on the budget agent's own approval request only: an approval of a
        # review (anyone's runtime may ask for one) pays nothing.
        return Outcome()
    state = state or PaymentState()
    if state.approved_by is not None:
        return Outcome()  # approved twice pays once
    updated = state.model_copy(update={"approved_by": decision.decided_by})
    return await pay_when_possible(updated, event.envelope.workflow_id, ctx)


async def pay_when_possible(
    state: PaymentState, workflow_id: str, ctx: Context[Deps]
) -> Outcome[PaymentState]:
    """Pay once the approval and the reserved amount are both known, whichever came last.

    The approval travels on another topic than the reservation, so either may
    arrive first; waiting for the other must not block (or drop) this one.
    """
    if not state.payable:
        return Outcome(state=state)
    mismatch = amount_mismatch(state) or vendor_mismatch(state)
    if mismatch is not None:
        # Two services disagree on what is owed: pay nothing and let a person look, rather
        # than pay either figure (the budget agent gives the reservation back).
        return failed(state, mismatch, "persistent")
    try:
        receipt = await ctx.deps.payments.pay(
            key=payment_key(workflow_id, state.invoice_id),
            invoice_id=state.invoice_id,
            vendor_id=payee(state),
            amount_cents=state.amount_cents,
            currency=state.currency,
        )
    except ExternalRejection as exc:
        return failed(state, f"provider refused: {exc.body}", "rejected_by_provider")
    except TransientError as exc:
        if ctx.attempt >= ctx.deps.max_attempts:
            return failed(state, f"gave up after {ctx.attempt} attempts: {exc}", "exhausted_retries")
        raise
    issued = PaymentIssued(
        invoice_id=state.invoice_id,
        payment_id=receipt.payment_id,
        provider_reference=receipt.reference,
        amount_cents=state.amount_cents,
        currency=state.currency,
    )
    ended = WorkflowEnded(
        outcome="completed",
        reason=f"paid {state.amount_cents / 100:.2f} {state.currency}",
        result={
            "payment_id": receipt.payment_id,
            "amount_cents": state.amount_cents,
            "currency": state.currency,
        },
        ended_by=SERVICE,
    )
    return Outcome(
        state=state.model_copy(update={"payment_id": receipt.payment_id}),
        emit=[issued, ended],
        ended="completed",
    )


def failed(state: PaymentState, reason: str, category: str) -> Outcome[PaymentState]:
    """The saga's turn: the budget agent releases the reservation on payment.failed."""
    return Outcome(
        state=state.model_copy(update={"failed": True}),
        emit=[PaymentFailed(invoice_id=state.invoice_id, reason=reason[:500], category=category)],  # type: ignore[arg-type]
    )
