"""SyncGroup (14), Heartbeat (12) and LeaveGroup (13), as Kafka's classic GroupCoordinator does them.

Fencing (SyncGroup and Heartbeat): a group.instance.id mapped to another member id -> FENCED_INSTANCE_ID;
an unknown member id -> UNKNOWN_MEMBER_ID; a generation other than the group's -> ILLEGAL_GENERATION.
SyncGroup: PreparingRebalance -> REBALANCE_IN_PROGRESS; CompletingRebalance -> the request is parked;
when the leader's arrives, missing members get an empty assignment, the group metadata record is written,
every parked SyncGroup is answered (released by the runtime only once the record is durable) and the
group becomes Stable. If that write fails, the answers become the write error and the group rebalances.
Stable -> the member's current assignment. Kafka quirks kept: while the shard loads, SyncGroup answers
REBALANCE_IN_PROGRESS and Heartbeat answers NONE (clients then rejoin / carry on).
Heartbeat: Stable and CompletingRebalance -> NONE, PreparingRebalance -> REBALANCE_IN_PROGRESS (both
re-arm the session), Empty -> UNKNOWN_MEMBER_ID.
LeaveGroup: v0-2 one member_id, v3+ a batch of (member_id, group_instance_id); an empty member id with
an instance id removes that static member (admin removal); each member answers its own error.
"""

from __future__ import annotations

from .env import Env
from .errors import Err
from .group import EMPTY, PREPARING, STABLE, Group
from .outcome import Effects
from .rebalance import (
    finish_rebalance,
    group_record,
    maybe_prepare_rebalance,
    member_key,
    park_sync,
    propagate_assignment,
    remove_member_and_update,
    reset_and_propagate_error,
    schedule_session,
    try_complete_join,
)
from .responses import error_response, leave_response, sync_response
from .shard import ShardStatus

_ACTIVE, _LOADING = ShardStatus.ACTIVE, ShardStatus.LOADING


def _validate_member(group: Group, member_id: str, instance_id: str | None, generation: int) -> Err | None:
    if group.is_static_fenced(instance_id, member_id):
        return Err.FENCED_INSTANCE_ID
    if member_id not in group.members:
        return Err.UNKNOWN_MEMBER_ID
    if generation != group.generation:
        return Err.ILLEGAL_GENERATION
    return None


# ---------------------------------------------------------------- SyncGroup

def handle_sync(env: Env, fx: Effects, version: int, req: dict, token: object,
                client_id: str = "", client_host: str = "") -> None:
    member_id = req["member_id"]
    group, error = _member_request(env, req, while_loading=Err.REBALANCE_IN_PROGRESS)
    if error is None:
        ptype, pname = req.get("protocol_type"), req.get("protocol_name")
        if (ptype is not None and ptype != group.protocol_type) or (pname is not None and pname != group.protocol_name):
            error = Err.INCONSISTENT_GROUP_PROTOCOL
        elif group.state is EMPTY:
            error = Err.UNKNOWN_MEMBER_ID
        elif group.state is PREPARING:
            error = Err.REBALANCE_IN_PROGRESS
    if error is not None:
        fx.complete(token, sync_response(error))
        return
    member = group.members[member_id]
    record = None
    if group.state is not STABLE and group.is_leader(member_id):  # the leader's assignment completes the sync:
        assignment = {a["member_id"]: a["assignment"] for a in req.get("assignments") or ()}
        record = group_record(env, group, assignment)  # encoded before anything changes
    _synced(env, group, member_id)
    if group.state is STABLE:
        if group.assignment_write == group.generation:
            # the leader's assignment is not durable yet: answer with it only once it is (Kafka's rule)
            park_sync(env, fx, group, member, token, version)
            return
        fx.complete(token, sync_response(Err.NONE, member.assignment, group.protocol_type, group.protocol_name))
        schedule_session(env, fx.now_ms, group, member)
        return
    park_sync(env, fx, group, member, token, version)
    if record is not None:
        _store_and_propagate(env, fx, group, assignment, record)


def _member_request(env: Env, req: dict, while_loading: Err) -> tuple[Group | None, Err | None]:
    """The group and the first error of a member's SyncGroup/Heartbeat (generation, member id, instance id);
    ``while_loading`` is what a loading shard answers (Kafka: 0 for Heartbeat, 27 for SyncGroup)."""
    return _member_lookup(env, req["group_id"], req["member_id"], req.get("group_instance_id"),
                          req["generation_id"], while_loading)


def _member_lookup(env: Env, group_id: str, member_id: str, instance_id: str | None, generation: int,
                   while_loading: Err) -> tuple[Group | None, Err | None]:
    if not group_id:
        return None, Err.INVALID_GROUP_ID
    shard = env.shard_of(group_id)
    status = shard.status
    if status is not _ACTIVE:
        return None, while_loading if status is _LOADING else Err.NOT_COORDINATOR
    group = shard.groups.get(group_id)
    if group is None:
        return None, Err.UNKNOWN_MEMBER_ID
    return group, _validate_member(group, member_id, instance_id, generation)


def _synced(env: Env, group: Group, member_id: str) -> None:
    if member_id in group.pending_sync:
        group.drop_sync(member_id)
        if not group.pending_sync:
            env.timers.cancel(("sync", group.group_id))


def _store_and_propagate(env: Env, fx: Effects, group: Group, assignment: dict[str, bytes],
                         record: tuple[int, bytes, bytes]) -> None:
    fx.write(*record)
    for member in group.members.values():
        member.assignment = assignment.get(member.member_id, b"")
    first = len(fx.completions)
    propagate_assignment(env, fx, group, Err.NONE)
    group.transition(STABLE, fx.now_ms)
    finish_rebalance(env, fx, group)
    generation = group.generation
    tokens = [t for t, _ in fx.completions[first:]]
    group.assignment_write = generation

    def on_done(done_fx: Effects) -> None:
        if group.assignment_write == generation:
            group.assignment_write = None
            if group.generation == generation and group.state is STABLE:
                propagate_assignment(env, done_fx, group, Err.NONE)  # followers that synced meanwhile

    def on_fail(fail_fx: Effects, error: int) -> None:
        if group.assignment_write == generation:
            group.assignment_write = None
        for token in tokens:
            fail_fx.complete(token, sync_response(error))
        if group.generation == generation and group.state is STABLE and env.group(group.group_id) is group:
            reset_and_propagate_error(env, fail_fx, group, Err(error))
            maybe_prepare_rebalance(env, fail_fx, group, "write-failed")

    fx.on_done(on_done)
    fx.on_fail(on_fail)


# ---------------------------------------------------------------- Heartbeat

def handle_heartbeat(env: Env, fx: Effects, version: int, req: dict, token: object,
                     client_id: str = "", client_host: str = "") -> None:
    fx.complete(token, error_response(heartbeat(env, fx.now_ms, req["group_id"], req["generation_id"],
                                                req["member_id"], req.get("group_instance_id"))))


def heartbeat(env: Env, now_ms: int, group_id: str, generation: int, member_id: str,
              instance_id: str | None) -> Err:
    """The error a Heartbeat answers; a valid member of a non-Empty group has its session re-armed."""
    group, error = _member_lookup(env, group_id, member_id, instance_id, generation, while_loading=Err.NONE)
    if error is not None:
        return error
    if group.state is EMPTY:
        return Err.UNKNOWN_MEMBER_ID
    env.timers.schedule(member_key(group_id, member_id), now_ms + group.members[member_id].session_timeout_ms)
    return Err.REBALANCE_IN_PROGRESS if group.state is PREPARING else Err.NONE


# ---------------------------------------------------------------- LeaveGroup

def handle_leave(env: Env, fx: Effects, version: int, req: dict, token: object,
                 client_id: str = "", client_host: str = "") -> None:
    group_id = req["group_id"]
    if version >= 3:
        leaving = [(m.get("member_id") or "", m.get("group_instance_id"), m.get("reason"))
                   for m in req.get("members") or ()]
    else:
        leaving = [(req.get("member_id") or "", None, None)]
    error = Err.INVALID_GROUP_ID if not group_id else env.status_error(group_id)
    if error is not None:
        fx.complete(token, leave_response(version, error, []))
        return
    group = env.group(group_id)
    results = []
    for member_id, instance_id, reason in leaving:
        err = Err.UNKNOWN_MEMBER_ID if group is None else _leave_one(env, fx, group, member_id, instance_id, reason)
        results.append({"member_id": member_id, "group_instance_id": instance_id, "error_code": int(err)})
    fx.complete(token, leave_response(version, Err.NONE, results))


def _leave_one(env: Env, fx: Effects, group: Group, member_id: str, instance_id: str | None,
               reason: str | None = None) -> Err:
    if not member_id:
        current = group.current_static(instance_id)
        if current is None:
            return Err.UNKNOWN_MEMBER_ID
        remove_member_and_update(env, fx, group, current, "member-left", reason)
        return Err.NONE
    if member_id in group.pending_members:
        group.drop_pending(member_id)
        env.timers.cancel(member_key(group.group_id, member_id))
        try_complete_join(env, fx, group)
        return Err.NONE
    if group.is_static_fenced(instance_id, member_id):
        return Err.FENCED_INSTANCE_ID
    if member_id not in group.members:
        return Err.UNKNOWN_MEMBER_ID
    remove_member_and_update(env, fx, group, member_id, "member-left", reason)
    return Err.NONE

