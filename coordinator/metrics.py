"""Prometheus metrics, in a registry of our own, served over HTTP on their own port.

Rules:
- Every metric is declared here, named ``groupcoord_*`` with a unit suffix, and documented.
- Request counts and latencies are labelled by Kafka's API name, never by anything a client chooses (group
  ids, client ids), so a client cannot grow the label set.
- Gauges that describe groups are computed at scrape time from a callback the runtime installs, so the
  request path pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

from protocol.messages import ALL

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


def api_name(api_key: int) -> str:
    schema = ALL.get(api_key)
    return schema.name if schema else "Unknown"


class _GroupCollector:
    def __init__(self) -> None:
        self.source: Callable[[], dict[str, int]] | None = None
        self.members: Callable[[], int] | None = None

    def collect(self):  # type: ignore[no-untyped-def]
        g = GaugeMetricFamily("groupcoord_groups", "Consumer groups by state.", labels=["state"])
        for state, n in sorted((self.source() if self.source else {}).items()):
            g.add_metric([state], n)
        yield g
        yield GaugeMetricFamily("groupcoord_group_members", "Members of all groups.",
                                value=self.members() if self.members else 0)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("groupcoord_requests", "Requests handled, by API.", ["api"], registry=r)
        self.latency = Histogram("groupcoord_request_latency_seconds", "Time from request read to response "
                                 "ready, by API.", ["api"], buckets=_LATENCY_BUCKETS, registry=r)
        self.errors = Counter("groupcoord_protocol_errors", "Connections closed for protocol violations, by "
                              "kind.", ["kind"], registry=r)
        self.connections = Gauge("groupcoord_connections", "Open client connections.", registry=r)
        self.rebalances = Counter("groupcoord_rebalances", "Rebalances started, by reason.", ["reason"],
                                  registry=r)
        self.rebalance_seconds = Histogram("groupcoord_rebalance_duration_seconds", "Time from a rebalance "
                                           "starting to the group becoming stable.", buckets=_LATENCY_BUCKETS,
                                           registry=r)
        self.offset_commits = Counter("groupcoord_offset_commits", "Partition offsets committed durably.",
                                      registry=r)
        self.flush_seconds = Histogram("groupcoord_log_flush_latency_seconds", "Duration of one group-commit "
                                       "fsync.", buckets=_LATENCY_BUCKETS, registry=r)
        self.load_seconds = Histogram("groupcoord_partition_load_seconds", "Time to load one offsets "
                                      "partition at startup.", buckets=_LATENCY_BUCKETS, registry=r)
        self.groups = _GroupCollector()
        r.register(self.groups)  # type: ignore[arg-type]
        self._http = None
        self._by_api: dict[int, tuple[Counter, Histogram]] = {}  # labelled children, looked up once

    def _children(self, api_key: int) -> tuple[Counter, Histogram]:
        children = self._by_api.get(api_key)
        if children is None:
            name = api_name(api_key)
            children = self._by_api[api_key] = (self.requests.labels(name), self.latency.labels(name))
        return children

    def request_started(self, api_key: int) -> None:
        self._children(api_key)[0].inc()

    def request_done(self, api_key: int, seconds: float) -> None:
        self._children(api_key)[1].observe(seconds)

    def protocol_error(self, kind: str) -> None:
        self.errors.labels(kind).inc()

    def serve(self, host: str, port: int) -> int:
        """Start the /metrics HTTP server in a daemon thread; returns the bound port."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._http = server
        return server.server_address[1]

    def close(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
