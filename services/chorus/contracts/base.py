"""Building blocks of every event model.

Models are the single source of truth for the registry: ``make schemas`` writes
``schemas/events/<type>.v<N>.schema.json`` from them and a contract test fails
when a committed file differs from what the model generates.

Models are frozen and strict: a JSON string is never coerced into an integer,
because a consumer on another language would not coerce it either. Date-times
and UUIDs arrive as JSON strings, so those two types opt back into parsing.
"""

from __future__ import annotations

import copy
import re
import unicodedata
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Annotated, Any, ClassVar, TypeGuard, TypeVar
from uuid import UUID

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    SerializerFunctionWrapHandler,
    Strict,
    ValidatorFunctionWrapHandler,
    WrapSerializer,
    WrapValidator,
    create_model,
)
from pydantic.json_schema import JsonSchemaValue


def in_utc(value: datetime) -> datetime:
    """``value`` as UTC. ValueError for a time without an offset, or one whose UTC lies
    outside the years 1 to 9999 (``0001-01-01T00:00:00+01:00``): Python cannot hold it, so
    nothing after could store or compare it (pydantic lets an OverflowError through)."""
    if value.tzinfo is None:
        raise ValueError("date-time must carry a UTC offset (e.g. 2026-01-01T00:00:00Z)")
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:
        raise ValueError("date-time lies outside the years 1 to 9999 in UTC") from None


UtcDateTime = Annotated[datetime, Strict(False), AfterValidator(in_utc)]
"""An RFC 3339 date-time with an offset, normalised to UTC."""

Uuid = Annotated[UUID, Strict(False)]

# Every string and list of a contract is bounded, so no event can carry more than its
# consumers expect to store or show (input is never an infrastructure failure).
Name = Annotated[str, Field(min_length=1, max_length=200)]
"""A short label: a name, a tier, a title."""
REF_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@/#+=-]*$"
Ref = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        pattern=REF_PATTERN,
        description="a reference (id): ASCII letters, digits and . _ : @ / # + = -",
    ),
]
PERSONAL_MARK = "x-personal"
"""The JSON Schema keyword that marks a field as personal data."""
SEALED_PREFIX = "chorus:sealed:v1:"
"""How a sealed (encrypted) personal value starts on the wire (see chorus.privacy.crypto)."""
SEALED_PATTERN = r"^chorus:sealed:v1:[a-z0-9-]{1,40}\.[0-9a-f]{32}:[0-9a-f-]{36}:[A-Za-z0-9_-]+$"
SEALED_MAX = 2_000_000
"""Far above the largest personal field once sealed (base64 of JSON of 20,000 characters
each escaped); the record's size limit bounds it anyway."""


class Sealed(str):
    """A personal value as it travels: AES-GCM ciphertext under its subject's data key,
    ``chorus:sealed:v1:<key id>:<event id>:<base64url nonce + ciphertext>``. A handler that
    did not declare it needs personal data finds this in the field instead of the value;
    the runtime opens it for those that did (chorus.privacy.crypto)."""

    __slots__ = ()


def is_sealed(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and value.startswith(SEALED_PREFIX)


def _accept_sealed(value: Any, then: ValidatorFunctionWrapHandler) -> Any:
    if is_sealed(value):
        if len(value) > SEALED_MAX or not _SEALED.match(value):
            raise ValueError("a malformed sealed value (chorus:sealed:v1:<key>:<event id>:<data>)")
        return Sealed(value)
    return then(value)


def _keep_sealed(value: Any, then: SerializerFunctionWrapHandler) -> Any:
    return str(value) if isinstance(value, Sealed) else then(value)


class _PersonalData:
    """What ``Personal[...]`` adds to a field's type, beside the validator and serializer
    that accept the sealed form in place of the value (and keep it as it is when dumped):
    the JSON Schema says both, with the mark. The compatibility gate sees the sealed
    alternative as part of the mark."""

    def __get_pydantic_json_schema__(self, schema: Any, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        sealed = {
            "type": "string",
            "pattern": SEALED_PATTERN,
            "maxLength": SEALED_MAX,
            "description": "the value sealed under its subject's data key",
        }
        return {"anyOf": [handler(schema), sealed], PERSONAL_MARK: True}


_ACCEPT_SEALED = WrapValidator(_accept_sealed)
_KEEP_SEALED = WrapSerializer(_keep_sealed)
_MARK = _PersonalData()
_PERSONAL_PARTS = (_ACCEPT_SEALED, _KEEP_SEALED, _MARK)


_SEALED = re.compile(SEALED_PATTERN)


def _refuse_sealed(value: Any) -> Any:
    if is_sealed(value):
        raise ValueError("looks sealed: send personal data in clear (over TLS); Chorus seals it itself")
    return value


M = TypeVar("M", bound=BaseModel)


def plain_input(model: type[M]) -> type[M]:
    """``model`` as an API takes it from people: personal fields in clear only. A value in
    the sealed form is refused naming the field (a caller cannot hand Chorus a token to
    open for it), and the JSON Schema shows the plain type. Instances are ``model``'s."""
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if any(m is _MARK for m in info.metadata):
            plain = copy.copy(info)
            plain.metadata = [
                *(m for m in info.metadata if not any(m is part for part in _PERSONAL_PARTS)),
                BeforeValidator(_refuse_sealed),
            ]
            fields[name] = (info.annotation, plain)
    if not fields:
        return model
    found: type[M] = create_model(f"{model.__name__}Input", __base__=model, **fields)
    return found


P = TypeVar("P")
Personal = Annotated[P, _ACCEPT_SEALED, _KEEP_SEALED, _MARK]
"""Personal data: ``document_text: Personal[LongText]``. Its JSON Schema (and the AsyncAPI
document) says ``"x-personal": true``; the runtime seals it under the subject's key before
it leaves the service that wrote it, erasure destroys that key, and the compatibility gate
treats adding or removing the mark as breaking."""
InClear = Annotated[P, BeforeValidator(_refuse_sealed)]
"""Text a person sends an API (a comment, a reason): refused when it looks sealed, so that
nobody can hand Chorus a token of someone else's to open and repeat."""

Text = Annotated[str, Field(max_length=4000)]
"""Free text a person reads: a reason, a summary, a check's description."""
KEYED_PATTERN = r"^hmac-sha256:[0-9a-f]{64}$"
KeyedRef = Annotated[
    str, Field(pattern=KEYED_PATTERN, description="a reference keyed by chorus.privacy.crypto.keyed_ref")
]
"""A person or subject named by HMAC under CHORUS_SUBJECT_KEY, never by name."""
Comment = Annotated[str, Field(max_length=2000)]
"""What a reviewer or operator writes."""
LongText = Annotated[str, Field(max_length=20000)]
"""A document or a body of prose."""
# Explicit classes, not \s: JSON Schema (ECMA-262), Python and Rust disagree on what \s is.
URL_PATTERN = r"^https?://[^\x00-\x20\x7f/?#]+([/?#][^\x00-\x20\x7f]*)?$"
Url = Annotated[str, Field(min_length=1, max_length=2048, pattern=URL_PATTERN, description="an http(s) URL")]
# Characters that show nothing (zero-width, fillers), reorder what is shown (bidi
# controls) or are not text (controls, line and paragraph separators): in an identifier
# they make two ids that look alike compare different, so "vendor-acme" and
# "vendor\u200b-acme" would be two vendors. Unicode categories Cc, Cf, Zl and Zp (every
# bidi control is Cf), plus the fillers that are letters by category. Spaces stay: after
# NFKC every space but U+1680 is U+0020, which looks like what it is.
_INVISIBLE_LETTERS = frozenset("\u115f\u1160\u3164\uffa0")
# The same set in the Basic Multilingual Plane (Unicode 14, Python 3.11), as a JSON Schema
# pattern class for consumers in other languages; the model's check covers every plane.
_INVISIBLE_CLASS = (
    r"\u0000-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2"
    r"\u115f-\u1160\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\u3164\ufeff"
    r"\uffa0\ufff9-\ufffb"
)
# The categories come from the interpreter's Unicode database, which is older on older
# Pythons (3.10 has Unicode 13, where U+0890 and U+0891 are not yet format characters):
# the class is refused as well, so every service refuses the same ids whatever it runs on.
_INVISIBLE_IN_CLASS = re.compile(f"[{_INVISIBLE_CLASS}]")


def is_invisible(char: str) -> bool:
    """A control, format (zero-width, bidi), line or paragraph separator, or filler character."""
    return (
        unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp")
        or char in _INVISIBLE_LETTERS
        or _INVISIBLE_IN_CLASS.match(char) is not None
    )


def invisible_characters(value: str) -> list[str]:
    """The characters of ``value`` that are invisible or control bidi order, as U+XXXX NAME."""
    return [f"U+{ord(c):04X} {unicodedata.name(c, 'unnamed')}" for c in value if is_invisible(c)]


def _visible_nfkc(value: object) -> object:
    if not isinstance(value, str):
        return value  # the strict str check that follows names the wrong type
    normalised = unicodedata.normalize("NFKC", value)
    found = invisible_characters(normalised)
    if found:
        raise ValueError(
            f"contains {', '.join(dict.fromkeys(found))}: invisible and bidi control characters "
            "are refused in identifiers (they make look-alikes)"
        )
    return normalised


VendorId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        pattern=f"^[^{_INVISIBLE_CLASS}]+$",
        description="a vendor id in any script, NFKC-normalised, no invisible or bidi control characters",
    ),
    # After the constraints in this list, so it runs before them: the bounds and the
    # pattern judge the normalised value, and a look-alike gets this clear message.
    BeforeValidator(_visible_nfkc),
]
"""Who gets paid: compared and deduplicated by exact value, so it is normalised (NFKC) and
may not contain characters that make look-alikes."""
Cents = Annotated[int, Field(ge=0, le=2**53 - 1, description="an amount in minor currency units")]
Currency = Annotated[str, Field(pattern=r"^[A-Z]{3}$", description="ISO 4217 code")]
Count = Annotated[int, Field(ge=0, le=2**31 - 1)]


class Model(BaseModel):
    """A frozen, strict value object that is part of a contract (nested or top level)."""

    model_config = ConfigDict(frozen=True, strict=True, extra="ignore")


class EventModel(Model):
    """The payload of one version of one event type."""

    event_type: ClassVar[str]
    version: ClassVar[int]


E = TypeVar("E", bound=type[EventModel])

# (event_type, version) -> model; filled by the @event decorator at import time.
CATALOG: dict[tuple[str, int], type[EventModel]] = {}


def event(event_type: str, version: int) -> Callable[[E], E]:
    """Register a payload model as ``event_type`` at ``version``."""

    def register(cls: E) -> E:
        key = (event_type, version)
        model: type[EventModel] = cls
        clash = {"event_type", "version"} & set(model.model_fields)
        if clash:
            raise TypeError(f"{cls.__name__}: field names {sorted(clash)} are reserved")
        if key in CATALOG and CATALOG[key] is not cls:
            raise ValueError(f"{event_type} v{version} is defined twice")
        cls.event_type = event_type
        cls.version = version
        # The snake_case title names the schema in generated docs (AsyncAPI, errors).
        cls.model_config["title"] = f"{event_type.replace('.', '_')}_v{version}"
        cls.model_rebuild(force=True)
        CATALOG[key] = cls
        return cls

    return register


# Upcasters: (event_type, from_version) -> function turning a payload dict of
# from_version into one of from_version + 1.
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
UPCASTERS: dict[tuple[str, int], Upcaster] = {}


def upcaster(event_type: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register the step ``event_type`` v``from_version`` -> v``from_version + 1``."""

    def register(fn: Upcaster) -> Upcaster:
        key = (event_type, from_version)
        if key in UPCASTERS:
            raise ValueError(f"two upcasters for {event_type} v{from_version}")
        UPCASTERS[key] = fn
        return fn

    return register
