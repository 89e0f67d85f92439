"""Group commit handing success answers to the fsync child (``hand_off``), with the real child process and
a real socket pair as the client connection.

- A handed answer is written by the child after its fdatasync: the callback hears "durable" first, then
  ``written(None)``; the client reads exactly the answer; nothing here wrote it.
- A callback that does not offer (or whose connection cannot take one now) is answered here as before.
- An fdatasync that fails: the handed answer is taken back before its callback hears the error, and the
  child writes nothing to the client, then or later.
- A child that dies with handed answers in flight: each is abandoned (its connection would be closed),
  never answered twice.
- The child's report of a partial write: ``written(rest)`` gets exactly the bytes it did not write, per
  connection, across two answers.
- A write report read in one go with a later errno answer still completes its answers as written (never
  taken back and answered twice).
- Answers that ``poll_answers`` took off the child's socket wake a round waiting for them.
- A flood of drops while the child cannot read waits for room; the child stays in service.
- A child given up on is killed and its end closed: it holds no client socket, later rounds use threads.
- A handed answer already released as durable (a checkpoint) and then taken back is answered here.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

from coordinator.runtime.group_commit import GroupCommit
from coordinator.storage.errors import LogOfflineError
from coordinator.storage.fs import FileSystem
from coordinator.storage.fsync_process import FsyncProcess, FsyncProcessGone
from coordinator.storage.journal import Journal
from coordinator.storage.log import PartitionLog
from protocol.record_batch import build_kv_batch


class Answer:
    """A HandOff callback: records what happened to it, in order."""

    def __init__(self, key: int, fd: int, frame: bytes, offers: bool = True) -> None:
        self.key, self.fd, self.frame, self.offers = key, fd, frame, offers
        self.events: list[object] = []
        self.handed = False

    def __call__(self, err: Exception | None) -> None:
        self.events.append(("durable", err))

    def offer(self) -> tuple[int, int, bytes] | None:
        if not self.offers:
            return None
        self.handed = True
        self.events.append("offered")
        return self.key, self.fd, self.frame

    def written(self, rest: bytes | None) -> None:
        self.handed = False
        self.events.append(("written", rest))

    def take_back(self) -> None:
        self.handed = False
        self.events.append("taken back")

    def abandon(self) -> None:
        self.handed = False
        self.events.append("abandoned")


class FailingChild(FsyncProcess):
    """The real child; ``fail`` replaces the journal's descriptors with a pipe's, whose fdatasync fails."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = False
        self._pipe = os.pipe()

    def submit(self, fds, key=None, writes=()):  # type: ignore[no-untyped-def]
        if self.fail:
            fds, key = [self._pipe[0]], None
        return super().submit(fds, key, writes)

    def close(self, timeout: float = 5.0) -> None:
        super().close(timeout)
        for fd in self._pipe:
            os.close(fd)


@contextmanager
def handing(tmp_path: Path) -> Iterator[tuple[list[PartitionLog], FailingChild, GroupCommit]]:
    fs = FileSystem()
    logs = [PartitionLog.open(str(tmp_path / f"__consumer_offsets-{i}"), fs=fs) for i in range(2)]
    journal = Journal.open(str(tmp_path / "journal"), fs)
    journal.reset()
    child = FailingChild.start()
    gc = GroupCommit(0, journal=journal, fsyncer=child, hand_off=True)
    try:
        yield logs, child, gc
    finally:
        gc.close()


@contextmanager
def client() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(server end, non-blocking as the server's are; client end)."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs.settimeout(5)
    try:
        yield ours, theirs
    finally:
        ours.close()
        theirs.close()


async def until(check, what: str, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    with trio.move_on_after(timeout):
        while not check():
            await trio.sleep(0.005)
        return
    raise AssertionError(f"waited {timeout} s for {what}")


async def run_until(gc: GroupCommit, check, what: str) -> None:  # type: ignore[no-untyped-def]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gc.run)
        await until(check, what)
        nursery.cancel_scope.cancel()


def pending(sock: socket.socket) -> bytes:
    """What the client could read now, without waiting."""
    sock.setblocking(False)
    try:
        return sock.recv(100)
    except BlockingIOError:
        return b""


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        got = sock.recv(n - len(data))
        assert got, "EOF"
        data += got
    return data


async def test_a_handed_answer_is_written_by_the_child_after_its_fsync(tmp_path: Path) -> None:
    with handing(tmp_path) as (logs, _child, gc), client() as (ours, theirs):
        handed = Answer(7, ours.fileno(), b"answer-one")
        kept = Answer(7, ours.fileno(), b"never-sent", offers=False)
        gc.stage(logs[0], [(b"k", b"v")], handed)
        gc.stage(logs[1], [(b"k", b"v")], kept)
        await run_until(gc, lambda: handed.events[-1:] == [("written", None)], "the write report")
        assert handed.events == ["offered", ("durable", None), ("written", None)]
        assert kept.events == [("durable", None)]  # answered here, as before
        assert recv_exactly(theirs, len(b"answer-one")) == b"answer-one"
        assert pending(theirs) == b""  # nothing else reached the client


async def test_a_failed_fsync_takes_the_answer_back_and_the_child_writes_nothing(tmp_path: Path) -> None:
    with handing(tmp_path) as (logs, child, gc), client() as (ours, theirs):
        child.fail = True
        first = Answer(3, ours.fileno(), b"first")
        gc.stage(logs[0], [(b"k", b"v")], first)
        await run_until(gc, lambda: len(first.events) == 3, "the error")
        assert first.events[:2] == ["offered", "taken back"]  # before its callback hears the error
        assert first.events[2][0] == "durable" and isinstance(first.events[2][1], LogOfflineError)
        assert "Invalid argument" in str(first.events[2][1])
        later = Answer(3, ours.fileno(), b"later")  # the journal is offline now: nothing is offered again
        gc.stage(logs[1], [(b"k", b"v")], later)
        await run_until(gc, lambda: len(later.events) == 1, "the later error")
        assert isinstance(later.events[0][1], LogOfflineError)
        assert pending(theirs) == b""


async def test_handed_answers_of_a_child_that_dies_are_abandoned(tmp_path: Path) -> None:
    with handing(tmp_path) as (logs, child, gc), client() as (ours, _theirs):
        answer = Answer(5, ours.fileno(), b"lost?")
        assert child.pid is not None
        os.kill(child.pid, signal.SIGSTOP)  # it takes the request, never answers
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gc.run)
            gc.stage(logs[0], [(b"k", b"v")], answer)
            await until(lambda: answer.events == ["offered"], "the offer")
            os.kill(child.pid, signal.SIGKILL)
            os.waitpid(child.pid, 0)
            await until(lambda: len(answer.events) == 3, "the thread fsync")
            nursery.cancel_scope.cancel()
        # whether the child wrote it is unknown: abandoned (its connection ends), then made durable here
        assert answer.events == ["offered", "abandoned", ("durable", None)]


async def test_a_partial_write_hands_back_exactly_the_unwritten_bytes(tmp_path: Path) -> None:
    with handing(tmp_path) as (_logs, _child, gc):
        a = Answer(9, 0, b"aaaa")
        b = Answer(9, 0, b"bbbbbb")
        c = Answer(4, 0, b"cc")
        for n, answer in enumerate((a, b, c)):
            answer.handed = True
            gc._hand.handed.append((n + 1, [(answer, answer.key, answer.frame)]))
        gc._hand.written(3, {9: 6})  # key 9: 6 of its 10 bytes written; key 4: all
        assert a.events == [("written", None)]
        assert b.events == [("written", b"bbbb")]  # its first 2 bytes went out
        assert c.events == [("written", None)]
        assert not gc._hand.handed


def one_round(gc: GroupCommit) -> None:
    """Append what is staged and send its fsync request, as run() does."""
    gc._append_staged()
    marks, gc._marks = gc._marks, []
    assert gc._submit(marks)


@pytest.mark.serial  # gives the fsync child fixed 0.3 s sleeps to fdatasync and answer: a busy CPU can miss them
async def test_a_write_report_read_together_with_a_later_fsync_error_still_counts(tmp_path: Path) -> None:
    """A(1, ok), W(1) and A(2, EINVAL) taken in one read: answer 1 was written by the child, so it is
    completed as written, never taken back (which would answer it a second time here)."""
    with handing(tmp_path) as (logs, child, gc), client() as (ours, theirs):
        first = Answer(7, ours.fileno(), b"answer-one")
        gc.stage(logs[0], [(b"k", b"v")], first)
        one_round(gc)
        await trio.sleep(0.3)  # the child: fdatasync, A(1), writes, W(1)
        child.fail = True
        second = Answer(7, ours.fileno(), b"answer-two")
        gc.stage(logs[1], [(b"k", b"v")], second)
        one_round(gc)
        await trio.sleep(0.3)  # A(2, EINVAL) queued behind W(1)
        gc._take_answers()  # one read: A(1), W(1), A(2)
        assert first.events == ["offered", ("written", None), ("durable", None)]
        assert second.events[:2] == ["offered", "taken back"] and isinstance(second.events[2][1], LogOfflineError)
        assert recv_exactly(theirs, len(b"answer-one")) == b"answer-one"
        assert pending(theirs) == b""  # answer two was not written by the child


async def test_answers_taken_by_poll_answers_wake_a_round_waiting_for_them(tmp_path: Path) -> None:
    """A round that waits for the request in flight (a topic log is dirty too, so it is a flush_now) must
    hear of an answer that ``poll_answers`` (a generic request) took off the child's socket."""
    with handing(tmp_path) as (logs, child, gc):
        topic = PartitionLog.open(str(tmp_path / "orders-0"), fs=FileSystem())
        done: list[tuple[str, Exception | None]] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gc.run)
            assert child.pid is not None
            os.kill(child.pid, signal.SIGSTOP)  # a slow fdatasync
            gc.stage(logs[0], [(b"k", b"v")], lambda e: done.append(("commit", e)))
            await until(lambda: bool(gc._in_flight), "the request")
            info = gc.append(topic, [build_kv_batch([(b"t", b"v")], 1)])
            gc.when_durable(topic, info.last_offset, lambda e: done.append(("produce", e)))
            await trio.sleep(0.1)  # the next round is a flush_now waiting for the request in flight
            os.kill(child.pid, signal.SIGCONT)
            time.sleep(0.3)  # the event loop busy: the answer arrives meanwhile
            gc.poll_answers()  # and a generic request takes it before the reader task runs
            await until(lambda: ("produce", None) in done, "the produce's flush")
            nursery.cancel_scope.cancel()
        assert sorted(done) == [("commit", None), ("produce", None)]


async def test_a_flood_of_drops_waits_for_room_instead_of_losing_the_child(tmp_path: Path) -> None:
    """5,000 closed connections to drop while the child cannot read: the drops that find no room wait (the
    child stays in service), all reach it once it runs again, and a later commit is made durable by it."""
    with handing(tmp_path) as (logs, child, gc):
        done: list[Exception | None] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gc.run)
            await until(lambda: gc._reader, "the reader")
            assert child.pid is not None
            os.kill(child.pid, signal.SIGSTOP)
            gc._hand.registered.update(range(1, 5001))
            for key in range(1, 5001):
                gc.forget(key)
            assert child.dead is None and gc._hand.pending_drops  # some wait for room
            os.kill(child.pid, signal.SIGCONT)
            await until(lambda: not gc._hand.pending_drops, "every drop sent")
            gc.stage(logs[0], [(b"k", b"v")], done.append)
            await until(lambda: done == [None], "the commit")
            nursery.cancel_scope.cancel()
        assert child.dead is None and gc.rounds >= 1


async def test_a_child_given_up_on_is_killed_so_it_holds_no_client_socket(tmp_path: Path) -> None:
    """The child declared gone while alive (an answer it broke, a full socket): it is killed and its end
    closed, so its copies of client sockets close (the client sees EOF when the server closes its own),
    a reader waiting on its socket wakes, and later rounds fsync in a thread."""
    with handing(tmp_path) as (logs, child, gc), client() as (ours, theirs):
        answer = Answer(11, ours.fileno(), b"hello")
        got: list[Exception | None] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gc.run)
            gc.stage(logs[0], [(b"k", b"v")], answer)
            await until(lambda: answer.events[-1:] == [("written", None)], "the first answer")
            assert recv_exactly(theirs, 5) == b"hello"  # the child holds a copy of this socket now
            gc._child_stopped(FsyncProcessGone("declared gone for the test"))
            await until(lambda: not gc._reader, "the reader to notice")
            gc.stage(logs[1], [(b"k", b"v")], got.append)
            await until(lambda: got == [None], "a thread round")
            nursery.cancel_scope.cancel()
        assert child.pid is not None
        os.waitpid(child.pid, 0)  # it was killed (close() reaps nothing more)
        ours.close()
        theirs.settimeout(5)
        assert theirs.recv(10) == b""  # EOF: no copy of the socket is left open


async def test_a_handed_answer_already_durable_is_answered_when_taken_back(tmp_path: Path) -> None:
    """A checkpoint fsynced the log's own files, so the write was released (durable) while its answer was
    still handed; then the child's fdatasync failed and the answer is taken back: the server must answer it
    (success: it is durable), or the connection would wait behind it for ever. Real _CommitSettled."""
    from types import SimpleNamespace as NS

    from coordinator.runtime.groups import _CommitSettled

    class Conn:
        key, fd, handed, hand_off_ok = 7, 5, 0, True

        def can_hand_off(self, slot) -> bool:  # type: ignore[no-untyped-def]
            return True

    class Slot:
        def __init__(self) -> None:
            self.conn, self.done, self.frame, self.version, self.correlation_id = Conn(), False, None, 8, 1

        def complete_frame(self, frame: bytes | None) -> None:
            if not self.done:
                self.done, self.frame = True, frame

    with handing(tmp_path) as (logs, child, gc):
        service = NS(core=NS(commit_settled=lambda pending, durable: None),
                     broker=NS(metrics=NS(offset_commits=NS(inc=lambda: None))),
                     write_failures=NS(error=lambda *a: None))
        slot = Slot()
        cb = _CommitSettled(service, slot, NS(group_id="g"), "t", 0)  # type: ignore[arg-type]
        gc.stage(logs[0], [(b"k", b"v")], cb)
        child.fail = True  # its fdatasync will fail
        with trio.fail_after(10):
            one_round(gc)
            assert cb.handed and not slot.done
            logs[0].note_durable(logs[0].log_end_offset)  # as a checkpoint's fsync of the log does
            gc._release({})
            assert not slot.done  # released, but the answer is the child's
            while not slot.done:
                await trio.lowlevel.wait_readable(child.fileno())
                gc._take_answers()  # A(1, EINVAL): taken back
        assert not cb.handed and slot.frame is not None  # answered here, with success
