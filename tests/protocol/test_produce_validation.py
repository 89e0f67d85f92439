"""validate_produce on bytes: the timestamp rules and LogAppendTime, which the wire tests do not reach, and
record lies through both record readers (aiokafka's Cython reader and our Python walker)."""

from __future__ import annotations

import struct

import crc32c
import pytest

from protocol import record_reader
from protocol.errors import ErrorCode
from protocol.produce_validation import Checked, Refusal, Rules, stamp_log_append_time, validate_produce
from protocol.record_batch import build_batch, decode_batch, validate_batch

NOW = 1_700_000_000_000


def batch(*timestamps: int) -> bytes:
    return build_batch([(b"k%d" % i, b"v", (), ts) for i, ts in enumerate(timestamps)])


def test_create_time_limits_name_each_offending_record() -> None:
    rules = Rules(max_batch_bytes=1 << 20, timestamp_before_max_ms=1000, timestamp_after_max_ms=500)
    assert isinstance(validate_produce(batch(NOW - 1000, NOW + 500), rules, NOW), Checked)
    got = validate_produce(batch(NOW, NOW - 1001, NOW + 501), rules, NOW)
    assert isinstance(got, Refusal) and got.error_code == ErrorCode.INVALID_TIMESTAMP
    assert [i for i, _ in got.record_errors] == [1, 2]


def test_keyless_records_are_refused_only_on_compacted_topics() -> None:
    keyless = build_batch([(None, b"v", (), NOW), (b"k", b"v", (), NOW)])
    assert isinstance(validate_produce(keyless, Rules(max_batch_bytes=1 << 20), NOW), Checked)
    got = validate_produce(keyless, Rules(max_batch_bytes=1 << 20, compacted=True), NOW)
    assert isinstance(got, Refusal) and got.error_code == ErrorCode.INVALID_RECORD
    assert [i for i, _ in got.record_errors] == [0]


def test_log_append_time_stamps_the_batch() -> None:
    stamped = stamp_log_append_time(memoryview(batch(NOW - 5, NOW - 3)), NOW + 7)
    validate_batch(stamped)  # the CRC is right
    header, records = decode_batch(stamped)
    assert header.log_append_time and header.max_timestamp == NOW + 7
    assert [r.timestamp for r in records] == [NOW + 7, NOW + 7]


def test_record_errors_are_bounded() -> None:
    many = batch(*([NOW - 10_000] * 500))
    got = validate_produce(many, Rules(max_batch_bytes=1 << 20, timestamp_before_max_ms=1), NOW)
    assert isinstance(got, Refusal) and len(got.record_errors) == 100


@pytest.fixture(params=["c-reader", "python-walker"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "python-walker":
        monkeypatch.setattr(record_reader, "_C_READER", False)
    else:
        assert record_reader.c_reader() is not None, "aiokafka's Cython reader is a dependency"
    return request.param


def resealed(b: bytearray) -> bytes:
    b[17:21] = struct.pack(">I", crc32c.crc32c(bytes(b[21:])))
    return bytes(b)


def lie(pos: int, value: int, codec: int = 0) -> bytes:
    b = bytearray(build_batch([(b"key%d" % i, b"value%d" % i, (("h", b"x"),) if i == 1 else (), NOW + i)
                               for i in range(3)]))
    b[61 + pos] = value
    return resealed(b)


@pytest.mark.parametrize(("name", "batch", "index"), [
    ("record length past the batch", lie(0, 0x7E), 0),
    ("key length past the record", lie(4, 0x40), 0),
    ("a null key length other than -1", lie(4, 0x03), 0),
    ("offset delta 5 on record 0", lie(3, 10), 0),
])
def test_record_lies_are_refused_by_either_reader(reader: str, name: str, batch: bytes, index: int) -> None:
    got = validate_produce(batch, Rules(max_batch_bytes=1 << 20), NOW)
    assert isinstance(got, Refusal) and got.error_code == ErrorCode.INVALID_RECORD, (reader, name, got)
    assert [i for i, _ in got.record_errors] == [index], got


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_valid_batches_pass_either_reader(reader: str, codec: int) -> None:
    batch = build_batch([(b"k%d" % i, b"v" * i, (("h", b"%d" % i),), NOW + i) for i in range(300)],
                        compression=codec)
    assert isinstance(validate_produce(batch, Rules(max_batch_bytes=1 << 20), NOW), Checked)
    keyless = build_batch([(None, b"v", (), NOW)] * 3, compression=codec)
    got = validate_produce(keyless, Rules(max_batch_bytes=1 << 20, compacted=True), NOW)
    assert isinstance(got, Refusal) and [i for i, _ in got.record_errors] == [0, 1, 2]
