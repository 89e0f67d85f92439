"""Small pieces: group->shard hashing, timers, record encoding, configuration."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.config import GroupConfig
from coordinator.core.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberRecord,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordError,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from coordinator.core.sharding import java_string_hash, partition_for
from coordinator.core.timers import Timers

# ---------------------------------------------------------------- sharding


@pytest.mark.parametrize("s,expected", [
    ("", 0), ("a", 97), ("hello", 99162322), ("Aa", 2112), ("BB", 2112),
    ("\U0001F600", 31 * 0xD83D + 0xDE00),          # hashed over UTF-16 code units (a surrogate pair)
    ("polygenelubricants", -(2**31)),              # Integer.MIN_VALUE
    ("Hello World", -862545276),                   # a negative hash
])
def test_java_string_hash(s, expected):
    assert java_string_hash(s) == expected


def test_partition_for_uses_kafkas_abs_where_min_value_maps_to_zero():
    assert partition_for("polygenelubricants", 50) == 0  # Math.abs would stay negative
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("Hello World", 50) == 862545276 % 50 == 26


@settings(max_examples=100)
@given(st.text(max_size=30))
def test_java_string_hash_equals_the_polynomial_definition(s):
    raw = s.encode("utf-16-be")
    units = [int.from_bytes(raw[i:i + 2], "big") for i in range(0, len(raw), 2)]
    value = sum(c * 31 ** (len(units) - 1 - i) for i, c in enumerate(units)) % 2**32
    assert java_string_hash(s) == (value - 2**32 if value >= 2**31 else value)


# ---------------------------------------------------------------- timers


def test_timers_fire_in_deadline_order_and_reschedule_or_cancel_by_key():
    t = Timers()
    t.schedule("b", 20)
    t.schedule("a", 10)
    t.schedule("c", 20)
    t.schedule("a", 30)  # moved
    t.cancel("c")
    t.cancel("never-scheduled")
    assert t.next_deadline() == 20 and len(t) == 2
    assert t.expired(19) == []
    assert t.expired(30) == ["b", "a"]
    assert t.next_deadline() is None and "a" not in t


def test_timers_stay_compact_under_many_reschedules():
    t = Timers()
    for i in range(10_000):
        t.schedule(("member", i % 10), i)
    assert len(t) == 10 and len(t._heap) <= 2 * 10 + 64 + 1
    assert t.expired(10_000) == [("member", i) for i in range(10)]


# ---------------------------------------------------------------- records


def test_offset_commit_record_bytes_match_kafkas_layout():
    key = encode_offset_key("g", "t", 3)
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    value = encode_offset_value(OffsetCommitValue(5, 2, "md", 1000))
    assert value == (b"\x00\x03" + (5).to_bytes(8, "big") + (2).to_bytes(4, "big") + b"\x00\x02md"
                     + (1000).to_bytes(8, "big"))
    assert decode_key(key) == OffsetCommitKey("g", "t", 3)
    v1 = encode_offset_value(OffsetCommitValue(5, -1, "", 1000, 2000))  # explicit retention: value v1
    assert v1[:2] == b"\x00\x01" and decode_offset_value(v1) == OffsetCommitValue(5, -1, "", 1000, 2000)


def test_group_metadata_record_bytes_match_kafkas_layout():
    assert encode_group_key("grp") == b"\x00\x02\x00\x03grp"
    value = GroupMetadataValue("consumer", 4, "range", "m1", 77,
                               (MemberRecord("m1", None, "c", "/h", 300, 10, b"S", b"A"),))
    raw = encode_group_value(value)
    expected = (b"\x00\x03" + b"\x00\x08consumer" + (4).to_bytes(4, "big") + b"\x00\x05range" + b"\x00\x02m1"
                + (77).to_bytes(8, "big") + (1).to_bytes(4, "big")
                + b"\x00\x02m1" + b"\xff\xff" + b"\x00\x01c" + b"\x00\x02/h" + (300).to_bytes(4, "big")
                + (10).to_bytes(4, "big") + b"\x00\x00\x00\x01S" + b"\x00\x00\x00\x01A")
    assert raw == expected
    assert decode_group_value(raw) == value
    assert decode_key(encode_group_key("grp")) == GroupMetadataKey("grp")


def test_older_value_versions_decode():
    v0_offset = b"\x00\x00" + (9).to_bytes(8, "big") + b"\x00\x00" + (5).to_bytes(8, "big")
    assert decode_offset_value(v0_offset) == OffsetCommitValue(9, -1, "", 5)
    v0_group = (b"\x00\x00" + b"\x00\x08consumer" + (1).to_bytes(4, "big") + b"\x00\x01r" + b"\x00\x01m"
                + (1).to_bytes(4, "big") + b"\x00\x01m" + b"\x00\x01c" + b"\x00\x01h" + (6000).to_bytes(4, "big")
                + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00")
    decoded = decode_group_value(v0_group)
    assert decoded.current_state_timestamp == -1
    assert decoded.members == (MemberRecord("m", None, "c", "h", 6000, 6000, b"", b""),)


def test_malformed_records_raise_and_unknown_key_versions_are_skipped():
    assert decode_key(b"\x00\x05anything") is None
    with pytest.raises(RecordError):
        decode_offset_value(encode_offset_value(OffsetCommitValue(1, 1, "x", 1))[:-1])
    with pytest.raises(RecordError):
        decode_key(encode_group_key("g") + b"\x00")


names = st.text(max_size=20)
members = st.builds(MemberRecord, names, st.none() | names, names, names, st.integers(0, 2**31 - 1),
                    st.integers(0, 2**31 - 1), st.binary(max_size=30), st.binary(max_size=30))


@settings(max_examples=100)
@given(st.builds(GroupMetadataValue, names, st.integers(-1, 2**31 - 1), st.none() | names, st.none() | names,
                 st.integers(-1, 2**62), st.lists(members, max_size=5).map(tuple)))
def test_group_value_roundtrip(value):
    assert decode_group_value(encode_group_value(value)) == value


@settings(max_examples=100)
@given(names, names, st.integers(0, 2**31 - 1), st.integers(-1, 2**62), st.integers(-1, 2**31 - 1), names)
def test_offset_roundtrip(group, topic, partition, offset, epoch, metadata):
    assert decode_key(encode_offset_key(group, topic, partition)) == OffsetCommitKey(group, topic, partition)
    value = OffsetCommitValue(offset, epoch, metadata, 12345)
    assert decode_offset_value(encode_offset_value(value)) == value


# ---------------------------------------------------------------- config


def test_config_from_kafka_keys_and_validation():
    cfg = GroupConfig.from_kafka_keys({"group.initial.rebalance.delay.ms": 0, "group.max.size": "10"})
    assert (cfg.group_initial_rebalance_delay_ms, cfg.group_max_size, cfg.offsets_topic_num_partitions) == (0, 10, 50)
    assert GroupConfig().offsets_retention_ms == 7 * 24 * 3600 * 1000
    with pytest.raises(ValueError, match="unknown"):
        GroupConfig.from_kafka_keys({"group.max.sise": 1})
    with pytest.raises(ValueError):
        GroupConfig(group_min_session_timeout_ms=10, group_max_session_timeout_ms=5)
