"""The lag gauges' sampler (issue #37): computes ``coordinator.core.lag`` off the request path, every few seconds.

Rules:
- Every ``metrics.lag.interval.ms``, or ten times the last computation's duration when that is longer (the
  scan of millions of committed offsets costs seconds: it never takes more than a tenth of a core), it scans
  the committed offsets of every offsets partition this node serves (ACTIVE shards) against the ends it
  knows, in chunks of ``SCAN_CHUNK`` groups between trio checkpoints, and publishes one ``LagSeries``.
- Ends: each topic partition this node hosts, internal (``__``) topics excepted. Single node: the log's high
  watermark. Cluster: the replicated high watermark where this node leads, the one its leader last reported
  where it follows; a partition it does not host has no known end (its lag is not shown by this node).
- Lag seconds needs the timestamp of the record at a committed offset: read from the local log in a worker
  thread (the first record at or past it), for the groups with series of their own only, and remembered
  (``TIMESTAMP_CACHE`` entries, oldest dropped first): a committed offset's record does not change.
- The metrics thread reads ``latest`` (one reference, replaced whole) at scrape time. Before the first scan,
  and on a node with nothing committed, there are no lag series.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import trio

from coordinator.core.lag import LagSeries, own_groups, scan, series, to_wanted_timestamps
from coordinator.storage.errors import StorageError
from protocol.record_batch import CorruptBatchError, split_batches
from protocol.record_reader import records

log = logging.getLogger("groupcoord.lag")

SCAN_CHUNK = 2_000  # groups scanned between two trio checkpoints
TIMESTAMP_CACHE = 100_000
READ_BYTES = 64 * 1024  # enough for the batch holding a committed offset (a larger one is read whole)
COST_FACTOR = 10  # the interval is at least this many times the last computation


class LagSampler:
    def __init__(self, core: Any, topics: Any, config: Any) -> None:
        self.core = core  # coordinator.core.coordinator.Coordinator
        self.topics = topics  # runtime TopicService: .logs, .cluster
        self.interval_s = config["metrics.lag.interval.ms"] / 1000
        self.max_groups = config["metrics.lag.max.groups"]
        self.per_partition = config["metrics.lag.per.partition"]
        self.latest: LagSeries | None = None
        self.last_scan_s = 0.0
        self._stamps: OrderedDict[tuple[str, int, int], int | None] = OrderedDict()

    async def run(self) -> None:
        while True:
            await trio.sleep(max(self.interval_s, COST_FACTOR * self.last_scan_s))
            try:
                await self.sample()
            except Exception:  # the gauges must never take the server down
                log.exception("computing the lag gauges failed")

    async def sample(self) -> LagSeries:
        started = time.perf_counter()
        ends = self.ends()
        lags = {}
        for store in self.core.active_offset_stores():
            groups = list(store.groups())
            for i in range(0, len(groups), SCAN_CHUNK):
                lags.update(scan(store, groups[i:i + SCAN_CHUNK], ends))
                await trio.lowlevel.checkpoint()
        wanted = to_wanted_timestamps(lags, own_groups(lags, self.max_groups))
        missing = [w for w in wanted if w not in self._stamps]
        if missing:
            found = await trio.to_thread.run_sync(self._read_timestamps, missing)
            for w, ts in found.items():
                self._stamps[w] = ts
            while len(self._stamps) > TIMESTAMP_CACHE:
                self._stamps.popitem(last=False)
        stamps = self._stamps
        out = series(lags, self.max_groups, int(time.time() * 1000), lambda t, p, o: stamps.get((t, p, o)),
                     self.per_partition)
        self.latest = out
        self.last_scan_s = time.perf_counter() - started
        return out

    def ends(self) -> dict[tuple[str, int], int]:
        """The end of every topic partition this node hosts (see the rules)."""
        logs = self.topics.logs
        cluster = getattr(self.topics, "cluster", None)
        replication = getattr(cluster, "replication", None) if cluster is not None else None
        out: dict[tuple[str, int], int] = {}
        for topic, p in logs.partitions():
            if topic.startswith("__"):  # internal topics
                continue
            if replication is None:
                plog = logs.get(topic, p)
                if plog is not None:
                    out[(topic, p)] = plog.high_watermark
                continue
            st = replication.leaders.get((topic, p))
            if st is not None:
                out[(topic, p)] = st.high_watermark
            elif (topic, p) in replication.follower_hw:
                out[(topic, p)] = replication.follower_hw[(topic, p)]
        return out

    def _read_timestamps(self, wanted: list[tuple[str, int, int]]) -> dict[tuple[str, int, int], int | None]:
        """Worker thread: the timestamp of the first record at or past each offset (None when unreadable)."""
        out: dict[tuple[str, int, int], int | None] = {}
        logs = self.topics.logs
        for topic, p, offset in wanted:
            out[(topic, p, offset)] = timestamp_at(logs.get(topic, p), offset)
        return out


def timestamp_at(plog: Any, offset: int) -> int | None:
    """The timestamp of the first record at or past ``offset`` in ``plog`` (below its high watermark), or None."""
    if plog is None:
        return None
    try:
        data = plog.read(max(offset, plog.log_start_offset), READ_BYTES, upper_bound=plog.high_watermark)
        for batch in split_batches(data)[0]:
            for rec in records(batch, verify_crc=False)[1]:
                if rec.offset >= offset:
                    return rec.timestamp
    except (StorageError, OSError, CorruptBatchError):
        return None
    return None


Source = Callable[[], LagSeries | None]
