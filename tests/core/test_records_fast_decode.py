"""The replay fast path of coordinator.core.records: same answers, same errors as the field-by-field reader.

``decode_offset_key`` / ``decode_key`` / ``decode_offset_value`` take a struct-and-slice shortcut for
well-formed input; ``_read_key`` / ``_read_offset_value`` are the original ``_Reader`` decoders (unchanged),
used here as the oracle. Every input, well-formed, mutated or random, must give the same result or raise
the same error (type and message) both ways.
"""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from coordinator.core.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordError,
    _read_key,
    _read_offset_value,
    decode_key,
    decode_offset_key,
    decode_offset_value,
    encode_group_key,
    encode_offset_key,
    encode_offset_value,
)


def outcome(fn, data: bytes):
    try:
        return "ok", fn(data)
    except (RecordError, UnicodeDecodeError) as e:  # the two ways a stored record fails to decode
        return type(e).__name__, str(e)


def mutate(data: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    """Overwrite some bytes (positions modulo the length), then optionally truncate or extend."""
    buf = bytearray(data)
    for pos, byte in edits:
        if buf:
            buf[pos % len(buf)] = byte
    if cut is not None:
        buf = buf[:cut] if cut < len(buf) else buf + b"\x00" * (cut - len(buf))
    return bytes(buf)


names = st.text(max_size=12)
edits = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=3)
cuts = st.none() | st.integers(0, 60)
epochs = st.integers(-(2**31), 2**31 - 1)
longs = st.integers(-(2**63), 2**63 - 1)


# ---------------------------------------------------------------- keys


def test_offset_key_fields_and_non_offset_keys():
    key = encode_offset_key("grp", "orders", 7)
    assert decode_offset_key(key) == ("grp", ("orders", 7))
    assert decode_key(key) == OffsetCommitKey("grp", "orders", 7)
    v0 = b"\x00\x00" + key[2:]  # v0 keys have the v1 layout
    assert decode_offset_key(v0) == ("grp", ("orders", 7))
    assert decode_offset_key(encode_group_key("grp")) is None  # a group metadata key: not an offset key
    assert decode_key(encode_group_key("grp")) == GroupMetadataKey("grp")
    assert decode_offset_key(b"\x00\x05anything") is None and decode_key(b"\x00\x05anything") is None


def test_malformed_offset_keys_raise_the_readers_error():
    good = encode_offset_key("g", "t", 1)
    cases = {
        b"\x00": "record truncated",  # no version
        good[:-1]: "record truncated",  # partition cut short
        good + b"\x00": "trailing bytes in record",
        b"\x00\x01\xff\xff": "null where a string is required",  # null group
        b"\x00\x01\x00\x05ab": "record truncated",  # group longer than the key
    }
    for raw, message in cases.items():
        for fn in (decode_offset_key, decode_key):
            try:
                fn(raw)
            except RecordError as e:
                assert str(e) == message, raw
            else:
                raise AssertionError(f"{fn.__name__}({raw!r}) did not raise")


@settings(max_examples=150)
@given(names, names, st.integers(-(2**31), 2**31 - 1), st.sampled_from([0, 1, 2]), edits, cuts)
def test_keys_decode_as_the_reader_does(group, topic, partition, version, changes, cut):
    key = encode_offset_key(group, topic, partition) if version != 2 else encode_group_key(group)
    if version == 0:
        key = b"\x00\x00" + key[2:]
    for raw in (key, mutate(key, changes, cut)):
        assert outcome(decode_key, raw) == outcome(_read_key, raw)
        fast = outcome(decode_offset_key, raw)
        slow = outcome(_read_key, raw)
        if len(raw) >= 2 and raw[:2] not in (b"\x00\x00", b"\x00\x01"):
            assert fast == ("ok", None)  # not an offset commit key, whatever follows the version
        elif slow[0] == "ok":
            assert fast == ("ok", (slow[1].group, (slow[1].topic, slow[1].partition)))
        else:
            assert fast == slow


@settings(max_examples=150)
@given(st.binary(max_size=40))
@example(b"\x00\x01\x00\x01\xff\x00\x00\x00\x00\x00\x00")  # invalid UTF-8 group: UnicodeDecodeError
def test_random_bytes_as_keys(raw):
    assert outcome(decode_key, raw) == outcome(_read_key, raw)


# ---------------------------------------------------------------- values


def test_value_versions_decode_to_the_same_value():
    body = (42).to_bytes(8, "big", signed=True)
    md, ts, exp = b"\x00\x02md", (1000).to_bytes(8, "big"), (2000).to_bytes(8, "big")
    assert decode_offset_value(b"\x00\x00" + body + md + ts) == OffsetCommitValue(42, -1, "md", 1000)
    v1 = b"\x00\x01" + body + md + ts + exp
    assert decode_offset_value(v1) == OffsetCommitValue(42, -1, "md", 1000, 2000)
    assert decode_offset_value(b"\x00\x02" + body + md + ts) == OffsetCommitValue(42, -1, "md", 1000)
    v3 = b"\x00\x03" + body + (7).to_bytes(4, "big") + b"\x00\x00" + ts
    assert decode_offset_value(v3) == OffsetCommitValue(42, 7, "", 1000, None)


def test_malformed_values_raise_the_readers_error():
    good = encode_offset_value(OffsetCommitValue(1, 2, "", 3))
    cases = {
        good[:-1]: "record truncated",
        good + b"\x00": "trailing bytes in record",
        b"\x00\x09" + good[2:]: "unsupported offset commit value version 9",
        good[:14] + b"\xff\xff" + good[16:]: "null where a string is required",
    }
    for raw, message in cases.items():
        try:
            decode_offset_value(raw)
        except RecordError as e:
            assert str(e) == message, raw
        else:
            raise AssertionError(f"decode_offset_value({raw!r}) did not raise")


@settings(max_examples=200)
@given(longs, epochs, names, longs, st.none() | longs, st.sampled_from([0, 1, 2, 3]), edits, cuts)
def test_values_decode_as_the_reader_does(offset, epoch, metadata, commit_ts, expire_ts, version, changes,
                                          cut):
    value = encode_offset_value(OffsetCommitValue(offset, epoch, metadata, commit_ts, expire_ts))
    if version in (0, 2) and value[:2] == b"\x00\x03":  # re-encode as v0/v2: no epoch
        value = bytes([0, version]) + value[2:10] + value[14:]
    for raw in (value, mutate(value, changes, cut)):
        assert outcome(decode_offset_value, raw) == outcome(_read_offset_value, raw)


@settings(max_examples=100)
@given(st.binary(max_size=40))
def test_random_bytes_as_values(raw):
    assert outcome(decode_offset_value, raw) == outcome(_read_offset_value, raw)


def test_offset_commit_value_is_immutable_and_equal_by_value():
    v = OffsetCommitValue(5, 1, "m", 10)
    assert v.expire_timestamp is None and v == OffsetCommitValue(5, 1, "m", 10, None)
    assert decode_offset_value(encode_offset_value(v)) == v
    try:
        v.offset = 6  # type: ignore[misc]
    except AttributeError:
        pass
    else:
        raise AssertionError("OffsetCommitValue must be immutable")
