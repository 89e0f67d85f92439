"""Issue #36's acceptance tests for KIP-848 consumer groups, with unmodified confluent-kafka consumers
(``group.protocol=consumer``) against a real ``groupcoord serve`` over TCP.

1. A static member's restart keeps its partitions: two static members split 4 partitions; one closes without
   leaving (librdkafka sends member epoch -2 on close for a static member, so the server keeps its partitions
   reserved) and starts again with the same ``group.instance.id`` well within the session timeout. It gets
   exactly its old partitions back, and the other member's rebalance callbacks never fire after the first
   assignment (its partitions never moved). The server's ConsumerGroupDescribe agrees at the end.
2. 1,000 commits during 20 membership changes fail 0 times: one member commits synchronously in a loop (its
   current assignment, increasing offsets; poll(0) between commits so it reconciles) while other members
   join (each until it holds partitions) and leave (close: epoch -1) 20 times in all. Every commit failure
   (an exception or a partition's error) is counted: there must be none (KIP-1251's relaxed epoch check: a
   commit carrying an epoch the member just left is not fenced). The test checks that the changes really
   happened under the loop: it ran from before the first change to after the last, commits went out while each
   joiner was taking partitions from the committer, and the group epoch rose by at least 20. Against a server
   with Kafka 4.0's strict check (epoch == the member's epoch) this fails in about half the runs: a commit sent
   while the heartbeat response that moves the member to the next epoch is on its way is STALE_MEMBER_EPOCH.

Rules: one server per test (free port, its own data dir), stopped by its PID; heartbeat interval lowered to
500 ms so that reconciliation is quick; every wait bounded by a deadline; no assertion on elapsed time.
Marked ``serial``: the members' heartbeats and the churn's pace are clocks a busy CPU would stretch.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from server_process import ServerProcess, read_frame  # type: ignore[import-not-found]

from protocol.codec import decode_response, encode_request

pytestmark = pytest.mark.serial

PARTITIONS = 4
HEARTBEAT_MS = 500
CHANGES = 20
COMMITS = 1000
WAIT_S = 30.0


def _server(tmp_path: Path) -> ServerProcess:
    return ServerProcess(tmp_path / "data", "--group-consumer-min-heartbeat-interval-ms", str(HEARTBEAT_MS),
                         "--group-consumer-heartbeat-interval-ms", str(HEARTBEAT_MS)).start().wait_loaded()


def _create_topic(srv: ServerProcess, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)


def _conf(srv: ServerProcess, group: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": srv.bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra}


def _partitions(consumer: Any) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def _poll_until(consumers: list[Any], done: Any, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.05)
        if done():
            return
    pytest.fail(f"timed out waiting for {what}: " + ", ".join(str(sorted(_partitions(c))) for c in consumers))


def _describe(port: int, group: str) -> dict[str, Any]:
    """ConsumerGroupDescribe v1 of one group (raw frame)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(encode_request(69, 1, 3, "acceptance", {"group_ids": [group],
                                                             "include_authorized_operations": False}))
        frame = read_frame(sock)
    assert frame is not None
    _, answer = decode_response(69, 1, frame)
    (g,) = answer["groups"]
    assert g["error_code"] == 0, g
    return g


def _members_partitions(described: dict[str, Any]) -> dict[str, set[int]]:
    """instance id (or member id) -> the partitions the server says it is assigned."""
    out = {}
    for m in described["members"]:
        parts = {p for t in m["assignment"]["topic_partitions"] for p in t["partitions"]}
        out[m["instance_id"] or m["member_id"]] = parts
    return out


def test_a_static_members_restart_keeps_its_partitions(tmp_path: Path) -> None:
    from confluent_kafka import Consumer

    topic, group = "static848", "static848-group"
    srv = _server(tmp_path)
    consumers: list[Any] = []
    try:
        _create_topic(srv, topic, PARTITIONS)
        events: list[tuple[str, list[int]]] = []  # the other member's rebalance callbacks

        def on_assign(c: Any, tps: list[Any]) -> None:
            events.append(("assign", sorted(tp.partition for tp in tps)))

        def on_revoke(c: Any, tps: list[Any]) -> None:
            events.append(("revoke", sorted(tp.partition for tp in tps)))

        def on_lost(c: Any, tps: list[Any]) -> None:
            events.append(("lost", sorted(tp.partition for tp in tps)))

        a = Consumer(_conf(srv, group, **{"group.instance.id": "static-a"}))
        consumers.append(a)
        a.subscribe([topic])
        _poll_until([a], lambda: len(_partitions(a)) == PARTITIONS, "member a to hold every partition")
        other = Consumer(_conf(srv, group, **{"group.instance.id": "static-b"}))
        consumers.append(other)
        other.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        _poll_until([a, other], lambda: len(_partitions(a)) == 2 and len(_partitions(other)) == 2,
                    "a 2/2 split")
        before_a, before_other = _partitions(a), _partitions(other)
        settled = list(events)
        epoch_before = _describe(srv.port, group)["group_epoch"]

        a.close()  # a static member: epoch -2, its partitions stay reserved for its instance id
        consumers.remove(a)
        for _ in range(10):  # the other member keeps heartbeating and polling while a is away
            other.poll(0.1)
        away_described = _describe(srv.port, group)
        away = _members_partitions(away_described)
        epochs = {m["instance_id"]: m["member_epoch"] for m in away_described["members"]}
        assert epochs["static-a"] == -2, epochs  # it left as a static member does, not for good
        assert away.get("static-a") == before_a, away  # still reserved, not given to the other
        assert away.get("static-b") == before_other, away

        restarted = Consumer(_conf(srv, group, **{"group.instance.id": "static-a"}))
        consumers.append(restarted)
        restarted.subscribe([topic])
        _poll_until([restarted, other], lambda: bool(_partitions(restarted)), "the restarted member's partitions")
        for _ in range(2 * HEARTBEAT_MS // 100 + 5):  # a few heartbeats more: nothing else may move
            restarted.poll(0.05)
            other.poll(0.05)
        assert _partitions(restarted) == before_a
        assert _partitions(other) == before_other
        assert events == settled, f"the other member's partitions moved: {events[len(settled):]}"
        described = _describe(srv.port, group)
        assert _members_partitions(described) == {"static-a": before_a, "static-b": before_other}
        assert len(described["members"]) == 2
        assert described["group_epoch"] >= epoch_before
    finally:
        for c in consumers:
            c.close()
        srv.stop()


def test_commits_during_membership_changes_never_fail(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    topic, group = "commits848", "commits848-group"
    srv = _server(tmp_path)
    committer = None
    try:
        _create_topic(srv, topic, 8)
        committer = Consumer(_conf(srv, group))
        committer.subscribe([topic])
        _poll_until([committer], lambda: len(_partitions(committer)) == 8, "the committer to hold every partition")
        epoch_before = _describe(srv.port, group)["group_epoch"]

        windows: list[tuple[float, float]] = []  # (start, end) of each membership change
        churn_error: list[BaseException] = []
        done, committing = threading.Event(), threading.Event()

        def churn() -> None:
            try:
                if not committing.wait(WAIT_S):
                    raise AssertionError("the committer never committed")
                for i in range(CHANGES // 2):
                    start = time.monotonic()
                    joiner = Consumer(_conf(srv, group, **{"client.id": f"joiner-{i}"}))
                    joiner.subscribe([topic])
                    deadline = time.monotonic() + WAIT_S
                    while not joiner.assignment() and time.monotonic() < deadline:
                        joiner.poll(0.05)
                    got = bool(joiner.assignment())
                    windows.append((start, time.monotonic()))
                    if not got:
                        joiner.close()
                        raise AssertionError(f"joiner {i} never got partitions")
                    start = time.monotonic()
                    joiner.close()  # leaves: epoch -1
                    windows.append((start, time.monotonic()))
            except BaseException as e:  # noqa: BLE001 (reported by the test thread)
                churn_error.append(e)
            finally:
                done.set()

        failures: list[str] = []
        commit_times: list[float] = []
        offset = 0
        thread = threading.Thread(target=churn, daemon=True)
        thread.start()
        deadline = time.monotonic() + 4 * WAIT_S
        while (not done.is_set() or len(commit_times) < COMMITS) and time.monotonic() < deadline:
            committer.poll(0)  # serves its rebalance callbacks: it revokes and takes partitions here
            owned = committer.assignment()
            if not owned:
                continue
            offset += 1
            try:
                result = committer.commit(offsets=[TopicPartition(topic, tp.partition, offset) for tp in owned],
                                          asynchronous=False)
                bad = [f"{tp.partition}: {tp.error}" for tp in result or [] if tp.error is not None]
                if bad:
                    failures.append(f"commit {offset}: {bad}")
            except KafkaException as e:
                failures.append(f"commit {offset}: {e}")
            commit_times.append(time.monotonic())
            committing.set()
        thread.join(WAIT_S)
        assert not churn_error, churn_error
        assert done.is_set() and not thread.is_alive()
        assert len(windows) == CHANGES
        assert len(commit_times) >= COMMITS, f"only {len(commit_times)} commits"
        assert failures == [], f"{len(failures)} of {len(commit_times)} commits failed: {failures[:10]}"
        # the commits really ran through the changes: the loop began before the first and ended after the last,
        # each join (the committer revokes partitions for it) saw commits, and every change bumped the group epoch
        assert commit_times[0] < windows[0][0] and commit_times[-1] > windows[-1][1]
        quiet = [i for i, (s, e) in enumerate(windows[::2]) if not any(s <= t <= e for t in commit_times)]
        assert quiet == [], f"joins without a commit during them: {quiet}"
        described = _describe(srv.port, group)
        assert described["group_epoch"] >= epoch_before + CHANGES, (epoch_before, described["group_epoch"])
        assert len(described["members"]) == 1
    finally:
        if committer is not None:
            committer.close()
        srv.stop()
