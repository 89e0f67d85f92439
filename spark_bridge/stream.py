"""Structured Streaming reads: offsets planned in Spark's long-lived driver-side reader process.

Offsets, as Spark checkpoints them (JSON):
    {"query": "<uuid>", "batch": N, "offsets": {"topic": {"0": next offset, ...}}}
``query`` is made once, by ``initialOffset`` of a new query, and travels in every checkpointed offset, so a
restarted query keeps it; it names the default consumer group ``<groupIdPrefix>-<query>`` (the reader
process is not told Spark's own query id). ``batch`` counts the micro-batches this source planned: the
batch id written into the group's commit metadata.

Rules:
- ``latestOffset(start, limit)`` returns ``start`` itself when there is nothing new (so Spark plans no
  batch). ``ReadMaxRows`` (``maxOffsetsPerTrigger``) is shared across partitions in proportion to their
  backlog; ``ReadAllAvailable`` ignores the option limits, as Spark requires. ``minOffsetsPerTrigger``
  holds a batch back until that many rows are waiting or ``maxTriggerDelay`` has passed since the last one;
  it is ignored under ``availableNow`` (the run must finish).
- ``prepareForTriggerAvailableNow`` records the log ends at that moment; no later offset is ever returned.
- New partitions of a subscribed topic (and new topics matching a pattern) are read from their earliest
  offset. A partition that disappeared, or whose log end is now below our offset, follows failOnDataLoss.
- Progress mirror (``commitOffsetsToGroup``, default true): when Spark commits a batch (``commit``), and
  when it asks for the batch after ``start`` (which it does only once every batch up to ``start`` is in its
  commit log, so the last batch of an ``availableNow`` run is mirrored too), the offsets are committed to
  the group (``spark_bridge.group``).
- ``read`` runs on pickled copies in workers; it shares the batch reader's range fetch.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from client.consumer_protocol import TopicPartition
from spark_bridge.group import GroupMirror
from spark_bridge.options import ReadOptions
from spark_bridge.planner import Offsets, Planner, limit_rows, plan_ranges
from spark_bridge.reader import RangePartition, data_loss, read_range

log = logging.getLogger(__name__)


def to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return out


def from_json(doc: dict[str, Any]) -> Offsets:
    return {TopicPartition(t, int(p)): int(o) for t, ps in doc.get("offsets", {}).items() for p, o in ps.items()}


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._planner: Planner | None = None
        self._mirror: GroupMirror | None = None
        self._target: Offsets | None = None
        self._last_batch_at = time.monotonic()

    def __getstate__(self) -> dict[str, Any]:
        return {"opts": self.opts, "_planner": None, "_mirror": None, "_target": None, "_last_batch_at": 0.0}

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.opts)
        return self._planner

    def group_id(self, query: str) -> str:
        return self.opts.group_id or f"{self.opts.group_id_prefix}-{query}"

    # ------------------------------------------------------------------ offsets (driver)
    def initialOffset(self) -> dict[str, Any]:
        o = self.opts
        tps = self.planner.partitions()
        offsets = self.planner.resolve(tps, o.starting, o.starting_timestamp, o.starting_by_timestamp,
                                       "startingOffsets")
        return {"query": uuid.uuid4().hex, "batch": -1, "offsets": to_json(offsets)}

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.planner.partitions(missing_ok=True)  # a deleted topic is reported by latestOffset
        self._target = self.planner.latest(tps)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._mirror_progress(start)
        begin = from_json(start)
        available = self._available(begin)
        # start offsets of partitions the query has not seen yet: earliest
        new = [tp for tp in available if tp not in begin]
        origin = dict(begin)
        if new:
            origin.update(self.planner.earliest(new))
        for tp in [tp for tp in origin if tp not in available]:
            data_loss(self.opts, f"{tp.topic}-{tp.partition} no longer exists (the query had read up to "
                                 f"offset {origin[tp]})")
            del origin[tp]
        for tp, end in available.items():
            if end < origin[tp]:
                data_loss(self.opts, f"{tp.topic}-{tp.partition}: the log ends at {end}, below the offset "
                                     f"{origin[tp]} the query had reached (was the topic recreated?)")
                origin[tp] = end
        total = sum(available[tp] - origin[tp] for tp in available)
        if isinstance(limit, ReadMaxRows):
            end_offsets = limit_rows(origin, available, limit.max_rows)
        else:
            end_offsets = dict(available)
        o = self.opts
        if (o.min_offsets_per_trigger and self._target is None and total < o.min_offsets_per_trigger
                and (time.monotonic() - self._last_batch_at) * 1000 < o.max_trigger_delay_ms):
            return start
        if end_offsets == begin:
            return start
        self._last_batch_at = time.monotonic()
        return {"query": start["query"], "batch": int(start["batch"]) + 1, "offsets": to_json(end_offsets)}

    def _available(self, begin: Offsets) -> Offsets:
        tps = self.planner.partitions(missing_ok=True)
        latest = self.planner.latest(tps)
        if self._target is not None:
            latest = {tp: min(off, self._target.get(tp, begin.get(tp, off))) for tp, off in latest.items()}
        return latest

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[RangePartition]:
        begin, stop = from_json(start), from_json(end)
        missing = [tp for tp in stop if tp not in begin]
        if missing:
            begin.update(self.planner.earliest(missing))
        return [RangePartition(r) for r in plan_ranges(begin, stop, self.opts.min_partitions)]

    def commit(self, end: dict[str, Any]) -> None:
        self._mirror_progress(end)

    def _mirror_progress(self, offsets: dict[str, Any]) -> None:
        if not self.opts.commit_offsets_to_group or int(offsets.get("batch", -1)) < 0:
            return
        if self._mirror is None:
            self._mirror = GroupMirror(self.opts.bootstrap, self.group_id(offsets["query"]),
                                       client_id=self.opts.client_id, request_timeout_ms=self.opts.request_timeout_ms,
                                       security=self.opts.security)
        self._mirror.commit(from_json(offsets), int(offsets["batch"]))

    def stop(self) -> None:
        for closeable in (self._planner, self._mirror):
            if closeable is not None:
                closeable.close()

    # ------------------------------------------------------------------ rows (workers)
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        yield from read_range(self.opts, partition.range)
