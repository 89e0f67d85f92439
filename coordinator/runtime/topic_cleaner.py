"""The compactor of user topics (cleanup.policy includes compact), run beside the server, off the request path.

Rules:
- One partition at a time, in a worker thread: the filthiest due partition (``cleaner.due``: dirty ratio,
  ``max.compaction.lag.ms``, passed delete horizons) is cleaned with a key map of at most
  ``log.cleaner.dedupe.buffer.size`` bytes; when none is due the loop sleeps ``log.cleaner.backoff.ms``.
- The list of partitions is taken on the trio thread (topics are created and deleted there); a partition
  whose topic is altered to compact is picked up by the next look, one altered away from it is skipped.
- Transactions: a partition whose producer states the topic service holds (single node: they follow every
  append and marker) is bounded by their last stable offset, read on the trio thread at the partition's high
  watermark, both to judge whether it is due and for the pass, which also gets their aborted transactions
  and live producer ids (``cleaner.transactions_of``). Without them (never used since start, or cluster mode,
  where a follower's log grows without them) ``due`` has no bound and the pass rebuilds them from the log in
  its worker thread (``cleaner.scan_transactions``): never clean at or past the LSO either way.
- A pass that found nothing to do (no segment rewritten, the first dirty offset did not move: e.g. an open
  transaction holds the dirty section) puts its partition aside for ``log.cleaner.backoff.ms``, so a stuck
  LSO neither spins the loop nor starves the other partitions.
- A failed pass is logged (the log goes offline on a write failure, as for appends) and the loop goes on. A
  pass whose log is closed under it (topic deleted) stops at its next batch (``CleaningAborted``), so the
  deletion, on the trio thread, waits for one batch and not for the whole pass.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import trio

from coordinator.storage.cleaner import (
    CleaningAborted,
    Transactions,
    clean,
    dirty_ratio,
    due,
    transactions_of,
)
from coordinator.storage.errors import StorageError
from coordinator.storage.log import PartitionLog
from coordinator.storage.producer_state import ProducerStates

if TYPE_CHECKING:
    from coordinator.runtime.topics import TopicService

log = logging.getLogger("groupcoord.cleaner")


def _filthiest(candidates: list[PartitionLog], now_ms: int, bounds: dict[PartitionLog, int]) -> PartitionLog | None:
    best: tuple[float, PartitionLog] | None = None
    for plog in candidates:
        bound = bounds.get(plog)
        try:
            if not due(plog, now_ms, bound):
                continue
            ratio = dirty_ratio(plog, now_ms, bound)
        except (StorageError, OSError) as e:
            log.error("cleaner: looking at %s failed: %s", plog.name, e)
            continue
        if best is None or ratio > best[0]:
            best = (ratio, plog)
    return None if best is None else best[1]


def _trusted_states(topics: TopicService) -> dict[PartitionLog, ProducerStates]:
    """The producer states that follow every append of their log (none in cluster mode: see the rules)."""
    if getattr(topics, "cluster", None) is not None:
        return {}
    return dict(topics.producer_states_known())


def _transactions(states: ProducerStates | None, plog: PartitionLog) -> Transactions | None:
    return None if states is None else transactions_of(states, plog.high_watermark, plog.log_start_offset)


async def user_compaction_loop(topics: TopicService) -> None:
    cfg = topics.config
    backoff_ms = cfg["log.cleaner.backoff.ms"]
    backoff_s = backoff_ms / 1000
    buffer_bytes = cfg["log.cleaner.dedupe.buffer.size"]
    logs = topics.logs
    idle: dict[PartitionLog, int] = {}  # partition -> when it may be looked at again (its last pass was idle)
    while True:
        now_ms = int(time.time() * 1000)
        idle = {p: until for p, until in idle.items() if until > now_ms}
        candidates = [plog for topic, part in logs.partitions() if not topic.startswith("__")
                      if (plog := logs.get(topic, part)) is not None and plog.config.compact and not plog.offline
                      and plog not in idle]
        states = _trusted_states(topics) if candidates else {}
        bounds = {p: s.last_stable_offset(p.high_watermark) for p in candidates if (s := states.get(p)) is not None}
        plog = await trio.to_thread.run_sync(_filthiest, candidates, now_ms, bounds) if candidates else None
        if plog is None:
            await trio.sleep(backoff_s)
            continue
        try:
            txns = _transactions(states.get(plog), plog)
            res = await trio.to_thread.run_sync(clean, plog, now_ms, buffer_bytes, txns)
            log.info("cleaned %s below %d: %d segment(s) rewritten, %d records removed, %d markers removed, "
                     "%d batches kept empty, %d -> %d bytes, %d keys mapped", plog.name, res.upper_bound,
                     res.segments_rewritten, res.records_removed, res.markers_removed, res.empty_batches,
                     res.bytes_before, res.bytes_after, res.map_entries)
            if res.segments_rewritten == 0 and res.end_offset <= res.first_dirty:
                idle[plog] = now_ms + backoff_ms
        except CleaningAborted:  # its topic was deleted (or the server stops) during the pass
            log.info("cleaning %s stopped: the log is being closed", plog.name)
        except (StorageError, OSError) as e:
            log.error("cleaning %s failed: %s", plog.name, e)
            await trio.sleep(backoff_s)
        await trio.sleep(0)
