"""validate_produce on bytes: the timestamp rules and LogAppendTime, which the wire tests do not reach."""

from __future__ import annotations

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
