"""DescribeGroups (15), ListGroups (16), DeleteGroups (42) and OffsetDelete (47).

Describe: per group; a shard that is loading/not owned answers its error with empty fields; an unknown
group is described as "Dead" (v6+: with GROUP_ID_NOT_FOUND); a Stable group lists members with their
metadata for the selected protocol and their assignment, any other state lists members without them.
List: every group of every ACTIVE shard, filtered by state (v4+, case-insensitive) and type (v5+: all our
groups are "classic"); error COORDINATOR_LOAD_IN_PROGRESS while any shard loads.
Delete: only Empty groups (NON_EMPTY_GROUP otherwise, GROUP_ID_NOT_FOUND if unknown): the group turns
Dead, is removed from memory at once, and tombstones are written for its offsets and (if it ever had a
generation) its metadata; the response is released once those are durable, or carries the write error.
OffsetDelete (Kafka's OffsetMetadataManager.deleteOffsets): group-level errors (unknown or Dead group:
GROUP_ID_NOT_FOUND; a non-empty group whose protocol type is not "consumer": NON_EMPTY_GROUP) answer with
no topics. Per topic: one the members subscribe to answers GROUP_SUBSCRIBED_TO_TOPIC for each partition
(an Empty group subscribes to nothing; a consumer group whose subscriptions cannot be read is taken as
subscribed to everything, as Kafka does); otherwise each partition answers NONE and a committed (or
pending) offset gets a tombstone, so the offset disappears when the tombstone is replayed (durable) and
stays deleted after a restart. Partitions the runtime found unknown (``req["unknown_partitions"]``, Kafka's
metadata check before the coordinator) answer UNKNOWN_TOPIC_OR_PARTITION. A failed write answers its error
at the top level with no topics.
"""

from __future__ import annotations

from .consumer_group import records as cg_records
from .consumer_group.model import GroupState as CgState
from .env import Env
from .errors import Err
from .group import DEAD, EMPTY, STABLE, Group
from .offsets import CONSUMER_PROTOCOL_TYPE, subscribed_topics
from .outcome import Effects
from .rebalance import member_key
from .records import encode_group_key, encode_offset_key
from .shard import ShardStatus
from .waits import classic_waiting

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def handle_describe_groups(env: Env, fx: Effects, version: int, req: dict, token: object,
                           client_id: str = "", client_host: str = "") -> None:
    fx.complete(token, {"groups": [_describe(env, version, gid) for gid in req.get("groups") or ()]})


def _describe(env: Env, version: int, group_id: str) -> dict:
    out = {"error_code": 0, "error_message": None, "group_id": group_id, "group_state": "",
           "protocol_type": "", "protocol_data": "", "members": [],
           "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}
    error = Err.INVALID_GROUP_ID if group_id is None else env.status_error(group_id)
    if error is not None:
        out["error_code"] = int(error)
        return out
    if group_id in env.shard_of(group_id).consumer.groups:  # KIP-848 group: Kafka 4's classicGroup() refuses it
        out["group_state"] = DEAD.value
        if version >= 6:
            out["error_code"] = int(Err.GROUP_ID_NOT_FOUND)
            out["error_message"] = f"Group {group_id} is not a classic group."
        return out
    group = env.group(group_id)
    if group is None:
        out["group_state"] = DEAD.value
        if version >= 6:
            out["error_code"] = int(Err.GROUP_ID_NOT_FOUND)
            out["error_message"] = f"Group {group_id} not found."
        return out
    waiting = classic_waiting(group) if version >= 5 else None
    if waiting is not None:  # ours, tagged (protocol/messages/describe_groups.py): who the rebalance waits for
        out["waiting_since_ms"] = waiting.since_ms if waiting.since_ms is not None else -1
        out["waiting_for"] = [{"member_id": w.member_id, "client_id": w.client_id, "client_host": w.client_host,
                               "reason": w.reason} for w in waiting.members]
    stable = group.state is STABLE
    protocol = group.protocol_name or ""
    out["group_state"] = group.state.value
    out["protocol_type"] = group.protocol_type or ""
    out["protocol_data"] = protocol if stable else ""
    out["members"] = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                       "client_id": m.client_id, "client_host": m.client_host,
                       "member_metadata": m.metadata(protocol) if stable else b"",
                       "member_assignment": m.assignment if stable else b""}
                      for m in group.members.values()]
    return out


def handle_list_groups(env: Env, fx: Effects, version: int, req: dict, token: object,
                       client_id: str = "", client_host: str = "") -> None:
    states = {s.lower() for s in req.get("states_filter") or ()} if version >= 4 else set()
    types = {t.lower() for t in req.get("types_filter") or ()} if version >= 5 else set()
    loading = any(s.status is ShardStatus.LOADING for s in env.shards)
    groups = []
    for shard in env.shards:
        if shard.status is not ShardStatus.ACTIVE:
            continue
        consumer = shard.consumer.groups  # KIP-848 groups: listed as Kafka 4's ModernGroup.asListedGroup
        if not types or "classic" in types:
            for group in shard.groups.values():
                if group.group_id in consumer:  # the holder of a consumer group's offsets, not a group of its own
                    continue
                if states and group.state.value.lower() not in states:
                    continue
                groups.append({"group_id": group.group_id, "protocol_type": group.protocol_type or "",
                               "group_state": group.state.value, "group_type": "classic"})
        if not types or "consumer" in types:
            for group_id, cg in consumer.items():
                state = cg.state.value
                if states and state.lower() not in states:
                    continue
                groups.append({"group_id": group_id, "protocol_type": CONSUMER_PROTOCOL_TYPE, "group_state": state,
                               "group_type": "consumer"})
    error = Err.COORDINATOR_LOAD_IN_PROGRESS if loading else Err.NONE
    fx.complete(token, {"error_code": int(error), "groups": groups})


def handle_delete_groups(env: Env, fx: Effects, version: int, req: dict, token: object,
                         client_id: str = "", client_host: str = "") -> None:
    results, deleted = [], []
    for group_id in req.get("groups_names") or ():
        error = env.status_error(group_id) if group_id is not None else Err.INVALID_GROUP_ID
        if error is None:
            error = _delete(env, fx, group_id)
            if error == Err.NONE:
                deleted.append(group_id)
        results.append({"group_id": group_id, "error_code": int(error)})
    fx.complete(token, {"results": results})
    if deleted and fx.records:
        def on_fail(fail_fx: Effects, error: int) -> None:
            fail_fx.complete(token, {"results": [
                {"group_id": r["group_id"], "error_code": error if r["group_id"] in deleted else r["error_code"]}
                for r in results]})
        fx.on_fail(on_fail)


def _delete(env: Env, fx: Effects, group_id: str) -> Err:
    shard = env.shard_of(group_id)
    consumer = shard.consumer.groups.get(group_id)
    if consumer is not None:  # a KIP-848 group: only when Empty (Kafka's ConsumerGroup.validateDeleteGroup)
        if consumer.state is not CgState.EMPTY:
            return Err.NON_EMPTY_GROUP
        tombstones = [cg_records.encode_record(r) for r in shard.consumer.delete_records(group_id)]
        for key, value in tombstones:  # its state changes only by its records: replayed as written
            shard.consumer.replay(cg_records.decode_record(key, value))
            fx.write(shard.shard_id, key, value)
    group = shard.groups.get(group_id)
    if group is None:
        return Err.NONE if consumer is not None else Err.GROUP_ID_NOT_FOUND
    if group.state is not EMPTY:
        return Err.NON_EMPTY_GROUP
    # the tombstones' keys are encoded before anything changes (exception safety)
    keys = [encode_offset_key(group_id, topic, partition)
            for topic, partition in shard.offsets.group_partitions(group_id)]
    if group.generation > 0:
        keys.append(encode_group_key(group_id))
    group.transition(DEAD, fx.now_ms)
    del shard.groups[group_id]
    for member_id in group.pending_members:
        env.timers.cancel(member_key(group_id, member_id))
    shard.offsets.pop_group(group_id)
    for key in keys:
        fx.write(shard.shard_id, key, None)
    return Err.NONE




def handle_offset_delete(env: Env, fx: Effects, version: int, req: dict, token: object,
                         client_id: str = "", client_host: str = "") -> None:
    group_id = req.get("group_id")
    topics = req.get("topics") or []
    error = Err.INVALID_GROUP_ID if group_id is None else env.status_error(group_id)
    shard = env.shard_of(group_id) if error is None else None
    group = shard.groups.get(group_id) if shard is not None else None
    if error is None and (group is None or group.state is DEAD):
        error = Err.GROUP_ID_NOT_FOUND
    if error is None and group.state is not EMPTY and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        error = Err.NON_EMPTY_GROUP
    if error is not None:
        fx.complete(token, {"error_code": int(error), "topics": []})
        return
    unknown = req.get("unknown_partitions") or frozenset()
    offsets = shard.offsets
    results, keys = [], []
    consumer = shard.consumer.groups.get(group_id)
    for t in topics:
        name, parts = t["name"], []
        subscribed = name in consumer.subscribed_topic_names if consumer is not None else _is_subscribed(group, name)
        for p in t.get("partitions") or ():
            index = p["partition_index"]
            if (name, index) in unknown:
                code = Err.UNKNOWN_TOPIC_OR_PARTITION
            elif subscribed:
                code = Err.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                code = Err.NONE
                if offsets.get(group_id, name, index) is not None or shard.has_pending_commit(group_id, name, index):
                    keys.append(encode_offset_key(group_id, name, index))  # encoded before any write
            parts.append({"partition_index": index, "error_code": int(code)})
        results.append({"name": name, "partitions": parts})
    for key in keys:
        fx.write(shard.shard_id, key, None)
    fx.complete(token, {"error_code": int(Err.NONE), "topics": results})
    if keys:
        fx.on_fail(lambda fail_fx, err: fail_fx.complete(token, {"error_code": err, "topics": []}))


def _is_subscribed(group: Group, topic: str) -> bool:
    """Kafka's ClassicGroup.isSubscribedToTopic over its computeSubscribedTopics."""
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return False
    if not group.members:
        return False
    topics = subscribed_topics(group)
    return True if topics is None else topic in topics
