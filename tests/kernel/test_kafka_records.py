"""Fetched record batches are read whatever bytes their header keys hold (no broker needed:
the batches are built byte for byte as a broker returns them)."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.consumer import fetcher
from aiokafka.record.default_records import DefaultRecordBatch, _DefaultRecordBatchBuilderPy
from aiokafka.record.memory_records import MemoryRecords

import chorus.kernel.kafka  # noqa: F401  (installs the reader)
from chorus.kernel.kafka_records import TolerantRecords, header_keys_not_utf8
from tests.support.kafka import raw_header_key

GZIP = 1


def batch(headers: list[list[tuple[str, bytes]]], *, base_offset: int = 0, compression: int = 0) -> bytes:
    """One v2 batch with a record per entry of ``headers`` (values v0, v1, …)."""
    builder = _DefaultRecordBatchBuilderPy(
        2,
        compression,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, record_headers in enumerate(headers):
        builder.append(i, timestamp=None, key=b"k", value=f"v{i}".encode(), headers=record_headers)
    data = bytearray(builder.build())
    data[0:8] = base_offset.to_bytes(8, "big")
    return bytes(data)


def read(data: bytes) -> list[tuple[int, bytes, list[tuple[str, Any]]]]:
    records = TolerantRecords(data)
    found = []
    while records.has_next():
        current = records.next_batch()
        assert current is not None and current.validate_crc()
        found += [(r.offset, r.value, list(r.headers)) for r in current]
    return found


BAD = [[("trace", b"1")], [(raw_header_key(b"\xff\xfekey"), b"2"), ("after", b"3")], [("ok", b"4")]]


def test_aiokafka_alone_stops_at_a_header_key_that_is_not_utf8() -> None:
    """Why the reader exists: aiokafka's own raises, and a poll that raises never gets past it."""
    records = MemoryRecords(batch(BAD))
    with pytest.raises(UnicodeDecodeError):
        list(records.next_batch())


@pytest.mark.parametrize("compression", [0, GZIP], ids=["plain", "gzip"])
def test_every_record_of_every_batch_is_read_and_only_the_bad_key_is_marked(compression: int) -> None:
    data = batch(BAD, compression=compression) + batch(
        [[("x", b"5")]], base_offset=3, compression=compression
    )
    found = read(data)
    assert [(offset, value) for offset, value, _ in found] == [(0, b"v0"), (1, b"v1"), (2, b"v2"), (3, b"v0")]
    assert [header_keys_not_utf8(headers) for _, _, headers in found] == [[], ["b'\\xff\\xfekey'"], [], []]
    assert found[1][2][1] == ("after", b"3")  # the rest of the record is read as written


def test_batches_without_such_keys_are_read_by_aiokafkas_c_reader() -> None:
    assert fetcher.MemoryRecords is TolerantRecords
    records = TolerantRecords(batch([[("ok", b"1")]]))
    current = records.next_batch()
    assert type(current._batch) is DefaultRecordBatch  # type: ignore[union-attr]
    assert DefaultRecordBatch.__module__.startswith("aiokafka.record._crecords")


def test_a_partial_batch_at_the_end_of_a_fetch_is_left_for_the_next_fetch() -> None:
    whole = batch([[("ok", b"1")]])
    records = TolerantRecords(whole + whole[:30])
    assert records.next_batch() is not None
    assert not records.has_next() and records.next_batch() is None
    assert records.size_in_bytes() == len(whole) + 30
