"""What the client knows about the cluster: bootstrap servers, nodes, topic metadata, and connections.

Rules and invariants:
- ``bootstrap_servers`` ("host:port,host:port" or a list) are only used until the first Metadata response
  names the real nodes; after that, requests go to nodes by id.
- One ``BrokerConnection`` per node for ordinary requests, plus one separate connection per group
  coordinator (Kafka keys it ``Integer.MAX_VALUE - nodeId``) so a JoinGroup waiting for a rebalance never
  delays fetches or metadata on the node's ordinary connection.
- Connections are opened lazily and replaced when closed; a closed connection is never handed out.
- ``least_loaded_connection()`` picks, among the nodes we know, a connected node with the fewest requests
  in flight; failing that it connects to the nodes in turn (bootstrap servers when no node is known yet).
- Metadata for named topics is merged into what we have; a request for all topics replaces it.
- The connections dict is guarded by one lock; no request waits for a response while holding it.
- Every connection uses the cluster's ``security`` (``client.security.SecurityConfig``, default PLAINTEXT)
  and one TLS context built from it when the cluster is made (a bad certificate file fails there). A refused
  login (``client.errors.AuthenticationError``) is not a connection failure: it is raised at once, never
  tried on the next node or retried.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from client.connection import Body, BrokerConnection
from client.errors import KafkaConnectionError, KafkaError, error_for
from client.security import PLAINTEXT, SecurityConfig
from protocol.errors import ErrorCode

log = logging.getLogger(__name__)

METADATA, FIND_COORDINATOR = 3, 10
GROUP_KEY = 0


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    leader: int
    leader_epoch: int = -1
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    partitions: tuple[PartitionMetadata, ...]
    error_code: int = 0
    is_internal: bool = False


def parse_bootstrap(servers: str | Iterable[str]) -> list[tuple[str, int]]:
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out: list[tuple[str, int]] = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no bootstrap servers given")
    return out


class Cluster:
    def __init__(self, bootstrap_servers: str | Iterable[str], *, client_id: str | None = "groupcoord-client",
                 request_timeout_ms: int = 30000, connect_timeout_ms: int = 10000,
                 security: SecurityConfig | None = None) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.security = security if security is not None else PLAINTEXT
        self._ssl_context = self.security.ssl_context()
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.nodes: dict[int, Node] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self.cluster_id: str | None = None
        self.controller_id: int = -1
        self.last_refresh: float | None = None  # time.monotonic() of the last metadata response
        self._conns: dict[tuple[str, int], BrokerConnection] = {}
        self._lock = threading.Lock()
        self._closed = False

    # ------------------------------------------------------------------ connections
    def _open(self, key: tuple[str, int], host: str, port: int, node_id: int | None) -> BrokerConnection:
        with self._lock:
            if self._closed:
                raise KafkaConnectionError("client is closed")
            conn = self._conns.get(key)
            if conn is not None and conn.connected:
                return conn
            conn = BrokerConnection(host, port, client_id=self.client_id, node_id=node_id,
                                    request_timeout_ms=self.request_timeout_ms,
                                    connect_timeout_ms=self.connect_timeout_ms, security=self.security,
                                    ssl_context=self._ssl_context).connect()
            self._conns[key] = conn
            return conn

    def connection(self, node_id: int) -> BrokerConnection:
        node = self.nodes.get(node_id)
        if node is None:
            raise KafkaConnectionError(f"unknown node {node_id}")
        return self._open(("node", node_id), node.host, node.port, node_id)

    def coordinator_connection(self, node: Node) -> BrokerConnection:
        return self._open(("coordinator", node.node_id), node.host, node.port, node.node_id)

    def close_coordinator_connection(self, node: Node) -> None:
        """Drop the coordinator connection, failing its pending requests (no request is sent)."""
        with self._lock:
            conn = self._conns.pop(("coordinator", node.node_id), None)
        if conn is not None:
            conn.close()

    def least_loaded_connection(self) -> BrokerConnection:
        with self._lock:
            live = [c for k, c in self._conns.items() if c.connected and k[0] != "coordinator"]
        if live:
            return min(live, key=lambda c: c.in_flight)
        candidates: list[tuple[tuple[str, int], str, int, int | None]] = [
            (("node", n.node_id), n.host, n.port, n.node_id) for n in self.nodes.values()]
        candidates += [(("bootstrap", i), h, p, None) for i, (h, p) in enumerate(self.bootstrap)]
        errors: list[str] = []
        for key, host, port, node_id in candidates:
            try:
                return self._open(key, host, port, node_id)
            except KafkaConnectionError as e:
                errors.append(str(e))
        raise KafkaConnectionError("no node reachable: " + "; ".join(errors))

    def request_any(self, api_key: int, body: Body, *, timeout_ms: int | None = None,
                    max_version: int | None = None) -> tuple[int, dict[str, Any]]:
        """Send to the least-loaded node; one retry on another connection if the first one fails."""
        try:
            conn = self.least_loaded_connection()
            return conn.send(api_key, body, timeout_ms=timeout_ms, max_version=max_version)
        except KafkaConnectionError:
            conn = self.least_loaded_connection()
            return conn.send(api_key, body, timeout_ms=timeout_ms, max_version=max_version)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            conn.close()

    # ------------------------------------------------------------------ metadata
    def refresh_metadata(self, topics: Iterable[str] | None = None, *,
                         allow_auto_topic_creation: bool = False) -> dict[str, TopicMetadata]:
        """Ask for ``topics`` (None = all) and merge the answer; returns the topics the response named."""
        names = None if topics is None else sorted(set(topics))

        def body(version: int) -> dict[str, Any]:
            if names is None:
                return {"topics": None if version >= 1 else [], "allow_auto_topic_creation": False}
            return {"topics": [{"name": t} for t in names],
                    "allow_auto_topic_creation": allow_auto_topic_creation}

        _, resp = self.request_any(METADATA, body)
        self.nodes = {b["node_id"]: Node(b["node_id"], b["host"], b["port"], b.get("rack"))
                      for b in resp["brokers"]}
        self.cluster_id = resp.get("cluster_id")
        self.controller_id = resp.get("controller_id", -1)
        seen = {t["name"]: _topic(t) for t in resp["topics"] if t["name"] is not None}
        if names is None:
            self.topics = {n: t for n, t in seen.items() if t.error_code == 0}
        else:
            for n in names:
                t = seen.get(n)
                if t is not None and t.error_code == 0:
                    self.topics[n] = t
                else:
                    self.topics.pop(n, None)
        self.last_refresh = time.monotonic()
        return seen

    def partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        """topic -> number of partitions, for the known topics among ``topics``."""
        return {t: len(self.topics[t].partitions) for t in topics if t in self.topics}

    def leader_for(self, topic: str, partition: int) -> int | None:
        t = self.topics.get(topic)
        if t is None:
            return None
        for p in t.partitions:
            if p.partition == partition:
                return p.leader if p.leader >= 0 else None
        return None

    # ------------------------------------------------------------------ coordinators
    def find_coordinator(self, key: str, key_type: int = GROUP_KEY) -> Node:
        """One FindCoordinator round trip to the least-loaded node; raises the error it answers."""
        def body(version: int) -> dict[str, Any]:
            return {"key": key, "key_type": key_type, "coordinator_keys": [key]}

        version, resp = self.request_any(FIND_COORDINATOR, body)
        entry = resp["coordinators"][0] if version >= 4 else resp
        if version >= 4 and len(resp["coordinators"]) != 1:
            raise KafkaError(f"FindCoordinator answered {len(resp['coordinators'])} coordinators for one key")
        code = entry["error_code"]
        if code != ErrorCode.NONE:
            raise error_for(code, entry.get("error_message"))
        return Node(entry["node_id"], entry["host"], entry["port"])


def _topic(t: dict[str, Any]) -> TopicMetadata:
    parts = tuple(sorted((PartitionMetadata(p["partition_index"], p["leader_id"], p.get("leader_epoch", -1),
                                            p["error_code"]) for p in t["partitions"]),
                         key=lambda p: p.partition))
    return TopicMetadata(t["name"], parts, t["error_code"], t.get("is_internal", False))
