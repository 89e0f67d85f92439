"""Group commit: one append and one fsync per dirty partition log for everything of the last few ms.

Rules:
- ``append`` writes to the OS page cache at once (on the trio thread; it is a positional write) and marks
  the log dirty. ``stage(log, records, callback)`` defers the write instead: every record staged for a log
  during a round becomes ONE record batch, appended at the start of the next flush round (offsets commits
  from many connections cost one batch, one write and one fsync).
- ``when_durable(log, last_offset, callback)`` calls ``callback(None)`` once an fsync covering
  ``last_offset`` has returned, or ``callback(error)`` if the log went offline: a response that depends on a
  write is released only through these callbacks, so nothing is acknowledged before it is durable.
- The flusher wakes on the first append, lingers ``log.flush.linger.ms`` to gather more (not when the
  previous round ended with work already waiting: that work gathered during the fsync), then fsyncs every
  dirty log off the event loop: ONE trio worker-thread call per round, which fans the fsyncs out over a
  small thread pool (at most ``FSYNC_THREADS`` chunks of logs, in parallel). A trio thread hop costs the
  event loop far more than a pool hop, and a round may touch all 50 offsets partitions. An fsync error takes that log offline
  (storage never retries); its waiters get the error, other logs are unaffected.
- Callbacks run on the trio thread, in the order their writes were appended per log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import trio

from coordinator.metrics import Metrics
from coordinator.storage.errors import LogOfflineError, StorageError
from coordinator.storage.log import AppendInfo, PartitionLog
from protocol.record_batch import build_batch

log = logging.getLogger("groupcoord.group_commit")

Callback = Callable[[Exception | None], None]
KeyValue = tuple[bytes, bytes | None]

FSYNC_THREADS = 8


class GroupCommit:
    def __init__(self, linger_ms: int, metrics: Metrics | None = None) -> None:
        self.linger = linger_ms / 1000
        self.metrics = metrics
        self._dirty: set[PartitionLog] = set()
        # in registration order across all logs: callbacks fire in that order (the core needs its writes
        # acknowledged in the order it returned them, also when one write spans several offsets partitions)
        self._waiters: list[tuple[PartitionLog, int, Callback]] = []
        self._staged: dict[PartitionLog, tuple[list[KeyValue], list[Callback]]] = {}
        self._kick = trio.Event()
        self._pool: ThreadPoolExecutor | None = None  # created on the first round with several logs
        self.rounds = 0

    def append(self, plog: PartitionLog, batches: Sequence[bytes]) -> AppendInfo:
        info = plog.append(batches)
        self._dirty.add(plog)
        self._kick.set()
        return info

    def stage(self, plog: PartitionLog, records: Sequence[KeyValue], callback: Callback) -> None:
        staged = self._staged.get(plog)
        if staged is None:
            staged = self._staged[plog] = ([], [])
        staged[0].extend(records)
        staged[1].append(callback)
        self._kick.set()

    def when_durable(self, plog: PartitionLog, last_offset: int, callback: Callback) -> None:
        if plog.offline:
            _call(callback, LogOfflineError(f"partition log {plog.directory} is offline"))
        elif plog.recovery_point > last_offset:
            _call(callback, None)
        else:
            self._waiters.append((plog, last_offset, callback))
            self._kick.set()

    async def run(self) -> None:
        hot = False
        while True:
            await self._kick.wait()
            self._kick = trio.Event()
            if self.linger and not hot:
                await trio.sleep(self.linger)
            await self.flush_now()
            hot = self._kick.is_set()

    def _append_staged(self) -> None:
        staged, self._staged = self._staged, {}
        now = int(time.time() * 1000)
        for plog, (records, callbacks) in staged.items():
            try:
                info = self.append(plog, [build_batch([(k, v, (), now) for k, v in records])])
            except (StorageError, OSError) as e:
                for cb in callbacks:
                    _call(cb, e if isinstance(e, StorageError) else LogOfflineError(str(e)))
                continue
            for cb in callbacks:
                self.when_durable(plog, info.last_offset, cb)

    def close(self) -> None:
        """Stop the fsync pool (after the last ``flush_now``)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    async def flush_now(self) -> None:
        self._append_staged()
        dirty = list(self._dirty | {w[0] for w in self._waiters})
        self._dirty.clear()
        if not dirty:
            return
        t0 = time.perf_counter()
        if len(dirty) > 1 and self._pool is None:
            self._pool = ThreadPoolExecutor(FSYNC_THREADS, thread_name_prefix="fsync")
        results = await trio.to_thread.run_sync(_flush_all, dirty, self._pool)
        self.rounds += 1
        if self.metrics is not None:
            self.metrics.flush_seconds.observe(time.perf_counter() - t0)
        waiters, self._waiters = self._waiters, []
        for plog, last, cb in waiters:
            outcome = results.get(plog)
            if isinstance(outcome, Exception):
                _call(cb, outcome)
            elif outcome is not None and outcome > last:
                _call(cb, None)
            else:
                self._waiters.append((plog, last, cb))  # appended after the fsync began: next round
        if self._waiters:
            self._kick.set()


def _flush_all(logs: list[PartitionLog], pool: ThreadPoolExecutor | None) -> dict[PartitionLog, int | Exception]:
    """Runs in a trio worker thread: every log's fsync. Several logs are split into at most FSYNC_THREADS
    chunks fsynced in parallel over ``pool``, each chunk in turn (a pool task per log would cost the GIL
    more than the fsyncs cost the disk)."""
    if len(logs) == 1 or pool is None:
        return {plog: _flush(plog) for plog in logs}
    chunks = [logs[i::FSYNC_THREADS] for i in range(min(FSYNC_THREADS, len(logs)))]
    results: dict[PartitionLog, int | Exception] = {}
    for done in pool.map(_flush_chunk, chunks):
        results.update(done)
    return results


def _flush_chunk(logs: list[PartitionLog]) -> dict[PartitionLog, int | Exception]:
    return {plog: _flush(plog) for plog in logs}


def _call(callback: Callback, error: Exception | None) -> None:
    """A failing callback (a bug where it releases responses) is logged; it never stops the flusher."""
    try:
        callback(error)
    except Exception:
        log.exception("a durability callback failed")


def _flush(plog: PartitionLog) -> int | Exception:
    try:
        return plog.flush()
    except StorageError as e:  # offline, or closed because its topic was deleted after the append
        return e
    except OSError as e:  # storage converts these, but never let one kill the flusher
        log.error("flush of %s failed: %s", plog.directory, e)
        return LogOfflineError(str(e))
