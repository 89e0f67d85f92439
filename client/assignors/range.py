"""RangeAssignor ("range"): Kafka's default, per topic, contiguous ranges.

Rules (Apache Kafka ``RangeAssignor``):
- Each topic is assigned on its own. Its subscribers are sorted (``base.member_sort_key``: by member id
  unless static members are present); with ``n`` partitions and ``c`` subscribers, each subscriber gets a
  contiguous range of ``n // c`` partitions and the first ``n % c`` subscribers get one more.
- Topics are processed in name order, so (without racks) a member's list is sorted by (topic, partition).

Rack awareness (KIP-881), used only when ``partition_racks`` is given, some subscriber of the topic has a
``rack_id`` (subscription v3) and rack matching can make a difference (some partition has a replica on a
subscriber's rack, and not every partition has a replica on every subscriber rack):
1. rack pass: in member order, each subscriber takes, in partition order, the unassigned partitions that
   have a replica on its rack (a member without a rack matches everything), up to its quota;
2. fill pass: in member order, each subscriber takes the lowest unassigned partitions up to its quota.
The quota is Kafka's: ``n // c`` plus one while fewer than ``n % c`` members have taken an extra one.
Without rack information the two passes reduce to plain range. Not done: Kafka's co-partitioning rule
(topics with the same subscribers and partition count assigned partition-aligned in the rack pass).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from client.assignors.base import AbstractAssignor, PartitionRacks, sorted_members
from client.consumer_protocol import Subscription

__all__ = ["RangeAssignor"]


class RangeAssignor(AbstractAssignor):
    name: ClassVar[str] = "range"

    def __init__(self, rack_aware: bool = True) -> None:
        self.rack_aware = rack_aware

    def assign_partitions(
        self,
        cluster_partitions: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        partition_racks: PartitionRacks | None,
    ) -> dict[str, list[tuple[str, int]]]:
        members = sorted_members(subscriptions)
        subscribed = {m: frozenset(subscriptions[m].topics) for m in members}
        topics = sorted({t for s in subscribed.values() for t in s if t in cluster_partitions})
        result: dict[str, list[tuple[str, int]]] = {m: [] for m in members}
        for topic in topics:
            consumers = [m for m in members if topic in subscribed[m]]
            count = cluster_partitions[topic]
            racks = self._member_racks(consumers, subscriptions) if partition_racks and self.rack_aware else {}
            if racks and _needs_rack_matching(topic, count, set(racks.values()), partition_racks or {}):
                _assign_rack_aware(topic, count, consumers, racks, partition_racks or {}, result)
            else:
                _assign_ranges(topic, count, consumers, result)
        return result

    @staticmethod
    def _member_racks(consumers: list[str], subscriptions: Mapping[str, Subscription]) -> dict[str, str]:
        return {m: r for m in consumers if (r := subscriptions[m].rack_id) is not None}


def _assign_ranges(topic: str, count: int, consumers: list[str], result: dict[str, list[tuple[str, int]]]) -> None:
    per_member, extra = divmod(count, len(consumers))
    for i, member in enumerate(consumers):
        start = per_member * i + min(i, extra)
        length = per_member + (1 if i < extra else 0)
        result[member].extend((topic, p) for p in range(start, start + length))


def _needs_rack_matching(topic: str, count: int, member_racks: set[str], partition_racks: PartitionRacks) -> bool:
    replica_racks = [partition_racks.get((topic, p), frozenset()) for p in range(count)]
    if not any(member_racks & set(r) for r in replica_racks):
        return False
    return not all(member_racks <= set(r) for r in replica_racks)


def _assign_rack_aware(
    topic: str,
    count: int,
    consumers: list[str],
    racks: dict[str, str],
    partition_racks: PartitionRacks,
    result: dict[str, list[tuple[str, int]]],
) -> None:
    per_member, extra = divmod(count, len(consumers))
    taken = dict.fromkeys(consumers, 0)
    unassigned = dict.fromkeys(range(count))  # insertion-ordered set
    extra_left = extra

    def take(member: str, may_take) -> None:
        nonlocal extra_left
        room = per_member + (1 if extra_left > 0 else 0) - taken[member]
        if room <= 0:
            return
        chosen = [p for p in unassigned if may_take(member, p)][:room]
        for p in chosen:
            del unassigned[p]
        result[member].extend((topic, p) for p in chosen)
        before = taken[member]
        taken[member] = before + len(chosen)
        if before <= per_member < taken[member]:
            extra_left -= 1

    def rack_match(member: str, p: int) -> bool:
        rack = racks.get(member)
        return rack is None or rack in partition_racks.get((topic, p), ())

    for member in consumers:
        take(member, rack_match)
    for member in consumers:
        take(member, lambda _m, _p: True)
