"""Answers written by the fsync child (``log.journal.fsync.process.answers``) on a real server.

Two daemons run side by side: one with the hand-off (the default) and one with
``--log-journal-fsync-process-answers false``. On each:
- A raw connection pipelines OffsetCommits of one partition (the hot shape, whose success answers the fsync
  child writes once durable) between ApiVersions and a Heartbeat of an unknown group (answered at once on
  the hot path, so they queue behind the commits): the answers come back in request order and are
  byte-identical between the two daemons; ``groupcoord_answers_by_fsync_child_total`` grows on the first
  daemon only.
- Read-your-writes: a commit, its answer, then at once an OffsetFetch, 150 times: the fetch always sees the
  offset just acknowledged (the child says "durable" before it writes, and a fetch takes that first).
- A connection the server closes (an oversized frame) after the child wrote to it: the client sees EOF
  (the child dropped its copy of the socket), and the server keeps serving.
- The child killed mid-stream: no answer twice or out of order, the server goes on without it, and every
  acknowledged commit survives a restart.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_process import ServerProcess, read_frame, twin_servers  # type: ignore[import-not-found]

from protocol import codec

OFFSET_COMMIT, OFFSET_FETCH, HEARTBEAT, API_VERSIONS = 8, 9, 12, 18
FLAGS = ("--offsets-topic-num-partitions", "4")
HANDED = "groupcoord_answers_by_fsync_child_total"


def commit(corr: int, group: str, partition: int, offset: int) -> bytes:
    return codec.encode_request(OFFSET_COMMIT, 8, corr, "hand-off-test", {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": "t", "partitions": [{"partition_index": partition, "committed_offset": offset,
                                                 "committed_leader_epoch": -1, "committed_metadata": ""}]}]})


def fetch(corr: int, group: str) -> bytes:
    return codec.encode_request(OFFSET_FETCH, 7, corr, "hand-off-test", {
        "group_id": group, "topics": [{"name": "t", "partition_indexes": [0, 1]}], "require_stable": False})


def others(corr: int, api: int) -> bytes:
    if api == API_VERSIONS:
        return codec.encode_request(API_VERSIONS, 3, corr, "hand-off-test", {
            "client_software_name": "hand-off-test", "client_software_version": "1"})
    return codec.encode_request(HEARTBEAT, 4, corr, "hand-off-test", {
        "group_id": "no-such-group", "generation_id": 1, "member_id": "m", "group_instance_id": None})


def commit_answer(payload: bytes) -> tuple[int, int]:
    """(correlation id, error code of its one partition) of an OffsetCommit v8 answer."""
    corr, body = codec.decode_response(OFFSET_COMMIT, 8, payload)
    return corr, body["topics"][0]["partitions"][0]["error_code"]


def connect(srv: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", srv.port), timeout=10)


def answers(sock: socket.socket, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        payload = read_frame(sock)
        assert payload is not None, "the server closed the connection"
        out.append(payload)
    return out


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with twin_servers(tmp_path_factory.mktemp("handoff"), FLAGS, ("--log-journal-fsync-process-answers", "false")) as pair:
        yield pair


def pipelined(srv: ServerProcess, rounds: int) -> list[bytes]:
    """``rounds`` times: commit, ApiVersions, commit, Heartbeat, sent at once; every answer, in order."""
    sock = connect(srv)
    try:
        got: list[bytes] = []
        corr = 0
        for r in range(rounds):
            frames, sent = [], []
            for kind in ("c0", API_VERSIONS, "c1", HEARTBEAT):
                corr += 1
                sent.append(corr)
                if kind == "c0":
                    frames.append(commit(corr, "pipe-group", 0, 10 * r))
                elif kind == "c1":
                    frames.append(commit(corr, "pipe-group", 1, 10 * r + 1))
                else:
                    frames.append(others(corr, kind))  # type: ignore[arg-type]
            sock.sendall(b"".join(frames))
            payloads = answers(sock, len(frames))
            assert [int.from_bytes(p[:4], "big") for p in payloads] == sent  # in request order
            got.extend(payloads)
        return got
    finally:
        sock.close()


def test_child_written_answers_keep_request_order_and_bytes(servers) -> None:
    on, off = servers
    before = on.metric(HANDED)
    got_on, got_off = pipelined(on, 20), pipelined(off, 20)
    assert got_on == got_off  # byte-identical answers, whoever wrote them
    assert all(commit_answer(p)[1] == 0 for i, p in enumerate(got_on) if i % 4 in (0, 2))
    assert on.metric(HANDED) > before  # the child wrote some of them on the first daemon
    assert off.metric(HANDED) == 0


def test_a_fetch_right_after_a_child_written_answer_sees_the_commit(servers) -> None:
    on, _ = servers
    before = on.metric(HANDED)
    sock = connect(on)
    try:
        for i in range(150):
            sock.sendall(commit(2 * i + 1, "ryw-group", 0, 1000 + i))
            (payload,) = answers(sock, 1)
            assert commit_answer(payload) == (2 * i + 1, 0)
            sock.sendall(fetch(2 * i + 2, "ryw-group"))
            (payload,) = answers(sock, 1)
            corr, body = codec.decode_response(OFFSET_FETCH, 7, payload)
            offsets = {p["partition_index"]: p["committed_offset"] for p in body["topics"][0]["partitions"]}
            assert corr == 2 * i + 2 and offsets == {0: 1000 + i, 1: -1}, (i, offsets)
    finally:
        sock.close()
    assert on.metric(HANDED) >= before + 100  # most were the child's (none are refused here)


def test_a_connection_the_server_closes_reaches_eof_after_the_child_wrote_to_it(servers) -> None:
    on, _ = servers
    before = on.metric(HANDED)
    sock = connect(on)
    try:
        for i in range(5):
            sock.sendall(commit(i + 1, "close-group", 0, i))
            assert answers(sock, 1)
        deadline = time.monotonic() + 5
        while on.metric(HANDED) < before + 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert on.metric(HANDED) >= before + 1  # the child holds a copy of this socket
        sock.sendall((1 << 30).to_bytes(4, "big") + b"\x00" * 8)  # a frame over socket.request.max.bytes
        sock.settimeout(5)
        assert sock.recv(1) == b""  # EOF: no copy of the socket is left open
    finally:
        sock.close()
    again = connect(on)  # still serving
    try:
        again.sendall(commit(1, "close-group", 0, 99))
        (payload,) = answers(again, 1)
        assert commit_answer(payload)[1] == 0
    finally:
        again.close()


def fsync_child_pid(srv: ServerProcess) -> int:
    assert srv.proc is not None
    with open(f"/proc/{srv.proc.pid}/task/{srv.proc.pid}/children") as f:
        pids = [int(p) for p in f.read().split()]
    for pid in pids:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"fsync_process.py" in f.read():
                return pid
    raise AssertionError(f"no fsync child among {pids}")


# serial: the SIGKILL must land while the 300 pipelined commits are in flight; on a busy CPU this process can be
# descheduled until they are all answered, and the server then notices the dead child only at its next commit
@pytest.mark.serial
def test_a_child_killed_mid_stream_never_answers_twice_and_loses_no_acknowledged_commit(tmp_path: Path) -> None:
    """10 connections each pipeline 30 commits of rising offsets; the fsync child is SIGKILLed meanwhile.
    Each connection gets a prefix of its answers, in order, each once, then (if cut short) EOF: an answer the
    child may or may not have written closes its connection rather than risk a second copy. The server goes
    on (fsyncing in threads, answering itself), and after a restart every acknowledged offset is there."""
    srv = ServerProcess(tmp_path / "data", *FLAGS)
    srv.start().wait_loaded()
    acked: dict[str, int] = {}
    try:
        socks = [connect(srv) for _ in range(10)]
        child = fsync_child_pid(srv)
        for i, sock in enumerate(socks):
            sock.sendall(b"".join(commit(n + 1, f"kill-group-{i}", 0, 100 + n) for n in range(30)))
        os.kill(child, signal.SIGKILL)
        for i, sock in enumerate(socks):
            sock.settimeout(10)
            corrs = []
            while len(corrs) < 30:
                payload = read_frame(sock)
                if payload is None:  # closed: the rest is unknown to this client
                    break
                corr, error = commit_answer(payload)
                assert error == 0
                corrs.append(corr)
            assert corrs == list(range(1, len(corrs) + 1))  # in order, each once
            if corrs:
                acked[f"kill-group-{i}"] = 100 + len(corrs) - 1
            sock.close()
        assert "fsync child process stopped serving" in srv.log()
        again = connect(srv)  # still serving, now without the child
        try:
            again.sendall(commit(1, "after-kill", 0, 7))
            (payload,) = answers(again, 1)
            assert commit_answer(payload)[1] == 0
        finally:
            again.close()
        assert srv.stop() == 0
        srv = ServerProcess(tmp_path / "data", *FLAGS)  # a new log: "loaded" must come from this run
        srv.start().wait_loaded()
        sock = connect(srv)
        try:
            for n, (group, offset) in enumerate(sorted(acked.items())):
                sock.sendall(fetch(n + 1, group))
                (payload,) = answers(sock, 1)
                body = codec.decode_response(OFFSET_FETCH, 7, payload)[1]
                assert body["error_code"] == 0, body
                parts = body["topics"][0]["partitions"]
                assert {p["partition_index"]: p["committed_offset"] for p in parts}[0] >= offset, group
        finally:
            sock.close()
    finally:
        if srv.alive():
            srv.stop()
