"""Three members driven over real sockets with kafka-python's OWN protocol classes (not our codec).

Story, once with the flexible versions and once with older ones: three members join with an empty member
id and get MEMBER_ID_REQUIRED (79) with an id, rejoin with it and form generation 1 (the first joiner
leads; only the leader's JoinGroup response carries the members' metadata). The leader assigns the six
partitions of ``clicks`` two apiece; followers send SyncGroup before the leader and wait; every member
receives its own assignment. All heartbeat (0) and commit with their generation; OffsetFetch shows the
commits. Then member C stops heartbeating: after its 1500 ms session the other two get
REBALANCE_IN_PROGRESS (27) on heartbeat, rejoin, and form generation 2 without C. C's late heartbeat gets
UNKNOWN_MEMBER_ID (25) and a commit with the old generation ILLEGAL_GENERATION (22).
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from server_process import ServerProcess  # type: ignore[import-not-found]

GROUP = "clickers"
TOPIC = "clicks"
SESSION_MS = 1500
REBALANCE_MS = 5000
COORDINATOR_LOAD_IN_PROGRESS = 14
MEMBER_ID_REQUIRED, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS = 79, 25, 22, 27


@dataclass(frozen=True)
class Versions:
    join: int
    sync: int
    heartbeat: int
    commit: int
    fetch: int


FLEXIBLE = Versions(join=9, sync=5, heartbeat=4, commit=8, fetch=7)
OLDER = Versions(join=4, sync=2, heartbeat=2, commit=5, fetch=3)    # v4: first JoinGroup with KIP-394


class KafkaPythonMember:
    """One consumer's connection: kafka-python request classes encode, its response classes decode."""

    def __init__(self, port: int, name: str, versions: Versions) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.name, self.v = name, versions
        self.member_id = ""
        self.generation = -1
        self.corr = 0

    def close(self) -> None:
        self.sock.close()

    def call(self, request: Any, response_class: Any, version: int) -> Any:
        self.corr += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self.corr, client_id=self.name)
        self.sock.sendall(bytes(request.encode(header=True, framed=True)))
        (size,) = struct.unpack(">i", self._recv(4))
        response = response_class.decode(self._recv(size), version=version, header=True)
        assert response.header.correlation_id == self.corr
        return response

    def _recv(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            assert chunk, "server closed the connection"
            out += chunk
        return out

    # ------------------------------------------------------------ group calls
    def join(self) -> Any:
        subscription = ConsumerProtocolSubscription(topics=[TOPIC], user_data=None, owned_partitions=[],
                                                    generation_id=-1, rack_id=None).encode(version=0)
        request = JoinGroupRequest(group_id=GROUP, session_timeout_ms=SESSION_MS,
                                   rebalance_timeout_ms=REBALANCE_MS, member_id=self.member_id,
                                   group_instance_id=None, protocol_type="consumer",
                                   protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range",
                                                                                        metadata=bytes(subscription))],
                                   reason=None)
        response = self.call(request, JoinGroupResponse, self.v.join)
        if response.member_id:
            self.member_id = response.member_id
        if response.error_code == 0:
            self.generation = response.generation_id
        return response

    def sync(self, assignments: dict[str, list[int]]) -> list[int]:
        encoded = [SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=bytes(_assignment(parts)))
                   for m, parts in assignments.items()]
        request = SyncGroupRequest(group_id=GROUP, generation_id=self.generation, member_id=self.member_id,
                                   group_instance_id=None, protocol_type="consumer", protocol_name="range",
                                   assignments=encoded)
        response = self.call(request, SyncGroupResponse, self.v.sync)
        assert response.error_code == 0, (self.name, response)
        decoded = ConsumerProtocolAssignment.decode(bytes(response.assignment), version=0)
        return sorted(p for tp in decoded.assigned_partitions if tp.topic == TOPIC for p in tp.partitions)

    def heartbeat(self) -> int:
        request = HeartbeatRequest(group_id=GROUP, generation_id=self.generation, member_id=self.member_id,
                                   group_instance_id=None)
        return self.call(request, HeartbeatResponse, self.v.heartbeat).error_code

    def commit(self, offsets: dict[int, int], generation: int | None = None) -> dict[int, int]:
        part = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition
        request = OffsetCommitRequest(
            group_id=GROUP, generation_id_or_member_epoch=self.generation if generation is None else generation,
            member_id=self.member_id, group_instance_id=None, retention_time_ms=-1,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
                name=TOPIC, partitions=[part(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                             commit_timestamp=-1, committed_metadata=f"by {self.name}")
                                        for p, o in offsets.items()])])
        response = self.call(request, OffsetCommitResponse, self.v.commit)
        return {p.partition_index: p.error_code for t in response.topics for p in t.partitions}

    def fetch(self, partitions: list[int]) -> dict[int, tuple[int, str]]:
        request = OffsetFetchRequest(group_id=GROUP, topics=[OffsetFetchRequest.OffsetFetchRequestTopic(
            name=TOPIC, partition_indexes=partitions)], require_stable=False)
        response = self.call(request, OffsetFetchResponse, self.v.fetch)
        assert response.error_code == 0
        return {p.partition_index: (p.committed_offset, p.metadata) for t in response.topics for p in t.partitions}


def _assignment(partitions: list[int]) -> bytearray:
    tp = ConsumerProtocolAssignment.TopicPartition(topic=TOPIC, partitions=partitions)
    return ConsumerProtocolAssignment(assigned_partitions=[tp], user_data=None).encode(version=0)


@pytest.fixture
def delayed_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A short initial rebalance delay so three concurrent first joins form one generation."""
    srv = ServerProcess(tmp_path / "data", "--group-min-session-timeout-ms", "1000",
                        "--group-initial-rebalance-delay-ms", "400").start()
    try:
        yield srv
    finally:
        srv.stop()


def _join_all(pool: ThreadPoolExecutor, members: list[KafkaPythonMember]) -> list[Any]:
    futures = []
    for m in members:
        futures.append(pool.submit(m.join))
        time.sleep(0.05)  # arrival order = list order, so the first one leads
    return [f.result(timeout=15) for f in futures]


def _assign(join_responses: list[Any], members: list[KafkaPythonMember]) -> dict[str, list[int]]:
    ids = sorted(m.member_id for m in members)
    share = 6 // len(ids)
    return {mid: list(range(i * share, (i + 1) * share)) for i, mid in enumerate(ids)}


@pytest.mark.parametrize("versions", [FLEXIBLE, OLDER], ids=["flexible", "older"])
def test_three_members_rebalance_when_one_stops_heartbeating(delayed_server: ServerProcess,
                                                            versions: Versions) -> None:
    a, b, c = members = [KafkaPythonMember(delayed_server.port, n, versions) for n in ("A", "B", "C")]
    try:
        with ThreadPoolExecutor(3) as pool:
            # KIP-394: the first join with an empty member id only hands out an id
            for m in members:
                first = m.join()
                for _ in range(50):  # the daemon listens while it loads its offsets partitions
                    if first.error_code != COORDINATOR_LOAD_IN_PROGRESS:
                        break
                    time.sleep(0.1)
                    first = m.join()
                assert first.error_code == MEMBER_ID_REQUIRED and first.member_id.startswith(m.name + "-")
            assert len({m.member_id for m in members}) == 3

            joined = _join_all(pool, members)
            assert [r.error_code for r in joined] == [0, 0, 0]
            assert {r.generation_id for r in joined} == {1}
            assert {r.leader for r in joined} == {a.member_id}
            assert {r.protocol_name for r in joined} == {"range"}
            leader_view = {mem.member_id: ConsumerProtocolSubscription.decode(bytes(mem.metadata), version=0).topics
                           for mem in joined[0].members}
            assert leader_view == {m.member_id: [TOPIC] for m in members}
            assert joined[1].members == [] and joined[2].members == []

            plan = _assign(joined, members)
            follower_syncs = [pool.submit(m.sync, {}) for m in (b, c)]
            time.sleep(0.2)
            assert not any(f.done() for f in follower_syncs), "followers must wait for the leader's SyncGroup"
            got = {a.member_id: a.sync(plan)}
            got.update({m.member_id: f.result(timeout=10) for m, f in zip((b, c), follower_syncs)})
            assert got == plan

            assert [m.heartbeat() for m in members] == [0, 0, 0]
            for m in members:
                mine = got[m.member_id]
                assert m.commit({p: 100 + p for p in mine}) == {p: 0 for p in mine}
            assert a.fetch(list(range(6))) == {p: (100 + p, f"by {owner.name}")
                                               for owner in members for p in got[owner.member_id]}

            # C goes silent; A and B keep heartbeating until the coordinator notices
            t0 = time.monotonic()
            answers: dict[str, int] = {}
            while len(answers) < 2 and time.monotonic() - t0 < 6:
                for m in (a, b):
                    if m.name not in answers and (err := m.heartbeat()) != 0:
                        answers[m.name] = err
                time.sleep(0.2)
            elapsed = time.monotonic() - t0
            assert answers == {"A": REBALANCE_IN_PROGRESS, "B": REBALANCE_IN_PROGRESS}
            assert SESSION_MS / 1000 - 0.3 <= elapsed <= SESSION_MS / 1000 + 2.5

            rejoined = _join_all(pool, [a, b])
            assert [r.error_code for r in rejoined] == [0, 0]
            assert {r.generation_id for r in rejoined} == {2}
            assert {mem.member_id for r in rejoined for mem in r.members} == {a.member_id, b.member_id}
            plan2 = _assign(rejoined, [a, b])
            follower = pool.submit(b.sync, {})
            assert a.sync(plan2) == plan2[a.member_id]
            assert follower.result(timeout=10) == plan2[b.member_id]
            assert [a.heartbeat(), b.heartbeat()] == [0, 0]

            assert c.heartbeat() == UNKNOWN_MEMBER_ID
            assert a.commit({0: 7}, generation=1) == {0: ILLEGAL_GENERATION}
            assert a.commit({0: 8}) == {0: 0}
            assert b.fetch([0]) == {0: (8, "by A")}
    finally:
        for m in members:
            m.close()
