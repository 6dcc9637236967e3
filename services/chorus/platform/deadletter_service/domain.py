"""Dead-letter decisions, free of I/O: status transitions, list filters, redrive bytes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, get_args

from chorus.base.compat import fromisoformat
from chorus.contracts.base import in_utc
from chorus.contracts.platform import ErrorCategory
from chorus.contracts.registry import Registry

# A letter is open until an operator resolves it, once: redriven or discarded.
OPEN = "open"
REDRIVEN = "redriven"
DISCARDED = "discarded"
STATUSES = (OPEN, REDRIVEN, DISCARDED)

CATEGORIES: tuple[str, ...] = get_args(ErrorCategory)

Operation = Literal["redrive", "discard"]
_RESOLVES_TO: dict[str, str] = {"redrive": REDRIVEN, "discard": DISCARDED}


class TransitionRefusedError(Exception):
    """The letter is no longer open: it was redriven or discarded already."""

    def __init__(self, op: str, status: str) -> None:
        super().__init__(f"cannot {op} a dead letter that is {status}; only open letters can be")
        self.op = op
        self.status = status


def resolve(status: str, op: Operation) -> str:
    """The status after ``op``; raises :class:`TransitionRefusedError` unless ``status`` is open.

    Only ``open`` moves, so an operation applied twice takes effect once: a second
    redrive of the same letter is refused rather than published again.
    """
    if status != OPEN:
        raise TransitionRefusedError(op, status)
    return _RESOLVES_TO[op]


# -- filters -------------------------------------------------------------------------------

LIST_PARAMETERS = frozenset({"service", "category", "event_type", "status", "since", "until", "limit"})
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_FILTER_CHARS = 200


class FilterError(ValueError):
    """A filter parameter is unusable; ``parameter`` names it (the HTTP 400 says which)."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(f"{parameter}: {message}")
        self.parameter = parameter
        self.message = message


@dataclass(frozen=True)
class LetterFilter:
    """Which letters to list or redrive. None means "any"; the time range is half-open
    on ``dead_lettered_at``: since <= t < until."""

    service: str | None = None
    category: str | None = None
    event_type: str | None = None
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = DEFAULT_LIMIT
    workflow_id: str | None = None
    """One workflow's letters (an operator's request through the gateway; not a list filter)."""

    @property
    def narrows(self) -> bool:
        """True when something other than status and limit restricts the match."""
        return any(
            v is not None
            for v in (self.service, self.category, self.event_type, self.since, self.until, self.workflow_id)
        )


def parse_filter(
    params: Mapping[str, object],
    *,
    allowed: frozenset[str] = LIST_PARAMETERS,
    max_limit: int = MAX_LIMIT,
) -> LetterFilter:
    """Validate query parameters (strings) or a JSON filter object (strings and ints).

    Unknown names are refused rather than ignored, so a typo such as ``catgory``
    cannot silently widen a bulk redrive to every letter. Empty strings mean "any".
    """
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise FilterError(unknown[0], f"unknown parameter; expected one of {sorted(allowed)}")
    text = {name: text_filter(name, value) for name, value in params.items() if name != "limit"}
    category = text.get("category")
    if category is not None and category not in CATEGORIES:
        raise FilterError("category", f"{category!r} is not one of {list(CATEGORIES)}")
    status = text.get("status")
    if status is not None and status not in STATUSES:
        raise FilterError("status", f"{status!r} is not one of {list(STATUSES)}")
    since = _instant("since", text.get("since"))
    until = _instant("until", text.get("until"))
    if since is not None and until is not None and until <= since:
        raise FilterError("until", "must be later than since")
    return LetterFilter(
        service=text.get("service"),
        category=category,
        event_type=text.get("event_type"),
        status=status,
        since=since,
        until=until,
        limit=parse_limit(params.get("limit"), max_limit),
    )


def text_filter(name: str, value: object) -> str | None:
    """A filter's text, None when absent or empty; at most MAX_FILTER_CHARS characters."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise FilterError(name, f"must be a string, got {type(value).__name__}")
    if len(value) > MAX_FILTER_CHARS:
        raise FilterError(name, f"is {len(value):,} characters long; at most {MAX_FILTER_CHARS}")
    return value.strip() or None


def _instant(name: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = fromisoformat(value)
    except ValueError:
        raise FilterError(name, f"{value!r} is not an ISO 8601 date-time") from None
    if parsed.tzinfo is None:
        # A naive time means a different instant on every server; refuse to guess.
        raise FilterError(name, f"{value!r} lacks a UTC offset (e.g. 2026-01-01T00:00:00Z)")
    try:
        return in_utc(parsed)
    except ValueError as exc:
        raise FilterError(name, f"{value!r}: {exc}") from None


def parse_limit(value: object, max_limit: int = MAX_LIMIT) -> int:
    """A page size in 1..max_limit; absent or empty means the default (100)."""
    if value is None or value == "":
        return min(DEFAULT_LIMIT, max_limit)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise FilterError("limit", f"must be an integer, got {type(value).__name__}")
    try:
        limit = int(value)
    except ValueError:
        raise FilterError("limit", f"{value!r} is not an integer") from None
    if not 1 <= limit <= max_limit:
        raise FilterError("limit", f"must be between 1 and {max_limit}, got {limit}")
    return limit


# -- redrive --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RedriveValue:
    """The bytes to publish and, when they are an envelope, the attempt they now carry."""

    value: bytes
    attempt: int | None


def redrive_refusal(registry: Registry, service: str, topic: str) -> str | None:
    """Why a letter of ``service`` may not go back onto ``topic``, or None when it may.

    A letter names its service and its original topic itself, and any runtime principal may
    write ``event.dead_lettered``: a forged letter naming the timers' topic and a service
    that never reads it would have an operator's redrive (one at a time or in bulk) put its
    bytes wherever the dead-letter service may write. So a redrive goes back only to a
    topic the registry says the letter's service reads, which is where a real letter came
    from."""
    spec = registry.topic_of_physical(topic)
    if spec is None:
        return f"{topic!r} is not a topic of the registry"
    if spec.topic not in registry.reads(service):
        return f"{service} does not read {spec.topic}: a redrive goes back only to a topic its service reads"
    return None


def redrive_value(raw: bytes, attempts: int) -> RedriveValue:
    """The record value a redrive publishes.

    A JSON envelope gets ``attempt`` = one more than the letter's attempts (or the
    envelope's own attempt, if that is higher): the consuming service lets a
    dead-lettered event through again only with a higher attempt than the one it
    gave up on. Everything else in the envelope, its event id included, stays.
    Bytes that are not an envelope (a poison record) go back unchanged.
    """
    envelope = parse_envelope(raw)
    if envelope is None:
        return RedriveValue(raw, None)
    current = envelope.get("attempt")
    if not isinstance(current, int) or isinstance(current, bool):
        current = 1
    attempt = max(attempts, current) + 1
    bumped = {**envelope, "attempt": attempt}
    return RedriveValue(json.dumps(bumped, separators=(",", ":")).encode(), attempt)


def parse_envelope(raw: bytes) -> dict[str, Any] | None:
    """The record as an envelope dict, or None when it is not JSON shaped like one."""
    parsed, ok = parse_json(raw)
    if not ok or not isinstance(parsed, dict):
        return None
    if not isinstance(parsed.get("event_id"), str) or not isinstance(parsed.get("event_type"), str):
        return None
    if not isinstance(parsed.get("payload"), dict):
        return None
    return parsed


def parse_json(raw: bytes) -> tuple[Any, bool]:
    """``(value, True)`` when ``raw`` is UTF-8 JSON, else ``(None, False)``.

    The flag is separate because the JSON text ``null`` is a valid document.
    """
    try:
        return json.loads(raw.decode("utf-8")), True
    except (UnicodeDecodeError, ValueError):
        return None, False


def text_or_none(raw: bytes | None) -> str | None:
    """Bytes as text for people to read, when they are UTF-8; base64 is always given too."""
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


# -- metrics ---------------------------------------------------------------------------------


def age_s(now: datetime, since: datetime) -> float:
    """Seconds a letter has waited; never negative (clocks of producers drift)."""
    return max(0.0, (now - since).total_seconds())
