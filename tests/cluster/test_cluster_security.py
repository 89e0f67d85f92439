"""Cluster mode with security on (real ZooKeeper, three real `groupcoord serve` processes, each with a loopback
PLAINTEXT listener for the test's plain requests and a SASL_SSL listener that is the inter-broker listener):
followers fetch from their leaders over TLS, logged in with SCRAM-SHA-512 as the super user ``admin``;
replication and coordinator failover work with authentication and the authorizer on; Metadata and
FindCoordinator answer the endpoints of the listener a request came in on (LISTENER_NOT_FOUND where a leader
has none); a node whose inter-broker password is wrong says so in one clear line and keeps retrying."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from cluster_nodes import SESSION_TIMEOUT_MS, metadata, stop_nodes, wait_for
from cluster_nodes import logs as node_logs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))

from security_support import USERS, Pki, make_pki, write_config  # noqa: E402
from server_process import REPO, ServerProcess  # noqa: E402

from client import AdminClient, Consumer, NewTopic, Producer  # noqa: E402
from client.connection import BrokerConnection  # noqa: E402
from client.security import SecurityConfig  # noqa: E402

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="{}";'
FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}


def node_config(root: Path, pki: Pki, zk_connect: str, node_id: int, password: str = USERS["admin"],
                extra: dict[str, Any] | None = None, listeners: tuple[str, ...] = ("PLAINTEXT", "SASL_SSL")) -> Path:
    values = {
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": JAAS.format(password),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",  # ANONYMOUS: the loopback PLAINTEXT listener, as operators do
        "zookeeper.connect": zk_connect, "node.id": node_id, "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
        "shutdown.grace.ms": 1000, "offsets.topic.num.partitions": 3, **(extra or {}),
    }
    return write_config(root / f"node{node_id}.toml", pki, values, listeners)


def zk_users(zk_connect: str, users: dict[str, str]) -> None:
    """``groupcoord users add NAME --password P --zookeeper ...``: the cluster's users, before its nodes start."""
    for name, password in users.items():
        r = subprocess.run([sys.executable, "-m", "coordinator.cli", "users", "add", name, "--password", password,
                            "--iterations", "4096", "--zookeeper", zk_connect], cwd=REPO, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr


def start(root: Path, pki: Pki, zk_connect: str, node_id: int, **kw: Any) -> ServerProcess:
    return ServerProcess(root / f"node{node_id}", "--config", str(node_config(root, pki, zk_connect, node_id, **kw)),
                         listeners=True).start()


def admin_security(pki: Pki) -> SecurityConfig:
    return SecurityConfig("SASL_SSL", "SCRAM-SHA-512", "admin", USERS["admin"], ssl_cafile=str(pki.ca))


def sasl_ssl(node: ServerProcess) -> str:
    return f"127.0.0.1:{node.ports['SASL_SSL']}"


def secured_metadata(node: ServerProcess, pki: Pki, topics: list[str] | None = None) -> dict[str, Any]:
    conn = BrokerConnection("127.0.0.1", node.ports["SASL_SSL"], security=admin_security(pki),
                            request_timeout_ms=10000, connect_timeout_ms=5000).connect()
    try:
        return conn.send(3, lambda v: {"topics": None if topics is None else [{"name": t} for t in topics],
                                       "allow_auto_topic_creation": False})[1]
    finally:
        conn.close()


def failed_logins(node: ServerProcess) -> float:
    """groupcoord_authentications_total{listener="SASL_SSL",result="failed"} from the node's /metrics."""
    total = 0.0
    for line in node.scrape().splitlines():
        if line.startswith("groupcoord_authentications_total{") and 'result="failed"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.fixture
def pki(tmp_path: Path, zk_connect: str) -> Pki:
    zk_users(zk_connect, {"admin": USERS["admin"], "alice": USERS["alice"]})
    return make_pki(tmp_path / "pki")


def test_replication_and_failover_over_an_authenticated_inter_broker_listener(tmp_path: Path, zk_connect: str,
                                                                               pki: Pki) -> None:
    nodes: dict[int, ServerProcess] = {}
    topic, group = f"sec-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    try:
        for i in (1, 2, 3):
            nodes[i] = start(tmp_path, pki, zk_connect, i)
        for n in nodes.values():
            wait_for("three brokers", lambda n=n: len(metadata(n)["brokers"]) == 3,
                     describe=lambda: node_logs(nodes))
        # each listener's clients are told that listener's endpoints
        plain = {b["node_id"]: b["port"] for b in metadata(nodes[1])["brokers"]}
        assert plain == {i: n.port for i, n in nodes.items()}
        secured = {b["node_id"]: b["port"] for b in secured_metadata(nodes[2], pki)["brokers"]}
        assert secured == {i: n.ports["SASL_SSL"] for i, n in nodes.items()}

        sec = admin_security(pki)
        with AdminClient(sasl_ssl(nodes[1]), security=sec) as admin:
            assert [r.error_code for r in admin.create_topics([NewTopic(topic, 3, 3)])] == [0]
        with Producer(sasl_ssl(nodes[1]), security=sec, acks="all") as producer:
            futures = [producer.send(topic, b"v%d" % i, key=b"k%d" % i) for i in range(30)]
            producer.flush(30)
            assert all(f.get(10).offset >= 0 for f in futures)

        # every follower fetched over SASL_SSL: the ISR of every partition is still all three replicas
        def full_isr() -> bool:
            parts = [p for t in metadata(nodes[1], [topic])["topics"] for p in t["partitions"]]
            return len(parts) == 3 and all(sorted(p["isr_nodes"]) == [1, 2, 3] for p in parts)
        wait_for("a full ISR", full_isr, timeout=20, describe=lambda: node_logs(nodes))

        consumer = Consumer(bootstrap_servers=sasl_ssl(nodes[1]), group_id=group, auto_offset_reset="earliest",
                            enable_auto_commit=False, security=sec, **FAST)
        try:
            consumer.subscribe([topic])
            got: list[Any] = []
            deadline = time.monotonic() + 30
            while len(got) < 30 and time.monotonic() < deadline:
                for records in consumer.poll(200).values():
                    got.extend(records)
            assert len(got) == 30
            consumer.commit()
        finally:
            consumer.close()

        # the group's coordinator and partition 0's leader go (SIGKILL): the others lead, with what was replicated
        with AdminClient(sasl_ssl(nodes[2]), security=sec) as admin:
            committed = admin.list_group_offsets(group)
        assert sum(o.offset for o in committed.values()) == 30
        coordinator = _coordinator(nodes[1], group)
        nodes.pop(coordinator).kill()
        survivor = next(iter(nodes.values()))

        def committed_after_failover() -> int | None:
            if _coordinator(survivor, group) == coordinator:
                return None
            with AdminClient(sasl_ssl(survivor), security=sec) as admin:
                return sum(o.offset for o in admin.list_group_offsets(group).values()) or None
        assert wait_for("the group's offsets on the new coordinator", committed_after_failover, timeout=30,
                        describe=lambda: node_logs(nodes)) == 30
        consumer = Consumer(bootstrap_servers=sasl_ssl(survivor), group_id=f"{group}-2",
                            auto_offset_reset="earliest", enable_auto_commit=False, security=sec, **FAST)
        try:
            consumer.subscribe([topic])
            values: set[bytes] = set()
            deadline = time.monotonic() + 30
            while len(values) < 30 and time.monotonic() < deadline:
                for records in consumer.poll(200).values():
                    values.update(r.value for r in records)
            assert values == {b"v%d" % i for i in range(30)}
        finally:
            consumer.close()
        text = node_logs(nodes)
        assert "cannot log in to node" not in text and "Traceback" not in text
    finally:
        stop_nodes(nodes)


def _coordinator(node: ServerProcess, group: str) -> int:
    conn = BrokerConnection("127.0.0.1", node.port, request_timeout_ms=10000, connect_timeout_ms=5000).connect()
    try:
        resp = conn.send(10, lambda v: {"key": group, "key_type": 0, "coordinator_keys": [group]})[1]
    finally:
        conn.close()
    entry = resp["coordinators"][0] if resp.get("coordinators") else resp
    return entry["node_id"] if entry["error_code"] == 0 else -1


def test_metadata_and_find_coordinator_answer_per_listener(tmp_path: Path, zk_connect: str, pki: Pki) -> None:
    """Node 1 alone has an EXTRA listener: a client of it sees node 1 only; partitions other nodes lead answer
    LISTENER_NOT_FOUND with no leader (Metadata v6+), and a group coordinated elsewhere COORDINATOR_NOT_AVAILABLE."""
    nodes: dict[int, ServerProcess] = {}
    try:
        extra = {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,EXTRA:PLAINTEXT"}
        nodes[1] = start(tmp_path, pki, zk_connect, 1, extra=extra, listeners=("PLAINTEXT", "SASL_SSL", "EXTRA"))
        for i in (2, 3):
            nodes[i] = start(tmp_path, pki, zk_connect, i)
        for n in nodes.values():
            wait_for("three brokers", lambda n=n: len(metadata(n)["brokers"]) == 3,
                     describe=lambda: node_logs(nodes))
        # the offsets topic: created on first use (a FindCoordinator), then its leaders spread over the nodes
        _coordinator(nodes[2], "first-use")
        for n in nodes.values():  # each node's own view (node 1, asked below, may learn it after node 2)
            wait_for("the offsets topic led everywhere", lambda n=n: (lambda parts: len(parts) == 3 and {
                p["leader_id"] for p in parts} == {1, 2, 3})(
                [p for t in metadata(n, ["__consumer_offsets"])["topics"] for p in t["partitions"]]),
                timeout=30, describe=lambda: node_logs(nodes))
        conn = BrokerConnection("127.0.0.1", nodes[1].ports["EXTRA"], request_timeout_ms=10000).connect()
        try:
            md = conn.send(3, lambda v: {"topics": [{"name": "__consumer_offsets"}],
                                         "allow_auto_topic_creation": False})[1]
            assert [(b["node_id"], b["port"]) for b in md["brokers"]] == [(1, nodes[1].ports["EXTRA"])]
            parts = md["topics"][0]["partitions"]
            assert {p["error_code"] for p in parts if p["leader_id"] == 1} == {0}
            others = [p for p in parts if p["leader_id"] != 1]
            assert others and all(p["error_code"] == 72 and p["leader_id"] == -1 for p in others)  # LISTENER_NOT_FOUND
            found = {}
            for g in (f"g{i}" for i in range(40)):
                r = conn.send(10, lambda v, g=g: {"key": g, "key_type": 0, "coordinator_keys": [g]})[1]
                e = r["coordinators"][0] if r.get("coordinators") else r
                found.setdefault(e["error_code"], set()).add((e["node_id"], e["port"]))
            assert found[0] == {(1, nodes[1].ports["EXTRA"])}
            assert found[15] == {(-1, -1)}  # COORDINATOR_NOT_AVAILABLE: its node has no EXTRA listener
        finally:
            conn.close()
    finally:
        stop_nodes(nodes)


def test_a_node_that_cannot_log_in_to_its_peers_says_so_and_retries(tmp_path: Path, zk_connect: str,
                                                                     pki: Pki) -> None:
    nodes: dict[int, ServerProcess] = {}
    topic = f"sec-{uuid.uuid4().hex[:6]}"
    try:
        nodes[1] = start(tmp_path, pki, zk_connect, 1)
        nodes[2] = start(tmp_path, pki, zk_connect, 2, password="not-the-password")
        for n in nodes.values():
            wait_for("two brokers", lambda n=n: len(metadata(n)["brokers"]) == 2, describe=lambda: node_logs(nodes))
        with AdminClient(sasl_ssl(nodes[1]), security=admin_security(pki)) as admin:
            assert [r.error_code for r in admin.create_topics([NewTopic(topic, 2, 2)])] == [0]
        # node 2 follows node 1's partitions and cannot log in: one line names node 1, the listener and the user
        line = wait_for("the log-in line", lambda: next((ln for ln in nodes[2].log().splitlines()
                                                        if "cannot log in to node 1" in ln), None),
                        timeout=20, describe=lambda: node_logs(nodes))
        assert "as admin with SCRAM-SHA-512 on listener SASL_SSL" in line and "not-the-password" not in line
        assert "Authentication failed" in line or "authentication" in line.lower()
        before = failed_logins(nodes[1])
        time.sleep(3.0)
        lines = [ln for ln in nodes[2].log().splitlines() if "cannot log in to node 1" in ln]
        assert 1 <= len(lines) <= 2  # rate-limited: not one per retry
        assert failed_logins(nodes[1]) >= before + 2  # it keeps retrying (about once a second)
        assert "not-the-password" not in nodes[2].log() and "not-the-password" not in nodes[1].log()
    finally:
        stop_nodes(nodes)


def describe_acls(node: ServerProcess, principal: str) -> list[tuple[str, str, int]]:
    """(resource name, pattern type, operation) of ``principal``'s ACLs, asked of ``node`` (PLAINTEXT)."""
    conn = BrokerConnection("127.0.0.1", node.port, request_timeout_ms=5000, connect_timeout_ms=5000).connect()
    try:
        resp = conn.send(29, lambda v: {"resource_type_filter": 1, "resource_name_filter": None,
                                        "pattern_type_filter": 1, "principal_filter": principal,
                                        "host_filter": None, "operation": 1, "permission_type": 1})[1]
    finally:
        conn.close()
    assert resp["error_code"] == 0, resp
    return sorted((r["resource_name"], r["pattern_type"], a["operation"]) for r in resp["resources"]
                  for a in r["acls"])


def logs_in(node: ServerProcess, pki: Pki, user: str, password: str) -> bool:
    sec = SecurityConfig("SASL_SSL", "SCRAM-SHA-512", user, password, ssl_cafile=str(pki.ca))
    try:
        conn = BrokerConnection("127.0.0.1", node.ports["SASL_SSL"], security=sec, request_timeout_ms=5000,
                                connect_timeout_ms=5000).connect()
    except Exception:  # noqa: BLE001 - a refused login is the answer
        return False
    conn.close()
    return True


def test_users_and_acls_are_the_clusters_applied_everywhere_within_2_s_and_kept(tmp_path: Path, zk_connect: str,
                                                                                 pki: Pki) -> None:
    """Users made with confluent-kafka's admin client on node 1 log in on nodes 2 and 3, and a CreateAcls on
    node 1 is seen by (DescribeAcls) and enforced on (Metadata) nodes 2 and 3, each within 2 s; a DeleteAcls
    likewise; after every node restarts, ZooKeeper gives them back."""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )
    from confluent_kafka.admin import AdminClient as CkAdmin

    nodes: dict[int, ServerProcess] = {}
    topic = f"carols-{uuid.uuid4().hex[:6]}"
    try:
        for i in (1, 2, 3):
            nodes[i] = start(tmp_path, pki, zk_connect, i)
        for n in nodes.values():
            wait_for("three brokers", lambda n=n: len(metadata(n)["brokers"]) == 3, describe=lambda: node_logs(nodes))
        assert logs_in(nodes[3], pki, "alice", USERS["alice"])  # made in ZooKeeper before the start
        with AdminClient(sasl_ssl(nodes[1]), security=admin_security(pki)) as admin:
            assert [r.error_code for r in admin.create_topics([NewTopic(topic, 1, 3)])] == [0]
        ck = CkAdmin({"bootstrap.servers": f"127.0.0.1:{nodes[1].port}"})  # the loopback PLAINTEXT listener
        upsert = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                              b"carol-secret", b"carol-salt")
        t0 = time.monotonic()
        for fut in ck.alter_user_scram_credentials([upsert]).values():
            assert fut.result(10) is None
        for i in (2, 3):
            wait_for(f"carol on node {i}", lambda i=i: logs_in(nodes[i], pki, "carol", "carol-secret"), timeout=5)
        assert time.monotonic() - t0 < 2.0 + 1.0  # 2 s to apply, plus this test's own login round trips
        assert not logs_in(nodes[2], pki, "carol", "wrong")

        def carol_sees(node: ServerProcess) -> bool:
            conn = BrokerConnection("127.0.0.1", node.ports["SASL_SSL"], security=SecurityConfig(
                "SASL_SSL", "SCRAM-SHA-512", "carol", "carol-secret", ssl_cafile=str(pki.ca)),
                request_timeout_ms=5000).connect()
            try:
                md = conn.send(3, lambda v: {"topics": [{"name": topic}], "allow_auto_topic_creation": False})[1]
            finally:
                conn.close()
            return md["topics"][0]["error_code"] == 0  # else 29: TOPIC_AUTHORIZATION_FAILED
        assert not carol_sees(nodes[3])
        grant = AclBinding(ResourceType.TOPIC, "carols-", ResourcePatternType.PREFIXED, "User:carol", "*",
                           AclOperation.DESCRIBE, AclPermissionType.ALLOW)
        t0 = time.monotonic()
        for fut in ck.create_acls([grant]).values():
            assert fut.result(10) is None
        applied = {}
        while len(applied) < 2 and time.monotonic() - t0 < 5:
            for i in (2, 3):
                if i not in applied and describe_acls(nodes[i], "User:carol") == [("carols-", 4, 8)]:
                    applied[i] = time.monotonic() - t0
            time.sleep(0.02)
        assert set(applied) == {2, 3} and max(applied.values()) <= 2.0, applied
        assert carol_sees(nodes[2]) and carol_sees(nodes[3])

        for i in (1, 2, 3):
            nodes.pop(i).stop()
        for i in (1, 2, 3):
            nodes[i] = start(tmp_path, pki, zk_connect, i)
        for n in nodes.values():
            wait_for("three brokers again", lambda n=n: len(metadata(n)["brokers"]) == 3, timeout=20)
        assert describe_acls(nodes[2], "User:carol") == [("carols-", 4, 8)]
        assert logs_in(nodes[3], pki, "carol", "carol-secret")

        ck = CkAdmin({"bootstrap.servers": f"127.0.0.1:{nodes[3].port}"})
        t0 = time.monotonic()
        gone = AclBindingFilter(ResourceType.TOPIC, "carols-", ResourcePatternType.PREFIXED, "User:carol", "*",
                                AclOperation.DESCRIBE, AclPermissionType.ALLOW)
        for fut in ck.delete_acls([gone]).values():
            assert len(fut.result(10)) == 1
        wait_for("the deletion on node 1", lambda: describe_acls(nodes[1], "User:carol") == [], timeout=2)
        assert wait_for("carol refused on node 1", lambda: not carol_sees(nodes[1]) or None, timeout=2)
    finally:
        stop_nodes(nodes)
