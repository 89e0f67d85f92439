"""RoundRobinAssignor ("roundrobin"): all partitions dealt one by one around the sorted members.

Rules (Apache Kafka ``RoundRobinAssignor``):
- The partitions are every partition of every topic some member subscribes to (and that exists), sorted by
  (topic, partition). The members are sorted (``base.member_sort_key``) and form a circle.
- For each partition in order, the circle is advanced past members not subscribed to the partition's topic;
  the first subscribed member gets it and the circle moves one past it.
- With identical subscriptions this is perfectly even (max - min <= 1); with uneven subscriptions it can be
  lopsided, as the seeds show (t1p1 goes to C2 although C1 could take it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from client.assignors.base import AbstractAssignor, PartitionRacks, sorted_members
from client.consumer_protocol import Subscription

__all__ = ["RoundRobinAssignor"]


class RoundRobinAssignor(AbstractAssignor):
    name: ClassVar[str] = "roundrobin"

    def assign_partitions(
        self,
        cluster_partitions: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        partition_racks: PartitionRacks | None,
    ) -> dict[str, list[tuple[str, int]]]:
        members = sorted_members(subscriptions)
        subscribed = [frozenset(subscriptions[m].topics) for m in members]
        result: dict[str, list[tuple[str, int]]] = {m: [] for m in members}
        topics = sorted({t for s in subscribed for t in s if t in cluster_partitions})
        n = len(members)
        i = 0
        for topic in topics:
            for p in range(cluster_partitions[topic]):
                while topic not in subscribed[i]:
                    i = (i + 1) % n
                result[members[i]].append((topic, p))
                i = (i + 1) % n
        return result
