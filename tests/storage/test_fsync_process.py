"""The fsync child process: it fdatasyncs the descriptors it is sent and answers with the newest token it
took (one answer covers every request waiting when its fdatasync began), reports an fsync's errno, keeps the
files of the last request for requests with the same key, exits when its socket closes, and a child that
died makes every later call raise FsyncProcessGone instead of hanging."""

from __future__ import annotations

import errno
import os
import select
import signal
import time
from pathlib import Path

import pytest

from coordinator.storage.fsync_process import MAX_FDS, FsyncProcess, FsyncProcessGone


def answers_until(proc: FsyncProcess, token: int, timeout: float = 10.0) -> list[tuple[int, int]]:
    """Every answer up to the one covering ``token``."""
    deadline = time.monotonic() + timeout
    seen: list[tuple[int, int]] = []
    while True:
        seen += proc.poll()
        if seen and seen[-1][0] >= token:
            return seen
        left = deadline - time.monotonic()
        assert left > 0, "no answer from the fsync child"
        select.select([proc.fileno()], [], [], left)


def wait_reply(proc: FsyncProcess, token: int, timeout: float = 10.0) -> int:
    """The errno of the answer that covers ``token``."""
    return answers_until(proc, token, timeout)[-1][1]


def gone(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return waited == pid


def test_files_sent_are_fsynced_and_answered_in_order(child: FsyncProcess, tmp_path: Path) -> None:
    fds = [os.open(tmp_path / f"f{i}", os.O_RDWR | os.O_CREAT) for i in range(3)]
    try:
        for fd in fds:
            os.write(fd, b"data")
        first = child.submit(fds)
        second = child.submit(fds)
        assert second == first + 1
        got = answers_until(child, second)
        assert [err for _, err in got] == [0] * len(got)
        assert [t for t, _ in got] == sorted({t for t, _ in got}) and got[-1][0] == second
        # the child closed its copies when new ones came: ours still work
        assert os.pread(fds[0], 4, 0) == b"data"
    finally:
        for fd in fds:
            os.close(fd)


def test_requests_waiting_while_the_child_is_busy_get_one_fsync_and_one_answer(tmp_path: Path) -> None:
    proc = FsyncProcess.start()
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        assert wait_reply(proc, proc.submit([fd])) == 0  # serving
        pid = proc.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # as if stuck in a long fdatasync: requests queue on its socket
        try:
            tokens = [proc.submit([fd], key=("f",)) for _ in range(3)]
            time.sleep(0.1)
            assert proc.poll() == []
        finally:
            os.kill(pid, signal.SIGCONT)
        assert answers_until(proc, tokens[-1]) == [(tokens[-1], 0)]
    finally:
        os.close(fd)
        proc.close()


def test_an_fsync_error_is_answered_with_its_errno(child: FsyncProcess) -> None:
    r, w = os.pipe()  # fdatasync of a pipe fails with EINVAL
    try:
        assert wait_reply(child, child.submit([r])) == errno.EINVAL
        assert child.dead is None  # an fsync error is the file's problem, not the child's
    finally:
        os.close(r)
        os.close(w)


def test_files_are_sent_again_only_when_their_key_changes(child: FsyncProcess, tmp_path: Path) -> None:
    r, w = os.pipe()
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        assert wait_reply(child, child.submit([r], key=("pipe",))) == errno.EINVAL
        # same key: the child syncs the pipe it kept, not the descriptor passed now
        assert wait_reply(child, child.submit([fd], key=("pipe",))) == errno.EINVAL
        assert wait_reply(child, child.submit([fd], key=("file",))) == 0
        assert wait_reply(child, child.submit([r])) == errno.EINVAL  # no key: always sent
    finally:
        for x in (r, w, fd):
            os.close(x)


def test_requests_carry_one_to_max_fds(child: FsyncProcess) -> None:
    with pytest.raises(ValueError):
        child.submit([])
    with pytest.raises(ValueError):
        child.submit([0] * (MAX_FDS + 1))


def test_a_killed_child_makes_every_later_call_raise(tmp_path: Path) -> None:
    proc = FsyncProcess.start()
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        assert wait_reply(proc, proc.submit([fd])) == 0
        pid = proc.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        with pytest.raises(FsyncProcessGone):
            wait_reply(proc, proc.submit([fd]))
        assert proc.dead is not None
        with pytest.raises(FsyncProcessGone):
            proc.submit([fd])
    finally:
        os.close(fd)
        proc.close()


def test_the_child_exits_when_its_socket_closes(tmp_path: Path) -> None:
    proc = FsyncProcess.start()
    pid = proc.pid
    assert pid is not None
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        assert wait_reply(proc, proc.submit([fd])) == 0  # serving: its SIGINT handler is in place
    finally:
        os.close(fd)
    os.kill(pid, signal.SIGINT)  # ignored: a Ctrl-C meant for the server must not stop its fsyncs
    time.sleep(0.2)
    assert not gone(pid)
    proc.close(timeout=10)
    assert gone(pid)
    with pytest.raises(FsyncProcessGone):
        proc.fileno()
