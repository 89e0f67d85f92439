"""Arrow shapes of the ``groupcoord`` source: Spark's Kafka source schema, and records -> RecordBatch.

Rules:
- The schema is exactly Spark's Kafka source: key binary, value binary, topic string, partition int,
  offset long, timestamp timestamp, timestampType int, and headers array<struct<key string, value binary>>
  only when ``includeHeaders`` is true. The Arrow types below must match it exactly (Spark rejects a
  batch whose types differ): int32 for int, int64 for long, timestamp[us, UTC] for timestamp.
- ``RowBuffer`` collects decoded records of one partition column-wise and cuts a RecordBatch every
  ``batch_rows`` rows; record timestamps (ms since the epoch) become microseconds.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from protocol.record_batch import Record

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
TIMESTAMP = pa.timestamp("us", tz="UTC")
BASE_FIELDS = [pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
               pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
               pa.field("timestamp", TIMESTAMP), pa.field("timestampType", pa.int32())]


def spark_schema(include_headers: bool) -> str:
    ddl = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
           "timestampType int")
    return ddl + (", headers array<struct<key: string, value: binary>>" if include_headers else "")


def arrow_schema(include_headers: bool) -> pa.Schema:
    return pa.schema(BASE_FIELDS + ([pa.field("headers", HEADER_TYPE)] if include_headers else []))


class RowBuffer:
    """Column lists for one partition's records, emptied into RecordBatches."""

    def __init__(self, topic: str, partition: int, include_headers: bool, batch_rows: int = 65536) -> None:
        self.topic, self.partition = topic, partition
        self.include_headers = include_headers
        self.batch_rows = batch_rows
        self.schema = arrow_schema(include_headers)
        self._chunks: list[tuple[int, list[Record]]] = []
        self.rows = 0

    def add(self, timestamp_type: int, records: list[Record]) -> Iterator[pa.RecordBatch]:
        self._chunks.append((timestamp_type, records))
        self.rows += len(records)
        if self.rows >= self.batch_rows:
            yield self.flush()

    def flush(self) -> pa.RecordBatch:
        chunks, self._chunks = self._chunks, []
        n, self.rows = self.rows, 0
        offsets: list[int] = []
        stamps: list[int] = []
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        headers: list[tuple[tuple[str, bytes | None], ...]] = []
        kinds = {ts_type for ts_type, _ in chunks}
        ts_types: list[int] = []
        for ts_type, records in chunks:
            o, t, k, v, h = zip(*records)
            offsets += o
            stamps += t
            keys += k
            values += v
            if self.include_headers:
                headers += h
            if len(kinds) > 1:
                ts_types += [ts_type] * len(records)
        ms = pa.array(stamps, pa.int64())
        columns = [
            pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
            # constant columns are repeated scalars: no Python list of n items
            pa.repeat(pa.scalar(self.topic, pa.string()), n), pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            pa.array(offsets, pa.int64()),
            pc.multiply(ms, 1000).cast(TIMESTAMP),
            pa.array(ts_types, pa.int32()) if ts_types else pa.repeat(pa.scalar(kinds.pop(), pa.int32()), n),
        ]
        if self.include_headers:
            columns.append(pa.array([[{"key": hk, "value": hv} for hk, hv in h] for h in headers], HEADER_TYPE))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)
