"""Kafka bytes <-> validated events. The only way in or out of a topic.

:func:`decode` turns raw record bytes into an :class:`Event` (envelope plus typed
payload) or raises a precise :class:`~chorus.base.errors.DecodeError` subclass naming
the failing field with a JSON pointer, what was expected and what arrived.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from chorus.base.errors import (
    DecodeError,
    NotJSONError,
    OversizeError,
    SchemaValidationError,
    UndecodableError,
    UnknownEventTypeError,
    UnknownVersionError,
)
from chorus.contracts import strictjson
from chorus.contracts.base import CATALOG, UPCASTERS, EventModel
from chorus.contracts.envelope import Envelope
from chorus.contracts.registry import Registry

DEFAULT_MAX_BYTES = 1_048_576
P = TypeVar("P", bound=EventModel)


@dataclass(frozen=True)
class Event(Generic[P]):
    """A decoded event: the envelope, the payload as the consumer's model, the original bytes."""

    envelope: Envelope
    payload: P
    raw: bytes
    received_version: int

    @property
    def event_type(self) -> str:
        return self.envelope.event_type

    @property
    def workflow_id(self) -> str:
        return self.envelope.workflow_id


def pointer(loc: tuple[int | str, ...], prefix: str = "") -> str:
    parts = [str(p).replace("~", "~0").replace("/", "~1") for p in loc]
    return prefix + "".join("/" + p for p in parts) if parts else prefix or "/"


def _short(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def validation_error(exc: ValidationError, prefix: str, what: str) -> SchemaValidationError:
    errors = exc.errors(include_url=False)
    first = errors[0]
    err = SchemaValidationError(
        f"{what} is invalid: {first['msg']}",
        pointer=pointer(tuple(first["loc"]), prefix),
        expected=first["type"],
        got=_short(first.get("input")),
    )
    err.all_errors = [  # type: ignore[attr-defined]
        f"{pointer(tuple(e['loc']), prefix)}: {e['msg']}" for e in errors
    ]
    return err


def parse_json(raw: bytes, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, Any]:
    """The record's bytes as a JSON object, under the rules of :mod:`chorus.contracts.strictjson`."""
    if len(raw) > max_bytes:
        raise OversizeError(
            "record too large", expected=f"at most {max_bytes} bytes", got=f"{len(raw)} bytes"
        )
    try:
        data = strictjson.loads(raw)
    except strictjson.StrictJSONError as exc:
        if exc.pointer is not None:  # well-formed JSON holding text PostgreSQL cannot store
            raise SchemaValidationError(
                str(exc).removeprefix(f"{exc.pointer}: "),
                pointer=exc.pointer,
                expected="text without NUL or unpaired surrogates",
                got="such text",
            ) from None
        raise NotJSONError(
            str(exc),
            expected="a UTF-8 JSON object (RFC 7493)",
            got=_short(raw[:40].decode("latin-1")),
        ) from None
    if not isinstance(data, dict):
        raise NotJSONError("not a JSON object", expected="object", got=type(data).__name__)
    return data


def upcast(event_type: str, payload: dict[str, Any], src: int, dst: int) -> dict[str, Any]:
    """Chain registered upcasters from ``src`` to ``dst``."""
    for version in range(src, dst):
        step = UPCASTERS.get((event_type, version))
        if step is None:
            raise UnknownVersionError(
                f"no upcaster from v{version} to v{version + 1}",
                pointer="/schema_version",
                expected=f"v{dst} or an upcaster chain to it",
                got=f"v{src}",
            )
        payload = step(dict(payload))
    return payload


def decode(
    raw: bytes | None,
    registry: Registry,
    *,
    accept: Mapping[str, int] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Event[EventModel]:
    """Validate raw bytes as an event of the registry.

    ``accept`` maps each event type the consumer handles to the version its code is
    written for; older versions are upcast to it, newer ones are refused.
    Raises a subclass of DecodeError, and nothing else, whatever the bytes are;
    never returns a partially valid event.
    """
    try:
        return _decode(raw, registry, accept, max_bytes)
    except DecodeError:
        raise
    except Exception as exc:
        # Anything else the bytes provoked (an interpreter limit, an upcaster that
        # chokes on them) is still a property of this record: a dead letter, not a
        # reason to hold the partition.
        raise UndecodableError(
            f"decoding raised {type(exc).__name__}: {exc}"[:500],
            expected="a valid event of the registry",
            got=_short(raw[:40].decode("latin-1")) if raw else "nothing",
        ) from exc


def _decode(
    raw: bytes | None, registry: Registry, accept: Mapping[str, int] | None, max_bytes: int
) -> Event[EventModel]:
    if raw is None:
        raise NotJSONError("record has no value (tombstone)", expected="a JSON object", got="null")
    data = parse_json(raw, max_bytes)
    event_type = data.get("event_type")
    if not isinstance(event_type, str):
        raise SchemaValidationError(
            "missing event_type", pointer="/event_type", expected="string", got=_short(event_type)
        )
    if not registry.knows(event_type):
        close = difflib.get_close_matches(event_type, registry.event_types(), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownEventTypeError(
            f"unknown event type {event_type!r}{hint}",
            pointer="/event_type",
            expected="an event type of the registry",
            got=repr(event_type),
        )
    version = data.get("schema_version")
    known = registry.versions(event_type)
    if not isinstance(version, int) or isinstance(version, bool) or version not in known:
        raise UnknownVersionError(
            f"unknown version of {event_type}",
            pointer="/schema_version",
            expected=f"one of {known}",
            got=_short(version),
        )
    try:
        envelope = Envelope.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, "", "envelope") from None

    target = accept.get(event_type, version) if accept is not None else version
    payload_data = envelope.payload
    if version > target and registry.compatibility(event_type) not in ("forward", "full"):
        raise UnknownVersionError(
            f"this consumer reads {event_type} up to v{target}; roll out consumers first",
            pointer="/schema_version",
            expected=f"v{target} or older",
            got=f"v{version}",
        )
    # A newer version under forward/full compatibility is readable with the
    # consumer's older model: it only added fields, which the model ignores.
    if version < target:
        # Valid as written first: an upcaster may drop the very field that is wrong, and a
        # record invalid at its own version is a dead letter for every consumer alike.
        try:
            CATALOG[(event_type, version)].model_validate(payload_data)
        except ValidationError as exc:
            raise validation_error(exc, "/payload", f"{event_type} v{version} payload") from None
        payload_data = upcast(event_type, payload_data, version, target)
    model = CATALOG[(event_type, target)]
    try:
        payload = model.model_validate(payload_data)
    except ValidationError as exc:
        raise validation_error(exc, "/payload", f"{event_type} v{target} payload") from None
    return Event(envelope=envelope, payload=payload, raw=raw, received_version=version)


def encode(envelope: Envelope) -> bytes:
    return envelope.model_dump_json(exclude_none=False).encode()
