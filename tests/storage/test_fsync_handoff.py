"""The fsync child's hand-off: after a successful fdatasync it writes the bytes each request handed it to the
registered client sockets (per key, in request order), then reports the keys it could not write in full;
after any errno it never writes again; a client that could not take everything is never written again; a
dropped socket is closed only after the writes taken before the drop. Real child, real Unix stream sockets
standing in for client connections (the server end non-blocking, as the server keeps it)."""

from __future__ import annotations

import errno
import os
import select
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from coordinator.storage.fsync_process import (
    ANSWER,
    HEAD,
    MAX_MESSAGE,
    MAX_WRITE_BYTES,
    REPORT_ENTRIES,
    REPORTED,
    FsyncProcess,
    FsyncProcessGone,
)

Reports = list[tuple[int, dict[int, int]]]


@pytest.fixture
def fd(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path / "journal", os.O_RDWR | os.O_CREAT)
    os.write(fd, b"records")
    try:
        yield fd
    finally:
        os.close(fd)


@contextmanager
def client() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(the server's end, non-blocking; the client's end)."""
    server, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server.setblocking(False)
    try:
        yield server, peer
    finally:
        server.close()
        peer.close()


@contextmanager
def stopped(proc: FsyncProcess) -> Iterator[None]:
    """The child frozen, so that everything sent meanwhile is taken in one batch."""
    pid = proc.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def settle(proc: FsyncProcess, token: int, timeout: float = 5.0) -> tuple[list[tuple[int, int]], Reports]:
    """Every answer up to the one covering ``token``, and every report, once no report is due any more."""
    deadline = time.monotonic() + timeout
    answers: list[tuple[int, int]] = []
    reports: Reports = []
    while True:
        answers += proc.poll()
        reports += proc.take_written()
        if answers and answers[-1][0] >= token and not proc.report_due:
            return answers, reports
        left = deadline - time.monotonic()
        assert left > 0, "no answer from the fsync child"
        select.select([proc.fileno()], [], [], left)


def read_exactly(peer: socket.socket, n: int) -> bytes:
    peer.settimeout(5.0)
    got = b""
    while len(got) < n:
        chunk = peer.recv(n - len(got))
        assert chunk, f"EOF after {got!r}"
        got += chunk
    return got


def nothing_waiting(peer: socket.socket) -> bool:
    peer.setblocking(False)
    try:
        peer.recv(1)
    except BlockingIOError:
        return True
    return False


def test_two_requests_in_one_batch_reach_each_client_in_order_after_one_answer(child: FsyncProcess,
                                                                                fd: int) -> None:
    with client() as (server_a, peer_a), client() as (server_b, peer_b):
        child.register(7, server_a.fileno())
        child.register(9, server_b.fileno())
        assert settle(child, child.submit([fd], key="j"))[0][-1][1] == 0  # serving, files held
        with stopped(child):
            first = child.submit([fd], key="j", writes=[(7, b"one,"), (9, b"x")])
            second = child.submit([fd], key="j", writes=[(9, b"y"), (7, b"two")])
        answers, reports = settle(child, second)
        assert answers == [(second, 0)] and first == second - 1  # one fsync answers both
        assert reports == [(second, {})]  # everything written
        assert read_exactly(peer_a, 7) == b"one,two"
        assert read_exactly(peer_b, 2) == b"xy"
        assert nothing_waiting(peer_a) and nothing_waiting(peer_b)


def test_after_an_fsync_error_nothing_is_ever_written_or_reported(child: FsyncProcess, fd: int) -> None:
    r, w = os.pipe()  # fdatasync of a pipe fails with EINVAL
    try:
        with client() as (server, peer):
            child.register(7, server.fileno())
            failed = child.submit([r], writes=[(7, b"lost")])
            assert settle(child, failed) == ([(failed, errno.EINVAL)], [])
            later = child.submit([fd], key="j", writes=[(7, b"later")])
            assert settle(child, later) == ([(later, 0)], [])  # durable, but no hand-off any more
            assert child.report_due == 0
            barrier = child.submit([fd], key="j")  # answered: the batch before it is finished
            assert settle(child, barrier) == ([(barrier, 0)], [])
            assert nothing_waiting(peer)
    finally:
        os.close(r)
        os.close(w)


def test_a_client_that_cannot_take_everything_gets_a_prefix_and_then_nothing(child: FsyncProcess,
                                                                            fd: int) -> None:
    data = bytes(range(256)) * 64  # 16 KiB, more than the shrunken buffer holds
    with client() as (server, peer):
        server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)  # the kernel's minimum, a few KiB
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
        child.register(7, server.fileno())
        token = child.submit([fd], key="j", writes=[(7, data)])
        _, reports = settle(child, token)
        assert [t for t, _ in reports] == [token] and set(reports[0][1]) == {7}
        written = reports[0][1][7]
        assert 0 < written < len(data)
        assert read_exactly(peer, written) == data[:written]
        assert nothing_waiting(peer)  # drained: there is room now
        token = child.submit([fd], key="j", writes=[(7, b"more")])
        assert settle(child, token) == ([(token, 0)], [(token, {7: 0})])  # stuck: never written again
        assert nothing_waiting(peer)


def test_a_dropped_client_is_closed_after_the_writes_taken_with_the_drop(child: FsyncProcess, fd: int) -> None:
    with client() as (server, peer):
        child.register(7, server.fileno())
        server.close()  # ours is closed: the child's copy keeps the connection open
        token = child.submit([fd], key="j", writes=[(7, b"hello ")])
        assert settle(child, token) == ([(token, 0)], [(token, {})])
        assert read_exactly(peer, 6) == b"hello "
        peer.settimeout(0.2)
        with pytest.raises(TimeoutError):
            peer.recv(1)  # no EOF while the child holds its copy
        with stopped(child):
            token = child.submit([fd], key="j", writes=[(7, b"bye")])
            child.drop(7)
        assert settle(child, token) == ([(token, 0)], [(token, {})])
        peer.settimeout(5.0)
        assert read_exactly(peer, 3) == b"bye"
        assert peer.recv(1) == b""  # EOF: the child closed its copy after writing


def test_registering_a_key_again_replaces_the_client_socket(child: FsyncProcess, fd: int) -> None:
    with client() as (old, old_peer), client() as (new, new_peer):
        child.register(7, old.fileno())
        child.register(7, new.fileno())
        old.close()
        token = child.submit([fd], key="j", writes=[(7, b"to the new one")])
        assert settle(child, token) == ([(token, 0)], [(token, {})])
        assert read_exactly(new_peer, 14) == b"to the new one"
        old_peer.settimeout(5.0)
        assert old_peer.recv(1) == b""  # the child closed its old copy


def test_an_unregistered_key_is_reported_unwritten(child: FsyncProcess, fd: int) -> None:
    with client() as (server, peer):
        child.register(7, server.fileno())
        token = child.submit([fd], key="j", writes=[(8, b"nobody"), (7, b"somebody")])
        assert settle(child, token) == ([(token, 0)], [(token, {8: 0})])
        assert read_exactly(peer, 8) == b"somebody"


def test_a_long_report_arrives_in_pieces_and_is_merged(child: FsyncProcess, fd: int) -> None:
    keys = range(1000, 1000 + REPORT_ENTRIES + 50)  # none registered: every one reported 0
    token = child.submit([fd], key="j", writes=[(k, b"x") for k in keys])
    assert settle(child, token) == ([(token, 0)], [(token, dict.fromkeys(keys, 0))])


def test_requests_are_bounded(child: FsyncProcess, fd: int) -> None:
    with pytest.raises(ValueError):
        child.submit([fd], writes=[(7, b"x" * (MAX_WRITE_BYTES - 1)), (8, b"yy")])
    with pytest.raises(ValueError):  # the bytes are few but the message is too long
        child.submit([fd], writes=[(7, b"")] * (MAX_MESSAGE // 12))
    with pytest.raises(ValueError):
        child.submit([fd], writes=[(-1, b"x")])
    token = child.submit([fd], key="j", writes=[(7, b"x" * MAX_WRITE_BYTES)])  # the bound itself is fine
    assert token == 1  # nothing was sent for the refused ones
    assert settle(child, token) == ([(1, 0)], [(1, {7: 0})])


def test_a_malformed_message_stops_the_hand_off(child: FsyncProcess, fd: int) -> None:
    with client() as (server, peer):
        child.register(7, server.fileno())
        with stopped(child):
            token = child.submit([fd], key="j", writes=[(7, b"never")])
            child._sock.send(b"Z" + bytes(8))  # type: ignore[union-attr]
        assert settle(child, token) == ([(token, errno.EINVAL)], [])
        token = child.submit([fd], key="k", writes=[(7, b"still never")])  # files sent again: durable
        assert settle(child, token) == ([(token, 0)], [])
        barrier = child.submit([fd], key="k")
        settle(child, barrier)
        assert nothing_waiting(peer)


def test_registering_something_that_is_not_a_socket_breaks_the_child(child: FsyncProcess, fd: int) -> None:
    child.register(7, fd)  # a batch of one bad R: answered with token 0, which is no answer
    deadline = time.monotonic() + 5
    with pytest.raises(FsyncProcessGone):
        while time.monotonic() < deadline:
            child.poll()
            select.select([child.fileno()], [], [], 0.5)
    assert child.dead is not None


def test_the_parent_accepts_a_report_only_right_after_its_answer() -> None:
    proc = FsyncProcess()  # with a scripted child
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setblocking(False)
    proc._sock, proc.dead = ours, None
    try:
        with client() as (server, _):
            proc.submit([server.fileno()], writes=[(7, b"a")])
            proc.submit([server.fileno()])
            proc.submit([server.fileno()], writes=[(7, b"b")])
        theirs.send(ANSWER.pack(b"A", 2, 0))
        assert proc.poll() == [(2, 0)] and proc.report_due == 2
        theirs.send(HEAD.pack(b"w", 2) + REPORTED.pack(7, 0))  # a first piece is kept back
        assert proc.poll() == [] and proc.take_written() == []
        theirs.send(HEAD.pack(b"W", 2) + REPORTED.pack(8, 1))
        assert proc.poll() == [] and proc.take_written() == [(2, {7: 0, 8: 1})] and proc.report_due == 0
        theirs.send(HEAD.pack(b"W", 2))  # a second report for the same answer
        with pytest.raises(FsyncProcessGone):
            proc.poll()
    finally:
        proc.close()
        theirs.close()
