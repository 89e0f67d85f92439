"""Batch reads: the driver plans offset ranges, each Spark task fetches one range as Arrow record batches.

Rules:
- ``partitions()`` runs on the driver: it resolves the subscription and the starting/ending offsets to
  concrete ranges (``spark_bridge.planner``). An ending offset below the starting one is data loss.
- ``read()`` runs in a Python worker on a pickled copy: it opens its own connections (never in
  ``__init__``), fetches exactly ``[start, end)`` of one partition with ``client.range_reader.RangeReader``
  and yields ``pyarrow.RecordBatch`` rows of the source schema. Workers join no group and commit nothing.
  Nothing to read (an empty topic, or no offsets between start and end) is an empty result: PySpark then
  hands ``read()`` its placeholder ``InputPartition(None)``, which yields no rows.
- Data loss (offsets gone to retention, a deleted topic or partition, a log shorter than planned): with
  ``failOnDataLoss`` true (the default) the task fails with a message naming the partition, the offsets and
  the option; with false it logs a warning and reads what is left of the range.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from client.consumer_protocol import TopicPartition
from client.range_reader import RangeReader, RangeUnavailableError
from spark_bridge.arrow import RowBuffer
from spark_bridge.options import ReadOptions
from spark_bridge.planner import OffsetRange, Planner, plan_ranges

log = logging.getLogger(__name__)


class DataLossError(RuntimeError):
    """Offsets a query planned to read are gone and failOnDataLoss is true."""


class RangePartition(InputPartition):
    """One Spark partition: the offsets ``[start, end)`` of one Kafka partition."""

    def __init__(self, r: OffsetRange) -> None:
        super().__init__((r.topic, r.partition, r.start, r.end))
        self.range = r


def data_loss(opts: ReadOptions, message: str) -> None:
    if opts.fail_on_data_loss:
        raise DataLossError(f"{message}. Some data may have been lost (deleted by retention, or the topic or "
                            "partition was deleted). Set the option failOnDataLoss to false to skip it with a "
                            "warning instead")
    log.warning("%s; skipping it (failOnDataLoss=false)", message)


def read_range(opts: ReadOptions, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The rows of one planned range (runs in a Spark worker)."""
    if r.end <= r.start:
        return
    tp = TopicPartition(r.topic, r.partition)
    buf = RowBuffer(r.topic, r.partition, opts.include_headers)
    with RangeReader(opts.bootstrap, client_id=opts.client_id, request_timeout_ms=opts.request_timeout_ms,
                     security=opts.security) as rr:
        start = r.start
        while start < r.end:
            try:
                for ts_type, records in rr.read(tp, start, r.end):
                    start = records[-1].offset + 1
                    yield from buf.add(ts_type, records)
                break
            except RangeUnavailableError as e:
                data_loss(opts, f"cannot read {r.topic}-{r.partition} offsets [{start}, {r.end}): {e}")
                if e.log_start is None or e.log_end is None or not start < e.log_start < r.end:
                    break  # nothing of the range is left (deleted, or the log ends before it)
                start = e.log_start
        if buf.rows:
            yield buf.flush()


class BatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[RangePartition]:
        o = self.opts
        planner = Planner(o)
        try:
            tps = planner.partitions()
            start = planner.resolve(tps, o.starting, o.starting_timestamp, o.starting_by_timestamp,
                                    "startingOffsets")
            end = planner.resolve(tps, o.ending, o.ending_timestamp, o.ending_by_timestamp, "endingOffsets")
        finally:
            planner.close()
        for tp in tps:
            if end[tp] < start[tp]:
                data_loss(o, f"{tp.topic}-{tp.partition}: the ending offset {end[tp]} is below the starting "
                             f"offset {start[tp]}")
        return [RangePartition(r) for r in plan_ranges(start, end, o.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return  # Spark's InputPartition(None), sent when partitions() planned nothing: no rows
        yield from read_range(self.opts, partition.range)
