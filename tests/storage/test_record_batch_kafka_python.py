"""Interop with kafka-python's own record reader and builder (real third-party code, no server)."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from protocol.record_batch import Compression, Record, build_batch, decode_batch, split_batches

RECORDS = [
    (b"order-1", b'{"qty": 3}' * 20, [("trace", b"abc"), ("null", None)], 1_700_000_000_000),
    (None, b"no key" * 30, [], 1_700_000_000_250),
    (b"order-1", None, [], 1_699_999_999_900),  # tombstone, timestamp before the base
]


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP])
def test_kafka_python_reads_batches_we_build(codec):
    blob = build_batch(RECORDS, base_offset=100, compression=codec) + build_batch(RECORDS[:1], base_offset=103)
    reader = MemoryRecords(blob)
    seen = []
    while (batch := reader.next_batch()) is not None:
        assert batch.validate_crc()
        assert batch.compression_type == (codec if batch.base_offset == 100 else 0)
        seen += [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert seen == [
        (100, RECORDS[0][3], RECORDS[0][0], RECORDS[0][1], RECORDS[0][2]),
        (101, RECORDS[1][3], None, RECORDS[1][1], []),
        (102, RECORDS[2][3], b"order-1", None, []),
        (103, RECORDS[0][3], RECORDS[0][0], RECORDS[0][1], RECORDS[0][2]),
    ]


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP])
def test_we_read_batches_kafka_python_builds(codec):
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=int(codec), is_transactional=False, producer_id=5000, producer_epoch=1,
        base_sequence=10, batch_size=1 << 20,
    )
    for i, (key, value, headers, ts) in enumerate(RECORDS):
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    raw = bytes(builder.build())
    (view,), end = split_batches(raw)
    assert end == len(raw)
    header, records = decode_batch(view)
    assert header.compression == codec  # the values compress well, so kafka-python keeps gzip
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5000, 1, 10)
    assert records == [Record(i, ts, k, v, tuple(h)) for i, (k, v, h, ts) in enumerate(RECORDS)]
