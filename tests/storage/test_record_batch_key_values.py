"""The replay fast path of protocol.record_batch: (key, value) pairs without Record objects.

``decode_key_values`` must accept exactly what ``decode_records`` accepts and give each record's (key, value)
in order; ``decode_batch_key_values`` is ``decode_batch`` (CRC, length, gzip) reduced the same way, with an
optional lower bound on offsets for a read that starts inside a batch.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.record_batch import (
    HEADER_SIZE,
    Compression,
    CorruptBatchError,
    build_batch,
    build_kv_batch,
    decode_batch,
    decode_batch_key_values,
    decode_key_values,
    decode_records,
    parse_header,
)

blobs = st.none() | st.binary(max_size=20) | st.binary(min_size=60, max_size=200)  # 1- and 2-byte lengths
headers = st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=4)), max_size=2)
records = st.lists(st.tuples(blobs, blobs, headers, st.integers(0, 2**40)), min_size=1, max_size=80)


def pairs_of(batch: bytes) -> list[tuple[bytes | None, bytes | None]]:
    return [(r.key, r.value) for r in decode_batch(batch)[1]]


def outcome(fn, *args):
    try:
        return "ok", fn(*args)
    except CorruptBatchError:
        return "corrupt", None


def test_pairs_in_order_with_null_keys_and_values():
    batch = build_batch([(b"k1", b"v1", [("h", b"x")], 1_000), (None, None, [], 1_005),
                         (b"k3", b"", [], 999)])
    header, pairs = decode_batch_key_values(batch)
    assert header.record_count == 3
    assert pairs == [(b"k1", b"v1"), (None, None), (b"k3", b"")]


def test_a_hundred_records_use_two_byte_offset_deltas():
    batch = build_batch([(b"key-%d" % i, b"value-%d" % i, [], 5_000 + i) for i in range(100)])
    _, pairs = decode_batch_key_values(batch)
    assert pairs == [(b"key-%d" % i, b"value-%d" % i) for i in range(100)]


def test_min_offset_drops_records_before_it():
    batch = build_batch([(b"k%d" % i, b"v%d" % i, [], 0) for i in range(5)], base_offset=10)
    assert decode_batch_key_values(batch, min_offset=13)[1] == [(b"k3", b"v3"), (b"k4", b"v4")]
    assert decode_batch_key_values(batch, min_offset=10)[1] == pairs_of(batch)
    assert decode_batch_key_values(batch, min_offset=15)[1] == []


def test_bad_crc_and_bad_records_raise_corrupt_batch():
    batch = bytearray(build_batch([(b"k", b"v", [], 0)]))
    batch[-2] ^= 0xFF
    with pytest.raises(CorruptBatchError, match="CRC mismatch"):
        decode_batch_key_values(bytes(batch))
    rec = build_batch([(b"k", b"v", [], 0)])[HEADER_SIZE:]
    with pytest.raises(CorruptBatchError):
        decode_key_values(rec, 2)  # one record more than there is
    with pytest.raises(CorruptBatchError):
        decode_key_values(rec + b"\x00", 1)  # a byte left over


@settings(max_examples=100)
@given(records, st.sampled_from([Compression.NONE, Compression.GZIP]), st.integers(0, 2**40))
def test_same_pairs_as_decode_batch(items, codec, base):
    batch = build_batch(items, compression=codec, base_offset=base)
    header, pairs = decode_batch_key_values(batch)
    assert header == parse_header(batch)
    assert pairs == pairs_of(batch) == [(k, v) for k, v, _, _ in items]
    cut = base + len(items) // 2
    assert decode_batch_key_values(batch, min_offset=cut)[1] == [
        (r.key, r.value) for r in decode_batch(batch)[1] if r.offset >= cut]


@settings(max_examples=200)
@given(records, st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=3),
       st.integers(-3, 3))
def test_damaged_records_fail_exactly_when_decode_records_fails(items, edits, extra):
    """Record bytes with a few bytes overwritten and the end moved: both decoders agree on every input."""
    data = bytearray(build_batch(items)[HEADER_SIZE:])
    for pos, byte in edits:
        data[pos % len(data)] = byte
    data = bytes(data[:len(data) + extra] if extra < 0 else data + b"\x00" * extra)
    count = len(items)
    expected = outcome(decode_records, data, count, 0, 0)
    got = outcome(decode_key_values, data, count)
    assert got[0] == expected[0]
    if got[0] == "ok":
        assert got[1] == [(r.key, r.value) for r in expected[1]]


# ---------------------------------------------------------------------------- build_kv_batch (group commit)
kv_blobs = st.none() | st.binary(max_size=20) | st.binary(min_size=60, max_size=200) | st.binary(min_size=1020,
                                                                                                 max_size=1100)


@settings(max_examples=200)
@given(st.lists(st.tuples(kv_blobs, kv_blobs), min_size=1, max_size=40), st.integers(-1, 2**45))
def test_build_kv_batch_is_build_batch_byte_for_byte(pairs: list, timestamp: int) -> None:
    built = build_kv_batch(pairs, timestamp)
    assert built == build_batch([(k, v, (), timestamp) for k, v in pairs])
    assert decode_batch_key_values(built)[1] == pairs


def test_build_kv_batch_counts_offsets_past_the_varint_table() -> None:
    pairs = [(b"k%d" % i, None) for i in range(1100)]  # offset deltas need the generic varint past 1023
    assert build_kv_batch(pairs, 7) == build_batch([(k, v, (), 7) for k, v in pairs])


def test_build_kv_batch_needs_a_record() -> None:
    with pytest.raises(ValueError):
        build_kv_batch([], 0)
