"""record_reader.key_values: aiokafka's C reader and ours give the same (key, value) pairs for every codec,
and a batch the C reader refuses is decided (and explained) by ours."""

from __future__ import annotations

import pytest

from protocol import record_reader
from protocol.record_batch import CorruptBatchError, build_batch, decode_batch_key_values

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
