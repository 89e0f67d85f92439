"""decode_chunks' in-place path for common batches against the per-batch reference (decode_batch_key_values).

decode_chunks decodes v2, uncompressed, CRC-correct batches at or past the offset reached straight from the
chunk bytes, and hands every other batch to decode_batch_key_values. The reference below is what it did
before (every batch through decode_batch_key_values): for any chunks (compressed batches, damaged bytes
before or after the CRC was computed, a read that starts inside a batch, null keys, a partial tail), both
must give the same records, the same offset reached and the same problem lines.
"""

from __future__ import annotations

import struct

import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.runtime.offsets_reader import decode_chunks
from protocol.record_batch import (
    CRC_START,
    Compression,
    CorruptBatchError,
    build_batch,
    decode_batch_key_values,
    parse_header,
    split_batches,
)


def reference(chunks: list[tuple[int, bytes]], start: int) -> tuple[list[tuple[bytes, bytes | None]], int, list[str]]:
    out: list[tuple[bytes, bytes | None]] = []
    problems: list[str] = []
    offset = start
    for at, data in chunks:
        if at != offset:
            break
        before = offset
        try:
            batches, _ = split_batches(data)
        except CorruptBatchError as e:
            problems.append(f"unreadable batch framing at offset {offset} ({e}); later records ignored")
            break
        for batch in batches:
            try:
                header = parse_header(batch)
            except CorruptBatchError as e:
                problems.append(f"unreadable batch header after offset {offset} ({e}); later records ignored")
                return out, offset, problems
            try:
                _, pairs = decode_batch_key_values(batch, min_offset=offset)
            except CorruptBatchError as e:
                problems.append(f"batch at offsets {header.base_offset}-{header.last_offset} skipped: {e}")
                pairs = []
            out += [kv for kv in pairs if kv[0] is not None]
            offset = max(offset, header.next_offset)
        if offset == before:
            problems.append(f"no progress reading at offset {offset}; later records ignored")
            break
    return out, offset, problems


keys = st.one_of(st.none(), st.binary(min_size=0, max_size=12))
values = st.one_of(st.none(), st.binary(min_size=0, max_size=40))
damage = st.sampled_from(["none", "none", "none", "flip", "flip-resealed", "magic"])


@st.composite
def stored(draw: st.DrawFn) -> tuple[list[tuple[int, bytes]], int]:
    """Chunks as read_chunks gives them: (offset read at, the batches from there), and the start offset."""
    batches: list[bytes] = []
    offset = 0
    for _ in range(draw(st.integers(1, 8))):
        records = draw(st.lists(st.tuples(keys, values), min_size=1, max_size=6))
        codec = draw(st.sampled_from([Compression.NONE, Compression.NONE, Compression.GZIP]))
        raw = bytearray(build_batch([(k, v, [], 1_000) for k, v in records], base_offset=offset, compression=codec))
        how = draw(damage)
        if how != "none" and len(raw) > 62:
            at = draw(st.integers(61, len(raw) - 1))  # a record byte
            raw[at] ^= draw(st.integers(1, 255))
            if how == "flip-resealed":  # the CRC agrees: the record decoder has to find it
                struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[CRC_START:])))
        if how == "magic":
            raw[16] = 1
        batches.append(bytes(raw))
        offset += len(records)
    data = b"".join(batches)
    if draw(st.booleans()):
        data += batches[-1][: draw(st.integers(1, len(batches[-1]) - 1))]  # a partial tail
    start = draw(st.integers(0, max(0, offset - 1)))
    return [(0, data)], start


@settings(max_examples=400, deadline=None)
@given(stored())
def test_the_in_place_path_decodes_as_the_per_batch_reference(case: tuple[list[tuple[int, bytes]], int]) -> None:
    chunks, start = case
    want = reference(chunks, 0)
    problems: list[str] = []
    got, reached = decode_chunks(chunks, 0, problems)
    assert (got, reached, problems) == want
    if start:  # a read from inside the stored batches: those before `start` give their later records only
        shifted = [(start, chunks[0][1])]
        problems = []
        assert (*decode_chunks(shifted, start, problems), problems) == reference(shifted, start)


def test_a_batch_the_read_starts_inside_gives_its_records_from_there_on() -> None:
    first = build_batch([(b"a", b"1", [], 1), (b"b", b"2", [], 1), (b"c", b"3", [], 1)], base_offset=0)
    second = build_batch([(b"d", b"4", [], 1)], base_offset=3)
    problems: list[str] = []
    assert decode_chunks([(1, first + second)], 1, problems) == ([(b"b", b"2"), (b"c", b"3"), (b"d", b"4")], 4)
    assert problems == []
