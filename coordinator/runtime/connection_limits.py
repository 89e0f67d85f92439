"""Limits on connections as a whole: how many (in total and per address), how long one may idle, and how
their repeated events are logged.

Rules:
- ``admit(host, open_total)`` decides at accept time: refused at ``max.connections`` or at the address's
  limit (``max.connections.per.ip``, or its entry in ``max.connections.per.ip.overrides``,
  ``host:count,host:count`` as Kafka writes it; a bad entry is a config error naming it).
- ``opened``/``closed`` keep the count per address; an address with no open connection is forgotten, so
  the table never outgrows the open connections.
- Idle: a connection that has read no whole request for ``connections.max.idle.ms`` and has none pending
  is closed (``reap_idle``), a half-sent frame included; the check runs a few times per idle period.
- Every refusal and close is counted in ``groupcoord_connections_closed{reason}``; the log gets at most one
  line per kind every ``LOG_INTERVAL_S`` seconds, carrying the count it stands for (a flood of 2,000
  refused connections must not become 2,000 lines).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from coordinator.config import parse_per_ip_overrides
from coordinator.runtime.rate_limited_log import RateLimitedLog

if TYPE_CHECKING:
    from coordinator.config import Config
    from coordinator.metrics import Metrics
    from coordinator.runtime.connection import Connection

log = logging.getLogger("groupcoord.connections")
LOG_INTERVAL_S = 5.0
MAX_CONNECTIONS, PER_IP, IDLE = "max_connections", "max_connections_per_ip", "idle"


class ConnectionLimits:
    def __init__(self, config: Config, metrics: Metrics, clock: Callable[[], float]) -> None:
        self.max_total = config["max.connections"]
        self.per_ip = config["max.connections.per.ip"]
        self.overrides = parse_per_ip_overrides(config["max.connections.per.ip.overrides"])
        self.idle_s = config["connections.max.idle.ms"] / 1000
        self.metrics = metrics
        self.by_host: dict[str, int] = {}
        self.logs = {kind: RateLimitedLog(log, LOG_INTERVAL_S, clock) for kind in (MAX_CONNECTIONS, PER_IP, IDLE)}
        self.protocol_log = RateLimitedLog(log, LOG_INTERVAL_S, clock)  # connections closed on bad input

    def admit(self, host: str, open_total: int) -> bool:
        """Whether a new connection from ``host`` may open (counted and logged when not)."""
        if open_total >= self.max_total:
            self._refused(MAX_CONNECTIONS, "max.connections (%d) reached; refusing a connection from %s",
                          self.max_total, host)
            return False
        limit = self.overrides.get(host, self.per_ip)
        if self.by_host.get(host, 0) >= limit:
            self._refused(PER_IP, "%s has %d connections, its limit; refusing another", host, limit)
            return False
        return True

    def _refused(self, reason: str, msg: str, *args: object) -> None:
        self.metrics.connections_closed.labels(reason).inc()
        self.logs[reason].warning(msg, *args)

    def opened(self, host: str) -> None:
        self.by_host[host] = self.by_host.get(host, 0) + 1

    def closed(self, host: str) -> None:
        n = self.by_host.get(host, 0) - 1
        if n > 0:
            self.by_host[host] = n
        else:
            self.by_host.pop(host, None)

    @property
    def check_interval_s(self) -> float:
        return min(max(self.idle_s / 4, 0.01), 30.0)

    def reap_idle(self, connections: Iterable[Connection], now: float) -> int:
        """Close every connection idle past ``connections.max.idle.ms`` with nothing pending; how many."""
        idle = [c for c in connections if not c.slots and now - c.last_request > self.idle_s and not c.closed]
        for conn in idle:
            self.metrics.connections_closed.labels(IDLE).inc()
            self.logs[IDLE].info("closing %s: no request for %.0f ms (connections.max.idle.ms)", conn.peer,
                                 (now - conn.last_request) * 1000)
            conn.abort()
        return len(idle)
