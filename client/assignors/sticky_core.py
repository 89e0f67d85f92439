"""The sticky placement algorithm shared by "sticky" and "cooperative-sticky" (pure, O(P log M)-ish).

Input: topic -> partition count, member -> subscribed topics, member -> partitions it validly owned before
(already de-duplicated by the caller: one owner per partition), and the member order used to break ties.
Output: member -> list of (topic, partition): first the owned partitions it keeps (in their old order),
then the ones it receives (in the order they were given).

Goals, in priority order (Kafka's StickyAssignor): 1. balance, 2. stickiness, 3. rack locality.

Identical subscriptions (every member subscribes the same existing topics; the common case):
- with P partitions and M members, ``q = P // M``; ``P % M`` members may hold ``q + 1``, the rest ``q``;
- in member order, each member keeps its owned partitions up to its quota (the first ``q + 1`` while
  ``q + 1`` slots remain, otherwise the first ``q``); everything else is unassigned;
- unassigned partitions, in (topic, partition) order, each go to the member with the fewest partitions
  that still has room, ties broken by member order (Kafka 0.11's "least loaded first" rule; it
  reproduces the seeds' examples). With ``partition_racks`` and member racks, a member with room on one of
  the partition's replica racks is preferred (least loaded among those) before any other member;
- result: every member holds q or q + 1, and no member loses a partition unless it held more than its
  quota, so a leave moves only the leaver's partitions and a join moves only what the joiner needs.

Uneven subscriptions:
- every member keeps all its owned partitions;
- unassigned partitions, ordered by (number of subscribers, topic, partition), each go to the subscriber
  with the fewest partitions (ties by member order): scarce partitions first, as Kafka does;
- then single moves restore balance: while some member ``u`` holds a partition of topic ``t`` that a
  subscriber ``v`` of ``t`` with ``load(v) <= load(u) - 2`` could take, the most loaded such ``u`` gives
  ``v`` (the least loaded receiver) its most recently received partition of ``t``. At the end no single
  move improves balance; in particular members with identical subscriptions differ by at most one.
  Rack preference is not applied on this path, and chains of moves (A -> B -> C) are not searched.

Heaps hold (load, member rank) entries and are cleaned lazily: an entry whose load is not the member's
current load is stale and is re-pushed with the current load when it reaches the top.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from client.assignors.base import PartitionRacks

__all__ = ["sticky_assign"]

TP = tuple[str, int]


def sticky_assign(
    cluster_partitions: Mapping[str, int],
    subscribed: Mapping[str, frozenset[str]],
    owned: Mapping[str, Sequence[TP]],
    member_order: Sequence[str],
    member_racks: Mapping[str, str] | None = None,
    partition_racks: PartitionRacks | None = None,
) -> dict[str, list[TP]]:
    """Place partitions as described in the module docstring; ``owned`` must have one owner per partition."""
    if not member_order:
        return {}
    topics_of = [frozenset(t for t in subscribed[m] if t in cluster_partitions) for m in member_order]
    kept = [_valid_owned(owned.get(m, ()), topics_of[i], cluster_partitions) for i, m in enumerate(member_order)]
    if all(t == topics_of[0] for t in topics_of):
        racks = _rack_context(member_order, member_racks, partition_racks)
        lists = _assign_identical(cluster_partitions, sorted(topics_of[0]), kept, racks)
    else:
        lists = _assign_uneven(cluster_partitions, topics_of, kept)
    return {m: lists[i] for i, m in enumerate(member_order)}


def _valid_owned(owned: Sequence[TP], topics: frozenset[str], counts: Mapping[str, int]) -> list[TP]:
    seen: set[TP] = set()
    result = []
    for tp in owned:
        t, p = tp
        if t in topics and 0 <= p < counts[t] and tp not in seen:
            seen.add(tp)
            result.append((t, p))
    return result


# ------------------------------------------------------------------------------ identical subscriptions


class _Racks:
    """Member ranks per rack and partition replica racks, when rack matching can matter."""

    __slots__ = ("members_by_rack", "partition_racks")

    def __init__(self, members_by_rack: dict[str, list[int]], partition_racks: PartitionRacks) -> None:
        self.members_by_rack = members_by_rack
        self.partition_racks = partition_racks


def _rack_context(
    member_order: Sequence[str], member_racks: Mapping[str, str] | None, partition_racks: PartitionRacks | None
) -> _Racks | None:
    if not member_racks or not partition_racks:
        return None
    by_rack: dict[str, list[int]] = {}
    for i, m in enumerate(member_order):
        rack = member_racks.get(m)
        if rack is not None:
            by_rack.setdefault(rack, []).append(i)
    return _Racks(by_rack, partition_racks) if by_rack else None


def _assign_identical(
    counts: Mapping[str, int], topics: list[str], kept: list[list[TP]], racks: _Racks | None
) -> list[list[TP]]:
    total = sum(counts[t] for t in topics)
    n = len(kept)
    min_q, slots = divmod(total, n)
    lists: list[list[TP]] = []
    taken: set[TP] = set()
    for own in kept:
        if len(own) <= min_q:
            keep = own
        elif slots > 0:
            keep = own[: min_q + 1]
            slots -= 1
        else:
            keep = own[:min_q]
        lists.append(list(keep))
        taken.update(keep)
    load = [len(x) for x in lists]
    state = _Room(load, min_q, slots)
    unassigned = [(t, p) for t in topics for p in range(counts[t]) if (t, p) not in taken]
    if racks is None:
        _fill_least_loaded(unassigned, lists, state)
    else:
        _fill_rack_aware(unassigned, lists, state, racks)
    return lists


class _Room:
    """Who may take one more partition: below the minimum quota, or at it while q + 1 slots remain."""

    __slots__ = ("load", "min_q", "slots")

    def __init__(self, load: list[int], min_q: int, slots: int) -> None:
        self.load = load
        self.min_q = min_q
        self.slots = slots

    def has_room(self, i: int) -> bool:
        return self.load[i] < self.min_q or (self.load[i] == self.min_q and self.slots > 0)

    def give(self, i: int) -> None:
        if self.load[i] == self.min_q:
            self.slots -= 1
        self.load[i] += 1


def _fill_least_loaded(unassigned: list[TP], lists: list[list[TP]], room: _Room) -> None:
    load = room.load
    heap = [(load[i], i) for i in range(len(lists)) if room.has_room(i)]
    heapq.heapify(heap)
    for tp in unassigned:
        while True:
            _, i = heap[0]
            if room.has_room(i):
                break
            heapq.heappop(heap)
        room.give(i)
        lists[i].append(tp)
        heapq.heapreplace(heap, (load[i], i))


def _top_with_room(heap: list[tuple[int, int]], room: _Room) -> tuple[int, int] | None:
    """Clean a lazily maintained heap and return its least-loaded member with room, if any."""
    while heap:
        entry_load, i = heap[0]
        if not room.has_room(i):
            heapq.heappop(heap)
        elif entry_load != room.load[i]:
            heapq.heapreplace(heap, (room.load[i], i))
        else:
            return heap[0]
    return None


def _fill_rack_aware(unassigned: list[TP], lists: list[list[TP]], room: _Room, racks: _Racks) -> None:
    load = room.load
    everyone = [(load[i], i) for i in range(len(lists))]
    heapq.heapify(everyone)
    by_rack = {r: [(load[i], i) for i in ms] for r, ms in racks.members_by_rack.items()}
    for h in by_rack.values():
        heapq.heapify(h)
    for tp in unassigned:
        best = None
        for rack in racks.partition_racks.get(tp, ()):
            heap = by_rack.get(rack)
            top = _top_with_room(heap, room) if heap else None
            if top is not None and (best is None or top < best):
                best = top
        if best is None:
            best = _top_with_room(everyone, room)
        assert best is not None, "room accounting guarantees a receiver"
        i = best[1]
        room.give(i)
        lists[i].append(tp)
        heapq.heappush(everyone, (load[i], i))
        for heap in by_rack.values():
            if heap and heap[0][1] == i:
                heapq.heapreplace(heap, (load[i], i))


# ------------------------------------------------------------------------------ uneven subscriptions


class _Uneven:
    """Mutable placement state for the uneven path: per-member ordered holdings and per-topic heaps."""

    def __init__(self, counts: Mapping[str, int], topics_of: list[frozenset[str]], kept: list[list[TP]]) -> None:
        self.topics_of = topics_of
        self.held: list[dict[TP, None]] = [dict.fromkeys(own) for own in kept]
        self.by_topic: list[dict[str, list[int]]] = []
        for own in kept:
            per_topic: dict[str, list[int]] = {}
            for t, p in own:
                per_topic.setdefault(t, []).append(p)
            self.by_topic.append(per_topic)
        self.load = [len(own) for own in kept]
        subscribers: dict[str, list[int]] = {}
        for i, topics in enumerate(topics_of):
            for t in topics:
                subscribers.setdefault(t, []).append(i)
        self.subscribers = subscribers
        self.heaps = {t: [(self.load[i], i) for i in ms] for t, ms in subscribers.items()}
        for h in self.heaps.values():
            heapq.heapify(h)
        self.counts = counts

    def least_loaded(self, topic: str) -> tuple[int, int]:
        heap, load = self.heaps[topic], self.load
        while heap[0][0] != load[heap[0][1]]:
            heapq.heapreplace(heap, (load[heap[0][1]], heap[0][1]))
        return heap[0]

    def give(self, i: int, tp: TP) -> None:
        self.held[i][tp] = None
        self.by_topic[i].setdefault(tp[0], []).append(tp[1])
        self.load[i] += 1

    def take_back(self, i: int, topic: str) -> TP:
        p = self.by_topic[i][topic].pop()
        if not self.by_topic[i][topic]:
            del self.by_topic[i][topic]
        del self.held[i][(topic, p)]
        self.load[i] -= 1
        for t in self.topics_of[i]:  # a lower load sinks: refresh this member's entries
            heapq.heappush(self.heaps[t], (self.load[i], i))
        return (topic, p)


def _assign_uneven(counts: Mapping[str, int], topics_of: list[frozenset[str]], kept: list[list[TP]]) -> list[list[TP]]:
    st = _Uneven(counts, topics_of, kept)
    taken = {tp for own in kept for tp in own}
    order = sorted(st.subscribers, key=lambda t: (len(st.subscribers[t]), t))
    for t in order:
        for p in range(counts[t]):
            if (t, p) not in taken:
                _, i = st.least_loaded(t)
                st.give(i, (t, p))
                heapq.heapreplace(st.heaps[t], (st.load[i], i))
    while _rebalance_pass(st):
        pass
    return [list(h) for h in st.held]


def _rebalance_pass(st: _Uneven) -> bool:
    """Move single partitions from the most loaded members while it improves balance; True if any moved."""
    moved = False
    donors = [(-load, i) for i, load in enumerate(st.load)]
    heapq.heapify(donors)
    while donors:
        neg, u = heapq.heappop(donors)
        if -neg != st.load[u]:
            continue
        best: tuple[int, int, str] | None = None
        for t in st.by_topic[u]:
            v_load, v = st.least_loaded(t)
            if best is None or (v_load, v) < best[:2]:
                best = (v_load, v, t)
        if best is None or best[0] > st.load[u] - 2:
            continue
        _, v, t = best
        tp = st.take_back(u, t)
        st.give(v, tp)
        moved = True
        heapq.heappush(donors, (-st.load[u], u))
        heapq.heappush(donors, (-st.load[v], v))
    return moved
