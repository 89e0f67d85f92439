"""A stand-in for the Broker that a Connection talks to, for connection tests over in-memory streams: every
request that reaches ``handle`` is held (its slot open) until ``answer_all``; ``hot`` may map api keys to hot
handlers; ``most_open`` records the most slots the connection had open when one arrived."""

from __future__ import annotations

from typing import Any

from coordinator.config import Config
from coordinator.metrics import Metrics


class HoldingBroker:
    def __init__(self, max_inflight: int = 100, hot: dict | None = None) -> None:
        self.config = Config({"max.inflight.requests.per.connection": max_inflight})
        self.metrics = Metrics()
        self.hot: dict = hot or {}  # empty: every request goes through handle()
        self.hot_decoders: dict = {}
        self.held: list[Any] = []
        self.most_open = 0

    def handle(self, request, slot) -> None:  # type: ignore[no-untyped-def]
        self.held.append(slot)
        self.most_open = max(self.most_open, len(slot.conn.slots))

    def connection_closed(self, conn) -> None:  # type: ignore[no-untyped-def]
        pass

    def answer_all(self) -> None:
        """Answer every held request (an ApiVersions-shaped body; the tests only read correlation ids)."""
        held, self.held = self.held, []
        for slot in held:
            slot.complete({"error_code": 0, "api_keys": []})
