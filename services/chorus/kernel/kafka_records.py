"""Record batches as a broker may hold them, read so that no bytes stop a consumer.

A Kafka header key is a string on the wire, but the broker stores whatever bytes a
producer sent. aiokafka decodes header keys strictly while it unpacks a fetched batch,
before any Chorus code sees a record: one record whose header key is not UTF-8 raises out
of ``getmany``, the service exits, restarts onto the same record and exits again (one such
record on ``chorus.timers`` stopped every timer). aiokafka has no hook for it, so the
fetcher gets :class:`TolerantRecords` in place of its ``MemoryRecords``
(:func:`install`). Batches still parse in aiokafka's C extension; only a batch that fails on
a header key is read again by aiokafka's pure-Python reader, keeping that key's bytes as
surrogates (``surrogateescape``). The decode step then dead-letters the record with its raw
bytes (:func:`header_keys_not_utf8`) and the partition flows on.

The pure-Python reader's internals (``_DefaultRecordBatchPy``, its ``_buffer``) are
aiokafka's; the version is pinned and tests/kernel/test_kafka_records.py reads a real
batch through both paths, so an upgrade that moves them fails there, not in production.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Any, SupportsIndex

from aiokafka.consumer import fetcher
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatch, _DefaultRecordBatchPy
from aiokafka.record.legacy_records import LegacyRecordBatch, _LegacyRecordBatchPy

from chorus.base.errors import DecodeError

_LOG_OVERHEAD = 12
"""BaseOffset (int64) and Length (int32): the same leading bytes in every message format."""
_MAGIC_AT = 16
_MIN_BATCH = _LOG_OVERHEAD + _LegacyRecordBatchPy.RECORD_OVERHEAD_V0


class _Lenient(bytearray):
    """Batch bytes whose slices decode without failing: bytes that are not UTF-8 become
    lone surrogates, which nothing downstream can mistake for a real header name."""

    def __getitem__(self, index: SupportsIndex | slice) -> Any:
        found = super().__getitem__(index)
        return _Lenient(found) if isinstance(index, slice) else found

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return super().decode(encoding, "surrogateescape")


def _leniently(piece: memoryview, after: int | None) -> Iterator[Any]:
    """The records of the batch ``piece`` past offset ``after``, header keys kept as surrogates."""
    batch = _DefaultRecordBatchPy(piece)
    batch._maybe_uncompress()
    batch._buffer = _Lenient(batch._buffer)
    for record in batch:
        if after is None or record.offset > after:
            yield record


class _Batch:
    """A v2 record batch read by aiokafka's C extension, and again leniently if a header
    key in it is not UTF-8. Everything but iteration is the C batch's."""

    def __init__(self, piece: memoryview) -> None:
        self._piece = piece
        self._batch = DefaultRecordBatch(piece)
        self._records: Iterator[Any] | None = None
        self._last: int | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)

    def __iter__(self) -> _Batch:
        return self

    def __next__(self) -> Any:
        if self._records is None:
            self._records = iter(self._batch)
        try:
            record = next(self._records)
        except UnicodeDecodeError:
            self._records = _leniently(self._piece, self._last)
            record = next(self._records)
        self._last = record.offset
        return record


class TolerantRecords:
    """aiokafka's ``MemoryRecords`` (the batches of one fetched partition), batch by batch."""

    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)
        self._pos = 0

    def size_in_bytes(self) -> int:
        return len(self._data)

    def _next_end(self) -> int | None:
        if len(self._data) - self._pos < _LOG_OVERHEAD:
            return None
        (length,) = struct.unpack_from(">i", self._data, self._pos + 8)
        end = self._pos + _LOG_OVERHEAD + length
        return end if end <= len(self._data) else None  # a partial batch: fetched again

    def has_next(self) -> bool:
        return self._next_end() is not None

    def next_batch(self) -> _Batch | LegacyRecordBatch | None:
        end = self._next_end()
        if end is None:
            return None
        piece, self._pos = self._data[self._pos : end], end
        if len(piece) < _MIN_BATCH:
            raise CorruptRecordException(f"a record batch of {len(piece)} bytes is smaller than any can be")
        magic = piece[_MAGIC_AT]
        return _Batch(piece) if magic >= 2 else LegacyRecordBatch(piece, magic)


def install() -> None:
    """Every consumer of this process reads fetched batches with :class:`TolerantRecords`."""
    fetcher.MemoryRecords = TolerantRecords


def header_keys_not_utf8(headers: Iterable[tuple[str, Any]]) -> list[str]:
    """The header keys that were not UTF-8 on the wire, as the bytes they were, in order."""
    found = []
    for key, _ in headers:
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            found.append(repr(key.encode("utf-8", "surrogateescape")))
    return found


def check_headers(headers: Iterable[tuple[str, Any]]) -> None:
    """DecodeError when a header key was not UTF-8: the record is input no producer of ours
    writes, so it is dead-lettered like any other record that does not decode."""
    if unreadable := header_keys_not_utf8(headers):
        raise DecodeError(f"header key {unreadable[0]} is not UTF-8", pointer="/headers")
