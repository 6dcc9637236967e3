"""The error taxonomy. Every failure takes one of three paths, and the runtime routes it.

- :class:`TransientError` — the world was briefly unavailable (network, 429, 5xx):
  retry later with exponential backoff and full jitter, through a durable timer.
- :class:`PersistentError` — retrying cannot help (bad input, bad credentials,
  business rule): dead-letter now, with the original bytes.
- :class:`SemanticError` — output that fails validation (an LLM answer without the
  required fields): run the handler again with the error as context, then ask a person.

Any other exception is treated as transient with a small cap, then dead-lettered.

Orthogonal to the path: ``caused_by_input`` says the failure comes from what a record
or a submitter supplied (bytes that do not decode, a value the database refuses, a
callback URL that keeps failing), not from the service's own code. Such dead letters
never count towards the dead-letter guard, which exists to stop a bad deploy.
"""

from __future__ import annotations

from typing import Literal

Category = Literal["transient", "persistent", "semantic", "decode", "unauthorized", "unexpected"]


class ChorusError(Exception):
    category: Category = "unexpected"
    caused_by_input: bool = False


def caused_by_input(error: BaseException) -> bool:
    """True when ``error`` (or the error it was raised from) blames the input, not the code."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if getattr(current, "caused_by_input", False):
            return True
        seen.add(id(current))
        current = current.__cause__
    return False


class TransientError(ChorusError):
    """Retry later. ``retry_after_s`` (e.g. from a Retry-After header) overrides the backoff."""

    category: Category = "transient"

    def __init__(
        self, message: str, *, retry_after_s: float | None = None, caused_by_input: bool = False
    ) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.caused_by_input = caused_by_input


class PersistentError(ChorusError):
    """Never retry: dead-letter at once."""

    category: Category = "persistent"


class NewerStateError(PersistentError):
    """The workflow's checkpoint was written by a newer version of this service (a higher
    state version than this code reads): handling it would drop the fields this version
    does not know and write the rest back. Dead letter at once (the workflow parks behind
    it; nothing is written): run the newer version, then redrive."""


class SemanticError(ChorusError):
    """The handler produced output that fails validation; ``errors`` say how."""

    category: Category = "semantic"

    def __init__(self, message: str, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or [message]


class DecodeError(PersistentError):
    """Raw bytes that are not a valid event of the registry. ``pointer`` names the field."""

    category: Category = "decode"
    caused_by_input = True

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
    """The bytes are not a UTF-8 JSON object (see chorus.contracts.strictjson for the rules)."""


class UnauthorizedError(PersistentError):
    """A record claiming an authority it cannot prove (a decision event not signed by the
    producer the registry names for it, :mod:`chorus.privacy.signing`): dead letter, never a retry."""

    category: Category = "unauthorized"
    caused_by_input = True

    def __init__(self, message: str, *, pointer: str | None = None) -> None:
        super().__init__(message)
        self.pointer = pointer


class UndecodableError(DecodeError):
    """Decoding the bytes raised something unforeseen (an interpreter limit, an upcaster
    that cannot read them). Still the record's fault: dead letter, never a retry."""


class OversizeError(DecodeError):
    """The record is larger than the configured limit."""


class UnknownEventTypeError(DecodeError):
    """The registry has no such event type."""


class UnknownVersionError(DecodeError):
    """The registry, or this consumer, does not know this version of the event type."""


class SchemaValidationError(DecodeError):
    """The envelope or payload does not match its schema."""


class RefusedByStoreError(PersistentError):
    """PostgreSQL refused a value this record's outcome would store (a data error: a
    character it cannot hold, a number out of range, a value over a size limit).
    Dead-letter the record; the rest of the batch and the partition go on. It blames the
    input unless the refusal is of the kind code causes (NOT NULL, CHECK, a wrong type)."""

    caused_by_input = True


class EventTooLargeError(PersistentError):
    """An event to publish is larger than its topic accepts (registry ``max_message_bytes``,
    else the broker's default). ``pointer`` names the largest field when it is known."""

    caused_by_input = True

    def __init__(self, message: str, *, size: int, limit: int, pointer: str | None = None) -> None:
        super().__init__(message)
        self.size, self.limit, self.pointer = size, limit, pointer


class HandlerTimeoutError(TransientError):
    """A handler ran past its task-level timeout."""


# The sealing port's failures (chorus.kernel.ports.Sealing; chorus.privacy.crypto seals).


class KeyDestroyedError(PersistentError):
    """The key was destroyed: its subject was erased. What it sealed is gone."""


class KeyUnreachableError(PersistentError):
    """The key lives in a region whose key store this service is not configured for."""


class KeyUnknownError(PersistentError):
    """No key of that id in its region's store: a forged or garbled token, not an outage."""


class KeyStoreUnavailableError(ConnectionError):
    """The key store did not answer. It is infrastructure, like PostgreSQL: the record is
    tried again (and reported stuck if it lasts), never dead-lettered for it."""


class ConfigError(Exception):
    """The service's configuration cannot work (it does not start)."""


class SigningConfigError(ConfigError):
    """The keys this service needs are missing or unreadable (the service does not start)."""
