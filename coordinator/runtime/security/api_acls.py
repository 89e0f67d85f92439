"""What each API needs from the authorizer, and Kafka's answer when it is denied (KafkaApis, AclApis).

Rules:
- ``admit(request, slot, acl)`` runs before a request's handler, only when an authorizer is on. It either
  answers the whole request itself with Kafka's error (and returns False), or lets it through (True),
  possibly with the resources the principal may not touch cut out of the request and ``slot.merge`` set to
  put Kafka's per-resource error for them back into the handler's answer (as KafkaApis splits a request
  into authorized and unauthorized parts and merges the answers). Handlers never see what was denied.
- ``acl(operation, resource_type, name, quiet=False)`` is the connection's decision (``authorization.py``:
  the principal, its host, super users, the ACLs, a per-connection cache); ``quiet`` marks the silent
  filtering of Metadata, ListGroups and an all-topics OffsetFetch, which is neither counted nor audited.
- Codes: TOPIC_AUTHORIZATION_FAILED 29, GROUP_AUTHORIZATION_FAILED 30, CLUSTER_AUTHORIZATION_FAILED 31,
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED 53. A denied topic's answer never depends on whether it exists
  (29 either way), so denial hides existence; Metadata and ListGroups and an all-topics OffsetFetch drop
  what the principal may not describe, silently.
- The table (Kafka 3.9): Produce Write/Topic; Fetch Read/Topic (a follower: ClusterAction/Cluster);
  ListOffsets Describe/Topic; Metadata Describe/Topic (auto-creating a missing topic: Create on Cluster or
  the Topic); OffsetCommit Read/Group then Read/Topic; OffsetFetch Describe/Group then Describe/Topic;
  FindCoordinator Describe/Group; JoinGroup, Heartbeat, LeaveGroup, SyncGroup Read/Group; DescribeGroups
  Describe/Group; ListGroups Describe/Cluster or per group; CreateTopics Create/Cluster or Create/Topic;
  DeleteTopics Delete/Topic; InitProducerId IdempotentWrite/Cluster or Write on some Topic;
  OffsetForLeaderEpoch ClusterAction/Cluster or Describe/Topic; DescribeConfigs DescribeConfigs on the
  Topic (29), the Group (30, Kafka 4's group configs) or Cluster (31); AlterConfigs and
  IncrementalAlterConfigs AlterConfigs likewise;
  CreatePartitions Alter/Topic; DeleteGroups Delete/Group; OffsetDelete Delete/Group then Read/Topic;
  DescribeAcls Describe/Cluster, CreateAcls/DeleteAcls Alter/Cluster; Describe/AlterUserScramCredentials
  Describe/Alter on Cluster. ApiVersions, SaslHandshake and SaslAuthenticate need nothing.
  Transactions: a TransactionalId needs Write for InitProducerId, Produce (with a transactional id),
  AddPartitionsToTxn (then Write per topic: 29, the rest OPERATION_NOT_ATTEMPTED), AddOffsetsToTxn (then Read
  on the group), EndTxn and TxnOffsetCommit (then Read on the group, Read per topic); Describe for
  FindCoordinator key type 1, DescribeTransactions (per id) and ListTransactions (silent filter); all 53.
  DescribeProducers Read/Topic; WriteTxnMarkers ClusterAction/Cluster (31 per partition).
  Kafka 4.0 (KafkaApis): ConsumerGroupHeartbeat Read/Group (30), then Describe on every subscribed topic
  name (29 when one is denied); ConsumerGroupDescribe Describe on each Group (per group 30).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from protocol.acl_types import CLUSTER_RESOURCE_NAME
from protocol.acl_types import AclOperation as Op
from protocol.acl_types import ResourceType as Res
from protocol.errors import ErrorCode
from protocol.messages.fetch import empty_partition

if TYPE_CHECKING:
    from coordinator.runtime.dispatch import Slot
    from protocol.codec import Request

Acl = Callable[..., bool]  # (operation, resource type, name, quiet=False) -> allowed; quiet: a filter's check
TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED = (ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                              ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                              ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER, CONFIG_GROUP = 2, 4, 8, 32  # DescribeConfigs resource types


class Context:
    """What some rules need besides the decision, for the request's connection: topic names by id (Fetch
    v13+, DeleteTopics v6+), whether a topic exists (Metadata's auto-creation), the operations bitfield
    (authorized_operations), and whether some resource of a type allows an operation (InitProducerId).
    One small object per checked request; nothing is computed until a rule asks."""

    __slots__ = ("authorizer", "exists", "host", "principal", "topic_name")

    def __init__(self, authorizer: Any, principal: str, host: str,
                 topic_name: Callable[[Any], str | None], exists: Callable[[str], bool]) -> None:
        self.authorizer = authorizer
        self.principal = principal
        self.host = host
        self.topic_name = topic_name  # a topic id's name (the topic service's cache), None when unknown
        self.exists = exists

    def operations(self, resource_type: int, name: str) -> int:
        return self.authorizer.authorized_operations(self.principal, self.host, resource_type, name)

    def any_allowed(self, operation: int, resource_type: int) -> bool:
        return self.authorizer.authorize_by_resource_type(self.principal, self.host, operation, resource_type)


Rule = Callable[["Request", "Slot", Acl, Context], bool]


def admit(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    rule = RULES.get(request.api_key)
    return True if rule is None else rule(request, slot, acl, ctx)


def _cluster(acl: Acl, op: int) -> bool:
    return acl(op, Res.CLUSTER, CLUSTER_RESOURCE_NAME)


def _split(items: list[Any], key: str | None, allowed: Callable[[str], bool]) -> tuple[list[Any], list[Any]]:
    """(allowed items, the others) in request order, each checked (and audited) once: linear in the request
    (``key``: the field naming an item; None: the items are the names)."""
    kept, denied = [], []
    for item in items:
        (kept if allowed(item if key is None else item[key]) else denied).append(item)
    return kept, denied


def _read_topics_or_merge(body: dict[str, Any], slot: Slot, acl: Acl) -> None:
    """OffsetCommit and OffsetDelete: the topics without Read leave the request; each of their partitions
    gets TOPIC_AUTHORIZATION_FAILED in the answer."""
    kept, denied = _split(body["topics"], "name", lambda t: acl(Op.READ, Res.TOPIC, t))
    body["topics"] = kept
    _merge_into(slot, "topics", [
        {"name": t["name"], "partitions": [{"partition_index": p["partition_index"], "error_code": TOPIC_DENIED}
                                           for p in t["partitions"]]} for t in denied])


def _answer_or_merge(slot: Slot, any_kept: bool, field: str, extra: list[dict[str, Any]]) -> bool:
    """Nothing left for the handler: answer ``field`` = ``extra`` now (False); else pass the request on with
    ``extra`` to be merged into the handler's ``field`` (True)."""
    if not any_kept:
        slot.complete({"throttle_time_ms": 0, field: extra})
        return False
    _merge_into(slot, field, extra)
    return True


def _merge_into(slot: Slot, field: str, extra: list[dict[str, Any]]) -> None:
    """The handler's answer gets ``extra`` appended to its ``field`` list."""
    if not extra:
        return

    def merge(body: dict[str, Any]) -> dict[str, Any]:
        body[field] = list(body.get(field) or []) + extra
        return body

    slot.merge = merge


# ---------------------------------------------------------------------------------------------- produce
def _produce(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    body = request.body
    txn_id = body.get("transactional_id")
    if txn_id is not None and not acl(Op.WRITE, Res.TRANSACTIONAL_ID, txn_id):
        slot.complete({"throttle_time_ms": 0, "responses": [
            {"name": t["name"], "partition_responses": [
                {"index": p["index"], "error_code": TXN_DENIED, "base_offset": -1, "log_append_time_ms": -1,
                 "log_start_offset": -1, "record_errors": [], "error_message": None} for p in t["partition_data"]]}
            for t in body["topic_data"]]})
        return False
    kept, denied = _split(body["topic_data"], "name", lambda t: acl(Op.WRITE, Res.TOPIC, t))
    body["topic_data"] = kept
    _merge_into(slot, "responses", [
        {"name": t["name"], "partition_responses": [
            {"index": p["index"], "error_code": TOPIC_DENIED, "base_offset": -1, "log_append_time_ms": -1,
             "log_start_offset": -1, "record_errors": [], "error_message": None} for p in t["partition_data"]]}
        for t in denied])
    return True


# ---------------------------------------------------------------------------------------------- fetch
def _fetch(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    body, v = request.body, request.version
    replica = body.get("replica_state", {}).get("replica_id", -1) if v >= 15 else body.get("replica_id", -1)
    def name_of(t: dict[str, Any]) -> str:
        return t["topic"] if v < 13 else ctx.topic_name(t["topic_id"]) or ""

    if replica is not None and replica >= 0:  # a follower: ClusterAction on the cluster, else 29 everywhere
        if _cluster(acl, Op.CLUSTER_ACTION):
            return True
        kept, denied = [], list(body["topics"])
    else:
        kept, denied = [], []
        for t in body["topics"]:
            name = name_of(t)
            (kept if name and acl(Op.READ, Res.TOPIC, name) else denied).append(t)
    body["topics"] = kept
    extra = []
    for t in denied:
        parts = []
        for p in t["partitions"]:
            entry = empty_partition(p["partition"])
            entry["error_code"] = TOPIC_DENIED
            parts.append(entry)
        extra.append({"topic": t.get("topic"), "topic_id": t.get("topic_id"), "partitions": parts})
    _merge_into(slot, "responses", extra)
    return True


# ---------------------------------------------------------------------------------------------- list offsets
def _list_offsets(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    body = request.body
    kept, denied = _split(body["topics"], "name", lambda t: acl(Op.DESCRIBE, Res.TOPIC, t))
    body["topics"] = kept
    _merge_into(slot, "topics", [
        {"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": TOPIC_DENIED, "old_style_offsets": [],
             "timestamp": -1, "offset": -1, "leader_epoch": -1} for p in t["partitions"]]}
        for t in denied])
    return True


# ---------------------------------------------------------------------------------------------- metadata
def _metadata(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    body, v = request.body, request.version
    wanted = body.get("topics")
    all_topics = wanted is None or (v == 0 and not wanted)
    denied: list[str] = []
    denied_ids: list[Any] = []
    if not all_topics:
        allow_create = body.get("allow_auto_topic_creation", True)
        kept = []
        for t in wanted:
            name = t.get("name")
            if name is None:  # asked by topic id (v12+): Describe on the topic it names, else 29 with no name
                known = ctx.topic_name(t.get("topic_id"))
                if known is not None and not acl(Op.DESCRIBE, Res.TOPIC, known):
                    denied_ids.append(t.get("topic_id"))
                else:
                    kept.append(t)
                continue
            if not acl(Op.DESCRIBE, Res.TOPIC, name):
                denied.append(name)
            elif allow_create and not ctx.exists(name) and not (
                    _cluster(acl, Op.CREATE) or acl(Op.CREATE, Res.TOPIC, name)):
                denied.append(name)  # it would be auto-created: that needs Create (Kafka: 29)
            else:
                kept.append(t)
        body["topics"] = kept
        if not kept and (denied or denied_ids):  # nothing left to ask for: the handler must not list every topic
            body["topics"] = []
    with_ops = v >= 8 and body.get("include_topic_authorized_operations")
    cluster_ops = 8 <= v <= 10 and body.get("include_cluster_authorized_operations")

    def merge(answer: dict[str, Any]) -> dict[str, Any]:
        topics = answer.get("topics") or []
        if all_topics:
            topics = [t for t in topics if acl(Op.DESCRIBE, Res.TOPIC, t["name"], True)]
        if with_ops:
            for t in topics:
                if not t.get("error_code"):
                    t["topic_authorized_operations"] = ctx.operations(Res.TOPIC, t["name"])
        topics += [{"error_code": TOPIC_DENIED, "name": n, "is_internal": False, "partitions": [],
                    "topic_authorized_operations": -2147483648} for n in denied]
        topics += [{"error_code": TOPIC_DENIED, "name": None, "topic_id": tid, "is_internal": False,
                    "partitions": [], "topic_authorized_operations": -2147483648} for tid in denied_ids]
        answer["topics"] = topics
        if cluster_ops:
            answer["cluster_authorized_operations"] = ctx.operations(Res.CLUSTER, CLUSTER_RESOURCE_NAME)
        return answer

    slot.merge = merge
    return True


# ---------------------------------------------------------------------------------------------- groups
def _offset_commit(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    body = request.body
    if not isinstance(body, dict):  # the hot decoder's one-partition commit
        from protocol.hotpath import offset_commit_answer

        error = 0 if acl(Op.READ, Res.GROUP, body.group_id) else GROUP_DENIED
        if not error and not acl(Op.READ, Res.TOPIC, body.topic):
            error = TOPIC_DENIED
        if error:
            slot.complete_frame(offset_commit_answer(request.version, slot.correlation_id, body.topic,
                                                     body.partition, error))
            return False
        return True
    group_ok = acl(Op.READ, Res.GROUP, body["group_id"])
    if not group_ok:
        slot.complete({"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "partitions": [{"partition_index": p["partition_index"], "error_code": GROUP_DENIED}
                                               for p in t["partitions"]]} for t in body["topics"]]})
        return False
    _read_topics_or_merge(body, slot, acl)
    return True


def _offset_fetch_group(group: dict[str, Any] | None, group_id: str, topics: list[dict[str, Any]] | None,
                        acl: Acl) -> tuple[int, list[dict[str, Any]] | None, list[dict[str, Any]]]:
    """(group error, the topics to ask for, the denied topics' answer entries) of one group's fetch."""
    if not acl(Op.DESCRIBE, Res.GROUP, group_id):
        return GROUP_DENIED, topics, []
    if topics is None:
        return 0, None, []
    kept, denied = _split(topics, "name", lambda t: acl(Op.DESCRIBE, Res.TOPIC, t))
    return 0, kept, [{"name": t["name"], "partitions": [
        {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
         "error_code": TOPIC_DENIED} for p in t["partition_indexes"]]} for t in denied]


def _offset_fetch(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    body, v = request.body, request.version

    def visible(topics: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [t for t in topics if acl(Op.DESCRIBE, Res.TOPIC, t["name"], True)]

    if v < 8:
        error, kept, extra = _offset_fetch_group(None, body["group_id"], body.get("topics"), acl)
        if error:
            answer: dict[str, Any] = {"throttle_time_ms": 0, "error_code": error, "topics": []}
            if v < 2:  # no top-level error: each partition asked for carries it
                answer["topics"] = [{"name": t["name"], "partitions": [
                    {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": error}
                    for p in t["partition_indexes"]]} for t in body.get("topics") or []]
            slot.complete(answer)
            return False
        all_topics = body.get("topics") is None
        body["topics"] = kept

        def merge(answer: dict[str, Any]) -> dict[str, Any]:
            topics = answer.get("topics") or []
            answer["topics"] = (visible(topics) if all_topics else topics) + extra
            return answer

        slot.merge = merge
        return True
    denied_groups: dict[str, int] = {}
    extras: dict[str, list[dict[str, Any]]] = {}
    all_of: set[str] = set()
    kept_groups = []
    for g in body["groups"]:
        error, kept, extra = _offset_fetch_group(g, g["group_id"], g.get("topics"), acl)
        if error:
            denied_groups[g["group_id"]] = error
            continue
        if g.get("topics") is None:
            all_of.add(g["group_id"])
        g["topics"] = kept
        extras[g["group_id"]] = extra
        kept_groups.append(g)
    body["groups"] = kept_groups
    if not kept_groups:
        slot.complete({"throttle_time_ms": 0, "groups": [
            {"group_id": gid, "topics": [], "error_code": code} for gid, code in denied_groups.items()]})
        return False

    def merge_groups(answer: dict[str, Any]) -> dict[str, Any]:
        for g in answer.get("groups") or []:
            gid = g["group_id"]
            topics = g.get("topics") or []
            g["topics"] = (visible(topics) if gid in all_of else topics) + extras.get(gid, [])
        answer["groups"] = list(answer.get("groups") or []) + [
            {"group_id": gid, "topics": [], "error_code": code} for gid, code in denied_groups.items()]
        return answer

    slot.merge = merge_groups
    return True


def _find_coordinator(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    body, v = request.body, request.version
    key_type = body.get("key_type", 0)
    if key_type not in (0, 1):
        return True
    res, code, message = ((Res.GROUP, GROUP_DENIED, "Group authorization failed.") if key_type == 0 else
                          (Res.TRANSACTIONAL_ID, TXN_DENIED, "Transactional Id authorization failed."))
    if v < 4:
        if not acl(Op.DESCRIBE, res, body["key"]):
            slot.complete({"throttle_time_ms": 0, "error_code": code, "error_message": message, "node_id": -1,
                           "host": "", "port": -1})
            return False
        return True
    kept, denied = _split(body["coordinator_keys"], None, lambda k: acl(Op.DESCRIBE, res, k))
    if not denied:
        return True
    denial = [{"key": k, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": message}
              for k in denied]
    if not kept:
        slot.complete({"throttle_time_ms": 0, "coordinators": denial})
        return False
    body["coordinator_keys"] = kept
    _merge_into(slot, "coordinators", denial)
    return True


def _group_read(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    """JoinGroup, Heartbeat, LeaveGroup, SyncGroup: Read on the group, else the top-level 30."""
    if acl(Op.READ, Res.GROUP, request.body["group_id"]):
        return True
    slot.complete({"throttle_time_ms": 0, "error_code": GROUP_DENIED, "generation_id": -1, "protocol_name": None,
                   "protocol_type": None, "leader": "", "member_id": "", "members": [], "assignment": b"",
                   "skip_assignment": False})
    return False


def _describe_groups(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    body = request.body
    kept, denied = _split(body["groups"], None, lambda g: acl(Op.DESCRIBE, Res.GROUP, g))
    with_ops = request.version >= 3 and body.get("include_authorized_operations")
    body["groups"] = kept

    def merge(answer: dict[str, Any]) -> dict[str, Any]:
        groups = list(answer.get("groups") or [])
        if with_ops:
            for g in groups:
                g["authorized_operations"] = ctx.operations(Res.GROUP, g["group_id"])
        answer["groups"] = groups + [
            {"error_code": GROUP_DENIED, "error_message": None, "group_id": g, "group_state": "",
             "protocol_type": "", "protocol_data": "", "members": [], "authorized_operations": -2147483648}
            for g in denied]
        return answer

    if not kept:
        slot.complete(merge({"throttle_time_ms": 0, "groups": []}))
        return False
    slot.merge = merge
    return True


def _consumer_group_heartbeat(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    body = request.body
    error = None
    if not acl(Op.READ, Res.GROUP, body["group_id"]):
        error = GROUP_DENIED
    else:
        names = body.get("subscribed_topic_names") or []
        if not all([acl(Op.DESCRIBE, Res.TOPIC, n) for n in names]):  # every one checked (and audited)
            error = TOPIC_DENIED
    if error is None:
        return True
    slot.complete({"throttle_time_ms": 0, "error_code": error, "error_message": None, "member_id": None,
                   "member_epoch": 0, "heartbeat_interval_ms": 0, "assignment": None})
    return False


def _consumer_group_describe(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    body = request.body
    kept, denied = _split(list(body.get("group_ids") or []), None, lambda g: acl(Op.DESCRIBE, Res.GROUP, g))
    with_ops = body.get("include_authorized_operations")
    body["group_ids"] = kept

    def merge(answer: dict[str, Any]) -> dict[str, Any]:
        groups = list(answer.get("groups") or [])
        if with_ops:
            for g in groups:
                if not g.get("error_code"):
                    g["authorized_operations"] = ctx.operations(Res.GROUP, g["group_id"])
        answer["groups"] = groups + [{"group_id": g, "error_code": GROUP_DENIED, "error_message": None}
                                     for g in denied]
        return answer

    if not kept:
        slot.complete(merge({"throttle_time_ms": 0, "groups": []}))
        return False
    slot.merge = merge
    return True


def _list_groups(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    if _cluster(acl, Op.DESCRIBE):
        return True

    def merge(answer: dict[str, Any]) -> dict[str, Any]:
        answer["groups"] = [g for g in answer.get("groups") or [] if acl(Op.DESCRIBE, Res.GROUP, g["group_id"], True)]
        return answer

    slot.merge = merge
    return True


def _delete_groups(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    body = request.body
    kept, denied = _split(body["groups_names"], None, lambda g: acl(Op.DELETE, Res.GROUP, g))
    body["groups_names"] = kept
    extra = [{"group_id": g, "error_code": GROUP_DENIED} for g in denied]
    return _answer_or_merge(slot, bool(kept), "results", extra)


def _offset_delete(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    body = request.body
    if not acl(Op.DELETE, Res.GROUP, body["group_id"]):
        slot.complete({"error_code": GROUP_DENIED, "throttle_time_ms": 0, "topics": []})
        return False
    _read_topics_or_merge(body, slot, acl)
    return True


# ---------------------------------------------------------------------------------------------- topics admin
def _create_topics(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    body = request.body
    if _cluster(acl, Op.CREATE):
        return True
    kept, denied = _split(body["topics"], "name", lambda t: acl(Op.CREATE, Res.TOPIC, t))
    body["topics"] = kept
    extra = [{"name": t["name"], "error_code": TOPIC_DENIED, "error_message": "Authorization failed.",
              "topic_config_error_code": TOPIC_DENIED, "num_partitions": -1, "replication_factor": -1,
              "configs": None} for t in denied]
    return _answer_or_merge(slot, bool(kept), "topics", extra)


def _delete_topics(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    body, v = request.body, request.version
    if v < 6:
        names = body["topic_names"]
        kept, denied = [], []
        for n in names:
            (kept if acl(Op.DELETE, Res.TOPIC, n) else denied).append(n)
        body["topic_names"] = kept
    else:
        kept_t, denied_t = [], []
        for t in body["topics"]:
            tid = t.get("topic_id")
            name = t.get("name") or (ctx.topic_name(tid) if tid is not None else None)
            (kept_t if name and acl(Op.DELETE, Res.TOPIC, name) else denied_t).append(t)
        body["topics"] = kept_t
        kept = kept_t  # type: ignore[assignment]
        denied = [t.get("name") for t in denied_t]  # type: ignore[misc]
    extra = [{"name": n, "topic_id": None, "error_code": TOPIC_DENIED, "error_message": None} for n in denied]
    return _answer_or_merge(slot, bool(kept), "responses", extra)


def _create_partitions(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    body = request.body
    kept, denied = _split(body["topics"], "name", lambda t: acl(Op.ALTER, Res.TOPIC, t))
    body["topics"] = kept
    extra = [{"name": t["name"], "error_code": TOPIC_DENIED, "error_message": None} for t in denied]
    return _answer_or_merge(slot, bool(kept), "results", extra)


def _configs(op: int, field: str) -> Rule:
    """DescribeConfigs (results) and (Incremental)AlterConfigs (responses): per resource, a topic's needs
    ``op`` on it (29), a group's on the group (30), the broker's and its loggers' on the cluster (31)."""

    def rule(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
        body = request.body
        kept, denied = [], []
        for r in body["resources"]:
            kind, name = r["resource_type"], r["resource_name"]
            if kind == CONFIG_TOPIC:
                ok, code = acl(op, Res.TOPIC, name), TOPIC_DENIED
            elif kind in (CONFIG_BROKER, CONFIG_BROKER_LOGGER):
                ok, code = _cluster(acl, op), CLUSTER_DENIED
            elif kind == CONFIG_GROUP:  # Kafka 4's group configs (ConfigHelper / AuthHelper)
                ok, code = acl(op, Res.GROUP, name), GROUP_DENIED
            else:
                ok, code = True, 0
            (kept if ok else denied).append((r, code))
        body["resources"] = [r for r, _ in kept]
        extra = [{"error_code": code, "error_message": None, "resource_type": r["resource_type"],
                  "resource_name": r["resource_name"], "configs": []} for r, code in denied]
        return _answer_or_merge(slot, bool(kept), field, extra)

    return rule


def _init_producer_id(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    """A transactional producer: Write on its TransactionalId (53); an idempotent one: IdempotentWrite on the
    cluster, or Write on some topic (KIP-679)."""
    txn_id = request.body.get("transactional_id")
    if txn_id is not None:
        if acl(Op.WRITE, Res.TRANSACTIONAL_ID, txn_id):
            return True
        slot.complete({"throttle_time_ms": 0, "error_code": TXN_DENIED, "producer_id": -1, "producer_epoch": -1})
        return False
    if _cluster(acl, Op.IDEMPOTENT_WRITE) or ctx.any_allowed(Op.WRITE, Res.TOPIC):
        return True
    slot.complete({"throttle_time_ms": 0, "error_code": CLUSTER_DENIED, "producer_id": -1, "producer_epoch": -1})
    return False


def _offset_for_leader_epoch(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    body = request.body
    if _cluster(acl, Op.CLUSTER_ACTION):
        return True
    kept, denied = _split(body["topics"], "topic", lambda t: acl(Op.DESCRIBE, Res.TOPIC, t))
    body["topics"] = kept
    _merge_into(slot, "topics", [
        {"topic": t["topic"], "partitions": [{"error_code": TOPIC_DENIED, "partition": p["partition"],
                                              "leader_epoch": -1, "end_offset": -1} for p in t["partitions"]]}
        for t in denied])
    return True


def _cluster_op(op: int, answer: Callable[[Request], dict[str, Any]]) -> Rule:
    def rule(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
        if _cluster(acl, op):
            return True
        slot.complete(answer(request))
        return False

    return rule


def _scram_alter_denied(request: Request) -> dict[str, Any]:
    users = dict.fromkeys([d["name"] for d in request.body.get("deletions") or []]
                          + [u["name"] for u in request.body.get("upsertions") or []])
    return {"throttle_time_ms": 0, "results": [{"user": u, "error_code": CLUSTER_DENIED, "error_message": None}
                                               for u in users]}


# ---------------------------------------------------------------------------------------------- transactions
def _add_partitions_to_txn(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    """v0-3: Write on the TransactionalId (every partition 53); then Write on each topic: a denied one gets 29
    and every other partition OPERATION_NOT_ATTEMPTED (internal topics are the handler's: never authorized)."""
    body = request.body
    topics = body["v3_and_below_topics"] or []

    def answer(error_of: Callable[[str], int]) -> dict[str, Any]:
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
            {"name": t["name"], "results_by_partition": [
                {"partition_index": p, "partition_error_code": error_of(t["name"])} for p in t["partitions"] or ()]}
            for t in topics]}

    if not acl(Op.WRITE, Res.TRANSACTIONAL_ID, body["v3_and_below_transactional_id"]):
        slot.complete(answer(lambda _t: TXN_DENIED))
        return False
    _, denied = _split([t for t in topics if not t["name"].startswith("__")], "name",
                       lambda t: acl(Op.WRITE, Res.TOPIC, t))
    if not denied:
        return True
    names = {t["name"] for t in denied}
    slot.complete(answer(lambda t: TOPIC_DENIED if t in names else
                         (TOPIC_DENIED if t.startswith("__") else ErrorCode.OPERATION_NOT_ATTEMPTED)))
    return False


def _txn_write(field: str = "transactional_id") -> Rule:
    """EndTxn: Write on the TransactionalId, else the top-level 53."""
    def rule(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
        if acl(Op.WRITE, Res.TRANSACTIONAL_ID, request.body[field]):
            return True
        slot.complete({"throttle_time_ms": 0, "error_code": TXN_DENIED})
        return False
    return rule


def _add_offsets_to_txn(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    body = request.body
    if not acl(Op.WRITE, Res.TRANSACTIONAL_ID, body["transactional_id"]):
        slot.complete({"throttle_time_ms": 0, "error_code": TXN_DENIED})
        return False
    if not acl(Op.READ, Res.GROUP, body["group_id"]):
        slot.complete({"throttle_time_ms": 0, "error_code": GROUP_DENIED})
        return False
    return True


def _txn_offset_commit(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    """Write on the TransactionalId (53), Read on the group (30), both for every partition; then Read per
    topic (29 for its partitions)."""
    body = request.body
    error = (TXN_DENIED if not acl(Op.WRITE, Res.TRANSACTIONAL_ID, body["transactional_id"]) else
             GROUP_DENIED if not acl(Op.READ, Res.GROUP, body["group_id"]) else 0)
    if error:
        slot.complete({"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "partitions": [{"partition_index": p["partition_index"], "error_code": error}
                                               for p in t["partitions"]]} for t in body["topics"] or []]})
        return False
    _read_topics_or_merge(body, slot, acl)
    return True


def _describe_producers(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    body = request.body
    kept, denied = _split(body["topics"] or [], "name", lambda t: acl(Op.READ, Res.TOPIC, t))
    body["topics"] = kept
    _merge_into(slot, "topics", [
        {"name": t["name"], "partitions": [{"partition_index": p, "error_code": TOPIC_DENIED, "error_message": None,
                                            "active_producers": []} for p in t["partition_indexes"]]}
        for t in denied])
    return True


def _describe_transactions(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    body = request.body
    kept, denied = _split(body["transactional_ids"] or [], None, lambda t: acl(Op.DESCRIBE, Res.TRANSACTIONAL_ID, t))
    body["transactional_ids"] = kept
    _merge_into(slot, "transaction_states", [
        {"error_code": TXN_DENIED, "transactional_id": t, "transaction_state": "", "transaction_timeout_ms": 0,
         "transaction_start_time_ms": -1, "producer_id": -1, "producer_epoch": -1, "topics": []} for t in denied])
    return True


def _list_transactions(request: Request, slot: Slot, acl: Acl, ctx: Context) -> bool:
    """Every transaction the principal may Describe (silently filtered, as Kafka's handler does)."""
    def merge(body: dict[str, Any]) -> dict[str, Any]:
        body["transaction_states"] = [s for s in body.get("transaction_states") or []
                                      if acl(Op.DESCRIBE, Res.TRANSACTIONAL_ID, s["transactional_id"], quiet=True)]
        return body

    slot.merge = merge
    return True


RULES: dict[int, Rule] = {
    24: _add_partitions_to_txn, 25: _add_offsets_to_txn, 26: _txn_write(), 28: _txn_offset_commit,
    27: _cluster_op(Op.CLUSTER_ACTION, lambda r: {"markers": [
        {"producer_id": m["producer_id"], "topics": [
            {"name": t["name"], "partitions": [{"partition_index": p, "error_code": CLUSTER_DENIED}
                                               for p in t["partition_indexes"]]} for t in m["topics"]]}
        for m in r.body["markers"]]}),
    61: _describe_producers, 65: _describe_transactions, 66: _list_transactions,
    0: _produce, 1: _fetch, 2: _list_offsets, 3: _metadata, 8: _offset_commit, 9: _offset_fetch,
    10: _find_coordinator, 11: _group_read, 12: _group_read, 13: _group_read, 14: _group_read,
    15: _describe_groups, 16: _list_groups, 19: _create_topics, 20: _delete_topics, 22: _init_producer_id,
    23: _offset_for_leader_epoch, 32: _configs(Op.DESCRIBE_CONFIGS, "results"),
    33: _configs(Op.ALTER_CONFIGS, "responses"), 37: _create_partitions, 42: _delete_groups,
    44: _configs(Op.ALTER_CONFIGS, "responses"), 47: _offset_delete,
    68: _consumer_group_heartbeat, 69: _consumer_group_describe,
    29: _cluster_op(Op.DESCRIBE, lambda r: {"throttle_time_ms": 0, "error_code": CLUSTER_DENIED,
                                            "error_message": "Cluster authorization failed.", "resources": []}),
    30: _cluster_op(Op.ALTER, lambda r: {"throttle_time_ms": 0, "results": [
        {"error_code": CLUSTER_DENIED, "error_message": None} for _ in r.body["creations"]]}),
    31: _cluster_op(Op.ALTER, lambda r: {"throttle_time_ms": 0, "filter_results": [
        {"error_code": CLUSTER_DENIED, "error_message": None, "matching_acls": []} for _ in r.body["filters"]]}),
    50: _cluster_op(Op.DESCRIBE, lambda r: {"throttle_time_ms": 0, "error_code": CLUSTER_DENIED,
                                            "error_message": None, "results": []}),
    51: _cluster_op(Op.ALTER, _scram_alter_denied),
}
