"""record_reader.key_values: aiokafka's C reader and ours give the same (key, value) pairs for every codec,
and a batch the C reader refuses is decided (and explained) by ours."""

from __future__ import annotations

import struct

import pytest

from protocol import record_reader
from protocol.record_batch import (
    CorruptBatchError,
    build_batch,
    compute_crc,
    decode_batch,
    decode_batch_key_values,
)

RECORDS = [(b"k%d" % i if i % 5 else None, None if i % 7 == 0 else b"v" * i, (), 1_700_000_000_000 + i)
           for i in range(200)]


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_both_readers_agree(codec: int, monkeypatch: pytest.MonkeyPatch) -> None:
    batch = build_batch(RECORDS, compression=codec)
    assert record_reader.c_reader() is not None
    fast = record_reader.key_values(memoryview(batch))[1]
    monkeypatch.setattr(record_reader, "_C_READER", False)
    ours = record_reader.key_values(batch)[1]
    assert fast == ours == decode_batch_key_values(batch, verify_crc=False)[1]
    assert ours == [(k, v) for k, v, _, _ in RECORDS]


def test_a_batch_the_c_reader_refuses_is_explained_by_ours() -> None:
    batch = bytearray(build_batch(RECORDS[:3]))
    batch[61] = 0x7E  # the first record's length runs past the batch
    with pytest.raises(CorruptBatchError, match="record"):
        record_reader.key_values(bytes(batch))


# ------------------------------------------------------------------ records(): decode_batch's result, faster
HEADERED = [(b"k%d" % i if i % 5 else None, None if i % 7 == 0 else b"v" * (i % 300),
             [(f"h{j}", None if j == 1 else b"x" * j) for j in range(i % 4)], 1_700_000_000_000 + 3 * i)
            for i in range(300)]


def _with_log_append_time(batch: bytes) -> bytes:
    buf = bytearray(batch)
    struct.pack_into(">h", buf, 21, struct.unpack_from(">h", buf, 21)[0] | 0x08)  # timestamp type: append
    struct.pack_into(">I", buf, 17, compute_crc(buf))
    return bytes(buf)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("append_time", [False, True])
def test_records_equal_decode_batch(codec: int, append_time: bool) -> None:
    batch = build_batch(HEADERED, base_offset=1_000, compression=codec)
    if append_time:
        batch = _with_log_append_time(batch)
    header, fast = record_reader.records(memoryview(batch))
    assert (header, fast) == decode_batch(batch)
    assert fast[0].offset == 1_000 and fast[-1].offset == 1_299
    if append_time:  # every record carries the batch's max timestamp
        assert {r.timestamp for r in fast} == {header.max_timestamp}
    else:
        assert [r.timestamp for r in fast] == [ts for *_, ts in HEADERED]
    assert [tuple(h) for *_, h, _ in HEADERED] == [r.headers for r in fast]


def test_records_refuses_what_decode_batch_refuses() -> None:
    batch = bytearray(build_batch(HEADERED[:5]))
    batch[-1] ^= 0xFF  # CRC no longer matches
    with pytest.raises(CorruptBatchError, match="CRC"):
        record_reader.records(bytes(batch))
    with pytest.raises(CorruptBatchError, match="varint"):  # unchecked: the broken record decides
        record_reader.records(bytes(batch), verify_crc=False)
    with pytest.raises(CorruptBatchError, match="declares"):
        record_reader.records(build_batch(HEADERED[:5]) + b"\0")


def test_records_without_the_c_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = build_batch(HEADERED)
    monkeypatch.setattr(record_reader, "_C_READER", False)
    assert record_reader.records(batch) == decode_batch(batch)
