"""A leader's follower fetch sessions on the wire (KIP-227; coordinator/cluster/fetch_sessions.py), against a real
cluster node: Fetch v12 as a replica opens a session, an incremental fetch that lists nothing answers only the
partition a commit wrote to, and a wrong epoch or an unknown session id gets Kafka's errors.

Two nodes form the cluster; node 2 then stops, so node 1 leads every offsets partition with replicas (1, 2) and
no real follower fetches: this test speaks as replica 2. ``min.insync.replicas`` 1 lets node 1 take commits alone.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Any

from cluster_nodes import (
    OFFSETS_TOPIC,
    commit_offset,
    find_coordinator,
    metadata,
    offsets_partitions,
    start_nodes,
    stop_nodes,
    wait_for,
)
from test_cluster_membership import formed

from coordinator.core.sharding import partition_for
from protocol import codec
from protocol.errors import ErrorCode

FETCH, VERSION = 1, 12


class RawReplica:
    """A socket speaking Fetch v12 as replica 2."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        self.correlation = 0

    def fetch(self, session_id: int, epoch: int, positions: dict[int, int], max_wait_ms: int,
              forgotten: list[int] | None = None) -> dict[str, Any]:
        self.correlation += 1
        body = {"replica_id": 2, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
                "topics": [{"topic": OFFSETS_TOPIC, "partitions": [
                    {"partition": p, "current_leader_epoch": -1, "fetch_offset": off, "last_fetched_epoch": -1,
                     "log_start_offset": 0, "partition_max_bytes": 1 << 16} for p, off in positions.items()]}]
                if positions else [],
                "forgotten_topics_data": [{"topic": OFFSETS_TOPIC, "partitions": forgotten}] if forgotten else [],
                "rack_id": "", "cluster_id": None}
        self.sock.sendall(codec.encode_request(FETCH, VERSION, self.correlation, "raw-replica", body))
        size = struct.unpack(">i", self._read(4))[0]
        corr, answer = codec.decode_response(FETCH, VERSION, self._read(size))
        assert corr == self.correlation
        return answer

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "the node closed the connection"
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()


def answered(answer: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {p["partition_index"]: p for t in answer["responses"] for p in t["partitions"]}


def test_a_session_answers_only_the_partitions_with_news(tmp_path: Path, zk_connect: str) -> None:
    nodes = start_nodes(tmp_path, zk_connect, [1, 2], "--min-insync-replicas", "1")
    try:
        formed(nodes)
        assert nodes[2].stop() == 0
        node = nodes[1]
        wait_for("node 1 leading every offsets partition, ISR [1]", lambda: (all(
            p["leader_id"] == 1 and p["isr_nodes"] == [1] for p in offsets_partitions(metadata(node)).values())
            and len(offsets_partitions(metadata(node))) == 50) or None, timeout=60)
        group = "session-group"
        shard = partition_for(group, 50)
        wait_for("a first commit", lambda: (find_coordinator(node, group) == (0, 1) and
                 commit_offset(node, group, offset=1) == 0) or None)
        raw = RawReplica(node.port)
        try:
            full = raw.fetch(0, 0, dict.fromkeys(range(50), 0), max_wait_ms=0)  # a new session, every partition
            sid = full["session_id"]
            parts = answered(full)
            assert full["error_code"] == 0 and sid != 0 and sorted(parts) == list(range(50))
            assert all(p["error_code"] == 0 for p in parts.values())
            assert parts[shard]["records"] and parts[shard]["high_watermark"] >= 1
            ends = {p: r["high_watermark"] for p, r in parts.items()}
            # every position moved to the end: nothing has news, so after max_wait the answer lists nothing
            caught_up = raw.fetch(sid, 1, ends, max_wait_ms=300)
            assert caught_up["error_code"] == 0 and caught_up["session_id"] == sid
            assert answered(caught_up) == {}
            # a commit appends to its shard: an incremental fetch listing nothing answers with that partition only
            assert commit_offset(node, group, offset=2) == 0
            news = raw.fetch(sid, 2, {}, max_wait_ms=10_000)
            got = answered(news)
            assert list(got) == [shard] and got[shard]["records"] and got[shard]["error_code"] == 0
            # its position did not move (nothing listed): the next fetch would send those records again, but a
            # forgotten partition is no longer served in this session
            assert answered(raw.fetch(sid, 3, {}, max_wait_ms=300, forgotten=[shard])) == {}
            assert raw.fetch(sid, 9, {}, max_wait_ms=0)["error_code"] == ErrorCode.INVALID_FETCH_SESSION_EPOCH
            assert raw.fetch(sid + 1, 1, {}, max_wait_ms=0)["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
            # sessionless (epoch -1) closes it: every listed partition answered, id 0
            closing = raw.fetch(sid, -1, {shard: 0}, max_wait_ms=0)
            assert closing["session_id"] == 0 and list(answered(closing)) == [shard]
            assert raw.fetch(sid, 4, {}, max_wait_ms=0)["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        finally:
            raw.close()
    finally:
        stop_nodes(nodes)
