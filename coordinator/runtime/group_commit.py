"""Group commit: one fsync per dirty partition log for everything appended in the last few milliseconds.

Rules:
- ``append`` writes to the OS page cache at once (on the trio thread; it is a positional write) and marks
  the log dirty. ``when_durable(log, last_offset, callback)`` calls ``callback(None)`` once an fsync covering
  ``last_offset`` has returned, or ``callback(error)`` if the log went offline: a response that depends on a
  write is released only through this callback, so nothing is acknowledged before it is durable.
- The flusher wakes on the first append, lingers ``log.flush.linger.ms`` to gather more, then fsyncs every
  dirty log in a worker thread (never on the event loop). An fsync error takes that log offline (storage
  never retries); its waiters get the error, other logs are unaffected.
- Callbacks run on the trio thread, in the order their writes were appended per log.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Callable, Sequence

import trio

from coordinator.metrics import Metrics
from coordinator.storage.errors import LogOfflineError, StorageError
from coordinator.storage.log import AppendInfo, PartitionLog

log = logging.getLogger("groupcoord.group_commit")

Callback = Callable[[Exception | None], None]


class GroupCommit:
    def __init__(self, linger_ms: int, metrics: Metrics | None = None) -> None:
        self.linger = linger_ms / 1000
        self.metrics = metrics
        self._dirty: set[PartitionLog] = set()
        self._waiters: dict[PartitionLog, list[tuple[int, Callback]]] = defaultdict(list)
        self._kick = trio.Event()
        self.fsyncs = 0

    def append(self, plog: PartitionLog, batches: Sequence[bytes]) -> AppendInfo:
        info = plog.append(batches)
        self._dirty.add(plog)
        self._kick.set()
        return info

    def when_durable(self, plog: PartitionLog, last_offset: int, callback: Callback) -> None:
        if plog.offline:
            callback(LogOfflineError(f"partition log {plog.directory} is offline"))
        elif plog.recovery_point > last_offset:
            callback(None)
        else:
            self._waiters[plog].append((last_offset, callback))
            self._kick.set()

    async def run(self) -> None:
        while True:
            await self._kick.wait()
            self._kick = trio.Event()
            if self.linger:
                await trio.sleep(self.linger)
            await self.flush_now()

    async def flush_now(self) -> None:
        dirty = list(self._dirty | set(self._waiters))
        self._dirty.clear()
        if not dirty:
            return
        t0 = time.perf_counter()
        results = await trio.to_thread.run_sync(_flush_all, dirty)
        self.fsyncs += 1
        if self.metrics is not None:
            self.metrics.flush_seconds.observe(time.perf_counter() - t0)
        for plog, outcome in results:
            waiters = self._waiters.pop(plog, [])
            if isinstance(outcome, Exception):
                for _, cb in waiters:
                    cb(outcome)
                continue
            keep = []
            for last, cb in waiters:
                if outcome > last:
                    cb(None)
                else:
                    keep.append((last, cb))  # appended after the fsync began: next round
            if keep:
                self._waiters[plog] = keep
                self._kick.set()


def _flush_all(logs: list[PartitionLog]) -> list[tuple[PartitionLog, int | Exception]]:
    out: list[tuple[PartitionLog, int | Exception]] = []
    for plog in logs:
        try:
            out.append((plog, plog.flush()))
        except StorageError as e:  # offline, or closed because its topic was deleted after the append
            out.append((plog, e))
        except OSError as e:  # storage converts these, but never let one kill the flusher
            log.error("flush of %s failed: %s", plog.directory, e)
            out.append((plog, LogOfflineError(str(e))))
    return out
