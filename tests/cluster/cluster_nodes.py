"""N real `groupcoord serve` processes joined through one ZooKeeper chroot, and wire helpers to ask them.

Every wait is bounded (a deadline and a poll interval); every process is stopped by its PID.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from server_process import ServerProcess  # noqa: E402

from client.connection import BrokerConnection  # noqa: E402
from client.errors import KafkaError  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import zookeeper_process  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
METADATA, OFFSET_COMMIT, FIND_COORDINATOR, JOIN_GROUP = 3, 8, 10, 11
OFFSETS_TOPIC = "__consumer_offsets"
SESSION_TIMEOUT_MS = 3000  # ZooKeeper (tickTime 500) allows 1000..10000
DEFAULT_SESSION_TIMEOUT_MS = 18000  # the server's default zookeeper.session.timeout.ms (LongSessionZooKeeper)

T = TypeVar("T")


def start_nodes(data_root: Path, zk_connect: str, ids: list[int], *extra: str,
                env: dict[str, str] | None = None) -> dict[int, ServerProcess]:
    nodes: dict[int, ServerProcess] = {}
    try:
        for node_id in ids:
            nodes[node_id] = start_node(data_root, zk_connect, node_id, *extra, env=env)
    except BaseException:
        stop_nodes(nodes)
        raise
    return nodes


def start_node(data_root: Path, zk_connect: str, node_id: int, *extra: str,
               env: dict[str, str] | None = None) -> ServerProcess:
    return ServerProcess(data_root / f"node{node_id}", "--zookeeper-connect", zk_connect, "--node-id",
                         str(node_id), "--zookeeper-session-timeout-ms", str(SESSION_TIMEOUT_MS),
                         "--group-min-session-timeout-ms", "1000", "--group-initial-rebalance-delay-ms", "0",
                         "--shutdown-grace-ms", "1000", *extra, env=env).start()


def stop_nodes(nodes: dict[int, ServerProcess]) -> None:
    for node in nodes.values():
        if node.proc is not None:
            node.stop()


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.1,
             describe: Callable[[], str] = lambda: "") -> T:
    """Call ``probe`` until it returns something other than None (or False); bounded by ``timeout``."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = probe()
        except (KafkaError, OSError) as e:
            last_error, value = e, None
        if value is not None and value is not False:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last error: {last_error!r})\n"
                         + describe())


def request(node: ServerProcess, api_key: int, body: Any) -> dict[str, Any]:
    conn = BrokerConnection("127.0.0.1", node.port, request_timeout_ms=10000, connect_timeout_ms=5000).connect()
    try:
        return conn.send(api_key, body)[1]
    finally:
        conn.close()


def metadata(node: ServerProcess, topics: list[str] | None = None) -> dict[str, Any]:
    return request(node, METADATA, lambda v: {
        "topics": (None if v >= 1 else []) if topics is None else [{"name": t} for t in topics],
        "allow_auto_topic_creation": False})


def offsets_partitions(md: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """partition -> its Metadata entry, for __consumer_offsets (empty when not listed)."""
    for t in md["topics"]:
        if t["name"] == OFFSETS_TOPIC and t["error_code"] == 0:
            return {p["partition_index"]: p for p in t["partitions"]}
    return {}


def find_coordinator(node: ServerProcess, group: str) -> tuple[int, int]:
    """(error code, node id) of FindCoordinator for ``group``, asked of ``node``."""
    resp = request(node, FIND_COORDINATOR, lambda v: {"key": group, "key_type": 0, "coordinator_keys": [group]})
    entry = resp["coordinators"][0] if resp.get("coordinators") else resp
    return entry["error_code"], entry["node_id"]


def commit_offset(node: ServerProcess, group: str, topic: str = "t", offset: int = 7) -> int:
    """A simple-group OffsetCommit (generation -1, no member) of one partition; its error code."""
    resp = request(node, OFFSET_COMMIT, lambda v: {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "retention_time_ms": -1,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    return resp["topics"][0]["partitions"][0]["error_code"]


def logs(nodes: dict[int, ServerProcess]) -> str:
    return "\n".join(f"--- node {i} ---\n{n.log()[-3000:]}" for i, n in nodes.items())


class LongSessionZooKeeper(zookeeper_process.ZooKeeperProcess):
    """A ZooKeeper that grants the server's default 18 s session (``maxSessionTimeout`` 30 s): the shared one
    (tickTime 500) clamps sessions to 10 s. Otherwise started (and stopped by its PID) as ZooKeeperProcess."""

    MAX_SESSION_TIMEOUT_MS = 30000

    def start(self, timeout: float = 30.0, same_port: bool = False) -> LongSessionZooKeeper:
        if not zookeeper_process.ZOOKEEPER_JAR.exists():
            return super().start(timeout, same_port)  # type: ignore[return-value]  # (its clear error)
        if not (same_port and self.port):
            self.port = zookeeper_process.free_port()
        data = self.dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "zoo.cfg"
        cfg.write_text(f"tickTime=500\ndataDir={data}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
                       f"maxSessionTimeout={self.MAX_SESSION_TIMEOUT_MS}\nadmin.enableServer=false\n"
                       "4lw.commands.whitelist=ruok,srvr,mntr\nmaxClientCnxns=200\n")
        self.log_path = self.dir / "zookeeper.log"
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                ["java", "-Xms32m", "-Xmx256m", "-cp",
                 f"{zookeeper_process.ZOOKEEPER_JAR}:{zookeeper_process.SLF4J_JAR}",
                 "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)],
                cwd=self.dir, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("ZooKeeper exited at startup:\n" + self.log())
            try:
                if "Mode:" in zookeeper_process.four_letter(self.port, "srvr"):
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("ZooKeeper did not become ready in time:\n" + self.log())
