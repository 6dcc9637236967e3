"""How a handling ended (a :data:`Result`), and the checkpoint it built on (a :class:`Frame`)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from chorus.base.errors import Category
from chorus.kernel.service import Outcome

MAX_FAILURES = 1000
"""Failures carried by retry.due and dead letters: the latest ones."""


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
