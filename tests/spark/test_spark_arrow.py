"""RowBuffer: decoded records to Arrow record batches of the source schema (no Spark session needed).

The constant columns (topic, partition, and timestampType when one batch has a single type) are built as
repeated scalars; these tests check every column of the batch against the records, with one timestamp type
and with both mixed in one batch.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from protocol.record_batch import Record
from spark_bridge.arrow import RowBuffer, arrow_schema


def records(first: int, count: int, headers: bool = False) -> list[Record]:
    return [Record(first + i, 1_700_000_000_000 + i, None if i % 3 == 0 else b"k%d" % i, b"v%d" % (first + i),
                   (("h", b"%d" % i), ("n", None)) if headers else ())
            for i in range(count)]


def rows(batch: pa.RecordBatch) -> list[dict[str, object]]:
    return batch.to_pylist()


def test_one_timestamp_type_gives_the_schema_and_every_column() -> None:
    buf = RowBuffer("clicks", 3, include_headers=False, batch_rows=10)
    given = [records(100, 4), records(104, 6)]
    out = list(buf.add(0, given[0])) + list(buf.add(0, given[1]))
    assert len(out) == 1 and buf.rows == 0  # cut at batch_rows
    batch = out[0]
    assert batch.schema == arrow_schema(False)
    assert rows(batch) == [
        {"key": r.key, "value": r.value, "topic": "clicks", "partition": 3, "offset": r.offset,
         "timestamp": dt.datetime.fromtimestamp(r.timestamp / 1000, dt.UTC), "timestampType": 0}
        for r in given[0] + given[1]]


def test_mixed_timestamp_types_and_headers_are_kept_per_record() -> None:
    buf = RowBuffer("t", 0, include_headers=True, batch_rows=1000)
    assert list(buf.add(1, records(0, 2, headers=True))) == []
    assert list(buf.add(0, records(2, 3, headers=True))) == []
    batch = buf.flush()
    assert batch.schema == arrow_schema(True)
    got = rows(batch)
    assert [r["timestampType"] for r in got] == [1, 1, 0, 0, 0]
    assert [r["topic"] for r in got] == ["t"] * 5 and [r["partition"] for r in got] == [0] * 5
    assert [r["offset"] for r in got] == [0, 1, 2, 3, 4]
    assert [r["headers"] for r in got] == [[{"key": "h", "value": b"%d" % i}, {"key": "n", "value": None}]
                                           for i in (0, 1, 0, 1, 2)]
