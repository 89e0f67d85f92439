"""The node's request handlers: routes each decoded request to what serves it.

Rules:
- ``handlers`` maps api key -> handler; ApiVersions advertises exactly the declared ranges of the APIs that
  have a handler, so a client never sees an API we cannot serve.
- A handler either completes the slot at once or keeps it and completes it later (group coordination,
  durable writes). It never raises for something a client sent: Kafka error codes go in the response.
  A handler bug is logged, answered with a closed connection, and the server keeps running.
- throttle_time_ms is always 0 (kafka-python pauses the connection otherwise).
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

import trio

from coordinator.config import Config
from coordinator.metrics import Metrics
from protocol.codec import Request
from protocol.errors import ErrorCode
from protocol.messages import ALL

if TYPE_CHECKING:
    from coordinator.runtime.connection import Connection, Slot

log = logging.getLogger("groupcoord.broker")

Handler = Callable[[Request, "Slot"], None]


class Broker:
    def __init__(self, config: Config, metrics: Metrics) -> None:
        self.config = config
        self.metrics = metrics
        self.node_id: int = config["node.id"]
        self.advertised_host: str = config["advertised.host"] or config["host"]
        self.advertised_port: int = config["advertised.port"] or config["port"]
        self.handlers: dict[int, Handler] = {
            18: self.handle_api_versions,
            3: self.handle_metadata,
        }
        self.topics: dict[str, int] = {}  # topic -> partition count (hosted topics come later)
        self.connections: set[Connection] = set()
        self.shutdown_requested = trio.Event()

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Open storage and load state; called before the listener binds."""

    @asynccontextmanager
    async def running(self, nursery: trio.Nursery) -> AsyncIterator[None]:
        """Background tasks (timers, group commit) live while the server accepts."""
        yield

    async def stop(self) -> None:
        """Flush and close storage; called once, shielded, at shutdown."""

    async def wait_idle(self) -> None:
        while any(c.slots for c in self.connections):
            await trio.sleep(0.01)

    # ---------------------------------------------------------------- plumbing
    def set_bound_port(self, port: int) -> None:
        if not self.config["advertised.port"]:
            self.advertised_port = port

    def handle(self, request: Request, slot: Slot) -> None:
        handler = self.handlers.get(request.api_key)
        self.metrics.request_started(request.api_key)
        if handler is None:  # declared but not served: clients only send what ApiVersions advertised
            log.warning("no handler for api %s from %s; closing", request.api_key, slot.conn.peer)
            slot.conn.closed = True
            slot.complete(None)
            return
        try:
            handler(request, slot)
        except Exception:
            log.exception("handler for api %s v%s failed", request.api_key, request.version)
            self.metrics.protocol_error("handler_bug")
            slot.complete(None)

    def connection_opened(self, conn: Connection) -> None:
        self.connections.add(conn)
        self.metrics.connections.set(len(self.connections))

    def connection_closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self.metrics.connections.set(len(self.connections))

    # ---------------------------------------------------------------- ApiVersions
    def api_versions_body(self, error: int = 0) -> dict[str, Any]:
        keys = [
            {"api_key": k, "min_version": ALL[k].min_version, "max_version": ALL[k].max_version}
            for k in sorted(self.handlers)
            if k in ALL
        ]
        return {"error_code": error, "api_keys": keys, "throttle_time_ms": 0}

    def handle_api_versions(self, request: Request, slot: Slot) -> None:
        slot.complete(self.api_versions_body())

    # ---------------------------------------------------------------- Metadata
    def broker_entry(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "host": self.advertised_host, "port": self.advertised_port,
                "rack": None}

    def topic_metadata(self, name: str) -> dict[str, Any]:
        count = self.topics.get(name)
        if count is None:
            return {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": []}
        parts = [
            {"error_code": 0, "partition_index": p, "leader_id": self.node_id, "leader_epoch": 0,
             "replica_nodes": [self.node_id], "isr_nodes": [self.node_id], "offline_replicas": []}
            for p in range(count)
        ]
        return {"error_code": 0, "name": name, "is_internal": False, "partitions": parts}

    def handle_metadata(self, request: Request, slot: Slot) -> None:
        wanted = request.body.get("topics")
        if wanted is None or (request.version == 0 and not wanted):
            names = sorted(self.topics)  # null (or v0 empty) means all topics
        else:
            names = [t["name"] for t in wanted if t.get("name") is not None]
        slot.complete({
            "throttle_time_ms": 0,
            "brokers": [self.broker_entry()],
            "cluster_id": self.config["cluster.id"],
            "controller_id": self.node_id,
            "topics": [self.topic_metadata(n) for n in names],
        })
