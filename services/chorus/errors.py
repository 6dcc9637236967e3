"""The error taxonomy. Every failure takes one of three paths, and the runtime routes it.

- :class:`TransientError` — the world was briefly unavailable (network, 429, 5xx):
  retry later with exponential backoff and full jitter, through a durable timer.
- :class:`PersistentError` — retrying cannot help (bad input, bad credentials,
  business rule): dead-letter now, with the original bytes.
- :class:`SemanticError` — output that fails validation (an LLM answer without the
  required fields): run the handler again with the error as context, then ask a person.

Any other exception is treated as transient with a small cap, then dead-lettered.
"""

from __future__ import annotations

from typing import Literal

Category = Literal["transient", "persistent", "semantic", "decode", "unexpected"]


class ChorusError(Exception):
    category: Category = "unexpected"


class TransientError(ChorusError):
    """Retry later. ``retry_after_s`` (e.g. from a Retry-After header) overrides the backoff."""

    category: Category = "transient"

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class PersistentError(ChorusError):
    """Never retry: dead-letter at once."""

    category: Category = "persistent"


class SemanticError(ChorusError):
    """The handler produced output that fails validation; ``errors`` say how."""

    category: Category = "semantic"

    def __init__(self, message: str, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or [message]


class DecodeError(PersistentError):
    """Raw bytes that are not a valid event of the registry. ``pointer`` names the field."""

    category: Category = "decode"

    def __init__(
        self,
        message: str,
        *,
        pointer: str | None = None,
        expected: str | None = None,
        got: str | None = None,
    ) -> None:
        detail = message
        if pointer is not None:
            detail = f"{pointer}: {message}"
        if expected is not None or got is not None:
            detail += f" (expected {expected}, got {got})"
        super().__init__(detail)
        self.pointer = pointer
        self.expected = expected
        self.got = got


class NotJSONError(DecodeError):
    """The bytes are not a UTF-8 JSON object."""


class OversizeError(DecodeError):
    """The record is larger than the configured limit."""


class UnknownEventTypeError(DecodeError):
    """The registry has no such event type."""


class UnknownVersionError(DecodeError):
    """The registry, or this consumer, does not know this version of the event type."""


class SchemaValidationError(DecodeError):
    """The envelope or payload does not match its schema."""


class HandlerTimeoutError(TransientError):
    """A handler ran past its task-level timeout."""
