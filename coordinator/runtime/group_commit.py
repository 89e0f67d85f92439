"""Group commit: one append and one fsync per dirty partition log for everything of the last few ms.

Rules:
- ``append`` writes to the OS page cache at once (on the trio thread; it is a positional write) and marks
  the log dirty. ``stage(log, records, callback)`` defers the write instead: every record staged for a log
  during a round becomes ONE record batch, appended at the start of the next flush round (offsets commits
  from many connections cost one batch, one write and one fsync). The batch is built by ``build_kv_batch``
  and appended unchecked (``append_own``): it never came from a client.
- ``when_durable(log, last_offset, callback)`` calls ``callback(None)`` once an fsync covering
  ``last_offset`` has returned, or ``callback(error)`` if the log went offline: a response that depends on a
  write is released only through these callbacks, so nothing is acknowledged before it is durable.
- The flusher wakes on the first append, lingers ``log.flush.linger.ms`` to gather more (not when the
  previous round ended with work already waiting: that work gathered during the fsync), then fsyncs every
  dirty log off the event loop: ONE trio worker-thread call per round, which fans the fsyncs out over a
  small thread pool (at most ``FSYNC_THREADS`` chunks of logs, in parallel). A trio thread hop costs the
  event loop far more than a pool hop, and a round may touch all 50 offsets partitions. An fsync error takes that log offline
  (storage never retries); its waiters get the error, other logs are unaffected.
- Journal (``journal`` given; the default for the offsets partitions): a staged batch is appended to its
  log AND to the shared journal (both page-cache writes; the round's journal entries go in one write, and a
  failed journal write fails every write of the round); the round then fsyncs the journal alone, one fsync
  however many logs it touched, and tells each log how far it is durable (``note_durable``). A log's own
  files are fsynced by a checkpoint: when the journal's current file passes ``checkpoint_bytes``, a new
  journal file takes the appends, every log written since the previous checkpoint is fsynced (in a worker
  thread, while rounds go on), and then the older journal files are deleted. A journal error fails every
  journaled write of that round and later ones (never retried). A log closed since it was written (its
  topic deleted; it wrote a deletion mark) is settled, not failed: its entries need no fsync. If a
  checkpoint cannot fsync a log (it is offline now, never retried), the journal files that may hold its
  entries (those older than the checkpoint's new file) are pinned: said once, kept by every later
  checkpoint, which still drops the others, until that log is deleted, or replayed by the next start.
- Fsync child (``fsyncer`` given; the server's default): a round with journaled writes only hands the
  journal's fdatasync to that child process without a worker thread (a thread returning from fsync must win
  the GIL back from the busy event loop). Rounds pipeline: ``run`` submits a round's fsync request and goes
  on at once, so what is staged meanwhile is appended and submitted while that fsync is still under way
  (at most ``MAX_IN_FLIGHT`` requests unanswered; more waits for an answer). The child fsyncs back to back
  and each answer covers every request sent before its fdatasync began; one reader task takes the answers,
  marks the logs durable and releases their callbacks. Waiting for the previous fsync's answer, the
  responses it releases and the next round's append are thus never between two fsyncs. An errno it
  answers is a journal fsync error as above. If the child stops serving, every unanswered request and
  every later round fsync in a worker thread (the lost answer proves nothing, so the fsync is done again).
  ``flush_now`` (shutdown, and rounds that also fsync other logs) waits for every request in flight. A
  round pipelines only while no other log is dirty and no waiter waits on a log the journal does not cover
  (a ``when_durable`` on a topic log: counted when it registers, recounted at release, never scanned per
  round); otherwise it is a ``flush_now``, which fsyncs those logs in threads.
- Hand-off (``hand_off``, with the fsync child; hand_off.py): success answers offered by the round's
  callbacks ride with its fsync request and the child writes them to their clients after the fdatasync;
  its durability answer comes first, so ``poll_answers`` (before every generic request) lets a read see
  every write a client may have seen acknowledged, and wakes whoever waits for answers, as the reader
  does. A child given up on (``_child_stopped``: it died, broke the protocol, or its socket was full) is
  killed and its end closed at once, so it keeps no copy of a client socket and a task waiting on its
  socket wakes; the answers it may or may not have written end their connections.
- Cluster mode: ``append_replicated`` takes a follower's appends (the leader's batches verbatim, each also a
  journal entry, one journal write per call) and kicks a round without linger; the follower waits with
  ``when_durable``, so its fetch offset passes them only after the journal fsync, shared with this node's
  own commits. While journal fsyncs are fast (``sync_here``: a moving average of their times, rounds' and
  these, at most ``SYNC_HERE_MAX_S``) the follower asks for no round: ``sync_replicated`` fdatasyncs the
  journal on the trio thread and marks its logs durable (the event loop waits that long; the replication
  round needs one wake-up instead of two). Checkpoints cover these appends as any journaled write (run is
  kicked when the journal outgrew ``checkpoint_bytes``). ``sync_rounds_here`` (a cluster node: no hand-off,
  a commit is answered only once its followers have it) does the same for ``run``'s rounds: while fsyncs are
  fast, no child request is in flight and only the journal needs one, a round appends what is staged (the
  followers are told at once, ``on_appended``), fdatasyncs the journal on the trio thread and calls back;
  the child's answer would only have woken the node for callbacks that wait for the followers anyway.
  A cluster leader's staged batch is journaled with its leader epoch stamped, as the log has it.
  ``on_appended`` (set by replication) is called once per round that appended staged writes, so follower
  fetches waiting at this leader look again once per round, not once per write.
- Callbacks run on the trio thread, in the order their writes were appended per log. A round cancelled
  while it waits for its fsync (shutdown) leaves its work to the next ``flush_now``: nothing it was to
  release is dropped.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import trio

from coordinator.metrics import Metrics
from coordinator.runtime.hand_off import HandOffs, take_back
from coordinator.storage.errors import LogOfflineError, StorageError
from coordinator.storage.fsync_process import FsyncProcess, FsyncProcessGone
from coordinator.storage.journal import Journal, SyncPlan
from coordinator.storage.log import AppendInfo, PartitionLog
from protocol.record_batch import CorruptBatchError, build_kv_batch, split_batches

log = logging.getLogger("groupcoord.group_commit")

Callback = Callable[[Exception | None], None]
KeyValue = tuple[bytes, bytes | None]

FSYNC_THREADS = 8
MAX_IN_FLIGHT = 64  # fsync requests to the child awaiting an answer (~1 KiB each of its 208 KiB socket buffer)
# a follower's round fsyncs the journal on the event loop while journal fsyncs take at most this long (a moving
# average over both kinds of round); slower, it waits for a round's fsync instead (the child's, or a thread's)
SYNC_HERE_MAX_S = 0.002
SYNC_AVERAGE_WEIGHT = 0.25  # of the newest fsync time in that average
CHECKPOINT_BYTES = 32 << 20


class GroupCommit:
    def __init__(self, linger_ms: int, metrics: Metrics | None = None, journal: Journal | None = None,
                 checkpoint_bytes: int = CHECKPOINT_BYTES, fsyncer: FsyncProcess | None = None,
                 hand_off: bool = False) -> None:
        self.linger = linger_ms / 1000
        self.metrics = metrics
        self.journal = journal
        self.fsyncer = fsyncer  # the journal's round fsync goes to this child process while it serves
        self.checkpoint_bytes = checkpoint_bytes
        # journaled appends not yet covered by a journal fsync: (log, its next offset after the batch)
        self._marks: list[tuple[PartitionLog, int]] = []
        self._journaled: dict[PartitionLog, None] = {}  # logs with entries in the current journal file
        self._journal_logs: set[PartitionLog] = set()  # every log ever written through the journal
        self._checkpointing = False
        # logs a checkpoint could not fsync -> the journal files (seqs) that may hold their only durable copy
        self._pinned: dict[PartitionLog, frozenset[int]] = {}
        self.checkpoints = 0
        self._dirty: set[PartitionLog] = set()
        # in registration order across all logs: callbacks fire in that order (the core needs its writes
        # acknowledged in the order it returned them, also when one write spans several offsets partitions)
        self._waiters: list[tuple[PartitionLog, int, Callback]] = []
        # how many of them wait on a log the journal does not cover (``when_durable``): while any does, rounds
        # go through ``flush_now``, which fsyncs those logs in threads (a count, not a scan of a backlog per kick)
        self._unjournaled_waiters = 0
        self._staged: dict[PartitionLog, tuple[list[KeyValue], list[Callback]]] = {}
        self._hot = False  # a follower's append waits: the next round does not linger
        # cluster mode: called once per round that appended staged writes (waiting follower fetches look again)
        self.on_appended: Callable[[], None] | None = None
        self._kick = trio.Event()
        self._pool: ThreadPoolExecutor | None = None  # created on the first round with several logs
        self.rounds = 0
        self.fsync_s = 0.0  # moving average of journal fsync times, rounds and follower syncs (``sync_here``)
        # a cluster node: rounds fsync the journal on this thread while its fsyncs are fast (see the rules)
        self.sync_rounds_here = False
        # fsync requests sent to the child and not answered yet, oldest first: (token, plan, marks, sent at)
        self._in_flight: deque[tuple[int, SyncPlan, list[tuple[PartitionLog, int]], float]] = deque()
        self._reader = False  # run's reader task takes the child's answers (else whoever waits reads them)
        self._answered = trio.Event()  # set (and replaced) after each batch of answers the reader took
        self._child_ended = False  # _child_stopped ran
        # answers the child writes itself (hand_off.py); None: this process writes every answer
        self._hand = HandOffs(fsyncer, metrics, self._child_stopped) if hand_off and fsyncer is not None else None

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

    def journal_usable(self) -> bool:
        """Whether a follower's appends can be made durable by the journal (it exists and is online)."""
        return self.journal is not None and not self.journal.offline

    def append_replicated(self, items: Sequence[tuple[PartitionLog, bytes | bytearray | memoryview]],
                          sync_here: bool = False
                          ) -> tuple[list[tuple[PartitionLog, AppendInfo, list[memoryview]]],
                                     list[tuple[PartitionLog, Exception]], bool]:
        """A cluster follower's appends (``replica_fetcher``): each log's leader batches verbatim
        (``append_as_follower``) and every batch as a journal entry, all page-cache writes on this thread and
        one journal write; a ``when_durable`` on a log then waits for a round's journal fsync (the round is
        kicked hot: no linger). Returns what was appended (log, offsets, its batches), the logs whose append
        failed (nothing appended), and whether the journal took the entries: when it did not (a failed
        journal write), the appended logs are in the page cache only and the caller must fsync them itself."""
        journal = self.journal
        assert journal is not None
        written: list[tuple[PartitionLog, AppendInfo, list[memoryview]]] = []
        failed: list[tuple[PartitionLog, Exception]] = []
        entries: list[tuple[str, int, memoryview]] = []
        for plog, data in items:
            try:
                info = plog.append_as_follower(data)
            except (CorruptBatchError, StorageError, OSError) as e:
                failed.append((plog, e))
                continue
            if info is None:
                continue
            batches = split_batches(data)[0]
            name = plog.name
            entries.extend((name, int.from_bytes(b[:8], "big", signed=True), b) for b in batches)
            written.append((plog, info, batches))
        if not entries:
            return written, failed, True
        try:
            journal.append_many(entries)
        except (StorageError, OSError) as e:
            log.error("journal write of a follower's appends failed (%s); fsyncing those logs instead", e)
            return written, failed, False
        for plog, _, _ in written:
            self._journaled[plog] = None
            self._journal_logs.add(plog)
        if sync_here:
            return written, failed, True
        for plog, info, _ in written:
            self._marks.append((plog, info.last_offset + 1))
        self._hot = True
        self._kick.set()
        return written, failed, True

    def sync_here(self) -> bool:
        """Whether a follower's appends should be made durable by ``sync_replicated`` (the journal fsynced on
        the event loop: one wake-up per replication round instead of two) rather than by a round's fsync:
        while the journal is online and its fsyncs are fast (``SYNC_HERE_MAX_S``), so the loop is blocked for
        a short while only."""
        return self.journal is not None and not self.journal.offline and self.fsync_s <= SYNC_HERE_MAX_S

    def sync_replicated(self, written: Sequence[tuple[PartitionLog, AppendInfo, list[memoryview]]]
                        ) -> Exception | None:
        """The journal fsynced on this thread for a follower's appends (``append_replicated(sync_here=True)``),
        and their logs marked durable; the error (the journal is offline now) or None."""
        journal = self.journal
        assert journal is not None
        t0 = time.perf_counter()
        try:
            journal.sync()
        except StorageError as e:
            return e
        self._timed(time.perf_counter() - t0)
        for plog, info, _ in written:
            plog.note_durable(info.last_offset + 1)
        if not self._checkpointing and journal.current_size >= self.checkpoint_bytes:
            self._kick.set()  # run starts the checkpoint
        return None

    def when_durable(self, plog: PartitionLog, last_offset: int, callback: Callback) -> None:
        if plog.offline:
            _call(callback, LogOfflineError(f"partition log {plog.directory} is offline"))
        elif plog.high_watermark > last_offset:
            _call(callback, None)
        else:
            self._waiters.append((plog, last_offset, callback))
            if plog not in self._journal_logs:
                self._unjournaled_waiters += 1
            self._kick.set()

    async def run(self) -> None:
        hot = False
        async with trio.open_nursery() as nursery:
            if self._child_serving():
                self._reader = True  # from now: a round that waits must not wait on the child's socket itself
                nursery.start_soon(self._read_answers)
                if self._hand is not None:
                    nursery.start_soon(self._hand.send_drops)
            while True:
                await self._kick.wait()
                self._kick = trio.Event()
                if self.linger and not hot and not self._hot:
                    await trio.sleep(self.linger)
                self._hot = False
                if self._syncing_here():
                    self._sync_round()  # the journal fdatasync on this thread: no answer to wait for
                    hot = False
                elif self._reader and self._child_serving() and not self._dirty and not self._unjournaled_waiters:
                    self._submit_round()  # does not wait: the reader releases it when its answer comes
                    hot = bool(self._in_flight)  # an fsync under way gathers the next round: no linger
                else:
                    await self.flush_now()
                    hot = self._kick.is_set()
                journal = self.journal
                if journal is not None and not self._checkpointing and journal.current_size >= self.checkpoint_bytes:
                    self._checkpointing = True
                    nursery.start_soon(self.checkpoint)

    def _syncing_here(self) -> bool:
        """Whether the next round fsyncs the journal on this thread (``sync_rounds_here``, see the rules)."""
        return self.sync_rounds_here and not self._in_flight and not self._dirty and \
            not self._unjournaled_waiters and self.sync_here()

    def _sync_round(self) -> None:
        """A round done on this thread: what is staged appended (followers are told at once), the journal
        fdatasynced, the round's writes marked durable and their callbacks called."""
        self._append_staged()
        marks, self._marks = self._marks, []
        if not marks:
            return
        journal = self.journal
        assert journal is not None
        t0 = time.perf_counter()
        try:
            journal.sync()
        except StorageError as e:  # the journal is offline: nothing of this round is durable
            self._settle(marks, e)
            return
        self._timed(time.perf_counter() - t0)
        self._settle(marks, None)

    def _child_serving(self) -> bool:
        return self.journal is not None and self.fsyncer is not None and self.fsyncer.dead is None

    def _submit_round(self) -> None:
        """Pipelined round: append what is staged and send its fsync request, without waiting. At
        ``MAX_IN_FLIGHT`` unanswered requests the marks wait; the reader kicks a round when answers come."""
        self._append_staged()
        if self._marks and len(self._in_flight) < MAX_IN_FLIGHT:
            marks, self._marks = self._marks, []
            if not self._submit(marks):  # the child stopped serving: the next round fsyncs in a thread
                self._kick.set()

    def _submit(self, marks: list[tuple[PartitionLog, int]]) -> bool:
        """Send the fsync request covering ``marks`` (journal bytes already written) to the child. False if the
        child cannot take it (the marks are then back in ``_marks``)."""
        journal, child = self.journal, self.fsyncer
        assert journal is not None and child is not None
        hand = self._hand
        handed = hand.offer_all() if hand is not None else []
        writes = [(key, frame) for _, key, frame in handed]
        tokens: list[int] = []
        try:
            plan = journal.begin_sync(lambda fds, key: tokens.append(
                child.submit(fds, key, writes) if writes else child.submit(fds, key)))
        except StorageError as e:  # the journal is offline: nothing of this round can become durable
            take_back(handed)
            self._settle(marks, e)
            return True
        except FsyncProcessGone as e:
            take_back(handed)
            self._child_stopped(e)
            self._marks[:0] = marks
            return False
        if not tokens:  # nothing unsynced: a thread round already covered these bytes
            take_back(handed)
            self._settle(marks, None)
        else:
            self._in_flight.append((tokens[0], plan, marks, time.perf_counter()))
            if hand is not None:
                hand.sent(tokens[0], handed)
        return True

    def _take_answers(self) -> None:
        """Apply the child's answers that have arrived (raises FsyncProcessGone if it stopped serving)."""
        child, journal, hand = self.fsyncer, self.journal, self._hand
        assert child is not None and journal is not None
        answers = child.poll()
        now = time.perf_counter()
        done: list[tuple[PartitionLog, int]] = []
        failures: dict[PartitionLog, Exception] = {}
        for token, errno in answers:  # one answer, one fdatasync: a round, timed from its oldest request
            error = OSError(errno, os.strerror(errno)) if errno else None
            if hand is not None:
                hand.answered(token, errno, child.take_written)
            if self._in_flight and self._in_flight[0][0] <= token:
                self._timed(now - self._in_flight[0][3])
            while self._in_flight and self._in_flight[0][0] <= token:
                _, plan, marks, _ = self._in_flight.popleft()
                try:
                    journal.end_sync(plan, error)
                except StorageError as e:
                    failures.update((plog, e) for plog, _ in marks)
                else:
                    done.extend(marks)
        if answers:
            for plog, next_offset in done:
                plog.note_durable(next_offset)
            self._release(failures)
        if hand is not None:  # a write report comes after its durability answer
            for token, partial in child.take_written():
                hand.written(token, partial)
            if hand.pending_drops:
                hand.drop_now()
        if self._marks:  # held back at MAX_IN_FLIGHT: there is room now
            self._kick.set()

    def _timed(self, seconds: float) -> None:
        """A journal fsync (a round's, or a follower's ``sync_replicated``) took this long."""
        self.rounds += 1
        self.fsync_s += (seconds - self.fsync_s) * SYNC_AVERAGE_WEIGHT
        if self.metrics is not None:
            self.metrics.flush_seconds.observe(seconds)

    def poll_answers(self) -> None:
        """Take the child's durability answers that have arrived, now: called before a request that reads
        committed state, since a client may have seen a handed answer before the reader task ran."""
        if self._reader and self._in_flight:
            try:
                self._take_answers()
            except FsyncProcessGone as e:
                self._child_stopped(e)  # and the reader, woken by the closed socket, takes over
            finally:  # whoever waits for answers (``_await_in_flight``) must hear of these
                self._answered.set()
                self._answered = trio.Event()

    def forget(self, key: int) -> None:
        """A client connection closed: the child drops its copy of the socket (after its pending writes)."""
        if self._hand is not None:
            self._hand.forget(key)

    def _child_stopped(self, e: Exception) -> None:
        """The child stopped serving: every answer it was to write may or may not have been written. It is
        ended (socket closed, killed; a child alive but declared gone would keep its copies of client
        sockets open), and a reader waiting on its socket wakes with ClosedResourceError."""
        child = self.fsyncer
        if self._child_ended or child is None:
            return
        self._child_ended = True
        log.warning("fsync child process stopped serving (%s); fsyncing in worker threads from now on", e)
        try:
            trio.lowlevel.notify_closing(child.fileno())  # a task waiting on its socket wakes
        except FsyncProcessGone:
            pass
        child.abandon()
        if self._hand is not None:
            self._hand.child_gone()

    def _settle(self, marks: list[tuple[PartitionLog, int]], failure: Exception | None) -> None:
        """Marks whose fsync ended without the child (nothing to sync, or the journal is offline)."""
        for plog, next_offset in marks:
            if failure is None:
                plog.note_durable(next_offset)
        self._release({plog: failure for plog, _ in marks} if failure is not None else {})

    def _release(self, results: dict[PartitionLog, Exception]) -> None:
        """Call back every waiter whose log failed (its error) or is now durable past its write, in order."""
        waiters, self._waiters = self._waiters, []
        for plog, last, cb in waiters:
            if plog.high_watermark > last:  # first: an earlier answer made it durable before a later one failed
                _call(cb, None)
            elif (outcome := results.get(plog)) is not None:
                _call(cb, outcome)
            else:
                self._waiters.append((plog, last, cb))
        if self._unjournaled_waiters:  # recounted over what is left (zero, and so free, for offsets only)
            journaled = self._journal_logs
            self._unjournaled_waiters = sum(1 for w in self._waiters if w[0] not in journaled)

    async def _read_answers(self) -> None:
        """run's reader: the only task waiting on the child's socket while it runs."""
        child = self.fsyncer
        assert child is not None
        try:
            while True:
                try:
                    await trio.lowlevel.wait_readable(child.fileno())
                    self._take_answers()
                except (FsyncProcessGone, trio.ClosedResourceError) as e:
                    self._child_stopped(e)
                    self._reader = False
                    self._kick.set()
                    await self._sync_in_flight_in_thread()
                    return
                finally:
                    self._answered.set()
                    self._answered = trio.Event()
        finally:
            self._reader = False
            self._answered.set()

    async def _await_in_flight(self) -> None:
        """Until every request sent to the child is answered (or, if it stopped serving, fsynced here)."""
        while self._in_flight:
            if self._reader:
                await self._answered.wait()
                continue
            child = self.fsyncer
            assert child is not None
            try:
                await trio.lowlevel.wait_readable(child.fileno())
                self._take_answers()
            except (FsyncProcessGone, trio.ClosedResourceError) as e:  # closed: another task gave it up
                self._child_stopped(e)
                await self._sync_in_flight_in_thread()

    async def _sync_in_flight_in_thread(self) -> None:
        """The child's answers will not come: fsync the journal here for every request it had."""
        journal = self.journal
        assert journal is not None
        in_flight, self._in_flight = list(self._in_flight), deque()
        marks = [m for _, _, ms, _ in in_flight for m in ms]
        if not marks:
            return
        try:
            results = await trio.to_thread.run_sync(_flush_all, [], None, journal)
        except BaseException:  # cancelled (shutdown): the next flush_now fsyncs them
            self._marks[:0] = marks
            raise
        failure = results.get(None)
        self._settle(marks, failure if isinstance(failure, Exception) else None)

    def _append_staged(self) -> None:
        staged, self._staged = self._staged, {}
        if not staged:
            return
        now = int(time.time() * 1000)
        journal = self.journal
        entries: list[tuple[str, int, bytes]] = []  # the round's journal entries: one write for all
        written: list[tuple[PartitionLog, AppendInfo, list[Callback]]] = []
        for plog, (records, callbacks) in staged.items():
            batch = build_kv_batch(records, now)
            if plog.leader_epoch is not None:  # a cluster leader: the journal keeps the epoch the log stamps
                batch = b"".join((batch[:12], plog.leader_epoch.to_bytes(4, "big", signed=True), batch[16:]))
            try:
                if journal is None:
                    info = self.append(plog, [batch])
                else:
                    info = plog.append_own(batch, len(records), now)
                    entries.append((plog.name, info.base_offset, batch))
            except (StorageError, OSError) as e:
                _fail(callbacks, e)
                continue
            written.append((plog, info, callbacks))
        if entries:
            assert journal is not None
            try:
                journal.append_many(entries)
            except (StorageError, OSError) as e:  # nothing of this round can become durable
                for _, _, callbacks in written:
                    _fail(callbacks, e)
                return
        if written and self.on_appended is not None:
            self.on_appended()
        waiters = self._waiters
        fresh = self._hand.fresh if self._hand is not None else None
        for plog, info, callbacks in written:
            if fresh is not None:
                fresh.extend(callbacks)
            if journal is not None:
                self._marks.append((plog, info.last_offset + 1))
                self._journaled[plog] = None
                self._journal_logs.add(plog)
            else:
                self._unjournaled_waiters += len(callbacks)
            last = info.last_offset
            for cb in callbacks:
                waiters.append((plog, last, cb))

    async def checkpoint(self) -> None:
        """Let the journal's older files go: new appends go to a new file, every log written since the last
        checkpoint is fsynced, then the older files are deleted. Runs beside the rounds."""
        journal = self.journal
        assert journal is not None
        self._checkpointing = True
        try:
            new = await trio.to_thread.run_sync(journal.prepare_file)
            logs, self._journaled = list(self._journaled), {}
            seq = journal.switch_to(new)  # on the trio thread: no append can fall between the two lines
            failed = await trio.to_thread.run_sync(_flush_logs, logs)
            if failed:
                older = frozenset(s for s in journal.seqs() if s < seq)
                self._pinned.update((plog, older) for plog in failed)
                log.error("checkpoint: %d logs could not be fsynced (%s); journal files %s are kept for replay "
                          "until those logs are deleted or the server restarts", len(failed),
                          ", ".join(sorted(p.name for p in failed)), ", ".join(map(str, sorted(older))))
            self._forget_closed()
            keep: set[int] = set().union(*self._pinned.values()) if self._pinned else set()
            await trio.to_thread.run_sync(journal.drop_before, seq, keep)
            self.checkpoints += 1
        except StorageError as e:  # the journal is offline: the rounds report it to every write
            log.error("journal checkpoint failed: %s", e)
        finally:
            self._checkpointing = False

    def _forget_closed(self) -> None:
        """Closed logs (deleted topics) are settled: no pin and no place among the journaled logs."""
        for plog in [p for p in self._journal_logs if p.closed]:
            self._journal_logs.discard(plog)
        for plog in [p for p in self._pinned if p.closed]:
            del self._pinned[plog]
            log.info("journal: %s was deleted; the journal files kept for it may go", plog.name)

    def journal_needed(self) -> bool:
        """Whether the journal may hold the only durable copy of something (a log that went offline before
        its data reached its own files, and was not deleted since); at a clean shutdown it is deleted
        otherwise."""
        return any(plog.offline and not plog.closed for plog in self._journal_logs) or \
            any(not plog.closed for plog in self._pinned)

    def close(self) -> None:
        """Stop the fsync pool and the fsync child (after the last ``flush_now``)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self.fsyncer is not None:
            self.fsyncer.close()

    async def flush_now(self) -> None:
        """One whole round, waited for: every request in flight answered, then what is staged appended and
        fsynced (the journal by the child when it is the only file to sync, else in worker threads)."""
        self._append_staged()
        if self._in_flight:
            await self._await_in_flight()
        journaled = self._journal_logs
        dirty = list(self._dirty | {w[0] for w in self._waiters if w[0] not in journaled})
        self._dirty.clear()
        marks, self._marks = self._marks, []
        if not dirty and not marks:
            return
        if not dirty and self._child_serving():
            if self._submit(marks):
                await self._await_in_flight()
                return
            marks, self._marks = self._marks, []
        if self._hand is not None:
            self._hand.fresh.clear()  # fsynced here: this process answers them
        t0 = time.perf_counter()
        try:
            if len(dirty) > 1 and self._pool is None:
                self._pool = ThreadPoolExecutor(FSYNC_THREADS, thread_name_prefix="fsync")
            results = await trio.to_thread.run_sync(_flush_all, dirty, self._pool, self.journal if marks else None)
        except BaseException:  # cancelled mid-round (shutdown): the next flush_now does this round again
            self._dirty.update(dirty)
            self._marks[:0] = marks
            raise
        self.rounds += 1
        if self.metrics is not None:
            self.metrics.flush_seconds.observe(time.perf_counter() - t0)
        failure = results.pop(None, None)
        for plog, next_offset in marks:
            if failure is None:
                plog.note_durable(next_offset)
            else:
                results[plog] = failure
        self._release({plog: r for plog, r in results.items() if isinstance(r, Exception)})
        if self._waiters:
            self._kick.set()


def _flush_all(logs: list[PartitionLog], pool: ThreadPoolExecutor | None, journal: Journal | None
               ) -> dict[PartitionLog | None, int | Exception]:
    """Runs in a trio worker thread: the journal's fsync (result under key None, only when it fails) and
    every log's own fsync. Several logs are split into at most FSYNC_THREADS chunks fsynced in parallel over
    ``pool``, each chunk in turn (a pool task per log would cost the GIL more than the fsyncs cost the disk)."""
    results: dict[PartitionLog | None, int | Exception] = {}
    if journal is not None:
        try:
            journal.sync()
        except StorageError as e:
            results[None] = e
    if len(logs) <= 1 or pool is None:
        results.update((plog, _flush(plog)) for plog in logs)
        return results
    chunks = [logs[i::FSYNC_THREADS] for i in range(min(FSYNC_THREADS, len(logs)))]
    for done in pool.map(_flush_chunk, chunks):
        results.update(done)
    return results


def _flush_logs(logs: list[PartitionLog]) -> list[PartitionLog]:
    """A checkpoint's fsyncs (worker thread); returns the logs that failed (offline now). A log closed since
    it was written (its topic deleted) is settled, not failed."""
    return [plog for plog in logs if isinstance(_flush(plog), Exception) and not plog.closed]


def _flush_chunk(logs: list[PartitionLog]) -> dict[PartitionLog, int | Exception]:
    return {plog: _flush(plog) for plog in logs}


def _fail(callbacks: list[Callback], e: Exception) -> None:
    error = e if isinstance(e, StorageError) else LogOfflineError(str(e))
    for cb in callbacks:
        _call(cb, error)


def _call(callback: Callback, error: Exception | None) -> None:
    """A failing callback (a bug where it releases responses) is logged; it never stops the flusher."""
    try:
        callback(error)
    except Exception:
        log.exception("a durability callback failed")


def _flush(plog: PartitionLog) -> int | Exception:
    try:
        return plog.flush()
    except StorageError as e:  # offline, or closed (LogClosedError) because its topic was deleted after the append
        return e
    except OSError as e:  # storage converts these, but never let one kill the flusher
        log.error("flush of %s failed: %s", plog.directory, e)
        return LogOfflineError(str(e))
