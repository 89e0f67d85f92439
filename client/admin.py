"""AdminClient: describe the cluster, list/describe/delete groups, read and delete group offsets, topics.

Rules:
- Every result is a plain dataclass (the ``groupcoord groups ...`` CLI prints them); per-group and
  per-topic error codes are returned in the results, not raised, so one bad group does not hide the others.
  A request that fails as a whole (connection lost, timeout, a top-level error) raises.
- Group requests go to the group's coordinator, found with FindCoordinator (to the least-loaded node) and
  remembered per group. NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE forget it and look again;
  COORDINATOR_LOAD_IN_PROGRESS retries the same node; both after ``retry_backoff_ms``, until
  ``request_timeout_ms`` has passed, when the last error is returned (or raised for whole-request errors).
- ListGroups asks every node and merges the answers (each node lists the groups it coordinates); from v5
  each listing has its type ("classic" or "consumer"). A node answering COORDINATOR_LOAD_IN_PROGRESS or
  COORDINATOR_NOT_AVAILABLE (a shard still loading) is asked again after ``retry_backoff_ms`` until
  ``request_timeout_ms``, as Kafka's AdminClient retries them; then the error raises.
- KIP-848 "consumer" groups are described with ConsumerGroupDescribe (69): epochs, assignor and per member
  its epoch and assignment, topic names taken from the response (TopicName) or, for a topic it leaves
  unnamed, from Metadata by topic id (v10+), else shown as the id.
- Group configs (``describe_group_configs`` / ``alter_group_configs``: DescribeConfigs / IncrementalAlterConfigs
  of resource type GROUP 32): sent to the group's coordinator (groupcoord stores them with the group; its other
  nodes answer NOT_COORDINATOR), with the retries above; an error raises KafkaError.
- ``group_history``: a group's rebalances, newest first, from groupcoord's own DescribeGroups v5+ tagged field
  ``history`` (coordinator/core/rebalance_history.py); a coordinator that does not send it (Kafka, or
  DescribeGroups below v5) gives none. A KIP-848 consumer group's history comes the same way (DescribeGroups
  answers its id Dead, or GROUP_ID_NOT_FOUND from v6, with the history tag): its state and error are then
  ConsumerGroupDescribe's.
- ``offset_history``: a group's last commits per partition (``offsets.history.size``), newest first, from
  groupcoord's own DescribeGroups v5+ tagged field ``offset_history`` (asked for with our request tag
  ``include_offset_history``) (coordinator/core/offset_history.py); ``OffsetHistory.at(ms)`` is what the group had
  committed at that time per partition (the newest kept commit at or before it; a partition whose kept commits all
  came later is left out: the history does not reach back that far).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from client.cluster import Cluster, Node
from client.consumer_protocol import ConsumerProtocolError, TopicPartition, decode_assignment
from client.errors import KafkaConnectionError, KafkaError, RequestTimedOutError, check, error_for
from client.offsets import OFFSET_FETCH, OffsetAndMetadata, offset_fetch_body, parse_offset_fetch
from client.security import SecurityConfig
from protocol.errors import ErrorCode, error_name

LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS, CREATE_TOPICS, DELETE_TOPICS = 16, 15, 42, 19, 20
CONSUMER_GROUP_DESCRIBE, METADATA = 69, 3
DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS, OFFSET_DELETE = 32, 44, 47
GROUP_RESOURCE = 32  # ConfigResource.Type.GROUP (Kafka 4's group configs)
_RETRY_SAME = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
_RELOOKUP = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: list[Node]


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str | None  # None when the node is too old to say (ListGroups < v4)
    group_type: str | None = None  # "classic" / "consumer"; None when the node is too old to say (< v5)


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[TopicPartition, ...]  # decoded for protocol type "consumer", else ()


@dataclass(frozen=True, slots=True)
class WaitedMember:
    """A member a rebalancing group waits for (groupcoord's DescribeGroups extension), and what is missing."""

    member_id: str
    client_id: str
    client_host: str
    reason: str


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription]
    coordinator: Node | None
    error_code: int = 0
    # groupcoord's own (DescribeGroups v5+ tagged fields): who a rebalancing group waits for, since when (ms)
    waiting_since_ms: int | None = None
    waiting_for: tuple[WaitedMember, ...] = ()

    @property
    def error(self) -> str | None:
        return error_name(self.error_code) if self.error_code else None


@dataclass(frozen=True, slots=True)
class RebalanceEntry:
    """One recorded rebalance of a group (groupcoord's DescribeGroups extension, ``group.history.size``)."""

    seq: int
    generation: int
    start_ms: int
    end_ms: int  # -1: a consumer-protocol rebalance still reconciling
    trigger: str  # member-joined, member-left, session-expired, rebalance-timeout, leader-rejoined, ...
    member_id: str | None  # the member that triggered it, its client id and host, and what the client said
    client_id: str | None
    client_host: str | None
    reason: str | None
    protocol_type: str | None
    protocol: str | None
    leader: str | None
    members_before: int
    members_after: int
    joined: tuple[str, ...]
    left: tuple[str, ...]

    @property
    def duration_ms(self) -> int | None:
        """None while a consumer-protocol (KIP-848) rebalance is still reconciling (``end_ms`` -1)."""
        return None if self.end_ms < 0 else self.end_ms - self.start_ms


@dataclass(frozen=True, slots=True)
class GroupHistory:
    group_id: str
    state: str
    entries: list[RebalanceEntry]  # newest first
    coordinator: Node | None
    error_code: int = 0
    described_version: int = 0  # the DescribeGroups version: below 5 no history can come

    @property
    def error(self) -> str | None:
        return error_name(self.error_code) if self.error_code else None


@dataclass(frozen=True, slots=True)
class OffsetCommitEntry:
    """One kept commit of a partition (groupcoord's DescribeGroups extension, ``offsets.history.size``)."""

    seq: int
    offset: int
    commit_ms: int
    generation: int
    member_id: str
    client_id: str
    client_host: str


@dataclass(frozen=True, slots=True)
class OffsetHistory:
    group_id: str
    state: str
    partitions: dict[TopicPartition, list[OffsetCommitEntry]]  # each newest first
    coordinator: Node | None
    error_code: int = 0
    described_version: int = 0  # the DescribeGroups version: below 5 no history can come

    @property
    def error(self) -> str | None:
        return error_name(self.error_code) if self.error_code else None

    def at(self, ms: int) -> dict[TopicPartition, OffsetCommitEntry]:
        """Per partition, the newest kept commit at or before ``ms`` (module rules)."""
        out: dict[TopicPartition, OffsetCommitEntry] = {}
        for tp, entries in self.partitions.items():
            found = next((e for e in entries if e.commit_ms <= ms), None)
            if found is not None:
                out[tp] = found
        return out


@dataclass(frozen=True, slots=True)
class ConsumerMemberDescription:
    """A member of a KIP-848 consumer group (ConsumerGroupDescribe)."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    member_epoch: int
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[TopicPartition, ...]
    target_assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    """A KIP-848 consumer group (ConsumerGroupDescribe)."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: list[ConsumerMemberDescription]
    coordinator: Node | None
    error_code: int = 0
    error_message: str | None = None

    @property
    def error(self) -> str | None:
        if not self.error_code:
            return None
        return error_name(self.error_code) + (f": {self.error_message}" if self.error_message else "")


@dataclass(frozen=True, slots=True)
class GroupResult:
    """The outcome of an operation on one group (e.g. delete_groups)."""

    group_id: str
    error_code: int

    @property
    def error(self) -> str | None:
        return error_name(self.error_code) if self.error_code else None


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicResult:
    name: str
    error_code: int
    error_message: str | None = None

    @property
    def error(self) -> str | None:
        return error_name(self.error_code) if self.error_code else None


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    partitions: int
    is_internal: bool


class AdminClient:
    def __init__(self, bootstrap_servers: str | Iterable[str], *, client_id: str = "groupcoord-admin",
                 request_timeout_ms: int = 30000, retry_backoff_ms: int = 100,
                 security: SecurityConfig | None = None, **security_settings: Any) -> None:
        """``security`` or Kafka's security keywords (``security_protocol``, ``sasl_mechanism``, ...; see
        ``client.security``) secure every connection."""
        security = SecurityConfig.resolve(security, security_settings, "AdminClient")
        self.cluster = Cluster(bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms,
                               security=security)
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._coordinators: dict[str, Node] = {}

    def close(self) -> None:
        self.cluster.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ cluster
    def describe_cluster(self) -> ClusterDescription:
        self.cluster.refresh_metadata([])
        return ClusterDescription(self.cluster.cluster_id, self.cluster.controller_id,
                                  sorted(self.cluster.nodes.values(), key=lambda n: n.node_id))

    # ------------------------------------------------------------------ groups
    def list_groups(self, states: Iterable[str] | None = None) -> list[GroupListing]:
        wanted = None if states is None else list(states)
        self.cluster.refresh_metadata(None)
        found: dict[str, GroupListing] = {}
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        for node_id in sorted(self.cluster.nodes):
            while True:
                version, resp = self.cluster.connection(node_id).send(
                    LIST_GROUPS, {"states_filter": wanted or [], "types_filter": []})
                code = resp["error_code"]
                if (code not in _RETRY_SAME and code not in _RELOOKUP) or time.monotonic() >= deadline:
                    break
                time.sleep(self.retry_backoff_ms / 1000)  # a node still loading a shard: ask it again
            check(resp["error_code"])
            for g in resp["groups"]:
                state = g.get("group_state") if version >= 4 else None
                if wanted and version < 4:
                    continue  # the node cannot filter or tell the state: leave it out rather than guess
                found[g["group_id"]] = GroupListing(g["group_id"], g["protocol_type"], state,
                                                    g.get("group_type") if version >= 5 else None)
        return sorted(found.values(), key=lambda g: g.group_id)

    def describe_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        out: list[GroupDescription] = []
        for gid in group_ids:
            _, resp, node = self._group_request(
                gid, DESCRIBE_GROUPS, {"groups": [gid], "include_authorized_operations": False},
                lambda r: r["groups"][0]["error_code"] if r["groups"] else 0)
            g = resp["groups"][0]
            members = [_member(m, g["protocol_type"]) for m in g["members"]]
            since = g.get("waiting_since_ms", -1)
            waited = tuple(WaitedMember(w["member_id"], w["client_id"], w["client_host"], w["reason"])
                           for w in g.get("waiting_for") or ())
            out.append(GroupDescription(g["group_id"], g["group_state"], g["protocol_type"], g["protocol_data"],
                                        members, node, g["error_code"], since if since >= 0 else None, waited))
        return out

    def group_history(self, group_id: str) -> GroupHistory:
        """The group's recorded rebalances, newest first (module rules)."""
        version, resp, node = self._group_request(
            group_id, DESCRIBE_GROUPS, {"groups": [group_id], "include_authorized_operations": False},
            lambda r: r["groups"][0]["error_code"] if r["groups"] else 0)
        g = resp["groups"][0]
        state, code = g["group_state"], g["error_code"]
        if state == "Dead" and code in (0, ErrorCode.GROUP_ID_NOT_FOUND):  # a KIP-848 group? (module rules)
            try:
                cg = self.describe_consumer_groups([group_id])[0]
            except KafkaError:  # a node without ConsumerGroupDescribe: DescribeGroups' answer stands
                cg = None
            if cg is not None and not cg.error_code:
                state, code = cg.state, 0
        entries = [RebalanceEntry(e["seq"], e["generation"], e["start_ms"], e["end_ms"], e["trigger"], e["member_id"],
                                  e["client_id"], e["client_host"], e["reason"], e["protocol_type"], e["protocol"],
                                  e["leader"], e["members_before"], e["members_after"], tuple(e["joined"]),
                                  tuple(e["left"]))
                   for e in g.get("history") or ()]
        return GroupHistory(g["group_id"], state, entries, node, code, version)

    def offset_history(self, group_id: str) -> OffsetHistory:
        """The group's kept commits per partition, newest first (module rules)."""
        version, resp, node = self._group_request(
            group_id, DESCRIBE_GROUPS, {"groups": [group_id], "include_authorized_operations": False,
                                        "include_offset_history": True},
            lambda r: r["groups"][0]["error_code"] if r["groups"] else 0)
        g = resp["groups"][0]
        partitions = {TopicPartition(t["name"], p["partition_index"]): [
            OffsetCommitEntry(e["seq"], e["committed_offset"], e["commit_timestamp"], e["generation"], e["member_id"],
                              e["client_id"], e["client_host"]) for e in p["entries"]]
            for t in g.get("offset_history") or () for p in t["partitions"]}
        return OffsetHistory(g["group_id"], g["group_state"], partitions, node, g["error_code"], version)

    def describe_consumer_groups(self, group_ids: Iterable[str]) -> list[ConsumerGroupDescription]:
        """KIP-848 groups, one ConsumerGroupDescribe per group (to its coordinator). A node without API 69
        raises UnsupportedVersionError."""
        out: list[ConsumerGroupDescription] = []
        names: dict[Any, str] | None = None
        for gid in group_ids:
            _, resp, node = self._group_request(
                gid, CONSUMER_GROUP_DESCRIBE, {"group_ids": [gid], "include_authorized_operations": False},
                lambda r: r["groups"][0]["error_code"] if r["groups"] else 0)
            g = resp["groups"][0]
            unnamed = {tp["topic_id"] for m in g.get("members") or () for a in ("assignment", "target_assignment")
                       for tp in m[a]["topic_partitions"] if not tp["topic_name"]}
            if unnamed and names is None:
                names = self._topic_names_by_id()
            members = [ConsumerMemberDescription(
                m["member_id"], m["instance_id"], m["rack_id"], m["client_id"], m["client_host"], m["member_epoch"],
                tuple(m["subscribed_topic_names"]), m["subscribed_topic_regex"],
                _topic_partitions(m["assignment"], names), _topic_partitions(m["target_assignment"], names))
                for m in g.get("members") or ()]
            out.append(ConsumerGroupDescription(
                g["group_id"], g.get("group_state") or "", g.get("group_epoch", -1), g.get("assignment_epoch", -1),
                g.get("assignor_name") or "", members, node, g["error_code"], g.get("error_message")))
        return out

    def _topic_names_by_id(self) -> dict[Any, str]:
        """Topic id -> name from a Metadata of every topic (v10+ name topics by id; empty before)."""
        _, resp = self.cluster.request_any(
            METADATA, lambda v: {"topics": None if v >= 1 else [], "allow_auto_topic_creation": False})
        return {t["topic_id"]: t["name"] for t in resp["topics"] if t.get("topic_id") is not None and t["name"]}

    def list_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None = None
                           ) -> dict[TopicPartition, OffsetAndMetadata]:
        parts = None if partitions is None else [TopicPartition(*tp) for tp in partitions]
        version, resp, _ = self._group_request(
            group_id, OFFSET_FETCH, offset_fetch_body(group_id, parts),
            lambda r: _offset_fetch_error(r, group_id))
        group_error, offsets, errors = parse_offset_fetch(version, resp, group_id)
        check(group_error)
        if errors:
            tp, code = next(iter(errors.items()))
            raise error_for(code, f"{tp}")
        return offsets

    def delete_groups(self, group_ids: Iterable[str]) -> list[GroupResult]:
        results: list[GroupResult] = []
        for gid in group_ids:
            try:
                _, resp, _ = self._group_request(gid, DELETE_GROUPS, {"groups_names": [gid]},
                                                 lambda r: r["results"][0]["error_code"] if r["results"] else 0)
            except KafkaError as e:
                code = getattr(e, "code", None)
                if code is None:
                    raise
                results.append(GroupResult(gid, code))
                continue
            entry = next((r for r in resp["results"] if r["group_id"] == gid), None)
            results.append(GroupResult(gid, entry["error_code"] if entry else ErrorCode.UNKNOWN_SERVER_ERROR))
        return results

    def delete_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """OffsetDelete (KIP-496): each partition's error code (GROUP_SUBSCRIBED_TO_TOPIC, ...; 0 = deleted or
        nothing to delete); a group-level error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP) raises KafkaError."""
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp[0], []).append(tp[1])
        body = {"group_id": group_id, "topics": [
            {"name": t, "partitions": [{"partition_index": p} for p in parts]} for t, parts in by_topic.items()]}
        _, resp, _ = self._group_request(group_id, OFFSET_DELETE, body, lambda r: r["error_code"])
        check(resp["error_code"], group_id)
        return {TopicPartition(t["name"], p["partition_index"]): p["error_code"]
                for t in resp["topics"] for p in t["partitions"]}

    # ------------------------------------------------------------------ topics
    def create_topics(self, topics: Iterable[NewTopic] | Mapping[str, int], *, timeout_ms: int = 30000,
                      validate_only: bool = False) -> list[TopicResult]:
        new = ([NewTopic(n, c) for n, c in topics.items()] if isinstance(topics, Mapping) else list(topics))
        body = {"topics": [{"name": t.name, "num_partitions": t.num_partitions,
                            "replication_factor": t.replication_factor, "assignments": [],
                            "configs": [{"name": k, "value": v} for k, v in t.configs.items()]} for t in new],
                "timeout_ms": timeout_ms, "validate_only": validate_only}
        _, resp = self._controller().send(CREATE_TOPICS, body, timeout_ms=timeout_ms + self.request_timeout_ms)
        return [TopicResult(t["name"], t["error_code"], t.get("error_message")) for t in resp["topics"]]

    def delete_topics(self, names: Iterable[str], *, timeout_ms: int = 30000) -> list[TopicResult]:
        names = list(names)
        body = {"topic_names": names, "topics": [{"name": n} for n in names], "timeout_ms": timeout_ms}
        _, resp = self._controller().send(DELETE_TOPICS, body, timeout_ms=timeout_ms + self.request_timeout_ms)
        return [TopicResult(r["name"], r["error_code"], r.get("error_message")) for r in resp["responses"]]

    def describe_topic_configs(self, name: str, *, synonyms: bool = False) -> list[dict[str, Any]]:
        """A topic's configs (name, value, config_source, read_only, ...); KafkaError for an error."""
        body = {"resources": [{"resource_type": 2, "resource_name": name, "configuration_keys": None}],
                "include_synonyms": synonyms, "include_documentation": False}
        _, resp = self._controller().send(DESCRIBE_CONFIGS, body)
        (r,) = resp["results"]
        if r["error_code"]:
            raise KafkaError(f"{name}: {r['error_message'] or error_name(r['error_code'])}")
        return list(r["configs"])

    def alter_topic_configs(self, name: str, set_configs: Mapping[str, str] | None = None,
                            delete: Iterable[str] = (), *, validate_only: bool = False) -> None:
        """IncrementalAlterConfigs SET and DELETE on one topic; KafkaError for an error."""
        ops = [{"name": k, "config_operation": 0, "value": v} for k, v in (set_configs or {}).items()]
        ops += [{"name": k, "config_operation": 1, "value": None} for k in delete]
        body = {"resources": [{"resource_type": 2, "resource_name": name, "configs": ops}],
                "validate_only": validate_only}
        _, resp = self._controller().send(INCREMENTAL_ALTER_CONFIGS, body)
        (r,) = resp["responses"]
        if r["error_code"]:
            raise KafkaError(f"{name}: {r['error_message'] or error_name(r['error_code'])}")

    def describe_group_configs(self, group_id: str, *, synonyms: bool = False) -> list[dict[str, Any]]:
        """A group's configs (name, value, config_source: 8 set for the group, 5 the server's); KafkaError for an
        error."""
        body = {"resources": [{"resource_type": GROUP_RESOURCE, "resource_name": group_id,
                               "configuration_keys": None}], "include_synonyms": synonyms,
                "include_documentation": False}
        _, resp, _ = self._group_request(group_id, DESCRIBE_CONFIGS, body, lambda r: r["results"][0]["error_code"])
        (r,) = resp["results"]
        if r["error_code"]:
            raise KafkaError(f"{group_id}: {r['error_message'] or error_name(r['error_code'])}")
        return list(r["configs"])

    def alter_group_configs(self, group_id: str, set_configs: Mapping[str, str] | None = None,
                            delete: Iterable[str] = (), *, validate_only: bool = False) -> None:
        """IncrementalAlterConfigs SET and DELETE on one group's configs; KafkaError for an error."""
        ops = [{"name": k, "config_operation": 0, "value": v} for k, v in (set_configs or {}).items()]
        ops += [{"name": k, "config_operation": 1, "value": None} for k in delete]
        body = {"resources": [{"resource_type": GROUP_RESOURCE, "resource_name": group_id, "configs": ops}],
                "validate_only": validate_only}
        _, resp, _ = self._group_request(group_id, INCREMENTAL_ALTER_CONFIGS, body,
                                         lambda r: r["responses"][0]["error_code"])
        (r,) = resp["responses"]
        if r["error_code"]:
            raise KafkaError(f"{group_id}: {r['error_message'] or error_name(r['error_code'])}")

    def list_topics(self) -> dict[str, TopicDescription]:
        self.cluster.refresh_metadata(None)
        return {n: TopicDescription(n, len(t.partitions), t.is_internal)
                for n, t in sorted(self.cluster.topics.items())}

    # ------------------------------------------------------------------ routing
    def _controller(self) -> Any:
        self.cluster.refresh_metadata(None)
        if self.cluster.controller_id in self.cluster.nodes:
            return self.cluster.connection(self.cluster.controller_id)
        return self.cluster.least_loaded_connection()

    def _coordinator(self, group_id: str, deadline: float) -> Node:
        node = self._coordinators.get(group_id)
        while node is None:
            try:
                node = self.cluster.find_coordinator(group_id)
            except (KafkaError) as e:
                if not e.retriable or time.monotonic() >= deadline:
                    raise
                time.sleep(self.retry_backoff_ms / 1000)
        self._coordinators[group_id] = node
        return node

    def _group_request(self, group_id: str, api_key: int, body: Any, error_of: Callable[[dict[str, Any]], int]
                       ) -> tuple[int, dict[str, Any], Node]:
        """Send to the group's coordinator, retrying coordinator moves and loading (module rules)."""
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        while True:
            node = self._coordinator(group_id, deadline)
            try:
                version, resp = self.cluster.coordinator_connection(node).send(api_key, body)
            except (KafkaConnectionError, RequestTimedOutError):
                self._coordinators.pop(group_id, None)
                if time.monotonic() >= deadline:
                    raise
                time.sleep(self.retry_backoff_ms / 1000)
                continue
            code = error_of(resp)
            if code not in _RETRY_SAME and code not in _RELOOKUP:
                return version, resp, node
            if code in _RELOOKUP:
                self._coordinators.pop(group_id, None)
            if time.monotonic() >= deadline:
                return version, resp, node
            time.sleep(self.retry_backoff_ms / 1000)


def _offset_fetch_error(resp: dict[str, Any], group_id: str) -> int:
    if resp.get("groups"):
        return next((g["error_code"] for g in resp["groups"] if g["group_id"] == group_id), 0)
    return resp.get("error_code", 0)


def _topic_partitions(a: dict[str, Any], names: Mapping[Any, str] | None) -> tuple[TopicPartition, ...]:
    """A ConsumerGroupDescribe assignment as sorted topic-partitions (module rules for the names)."""
    return tuple(sorted(TopicPartition(tp["topic_name"] or (names or {}).get(tp["topic_id"]) or str(tp["topic_id"]), p)
                        for tp in a["topic_partitions"] for p in tp["partitions"]))


def _member(m: dict[str, Any], protocol_type: str) -> MemberDescription:
    assignment: tuple[TopicPartition, ...] = ()
    if protocol_type == "consumer" and m["member_assignment"]:
        try:
            assignment = decode_assignment(m["member_assignment"]).assigned_partitions
        except ConsumerProtocolError:
            assignment = ()
    return MemberDescription(m["member_id"], m.get("group_instance_id"), m["client_id"], m["client_host"],
                             assignment)
