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
- Cost (issue #36): one member joining or leaving a stable homogeneous group costs, in Python, a few dict
  operations per member and per (member, topic); per-partition work happens only inside C set operations
  (a topic's union, its holes) and for the partitions that move. A member whose valid target is within its quota
  gets back the very Assignment object it came with; only members giving up or receiving partitions get
  new ones. Heterogeneous: a heap per topic for the unassigned partitions, and the balancing scan skips a
  topic where no subscriber holds 2 more than the least loaded. The result's keys follow ``members``.
- Ties are broken by member id, so results are deterministic. ``AssignorError`` is Kafka's
  PartitionAssignorException (the heartbeat answers UNKNOWN_SERVER_ERROR).
"""

from __future__ import annotations

import heapq
import uuid
from collections import Counter
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


def _check(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int],
           subscriptions: set[frozenset[uuid.UUID]]) -> None:
    """AssignorError naming the first member subscribed to a topic missing from ``partitions``.

    Each distinct subscription is checked once (a frozenset caches its hash, and ``difference`` with a dict
    reuses the hashes the set stores, where a UUID's own __hash__ is Python code)."""
    if all(not s.difference(partitions) for s in subscriptions):
        return
    for member_id, spec in members.items():
        missing = spec.subscribed - partitions.keys()
        if missing:
            raise AssignorError(f"Member {member_id} is subscribed to topics {sorted(map(str, missing))} "
                                "which don't exist in the topic metadata.")


def _subscriptions(members: Mapping[str, MemberSpec]) -> set[frozenset[uuid.UUID]]:
    return {spec.subscribed for spec in members.values()}


def uniform(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
    subscriptions = _subscriptions(members)
    _check(members, partitions, subscriptions)
    if not members:
        return {}
    if len(subscriptions) == 1:
        return _uniform_homogeneous(members, partitions, next(iter(subscriptions)))
    return _uniform_heterogeneous(members, partitions)


def _topic_order(t: uuid.UUID) -> bytes:
    return t.bytes


def _uniform_homogeneous(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int],
                         topics: frozenset[uuid.UUID]) -> dict[str, Assignment]:
    # 1. who holds what: per topic the (member, partitions) pairs; a member's size counts all it holds
    held: dict[uuid.UUID, list[tuple[str, frozenset[int]]]] = {}
    sizes: dict[str, int] = {}
    for m, spec in members.items():
        n = 0
        for t, ps in spec.target.items():
            pairs = held.get(t)
            if pairs is None:
                held[t] = [(m, ps)]
            else:
                pairs.append((m, ps))
            n += len(ps)
        sizes[m] = n
    # 2. per topic, the partitions validly held (``taken``); a topic where some holder may not keep all it
    #    holds (unsubscribed, shrunk, claimed twice, empty entry) is replayed exactly: holders by member id,
    #    each keeping its partitions below the count not claimed before; those holders get new targets
    kept: dict[str, dict[uuid.UUID, frozenset[int]]] = {}   # members whose valid target differs from target
    taken: dict[uuid.UUID, frozenset[int] | set[int]] = {}
    for t, pairs in held.items():
        if t in topics:
            count = partitions[t]
            sets = [ps for _, ps in pairs]
            union = frozenset().union(*sets)
            if (len(union) == sum(map(len, sets)) and min(map(len, sets)) > 0
                    and (not union or (min(union) >= 0 and max(union) < count))):
                taken[t] = union
                continue
        else:
            count = None
        claimed: set[int] = set()
        for m, ps in sorted(pairs, key=lambda pair: pair[0]):
            mine = frozenset() if count is None else frozenset(p for p in ps if p < count and p not in claimed)
            claimed.update(mine)
            if not mine or mine != ps:
                sizes[m] -= len(ps) - len(mine)
                own = kept.get(m)
                if own is None:
                    own = kept[m] = dict(members[m].target)
                if mine:
                    own[t] = mine
                else:
                    del own[t]
        if count is not None:
            taken[t] = {p for p in claimed if p >= 0}
    # 3. quotas: in the order (size descending, member id), the first ``extra`` members get floor + 1
    total = sum(partitions[t] for t in topics)
    floor, extra = divmod(total, len(members))
    per_size = Counter(sizes.values())
    above = 0   # members holding more than ``cut``: all get floor + 1 (extra < len(members): a cut exists)
    for cut in sorted(per_size, reverse=True):
        if above + per_size[cut] >= extra:
            break
        above += per_size[cut]
    k = extra - above   # the first k members holding ``cut`` by id get floor + 1
    at_cut = [m for m, s in sizes.items() if s == cut] if 0 < k < per_size[cut] else []
    plus_at_cut: set[str] | None = None    # the members holding ``cut`` that get floor + 1 ...
    minus_at_cut: set[str] | None = None   # ... or those that do not (whichever set is smaller)
    if k <= per_size[cut] - k:
        plus_at_cut = set(heapq.nsmallest(k, at_cut))
    else:
        minus_at_cut = set(heapq.nlargest(per_size[cut] - k, at_cut))

    result: dict[str, Assignment] = {}
    givers: list[tuple[int, str, int]] = []      # (-size, member id, quota): the order above
    receivers: list[tuple[int, str, int]] = []
    for m, s in sizes.items():
        if s != cut:
            q = floor + 1 if s > cut else floor
        elif plus_at_cut is not None:
            q = floor + 1 if m in plus_at_cut else floor
        else:
            q = floor if m in minus_at_cut else floor + 1   # type: ignore[operator]
        if s == q:
            own = kept.get(m)
            result[m] = members[m].target if own is None else assignment(own)
        elif s > q:
            givers.append((-s, m, q))
        else:
            receivers.append((-s, m, q))
    # 4. the free partitions: those nobody validly holds (by topic, partition), then what givers give up
    free: list[tuple[uuid.UUID, list[int]]] = []
    for t in sorted(topics, key=_topic_order):
        count = partitions[t]
        have = taken.get(t)
        if not have:
            if count > 0:
                free.append((t, list(range(count))))
        elif len(have) < count:
            free.append((t, sorted(set(range(count)).difference(have))))
    givers.sort()
    for _, m, q in givers:
        valid = kept.get(m, members[m].target)
        mine: dict[uuid.UUID, list[int]] = {}
        left = q
        for t in sorted(valid, key=_topic_order):
            ps = sorted(valid[t])
            if left >= len(ps):
                mine[t] = ps
                left -= len(ps)
            else:
                if left:
                    mine[t] = ps[:left]
                free.append((t, ps[left:]))
                left = 0
        result[m] = assignment(mine)
    # 5. receivers, in the same order, take what they lack from the front of the free partitions
    receivers.sort()
    seg, off, left_free = 0, 0, sum(len(ps) for _, ps in free)
    for neg, m, q in receivers:
        need = q + neg
        valid = kept.get(m, members[m].target)
        mine2: dict[uuid.UUID, set[int]] = {t: set(ps) for t, ps in valid.items()}
        while need > 0 and seg < len(free):
            t, ps = free[seg]
            part = ps[off:off + need]
            mine2.setdefault(t, set()).update(part)
            need -= len(part)
            left_free -= len(part)
            off += len(part)
            if off >= len(ps):
                seg, off = seg + 1, 0
        result[m] = assignment(mine2)
    if left_free:
        raise AssignorError("Partitions were left unassigned")
    return {m: result[m] for m in members}


def _uniform_heterogeneous(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]
                           ) -> dict[str, Assignment]:
    subscribers: dict[uuid.UUID, list[str]] = {}
    owner: dict[uuid.UUID, dict[int, str]] = {}   # topic -> partition -> member
    load = dict.fromkeys(members, 0)
    by_subscription: dict[frozenset[uuid.UUID], list[str]] = {}
    for m, spec in members.items():
        by_subscription.setdefault(spec.subscribed, []).append(m)
    for subscribed, ms in by_subscription.items():
        for t in subscribed:
            subscribers.setdefault(t, []).extend(ms)
    for m in sorted(members):
        spec = members[m]
        # keep the current partitions that still exist and are still subscribed (first member by id wins)
        for t, ps in spec.target.items():
            if t in spec.subscribed:
                count, own = partitions[t], owner.setdefault(t, {})
                for p in ps:
                    if p < count and p not in own:
                        own[p] = m
                        load[m] += 1
    # each unassigned partition to the least loaded subscriber (topics with fewer subscribers first); within
    # a topic only its own partitions change loads, so a heap of (load, member id) stays exact
    for t in sorted(subscribers, key=lambda t: (len(subscribers[t]), t.bytes)):
        own = owner.setdefault(t, {})
        if len(own) == partitions[t] and min(own, default=0) >= 0:   # all held already
            continue
        heap = [(load[x], x) for x in subscribers[t]]
        heapq.heapify(heap)
        for p in range(partitions[t]):
            if p not in own:
                n, m = heap[0]
                own[p] = m
                load[m] = n + 1
                heapq.heapreplace(heap, (n + 1, m))
    # move a partition to the least loaded subscriber of its topic while it holds at least 2 fewer; in
    # (topic, partition) order only moves change loads, so the least loaded is recomputed only after one
    moved = True
    while moved:
        moved = False
        for t in sorted(owner, key=_topic_order):
            own, subs = owner[t], subscribers.get(t, ())
            if not own:
                continue
            b = min(subs, key=lambda x: (load[x], x))
            if load[b] > max(map(load.__getitem__, subs)) - 2:
                continue   # every holder is a subscriber: none holds 2 more than the least loaded
            for p in sorted(own):
                a = own[p]
                if load[b] <= load[a] - 2:
                    own[p] = b
                    load[a] -= 1
                    load[b] += 1
                    moved = True
                    b = min(subs, key=lambda x: (load[x], x))
    result: dict[str, dict[uuid.UUID, frozenset[int]]] = {m: {} for m in members}
    for t, own in owner.items():
        held: dict[str, list[int]] = {}
        for p, m in own.items():
            ps = held.get(m)
            if ps is None:
                held[m] = [p]
            else:
                ps.append(p)
        for m, ps in held.items():
            result[m][t] = frozenset(ps)
    return result  # type: ignore[return-value]


def range_assignor(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]
                   ) -> dict[str, Assignment]:
    _check(members, partitions, _subscriptions(members))

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
