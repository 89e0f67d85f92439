"""The lag gauges' sampler (issue #37): computes ``coordinator.core.lag`` off the request path, every few seconds.

Rules:
- Every ``metrics.lag.interval.ms``, or ten times the last computation's duration when that is longer (the
  scan of millions of committed offsets costs seconds: it never takes more than a tenth of a core), and not
  while an offsets partition is loading (the load goes first), it scans
  the committed offsets of every offsets partition this node serves (ACTIVE shards) against the ends it
  knows, in chunks of ``SCAN_CHUNK`` groups between trio checkpoints, and publishes one ``LagSeries``.
- Ends: each topic partition this node hosts, internal (``__``) topics excepted. Single node: the log's high
  watermark. Cluster: the replicated high watermark where this node leads, the one its leader last reported
  where it follows; a committed partition it does not host is asked of its leader after the scan
  (``lag_remote``: one ListOffsets per leader node, on the inter-broker listener with its login, bounded)
  and used by the next scan: its lag appears one interval later. A partition with no
  live leader, or a leader that does not answer, has no known end (one rate-limited warning).
- Lag seconds needs the timestamp of the record at a committed offset: read from the local log in a worker
  thread (the first record at or past it), or in a cluster from the leader of a partition this node does not
  host (``lag_remote``: Fetches of at most ``READ_BYTES`` per partition), for the groups with series of their own only, and remembered
  (``TIMESTAMP_CACHE`` entries, oldest dropped first): a committed offset's record does not change.
- Offsets retention (issue #37 item 5): each round also counts the committed offsets the retention checks of the
  next day would remove (``Coordinator.offsets_expiring``, ``SCAN_CHUNK`` groups between checkpoints; per-group
  retention included) into ``expiring``, the gauge ``groupcoord_offsets_expiring_within_day``. The sampler
  installs it in the metrics it finds through the topic service's broker (``groups.expiring``).
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

from coordinator.core.lag import (
    READ_BYTES,
    LagSeries,
    first_timestamp,
    own_groups,
    scan,
    series,
    to_wanted_timestamps,
)
from coordinator.storage.errors import StorageError

log = logging.getLogger("groupcoord.lag")

SCAN_CHUNK = 2_000  # groups scanned between two trio checkpoints
TIMESTAMP_CACHE = 100_000
COST_FACTOR = 10  # the interval is at least this many times the last computation
DAY_MS = 86_400_000


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
        self._remote: dict[tuple[str, int], int] = {}  # ends the leaders told the last scan
        cluster = getattr(topics, "cluster", None)
        replication = getattr(cluster, "replication", None) if cluster is not None else None
        self.expiring: int | None = None  # offsets due to expire within a day (None: not computed yet)
        metrics = getattr(getattr(topics, "broker", None), "metrics", None)
        if metrics is not None:
            metrics.groups.expiring = lambda: self.expiring
        self.remote: Any = None
        if replication is not None:  # cluster mode only: single-node mode never imports the cluster packages
            from coordinator.runtime.lag_remote import RemoteLeaders

            self.remote = RemoteLeaders(replication)

    async def run(self) -> None:
        while True:
            await trio.sleep(max(self.interval_s, COST_FACTOR * self.last_scan_s))
            if self.core.loading():  # the load goes first (a scan of millions of offsets would slow it)
                continue
            try:
                await self.sample()
                started = time.perf_counter()
                await self.sample_expiring()
                self.last_scan_s += time.perf_counter() - started
            except Exception:  # the gauges must never take the server down
                log.exception("computing the lag gauges failed")

    async def sample(self) -> LagSeries:
        started = time.perf_counter()
        local = self.ends()
        ends = {**self._remote, **local}
        lags = {}
        unknown: set[tuple[str, int]] = set()
        for store in self.core.active_offset_stores():
            groups = list(store.groups())
            for i in range(0, len(groups), SCAN_CHUNK):
                lags.update(scan(store, groups[i:i + SCAN_CHUNK], ends, unknown))
                await trio.lowlevel.checkpoint()
        wanted = to_wanted_timestamps(lags, own_groups(lags, self.max_groups))
        missing = [w for w in wanted if w not in self._stamps]
        if missing:
            here = [w for w in missing if (w[0], w[1]) in local]
            found = await trio.to_thread.run_sync(self._read_timestamps, here) if here else {}
            elsewhere = [w for w in missing if (w[0], w[1]) not in local]
            if elsewhere and self.remote is not None:
                found.update(await self.remote.timestamps(elsewhere))
            for w, ts in found.items():
                if ts is not None:  # an unreadable one is asked again next time
                    self._stamps[w] = ts
            while len(self._stamps) > TIMESTAMP_CACHE:
                self._stamps.popitem(last=False)
        if self.remote is not None:  # for the next scan: the partitions no local log knows
            asked = {tp for tp in self._remote if tp not in local} | unknown
            self._remote = await self.remote.ends(asked) if asked else {}
        stamps = self._stamps
        out = series(lags, self.max_groups, int(time.time() * 1000), lambda t, p, o: stamps.get((t, p, o)),
                     self.per_partition)
        self.latest = out
        self.last_scan_s = time.perf_counter() - started
        return out

    async def sample_expiring(self) -> int:
        """Offsets the next day's retention checks would remove (see the rules); published in ``expiring``."""
        total = 0
        for n in self.core.offsets_expiring(int(time.time() * 1000), DAY_MS, SCAN_CHUNK):
            total += n
            await trio.lowlevel.checkpoint()
        self.expiring = total
        return total

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
    except (StorageError, OSError):
        return None
    return first_timestamp(data, offset)


Source = Callable[[], LagSeries | None]
