"""A cluster follower's appends through the node's journal (group_commit.append_replicated, replica_fetcher):
one journal fsync makes every followed log of a response durable (no log fsync), the journal keeps the
leader's bytes (offsets and leader epochs), a leader's own journaled batches keep its epoch, and a truncation
mark keeps the entries a truncation cut from coming back at a restart's replay.

While journal fsyncs are fast, a follower's appends are made durable on the event loop (``sync_here``,
``sync_replicated``: one journal fdatasync, no round asked of the group commit); a slow fsync moves them back to
the group commit's rounds until fsyncs are fast again, and a failed one reports the error with the journal
offline."""

from __future__ import annotations

import os
import time
from pathlib import Path

from coordinator.runtime.group_commit import SYNC_HERE_MAX_S, GroupCommit
from coordinator.runtime.replica_fetcher import _truncate_all
from coordinator.storage.errors import StorageError
from coordinator.storage.fs import FileSystem
from coordinator.storage.journal import Journal, replay
from coordinator.storage.log import PartitionLog
from protocol.record_batch import build_batch, parse_header, split_batches


class CountingFS(FileSystem):
    def __init__(self) -> None:
        self.fsynced: list[str] = []

    def fsync(self, fd: int) -> None:
        self.fsynced.append(os.readlink(f"/proc/self/fd/{fd}"))
        super().fsync(fd)


def batch(*values: bytes) -> bytes:
    return build_batch([(b"k", v, [], 1_000) for v in values])


def all_bytes(plog: PartitionLog) -> bytes:
    return plog.read(plog.log_start_offset, 1 << 30, upper_bound=plog.log_end_offset)


def epochs(data: bytes) -> list[int]:
    return [parse_header(b).partition_leader_epoch for b in split_batches(data)[0]]


def leader_log(path: Path, epoch: int, *batches: bytes) -> PartitionLog:
    plog = PartitionLog.open(str(path))
    plog.become_leader(epoch)
    for b in batches:
        plog.append([b])
    plog.flush()
    return plog


def journal_at(path: Path, fs: FileSystem | None = None) -> Journal:
    j = Journal.open(str(path), fs)
    j.reset()
    return j


async def test_one_journal_fsync_makes_a_responses_logs_durable_and_replay_restores_the_leaders_bytes(
        tmp_path: Path) -> None:
    a = leader_log(tmp_path / "leader" / "t-0", 4, batch(b"a", b"b"), batch(b"c"))
    b = leader_log(tmp_path / "leader" / "t-1", 2, batch(b"d"))
    fs = CountingFS()
    followers = [PartitionLog.open(str(tmp_path / "follower" / name), fs=fs) for name in ("t-0", "t-1")]
    journal = journal_at(tmp_path / "follower" / "journal", fs)
    gc = GroupCommit(0, journal=journal)
    fs.fsynced.clear()
    written, failed, journaled = gc.append_replicated([(followers[0], all_bytes(a)), (followers[1], all_bytes(b))])
    assert failed == [] and journaled
    assert [(w[1].base_offset, w[1].last_offset, len(w[2])) for w in written] == [(0, 2, 2), (0, 0, 1)]
    got: list[tuple[int, Exception | None]] = []
    for i, (plog, info, _) in enumerate(written):
        gc.when_durable(plog, info.last_offset, lambda err, i=i: got.append((i, err)))
    assert got == [] and [f.high_watermark for f in followers] == [0, 0]
    await gc.flush_now()
    assert got == [(0, None), (1, None)]
    assert [f.high_watermark for f in followers] == [3, 1]
    assert [f.recovery_point for f in followers] == [0, 0]  # their own files wait for a checkpoint
    # one journal fsync, no segment fsync (the epoch files of epochs new to these logs are written at once;
    # the fetcher sends a response bringing a new epoch the worker-thread way, off the event loop)
    assert [p for p in fs.fsynced if "leader-epoch-checkpoint" not in p] == [
        str(tmp_path / "follower" / "journal" / "00000000000000000001.wal")]
    assert [all_bytes(f) for f in followers] == [all_bytes(a), all_bytes(b)]
    assert followers[0].read(0, 1 << 20) == all_bytes(a)  # the default bound is the durable end, journal included
    # a crash lost the followers' page cache: fresh logs, and the journal brings back the leader's bytes
    entries = list(Journal.open(str(tmp_path / "follower" / "journal")).recovered())
    assert [(e.name, e.base_offset) for e in entries] == [("t-0", 0), ("t-0", 2), ("t-1", 0)]
    lost = {name: PartitionLog.open(str(tmp_path / "after-crash" / name)) for name in ("t-0", "t-1")}
    stats, _ = replay(entries, lost.get)
    assert stats.appended == 3
    assert all_bytes(lost["t-0"]) == all_bytes(a) and epochs(all_bytes(lost["t-0"])) == [4, 4]
    assert all_bytes(lost["t-1"]) == all_bytes(b) and epochs(all_bytes(lost["t-1"])) == [2]


async def test_a_cluster_leaders_journaled_batch_keeps_its_epoch_at_replay(tmp_path: Path) -> None:
    plog = PartitionLog.open(str(tmp_path / "node" / "__consumer_offsets-3"))
    plog.become_leader(7)
    gc = GroupCommit(0, journal=journal_at(tmp_path / "node" / "journal"))
    done: list[Exception | None] = []
    gc.stage(plog, [(b"key", b"value")], done.append)
    await gc.flush_now()
    assert done == [None] and epochs(all_bytes(plog)) == [7]
    entries = list(Journal.open(str(tmp_path / "node" / "journal")).recovered())
    assert [epochs(e.batch) for e in entries] == [[7]]
    fresh = PartitionLog.open(str(tmp_path / "after-crash" / "__consumer_offsets-3"))
    replay(entries, {"__consumer_offsets-3": fresh}.get)
    assert all_bytes(fresh) == all_bytes(plog)  # same bytes, epoch 7 included (not -1)


async def test_a_truncation_mark_keeps_the_cut_entries_from_coming_back(tmp_path: Path) -> None:
    old = leader_log(tmp_path / "old-leader" / "t-0", 1, batch(b"kept"), batch(b"divergent"))
    new = leader_log(tmp_path / "new-leader" / "t-0", 1, batch(b"kept"))
    new.become_leader(2)
    new.append([batch(b"new")])
    follower = PartitionLog.open(str(tmp_path / "follower" / "t-0"))
    journal = journal_at(tmp_path / "follower" / "journal")
    gc = GroupCommit(0, journal=journal)
    gc.append_replicated([(follower, all_bytes(old))])  # both batches, journaled
    await gc.flush_now()
    assert follower.log_end_offset == 2
    assert _truncate_all([(follower, 1)], journal) == [follower]  # the new leader's epoch 1 ends at 1
    assert follower.log_end_offset == 1
    # a crash now: the truncation is durable, the journal holds both old entries and the mark
    entries = list(Journal.open(str(tmp_path / "follower" / "journal")).recovered())
    assert [(e.base_offset, len(e.batch) > 0) for e in entries] == [(0, True), (1, True), (1, False)]
    disk = PartitionLog.open(str(tmp_path / "after-crash" / "t-0"))
    disk.append_as_follower(all_bytes(old)[:len(batch(b"kept"))])  # what the truncation left on disk
    stats, _ = replay(entries, {"t-0": disk}.get)
    assert stats.truncated == 1 and disk.log_end_offset == 1  # "divergent" re-appended at 1, then cut
    # following the new leader goes on after the mark: its batch is what a later replay restores
    gc.append_replicated([(follower, new.read(1, 1 << 20, upper_bound=new.log_end_offset))])
    await gc.flush_now()
    entries = list(Journal.open(str(tmp_path / "follower" / "journal")).recovered())
    again = PartitionLog.open(str(tmp_path / "after-second-crash" / "t-0"))
    again.append_as_follower(all_bytes(old)[:len(batch(b"kept"))])
    replay(entries, {"t-0": again}.get)
    assert all_bytes(again) == all_bytes(new) and epochs(all_bytes(again)) == [1, 2]


class SlowFS(FileSystem):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def fsync(self, fd: int) -> None:
        time.sleep(self.seconds)
        super().fsync(fd)


class FailingFS(CountingFS):
    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    def fsync(self, fd: int) -> None:
        if self.fail:
            raise OSError(5, "Input/output error")
        super().fsync(fd)


async def test_a_followers_appends_are_made_durable_on_the_loop_with_one_journal_fsync(tmp_path: Path) -> None:
    a = leader_log(tmp_path / "leader" / "t-0", 4, batch(b"a", b"b"), batch(b"c"))
    fs = CountingFS()
    follower = PartitionLog.open(str(tmp_path / "follower" / "t-0"), fs=fs)
    journal = journal_at(tmp_path / "follower" / "journal", fs)
    gc = GroupCommit(0, journal=journal)
    assert gc.sync_here()  # no fsync timed yet
    fs.fsynced.clear()
    written, failed, journaled = gc.append_replicated([(follower, all_bytes(a))], sync_here=True)
    assert failed == [] and journaled and follower.high_watermark == 0
    assert not gc._kick.is_set() and gc._marks == []  # no round asked for
    assert gc.sync_replicated(written) is None
    assert follower.high_watermark == 3 and follower.recovery_point == 0  # durable by the journal alone
    assert [p for p in fs.fsynced if "leader-epoch-checkpoint" not in p] == [
        str(tmp_path / "follower" / "journal" / "00000000000000000001.wal")]
    assert gc.rounds == 1 and gc.fsync_s > 0  # the sync was timed (into the gate's average)


async def test_slow_journal_fsyncs_send_followers_back_to_the_rounds_until_they_are_fast_again(
        tmp_path: Path) -> None:
    journal = journal_at(tmp_path / "journal")
    gc = GroupCommit(0, journal=journal)
    gc._timed(0.050)  # one 50 ms fsync
    assert not gc.sync_here()
    fast = 0
    while not gc.sync_here():
        gc._timed(0.0001)
        fast += 1
        assert fast < 50
    assert fast >= 3  # a moving average: one fast fsync does not undo a slow one
    # and a slow sync done on the loop counts too
    slow = SlowFS(SYNC_HERE_MAX_S * 8)
    follower = PartitionLog.open(str(tmp_path / "t-0"), fs=slow)
    journal.fs = slow
    written, _, _ = gc.append_replicated([(follower, batch(b"x"))], sync_here=True)
    assert gc.sync_replicated(written) is None
    assert not gc.sync_here()


async def test_a_failed_journal_fsync_on_the_loop_reports_the_error_and_takes_the_journal_offline(
        tmp_path: Path) -> None:
    fs = FailingFS()
    follower = PartitionLog.open(str(tmp_path / "t-0"), fs=fs)
    journal = journal_at(tmp_path / "journal", fs)
    gc = GroupCommit(0, journal=journal)
    written, _, journaled = gc.append_replicated([(follower, batch(b"x"))], sync_here=True)
    assert journaled
    fs.fail = True
    error = gc.sync_replicated(written)
    assert isinstance(error, StorageError)
    assert follower.high_watermark == 0  # not marked durable
    assert journal.offline and not gc.sync_here() and not gc.journal_usable()
