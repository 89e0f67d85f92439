"""Record batch v2 codec: header, CRC, base-offset rewrite, splitting, records, gzip, hostile input."""

from __future__ import annotations

import gzip
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.record_batch import (
    HEADER_SIZE,
    Compression,
    CorruptBatchError,
    Record,
    UnsupportedCompressionError,
    build_batch,
    compute_crc,
    decode_batch,
    decode_records,
    decode_varint,
    encode_record,
    encode_varint,
    iter_records,
    parse_header,
    set_base_offset,
    split_batches,
    validate_batch,
    with_base_offset,
)

TWO = [(b"k1", b"v1", [("h", b"x")], 1_000), (None, None, [], 1_005)]


def test_header_fields_of_a_built_batch():
    batch = build_batch(TWO, base_offset=42, producer_id=7, producer_epoch=3, base_sequence=11,
                        partition_leader_epoch=5)
    h = validate_batch(batch)
    assert (h.base_offset, h.magic, h.record_count, h.last_offset_delta) == (42, 2, 2, 1)
    assert (h.base_timestamp, h.max_timestamp) == (1_000, 1_005)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch) == (7, 3, 11, 5)
    assert h.size == len(batch) and h.batch_length == len(batch) - 12
    assert (h.last_offset, h.next_offset) == (43, 44)
    assert h.crc == compute_crc(batch)


def test_crc_covers_attributes_to_end_but_not_base_offset():
    batch = bytearray(build_batch(TWO))
    set_base_offset(batch, 1 << 40)
    assert validate_batch(batch).base_offset == 1 << 40  # bytes 0-7 are outside the CRC
    for pos in (21, 40, len(batch) - 1):  # attributes, a timestamp, the last value byte
        flipped = bytearray(batch)
        flipped[pos] ^= 0x01
        with pytest.raises(CorruptBatchError, match="CRC mismatch"):
            validate_batch(flipped)


def test_with_base_offset_copies_once_and_keeps_the_rest():
    batch = build_batch(TWO, base_offset=0)
    moved = with_base_offset(batch, 99)
    assert moved[8:] == batch[8:] and parse_header(moved).base_offset == 99


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda b: b[:16] + b"\x01" + b[17:], "unsupported magic 1"),
        (lambda b: b[:8] + struct.pack(">i", 20) + b[12:], "below minimum"),
        (lambda b: b[:8] + struct.pack(">i", len(b)) + b[12:], "batch declares"),
        (lambda b: b[:HEADER_SIZE - 1], "needs 61 bytes"),
    ],
)
def test_validate_rejects_bad_headers(mutate, message):
    with pytest.raises(CorruptBatchError, match=message):
        validate_batch(mutate(build_batch(TWO)))


def test_split_stops_at_a_partial_tail_and_reports_where():
    a, b = build_batch(TWO), build_batch(TWO[:1], base_offset=2)
    blob = a + b + a[:30]
    batches, end = split_batches(blob)
    assert [bytes(x) for x in batches] == [a, b]
    assert end == len(a) + len(b)
    assert split_batches(a + a[:5]) == ([memoryview(a)], len(a))  # tail shorter than the length field
    assert split_batches(b"") == ([], 0)


def test_split_rejects_a_complete_batch_with_bad_length_or_magic():
    a = build_batch(TWO)
    with pytest.raises(CorruptBatchError, match="length 3"):
        split_batches(a + bytes(8) + struct.pack(">i", 3) + bytes(40))
    with pytest.raises(CorruptBatchError, match="magic"):
        split_batches(a[:16] + b"\x00" + a[17:])


@pytest.mark.parametrize("value, encoded", [(0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"),
                                            (64, "8001"), (300, "d804"), (-(1 << 63), "ff" * 9 + "01")])
def test_zigzag_varint_table(value, encoded):
    assert encode_varint(value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


def test_varint_longer_than_ten_bytes_or_truncated_is_corrupt():
    with pytest.raises(CorruptBatchError, match="longer than 10"):
        decode_varint(b"\xff" * 11)
    with pytest.raises(CorruptBatchError, match="truncated"):
        decode_varint(b"\x80")


def test_record_with_a_key_length_beyond_its_bytes_is_corrupt_without_allocating():
    rec = bytearray(encode_record(0, 0, b"k", b"v"))
    rec[4] = 0x7E  # key length varint at byte 4 (after length, attributes, ts delta, offset delta) -> 63
    with pytest.raises(CorruptBatchError, match="exceeds"):
        decode_records(bytes(rec), 1, 0, 0)


def test_huge_record_count_is_an_error_not_an_allocation():
    batch = bytearray(build_batch(TWO[:1]))
    struct.pack_into(">i", batch, 57, 2**31 - 1)
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    with pytest.raises(CorruptBatchError, match="runs past the end"):
        decode_batch(batch)
    with pytest.raises(CorruptBatchError, match="runs past the end"):
        list(iter_records(batch))


def test_gzip_round_trip_and_attributes():
    records = [(b"key-%d" % i, b"value " * 50, [], 2_000 + i) for i in range(20)]
    batch = build_batch(records, compression=Compression.GZIP)
    header, decoded = decode_batch(batch)
    assert header.compression == Compression.GZIP and len(batch) < 20 * 300 / 4
    assert [(r.key, r.value, r.timestamp, r.offset) for r in decoded] == [
        (k, v, ts, i) for i, (k, v, _, ts) in enumerate(records)
    ]


def test_gzip_output_is_capped():
    batch = build_batch([(None, bytes(100_000), [], 0)], compression=Compression.GZIP)
    with pytest.raises(CorruptBatchError, match="more than 1000 bytes"):
        decode_batch(batch, max_decompressed=1000)


@pytest.mark.parametrize("codec", [Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_every_kafka_codec_round_trips(codec):
    header, records = decode_batch(build_batch(TWO, compression=codec))
    assert header.compression == codec
    assert [(r.key, r.value) for r in records] == [(k, v) for k, v, _, _ in TWO]


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_codec_numbers_kafka_does_not_define_raise_a_clear_error(codec):
    with pytest.raises(UnsupportedCompressionError):
        build_batch(TWO, compression=codec)
    batch = bytearray(build_batch(TWO))
    struct.pack_into(">h", batch, 21, int(codec))
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    assert validate_batch(batch).compression == codec  # the header is fine, storing it verbatim works
    with pytest.raises(UnsupportedCompressionError):
        decode_batch(batch)


def test_gzip_payload_written_by_stdlib_gzip_module_decodes():
    body = encode_record(0, 0, b"a", b"b")
    batch = bytearray(build_batch([(b"a", b"b", [], 7)], compression=Compression.GZIP))
    payload = gzip.compress(body)
    batch = batch[:HEADER_SIZE] + payload
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    assert decode_batch(batch)[1] == [Record(0, 7, b"a", b"b", ())]


def test_iter_records_over_concatenated_batches_ignores_partial_tail():
    blob = build_batch(TWO, base_offset=0) + build_batch(TWO[:1], base_offset=2)
    assert [r.offset for r in iter_records(blob + blob[:20])] == [0, 1, 2]


nullable_bytes = st.none() | st.binary(max_size=40)
record_strategy = st.tuples(
    nullable_bytes, nullable_bytes,
    st.lists(st.tuples(st.text(max_size=8), nullable_bytes), max_size=3),
    st.integers(min_value=0, max_value=2**50),
)


@settings(max_examples=150, deadline=None)
@given(records=st.lists(record_strategy, min_size=1, max_size=8),
       codec=st.sampled_from([Compression.NONE, Compression.GZIP]),
       base=st.integers(min_value=0, max_value=2**62))
def test_build_then_decode_round_trips(records, codec, base):
    batch = build_batch(records, base_offset=base, compression=codec)
    header, decoded = decode_batch(batch)
    assert header.max_timestamp == max(r[3] for r in records)
    assert decoded == [Record(base + i, ts, k, v, tuple(h)) for i, (k, v, h, ts) in enumerate(records)]
    assert list(iter_records(batch + batch[:30])) == decoded  # the replay fast path agrees


@settings(max_examples=150, deadline=None)
@given(record=record_strategy, ts_base=st.integers(min_value=0, max_value=2**40))
def test_single_record_batches_decode_the_same_on_the_fast_path(record, ts_base):
    key, value, headers, _ = record
    batch = build_batch([(key, value, headers, ts_base)], base_offset=7)
    assert list(iter_records(batch)) == decode_batch(batch)[1] == [Record(7, ts_base, key, value, tuple(headers))]


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varint_round_trips(n):
    assert decode_varint(encode_varint(n) + b"tail") == (n, len(encode_varint(n)))


@settings(max_examples=150, deadline=None)
@given(payload=st.binary(max_size=200), count=st.integers(min_value=0, max_value=2**31 - 1),
       codec=st.sampled_from([Compression.NONE, Compression.GZIP]))
def test_garbage_records_raise_only_corrupt_batch_error(payload, count, codec):
    batch = bytearray(build_batch(TWO)[:HEADER_SIZE]) + payload
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">h", batch, 21, int(codec))
    struct.pack_into(">i", batch, 57, count)
    try:
        _, records = decode_batch(batch, verify_crc=False)
    except CorruptBatchError:
        return
    assert len(records) == count  # only possible when the payload really holds `count` records
