"""Who a group waits for (issue #37): the members a rebalancing group cannot go on without, and since when.

Rules (pure; Kafka's own timeouts still decide what happens, this only shows it):
- A classic group in PreparingRebalance waits for every member that has not rejoined (no parked JoinGroup)
  and for every member id handed out with MEMBER_ID_REQUIRED that has not joined yet (Kafka's
  ``hasAllMembersJoined``); in CompletingRebalance for its leader's SyncGroup (the assignment); Stable with
  members of the new generation that have not sent SyncGroup yet, for those. Since: when it entered that state.
- A consumer-protocol (KIP-848) group waits for the members still holding partitions to revoke
  (UNREVOKED_PARTITIONS); it has no state timestamp, so no ``since`` and it never counts as stuck here (the
  rebalance timeout fences such a member).
- Stuck: waiting longer than ``threshold_ms``, or, when that is negative (the default), than twice the
  group's largest rebalance timeout.
"""

from __future__ import annotations

from dataclasses import dataclass

from .consumer_group.group import ConsumerGroup
from .consumer_group.model import MemberState
from .group import COMPLETING, PREPARING, STABLE, Group

REJOIN = "not rejoined (JoinGroup)"
JOIN_PENDING = "member id given, JoinGroup not sent"
LEADER_SYNC = "leader's SyncGroup (the assignment) not received"
SYNC = "SyncGroup not received"
REVOKE = "partitions to revoke"


@dataclass(frozen=True, slots=True)
class Waited:
    member_id: str
    client_id: str
    client_host: str
    reason: str


@dataclass(frozen=True, slots=True)
class Waiting:
    group_id: str
    state: str
    since_ms: int | None  # None: unknown (consumer-protocol groups)
    members: tuple[Waited, ...]
    rebalance_timeout_ms: int


def classic_waiting(group: Group) -> Waiting | None:
    """What a classic group waits for now, or None when it waits for nobody."""
    state = group.state
    out: list[Waited] = []
    if state is PREPARING:
        out = [Waited(m.member_id, m.client_id, m.client_host, REJOIN) for m in group.members.values()
               if m.join is None]
        out += [Waited(mid, "", "", JOIN_PENDING) for mid in sorted(group.pending_members)]
    elif state is COMPLETING:
        leader = group.members.get(group.leader_id) if group.leader_id is not None else None
        if leader is not None and leader.sync is None:
            out = [Waited(leader.member_id, leader.client_id, leader.client_host, LEADER_SYNC)]
    elif state is STABLE and group.pending_sync:
        out = [Waited(mid, m.client_id, m.client_host, SYNC) for mid in sorted(group.pending_sync)
               if (m := group.members.get(mid)) is not None]
    if not out:
        return None
    return Waiting(group.group_id, state.value, group.state_timestamp, tuple(out), group.rebalance_timeout_ms())


def is_stuck(waiting: Waiting, now_ms: int, threshold_ms: int) -> bool:
    if waiting.since_ms is None:
        return False
    limit = threshold_ms if threshold_ms >= 0 else 2 * waiting.rebalance_timeout_ms
    return now_ms - waiting.since_ms > limit


def consumer_waiting(group: ConsumerGroup) -> Waiting | None:
    """What a KIP-848 group waits for: its members with partitions to revoke."""
    out = tuple(Waited(m.member_id, m.client_id, m.client_host, REVOKE) for m in group.members.values()
                if m.state is MemberState.UNREVOKED_PARTITIONS)
    if not out:
        return None
    return Waiting(group.group_id, group.state.value, None, out,
                   max((m.rebalance_timeout_ms for m in group.members.values()), default=0))
