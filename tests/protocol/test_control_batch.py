"""Transaction markers: Kafka's control batch byte for byte, parsed back, and checked by kafka-python."""

from __future__ import annotations

import struct

import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from protocol.control_batch import Marker, build_marker_batch, parse_marker
from protocol.record_batch import CorruptBatchError, _seal, encode_record, parse_header, validate_batch

HEADER = struct.Struct(">qiibIhiqqqhii")


def by_hand(pid: int, epoch: int, type_id: int, coordinator_epoch: int, ts: int, leader_epoch: int = -1) -> bytes:
    """The batch MemoryRecords.withEndTransactionMarker writes, assembled field by field."""
    key = struct.pack(">hh", 0, type_id)
    value = struct.pack(">hi", 0, coordinator_epoch)
    # record: length 16 (zigzag 0x20), attributes 0, timestamp delta 0, offset delta 0,
    # key length 4 (zigzag 0x08), key, value length 6 (zigzag 0x0c), value, no headers
    record = bytes([0x20, 0, 0, 0, 0x08]) + key + bytes([0x0C]) + value + b"\x00"
    assert len(record) == 17
    body = bytearray(HEADER.size) + record
    HEADER.pack_into(body, 0, 0, len(body) - 12, leader_epoch, 2, 0, 0x30, 0, ts, ts, pid, epoch, -1, 1)
    struct.pack_into(">I", body, 17, crc32c.crc32c(bytes(body[21:])))
    return bytes(body)


def test_commit_and_abort_markers_match_kafkas_bytes() -> None:
    assert build_marker_batch(42, 3, True, 7, 1_700_000_000_000) == by_hand(42, 3, 1, 7, 1_700_000_000_000)
    assert build_marker_batch(2**40, 0, False, 0, 5) == by_hand(2**40, 0, 0, 0, 5)
    assert build_marker_batch(1, 2, True, 3, 4, partition_leader_epoch=9) == by_hand(1, 2, 1, 3, 4, 9)


def test_marker_header_fields() -> None:
    b = build_marker_batch(42, 3, False, 11, 1234)
    h = validate_batch(b)
    assert (h.base_offset, h.last_offset_delta, h.record_count, h.base_sequence) == (0, 0, 1, -1)
    assert h.is_control and h.is_transactional and h.compression == 0 and not h.log_append_time
    assert (h.producer_id, h.producer_epoch, h.base_timestamp, h.max_timestamp) == (42, 3, 1234, 1234)
    assert len(b) == 78  # Kafka: RECORD_BATCH_OVERHEAD 61 + CURRENT_END_TXN_SCHEMA_RECORD_SIZE 17


def test_kafka_python_reads_our_markers() -> None:
    for commit in (True, False):
        batch = DefaultRecordBatch(build_marker_batch(42, 3, commit, 7, 1000))
        assert batch.validate_crc() and batch.is_control_batch and batch.is_transactional
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 3, -1)
        records = list(batch)
        assert len(records) == 1
        assert (records[0].commit, records[0].abort, records[0].version) == (commit, not commit, 0)
        assert records[0].timestamp == 1000
        assert struct.unpack(">hi", records[0].value) == (0, 7)


def test_kafka_pythons_batch_with_the_control_bit_equals_ours() -> None:
    """kafka-python builds the batch (it cannot set the control bit): set it, re-CRC, compare."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True, producer_id=42,
                                        producer_epoch=3, base_sequence=-1, batch_size=1 << 20)
    builder.append(0, timestamp=1000, key=struct.pack(">hh", 0, 1), value=struct.pack(">hi", 0, 7), headers=[])
    theirs = bytearray(builder.build())
    struct.pack_into(">i", theirs, 12, -1)  # kafka-python leaves the leader epoch 0 (outside the CRC)
    struct.pack_into(">h", theirs, 21, struct.unpack_from(">h", theirs, 21)[0] | 0x20)
    struct.pack_into(">I", theirs, 17, crc32c.crc32c(bytes(theirs[21:])))
    assert build_marker_batch(42, 3, True, 7, 1000) == bytes(theirs)


def test_parse_round_trip() -> None:
    assert parse_marker(build_marker_batch(1, 0, True, 5, 0)) == Marker(True, 5)
    assert parse_marker(build_marker_batch(1, 0, False, -1, 0)) == Marker(False, -1)
    assert parse_marker(build_marker_batch(1, 0, False, 2**31 - 1, 0)) == Marker(False, 2**31 - 1)


def control(records: list[tuple[bytes | None, bytes | None]]) -> bytes:
    body = b"".join(encode_record(i, 0, k, v) for i, (k, v) in enumerate(records))
    return _seal(body, 0, -1, 0x30, max(len(records) - 1, 0), 0, 0, 1, 0, -1, len(records))


def test_an_empty_control_batch_and_other_control_types_carry_no_marker() -> None:
    assert parse_marker(control([])) is None  # compaction emptied it
    for kraft_type in (2, 3, 4, 5, 6, 99):
        assert parse_marker(control([(struct.pack(">hh", 0, kraft_type), b"\x00\x00")])) is None


def test_newer_versions_are_read_as_version_0() -> None:
    key = struct.pack(">hh", 3, 1) + b"extra"
    value = struct.pack(">hi", 1, 12) + b"more"
    assert parse_marker(control([(key, value)])) == Marker(True, 12)


@pytest.mark.parametrize("key,value", [
    (None, struct.pack(">hi", 0, 1)),  # no key
    (b"\x00\x00\x00", struct.pack(">hi", 0, 1)),  # key too short
    (struct.pack(">hh", -1, 1), struct.pack(">hi", 0, 1)),  # negative key version
    (struct.pack(">hh", 0, 0), None),  # marker without a value
    (struct.pack(">hh", 0, 1), b"\x00\x00\x00\x00\x01"),  # value too short
    (struct.pack(">hh", 0, 1), struct.pack(">hi", -2, 1)),  # negative value version
])
def test_bad_marker_records_are_corrupt(key: bytes | None, value: bytes | None) -> None:
    with pytest.raises(CorruptBatchError):
        parse_marker(control([(key, value)]))


def test_garbage_is_corrupt() -> None:
    good = build_marker_batch(1, 0, True, 5, 0)
    flipped = bytearray(good)
    flipped[-3] ^= 0xFF
    for bad in (b"", b"\x00" * 20, good[:-1], good + b"\x00", bytes(flipped)):
        with pytest.raises(CorruptBatchError):
            parse_marker(bad)
    assert parse_marker(bytes(flipped), verify_crc=False) == Marker(True, 0xFF05), "the CRC is what caught it"
    not_control = bytearray(good)
    struct.pack_into(">h", not_control, 21, 0x10)
    struct.pack_into(">I", not_control, 17, crc32c.crc32c(bytes(not_control[21:])))
    assert not parse_header(bytes(not_control)).is_control
    with pytest.raises(CorruptBatchError):
        parse_marker(bytes(not_control))
