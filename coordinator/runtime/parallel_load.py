"""Loading offsets partitions on two cores: a second process decodes one partition while this one replays the last.

Rules:
- A load reads (``offsets_reader.read_chunks``, in a worker thread: file reads), decodes (``decode_chunks``:
  CRCs, records; pure Python, about half the load's CPU) and replays (the core; the other half) each
  offsets partition in turn. ``DecodedPartitions`` hands the partitions out in order, each decoded exactly
  as ``read_offsets_from`` would, with the decoding done by ONE spawned process (``multiprocessing`` "spawn":
  a process with threads is never forked) while the caller replays the previous partition.
- Bounded: at most ``AHEAD`` partitions are read and waiting to be decoded or replayed beyond the one the
  caller holds, so memory is a few partitions' bytes and records, never the whole log.
- Used only when the offsets partitions hold at least ``offsets.load.worker.min.bytes`` (ours; the caller
  decides): for small logs the process start (~0.2 s) costs more than it saves.
- The records handed out are ``offsets_reader.OffsetRecords``: their transactional events (``txn``) come along
  (pickled with the list from the decoding process), so the caller replays them in log order (``replay_steps``).
- Never fatal: a worker that cannot start, dies, or fails on a partition is logged once (WARNING) and that
  partition and every later one are decoded here, in a thread, as without it. A partition whose reading
  fails yields its StorageError/OSError for the caller to report (the load goes on with the next one).
"""

from __future__ import annotations

import logging
import multiprocessing
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

import trio

from coordinator.runtime.offsets_reader import Records, decode_chunks, read_chunks
from coordinator.storage.errors import StorageError

log = logging.getLogger("groupcoord.groups")

AHEAD = 2

Decoded = tuple[int, Any, "Records | None", list[str], "Exception | None"]  # shard, plog, records, problems, error


def _decode(chunks: list[tuple[int, bytes]], start: int) -> tuple[Records, list[str]]:
    problems: list[str] = []
    records, _ = decode_chunks(chunks, start, problems)
    return records, problems


class DecodedPartitions:
    """``async for shard, plog, records, problems, error in DecodedPartitions(shards, log_of, parallel)``."""

    def __init__(self, shards: range, log_of: Callable[[int], Any], parallel: bool) -> None:
        self._shards = shards
        self._log_of = log_of
        self._pool: ProcessPoolExecutor | None = None
        if parallel:
            try:
                self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
            except (OSError, ValueError) as e:
                log.warning("offsets load: no decoding process (%s); decoding in this one", e)

        self.parallel = self._pool is not None  # a decoding process was started (it may have failed since)

    async def __aiter__(self) -> AsyncIterator[Decoded]:
        queue: deque[tuple[int, Any, Future | None, list[tuple[int, bytes]] | None, Exception | None]] = deque()
        shards = iter(self._shards)
        try:
            while True:
                while len(queue) <= AHEAD:
                    shard = next(shards, None)
                    if shard is None:
                        break
                    queue.append(await self._read(shard))
                if not queue:
                    return
                shard, plog, future, chunks, error = queue.popleft()
                if error is not None:
                    yield shard, plog, None, [], error
                    continue
                assert chunks is not None
                decoded = await self._result(future, chunks, plog)
                yield (shard, plog, *decoded, None)
        finally:
            self.close()

    async def _read(self, shard: int) -> tuple[int, Any, Future | None, list[tuple[int, bytes]] | None,
                                                Exception | None]:
        try:
            plog = self._log_of(shard)
            start = plog.log_start_offset
            chunks = await trio.to_thread.run_sync(lambda: read_chunks(plog, start))
        except (StorageError, OSError) as e:
            return shard, None, None, None, e
        future = None
        if self._pool is not None:
            try:
                future = self._pool.submit(_decode, chunks, start)
            except Exception as e:  # a broken pool refuses submits
                self._give_up(e)
        return shard, plog, future, chunks, None

    async def _result(self, future: Future | None, chunks: list[tuple[int, bytes]], plog: Any
                      ) -> tuple[Records, list[str]]:
        if future is not None:
            try:
                return await trio.to_thread.run_sync(future.result)
            except Exception as e:  # the process died, or could not take or give the data
                self._give_up(e)
        start = chunks[0][0] if chunks else plog.log_start_offset
        return await trio.to_thread.run_sync(_decode, chunks, start)

    def _give_up(self, error: BaseException) -> None:
        if self._pool is not None:
            log.warning("offsets load: the decoding process failed (%s: %s); decoding the rest in this one",
                        type(error).__name__, error)
            self.close()

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
