"""A Kafka record as the runtime sees it, independent of the client library."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

from chorus.contracts.platform import MAX_HEADERS, KafkaHeader, OriginalRecord
from chorus.contracts.strictjson import storable


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp_ms: int | None = None
    fetched_ns: int = field(default=0, compare=False)
    """When the consumer fetched it (hoptrace), 0 when not traced."""

    @property
    def workflow_key(self) -> str:
        """Lane key: the message key (workflow id), or the partition for keyless records."""
        if self.key:
            return self.key.decode("utf-8", "replace")
        return f"{self.topic}/{self.partition}"


def b64_or_none(data: bytes | None) -> str | None:
    """The bytes as base64 text, as events carry them (None stays None)."""
    return base64.b64encode(data).decode() if data is not None else None


def to_original(rec: Record) -> OriginalRecord:
    """The record as it was read. Header keys are made storable (a NUL or a lone surrogate
    spelled ``\\u0000``) and at most MAX_HEADERS headers are repeated (the count of the
    rest is kept), so that carrying any record, however hostile, never fails."""
    headers = rec.headers[:MAX_HEADERS]
    return OriginalRecord(
        topic=rec.topic,
        partition=rec.partition,
        offset=rec.offset,
        key_b64=b64_or_none(rec.key),
        value_b64=b64_or_none(rec.value) or "",
        headers=[KafkaHeader(key=storable(k)[:32767], value_b64=b64_or_none(v)) for k, v in headers],
        headers_omitted=(len(rec.headers) - MAX_HEADERS) if len(rec.headers) > MAX_HEADERS else None,
        timestamp_ms=rec.timestamp_ms,
    )


def record_from_original(original: OriginalRecord) -> Record:
    """The record ``original`` describes; ValueError when its base64 does not decode."""
    return Record(
        topic=original.topic,
        partition=original.partition,
        offset=original.offset,
        key=base64.b64decode(original.key_b64, validate=True) if original.key_b64 is not None else None,
        value=base64.b64decode(original.value_b64, validate=True),
        headers=tuple(
            (h.key, base64.b64decode(h.value_b64, validate=True) if h.value_b64 is not None else b"")
            for h in original.headers
        ),
        timestamp_ms=original.timestamp_ms,
    )
