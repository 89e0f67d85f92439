"""The rebalance machinery shared by JoinGroup, SyncGroup, LeaveGroup and the timers.

Follows Kafka's classic GroupCoordinator:
- prepare_rebalance: answers parked SyncGroups with REBALANCE_IN_PROGRESS when leaving
  CompletingRebalance, cancels the pending-sync timer, enters PreparingRebalance and arms the join timer:
  for a group that was Empty the initial delay (group.initial.rebalance.delay.ms, re-armed while new
  members keep arriving, bounded by the rebalance timeout), else the rebalance timeout (the largest
  rebalance timeout of the members). Only the latter completes early, once every member rejoined and
  no KIP-394 pending member is outstanding.
- complete_join: dynamic members that did not rejoin are removed (static ones are kept); if the leader did
  not rejoin another rejoined member leads; if nobody rejoined the join phase is re-armed; otherwise the
  generation is bumped, the protocol voted, every parked JoinGroup answered (the leader's with all
  members' metadata), heartbeats re-armed and the pending-sync timer started. A group left with no
  members becomes Empty and its (empty) metadata record is written.
- A member's timer ("member", group, member) is its session: when it fires the member is removed unless
  it is not new and has a parked JoinGroup/SyncGroup (Kafka's hasSatisfiedHeartbeat).
- Rebalance history (rebalance_history.py): a rebalance opens in prepare_rebalance (with its trigger: the
  member that caused it and the client's reason, when the caller knows them) and closes in finish_rebalance,
  whose Effects then also carries the history record.
All functions are O(members) at most, and only once per rebalance step.
"""

from __future__ import annotations

from .env import Env
from .errors import Err
from .group import COMPLETING, EMPTY, PREPARING, STABLE, Group
from .member import Member
from .outcome import Effects
from .rebalance_history import Trigger, begin, close
from .records import GroupMetadataValue, MemberRecord, encode_group_key, encode_group_value
from .responses import join_response, sync_response

# ---------------------------------------------------------------- timers and parking

def member_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("member", group_id, member_id)


def schedule_session(env: Env, now_ms: int, group: Group, member: Member, timeout_ms: int | None = None) -> None:
    timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
    env.timers.schedule(member_key(group.group_id, member.member_id), now_ms + timeout)


def park_join(env: Env, fx: Effects, group: Group, member: Member, token: object, version: int) -> None:
    old = group.set_join(member, (token, version))
    if old is not None and old[0] is not token:
        env.unpark(old[0])
        fx.complete(old[0], join_response(old[1], Err.REBALANCE_IN_PROGRESS, member.member_id))
    env.park(token, group.group_id, member.member_id)


def park_sync(env: Env, fx: Effects, group: Group, member: Member, token: object, version: int) -> None:
    old, member.sync = member.sync, (token, version)
    if old is not None and old[0] is not token:
        env.unpark(old[0])
        fx.complete(old[0], sync_response(Err.REBALANCE_IN_PROGRESS))
    env.park(token, group.group_id, member.member_id)


def fence_parked(env: Env, fx: Effects, group: Group, member: Member, error: Err,
                 member_id: str | None = None) -> None:
    """Answer the member's parked JoinGroup/SyncGroup with ``error`` (the JoinGroup answer names
    ``member_id``, default the member's id)."""
    parked = group.take_join(member)
    if parked is not None:
        env.unpark(parked[0])
        fx.complete(parked[0], join_response(parked[1], error, member_id or member.member_id))
    if member.sync is not None:
        env.unpark(member.sync[0])
        fx.complete(member.sync[0], sync_response(error))
        member.sync = None


def evict(env: Env, fx: Effects, group: Group, member_id: str) -> None:
    """Remove a member, answering its parked requests with UNKNOWN_MEMBER_ID and dropping its timer."""
    member = group.members.get(member_id)
    if member is not None:
        parked = group.take_join(member)
        if parked is not None:
            env.unpark(parked[0])
            fx.complete(parked[0], join_response(parked[1], Err.UNKNOWN_MEMBER_ID))
        if member.sync is not None:
            env.unpark(member.sync[0])
            fx.complete(member.sync[0], sync_response(Err.UNKNOWN_MEMBER_ID))
            member.sync = None
    group.remove(member_id)
    env.timers.cancel(member_key(group.group_id, member_id))


# ---------------------------------------------------------------- records

def store_group(env: Env, fx: Effects, group: Group, assignment: dict[str, bytes] | None = None) -> None:
    """Write the group metadata record (Kafka's storeGroup) for the current generation."""
    fx.write(*group_record(env, group, assignment))


def group_record(env: Env, group: Group, assignment: dict[str, bytes] | None = None) -> tuple[int, bytes, bytes]:
    """(shard, key, value) of the group metadata record for the group as it is now, encoded (and so able to
    fail) without changing anything: handlers call it before their first change when they can."""
    protocol = group.protocol_name
    members: tuple[MemberRecord, ...] = ()
    if group.members and protocol is not None:
        get = assignment.get if assignment is not None else None
        members = tuple(
            MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                         m.session_timeout_ms, m.metadata(protocol),
                         get(m.member_id, b"") if get is not None else m.assignment)
            for m in group.members.values())
    ts = group.state_timestamp
    value = GroupMetadataValue(group.protocol_type or "", group.generation, protocol, group.leader_id,
                               -1 if ts is None else ts, members)
    return env.shard_of(group.group_id).shard_id, encode_group_key(group.group_id), encode_group_value(value)


def empty_group_record(env: Env, group: Group, now_ms: int) -> tuple[int, bytes, bytes]:
    """(shard, key, value) of the record ``complete_join`` writes when a rebalance leaves ``group`` with no
    member (next generation, no protocol, Empty since ``now_ms``), encoded without changing the group."""
    value = GroupMetadataValue(group.protocol_type or "", group.generation + 1, None, group.leader_id, now_ms, ())
    return env.shard_of(group.group_id).shard_id, encode_group_key(group.group_id), encode_group_value(value)


def leader_members(group: Group) -> list[dict]:
    protocol = group.protocol_name or ""
    return [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata(protocol)}
            for m in group.members.values()]


# ---------------------------------------------------------------- rebalance steps

def finish_rebalance(env: Env, fx: Effects, group: Group) -> None:
    """The rebalance ended (Stable with the leader's assignment written, or Empty): stats, and its history
    record into ``fx``."""
    now_ms = fx.now_ms
    if group.rebalance_started_ms is not None:
        duration = now_ms - group.rebalance_started_ms
        group.last_rebalance_ms = duration
        group.rebalance_started_ms = None
        env.stats.rebalance_finished(duration)
        shard = env.shard_of(group.group_id)
        close(shard.history, fx, shard.shard_id, group, env.cfg.group_history_size)


def member_trigger(member: Member, reason: str | None = None) -> Trigger:
    """The trigger details of a rebalance ``member`` caused (its kind is the rebalance reason)."""
    return Trigger("", member.member_id, member.client_id, member.client_host, reason)


def maybe_prepare_rebalance(env: Env, fx: Effects, group: Group, reason: str, trigger: Trigger | None = None) -> None:
    if group.can_rebalance:
        prepare_rebalance(env, fx, group, reason, trigger)


def prepare_rebalance(env: Env, fx: Effects, group: Group, reason: str, trigger: Trigger | None = None,
                      removed: tuple[str, ...] = ()) -> None:
    now = fx.now_ms
    if group.state is COMPLETING:
        reset_and_propagate_error(env, fx, group, Err.REBALANCE_IN_PROGRESS)
    elif group.state is STABLE and group.assignment_write is not None:
        group.assignment_write = None  # followers parked until it was durable: they must rejoin instead
        propagate_assignment(env, fx, group, Err.REBALANCE_IN_PROGRESS)
    env.timers.cancel(("sync", group.group_id))
    was_empty = group.state is EMPTY
    timeout = group.rebalance_timeout_ms()
    group.transition(PREPARING, now)
    if group.rebalance_started_ms is None:
        group.rebalance_started_ms = now
        begin(env.shard_of(group.group_id).history, group, now, reason, trigger, removed)
    env.stats.rebalance_started(reason)
    if was_empty:
        delay = env.cfg.group_initial_rebalance_delay_ms
        group.initial_delay = (delay, max(timeout - delay, 0))
        env.timers.schedule(("join", group.group_id), now + delay)
    else:
        group.initial_delay = None
        env.timers.schedule(("join", group.group_id), now + timeout)
        try_complete_join(env, fx, group)


def try_complete_join(env: Env, fx: Effects, group: Group) -> None:
    """Kafka's checkAndComplete on the DelayedJoin: finish early once everybody rejoined."""
    if group.state is PREPARING and group.initial_delay is None and group.all_members_joined():
        complete_join(env, fx, group)


def on_join_timer(env: Env, fx: Effects, group: Group) -> None:
    if group.state is not PREPARING:
        return
    if group.initial_delay is not None:
        delay, remaining = group.initial_delay
        if group.new_member_added and remaining != 0:
            group.new_member_added = False
            next_delay = min(env.cfg.group_initial_rebalance_delay_ms, remaining)
            group.initial_delay = (next_delay, max(remaining - delay, 0))
            env.timers.schedule(("join", group.group_id), fx.now_ms + next_delay)
            return
    complete_join(env, fx, group)


def _elect_joined_leader(group: Group) -> bool:
    if group.leader_id is None:
        return False
    if group.members[group.leader_id].join is not None:
        return True
    for member_id, member in group.members.items():
        if member.join is not None:
            group.leader_id = member_id
            return True
    return False


def complete_join(env: Env, fx: Effects, group: Group) -> None:
    now = fx.now_ms
    gid = group.group_id
    group.initial_delay = None
    group.new_member_added = False
    env.timers.cancel(("join", gid))
    stale = [m.member_id for m in group.members.values() if m.join is None and m.group_instance_id is None]
    for member_id in stale:
        evict(env, fx, group, member_id)
    if not _elect_joined_leader(group) and group.members:
        # Only static members that did not rejoin are left: wait another rebalance timeout.
        env.timers.schedule(("join", gid), now + max(group.rebalance_timeout_ms(), 1))
        return
    if not group.members:
        record = empty_group_record(env, group, now)  # encoded before the group changes
        group.generation += 1
        group.clear_sync()
        group.protocol_name = None
        group.transition(EMPTY, now)
        fx.write(*record)
        finish_rebalance(env, fx, group)
        return
    group.generation += 1
    group.clear_sync()
    group.protocol_name = group.select_protocol()
    group.transition(COMPLETING, now)
    everyone = leader_members(group)
    leader, generation = group.leader_id or "", group.generation
    ptype, pname = group.protocol_type, group.protocol_name
    for member in group.members.values():
        parked = group.take_join(member)
        if parked is not None:
            token, version = parked
            env.unpark(token)
            is_leader = member.member_id == leader
            fx.complete(token, join_response(version, Err.NONE, member.member_id, generation, ptype, pname,
                                             leader, everyone if is_leader else []))
        schedule_session(env, fx.now_ms, group, member)
        member.is_new = False
        group.add_sync(member.member_id)
    env.timers.schedule(("sync", gid), now + group.rebalance_timeout_ms())


def propagate_assignment(env: Env, fx: Effects, group: Group, error: Err) -> None:
    ptype, pname = (group.protocol_type, group.protocol_name) if error == Err.NONE else (None, None)
    for member in group.members.values():
        if member.sync is not None:
            token = member.sync[0]
            member.sync = None
            env.unpark(token)
            fx.complete(token, sync_response(error, member.assignment, ptype, pname))
            schedule_session(env, fx.now_ms, group, member)


def reset_and_propagate_error(env: Env, fx: Effects, group: Group, error: Err) -> None:
    for member in group.members.values():
        member.assignment = b""
    propagate_assignment(env, fx, group, error)


def remove_member_and_update(env: Env, fx: Effects, group: Group, member_id: str, reason: str,
                             client_reason: str | None = None) -> None:
    if group.members.keys() == {member_id}:  # the group empties: its record must encode before anything goes
        empty_group_record(env, group, fx.now_ms)
    member = group.members.get(member_id)
    trigger = member_trigger(member, client_reason) if member is not None else None
    evict(env, fx, group, member_id)
    if group.state in (STABLE, COMPLETING):
        maybe_prepare_rebalance(env, fx, group, reason, trigger)
    elif group.state is PREPARING:
        try_complete_join(env, fx, group)


def on_member_timer(env: Env, fx: Effects, group: Group, member_id: str) -> None:
    if member_id in group.pending_members:
        group.drop_pending(member_id)
        try_complete_join(env, fx, group)
        return
    member = group.members.get(member_id)
    if member is None:
        return
    if not member.is_new and (member.join is not None or member.sync is not None):
        return  # awaiting a rebalance step: the heartbeat is satisfied
    remove_member_and_update(env, fx, group, member_id, "session-expired")


def on_sync_timer(env: Env, fx: Effects, group: Group) -> None:
    if group.state in (COMPLETING, STABLE) and group.pending_sync:
        late = sorted(group.pending_sync)
        first = group.members.get(late[0])
        trigger = member_trigger(first) if first is not None else None
        for member_id in late:
            evict(env, fx, group, member_id)
        prepare_rebalance(env, fx, group, "sync-expired", trigger, tuple(late))
