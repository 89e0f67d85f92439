"""`make cluster` / `make cluster-stop` (and `make cluster SECURE=1`): the compose topology as local processes,
end to end.

On free 127.0.0.1 ports and a temp CLUSTER_DIR: the three nodes form a cluster, a kafka-python group consumes
through it, Prometheus reports ``up == 1`` for the three targets within 20 s, every Grafana panel's PromQL
returns data from that Prometheus and names only metrics the nodes export, and `make cluster-stop` leaves
none of the recorded processes (nor anything in their process groups) behind.

Rules: every wait is bounded; the only wall-clock assertion is the 20 s Prometheus deadline; processes are
ended by `make cluster-stop` (recorded PIDs), and, if that fails, by those PIDs here.
The topic is created and filled through one node (topics are cluster-wide); the offsets partitions are
replicated on the three nodes, so killing a node moves the group to a live coordinator that has its data.

Secured: the same start, with SASL_SSL listeners only (nodes replicate over TLS logged in as admin), users in
ZooKeeper and ACLs for User:app; a kafka-python group logged in as app consumes what app produced to app-orders
and commits, app is refused a topic outside app-*, a plaintext connection gets no Metadata answer, Prometheus
scrapes the three nodes, and `groupcoord cluster describe` with admin.properties shows three nodes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "cluster"))
sys.path.insert(0, str(REPO / "deploy"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_nodes import wait_for  # noqa: E402
from local_cluster import group_members, is_ours  # noqa: E402
from test_deploy_files import dashboard_exprs, metric_names  # noqa: E402
from zookeeper_process import ZOOKEEPER_JAR, free_port  # noqa: E402

pytestmark = pytest.mark.skipif(not ZOOKEEPER_JAR.exists(), reason="make test installs zookeeper")

GROUPCOORD = str(Path(sys.executable).with_name("groupcoord"))
TOPIC, GROUP, RECORDS = "deploy-walk", "deploy-group", 20


def make(target: str, env: dict[str, str], *variables: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "-s", target, *variables], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=180)


def cluster_env(tmp_path: Path) -> tuple[dict[str, str], dict[str, int], Path]:
    """The environment of `make cluster` on free ports and a temp CLUSTER_DIR; the ports; that dir."""
    ports = {name: free_port() for name in ("zk", "n1", "n2", "n3", "m1", "m2", "m3", "prom")}
    cluster_dir = tmp_path / "cluster-data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUPCOORD_")}
    env.update(CLUSTER_DIR=str(cluster_dir), CLUSTER_ZK_PORT=str(ports["zk"]),
               CLUSTER_NODE_PORTS=f"{ports['n1']},{ports['n2']},{ports['n3']}",
               CLUSTER_METRICS_PORTS=f"{ports['m1']},{ports['m2']},{ports['m3']}",
               CLUSTER_PROMETHEUS_PORT=str(ports["prom"]), CLUSTER_SCRAPE_INTERVAL="1s")
    return env, ports, cluster_dir


def stop_cluster(env: dict[str, str], recorded: dict[str, dict[str, Any]]) -> tuple[
        subprocess.CompletedProcess[str], list[str]]:
    """`make cluster-stop`, then what is left of the recorded processes (ended here by PID, if any)."""
    stopped = make("cluster-stop", env)
    leftovers = [f"{name} {e['pid']}" for name, e in recorded.items()
                 if is_ours(int(e["pid"]), str(e["marker"])) or group_members(int(e["pid"]))]
    for e in recorded.values():  # only if cluster-stop failed: end what we started, by PID
        if is_ours(int(e["pid"]), str(e["marker"])):
            os.killpg(int(e["pid"]), signal.SIGKILL)
    return stopped, leftovers


def cli(*args: str) -> str:
    r = subprocess.run([GROUPCOORD, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"groupcoord {' '.join(args)}: {r.stdout}{r.stderr}"
    return r.stdout


def prom_query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]


def scrape_names(port: int) -> set[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {re.split(r"[{ ]", ln, maxsplit=1)[0] for ln in text.splitlines() if ln and not ln.startswith("#")}


def consume_with_kafka_python(bootstrap: str, topic: str = TOPIC, group: str = GROUP,
                              **security: Any) -> list[bytes]:
    """RECORDS records of ``topic`` read by a kafka-python group member, then committed."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=1000,
                             consumer_timeout_ms=15000, **security)
    got: list[bytes] = []
    try:
        for message in consumer:
            got.append(message.value)
            if len(got) == RECORDS:
                break
        consumer.commit()
    finally:
        consumer.close()
    return got


def test_make_cluster_end_to_end(tmp_path: Path) -> None:
    env, ports, cluster_dir = cluster_env(tmp_path)
    nodes = [f"127.0.0.1:{ports[n]}" for n in ("n1", "n2", "n3")]
    recorded: dict[str, dict[str, Any]] = {}
    try:
        started = make("cluster", env)
        assert started.returncode == 0, started.stdout + started.stderr
        started_at = time.monotonic()
        recorded = json.loads((cluster_dir / "cluster.pids").read_text())
        assert set(recorded) == {"zookeeper", "node1", "node2", "node3", "prometheus"}
        for addr in nodes:
            assert addr in started.stdout
        assert f"http://127.0.0.1:{ports['prom']}/" in started.stdout and "make cluster-stop" in started.stdout

        # the three nodes form a cluster
        describe = wait_for("a 3-node cluster", lambda: (lambda out: out if "NODES 3" in out else None)(
            cli("cluster", "describe", "-b", nodes[0])), timeout=20)
        assert "CONTROLLER" in describe

        # Prometheus: up == 1 for all three targets within 20 s of `make cluster` returning
        up = wait_for("up == 1 for three targets",
                      lambda: (lambda r: r if len(r) == 3 else None)(prom_query(ports["prom"],
                                                                                 'up{job="groupcoord"} == 1')),
                      timeout=max(0.1, 20 - (time.monotonic() - started_at)), interval=0.5)
        assert {s["metric"]["node"] for s in up} == {"node1", "node2", "node3"}

        # a kafka-python group consumes through the cluster
        # topics are cluster-wide: created through one node (its answer waits until that node sees the
        # leaders), produced to and consumed from through the same node
        r = subprocess.run([GROUPCOORD, "topics", "create", "-b", nodes[0], TOPIC], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        r = subprocess.run([GROUPCOORD, "produce", "-b", nodes[0], TOPIC], capture_output=True, text=True,
                           timeout=60, input="".join(f"record-{i}\n" for i in range(RECORDS)))
        assert r.returncode == 0, r.stdout + r.stderr
        got = consume_with_kafka_python(nodes[0])
        assert got == [f"record-{i}".encode() for i in range(RECORDS)]
        group = cli("groups", "describe", "-b", nodes[1], GROUP)
        assert f"GROUP {GROUP}" in group and "COORDINATOR 127.0.0.1:" in group

        # every dashboard query names exported metrics and returns data from this Prometheus (checked before the
        # kill: a killed node's counters restart from nothing)
        # (the lag gauges appear on the group's coordinator at its next lag computation after the commit, or
        # the one after for partitions led elsewhere: metrics.lag.interval.ms, 5 s)
        wanted = set().union(*(metric_names(expr) for expr in dashboard_exprs()))
        missing: list[set[str]] = [set()]

        def all_exported() -> set[str] | None:
            exported = set().union(*(scrape_names(ports[m]) for m in ("m1", "m2", "m3"))) | {"up"}
            missing[0] = wanted - exported
            return exported if not missing[0] else None

        exported = wait_for("every dashboard metric exported", all_exported, timeout=30, interval=0.5,
                            describe=lambda: f"missing {sorted(missing[0])}")
        for expr in dashboard_exprs():
            assert metric_names(expr) <= exported, expr
            wait_for(f"data for {expr}", lambda expr=expr: prom_query(ports["prom"], expr) or None,
                     timeout=30, interval=0.5)

        # kill a node (the walk-through): the cluster sees it go; `start-node` brings it back
        os.kill(int(recorded["node3"]["pid"]), signal.SIGKILL)
        wait_for("node 3 leaving", lambda: "NODES 2" in cli("cluster", "describe", "-b", nodes[0]), timeout=20)
        last: list[str] = []

        def coordinator_alive() -> str | None:
            r = subprocess.run([GROUPCOORD, "groups", "describe", "-b", nodes[0], GROUP], capture_output=True,
                               text=True, timeout=60)
            last[:] = [r.stdout + r.stderr]
            if r.returncode == 0 and f":{ports['n3']} (" not in r.stdout:
                return r.stdout  # on a live node: unchanged, or moved there with its data (replicated)
            return None

        moved = wait_for("the group's coordinator on a live node", coordinator_alive, timeout=20,
                         describe=lambda: "".join(last))
        assert f"GROUP {GROUP}" in moved and "COORDINATOR 127.0.0.1:" in moved, moved
        back = subprocess.run([sys.executable, str(REPO / "deploy" / "local_cluster.py"), "start-node", "3"],
                              env=env, capture_output=True, text=True, timeout=60)
        assert back.returncode == 0, back.stdout + back.stderr
        recorded = json.loads((cluster_dir / "cluster.pids").read_text())
        wait_for("node 3 back", lambda: "NODES 3" in cli("cluster", "describe", "-b", nodes[0]), timeout=20)
    finally:
        stopped, leftovers = stop_cluster(env, recorded)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert not leftovers, f"make cluster-stop left {leftovers}"
    assert not (cluster_dir / "cluster.pids").exists()


APP_TOPIC, APP_GROUP, OTHER_TOPIC = "app-orders", "app-billing", "orders"


def plaintext_metadata_answer(port: int) -> bytes | None:
    """Metadata v0 for every topic, sent in the clear to a TLS listener: the answer frame, or None when the
    node closes, or sends anything but a frame with our correlation id (a TLS alert), within 5 s."""
    body = struct.pack(">hhih", 3, 0, 0x4D44, 5) + b"plain" + struct.pack(">i", 0)  # v0: [] = every topic
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        data = b""
        try:
            while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    if len(data) >= 8 and struct.unpack(">i", data[4:8])[0] == 0x4D44:
        return data
    return None


def kafka_python_security(user: str, password: str, ca: Path) -> dict[str, Any]:
    return {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": user,
            "sasl_plain_password": password, "ssl_cafile": str(ca)}


def test_make_cluster_secured_end_to_end(tmp_path: Path) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import TopicAuthorizationFailedError

    env, ports, cluster_dir = cluster_env(tmp_path)
    nodes = [f"127.0.0.1:{ports[n]}" for n in ("n1", "n2", "n3")]
    admin, app = ["--command-config", str(cluster_dir / "admin.properties")], [
        "--command-config", str(cluster_dir / "app.properties")]
    recorded: dict[str, dict[str, Any]] = {}
    try:
        started = make("cluster", env, "SECURE=1")
        started_at = time.monotonic()
        if (cluster_dir / "cluster.pids").exists():
            recorded = json.loads((cluster_dir / "cluster.pids").read_text())
        assert started.returncode == 0, started.stdout + started.stderr
        assert set(recorded) == {"zookeeper", "node1", "node2", "node3", "prometheus"}
        assert f"bootstrap servers: {','.join(nodes)}" in started.stdout and "make cluster-stop" in started.stdout
        assert str(cluster_dir / "admin.properties") in started.stdout
        assert str(cluster_dir / "app.properties") in started.stdout
        passwords = json.loads((cluster_dir / "secrets.json").read_text())
        ca = cluster_dir / "certs" / "ca.pem"

        # the three nodes form a cluster, seen through a SASL_SSL connection as admin
        describe = wait_for("a 3-node cluster", lambda: (lambda out: out if "NODES 3" in out else None)(
            cli("cluster", "describe", *admin, "-b", nodes[0])), timeout=20)
        assert "CONTROLLER" in describe

        # Prometheus scrapes every node (plain-HTTP /metrics, as in the plain mode)
        up = wait_for("up == 1 for three targets",
                      lambda: (lambda r: r if len(r) == 3 else None)(prom_query(ports["prom"],
                                                                                 'up{job="groupcoord"} == 1')),
                      timeout=max(0.1, 20 - (time.monotonic() - started_at)), interval=0.5)
        assert {s["metric"]["node"] for s in up} == {"node1", "node2", "node3"}

        # no Metadata in the clear
        for port in (ports["n1"], ports["n2"], ports["n3"]):
            assert plaintext_metadata_answer(port) is None

        # app creates and fills a topic in its prefix, and a kafka-python group logged in as app reads it
        cli("topics", "create", *app, "-b", nodes[0], APP_TOPIC)
        r = subprocess.run([GROUPCOORD, "produce", *app, "-b", nodes[0], APP_TOPIC], capture_output=True,
                           text=True, timeout=60, input="".join(f"order-{i}\n" for i in range(RECORDS)))
        assert r.returncode == 0, r.stdout + r.stderr
        security = kafka_python_security("app", passwords["app"], ca)
        got = consume_with_kafka_python(nodes[0], APP_TOPIC, APP_GROUP, **security)
        assert got == [f"order-{i}".encode() for i in range(RECORDS)]
        group = cli("groups", "describe", *app, "-b", nodes[1], APP_GROUP)
        assert f"GROUP {APP_GROUP}" in group and "COORDINATOR 127.0.0.1:" in group
        # the offsets partitions the commit went to are replicated on the three nodes, over TLS as admin
        wait_for("offsets partitions in sync on three nodes", lambda: "UNDER-REPLICATED 0" in cli(
            "cluster", "describe", *admin, "-b", nodes[0]), timeout=20, interval=0.5)
        rows = [ln.split() for ln in cli("cluster", "describe", *admin, "-b", nodes[0]).splitlines()
                if ln[:1].isdigit()]
        assert len(rows) == 3 and all(int(row[-1]) >= 50 for row in rows), rows  # REPLICAS: every offsets one

        # a topic outside app-* (made by admin) is refused to app: its group (allowed) fetches the partition's
        # committed offset and is told TOPIC_AUTHORIZATION_FAILED (kafka-python only logs a subscription's
        # refused Metadata, and without a group waits for a leader Metadata never gives: hence an assignment)
        cli("topics", "create", *admin, "-b", nodes[0], OTHER_TOPIC)
        intruder = KafkaConsumer(bootstrap_servers=nodes[0], group_id=f"{APP_GROUP}-intruder",
                                 auto_offset_reset="earliest", enable_auto_commit=False, **security)
        try:
            intruder.assign([TopicPartition(OTHER_TOPIC, 0)])
            with pytest.raises(TopicAuthorizationFailedError):
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    intruder.poll(timeout_ms=500)
        finally:
            intruder.close()
    finally:
        stopped, leftovers = stop_cluster(env, recorded)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert not leftovers, f"make cluster-stop left {leftovers}"
    assert not (cluster_dir / "cluster.pids").exists()
