"""What the console decides without I/O: sessions and their expiry, who sees which page,
and how a workflow's timeline and the outcome charts are drawn."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from chorus.base.compat import fromisoformat
from chorus.contracts.api.audit_projector import TimelineEntry
from chorus.contracts.api.gateway import Me
from chorus.contracts.api.outcome_analytics import OutcomeBucket
from chorus.contracts.approvals import NO_TIER
from chorus.contracts.lifecycle import NOT_A_STEP

SERVICE = "console"


@dataclass(frozen=True)
class Session:
    """Who is signed in (as the gateway's ``/v1/me`` said), with the key the console asks
    the APIs with, and the token every form of this session must carry (CSRF)."""

    csrf: str
    api_key: str | None = None
    principal: str | None = None
    role: str | None = None
    tier: str | None = None
    signed_in_at: datetime | None = None
    seen_at: datetime | None = None

    @property
    def signed_in(self) -> bool:
        return self.api_key is not None

    def as_json(self) -> dict[str, Any]:
        return {
            "csrf": self.csrf,
            "api_key": self.api_key,
            "principal": self.principal,
            "role": self.role,
            "tier": self.tier,
            "signed_in_at": self.signed_in_at.isoformat() if self.signed_in_at else None,
            "seen_at": self.seen_at.isoformat() if self.seen_at else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Session:
        def at(key: str) -> datetime | None:
            return fromisoformat(data[key]) if data.get(key) else None

        return cls(
            csrf=str(data["csrf"]),
            api_key=data.get("api_key"),
            principal=data.get("principal"),
            role=data.get("role"),
            tier=data.get("tier"),
            signed_in_at=at("signed_in_at"),
            seen_at=at("seen_at"),
        )


def anonymous() -> Session:
    return Session(csrf=secrets.token_urlsafe(24))


def sign_in(me: Me, api_key: str, now: datetime) -> Session:
    """A fresh session (a new CSRF token: one fixed before sign-in is not carried over)."""
    return Session(
        csrf=secrets.token_urlsafe(24),
        api_key=api_key,
        principal=me.principal,
        role=me.role,
        tier=me.tier,
        signed_in_at=now,
        seen_at=now,
    )


def still_valid(session: Session, now: datetime, idle_s: float, max_s: float) -> Session:
    """The session, touched at ``now``; signed out (a new anonymous one) when it sat idle
    longer than ``idle_s`` or began more than ``max_s`` ago."""
    if not session.signed_in:
        return session
    assert session.seen_at is not None and session.signed_in_at is not None
    if now - session.seen_at > timedelta(seconds=idle_s) or now - session.signed_in_at > timedelta(
        seconds=max_s
    ):
        return anonymous()
    return replace(session, seen_at=now)


NAV = {
    "reviewer": [("approvals", "My approvals")],
    "operator": [
        ("approvals", "Approvals"),
        ("workflows", "Workflows"),
        ("schedules", "Schedules"),
        ("bulk-actions", "Bulk actions"),
        ("dead-letters", "Dead letters"),
        ("outcomes", "Outcomes"),
    ],
    "auditor": [
        ("workflows", "Workflows"),
        ("schedules", "Schedules"),
        ("dead-letters", "Dead letters"),
        ("outcomes", "Outcomes"),
    ],
    "submitter": [("workflows", "My workflows"), ("schedules", "My schedules"), ("outcomes", "Outcomes")],
}


def home(role: str | None) -> str:
    """Where a signed-in person lands: a reviewer's queue, everyone else's workflows."""
    return "/approvals" if role in ("reviewer", "operator") else "/workflows"


def window_left(until: datetime | None, now: datetime) -> str:
    if not until:
        return "no window"
    seconds = (until - now).total_seconds()
    if seconds <= 0:
        return "due now"
    return f"{_span(seconds)} left"


def age(since: datetime | None, now: datetime) -> str:
    if not since:
        return "-"
    return _span(max(0.0, (now - since).total_seconds()))


def _span(seconds: float) -> str:
    if seconds < 90:
        return f"{int(seconds)} s"
    if seconds < 90 * 60:
        return f"{int(seconds // 60)} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


# -- the timeline -------------------------------------------------------------------------------

KINDS = {
    "workflow.started": "start",
    "workflow.ended": "end",
    "approval.requested": "wait",
    "approval.routed": "wait",
    "approval.escalated": "wait",
    "approval.window_elapsed": "wait",
    "approval.decision_submitted": "decision",
    "approval.decided": "decision",
    "review.requested": "wait",
    "event.dead_lettered": "dead-letter",
    "workflow.attention_needed": "dead-letter",
    "workflow.cancel_requested": "decision",
    "workflow.deadline_reached": "wait",
}


@dataclass(frozen=True)
class TimelineItem:
    at: str
    event_type: str
    kind: str
    """start, event, wait, decision, retry, dead-letter, end (the page colours and marks each)."""
    producer: str
    detail: str
    actor: str | None
    trace_id: str | None
    event_id: str = ""
    undone_by: str | None = None
    """The reset that undid this step (drawn struck out; never a reset's point)."""
    resettable: bool = False
    """A step a reset may go back to (not a record of what happened to the workflow)."""


def timeline(entries: list[TimelineEntry]) -> list[TimelineItem]:
    """The projection's timeline as the workflow page draws it: what kind each step is,
    and what matters of it (the wait and its window, who decided, the error)."""
    items = []
    for e in entries:
        payload = e.payload or {}
        kind = KINDS.get(e.event_type, "decision" if _is_signal(payload) else "event")
        if kind == "event" and int(payload.get("attempt") or 1) > 1:
            kind = "retry"
        items.append(
            TimelineItem(
                at=e.occurred_at.isoformat(),
                event_type=e.event_type,
                kind=kind,
                producer=e.producer,
                detail=_detail(e.event_type, payload, e.decision, e.external_call),
                actor=e.actor,
                trace_id=e.trace_id,
                event_id=e.event_id,
                undone_by=e.undone_by,
                resettable=e.undone_by is None and e.event_type not in NOT_A_STEP,
            )
        )
    return items


def _is_signal(payload: dict[str, Any]) -> bool:
    """A person's signal (chorus.contracts.lifecycle.Signal): the step they took."""
    return "signal_id" in payload and "sent_by" in payload


def skeleton(schema: dict[str, Any], node: dict[str, Any] | None = None, depth: int = 0) -> Any:
    """A value of the JSON Schema ``schema`` to fill in: each property, of its type (a
    signal's input, as the form shows it first), five levels deep at most (a schema may
    refer to itself)."""
    node = schema if node is None else node
    if depth > 5:
        return None
    ref = node.get("$ref", "")
    if ref.startswith("#/$defs/"):
        node = schema.get("$defs", {}).get(ref.removeprefix("#/$defs/"), {})
    kind = node.get("type")
    if kind == "object" or "properties" in node:
        return {name: skeleton(schema, sub, depth + 1) for name, sub in node.get("properties", {}).items()}
    if kind == "array":
        return [skeleton(schema, node.get("items", {}), depth + 1)]
    return {"integer": 0, "number": 0, "boolean": False}.get(str(kind), "")


def _detail(event_type: str, payload: dict[str, Any], decision: str | None, call: str | None) -> str:
    if event_type == "approval.routed":
        chain = " → ".join(f"{s['tier']} ({_span(float(s['window_s']))})" for s in payload.get("chain", []))
        return f"waits on {chain}"
    if event_type == "approval.escalated":
        until = str(payload.get("waiting_until", ""))[:16]
        return f"escalated {payload.get('from_tier')} → {payload.get('to_tier')}, until {until}"
    if event_type == "approval.decided":
        if payload.get("automatic") and payload.get("tier") == NO_TIER:  # the gate's refusal
            return f"{payload.get('decision')}: no approval policy rule or chain routes it"
        how = " (automatic: no answer in time)" if payload.get("automatic") else ""
        return f"{payload.get('decision')} by tier {payload.get('tier')}{how}"
    if event_type == "workflow.ended":
        return f"{payload.get('outcome')}: {payload.get('reason') or ''}".rstrip(": ")
    if event_type == "event.dead_lettered":
        error = payload.get("error") or {}
        return f"{payload.get('service')}: {error.get('category')}: {str(error.get('message', ''))[:200]}"
    if event_type == "workflow.deadline_reached":
        return f"deadline {str(payload.get('deadline_at', ''))[:16]} passed"
    if event_type == "workflow.reset_requested":
        edited = ", with its input corrected" if payload.get("replacement") else ""
        return (
            f"reset to {payload.get('point_event_type')}{edited} by {payload.get('requested_by')}: "
            f"{payload.get('reason')} ({len(payload.get('undone') or [])} event(s) undone)"
        )
    if event_type == "workflow.reset_applied":
        return _reset_applied(payload)
    if _is_signal(payload):
        return f"signal from {payload.get('sent_by')}: {payload.get('reason')}"
    if "signal_id" in payload and "accepted" in payload:  # an answer to one
        return f"{'accepted' if payload.get('accepted') else 'refused'}: {payload.get('detail')}"
    if call:
        return f"called {call}"
    return decision or ""


def _reset_applied(payload: dict[str, Any]) -> str:
    if payload.get("refused"):
        return f"{payload.get('service')} changed nothing: {payload.get('refused')}"
    parts = [f"{payload.get('service')}: {payload.get('steps_undone', 0)} step(s) undone"]
    if payload.get("compensated"):
        parts.append(f"gave back with {', '.join(payload['compensated'])}")
    if payload.get("rehandled"):
        parts.append("handles the event again")
    return "; ".join(parts)


# -- charts ------------------------------------------------------------------------------------

CHART_SERIES = ("started", "completed", "escalated", "timed_out", "dead_lettered")


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    height: float
    label: str
    value: float


@dataclass(frozen=True)
class Chart:
    """A small SVG bar chart (drawn by the template; no script needed)."""

    title: str
    bars: list[Bar]
    width: float
    height: float
    peak: float
    bar_width: float


def chart(title: str, points: list[tuple[str, float]], *, width: float = 640, height: float = 160) -> Chart:
    peak = max((v for _, v in points), default=0.0)
    scale = peak or 1.0  # an all-zero series draws flat, and says its peak is 0
    slot = width / max(1, len(points))
    bar_width = max(2.0, slot * 0.7)
    bars = [
        Bar(
            x=i * slot + (slot - bar_width) / 2,
            y=height - (value / scale) * height,
            height=(value / scale) * height,
            label=label,
            value=value,
        )
        for i, (label, value) in enumerate(points)
    ]
    return Chart(title, bars, width, height, peak, bar_width)


def outcome_series(buckets: list[OutcomeBucket], workflow_type: str) -> dict[str, list[tuple[str, float]]]:
    """Per hour, for one workflow type: started, completed, escalated, timed out, dead-lettered
    (all categories), the p50 / p99 durations, and (where its models spent anything) the cost
    per completed workflow."""
    rows = sorted((b for b in buckets if b.workflow_type == workflow_type), key=lambda b: b.hour)
    spent = any(b.cost.completed_usd for b in rows)
    series: dict[str, list[tuple[str, float]]] = {}
    for b in rows:
        hour = b.hour.astimezone(timezone.utc).strftime("%H:%M")
        values = {
            "started": b.started,
            "completed": b.ended.get("completed", 0),
            "escalated": b.escalated,
            "timed_out": b.ended.get("timed_out", 0),
            "dead_lettered": sum(b.dead_lettered.values()),
            "p50 duration (s)": b.duration_s.p50 or 0.0,
            "p99 duration (s)": b.duration_s.p99 or 0.0,
        }
        if spent:
            values["cost per completed ($)"] = b.cost.per_completed_usd or 0.0
        for name, value in values.items():
            series.setdefault(name, []).append((hour, float(value)))
    return series


def dead_letters_by_category(buckets: list[OutcomeBucket], workflow_type: str) -> dict[str, int]:
    totals: dict[str, int] = {}
    for b in buckets:
        if b.workflow_type == workflow_type:
            for category, n in b.dead_lettered.items():
                totals[category] = totals.get(category, 0) + int(n)
    return totals
