"""GET /v1/me, GET /v1/approvals and /v1/approvals/{id}, POST /v1/approvals/{id}: who a key
is, the reviewer's queue and decisions."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Query
from fastapi.responses import JSONResponse

from chorus.contracts.api.audit_projector import ApprovalView
from chorus.contracts.api.gateway import (
    ApprovalDetail,
    ApprovalQueue,
    DecisionAccepted,
    DecisionBody,
    Me,
    SubmittedDecision,
)
from chorus.contracts.approvals import ApprovalDecisionSubmitted
from chorus.contracts.envelope import Envelope
from chorus.kernel.service import RuntimeHandle
from chorus.platform.gateway.adapters import repository
from chorus.platform.gateway.domain import same_person
from chorus.platform.gateway.routes.deps import Anyone, Api, ApprovalId, Reviewer, ReviewerOrOperator
from chorus.platform.gateway.routes.events import in_workflow
from chorus.web.apikeys import ApiKey
from chorus.web.webapi import Problem, api_router, problems

router = api_router()


@router.get("/v1/me")
async def me(who: Anyone) -> dict[str, Any]:
    """Who this key is: principal, role and (reviewers) tier. A client (the console)
    signs its user in with this."""
    return Me(principal=who.principal, role=who.role, tier=who.tier).model_dump(mode="json")


@router.get("/v1/approvals")
async def approvals(
    who: ReviewerOrOperator,
    assignee: Annotated[str, Query(max_length=200, description="me, all, or a tier (operators)")] = "me",
    *,
    api: Api,
) -> dict[str, Any]:
    """Pending approvals for the caller's tier (``assignee=me``); operators see every tier."""
    if assignee != "me" and who.role != "operator":
        raise Problem(403, "Forbidden", "reviewers list their own approvals only (assignee=me)")
    tier = who.tier if who.role == "reviewer" else (None if assignee in ("me", "all") else assignee)
    items = await api.reads.pending_approvals(tier, for_whom=who.principal)
    return ApprovalQueue(assignee=who.principal, tier=tier, approvals=items).model_dump(mode="json")


@router.get("/v1/approvals/{approval_id}", responses=problems(404))
async def approval(approval_id: ApprovalId, who: Anyone, api: Api) -> dict[str, Any]:
    """One approval: its status (pending, decided, closed), the tier it waits on, its
    window, review context and decision. For a reviewer of the tier it waits on (or who
    decided it), operators and auditors; anyone else gets the 404 of an unknown one."""
    found = await api.reads.approval(approval_id, for_whom=who.principal)
    if found is None:
        raise Problem(404, "Unknown approval", f"no approval {approval_id!r}")
    async with api.rt.pool.acquire() as conn:
        submitted = await repository.decisions_of(conn, approval_id)
    allowed = who.role in ("operator", "auditor") or (
        who.role == "reviewer"
        and (
            any(d.reviewer == who.principal for d in submitted)
            or (found.status == "pending" and found.tier == who.tier)
        )
    )
    if not allowed:
        raise Problem(404, "Unknown approval", f"no approval {approval_id!r}")
    # Who decided: the reviewer whose submission the gate accepted (the last one with
    # the final decision), or the gate's fallback when nobody answered in time.
    final = [d for d in submitted if d.decision == found.decision]
    decided_by = None
    if found.status == "decided":
        decided_by = final[-1].reviewer if final else "chorus:fallback"
    detail = ApprovalDetail(
        **dict(found),
        decided_by=decided_by,
        submitted_decisions=[SubmittedDecision(**vars(d)) for d in submitted],
    )
    return detail.model_dump(mode="json")


@router.post("/v1/approvals/{approval_id}", status_code=202, responses=problems(403, 404, 409))
async def decide(approval_id: ApprovalId, body: DecisionBody, who: Reviewer, api: Api) -> JSONResponse:
    """Approve, reject or ask for a revision. Only the tier the approval waits on may decide."""
    pending = await api.reads.approval(approval_id, for_whom=who.principal)
    if pending is None:
        raise Problem(404, "Unknown approval", f"no approval {approval_id!r}")
    if pending.status == "closed":
        why = pending.closed_reason or "the workflow ended"
        raise Problem(409, "Approval withdrawn", f"approval {approval_id} is no longer open: {why}")
    if pending.status != "pending":
        raise Problem(409, "Already decided", f"approval {approval_id} is {pending.status}")
    if pending.tier != who.tier:
        raise Problem(
            403,
            "Forbidden",
            f"approval {approval_id} waits on tier {pending.tier!r}; you review for {who.tier!r}",
        )
    rt = api.rt
    async with rt.pool.acquire() as conn:
        now = rt.clock.now()
        submission = await repository.find_by_workflow(conn, pending.workflow_id)
        if same_person(submission.submitter if submission else None, who.principal):
            raise Problem(
                403,
                "Separation of duties",
                f"{who.principal} submitted workflow {pending.workflow_id}: another reviewer "
                f"of tier {pending.tier!r} decides approval {approval_id}",
            )
        submitted = _decision_envelope(rt, pending, submission, approval_id, body, who, now)
        async with rt.outbox.transaction(conn) as tx:
            first = await repository.insert_decision(
                conn,
                approval_id=approval_id,
                level=pending.level,
                workflow_id=pending.workflow_id,
                reviewer=who.principal,
                decision=body.decision,
                comment=body.comment,
                now=now,
            )
            if not first:
                raise Problem(409, "Already decided", f"approval {approval_id} already has a decision")
            await tx.publish(submitted)
    accepted = DecisionAccepted(
        approval_id=approval_id, decision=body.decision, workflow_id=pending.workflow_id
    )
    return JSONResponse(accepted.model_dump(mode="json"), status_code=202)


def _decision_envelope(
    rt: RuntimeHandle,
    pending: ApprovalView,
    submission: repository.SubmissionRow | None,
    approval_id: str,
    body: DecisionBody,
    who: ApiKey,
    now: datetime,
) -> Envelope:
    """The reviewer's decision, in the workflow's own trace and priority lane."""
    decision = ApprovalDecisionSubmitted(
        approval_id=approval_id,
        decision=body.decision,
        comment=body.comment,
        reviewer=who.principal,
        reviewer_tier=who.tier or "",
    )
    return in_workflow(
        rt,
        decision,
        pending.workflow_id,
        pending.workflow_type or "unknown",
        submission,
        f"decision:{approval_id}:{pending.level or 0}",
        now,
    )
