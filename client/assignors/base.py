"""The partition-assignor interface and the helpers every assignor shares.

An assignor is pure: it turns (topic -> partition count, member -> Subscription) into
(member -> Assignment) and does no I/O. The group leader runs it; every member calls ``on_assignment``.

Contract of ``assign`` (checked by the property tests for every built-in assignor):
- the result has an entry for every member in ``subscriptions``, even when it gets nothing;
- every partition of every topic that is both subscribed by some member and present in
  ``cluster_partitions`` is assigned at most once (exactly once for eager assignors; a cooperative
  assignor may hold a partition back for one rebalance while its current owner gives it up);
- a partition goes only to a member subscribed to its topic; topics missing from
  ``cluster_partitions`` are ignored;
- the result depends only on the inputs (no clock, no randomness, no dict-order dependence).

Members are ordered the way Kafka's ``MemberInfo`` orders them: members with a ``group.instance.id`` first,
by instance id, then the others by member id (``member_sort_key``). Python compares strings by code point,
Java by UTF-16 unit; the two agree except for characters outside the BMP.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import ClassVar, Literal, Protocol, runtime_checkable

from client.consumer_protocol import Assignment, Subscription, TopicPartition

__all__ = [
    "COOPERATIVE",
    "EAGER",
    "AbstractAssignor",
    "PartitionAssignor",
    "PartitionRacks",
    "RebalanceProtocol",
    "member_sort_key",
    "sorted_members",
    "to_assignments",
]

EAGER: Literal["eager"] = "eager"
COOPERATIVE: Literal["cooperative"] = "cooperative"
RebalanceProtocol = Literal["eager", "cooperative"]
PartitionRacks = Mapping[tuple[str, int], "set[str] | frozenset[str]"]


@runtime_checkable
class PartitionAssignor(Protocol):
    """What the consumer coordinator needs from an assignor (see the package docstring)."""

    name: str
    version: int
    rebalance_protocol: RebalanceProtocol

    def subscription_user_data(self, topics: Iterable[str]) -> bytes | None: ...

    def assign(
        self,
        cluster_partitions: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        partition_racks: PartitionRacks | None = None,
    ) -> dict[str, Assignment]: ...

    def on_assignment(self, assignment: Assignment, generation: int) -> None: ...


def member_sort_key(member_id: str, sub: Subscription) -> tuple[int, str, str]:
    """Kafka's MemberInfo order: static members (by group.instance.id) before dynamic ones (by id)."""
    if sub.group_instance_id is not None:
        return (0, sub.group_instance_id, member_id)
    return (1, member_id, "")


def sorted_members(subscriptions: Mapping[str, Subscription]) -> list[str]:
    return sorted(subscriptions, key=lambda m: member_sort_key(m, subscriptions[m]))


def to_assignments(
    partitions: Mapping[str, list[tuple[str, int]]],
    subscriptions: Mapping[str, Subscription],
) -> dict[str, Assignment]:
    """Wrap per-member partition lists; each Assignment uses the version its member subscribed with."""
    result: dict[str, Assignment] = {}
    for member, sub in subscriptions.items():
        tps = tuple(TopicPartition(t, p) for t, p in partitions.get(member, ()))
        result[member] = Assignment(tps, None, min(max(sub.version, 0), 3))
    return result


class AbstractAssignor:
    """Base for assignors: subclasses set ``name`` and implement ``assign_partitions`` (member -> list of
    (topic, partition)); stateful ones (sticky) also override ``subscription_user_data``/``on_assignment``.
    """

    name: ClassVar[str] = ""
    version: ClassVar[int] = 0
    rebalance_protocol: ClassVar[RebalanceProtocol] = EAGER

    def subscription_user_data(self, topics: Iterable[str]) -> bytes | None:
        return None

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        return None

    def assign(
        self,
        cluster_partitions: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        partition_racks: PartitionRacks | None = None,
    ) -> dict[str, Assignment]:
        parts = self.assign_partitions(cluster_partitions, subscriptions, partition_racks)
        return to_assignments(parts, subscriptions)

    def assign_partitions(
        self,
        cluster_partitions: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        partition_racks: PartitionRacks | None,
    ) -> dict[str, list[tuple[str, int]]]:
        raise NotImplementedError
