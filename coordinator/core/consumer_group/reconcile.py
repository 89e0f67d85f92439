"""Reconciliation: Kafka's CurrentAssignmentBuilder, a pure function of one member's next step.

Inputs: the member, the target epoch T and the member's target partitions, the partitions the member says
it owns (None = not reported), and ``partition_epoch(topic, partition)``: the epoch of whichever member
holds that partition, or -1 when it is free.

Per topic: assigned = current ∩ target; pending revocation = current - assigned; pending assignment =
target - assigned - {partitions held by anyone}. Transitions by state:
- STABLE: if its epoch is T nothing changes, else compute the next step from its epoch.
- UNREVOKED_PARTITIONS: while the member still reports (or does not report) a partition pending
  revocation, nothing changes; else compute the next step from epoch + 1.
- UNRELEASED_PARTITIONS: compute the next step from its epoch (picks up released partitions).
- UNKNOWN: FENCED_MEMBER_EPOCH unless it reports owning nothing; then compute the next step from T.
The next step, in priority order: pending revocation that the member still owns -> UNREVOKED_PARTITIONS at
the given epoch with assigned = current ∩ target; else pending assignment -> assigned + it, at T,
UNRELEASED_PARTITIONS if some target partitions are held by others else STABLE; else held partitions ->
UNRELEASED_PARTITIONS at T; else STABLE at T. Moving the epoch keeps the old one as the previous epoch.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from coordinator.core.consumer_group.member import Member
from coordinator.core.consumer_group.model import EMPTY, Assignment, Err, MemberState, Reject, assignment

PartitionEpoch = Callable[[uuid.UUID, int], int]


def owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the reported partitions include any of ``partitions``; not reporting counts as yes."""
    if owned is None:
        return True
    return any(ps & partitions.get(t, frozenset()) for t, ps in owned.items())


def reconcile(member: Member, target_epoch: int, target: Assignment, owned: Assignment | None,
              partition_epoch: PartitionEpoch) -> Member:
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, owned, partition_epoch)
    if state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, owned, partition_epoch)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, owned, partition_epoch)
    if owned is None or owned:
        raise Reject(Err.FENCED_MEMBER_EPOCH, "The consumer group member is in a unknown state. "
                     "The member must abandon all its partitions and rejoin.")
    return _next(member, target_epoch, target_epoch, target, owned, partition_epoch)


def _next(member: Member, epoch: int, target_epoch: int, target: Assignment, owned: Assignment | None,
          partition_epoch: PartitionEpoch) -> Member:
    current = member.assigned
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    adding: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic in {*target, *current}:
        want, have = target.get(topic, frozenset()), current.get(topic, frozenset())
        kept = have & want
        assigned[topic] = kept
        revoking[topic] = have - kept
        free = {p for p in want - kept if partition_epoch(topic, p) == -1}
        unreleased = unreleased or len(free) < len(want - kept)
        adding[topic] = frozenset(free)
    kept_a, revoking_a, adding_a = assignment(assigned), assignment(revoking), assignment(adding)
    if revoking_a and owns_any(owned, revoking_a):
        return member.with_epoch(epoch, state=MemberState.UNREVOKED_PARTITIONS, assigned=kept_a,
                                 pending_revocation=revoking_a)
    if adding_a:
        grown = assignment({t: kept_a.get(t, frozenset()) | adding_a.get(t, frozenset())
                            for t in {*kept_a, *adding_a}})
        state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        return member.with_epoch(target_epoch, state=state, assigned=grown, pending_revocation=EMPTY)
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return member.with_epoch(target_epoch, state=state, assigned=kept_a, pending_revocation=EMPTY)
