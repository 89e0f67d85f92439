"""A commit is never readable in ``__consumer_offsets`` before it is durable (#27).

The story: the server runs with the journal fsynced in a worker thread (``--log-journal-fsync-process
false``) and a test-only gate on that fsync (tests/integration/fsync_gate/sitecustomize.py: the fsync waits
while a file exists, as a slow disk would). With the gate closed, a client sends an OffsetCommit: the record
is appended to the offsets partition's log (the page cache) but its fsync cannot return, so the commit is
not answered. Meanwhile Fetch of that partition from offset 0 returns no record and a high watermark of 0,
and ListOffsets latest answers 0. The gate opens: the commit is answered, and the same Fetch now returns
its record (high watermark 1).
"""

from __future__ import annotations

import itertools
import os
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_process import ServerProcess, read_frame  # type: ignore[import-not-found]

from coordinator.core.sharding import partition_for
from protocol import codec

GATE_DIR = Path(__file__).parent / "fsync_gate"
OFFSETS, GROUP = "__consumer_offsets", "dur-group"
_corr = itertools.count(1)


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    gate = tmp_path / "gate"
    env = {"PYTHONPATH": os.pathsep.join([str(GATE_DIR), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "TEST_FSYNC_GATE": str(gate)}
    srv = ServerProcess(tmp_path / "data", "--log-journal-fsync-process", "false",
                        "--group-initial-rebalance-delay-ms", "0", env=env).start()
    try:
        for _ in range(100):  # the offsets partitions' logs exist once loaded (bounded: 10 s)
            if "loaded 50 offsets partitions" in srv.log():
                break
            time.sleep(0.1)
        yield srv, gate
    finally:
        gate.unlink(missing_ok=True)
        srv.stop()


def ask(sock: socket.socket, api: int, version: int, body: dict) -> dict:
    sock.sendall(codec.encode_request(api, version, next(_corr), "durability", body))
    payload = read_frame(sock)
    assert payload is not None
    return codec.decode_response(api, version, payload)[1]


def fetch(sock: socket.socket, part: int) -> dict:
    return ask(sock, 1, 12, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                             "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                             "forgotten_topics_data": [], "rack_id": "",
                             "topics": [{"topic": OFFSETS, "partitions": [
                                 {"partition": part, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}
               )["responses"][0]["partitions"][0]


def latest(sock: socket.socket, part: int) -> int:
    resp = ask(sock, 2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": OFFSETS, "partitions": [
        {"partition_index": part, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return resp["topics"][0]["partitions"][0]["offset"]


def test_a_commit_is_readable_only_once_durable(gated: tuple[ServerProcess, Path]) -> None:
    srv, gate = gated
    part = partition_for(GROUP, 50)
    gate.touch()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as committer, \
            socket.create_connection(("127.0.0.1", srv.port), timeout=30) as reader:
        committer.sendall(codec.encode_request(8, 8, 99, "durability", {
            "group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                     "committed_leader_epoch": -1, "committed_metadata": "gated"}]}]}))
        ready, _, _ = select.select([committer], [], [], 1.0)
        assert ready == []  # not answered: its fsync cannot return
        before = fetch(reader, part)
        assert (before["error_code"], before["high_watermark"], bytes(before["records"])) == (0, 0, b"")
        assert latest(reader, part) == 0
        gate.unlink()
        payload = read_frame(committer)
        assert payload is not None
        assert codec.decode_response(8, 8, payload)[1]["topics"][0]["partitions"][0]["error_code"] == 0
        after = fetch(reader, part)
        assert after["error_code"] == 0 and after["high_watermark"] == 1 and b"gated" in bytes(after["records"])
        assert latest(reader, part) == 1
