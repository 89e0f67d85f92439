"""__transaction_state records: Kafka's v0 bytes exactly, v1 (flexible) read, tombstones, bad input."""

from __future__ import annotations

import pytest

from coordinator.core.transactions.records import (
    RecordError,
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from coordinator.core.transactions.state import TxnState

# TransactionLogKey v0 for "tx": int16 version 0, int16 length 2, "tx"
KEY_TX = bytes.fromhex("0000" "0002" "7478")

# TransactionLogValue v0, derived field by field from TransactionLogValue.json:
ONGOING_V0 = bytes.fromhex(
    "0000"                  # version 0
    "00000000000003e8"      # ProducerId 1000
    "0003"                  # ProducerEpoch 3
    "0000ea60"              # TransactionTimeoutMs 60000
    "01"                    # TransactionStatus 1 (Ongoing)
    "00000002"              # TransactionPartitions: 2 topics
    "0001" "61"             #   Topic "a"
    "00000002" "00000000" "00000001"  # PartitionIds [0, 1]
    "0001" "62"             #   Topic "b"
    "00000001" "00000002"   # PartitionIds [2]
    "0000018bcfe56800"      # TransactionLastUpdateTimestampMs 1700000000000
    "0000018bcfe56418"      # TransactionStartTimestampMs 1699999999000
)
ONGOING = TxnLogValue(1000, 3, 60_000, TxnState.ONGOING, (("a", 0), ("a", 1), ("b", 2)),
                      1_700_000_000_000, 1_699_999_999_000)

EMPTY_V0 = bytes.fromhex(
    "0000" "00000000000003e8" "0000" "0000ea60" "00"
    "ffffffff"              # null TransactionPartitions (Kafka writes null for Empty)
    "0000018bcfe56800" "ffffffffffffffff"  # start -1
)

# The same Ongoing value as v1 (flexible): compact arrays/strings (uvarint n + 1), tagged fields per struct;
# an unknown tag 5 inside the second topic and tags 0 and 9 at the top level must be skipped.
ONGOING_V1 = bytes.fromhex(
    "0001"
    "00000000000003e8" "0003" "0000ea60" "01"
    "03"                    # compact array: 2 entries
    "02" "61" "03" "00000000" "00000001" "00"          # "a", [0, 1], no tags
    "02" "62" "02" "00000002" "01" "05" "02" "abcd"    # "b", [2], tag 5 of 2 bytes
    "0000018bcfe56800" "0000018bcfe56418"
    "02" "00" "08" "00000000000003e7" "09" "00"        # tag 0 (8 bytes), tag 9 (0 bytes)
)


def test_key_bytes_match_kafka():
    assert encode_key("tx") == KEY_TX
    assert decode_key(KEY_TX) == "tx"


def test_key_non_ascii_length_is_utf8_bytes():
    key = encode_key("é")
    assert key == bytes.fromhex("0000" "0002" "c3a9")
    assert decode_key(key) == "é"


def test_value_v0_bytes_match_kafka():
    assert encode_value(ONGOING) == ONGOING_V0
    assert decode_value(ONGOING_V0) == ONGOING


def test_value_partitions_are_grouped_and_sorted_whatever_the_input_order():
    shuffled = ONGOING._replace(partitions=(("b", 2), ("a", 1), ("a", 0), ("a", 1)))
    assert encode_value(shuffled) == ONGOING_V0


def test_empty_value_writes_null_partitions():
    v = TxnLogValue(1000, 0, 60_000, TxnState.EMPTY, None, 1_700_000_000_000, -1)
    assert encode_value(v) == EMPTY_V0
    assert decode_value(EMPTY_V0) == v


def test_complete_value_has_an_empty_not_null_array():
    v = TxnLogValue(7, 2, 1000, TxnState.COMPLETE_ABORT, (), 5, 4)
    data = encode_value(v)
    assert data[2 + 8 + 2 + 4 + 1:][:4] == b"\x00\x00\x00\x00"
    assert decode_value(data) == v


def test_v1_is_read_and_unknown_tags_skipped():
    assert decode_value(ONGOING_V1) == ONGOING


def test_round_trip_non_ascii_topics_and_extremes():
    v = TxnLogValue(2**63 - 1, 32767, 2**31 - 1, TxnState.PREPARE_ABORT,
                    (("ζ-topic", 2**31 - 1), ("ζ-topic", 0), ("日本", 3)), -1, 2**62)
    back = decode_value(encode_value(v))
    assert back.partitions == (("ζ-topic", 0), ("ζ-topic", 2**31 - 1), ("日本", 3))
    assert back._replace(partitions=v.partitions) == v


def test_unknown_key_version_is_skipped():
    assert decode_key(bytes.fromhex("0001" "0002" "7478")) is None


@pytest.mark.parametrize("data, why", [
    (ONGOING_V0[:-1], "truncated"),
    (ONGOING_V0 + b"\x00", "trailing"),
    (b"\x00\x02" + ONGOING_V0[2:], "unknown version"),
    (ONGOING_V0[:16] + b"\x09" + ONGOING_V0[17:], "unknown status"),
    (ONGOING_V1[:-1], "truncated v1"),
    (ONGOING_V0[:21] + b"\xff\xff" + ONGOING_V0[23:], "null topic"),
    (b"\x00", "no version"),
])
def test_bad_values_raise_record_error(data, why):
    with pytest.raises(RecordError):
        decode_value(data)


def test_status_byte_position_is_the_one_the_bad_status_case_corrupts():
    # guards the parametrized cases above: byte 16 is TransactionStatus, bytes 21-22 the first topic's length
    assert ONGOING_V0[16] == 1 and ONGOING_V0[21:23] == b"\x00\x01"


@pytest.mark.parametrize("data", [
    bytes.fromhex("0000" "ffff"),            # null transactional id
    bytes.fromhex("0000" "0002" "74"),       # truncated
    bytes.fromhex("0000" "0001" "ff"),       # not UTF-8
    KEY_TX + b"\x00",                        # trailing
])
def test_bad_keys_raise_record_error(data):
    with pytest.raises(RecordError):
        decode_key(data)


def test_overlong_varint_raises():
    data = ONGOING_V1[:17] + b"\xff\xff\xff\xff\xff\x01"
    with pytest.raises(RecordError):
        decode_value(data)


def test_record_error_is_a_value_error():
    assert issubclass(RecordError, ValueError)
