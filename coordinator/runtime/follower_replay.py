"""Followers replay the offsets partitions they replicate as they go (issue #20), so a new coordinator
answers at once instead of after a load (Kafka reloads the whole partition on election: kop#432).

Rules:
- An offsets shard this node replicates without leading is FOLLOWING in the core and replayed from its
  log. ``replayed[shard]`` is the offset below which every record of the log went through the core's
  replay, in log order; records are keyed and last-write-wins, so the state equals a fresh load of the log
  below that offset. A shard is in ``replayed`` only while FOLLOWING and current.
- ``on_append`` is ``Replication.on_follower_append`` (a followed log's new batches, durable here, in log
  order, on the trio thread). Batches that start where the replay stands are decoded with the load's
  decoder (``decode_batch_key_values``; not their CRCs: the follower append checked those) and replayed at
  once, within ``INLINE_BYTES`` per ``INLINE_WINDOW_S``; a corrupt batch or an undecodable record is logged
  and skipped, never fatal.
  Transactional batches and COMMIT/ABORT markers replay in log order with the plain records, as at load
  (``offsets_reader``'s events and ``replay_steps``): pending offsets per producer, completed by the marker.
  Anything else (over the budget, a gap, a catch-up running for that shard) marks the shard ``behind`` and
  wakes the leadership loop, which reads the missing records from the log in a worker thread and replays
  them in chunks of ``REPLAY_CHUNK`` records between trio checkpoints (``catch_up``): the trio thread never
  replays much at once, and nothing is buffered here (the log is the buffer).
- ``on_truncate`` is ``Replication.on_follower_truncate`` (the log was cut back, or emptied and restarted at
  its leader's log start): the state may hold records no longer in the log, so the shard becomes ``stale``
  and its generation moves on (a catch-up running for it gives up); it is rebuilt from the log's start
  (``begin_following`` empties it first), so its state is again a fresh load of the log.
- A shard this node follows at startup, starts following, or stopped leading (``restart``) is stale: it is
  rebuilt from its log once, in the background, not served meanwhile (NOT_COORDINATOR), then kept current
  by ``on_append``. A leader's in-memory groups hold what no record says (a rebalance in progress, a write
  that failed but stayed in the log), so a lost leadership is replayed from the log, never kept.
- Becoming leader (``catch_up_tail`` then ``leave`` and the core's ``finish_loading``): a current shard
  replays only the tail it has not replayed (usually none) and turns ACTIVE at once; a stale one is loaded
  as before this existed (LOADING: COORDINATOR_LOAD_IN_PROGRESS meanwhile). An ACTIVE shard's own writes are
  replayed by the core's ``on_appended``, never here: nothing is applied twice. A node about to lead reads
  up to its log end, not its durable end: a follower append whose journal fsync was under way at the change
  is in the log it now leads, so it is in the state (its hook, called once durable, finds the shard ACTIVE
  and does nothing).
- Memory: a follower holds the offsets and group metadata of every offsets partition it replicates (about
  what their leaders hold): that is the point, a failover needs no load.
- Single-node mode never wires these hooks (no replication): its load and commit path are unchanged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import trio
import trio.lowlevel

from coordinator.core.shard import ShardStatus
from coordinator.runtime.offsets_reader import (
    OffsetRecords,
    TxnBatch,
    TxnMarker,
    log_skipped_record,
    read_offsets_from,
    replay_steps,
)
from coordinator.runtime.rate_limited_log import RateLimitedLog
from coordinator.storage.errors import StorageError
from protocol.control_batch import parse_marker
from protocol.record_batch import CorruptBatchError, decode_batch_key_values, parse_header

if TYPE_CHECKING:
    from coordinator.core.coordinator import Coordinator
    from coordinator.storage.log import PartitionLog

log = logging.getLogger("groupcoord.follower_replay")

INLINE_BYTES = 512 << 10  # batch bytes replayed on the trio thread by the hook per window; past it, catch_up
INLINE_WINDOW_S = 0.1
CATCH_UP_ROUNDS = 8  # log reads of one catch_up while appends keep coming; then the next loop pass goes on


class FollowerReplay:
    def __init__(self, core: Coordinator, topic: str, logs: dict[int, PartitionLog],
                 open_log: Callable[[int], PartitionLog], wake: Callable[[], None]) -> None:
        self.core = core
        self._prefix = topic + "-"
        self._logs = logs  # shard -> its offsets log, as the groups service opened them
        self._open = open_log
        self._wake = wake  # the leadership loop has work to do
        self.replayed: dict[int, int] = {}
        self.stale: set[int] = set()
        self.behind: set[int] = set()
        self._busy: set[int] = set()  # a catch_up is reading or replaying this shard
        self._generation: dict[int, int] = {}
        self._window_start = 0.0
        self._window_bytes = 0
        self._problems = RateLimitedLog(log, 5.0)
        self.inline_records = 0  # replayed by the hook
        self.read_records = 0  # replayed from the log (rebuilds, catch-ups, loads)

    # ---------------------------------------------------------------- replication's hooks (trio thread)
    def shard_of(self, plog: PartitionLog) -> int | None:
        name = plog.name
        if not name.startswith(self._prefix):
            return None
        try:
            shard = int(name[len(self._prefix):])
        except ValueError:
            return None
        return shard if self._logs.get(shard) is plog else None

    def on_append(self, plog: PartitionLog, batches: list[memoryview]) -> None:
        shard = self.shard_of(plog)
        if shard is None:
            return
        if shard in self._busy:  # the catch-up reads it again from the log
            self.behind.add(shard)
            return
        nxt = self.replayed.get(shard)
        if nxt is None:  # stale (its rebuild reads the log), not followed, or led (see the rules)
            return
        if shard in self.behind or not self._within_budget(sum(len(b) for b in batches)):
            self._fall_behind(shard)
            return
        pairs = OffsetRecords()
        started = False
        for batch in batches:
            try:
                header = parse_header(batch)
            except CorruptBatchError:
                self._fall_behind(shard)  # the log read reports it
                return
            if header.next_offset <= nxt:
                continue
            if not started and header.base_offset > nxt:  # a gap (a compacted leader, or a missed append)
                self._fall_behind(shard)
                return
            started = True
            try:
                if header.is_control:
                    marker = parse_marker(batch) if header.base_offset >= nxt else None
                    if marker is not None:
                        pairs.txn.append((len(pairs), TxnMarker(header.producer_id, marker.commit)))
                    kvs = []
                else:
                    _, kvs = decode_batch_key_values(batch, min_offset=nxt, verify_crc=False)  # append checked it
            except CorruptBatchError as e:
                self._problems.error("offsets partition %d: batch at offsets %d-%d skipped: %s", shard,
                                     header.base_offset, header.last_offset, e)
                kvs = []
            kept = [kv for kv in kvs if kv[0] is not None]
            if header.is_transactional and not header.is_control:
                if kept:
                    pairs.txn.append((len(pairs), TxnBatch(header.producer_id, kept)))  # type: ignore[arg-type]
            else:
                pairs += kept
            nxt = header.next_offset
        if pairs.txn:
            for _ in replay_steps(self.core, shard, pairs, partial(log_skipped_record, shard), len(pairs) + 1):
                pass
            self.inline_records += len(pairs)
        elif pairs:  # plain records only (every commit): ``replay_steps``' one call, without its generator
            self.core.replay_many(shard, pairs, partial(log_skipped_record, shard))
            self.inline_records += len(pairs)
        self.replayed[shard] = nxt

    def on_truncate(self, plog: PartitionLog) -> None:
        shard = self.shard_of(plog)
        if shard is None:
            return
        self._generation[shard] = self._generation.get(shard, 0) + 1
        self.behind.discard(shard)
        was_current = self.replayed.pop(shard, None) is not None
        if was_current or shard in self._busy or self.core.shard_status(shard) is ShardStatus.FOLLOWING:
            self.stale.add(shard)
            self._wake()

    def _within_budget(self, size: int) -> bool:
        now = time.monotonic()
        if now - self._window_start >= INLINE_WINDOW_S:
            self._window_start, self._window_bytes = now, 0
        if self._window_bytes + size > INLINE_BYTES:
            return False
        self._window_bytes += size
        return True

    def _fall_behind(self, shard: int) -> None:
        self.behind.add(shard)
        self._wake()

    # ---------------------------------------------------------------- the leadership loop's steps
    def restart(self, shard: int) -> None:
        """Replay this shard from its log's start at the next pass (newly followed, or leadership lost)."""
        self._generation[shard] = self._generation.get(shard, 0) + 1
        self.replayed.pop(shard, None)
        self.behind.discard(shard)
        self.stale.add(shard)

    def forget(self, shard: int) -> None:
        """No longer replicated here (the core unloaded it)."""
        self._generation[shard] = self._generation.get(shard, 0) + 1
        self.replayed.pop(shard, None)
        self.behind.discard(shard)
        self.stale.discard(shard)

    def is_current(self, shard: int) -> bool:
        return shard in self.replayed and shard not in self.stale

    def leave(self, shard: int) -> None:
        """The shard turns ACTIVE: its own writes are the core's to replay from now on."""
        self.replayed.pop(shard, None)
        self.behind.discard(shard)
        self.stale.discard(shard)

    async def catch_up_tail(self, shard: int) -> bool:
        """A current shard about to lead: replay what its log holds past ``replayed`` (usually nothing, then
        without leaving the trio thread). False if it is not current (it needs a load)."""
        if not self.is_current(shard):
            return False
        plog = self._logs.get(shard)
        if plog is not None and shard not in self.behind and self.replayed[shard] >= plog.log_end_offset:
            return True
        return await self.catch_up(shard, lead=True)

    async def catch_up(self, shard: int, *, full: bool = False, loading: bool = False, lead: bool = False) -> bool:
        """Replay the shard's log past ``replayed`` (from its start when ``full``, after emptying the shard
        as FOLLOWING, or LOADING when ``loading``). True when replayed up to the log's durable end (its log
        end when ``loading`` or ``lead``: this node leads it next); False when the log could not be read or
        was cut back meanwhile (then the shard is stale again)."""
        gen = self._generation.get(shard, 0)
        try:
            plog = self._open(shard)
        except (StorageError, OSError) as e:
            self._problems.error("offsets partition %d could not be opened: %s", shard, e)
            return False
        if full:
            (self.core.begin_loading if loading else self.core.begin_following)(shard)
            start = plog.log_start_offset
        elif shard in self.replayed:
            start = self.replayed[shard]
        else:
            return False
        self.replayed.pop(shard, None)
        self._busy.add(shard)
        skipped = partial(log_skipped_record, shard)
        try:
            for _ in range(CATCH_UP_ROUNDS):
                self.behind.discard(shard)  # an append from now on marks it again: one more round
                problems: list[str] = []
                try:
                    records, start = await trio.to_thread.run_sync(
                        partial(read_offsets_from, plog, start, problems, to_log_end=lead or loading))
                except (StorageError, OSError) as e:
                    self._problems.error("offsets partition %d could not be read: %s", shard, e)
                    self.restart(shard)
                    return False
                if self._generation.get(shard, 0) != gen:
                    return False
                for problem in problems:
                    log.error("offsets partition %d (%s): %s", shard, plog.directory, problem)
                for _ in replay_steps(self.core, shard, records, skipped):  # transactional events in log order
                    await trio.lowlevel.checkpoint()
                    if self._generation.get(shard, 0) != gen:
                        return False
                self.read_records += len(records)
                if shard not in self.behind:
                    break
            self.replayed[shard] = start
            self.stale.discard(shard)
            if shard in self.behind:  # appends kept coming: the next pass goes on
                self._wake()
            return True
        finally:
            self._busy.discard(shard)
