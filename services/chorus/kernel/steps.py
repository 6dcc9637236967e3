"""The typed values that pass between the pipeline's steps.

decode -> route -> dedupe -> order -> load -> handle -> classify -> commit -> (offset)

- route:    :class:`Via` says how a record reached the main path;
- load:     :class:`Frame` is the checkpoint a handling builds on;
- classify: a :data:`Result` says how the handler ended (one of four);
- commit:   :class:`Handled` carries what arrived and where it stands to the commit.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from chorus.kernel.codec import Event
from chorus.kernel.errors import Category
from chorus.kernel.records import Record
from chorus.kernel.service import On, Outcome
from chorus_contracts.base import EventModel
from chorus_contracts.platform import Failure

MAX_FAILURES = 1000
"""Failures carried by retry.due and dead letters: the latest ones."""


class Via(Enum):
    """How a record reached the main path: what the inbox lets through and whether it may
    overtake records parked for its workflow."""

    DELIVERY = "delivery"
    """Read from its topic."""
    RETRY = "retry"
    """Fired by a durable retry (retry.due): a later attempt of the same event."""
    DRAIN = "drain"
    """Taken from the workflow's parked records, in arrival order, once it stopped waiting."""


@dataclass(frozen=True)
class Succeeded:
    outcome: Outcome[Any]


@dataclass(frozen=True)
class Retry:
    error: BaseException
    category: Category
    wait_s: float


@dataclass(frozen=True)
class DeadLetter:
    error: BaseException
    category: Category


@dataclass(frozen=True)
class Review:
    errors: list[str]


@dataclass(frozen=True)
class Dropped:
    """Not handled: the workflow had ended (``reason`` says how) before this event came."""

    reason: str


Result = Succeeded | Retry | DeadLetter | Review | Dropped
"""How a handling ended: its outcome, a durable retry, a dead letter, a person's review,
or not at all because the workflow was over."""


@dataclass
class Frame:
    """Where one handling stands: the checkpoint revision it builds on."""

    revision: int | None
    state_version: int
    parked_on: uuid.UUID | None
    state: dict[str, Any] | None = None
    checkpoints: int = field(default=0)
    ended: str | None = None
    """How the workflow ended, if this service saw it end before this handling."""


@dataclass(frozen=True)
class Handled:
    """One handled event on its way to the commit: what arrived and where it stands."""

    event: Event[EventModel]
    rec: Record
    route: On
    frame: Frame
    attempt: int
    failures: list[Failure]
    traceparent: str
    parked_id: int | None
