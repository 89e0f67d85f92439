"""The compactor of user topics (cleanup.policy includes compact), run beside the server, off the request path.

Rules:
- One partition at a time, in a worker thread: the filthiest due partition (``cleaner.due``: dirty ratio,
  ``max.compaction.lag.ms``, passed delete horizons) is cleaned with a key map of at most
  ``log.cleaner.dedupe.buffer.size`` bytes; when none is due the loop sleeps ``log.cleaner.backoff.ms``.
- The list of partitions is taken on the trio thread (topics are created and deleted there); a partition
  whose topic is altered to compact is picked up by the next look, one altered away from it is skipped.
- A failed pass is logged (the log goes offline on a write failure, as for appends) and the loop goes on. A
  pass whose log is closed under it (topic deleted) stops at its next batch (``CleaningAborted``), so the
  deletion, on the trio thread, waits for one batch and not for the whole pass.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import trio

from coordinator.storage.cleaner import CleaningAborted, clean, dirty_ratio, due
from coordinator.storage.errors import StorageError
from coordinator.storage.log import PartitionLog

if TYPE_CHECKING:
    from coordinator.runtime.topics import TopicService

log = logging.getLogger("groupcoord.cleaner")


def _filthiest(candidates: list[PartitionLog], now_ms: int) -> PartitionLog | None:
    best: tuple[float, PartitionLog] | None = None
    for plog in candidates:
        try:
            if not due(plog, now_ms):
                continue
            ratio = dirty_ratio(plog, now_ms)
        except (StorageError, OSError) as e:
            log.error("cleaner: looking at %s failed: %s", plog.name, e)
            continue
        if best is None or ratio > best[0]:
            best = (ratio, plog)
    return None if best is None else best[1]


async def user_compaction_loop(topics: TopicService) -> None:
    cfg = topics.config
    backoff_s = cfg["log.cleaner.backoff.ms"] / 1000
    buffer_bytes = cfg["log.cleaner.dedupe.buffer.size"]
    logs = topics.logs
    while True:
        candidates = [plog for topic, part in logs.partitions() if not topic.startswith("__")
                      if (plog := logs.get(topic, part)) is not None and plog.config.compact and not plog.offline]
        now_ms = int(time.time() * 1000)
        plog = await trio.to_thread.run_sync(_filthiest, candidates, now_ms) if candidates else None
        if plog is None:
            await trio.sleep(backoff_s)
            continue
        try:
            res = await trio.to_thread.run_sync(clean, plog, now_ms, buffer_bytes)
            log.info("cleaned %s: %d segment(s) rewritten, %d records removed, %d -> %d bytes, %d keys mapped",
                     plog.name, res.segments_rewritten, res.records_removed, res.bytes_before, res.bytes_after,
                     res.map_entries)
        except CleaningAborted:  # its topic was deleted (or the server stops) during the pass
            log.info("cleaning %s stopped: the log is being closed", plog.name)
        except (StorageError, OSError) as e:
            log.error("cleaning %s failed: %s", plog.name, e)
            await trio.sleep(backoff_s)
        await trio.sleep(0)
