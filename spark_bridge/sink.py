"""The ``groupcoord`` sink, batch and streaming: each row of the DataFrame becomes one record.

Rules (Spark's Kafka sink):
- Columns: ``value`` (required, binary or string), ``key`` (binary or string, optional), ``topic``
  (string; the option ``topic`` overrides it, and one of the two is required), ``partition`` (int,
  optional: the partitioner picks when absent or null), ``headers`` (array<struct<key string, value
  binary>>, optional). Other columns are an error. Strings are written as UTF-8.
- The DataFrame's schema is checked on the driver, before any task runs, and so is the reachability of the
  bootstrap servers; a row with a null topic fails its task with a message.
- Every task has its own ``client.producer.Producer`` (acks=all, opened in the task, never in ``__init__``)
  and waits for every acknowledgement before it reports success; the first failed produce fails the task
  with the broker's error. Rows come in as Arrow record batches.
- Each Arrow batch's rows are routed as ``Producer.send`` would route them (the ``partition`` column, else
  murmur2 of the key, else the topic's sticky partition, moved on after ``batch_size`` bytes of keyless
  rows) and handed over with one ``Producer.send_many`` per destination partition, in row order: no future
  and no lock round per row. A record's timestamp is the time its Arrow batch was handed over.
- Save modes (batch): only ``append``. PySpark hands a Python data source only append and overwrite; Spark
  itself refuses ErrorIfExists (the default) and Ignore with UNSUPPORTED_DATA_SOURCE_SAVE_MODE before any
  of our code runs (its table is built on the JVM side), so there is no hook for a message of ours there.
  ``overwrite`` is refused here, on the driver, as Spark's Kafka sink refuses it: a topic is only ever
  appended to, and an overwrite that silently appended would surprise. Streaming: Spark passes
  ``overwrite`` for the complete output mode, which is accepted (each trigger appends the whole result, as
  Spark's Kafka sink does).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import ArrayType, BinaryType, DataType, IntegerType, StringType, StructType

from client.producer import RECORD_OVERHEAD, Producer, RecordsFuture
from spark_bridge.options import OptionsError, WriteOptions
from spark_bridge.planner import check_reachable

COLUMNS = ("value", "key", "topic", "partition", "headers")


class SinkError(RuntimeError):
    """A row could not be written (no topic for it, or the broker refused it)."""


OVERWRITE_REFUSED = ('the groupcoord sink cannot write in the "Overwrite" save mode: a topic is only ever '
                     'appended to (records are not deleted); use .mode("append")')


@dataclass
class WriteResult(WriterCommitMessage):
    rows: int


def _type_name(t: DataType) -> str:
    return t.simpleString()


def check_schema(schema: StructType, opts: WriteOptions) -> None:
    """Raise OptionsError for a DataFrame the sink cannot write (see the module rules)."""
    fields = {f.name: f.dataType for f in schema.fields}
    extra = [n for n in fields if n not in COLUMNS]
    if extra:
        raise OptionsError(f"the groupcoord sink does not know the column(s) {', '.join(extra)}; it writes "
                           f"{', '.join(COLUMNS)}")
    if "value" not in fields:
        raise OptionsError("the groupcoord sink needs a 'value' column (binary or string)")
    for name in ("value", "key"):
        if name in fields and not isinstance(fields[name], (BinaryType, StringType)):
            raise OptionsError(f"column '{name}' must be binary or string, got {_type_name(fields[name])}")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise OptionsError(f"column 'topic' must be a string, got {_type_name(fields['topic'])}")
    if "topic" not in fields and opts.topic is None:
        raise OptionsError("no topic to write to: give the option topic or a 'topic' column")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OptionsError(f"column 'partition' must be an int, got {_type_name(fields['partition'])}")
    if "headers" in fields:
        t = fields["headers"]
        ok = (isinstance(t, ArrayType) and isinstance(t.elementType, StructType)
              and [(f.name, type(f.dataType)) for f in t.elementType.fields]
              == [("key", StringType), ("value", BinaryType)])
        if not ok:
            raise OptionsError("column 'headers' must be array<struct<key: string, value: binary>>, got "
                               f"{_type_name(t)}")


def _bytes(col: list[object]) -> list[bytes | None]:
    return [v.encode() if isinstance(v, str) else v for v in col]  # type: ignore[misc]


Copy = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]


class _Router:
    """Rows -> (topic, partition) as ``Producer.send`` would route them: the ``partition`` column when set,
    murmur2 of the key for keyed rows, else the topic's sticky partition, moved on after about
    ``batch_size`` bytes of keyless rows (a full batch, as the sticky partitioner does)."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.partitioner = producer.partitioner
        self.batch_size = producer.batch_size
        self._counts: dict[str, int] = {}
        self._sticky_bytes: dict[str, int] = {}

    def count(self, topic: str) -> int:
        n = self._counts.get(topic)
        if n is None:
            n = self._counts[topic] = len(self.producer.partitions_for(topic))
        return n

    def keyless(self, topic: str, size: int) -> int:
        n = self.count(topic)
        p = self.partitioner.partition(topic, None, n)
        filled = self._sticky_bytes.get(topic, 0) + size + RECORD_OVERHEAD
        if filled >= self.batch_size:  # this one closes the sticky partition's batch: the next row moves on
            self.partitioner.on_new_batch(topic, n, p)
            filled = 0
        self._sticky_bytes[topic] = filled
        return p


def _rows(batch: pa.RecordBatch, opts: WriteOptions, router: _Router, first_row: int
          ) -> dict[tuple[str, int], list[Copy]]:
    """The records of one Arrow batch grouped by destination, in row order within each destination."""
    n = batch.num_rows
    names = batch.schema.names
    values = _bytes(batch.column(names.index("value")).to_pylist())
    now = int(time.time() * 1000)  # Producer.send's timestamp for a record without one, once per Arrow batch
    plain = "key" not in names and "partition" not in names and "headers" not in names
    if plain and opts.topic is not None:  # the common case: one topic, keyless rows, no headers
        topic = opts.topic
        groups: dict[tuple[str, int], list[Copy]] = {}
        keyless = router.keyless
        for v in values:
            dest = (topic, keyless(topic, len(v) if v is not None else 0))
            rows = groups.get(dest)
            if rows is None:
                rows = groups[dest] = []
            rows.append((None, v, (), now))
        return groups
    keys = _bytes(batch.column(names.index("key")).to_pylist()) if "key" in names else [None] * n
    if opts.topic is not None:
        topics: list[str | None] = [opts.topic] * n
    else:
        topics = batch.column(names.index("topic")).to_pylist()
    parts = batch.column(names.index("partition")).to_pylist() if "partition" in names else [None] * n
    headers = batch.column(names.index("headers")).to_pylist() if "headers" in names else None
    groups = {}
    for i in range(n):
        topic = topics[i]
        if topic is None:
            raise SinkError(f"row {first_row + i} has a null topic and the option topic is not set")
        key, value, part = keys[i], values[i], parts[i]
        if part is None:
            if key is not None:
                part = router.partitioner.partition(topic, key, router.count(topic))
            else:
                part = router.keyless(topic, len(value) if value is not None else 0)
        elif not 0 <= part < router.count(topic):
            raise SinkError(f"row {first_row + i}: {topic} has {router.count(topic)} partitions, partition {part} "
                            "does not exist")
        hdrs = tuple((h["key"], h["value"]) for h in headers[i]) if headers is not None and headers[i] else ()
        rows = groups.get((topic, part))
        if rows is None:
            rows = groups[(topic, part)] = []
        rows.append((key, value, hdrs, now))
    return groups


def write_batches(opts: WriteOptions, batches: Iterator[pa.RecordBatch]) -> WriteResult:
    """Produce every row (runs in a Spark worker) and wait for all acknowledgements. Each Arrow batch's rows
    go to the producer with one ``send_many`` per destination partition (no future per row)."""
    producer = Producer(opts.bootstrap, client_id=opts.client_id, acks="all", linger_ms=opts.linger_ms,
                        batch_size=opts.batch_size, request_timeout_ms=opts.request_timeout_ms, retries=3,
                        security=opts.security)
    router = _Router(producer)
    rows = 0
    pending: deque[tuple[str, int, RecordsFuture]] = deque()
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            for (topic, part), records in _rows(batch, opts, router, rows).items():
                pending.append((topic, part, producer.send_many(topic, part, records)))
            rows += batch.num_rows
            _check_done(pending)  # acknowledgements so far, while the rest is on the wire
        producer.flush(opts.request_timeout_ms / 1000 + 5)
        _check_done(pending)
        if pending:
            raise SinkError(f"{len(pending)} groups of records were not acknowledged in time")
    finally:
        producer.close(5)
    return WriteResult(rows)


def _check_done(pending: deque[tuple[str, int, RecordsFuture]]) -> None:
    """Drop acknowledged sends from the head of ``pending``; raise the first failure met."""
    while pending and pending[0][2].done():
        topic, part, fut = pending.popleft()
        if fut.exception() is not None:
            raise SinkError(f"producing to {topic}-{part} failed: {fut.exception()}")


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions, schema: StructType, overwrite: bool = False) -> None:
        if overwrite:
            raise OptionsError(OVERWRITE_REFUSED)
        check_schema(schema, opts)
        check_reachable(opts.bootstrap, security=opts.security)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return write_batches(self.opts, iterator)


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        check_schema(schema, opts)
        check_reachable(opts.bootstrap, security=opts.security)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return write_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        return None

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        return None
