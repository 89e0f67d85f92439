"""Prometheus metrics, in a registry of our own, served over HTTP on their own port.

Rules:
- Every metric is declared here, named ``groupcoord_*`` with a unit suffix, and documented.
- Request counts and latencies are labelled by Kafka's API name, never by anything a client chooses (group
  ids, client ids), so a client cannot grow the label set.
- Gauges that describe groups are computed at scrape time from a callback the runtime installs, so the
  request path pays nothing for them.
- Request counts and latency histograms are plain per-API integer lists on the request path (one dict
  lookup, one bisect, two adds: prometheus-client's locked children cost more than a whole hot-path
  request) and are exported at scrape time, from a copy, with +Inf equal to the count of observations.
- Cluster metrics (issue #20) come from a callback the replication layer installs (``cluster.source``) and
  are computed at scrape time. In single-node mode there is none and they are ABSENT, not 0: a node with
  no replicas has no replication health to report, and a 0 would read as "checked, all in sync". In
  cluster mode every series is always there (0 included), so dashboards have data:
  ``groupcoord_under_replicated_partitions`` (led partitions whose ISR is smaller than their replicas,
  Kafka's UnderReplicatedPartitions), ``groupcoord_offline_partitions`` (partitions with no live leader,
  counted by the controller, 0 on other nodes: sum over nodes), ``groupcoord_active_controllers`` (1 on
  the controller, else 0: the sum over nodes is 1), ``groupcoord_isr_shrinks_total`` /
  ``groupcoord_isr_expands_total`` (changes of a led partition's ISR), ``groupcoord_leader_elections_total``
  (leaders this node elected as controller), ``groupcoord_controller_changes_total`` (controller changes
  this node saw), and ``groupcoord_replication_lag_messages{topic,partition,follower}`` (offsets each
  follower of a partition this node leads is behind its log end). Lag labels are bounded by the
  partitions this node leads times their replicas: topics exist only once created in the cluster, never
  from what a request merely names.
- ``groupcoord_offsets_expiring_within_day`` (``groups.expiring``, set by the lag sampler): absent until its first
  computation, then the offsets the next day's retention checks would remove.
- Transactions (``transactions.source``, single node): ``groupcoord_transactions_ongoing``,
  ``groupcoord_transactions_total{result}``, ``groupcoord_transactions_timed_out_total`` and
  ``groupcoord_partition_lso_lag_records{topic,partition}`` (only partitions with an open transaction: the
  label set is bounded by the hosted partitions).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from coordinator.core.consumer_group.model import GroupState as ConsumerGroupState
from coordinator.core.group import GroupState
from protocol.messages import ALL

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


def api_name(api_key: int) -> str:
    schema = ALL.get(api_key)
    return schema.name if schema else "Unknown"


GROUP_STATES = tuple(state.value for state in GroupState)
CONSUMER_GROUP_STATES = tuple(state.value for state in ConsumerGroupState)


class _GroupCollector:
    def __init__(self) -> None:
        self.source: Callable[[], dict[str, int]] | None = None
        self.consumer: Callable[[], dict[str, int]] | None = None  # KIP-848 groups by state
        self.members: Callable[[], int] | None = None
        # (committed offsets held, offsets.max.committed, commits refused by it so far)
        self.offsets: Callable[[], tuple[int, int, int]] | None = None
        self.stuck: Callable[[], int] | None = None  # runtime/stuck_groups.py
        # runtime/lag_sampler.py: offsets the next day's retention checks would remove (None: not computed yet)
        self.expiring: Callable[[], int | None] | None = None

    def collect(self):  # type: ignore[no-untyped-def]
        g = GaugeMetricFamily("groupcoord_groups", "Classic-protocol groups by state.", labels=["state"])
        counts = dict.fromkeys(GROUP_STATES, 0)  # every state, 0 included: a dashboard always has a series
        counts.update(self.source() if self.source else {})
        for state, n in sorted(counts.items()):
            g.add_metric([state], n)
        yield g
        c = GaugeMetricFamily("groupcoord_consumer_groups", "Consumer-protocol (KIP-848) groups by state.",
                              labels=["state"])
        counts = dict.fromkeys(CONSUMER_GROUP_STATES, 0)
        counts.update(self.consumer() if self.consumer else {})
        for state, n in sorted(counts.items()):
            c.add_metric([state], n)
        yield c
        yield GaugeMetricFamily("groupcoord_group_members", "Members of all groups.",
                                value=self.members() if self.members else 0)
        held, bound, refused = self.offsets() if self.offsets else (0, 0, 0)
        yield GaugeMetricFamily("groupcoord_offsets_committed", "Committed offsets held in memory (every "
                                "loaded offsets partition).", value=held)
        yield GaugeMetricFamily("groupcoord_offsets_committed_max", "offsets.max.committed: past it, groups "
                                "without offsets get POLICY_VIOLATION for their commits.", value=bound)
        yield CounterMetricFamily("groupcoord_offsets_refused", "Partition commits refused by "
                                  "offsets.max.committed.", value=refused)
        yield GaugeMetricFamily("groupcoord_groups_stuck", "Groups waiting for members in a rebalance longer "
                                "than group.stuck.threshold.ms (default: twice their largest rebalance timeout).",
                                value=self.stuck() if self.stuck else 0)
        expiring = self.expiring() if self.expiring else None
        if expiring is not None:  # absent until the sampler's first computation
            yield GaugeMetricFamily("groupcoord_offsets_expiring_within_day", "Committed offsets the retention "
                                    "checks of the next 24 hours would remove if nothing changed (per-group "
                                    "offsets.retention.minutes included; computed every metrics.lag.interval.ms).",
                                    value=expiring)


class _ClusterCollector:
    """Replication and controller metrics; nothing at all while ``source`` is None (single-node mode)."""

    def __init__(self) -> None:
        self.source: Callable[[], dict[str, Any]] | None = None

    def collect(self):  # type: ignore[no-untyped-def]
        if self.source is None:
            return
        s = self.source()
        yield GaugeMetricFamily("groupcoord_under_replicated_partitions", "Partitions this node leads whose "
                                "ISR is smaller than their replica set.", value=s["under_replicated"])
        yield GaugeMetricFamily("groupcoord_offline_partitions", "Partitions with no live leader (counted by "
                                "the controller; 0 on other nodes).", value=s["offline"])
        yield GaugeMetricFamily("groupcoord_active_controllers", "1 on the cluster's controller, else 0.",
                                value=s["controller"])
        yield CounterMetricFamily("groupcoord_isr_shrinks", "ISR changes of a partition this node leads "
                                  "that removed a replica.", value=s["isr_shrinks"])
        yield CounterMetricFamily("groupcoord_isr_expands", "ISR changes of a partition this node leads "
                                  "that added a replica.", value=s["isr_expands"])
        yield CounterMetricFamily("groupcoord_leader_elections", "Partition leaders elected by this node as "
                                  "controller (first leaders, failovers, controlled-shutdown moves).",
                                  value=s["leader_elections"])
        yield CounterMetricFamily("groupcoord_controller_changes", "Controller changes this node saw.",
                                  value=s["controller_changes"])
        g = GaugeMetricFamily("groupcoord_replication_lag_messages", "Offsets a follower is behind the log "
                              "end of a partition this node leads.", labels=["topic", "partition", "follower"])
        for topic, partition, follower, lag in s["lag"]:
            g.add_metric([topic, str(partition), str(follower)], lag)
        yield g


class _LagCollector:
    """Consumer lag per group and topic (issue #37), from the runtime's ``lag_sampler`` (its latest
    ``LagSeries``, read at scrape time). Group labels are bounded by ``metrics.lag.max.groups`` (the rest is
    ``group="_other"``); topics are only those this node hosts. Absent until the first computation."""

    def __init__(self) -> None:
        self.source: Callable[[], Any] | None = None

    def collect(self):  # type: ignore[no-untyped-def]
        latest = self.source() if self.source is not None else None
        if latest is None:
            return
        rec = GaugeMetricFamily("groupcoord_group_lag_records", "Records a group has not consumed yet per topic: "
                                "log end (high watermark) minus committed offset, summed over the partitions "
                                "this node hosts.", labels=["group", "topic"])
        for (group, topic), n in sorted(latest.records.items()):
            rec.add_metric([group, topic], n)
        yield rec
        sec = GaugeMetricFamily("groupcoord_group_lag_seconds", "Age of the oldest record a group has not "
                                "consumed yet per topic (now minus its timestamp; 0 when caught up).",
                                labels=["group", "topic"])
        for (group, topic), v in sorted(latest.seconds.items()):
            sec.add_metric([group, topic], v)
        yield sec
        if latest.partition_records:
            prec = GaugeMetricFamily("groupcoord_group_partition_lag_records", "Records a group has not consumed "
                                     "yet per partition (metrics.lag.per.partition).",
                                     labels=["group", "topic", "partition"])
            for (group, topic, p), n in sorted(latest.partition_records.items()):
                prec.add_metric([group, topic, str(p)], n)
            yield prec
            psec = GaugeMetricFamily("groupcoord_group_partition_lag_seconds", "Age of the oldest record a group "
                                     "has not consumed yet per partition (metrics.lag.per.partition).",
                                     labels=["group", "topic", "partition"])
            for (group, topic, p), v in sorted(latest.partition_seconds.items()):
                psec.add_metric([group, topic, str(p)], v)
            yield psec


class _GroupCommitCollector:
    """groupcoord_group_offset_commits_total{group}: partition offsets committed durably per group, counted on the
    commit path (one dict update). Bounded: the first ``max_groups`` groups seen since the start get a label of
    their own, the others (and a group named "_other") count under group="_other"; a counter's label set never
    changes, so a group keeps its series for the life of the process."""

    OTHER = "_other"

    def __init__(self) -> None:
        self.max_groups = 1000
        self.counts: dict[str, int] = {}
        self.other = 0

    def add(self, group: str, n: int = 1) -> None:
        counts = self.counts
        if group in counts:
            counts[group] += n
        elif len(counts) < self.max_groups and group != self.OTHER:
            counts[group] = n
        else:
            self.other += n

    def collect(self):  # type: ignore[no-untyped-def]
        counts, other = self.counts.copy(), self.other  # a copy: the trio thread keeps counting
        if not counts and not other:
            return
        c = CounterMetricFamily("groupcoord_group_offset_commits", "Partition offsets committed durably, by group "
                                "(at most metrics.lag.max.groups groups, the first seen; the rest under "
                                "group=\"_other\").", labels=["group"])
        for group, n in sorted(counts.items()):
            c.add_metric([group], n)
        if other:
            c.add_metric([self.OTHER], other)
        yield c


class _TxnCollector:
    """Transactions (#38), from ``source`` (installed by the transaction service; absent without it): open
    transactions, decisions by result, timeout aborts, and per partition with an open transaction how many
    offsets read_committed consumers cannot see yet (high watermark minus LSO)."""

    def __init__(self) -> None:
        self.source: Callable[[], tuple[int, int, int, int, list[tuple[str, int, int]]]] | None = None

    def collect(self):  # type: ignore[no-untyped-def]
        if self.source is None:
            return
        ongoing, commits, aborts, timed_out, lags = self.source()
        yield GaugeMetricFamily("groupcoord_transactions_ongoing", "Transactions begun and not yet decided.",
                                value=ongoing)
        c = CounterMetricFamily("groupcoord_transactions", "Transactions decided (prepared), by result.",
                                labels=["result"])
        c.add_metric(["commit"], commits)
        c.add_metric(["abort"], aborts)
        yield c
        yield CounterMetricFamily("groupcoord_transactions_timed_out", "Transactions aborted at their timeout.",
                                  value=timed_out)
        g = GaugeMetricFamily("groupcoord_partition_lso_lag_records", "Offsets between a partition's high "
                              "watermark and its last stable offset (partitions with an open transaction).",
                              labels=["topic", "partition"])
        for topic, partition, lag in lags:
            g.add_metric([topic, str(partition)], lag)
        yield g


class _RequestCollector:
    """``groupcoord_requests_total`` and ``groupcoord_request_latency_seconds``, by API."""

    def __init__(self) -> None:
        self.started: dict[int, int] = {}
        self.latency: dict[int, list[float]] = {}  # per API: one count per bucket (+Inf last), then the sum
        self._bounds = [floatToGoString(b) for b in _LATENCY_BUCKETS] + ["+Inf"]

    def observe(self, api_key: int, seconds: float, n: int = 1) -> None:
        row = self.latency.get(api_key)
        if row is None:
            row = self.latency[api_key] = [0] * (len(_LATENCY_BUCKETS) + 2)
        row[bisect_left(_LATENCY_BUCKETS, seconds)] += n
        row[-1] += seconds * n

    def collect(self):  # type: ignore[no-untyped-def]
        started = sorted(dict(self.started).items())  # copies: the trio thread keeps counting meanwhile
        rows = sorted((k, list(v)) for k, v in dict(self.latency).items())
        c = CounterMetricFamily("groupcoord_requests", "Requests handled, by API.", labels=["api"])
        for api_key, n in started:
            c.add_metric([api_name(api_key)], n)
        yield c
        h = HistogramMetricFamily("groupcoord_request_latency_seconds", "Time from request read to response "
                                  "ready, by API.", labels=["api"])
        for api_key, row in rows:
            cumulative, buckets = 0, []
            for bound, n in zip(self._bounds, row[:-1], strict=True):
                cumulative += n
                buckets.append((bound, cumulative))
            h.add_metric([api_name(api_key)], buckets, sum_value=row[-1])
        yield h


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = _RequestCollector()
        r.register(self.requests)  # type: ignore[arg-type]
        self.errors = Counter("groupcoord_protocol_errors", "Connections closed for protocol violations, by "
                              "kind.", ["kind"], registry=r)
        self.connections = Gauge("groupcoord_connections", "Open client connections.", registry=r)
        self.connections_closed = Counter("groupcoord_connections_closed", "Connections refused or closed by "
                                          "a limit, by reason (max_connections, max_connections_per_ip, idle).",
                                          ["reason"], registry=r)
        self.rebalances = Counter("groupcoord_rebalances", "Rebalances started, by reason.", ["reason"],
                                  registry=r)
        self.rebalance_seconds = Histogram("groupcoord_rebalance_duration_seconds", "Time from a rebalance "
                                           "starting to the group becoming stable.", buckets=_LATENCY_BUCKETS,
                                           registry=r)
        self.assignment_seconds = Histogram("groupcoord_consumer_group_assignment_seconds", "Time the server-side "
                                            "assignor took to compute a consumer-protocol group's target "
                                            "assignment.", buckets=_LATENCY_BUCKETS, registry=r)
        self.offset_commits = Counter("groupcoord_offset_commits", "Partition offsets committed durably.",
                                      registry=r)
        self.handed_answers = Counter("groupcoord_answers_by_fsync_child", "Answers the fsync child wrote in "
                                      "full to their clients once durable (log.journal.fsync.process.answers).",
                                      registry=r)
        self.fetch_sendfile_bytes = Counter("groupcoord_fetch_sendfile_bytes", "Fetch answer bytes sent "
                                            "straight from segment files by sendfile (zero-copy: connections "
                                            "without TLS, stored ranges of at least 64 KiB).", registry=r)
        self.flush_seconds = Histogram("groupcoord_log_flush_latency_seconds", "Duration of one group-commit "
                                       "fsync (in cluster mode also a follower's journal fsync).",
                                       buckets=_LATENCY_BUCKETS, registry=r)
        self.load_seconds = Histogram("groupcoord_partition_load_seconds", "Time to load one offsets "
                                      "partition at startup.", buckets=_LATENCY_BUCKETS, registry=r)
        self.authentications = Counter("groupcoord_authentications", "SASL authentications by listener, "
                                       "mechanism and result (succeeded, failed, reauthenticated).",
                                       ["listener", "mechanism", "result"], registry=r)
        self.denials = Counter("groupcoord_authorization_denied", "Requests denied something by "
                                            "the authorizer, by API and resource type.", ["api", "resource_type"],
                                            registry=r)
        self.listener_connections = Gauge("groupcoord_listener_connections", "Open client connections per "
                                          "listener.", ["listener"], registry=r)
        self.groups = _GroupCollector()
        r.register(self.groups)  # type: ignore[arg-type]
        self.cluster = _ClusterCollector()
        r.register(self.cluster)  # type: ignore[arg-type]
        self.lag = _LagCollector()
        r.register(self.lag)  # type: ignore[arg-type]
        self.group_commits = _GroupCommitCollector()
        r.register(self.group_commits)  # type: ignore[arg-type]
        self.transactions = _TxnCollector()
        r.register(self.transactions)  # type: ignore[arg-type]
        self._http = None

    def request_started(self, api_key: int, n: int = 1) -> None:
        started = self.requests.started
        started[api_key] = started.get(api_key, 0) + n

    def request_done(self, api_key: int, seconds: float, n: int = 1) -> None:
        """``n`` requests of ``api_key`` each took ``seconds`` from read to response ready."""
        self.requests.observe(api_key, seconds, n)

    def authorization_denied(self, api_key: int, resource_type: str) -> None:
        self.denials.labels(api_name(api_key), resource_type).inc()

    def authentication(self, listener: str, mechanism: str, result: str) -> None:
        self.authentications.labels(listener, mechanism, result).inc()

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
