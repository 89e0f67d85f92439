"""The hot path of steady ConsumerGroupHeartbeats (runtime/consumer_heartbeat_lease.py) on a real server.

Two daemons side by side, one with the hot path (the default) and one with ``--hot-path-enable false``, both
with a 1.5 s consumer session. Raw-TCP members (our codec, client-made member ids) join a topic's group,
settle, then send the steady heartbeat (their id and epoch, every other field null) over and over: from its
second sending on, the hot server answers those bytes from the lease.
- A steady member heartbeating only on the hot path keeps its session far past the session timeout.
- A topic grown while members heartbeat on the hot path still bumps the epoch and reassigns; so does a member
  joining (a write to the group).
- A member that left, or was fenced by its session, gets UNKNOWN_MEMBER_ID for its memoised bytes.
- The hot server's answers are byte-identical to the generic server's for the same requests (v0 and v1,
  steady and full), and /metrics counts every ConsumerGroupHeartbeat on both.
Every wait is bounded in time.
"""

from __future__ import annotations

import base64
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from server_process import ServerProcess, read_frame, twin_servers  # type: ignore[import-not-found]

from protocol import codec

pytestmark = pytest.mark.serial

CGH, CGD, CREATE_TOPICS, CREATE_PARTITIONS = 68, 69, 19, 37
SESSION_MS = 1500
FLAGS = ("--group-consumer-min-session-timeout-ms", "1000", "--group-consumer-session-timeout-ms", str(SESSION_MS),
         "--group-consumer-min-heartbeat-interval-ms", "500", "--group-consumer-heartbeat-interval-ms", "500",
         "--offsets-topic-num-partitions", "4")
UNKNOWN_MEMBER_ID = 25


def member_id(name: str) -> str:
    """A client-made member id (22 characters, as Java's Uuid.toString())."""
    return base64.urlsafe_b64encode(uuid.uuid5(uuid.NAMESPACE_OID, name).bytes).rstrip(b"=").decode()


class Client:
    """One raw connection; frames encoded and decoded with the generic codec."""

    def __init__(self, port: int, client_id: str = "hot-cg-test") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.client_id = client_id
        self.corr = 0
        self.heartbeats = 0  # ConsumerGroupHeartbeats sent

    def frame(self, api: int, version: int, body: dict[str, Any]) -> bytes:
        self.corr += 1
        self.heartbeats += api == CGH
        return codec.encode_request(api, version, self.corr, self.client_id, body)

    def raw(self, api: int, version: int, body: dict[str, Any]) -> bytes:
        """The response payload (correlation id checked)."""
        self.sock.sendall(self.frame(api, version, body))
        payload = read_frame(self.sock)
        assert payload is not None, "the server closed the connection"
        assert int.from_bytes(payload[:4], "big") == self.corr
        return payload

    def call(self, api: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        return codec.decode_response(api, version, self.raw(api, version, body))[1]

    def close(self) -> None:
        self.sock.close()


class Member:
    def __init__(self, client: Client, group: str, name: str) -> None:
        self.client, self.group, self.mid = client, group, member_id(name)
        self.epoch = 0
        self.owned: list[dict[str, Any]] = []

    def body(self, **fields: Any) -> dict[str, Any]:
        return {"group_id": self.group, "member_id": self.mid, "member_epoch": self.epoch, "instance_id": None,
                "rack_id": None, "rebalance_timeout_ms": -1, "subscribed_topic_names": None,
                "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": None, **fields}

    def heartbeat(self, version: int = 1, **fields: Any) -> dict[str, Any]:
        r = self.client.call(CGH, version, self.body(**fields))
        if r["error_code"] == 0:
            self.epoch = r["member_epoch"]
            if r["assignment"] is not None:
                self.owned = r["assignment"]["topic_partitions"]
        return r

    def join(self, topic: str) -> dict[str, Any]:
        r = self.heartbeat(rebalance_timeout_ms=10_000, subscribed_topic_names=[topic], topic_partitions=[])
        assert r["error_code"] == 0, r
        return r

    def report(self) -> dict[str, Any]:
        """A heartbeat with the partitions it owns (what a client sends after its assignment changed)."""
        return self.heartbeat(topic_partitions=self.owned)

    def partitions(self) -> set[int]:
        return {p for t in self.owned for p in t["partitions"]}


def create_topic(port: int, name: str, partitions: int) -> None:
    c = Client(port)
    r = c.call(CREATE_TOPICS, 5, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                              "assignments": [], "configs": []}],
                                  "timeout_ms": 10000, "validate_only": False})
    c.close()
    assert r["topics"][0]["error_code"] == 0, r


def grow_topic(port: int, name: str, count: int) -> None:
    c = Client(port)
    r = c.call(CREATE_PARTITIONS, 1, {"topics": [{"name": name, "count": count, "assignments": None}],
                                      "timeout_ms": 10000, "validate_only": False})
    c.close()
    assert r["results"][0]["error_code"] == 0, r


def settle(members: list[Member], partitions: int, timeout_s: float = 20.0) -> None:
    """Heartbeats reporting what each owns until every member is at one epoch and they cover the topic."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for m in members:
            r = m.report()
            assert r["error_code"] == 0, r
        held = sorted(p for m in members for p in m.partitions())
        if len({m.epoch for m in members}) == 1 and held == list(range(partitions)):
            return
        time.sleep(0.05)
    pytest.fail(f"not settled in {timeout_s} s: {[(m.epoch, m.partitions()) for m in members]}")


def describe_members(port: int, group: str) -> dict[str, int]:
    c = Client(port)
    r = c.call(CGD, 0, {"group_ids": [group], "include_authorized_operations": False})
    c.close()
    g = r["groups"][0]
    return {m["member_id"]: m["member_epoch"] for m in g["members"]} if g["error_code"] == 0 else {}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with twin_servers(tmp_path_factory.mktemp("hot-cg"), FLAGS, ("--hot-path-enable", "false")) as pair:
        yield pair


def test_steady_member_on_the_hot_path_keeps_its_session(servers: tuple[ServerProcess, ServerProcess]) -> None:
    hot, _ = servers
    create_topic(hot.port, "alive", 2)
    client = Client(hot.port)
    m = Member(client, "g-alive", "alive-0")
    m.join("alive")
    settle([m], 2)
    epoch = m.epoch
    until = time.monotonic() + 3 * SESSION_MS / 1000  # three session timeouts, one steady heartbeat per 200 ms
    beats = 0
    while time.monotonic() < until and beats < 100:
        r = m.heartbeat()
        assert (r["error_code"], r["member_epoch"], r["assignment"]) == (0, epoch, None), r
        beats += 1
        time.sleep(0.2)
    assert beats >= 10
    assert describe_members(hot.port, "g-alive") == {m.mid: epoch}
    client.close()


def test_topic_grown_under_hot_heartbeats_bumps_the_epoch_and_reassigns(
        servers: tuple[ServerProcess, ServerProcess]) -> None:
    hot, _ = servers
    create_topic(hot.port, "grown", 4)
    clients = [Client(hot.port), Client(hot.port)]
    members = [Member(c, "g-grown", f"grown-{i}") for i, c in enumerate(clients)]
    for m in members:
        m.join("grown")
    settle(members, 4)
    epoch = members[0].epoch
    for _ in range(3):  # steady: leased, then renewed
        for m in members:
            assert m.heartbeat()["member_epoch"] == epoch
    grow_topic(hot.port, "grown", 6)
    # the next steady heartbeats see the new partitions: a new epoch and the new partitions assigned
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for m in members:
            r = m.heartbeat()
            assert r["error_code"] == 0, r
        if all(m.epoch > epoch for m in members) and sorted(p for m in members for p in m.partitions()) == \
                list(range(6)):
            break
        time.sleep(0.05)
    assert all(m.epoch > epoch for m in members)
    settle(members, 6)
    for c in clients:
        c.close()


def test_a_member_joining_reaches_members_on_the_hot_path(servers: tuple[ServerProcess, ServerProcess]) -> None:
    """Another member's write to the group ends the others' leases: their next steady heartbeat gets the new
    epoch and gives up partitions for the newcomer."""
    hot, _ = servers
    create_topic(hot.port, "joined", 4)
    clients = [Client(hot.port) for _ in range(3)]
    a, b, newcomer = (Member(c, "g-joined", f"joined-{i}") for i, c in enumerate(clients))
    for m in (a, b):
        m.join("joined")
    settle([a, b], 4)
    epoch = a.epoch
    for _ in range(3):  # leased, then renewed
        for m in (a, b):
            assert m.heartbeat()["member_epoch"] == epoch
    newcomer.join("joined")
    # each moves on: to the new epoch, or (one that must revoke first) told its smaller assignment
    answers = [m.heartbeat() for m in (a, b)]
    assert all(r["error_code"] == 0 and (r["member_epoch"] > epoch or r["assignment"] is not None)
               for r in answers), answers
    settle([a, b, newcomer], 4)
    assert newcomer.partitions()
    for c in clients:
        c.close()


def test_left_or_fenced_members_memoised_bytes_are_refused(servers: tuple[ServerProcess, ServerProcess]) -> None:
    hot, _ = servers
    create_topic(hot.port, "gone", 2)
    clients = [Client(hot.port), Client(hot.port), Client(hot.port)]
    leaver, fenced, stays = (Member(c, "g-gone", f"gone-{i}") for i, c in enumerate(clients))
    for m in (leaver, fenced, stays):
        m.join("gone")
    settle([leaver, fenced, stays], 2)
    steady = {m.mid: m.body() for m in (leaver, fenced, stays)}
    for _ in range(3):  # leased, then renewed
        for m in (leaver, fenced, stays):
            assert clients[0].call(CGH, 1, steady[m.mid])["error_code"] == 0
    # the leaver leaves (epoch -1), from its own connection; its steady bytes are then refused
    assert leaver.heartbeat(member_epoch=-1)["error_code"] == 0
    assert clients[0].call(CGH, 1, steady[leaver.mid])["error_code"] == UNKNOWN_MEMBER_ID
    # the fenced one stops while the other heartbeats: its session expires, then its bytes are refused
    deadline = time.monotonic() + 10 * SESSION_MS / 1000
    while fenced.mid in describe_members(hot.port, "g-gone") and time.monotonic() < deadline:
        r = stays.heartbeat()
        assert r["error_code"] == 0, r
        if r["assignment"] is not None:
            stays.report()
        time.sleep(0.1)
    assert fenced.mid not in describe_members(hot.port, "g-gone")
    assert clients[0].call(CGH, 1, steady[fenced.mid])["error_code"] == UNKNOWN_MEMBER_ID
    for c in clients:
        c.close()


def test_hot_answers_are_byte_identical_to_the_generic_path(servers: tuple[ServerProcess, ServerProcess]) -> None:
    """The same story on both servers (same member ids, topic, requests): every answer byte for byte the same,
    steady ones (answered from the lease on the hot server after the first) and full ones alike."""
    answers: list[list[bytes]] = []
    for srv in servers:
        before = srv.metric('groupcoord_requests_total{api="ConsumerGroupHeartbeat"}')
        create_topic(srv.port, "same", 3)
        client = Client(srv.port, "same-client")
        m = Member(client, "g-same", "same-0")
        m.join("same")
        settle([m], 3)
        sent = 0
        got: list[bytes] = []
        full = m.body(rebalance_timeout_ms=10_000, subscribed_topic_names=["same"], topic_partitions=m.owned)
        for body, version in [(m.body(), 1)] * 4 + [(m.body(), 0)] * 3 + [(full, 1)] * 3 + [(m.body(), 1)] * 2:
            client.corr = 100 + sent  # the same correlation ids on both servers
            got.append(client.raw(CGH, version, body))
            sent += 1
        # pipelined: one send of several steady frames, answered in order
        data = b"".join(client.frame(CGH, 1, m.body()) for _ in range(5))
        client.sock.sendall(data)
        for _ in range(5):
            payload = read_frame(client.sock)
            assert payload is not None
            got.append(payload)
        sent += 5
        answers.append(got)
        # every ConsumerGroupHeartbeat counted, hot answers too
        assert srv.metric('groupcoord_requests_total{api="ConsumerGroupHeartbeat"}') - before == client.heartbeats
        client.close()
    hot, cold = answers
    assert len(hot) == sent and hot == cold
    decoded = [codec.decode_response(CGH, 1, p)[1] for p in hot[:4]]
    assert all(r["error_code"] == 0 and r["assignment"] is None for r in decoded)
