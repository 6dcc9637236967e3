"""Gateway decisions: which workflow types exist, what starts them, signatures. No I/O."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlsplit

from croniter import CroniterBadCronError, CroniterBadDateError, croniter
from pydantic import BaseModel

from chorus.contracts.api.gateway import Submission
from chorus.contracts.base import EventModel
from chorus.contracts.lifecycle import NOT_A_STEP, RESET_RECORDS
from chorus.contracts.registry import Registry

SERVICE = "gateway"


@dataclass(frozen=True)
class WorkflowType:
    name: str
    start: type[EventModel]

    deadline_s: float


def workflow_types(registry: Registry, deadlines_s: Mapping[str, float]) -> dict[str, WorkflowType]:
    """The types the registry declares (``workflows.yaml``, the platform's and a project's):
    each started by the latest version of its start event; ``deadlines_s`` overrides the
    registry's deadline of a type."""
    return {
        name: WorkflowType(
            name,
            registry.latest_model(declared.start),
            deadlines_s.get(name, declared.deadline_s),
        )
        for name, declared in sorted(registry.workflows.items())
    }


IDEMPOTENCY_KEY_MAX = 255
IDEMPOTENCY_KEY_PATTERN = r"^[!-~]+$"
"""Visible ASCII: a key travels in headers (ours and the ones Chorus sends onwards)."""


class GatewayState(BaseModel):
    """What the gateway remembers of a workflow it started."""

    callback_url: str | None = None
    ended: bool = False
    outcome: str | None = None


def request_hash(workflow_type: str, submission: Submission[Any]) -> str:
    """Same Idempotency-Key with a different request is an error, not a replay."""
    body = json.dumps([workflow_type, submission.model_dump(mode="json")], sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


WHSEC = "whsec_"


def secret_key(secret: str) -> bytes:
    """A Standard Webhooks secret as HMAC key: ``whsec_<base64>`` decoded, any other text as
    its UTF-8 bytes."""
    if secret.startswith(WHSEC):
        return base64.b64decode(secret.removeprefix(WHSEC) + "==")
    return secret.encode()


def webhook_signature(secrets: list[str], msg_id: str, timestamp: str, body: bytes) -> str:
    """The Standard Webhooks ``webhook-signature`` header (standardwebhooks.com): ``v1,`` and
    the base64 HMAC-SHA256 of ``<webhook-id>.<webhook-timestamp>.<body>``, once per secret,
    space-separated, so that a receiver in the middle of rotating its secret accepts either.
    (Three lines of HMAC: the reference library's verify checks wall-clock time, which
    Chorus's injected clocks cannot share, so both sides are written here.)"""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return " ".join(
        "v1," + base64.b64encode(hmac.new(secret_key(s), signed, hashlib.sha256).digest()).decode()
        for s in secrets
    )


def receiver_secrets(url: str, per_receiver: dict[str, str], default: str) -> list[str]:
    """The secrets a callback to ``url`` is signed with: its receiver's own (by origin,
    ``https://hooks.example.com``), else the default; several, space-separated, while one
    rotates (the first is the newest)."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}".lower()
    return (per_receiver.get(origin) or default).split()


def may_read(
    role: str, principal: str, tier: str | None, *, submitter: str | None, waits_on: str | None, decided: bool
) -> bool:
    """Who may read a workflow: an operator or an auditor any; a submitter those it
    submitted; a reviewer those waiting on its tier or that it decided on. Everyone else
    learns nothing, not even that it exists (the same 404 as an unknown id)."""
    if role in ("operator", "auditor"):
        return True
    if role == "submitter":
        return submitter == principal
    if role == "reviewer":
        return (tier is not None and waits_on == tier) or decided
    return False


def same_person(submitter: str | None, reviewer: str) -> bool:
    """Separation of duties: whoever submitted a workflow does not decide its approvals,
    whatever other key (a reviewer's) they also hold."""
    return submitter is not None and submitter == reviewer


def submitter_urls(body: Any, where: str = "") -> list[tuple[str, str]]:
    """(JSON pointer, URL) of every URL field (a name ending in ``url``) of a submission:
    each is a place the workflow will call on the submitter's word (callback_url,
    delivery_url, sources[n].url). Text that merely looks like a URL is not one."""
    found: list[tuple[str, str]] = []
    if isinstance(body, dict):
        for key, value in body.items():
            at = f"{where}/{str(key).replace('~', '~0').replace('/', '~1')}"
            if str(key).lower().endswith("url") and isinstance(value, str) and value:
                found.append((at, value))
            else:
                found.extend(submitter_urls(value, at))
    elif isinstance(body, list):
        for i, value in enumerate(body):
            found.extend(submitter_urls(value, f"{where}/{i}"))
    return found


# -- schedules ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cadence:
    """When a schedule's runs fall due: on a cron expression (five fields, UTC), or every
    ``every_s`` seconds from ``anchor``."""

    cron: str | None
    every_s: float | None
    anchor: datetime

    def check(self) -> str | None:
        """What is wrong with it (None: nothing)."""
        if (self.cron is None) == (self.every_s is None):
            return "give either cron or every_s"
        if self.cron is not None:
            if len(self.cron.split()) != 5:
                return f"cron {self.cron!r}: five fields (minute hour day-of-month month day-of-week)"
            if not croniter.is_valid(self.cron) or re.search(r"(^|[\s,/-])[RrHh]($|[\s,/(])", self.cron):
                return f"cron {self.cron!r} is no cron expression (H and R fields are not taken)"
            try:
                next_due(self, self.anchor)
            except (CroniterBadDateError, CroniterBadCronError):
                return f"cron {self.cron!r} never falls due"
        return None


def next_due(cadence: Cadence, after: datetime) -> datetime:
    """The first run strictly after ``after``."""
    if cadence.cron is not None:
        found: datetime = croniter(cadence.cron, after.astimezone(timezone.utc)).get_next(datetime)
        return found
    assert cadence.every_s is not None
    step = timedelta(seconds=cadence.every_s)
    passed = max(0, math.floor((after - cadence.anchor) / step) + 1)
    return cadence.anchor + passed * step


MAX_CAUGHT_UP = 1000
"""The most runs one firing starts (the newest: older ones count as missed) or enumerates as
missed (the rest are counted): a schedule every second, down for a week, does not stall its
gateway."""
LAG_GRACE = timedelta(seconds=60)
"""A run is on time while its timer's event is this late at most (the timer service's and
Kafka's lag), whatever the catch-up window: a window of 0 still starts the runs on time."""


@dataclass(frozen=True)
class CaughtUp:
    started: list[datetime]
    """To start, oldest first."""
    missed: list[datetime]
    """Missed ones (at most MAX_CAUGHT_UP), oldest first."""
    missed_count: int
    """How many were missed, those listed and not."""


def catch_up(cadence: Cadence, since: datetime, until: datetime, window: timedelta) -> CaughtUp:
    """The runs due in (``since``, ``until``]: those due at most ``window`` (or the lag
    grace) before ``until`` start, older ones are missed (the schedule's catch-up policy
    after an outage)."""
    oldest = max(since, until - max(window, LAG_GRACE))
    started: deque[datetime] = deque(maxlen=MAX_CAUGHT_UP)
    due_in_window = 0
    at = next_due(cadence, oldest - timedelta(microseconds=1)) if oldest > since else next_due(cadence, since)
    while at <= until:
        started.append(at)
        due_in_window += 1
        at = next_due(cadence, at)
    missed: list[datetime] = []
    count = due_in_window - len(started)  # due within the window, beyond the most one firing starts
    at = next_due(cadence, since)
    while at < oldest:
        count += 1
        missed.append(at)
        if len(missed) >= MAX_CAUGHT_UP:
            if cadence.every_s is not None:  # the rest, counted
                count += max(0, math.ceil((oldest - at) / timedelta(seconds=cadence.every_s)) - 1)
            break  # (a cron's rest is not counted: a cron is at most once a minute)
        at = next_due(cadence, at)
    return CaughtUp(list(started), list(missed), count)


# -- reset from a step -----------------------------------------------------------------------


@dataclass(frozen=True)
class TimelineEvent:
    """What a reset looks at of one timeline entry."""

    event_id: str
    event_type: str
    occurred_at: datetime
    undone_by: str | None = None
    origin: str = "topic"
    """reset: an operator's correction, carried by its reset (on no topic to read it again)."""


@dataclass(frozen=True)
class ResetPlan:
    point: TimelineEvent
    undone: list[TimelineEvent]
    compensated: list[str]


def plan_reset(
    timeline: list[TimelineEvent],
    event_id: str,
    status: str,
    compensated: list[str],
    irreversible: list[str],
    *,
    edit: bool = False,
) -> ResetPlan | tuple[int, str]:
    """What a reset of a workflow (``timeline`` in the order it happened, ``status`` as its
    projection says) to ``event_id`` undoes; or why not (an HTTP status and a sentence).

    Only a quiet workflow goes back: one waiting (for a person or a signal), so that none of
    its steps is under way while every service rolls back (a timer it set may still fire). An
    event past the point that ``irreversible`` names (workflows.yaml) refuses it: what it did
    would be done twice."""
    live = [e for e in timeline if e.undone_by is None]
    point = next((e for e in live if e.event_id == event_id), None)
    if point is None:
        undone = next((e for e in timeline if e.event_id == event_id), None)
        if undone is not None:
            return 409, f"event {event_id} ({undone.event_type}) was undone by reset {undone.undone_by}"
        return 404, f"event {event_id} is not in the workflow's timeline"
    if point.origin != "topic" and not edit:
        return 422, (
            f"{point.event_type} {event_id} is an operator's correction, on no topic to read again: "
            "reset to it with the input again, or to an earlier event"
        )
    if point.event_type in NOT_A_STEP:
        return (
            422,
            f"{point.event_type} records what happened to the workflow, not a step of it: choose a step",
        )
    after = [e for e in live[live.index(point) + 1 :] if e.event_type not in RESET_RECORDS]
    for event in after:
        if event.event_type in irreversible:
            return 409, (
                f"{event.event_type} (event {event.event_id}, {event.occurred_at.isoformat()}) came after "
                f"{point.event_type}, and nothing gives it back (workflows.yaml: reset.irreversible): "
                "reset to a later event"
            )
    if status != "waiting":
        return 409, (
            f"the workflow is {status}: a reset goes back only while it waits (for a person, a signal "
            "or a timer), so that nothing of it is on its way while its services roll back"
        )
    return ResetPlan(point, after, [e.event_type for e in after if e.event_type in compensated])
