"""Group commit through the journal: a round fsyncs the journal once (not each log), releases every staged
write with its log's high watermark past it, a checkpoint fsyncs the logs and drops old journal files, and a
journal fsync error fails the round's writes and every later one. With an fsync child process the round's
fsync is the child's; an errno it reports fails the round the same way, and a child that died makes the
round (and later ones) fsync in a worker thread instead, acknowledging nothing on the lost answer. The run
loop pipelines: the next round's fsync request goes out while the previous one is unanswered (at most
MAX_IN_FLIGHT), answers release writes in order, and one errno fails every request in flight. A cluster node's
rounds (``sync_rounds_here``) fsync the journal on the event loop while fsyncs are fast (the followers told
first), go to the child again after a slow one, and fail their writes on a journal fsync error."""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import trio

from coordinator.runtime.group_commit import MAX_IN_FLIGHT, GroupCommit
from coordinator.storage.errors import LogOfflineError
from coordinator.storage.fs import FileSystem
from coordinator.storage.fsync_process import FsyncProcess
from coordinator.storage.journal import Journal
from coordinator.storage.log import PartitionLog
from protocol.record_batch import build_kv_batch


class CountingFS(FileSystem):
    def __init__(self) -> None:
        self.fsynced: list[str] = []
        self.fail = False

    def fsync(self, fd: int) -> None:
        if self.fail:
            raise OSError(errno.EIO, "Input/output error")
        self.fsynced.append(os.readlink(f"/proc/self/fd/{fd}"))
        super().fsync(fd)


def setup(tmp_path: Path, checkpoint_bytes: int = 1 << 20) -> tuple[CountingFS, Journal, list[PartitionLog], GroupCommit]:
    fs = CountingFS()
    logs = [PartitionLog.open(str(tmp_path / f"__consumer_offsets-{i}"), fs=fs) for i in range(3)]
    journal = Journal.open(str(tmp_path / "journal"), fs)
    journal.reset()
    fs.fsynced.clear()
    return fs, journal, logs, GroupCommit(0, journal=journal, checkpoint_bytes=checkpoint_bytes)


async def test_one_journal_fsync_makes_writes_to_three_logs_durable(tmp_path: Path) -> None:
    fs, journal, logs, gc = setup(tmp_path)
    got: list[tuple[int, Exception | None]] = []
    for i, plog in enumerate(logs):
        gc.stage(plog, [(b"key-%d" % i, b"value")], lambda err, i=i: got.append((i, err)))
    gc.stage(logs[0], [(b"again", b"v2")], lambda err: got.append((9, err)))
    assert [p.high_watermark for p in logs] == [0, 0, 0]
    await gc.flush_now()
    assert got == [(0, None), (9, None), (1, None), (2, None)]  # registration order
    assert [p.high_watermark for p in logs] == [2, 1, 1]  # both records of log 0 went as one batch
    assert [p.recovery_point for p in logs] == [0, 0, 0]  # their own files are not fsynced yet
    assert len(fs.fsynced) == 1 and "/journal/" in fs.fsynced[0]
    entries = list(Journal.open(str(tmp_path / "journal")).recovered())
    assert [(e.name, e.base_offset) for e in entries] == [("__consumer_offsets-0", 0), ("__consumer_offsets-1", 0),
                                                         ("__consumer_offsets-2", 0)]


async def test_a_checkpoint_fsyncs_the_logs_and_drops_older_journal_files(tmp_path: Path) -> None:
    fs, journal, logs, gc = setup(tmp_path)
    done: list[Exception | None] = []
    gc.stage(logs[0], [(b"k", b"v")], done.append)
    gc.stage(logs[2], [(b"k", b"v")], done.append)
    await gc.flush_now()
    first = journal.current_seq
    await gc.checkpoint()
    assert done == [None, None] and gc.checkpoints == 1
    assert [p.recovery_point for p in logs] == [1, 0, 1]  # only the logs written since the last checkpoint
    assert os.listdir(tmp_path / "journal") == [f"{first + 1:020d}.wal"]
    gc.stage(logs[1], [(b"k", b"v")], done.append)  # the new file takes the next round
    await gc.flush_now()
    assert done == [None, None, None] and logs[1].high_watermark == 1
    assert [e.name for e in Journal.open(str(tmp_path / "journal")).recovered()] == ["__consumer_offsets-1"]


async def test_the_run_loop_checkpoints_when_the_journal_file_is_full(tmp_path: Path) -> None:
    fs, journal, logs, gc = setup(tmp_path, checkpoint_bytes=4096)
    acked = 0

    def ack(err: Exception | None) -> None:
        nonlocal acked
        assert err is None
        acked += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(gc.run)
        for n in range(200):  # ~200 bytes an entry: the 4 KiB file fills several times
            gc.stage(logs[n % 3], [(b"key-%d" % n, b"x" * 64)], ack)
            await trio.sleep(0.001)
        with trio.fail_after(10):
            while acked < 200 or gc._checkpointing:
                await trio.sleep(0.005)
        nursery.cancel_scope.cancel()
    assert gc.checkpoints >= 2
    assert journal.current_size < 4096 + 400
    assert all(p.recovery_point > 0 for p in logs)
    assert len(os.listdir(tmp_path / "journal")) <= 2


async def test_a_journal_fsync_error_fails_the_round_and_every_later_write(tmp_path: Path) -> None:
    fs, journal, logs, gc = setup(tmp_path)
    got: list[Exception | None] = []
    gc.stage(logs[0], [(b"k", b"v")], got.append)
    fs.fail = True
    await gc.flush_now()
    assert len(got) == 1 and isinstance(got[0], LogOfflineError)
    assert logs[0].high_watermark == 0  # nothing was acknowledged as durable
    fs.fail = False
    gc.stage(logs[1], [(b"k", b"v")], got.append)  # never retried: the journal stays offline
    await gc.flush_now()
    assert len(got) == 2 and isinstance(got[1], LogOfflineError)
    assert journal.offline


class RecordingChild(FsyncProcess):
    """The real child, with the requests counted and, on demand, an errno put in place of its answer."""

    def __init__(self) -> None:
        super().__init__()
        self.requests = 0
        self.errno = 0
        self.hold = False

    def submit(self, fds: list[int], key: object = None) -> int:
        self.requests += 1
        return super().submit(fds, key)

    def poll(self) -> list[tuple[int, int]]:
        if self.hold:  # as if the fsync were still running
            return []
        got = super().poll()
        return [(token, self.errno or err) for token, err in got]


@contextmanager
def with_child(tmp_path: Path) -> Iterator[tuple[CountingFS, Journal, list[PartitionLog], RecordingChild, GroupCommit]]:
    """``setup`` with a real fsync child process (closed, with the group commit, at the end)."""
    fs, journal, logs, _ = setup(tmp_path)
    child = RecordingChild.start()
    gc = GroupCommit(0, journal=journal, fsyncer=child)
    try:
        yield fs, journal, logs, child, gc
    finally:
        gc.close()


async def test_with_an_fsync_child_the_round_fsync_is_the_childs(tmp_path: Path) -> None:
    with with_child(tmp_path) as (fs, _journal, logs, child, gc):
        got: list[Exception | None] = []
        for plog in logs:
            gc.stage(plog, [(b"k", b"v")], got.append)
        await gc.flush_now()
        assert got == [None, None, None]
        assert [p.high_watermark for p in logs] == [1, 1, 1]
        assert child.requests == 1 and fs.fsynced == []  # no fsync in this process
        gc.stage(logs[0], [(b"k", b"v")], got.append)
        await gc.flush_now()
        assert got[3:] == [None] and child.requests == 2 and logs[0].high_watermark == 2
    assert child.dead == "closed"


async def test_an_errno_from_the_child_fails_the_round_and_every_later_write(tmp_path: Path) -> None:
    with with_child(tmp_path) as (_fs, journal, logs, child, gc):
        got: list[Exception | None] = []
        gc.stage(logs[0], [(b"k", b"v")], got.append)
        child.errno = errno.EIO
        await gc.flush_now()
        assert len(got) == 1 and isinstance(got[0], LogOfflineError) and "Input/output" in str(got[0])
        assert logs[0].high_watermark == 0 and journal.offline
        child.errno = 0
        gc.stage(logs[1], [(b"k", b"v")], got.append)
        await gc.flush_now()
        assert len(got) == 2 and isinstance(got[1], LogOfflineError)
        assert logs[1].high_watermark == 0


async def test_a_dead_child_makes_rounds_fsync_in_a_thread(tmp_path: Path) -> None:
    with with_child(tmp_path) as (fs, journal, logs, child, gc):
        got: list[Exception | None] = []
        gc.stage(logs[0], [(b"k", b"v")], got.append)
        await gc.flush_now()
        assert got == [None] and fs.fsynced == []
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        os.waitpid(child.pid, 0)
        gc.stage(logs[1], [(b"k", b"v")], got.append)
        await gc.flush_now()
        # the answer never came: this process fsynced the journal itself before acknowledging
        assert got == [None, None] and logs[1].high_watermark == 1
        assert len(fs.fsynced) == 1 and "/journal/" in fs.fsynced[0]
        assert child.dead is not None and not journal.offline
        gc.stage(logs[2], [(b"k", b"v")], got.append)
        await gc.flush_now()
        assert got == [None, None, None] and len(fs.fsynced) == 2


async def test_a_round_cancelled_while_it_waits_leaves_its_work_to_the_next(tmp_path: Path) -> None:
    with with_child(tmp_path) as (_fs, _journal, logs, child, gc):
        got: list[Exception | None] = []
        gc.stage(logs[0], [(b"k", b"v")], got.append)
        child.hold = True
        with trio.move_on_after(0.2):  # shutdown cancels the round while its fsync is out
            await gc.flush_now()
        assert got == [] and logs[0].high_watermark == 0
        child.hold = False
        await gc.flush_now()  # the shutdown flush: the write is made durable and released after all
        assert got == [None] and logs[0].high_watermark == 1


async def _until(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    with trio.move_on_after(timeout):
        while not check():
            await trio.sleep(0.005)
        return
    raise AssertionError(f"waited {timeout} s for {what}")


@contextmanager
def stopped(child: FsyncProcess) -> Iterator[None]:
    """The child as if stuck in a long fdatasync: requests queue on its socket, no answer comes."""
    assert child.pid is not None
    os.kill(child.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(child.pid, signal.SIGCONT)


@asynccontextmanager
async def running(gc: GroupCommit) -> AsyncIterator[None]:
    """``gc.run`` in a nursery, its answer reader started; cancelled on exit."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gc.run)
        await _until(lambda: gc._reader, "the reader")
        yield
        nursery.cancel_scope.cancel()


async def test_run_sends_the_next_rounds_fsync_while_the_previous_one_is_under_way(tmp_path: Path) -> None:
    with with_child(tmp_path) as (fs, _journal, logs, child, gc):
        got: list[tuple[int, Exception | None]] = []
        async with running(gc):
            with stopped(child):
                for i in range(3):
                    gc.stage(logs[i], [(b"k", b"v")], lambda err, i=i: got.append((i, err)))
                    await _until(lambda i=i: child.requests == i + 1, f"request {i + 1}")
                await trio.sleep(0.05)
                assert got == [] and [p.high_watermark for p in logs] == [0, 0, 0]  # nothing answered yet
            await _until(lambda: len(got) == 3, "the three answers")
        assert got == [(0, None), (1, None), (2, None)]
        assert [p.high_watermark for p in logs] == [1, 1, 1] and fs.fsynced == []
        assert gc.rounds <= 3  # the child took the waiting requests together: at most one fsync each


async def test_at_most_max_in_flight_requests_wait_for_answers(tmp_path: Path) -> None:
    with with_child(tmp_path) as (_fs, _journal, logs, child, gc):
        got: list[Exception | None] = []
        async with running(gc):
            with stopped(child):
                for n in range(MAX_IN_FLIGHT + 3):
                    gc.stage(logs[n % 3], [(b"k%d" % n, b"v")], got.append)
                    await trio.sleep(0.01)  # a round each
                assert child.requests == MAX_IN_FLIGHT and got == []
            await _until(lambda: len(got) == MAX_IN_FLIGHT + 3, "every answer")  # the rest went after
        assert got == [None] * (MAX_IN_FLIGHT + 3) and child.requests > MAX_IN_FLIGHT


async def test_a_child_that_dies_with_requests_in_flight_is_replaced_by_a_thread_fsync(tmp_path: Path) -> None:
    with with_child(tmp_path) as (fs, journal, logs, child, gc):
        got: list[Exception | None] = []
        async with running(gc):
            assert child.pid is not None
            os.kill(child.pid, signal.SIGSTOP)  # the request is sent, never answered: the child dies
            gc.stage(logs[0], [(b"k", b"v")], got.append)
            await _until(lambda: child.requests == 1, "the request")
            os.kill(child.pid, signal.SIGKILL)
            os.waitpid(child.pid, 0)
            await _until(lambda: got == [None], "the release")
            # the answer never came: this process fsynced the journal before acknowledging
            assert len(fs.fsynced) == 1 and "/journal/" in fs.fsynced[0] and logs[0].high_watermark == 1
            gc.stage(logs[1], [(b"k", b"v")], got.append)  # later rounds: worker threads
            await _until(lambda: len(got) == 2, "the next round")
        assert got == [None, None] and len(fs.fsynced) == 2 and not journal.offline


async def test_an_errno_fails_every_request_in_flight_and_keeps_what_an_earlier_answer_made_durable(
        tmp_path: Path) -> None:
    with with_child(tmp_path) as (_fs, journal, logs, child, gc):
        got: list[tuple[int, Exception | None]] = []
        gc.stage(logs[0], [(b"k", b"v")], lambda err: got.append((0, err)))
        gc._append_staged()
        assert gc._submit(gc._marks)  # request 1
        gc._marks = []
        with trio.fail_after(10):  # its answer is in the socket, not yet taken
            await trio.lowlevel.wait_readable(child.fileno())
        gc.stage(logs[0], [(b"k", b"v")], lambda err: got.append((1, err)))
        gc._append_staged()
        marks, gc._marks = gc._marks, []
        assert gc._submit(marks)  # request 2
        answers = child.poll()
        while not answers or answers[-1][0] < 2:
            await trio.lowlevel.wait_readable(child.fileno())
            answers += child.poll()
        child.poll = lambda: [(1, 0), (2, errno.EIO)]  # type: ignore[method-assign]
        gc._take_answers()
        assert got[0] == (0, None) and logs[0].high_watermark == 1
        assert got[1][0] == 1 and isinstance(got[1][1], LogOfflineError) and journal.offline


async def test_a_waiter_on_a_log_the_journal_does_not_cover_gets_that_logs_fsync(tmp_path: Path) -> None:
    """While the reader pipelines journal rounds, a write to another log (a topic's) waiting with
    ``when_durable`` sends the round through ``flush_now``, which fsyncs that log in a thread; later journal
    rounds pipeline again."""
    with with_child(tmp_path) as (fs, _journal, logs, child, gc):
        topic = PartitionLog.open(str(tmp_path / "orders-0"), fs=fs)
        got: list[tuple[str, Exception | None]] = []
        async with running(gc):
            info = topic.append([build_kv_batch([(b"k", b"v")], 1)])  # written, not through gc: nothing dirty
            gc.when_durable(topic, info.last_offset, lambda err: got.append(("topic", err)))
            gc.stage(logs[0], [(b"k", b"v")], lambda err: got.append(("offsets", err)))
            await _until(lambda: len(got) == 2, "both writes")
            assert sorted(got) == [("offsets", None), ("topic", None)]
            assert topic.high_watermark == 1 and any("/orders-0/" in p for p in fs.fsynced)
            requests = child.requests
            gc.stage(logs[1], [(b"k", b"v")], lambda err: got.append(("again", err)))
            await _until(lambda: len(got) == 3, "the next journal write")
            assert got[2] == ("again", None) and child.requests == requests + 1  # the child's fsync again
        topic.close()


class FailingLogFS(CountingFS):
    """fsync fails (EIO) for the files of one log directory, while ``broken`` names it."""

    def __init__(self) -> None:
        super().__init__()
        self.broken: str | None = None

    def fsync(self, fd: int) -> None:
        if self.broken is not None and f"/{self.broken}/" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.EIO, "Input/output error")
        super().fsync(fd)


def journal_files(tmp_path: Path) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(tmp_path / "journal"))


async def test_a_log_deleted_after_its_write_is_settled_and_the_journal_trims(tmp_path: Path, caplog) -> None:
    fs, journal, logs, gc = setup(tmp_path)
    done: list[Exception | None] = []
    gc.stage(logs[0], [(b"k", b"v")], done.append)
    gc.stage(logs[1], [(b"k", b"v")], done.append)
    await gc.flush_now()
    assert done == [None, None]
    journal.append_deletion(logs[1].name)  # as LogManager.delete does, then closes the log
    logs[1].close()
    for n in range(3):  # every later checkpoint trims: nothing kept for the deleted log
        gc.stage(logs[0], [(b"k%d" % n, b"v")], done.append)
        await gc.flush_now()
        await gc.checkpoint()
        assert journal_files(tmp_path) == [journal.current_seq]
    assert "could not be fsynced" not in caplog.text
    assert not gc.journal_needed()


async def test_a_log_whose_checkpoint_fsync_fails_pins_its_journal_files_only(tmp_path: Path, caplog) -> None:
    fs = FailingLogFS()
    logs = [PartitionLog.open(str(tmp_path / f"__consumer_offsets-{i}"), fs=fs) for i in range(2)]
    journal = Journal.open(str(tmp_path / "journal"), fs)
    journal.reset()
    gc = GroupCommit(0, journal=journal)
    done: list[Exception | None] = []
    gc.stage(logs[0], [(b"a", b"1")], done.append)
    gc.stage(logs[1], [(b"b", b"1")], done.append)
    await gc.flush_now()
    assert done == [None, None]  # durable in the journal: acknowledged
    first = journal.current_seq
    fs.broken = "__consumer_offsets-1"
    await gc.checkpoint()
    assert logs[1].offline
    assert caplog.text.count("could not be fsynced") == 1 and "__consumer_offsets-1" in caplog.text
    assert journal_files(tmp_path) == [first, first + 1]  # the failed log's entries stay
    assert gc.journal_needed()
    for n in range(3):  # later checkpoints succeed: they drop their own older files, never the pinned one
        gc.stage(logs[0], [(b"a%d" % n, b"2")], done.append)
        await gc.flush_now()
        await gc.checkpoint()
        assert journal_files(tmp_path) == [first, journal.current_seq]
    assert caplog.text.count("could not be fsynced") == 1
    assert gc.journal_needed()
    # a restart replays the pinned file: the failed log's acknowledged record is back in its own files
    journal.close()
    for plog in logs:
        plog.close()
    again = PartitionLog.open(str(tmp_path / "__consumer_offsets-1"))
    replayed = [e for e in Journal.open(str(tmp_path / "journal")).recovered() if e.name == again.name]
    assert [e.base_offset for e in replayed] == [0]
    again.close()


async def test_deleting_a_log_whose_fsync_failed_releases_its_pinned_files(tmp_path: Path) -> None:
    fs = FailingLogFS()
    logs = [PartitionLog.open(str(tmp_path / f"t-{i}"), fs=fs) for i in range(2)]
    journal = Journal.open(str(tmp_path / "journal"), fs)
    journal.reset()
    gc = GroupCommit(0, journal=journal)
    gc.stage(logs[0], [(b"a", b"1")], lambda e: None)
    gc.stage(logs[1], [(b"b", b"1")], lambda e: None)
    await gc.flush_now()
    fs.broken = "t-1"
    await gc.checkpoint()
    assert len(journal_files(tmp_path)) == 2
    logs[1].close()  # its topic deleted: the pinned file holds nothing anyone needs
    gc.stage(logs[0], [(b"a", b"2")], lambda e: None)
    await gc.flush_now()
    await gc.checkpoint()
    assert journal_files(tmp_path) == [journal.current_seq]
    assert not gc.journal_needed()


async def test_a_cluster_nodes_round_fsyncs_the_journal_on_the_loop_while_fsyncs_are_fast(tmp_path: Path) -> None:
    # sync_rounds_here (a cluster node): the round appends, tells the followers, fdatasyncs the journal itself
    # and calls back; the child gets no request. A slow fsync sends the next rounds to the child again.
    with with_child(tmp_path) as (fs, _journal, logs, child, gc):
        gc.sync_rounds_here = True
        told: list[int] = []
        gc.on_appended = lambda: told.append(len(fs.fsynced))  # before the round's fsync
        got: list[tuple[int, Exception | None]] = []
        async with running(gc):
            for i in range(3):
                gc.stage(logs[i], [(b"k", b"v")], lambda err, i=i: got.append((i, err)))
            await _until(lambda: len(got) == 3, "the round's callbacks")
            assert got == [(0, None), (1, None), (2, None)] and [p.high_watermark for p in logs] == [1, 1, 1]
            assert child.requests == 0 and len(fs.fsynced) == 1 and "/journal/" in fs.fsynced[0]
            assert told == [0]  # the followers were told before the fsync
            gc._timed(0.050)  # a slow fsync: rounds go to the child until fsyncs are fast again
            gc.stage(logs[0], [(b"k", b"v")], lambda err: got.append((3, err)))
            await _until(lambda: len(got) == 4, "the child's round")
            assert got[3] == (3, None) and child.requests == 1 and len(fs.fsynced) == 1


async def test_a_journal_fsync_error_in_a_loop_round_fails_its_writes(tmp_path: Path) -> None:
    fs, journal, logs, gc = setup(tmp_path)
    gc.sync_rounds_here = True
    got: list[Exception | None] = []
    async with running_without_child(gc):
        fs.fail = True
        gc.stage(logs[0], [(b"k", b"v")], got.append)
        await _until(lambda: len(got) == 1, "the failed round")
    assert isinstance(got[0], Exception) and journal.offline and logs[0].high_watermark == 0


@asynccontextmanager
async def running_without_child(gc: GroupCommit) -> AsyncIterator[None]:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gc.run)
        yield
        nursery.cancel_scope.cancel()
