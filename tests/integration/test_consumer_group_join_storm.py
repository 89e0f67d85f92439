"""A KIP-848 join storm on the real server over TCP (runtime/consumer_batch.py): many members of one group send their
first ConsumerGroupHeartbeat at once, pipelined on one connection, so that they queue behind the group's first write
and run as batches. Every member is answered, and by heartbeating as a client does (again at once with what it owns
while it has something to reconcile) the group becomes Stable at one epoch with every partition owned exactly once.
With a failed batched write (tests/integration/faults/sitecustomize.py, flag "consumer_group_batch_write") every
operation of the batch is answered the mapped error and the group described after is exactly the one described
before. The metrics show it as one Stable consumer-protocol group (groupcoord_consumer_groups), not as a classic
group, with its target assignments timed (groupcoord_consumer_group_assignment_seconds). Every loop is bounded in
count."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from server_process import ServerProcess, read_frame  # type: ignore[import-not-found]

from protocol import codec

FAULTS = Path(__file__).parent / "faults"
GROUP, TOPIC = "storm848", "storm848-topic"
MEMBERS, PARTITIONS = 40, 80


def _exchange(sock: socket.socket, api: int, version: int, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every request pipelined at once, then every answer, in order."""
    sock.sendall(b"".join(codec.encode_request(api, version, i, "storm", b) for i, b in enumerate(bodies)))
    out = []
    for i in range(len(bodies)):
        payload = read_frame(sock)
        assert payload is not None, "the server closed the connection"
        correlation, body = codec.decode_response(api, version, payload)
        assert correlation == i
        out.append(body)
    return out


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def _create_topic(sock: socket.socket) -> None:
    body = {"topics": [{"name": TOPIC, "num_partitions": PARTITIONS, "replication_factor": 1, "assignments": [],
                        "configs": []}], "timeout_ms": 30000, "validate_only": False}
    (answer,) = _exchange(sock, 19, 5, [body])
    assert answer["topics"][0]["error_code"] == 0, answer


def _join(member_id: str) -> dict[str, Any]:
    return {"group_id": GROUP, "member_id": member_id, "member_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": 30000, "subscribed_topic_names": [TOPIC], "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": []}


def _heartbeat(member_id: str, epoch: int, owned: dict[Any, set[int]]) -> dict[str, Any]:
    return {"group_id": GROUP, "member_id": member_id, "member_epoch": epoch, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": -1, "subscribed_topic_names": None, "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": [{"topic_id": t, "partitions": sorted(ps)} for t, ps in owned.items()]}


def _describe(sock: socket.socket) -> dict[str, Any]:
    (answer,) = _exchange(sock, 69, 1, [{"group_ids": [GROUP], "include_authorized_operations": False}])
    return answer["groups"][0]


class _Member:
    def __init__(self, member_id: str) -> None:
        self.member_id, self.epoch, self.owned = member_id, 0, {}

    def take(self, answer: dict[str, Any]) -> None:
        assert answer["error_code"] == 0, answer
        self.epoch = answer["member_epoch"]
        if answer["assignment"] is not None:
            self.owned = {tp["topic_id"]: set(tp["partitions"]) for tp in answer["assignment"]["topic_partitions"]}


def _storm(port: int) -> list[_Member]:
    """The members' first heartbeats at once, then rounds of every member heartbeating (pipelined) until the
    group is Stable (at most 30 rounds)."""
    members = [_Member(f"storm-member-{i:03d}") for i in range(MEMBERS)]
    with _connect(port) as sock:
        for m, answer in zip(members, _exchange(sock, 68, 1, [_join(m.member_id) for m in members]), strict=True):
            m.take(answer)
        for _ in range(30):
            group = _describe(sock)
            if group["group_state"] == "Stable":
                break
            bodies = [_heartbeat(m.member_id, m.epoch, m.owned) for m in members]
            for m, answer in zip(members, _exchange(sock, 68, 1, bodies), strict=True):
                m.take(answer)
        return members


def test_a_join_storm_ends_stable_with_every_partition_owned_once(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data").start().wait_loaded()
    try:
        with _connect(srv.port) as sock:
            _create_topic(sock)
        members = _storm(srv.port)
        with _connect(srv.port) as sock:
            group = _describe(sock)
        assert group["error_code"] == 0 and group["group_state"] == "Stable", group
        epoch = group["group_epoch"]
        assert epoch == group["assignment_epoch"] and epoch >= 1, group
        described = {m["member_id"]: m for m in group["members"]}
        assert set(described) == {m.member_id for m in members}
        owned: list[tuple[Any, int]] = []
        for m in members:
            assert m.epoch == epoch, (m.member_id, m.epoch, epoch)
            d = described[m.member_id]
            assert d["member_epoch"] == epoch
            mine = {(tp["topic_id"], p) for tp in d["assignment"]["topic_partitions"] for p in tp["partitions"]}
            assert mine == {(t, p) for t, ps in m.owned.items() for p in ps}  # what it was told is what it owns
            assert len(mine) == PARTITIONS // MEMBERS  # the uniform assignor balances them
            owned += mine
        assert len(owned) == len(set(owned)) == PARTITIONS  # every partition owned exactly once
        # the metrics count it as a consumer-protocol group (not as a classic one) and time its assignments
        assert srv.metric('groupcoord_consumer_groups{state="Stable"}') == 1.0
        assert srv.metric('groupcoord_consumer_groups{state="Assigning"}') == 0.0
        assert sum(srv.metric(f'groupcoord_groups{{state="{s}"}}') for s in ("Empty", "Stable", "Dead",
                   "PreparingRebalance", "CompletingRebalance")) == 0.0
        assert srv.metric("groupcoord_consumer_group_assignment_seconds_count") >= 1.0
        assert "Traceback" not in srv.log(), srv.log()[-3000:]
    finally:
        srv.stop()


def test_a_failed_batched_write_answers_every_operation_and_changes_nothing(tmp_path: Path) -> None:
    flags = tmp_path / "flags"
    flags.mkdir()
    srv = ServerProcess(tmp_path / "data", env={"PYTHONPATH": str(FAULTS), "TEST_FAULT_DIR": str(flags)}
                        ).start().wait_loaded()
    try:
        with _connect(srv.port) as sock:
            _create_topic(sock)
        members = _storm(srv.port)  # a stable group of MEMBERS
        with _connect(srv.port) as sock:
            before = _describe(sock)
            assert before["group_state"] == "Stable", before
            (flags / "consumer_group_batch_write").touch()
            # a stable member's heartbeat with a new rack id is a write alone (MemberMetadata, no epoch bump); the
            # joins queue behind it and run as one batch, whose write fails
            first = members[0]
            rack = {**_heartbeat(first.member_id, first.epoch, first.owned), "rack_id": "rack-1"}
            answers = _exchange(sock, 68, 1, [rack] + [_join(f"late-member-{i:02d}") for i in range(8)])
            assert not (flags / "consumer_group_batch_write").exists()  # the fault fired
            assert answers[0]["error_code"] == 0, answers[0]
            assert all(a["error_code"] == 16 for a in answers[1:]), answers[1:]  # NOT_COORDINATOR, each of them
            after = _describe(sock)
        # the group as before, but for the lone write's rack id: nothing of the batch is left
        expected = {**before, "members": [{**m, "rack_id": "rack-1"} if m["member_id"] == first.member_id else m
                                          for m in before["members"]]}
        assert after == expected, (before, after)
        # and the batch's members can join afterwards
        members_after = _storm(srv.port)
        assert all(m.epoch > 0 for m in members_after)
        assert "Traceback" not in srv.log(), srv.log()[-3000:]
    finally:
        srv.stop()
