"""Server-side assignors: "uniform" (Kafka's default) and "range", pure functions of a GroupSpec.

Input: ``members`` (member id -> MemberSpec: instance id, subscribed topic ids, current target) and
``partitions`` (topic id -> partition count; every subscribed topic is in it: the caller drops topics that
do not exist). Output: member id -> new target (an Assignment; every member has an entry).
Rules:
- Every partition of a subscribed topic is assigned to exactly one member subscribed to that topic.
- uniform, homogeneous (all members subscribe to the same topics): sizes differ by at most 1. Sticky: a
  member keeps up to its quota of its current valid partitions; the members that already hold the most
  get the "+1" quotas, so one member joining or leaving moves only the partitions balance requires.
- uniform, heterogeneous: keep each member's valid partitions, give each unassigned partition to the least
  loaded subscriber of its topic (topics with fewer subscribers first), then move partitions from a member
  to a subscriber of the same topic holding at least 2 fewer, until no such move exists (each move lowers
  the sum of squared loads, so this ends). Result: no partition could move to a subscriber with 2 fewer.
- range (Kafka 4.0's RangeAssignor, not sticky): per topic, subscribers sorted static first (by instance
  id) then by member id, each gets a contiguous range of floor(P/M) partitions, the first P % M one more.
- Ties are broken by member id, so results are deterministic. ``AssignorError`` is Kafka's
  PartitionAssignorException (the heartbeat answers UNKNOWN_SERVER_ERROR).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from coordinator.core.consumer_group.model import Assignment, assignment


class AssignorError(Exception):
    """The assignor cannot produce an assignment (Kafka's PartitionAssignorException)."""


@dataclass(frozen=True, slots=True)
class MemberSpec:
    subscribed: frozenset[uuid.UUID]
    target: Assignment = field(default_factory=dict)
    instance_id: str | None = None


Assignor = Callable[[Mapping[str, MemberSpec], Mapping[uuid.UUID, int]], dict[str, Assignment]]


def _check(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]) -> None:
    for member_id, spec in members.items():
        missing = spec.subscribed - partitions.keys()
        if missing:
            raise AssignorError(f"Member {member_id} is subscribed to topics {sorted(map(str, missing))} "
                                "which don't exist in the topic metadata.")


def uniform(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
    _check(members, partitions)
    if not members:
        return {}
    subscriptions = {spec.subscribed for spec in members.values()}
    if len(subscriptions) == 1:
        return _uniform_homogeneous(members, partitions, next(iter(subscriptions)))
    return _uniform_heterogeneous(members, partitions)


def _valid_current(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]
                   ) -> tuple[dict[str, list[tuple[uuid.UUID, int]]], set[tuple[uuid.UUID, int]]]:
    """Each member's current target partitions that still exist and that it still subscribes to (a
    partition claimed twice stays with the first member by id)."""
    kept: dict[str, list[tuple[uuid.UUID, int]]] = {}
    taken: set[tuple[uuid.UUID, int]] = set()
    for member_id in sorted(members):
        spec = members[member_id]
        mine = []
        for topic in sorted(spec.target, key=lambda u: u.bytes):
            if topic not in spec.subscribed:
                continue
            for p in sorted(spec.target[topic]):
                if p < partitions[topic] and (topic, p) not in taken:
                    taken.add((topic, p))
                    mine.append((topic, p))
        kept[member_id] = mine
    return kept, taken


def _uniform_homogeneous(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int],
                         topics: frozenset[uuid.UUID]) -> dict[str, Assignment]:
    kept, taken = _valid_current(members, partitions)
    total = sum(partitions[t] for t in topics)
    floor, extra = divmod(total, len(members))
    # the members holding the most get the +1 quotas: nobody gives up a partition it could keep
    order = sorted(members, key=lambda m: (-len(kept[m]), m))
    quota = {m: floor + (1 if i < extra else 0) for i, m in enumerate(order)}
    free = [(t, p) for t in sorted(topics, key=lambda u: u.bytes) for p in range(partitions[t])
            if (t, p) not in taken]
    result: dict[str, list[tuple[uuid.UUID, int]]] = {}
    for m in order:
        result[m] = kept[m][:quota[m]]
        free.extend(kept[m][quota[m]:])
    for m in order:
        need = quota[m] - len(result[m])
        if need > 0:
            result[m].extend(free[:need])
            del free[:need]
    if free:
        raise AssignorError("Partitions were left unassigned")
    return {m: _as_assignment(tps) for m, tps in result.items()}


def _uniform_heterogeneous(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]
                           ) -> dict[str, Assignment]:
    kept, taken = _valid_current(members, partitions)
    owner: dict[tuple[uuid.UUID, int], str] = {tp: m for m, tps in kept.items() for tp in tps}
    load = {m: len(tps) for m, tps in kept.items()}
    subscribers: dict[uuid.UUID, list[str]] = {}
    for m in sorted(members):
        for t in members[m].subscribed:
            subscribers.setdefault(t, []).append(m)
    topics = sorted(subscribers, key=lambda t: (len(subscribers[t]), t.bytes))
    for t in topics:
        for p in range(partitions[t]):
            if (t, p) not in owner:
                m = min(subscribers[t], key=lambda x: (load[x], x))
                owner[(t, p)] = m
                load[m] += 1
    moved = True
    while moved:
        moved = False
        for tp in sorted(owner, key=lambda x: (x[0].bytes, x[1])):
            a = owner[tp]
            b = min(subscribers[tp[0]], key=lambda x: (load[x], x))
            if load[b] <= load[a] - 2:
                owner[tp] = b
                load[a] -= 1
                load[b] += 1
                moved = True
    result: dict[str, list[tuple[uuid.UUID, int]]] = {m: [] for m in members}
    for tp, m in owner.items():
        result[m].append(tp)
    return {m: _as_assignment(tps) for m, tps in result.items()}


def range_assignor(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]
                   ) -> dict[str, Assignment]:
    _check(members, partitions)

    def order(m: str) -> tuple[int, str]:
        instance = members[m].instance_id
        return (0, instance) if instance is not None else (1, m)

    result: dict[str, dict[uuid.UUID, range]] = {m: {} for m in members}
    subscribers: dict[uuid.UUID, list[str]] = {}
    for m in sorted(members, key=order):
        for t in members[m].subscribed:
            subscribers.setdefault(t, []).append(m)
    for t, subs in subscribers.items():
        floor, extra = divmod(partitions[t], len(subs))
        start = 0
        for i, m in enumerate(subs):
            end = start + floor + (1 if i < extra else 0)
            if end > start:
                result[m][t] = range(start, end)
            start = end
    return {m: assignment(a) for m, a in result.items()}


def _as_assignment(tps: list[tuple[uuid.UUID, int]]) -> Assignment:
    out: dict[uuid.UUID, set[int]] = {}
    for t, p in tps:
        out.setdefault(t, set()).add(p)
    return assignment(out)


BUILTIN: dict[str, Assignor] = {"uniform": uniform, "range": range_assignor}
