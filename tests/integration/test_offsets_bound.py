"""offsets.max.committed on the real daemon, with kafka-python and confluent-kafka as users run them.

Rules checked (coordinator/core/offsets.py ``_Room``; coordinator/runtime/groups.py logs and metrics):
- The server is filled to its bound by pipelined raw OffsetCommits (20,000 simple groups x 10 partitions).
- Past it a new group's commit fails with POLICY_VIOLATION in both clients (kafka-python raises
  PolicyViolationError, confluent-kafka a KafkaException with code POLICY_VIOLATION); existing groups
  commit; after DeleteGroups frees room, a new group commits again.
- 20,000 more new groups trying to commit change nothing: the RSS grows by far less than holding them
  would take, and stays within a generous margin of the bound's budget (128 B an offset).
- /metrics shows held, bound and refusals; the log has ONE warning line for the burst (rate-limited).
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka import errors as kerr
from kafka.structs import OffsetAndMetadata
from server_process import ServerProcess, read_frame

from protocol import codec

BOUND = 200_000
GROUPS = BOUND // 10
TOPIC = "bound-topic"


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def commit_frames(prefix: str, count: int) -> list[bytes]:
    return [codec.encode_request(8, 8, i, "bound", {
        "group_id": f"{prefix}-{i}", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": p, "committed_offset": 100 + p,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}
                                                  for p in range(10)]}]}) for i in range(count)]


def pipelined(port: int, frames: list[bytes], window: int = 200) -> list[int]:
    """Send every frame (``window`` at a time) and return each response's partition error codes, flattened."""
    codes: list[int] = []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        for start in range(0, len(frames), window):
            chunk = frames[start:start + window]
            s.sendall(b"".join(chunk))
            for _ in chunk:
                payload = read_frame(s)
                assert payload is not None, "server closed the connection"
                _, body = codec.decode_response(8, 8, payload)
                codes.extend(p["error_code"] for t in body["topics"] for p in t["partitions"])
    return codes


@pytest.fixture
def server(tmp_path: Path):
    srv = ServerProcess(tmp_path / "data", "--offsets-max-committed", str(BOUND)).start()
    srv.wait_loaded()
    try:
        yield srv
    finally:
        srv.stop()


def test_new_groups_past_the_bound_are_refused_clearly_and_memory_stays_bounded(server: ServerProcess) -> None:
    pid = server.proc.pid
    warm = commit_frames("warm", 50)  # the first requests' one-off allocations (codecs, caches)
    assert set(pipelined(server.port, warm)) == {0}
    before = rss(pid)
    assert set(pipelined(server.port, commit_frames("fill", GROUPS - 50))) == {0}
    filled = rss(pid)
    assert server.metric("groupcoord_offsets_committed") == BOUND
    assert server.metric("groupcoord_offsets_committed_max") == BOUND

    refused = pipelined(server.port, commit_frames("over", GROUPS))
    assert set(refused) == {struct.unpack(">h", b"\x00\x2c")[0]}  # POLICY_VIOLATION (44), every partition
    after = rss(pid)
    budget = BOUND * 128
    assert after - filled < budget // 4, (filled, after)  # holding them would take about another budget
    assert filled - before < 2 * budget, (before, filled)
    assert server.metric("groupcoord_offsets_refused_total") == GROUPS * 10
    warnings = [line for line in server.log().splitlines() if "offsets.max.committed" in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0], warnings

    bootstrap = server.bootstrap
    tp = TopicPartition(TOPIC, 0)
    kp = KafkaConsumer(bootstrap_servers=bootstrap, group_id="kp-new", enable_auto_commit=False)
    try:
        kp.assign([tp])
        with pytest.raises(kerr.PolicyViolationError):
            kp.commit({tp: OffsetAndMetadata(5, "", -1)})
    finally:
        kp.close()
    ck = Consumer({"bootstrap.servers": bootstrap, "group.id": "ck-new", "enable.auto.commit": False})
    try:
        with pytest.raises(KafkaException) as raised:
            ck.commit(offsets=[CkTopicPartition(TOPIC, 0, 5)], asynchronous=False)
        assert raised.value.args[0].code() == KafkaError.POLICY_VIOLATION
    finally:
        ck.close()
    # existing groups commit (replacing an offset or adding a partition), with either client
    for client_group, offset in (("fill-7", 500), ("fill-8", 600)):
        existing = KafkaConsumer(bootstrap_servers=bootstrap, group_id=client_group, enable_auto_commit=False)
        try:
            existing.assign([tp])
            existing.commit({tp: OffsetAndMetadata(offset, "", -1)})
            assert existing.committed(tp) == offset
        finally:
            existing.close()
    ck_existing = Consumer({"bootstrap.servers": bootstrap, "group.id": "fill-9", "enable.auto.commit": False})
    try:
        ck_existing.commit(offsets=[CkTopicPartition(TOPIC, 1, 901)], asynchronous=False)
        assert ck_existing.committed([CkTopicPartition(TOPIC, 1)], timeout=10)[0].offset == 901
    finally:
        ck_existing.close()

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        results = dict(admin.delete_groups(["fill-1", "fill-2"]))
        assert set(results) == {"fill-1", "fill-2"} and set(results.values()) == {"OK"}, results
    finally:
        admin.close()
    assert server.metric("groupcoord_offsets_committed") == BOUND - 20
    kp = KafkaConsumer(bootstrap_servers=bootstrap, group_id="kp-new", enable_auto_commit=False)
    try:
        kp.assign([tp])
        kp.commit({tp: OffsetAndMetadata(5, "", -1)})
        assert kp.committed(tp) == 5
    finally:
        kp.close()
