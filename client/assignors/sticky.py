"""StickyAssignor ("sticky", eager) and CooperativeStickyAssignor ("cooperative-sticky", incremental).

Both place partitions with ``sticky_core.sticky_assign`` (balanced first, then sticky). They differ in
where a member's previous ownership comes from and in how a moving partition travels:

Previous ownership ("member data"), as in Apache Kafka:
- sticky: from the subscription's user data, Java's ``StickyAssignor`` format
  ``previous_assignment:[topic:string partitions:[int32]] generation:int32`` (v1; v0 lacks the
  generation). A member without such user data falls back to the subscription's owned_partitions and
  generation_id fields (v1+/v2+). ``subscription_user_data`` writes v1 once ``on_assignment`` has run.
- cooperative-sticky: from the subscription's owned_partitions (v1+); the generation from generation_id
  when the subscription is v2+ and it is >= 0, else from the user data: 4 bytes are Java's
  ``CooperativeStickyAssignor`` int32 generation (what ``subscription_user_data`` writes), longer user data
  is read as the sticky format above (librdkafka), anything else means "unknown".

Generations (Kafka's AbstractStickyAssignor): only claims from members of the highest generation in the
group count (an unknown generation counts as -1); a partition claimed by two members of that generation
is treated as owned by neither. Claims on topics a member no longer subscribes to, or on partitions that
do not exist, are ignored.

Cooperative rule (KIP-429): the ideal placement is computed first; then a partition is given to a member
only if no *other* member declared it in owned_partitions (any generation). Otherwise it is left out of
this rebalance: its owner sees it revoked, rejoins, and the next rebalance (where it is owned by no one)
hands it to its new owner. So no partition is ever assigned in the rebalance that revokes it.

Rack awareness (KIP-881): when ``partition_racks`` is given and members send ``rack_id`` (v3), see
``sticky_core``: balance and stickiness come first, rack locality breaks the remaining choices.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from client.assignors.base import (
    COOPERATIVE,
    EAGER,
    AbstractAssignor,
    PartitionRacks,
    RebalanceProtocol,
    sorted_members,
    to_assignments,
)
from client.assignors.sticky_core import sticky_assign
from client.consumer_protocol import (
    Assignment,
    ConsumerProtocolError,
    Subscription,
    TopicPartition,
    group_by_topic,
)

__all__ = [
    "CooperativeStickyAssignor",
    "MemberData",
    "StickyAssignor",
    "decode_sticky_user_data",
    "encode_sticky_user_data",
    "hold_back_transfers",
    "valid_previous_owners",
]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class MemberData:
    """What a member says it owned, and in which generation (None: unknown)."""

    partitions: tuple[TopicPartition, ...]
    generation: int | None


def encode_sticky_user_data(partitions: Iterable[tuple[str, int]], generation: int | None) -> bytes:
    """Java StickyAssignor user data: v1 with a generation, v0 without."""
    out: list[bytes] = []
    grouped = group_by_topic(partitions)
    out.append(_I32.pack(len(grouped)))
    for topic, numbers in grouped:
        raw = topic.encode("utf-8")
        out += [_I16.pack(len(raw)), raw, _I32.pack(len(numbers)), struct.pack(f">{len(numbers)}i", *numbers)]
    if generation is not None:
        out.append(_I32.pack(generation))
    return b"".join(out)


def decode_sticky_user_data(data: bytes) -> MemberData:
    """Parse Java's v1 (with generation) or v0 layout; raises ConsumerProtocolError if it is neither.

    kafka-python 3.x writes the same fields behind an int16 version header, always 1 (Java, aiokafka and
    librdkafka write none). That form is accepted as a fallback: read as Java's layout it starts with a
    topic count of 65536+, which never fits in the bytes left. (A header of 0 would be ambiguous with a
    Java payload of zero topics; it is only tried when the Java reading fails.)
    """
    try:
        return _parse_sticky_user_data(memoryview(data), 0, None)
    except ConsumerProtocolError:
        if len(data) >= 2 and data[0] == 0 and data[1] in (0, 1):
            return _parse_sticky_user_data(memoryview(data), 2, data[1])
        raise


def _parse_sticky_user_data(view: memoryview, pos: int, header_version: int | None) -> MemberData:
    def take(n: int) -> memoryview:
        nonlocal pos
        if n < 0 or pos + n > len(view):
            raise ConsumerProtocolError("truncated sticky assignor user data")
        pos += n
        return view[pos - n:pos]

    partitions: list[TopicPartition] = []
    topics = _I32.unpack(take(4))[0]
    if topics < 0 or topics * 6 > len(view) - pos:
        raise ConsumerProtocolError(f"invalid topic count {topics} in sticky assignor user data")
    for _ in range(topics):
        try:
            topic = str(take(_I16.unpack(take(2))[0]), "utf-8")
        except UnicodeDecodeError:
            raise ConsumerProtocolError("topic name is not UTF-8") from None
        n = _I32.unpack(take(4))[0]
        numbers = struct.unpack(f">{n}i", take(4 * n))  # take() rejects n < 0 and overruns
        partitions.extend(TopicPartition(topic, p) for p in numbers)
    if header_version == 1 or (header_version is None and len(view) - pos >= 4):
        return MemberData(tuple(partitions), _I32.unpack(take(4))[0])
    return MemberData(tuple(partitions), None)


def valid_previous_owners(
    member_data: Mapping[str, MemberData],
    subscribed: Mapping[str, frozenset[str]],
    cluster_partitions: Mapping[str, int],
) -> dict[str, list[tuple[str, int]]]:
    """Apply the generation rules of the module docstring: member -> partitions it validly owned.

    A claim on a topic the member does not subscribe to, or on a partition that does not exist, is dropped
    first, so it cannot invalidate a rightful owner's claim as a "duplicate".
    """
    if not member_data:
        return {}
    max_gen = max(-1 if d.generation is None else d.generation for d in member_data.values())
    claims: dict[str, list[tuple[str, int]]] = {}
    owners: dict[tuple[str, int], int] = {}
    for member, data in member_data.items():
        gen = -1 if data.generation is None else data.generation
        topics = subscribed[member]
        mine: list[tuple[str, int]] = []
        if gen == max_gen:
            valid = (tp for tp in data.partitions if tp[0] in topics and 0 <= tp[1] < cluster_partitions.get(tp[0], 0))
            mine = list(dict.fromkeys((t, p) for t, p in valid))
        claims[member] = mine
        for tp in mine:
            owners[tp] = owners.get(tp, 0) + 1
    return {m: [tp for tp in tps if owners[tp] == 1] for m, tps in claims.items()}


def hold_back_transfers(
    placement: Mapping[str, list[tuple[str, int]]], declared: Mapping[str, Iterable[tuple[str, int]]]
) -> dict[str, list[tuple[str, int]]]:
    """Cooperative rule: drop every partition placed on a member while another member declares it owned."""
    owners: dict[tuple[str, int], set[str]] = {}
    for member, tps in declared.items():
        for t, p in tps:
            owners.setdefault((t, p), set()).add(member)
    result: dict[str, list[tuple[str, int]]] = {}
    for member, tps in placement.items():
        result[member] = [tp for tp in tps if not (owners.get(tp, set()) - {member})]
    return result


class StickyAssignor(AbstractAssignor):
    """Eager sticky assignor: balanced, and as close to the previous assignment as balance allows."""

    name: ClassVar[str] = "sticky"
    version: ClassVar[int] = 0
    rebalance_protocol: ClassVar[RebalanceProtocol] = EAGER

    def __init__(self, rack_aware: bool = True) -> None:
        self.rack_aware = rack_aware
        self._owned: tuple[TopicPartition, ...] | None = None
        self._generation = -1

    def subscription_user_data(self, topics: Iterable[str]) -> bytes | None:
        if self._owned is None:
            return None
        return encode_sticky_user_data(self._owned, self._generation)

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        self._owned = tuple(assignment.assigned_partitions)
        self._generation = generation

    def member_data(self, sub: Subscription) -> MemberData:
        if sub.user_data:
            try:
                return decode_sticky_user_data(sub.user_data)
            except ConsumerProtocolError:
                pass
        gen = sub.generation_id if sub.version >= 2 and sub.generation_id >= 0 else None
        return MemberData(tuple(sub.owned_partitions), gen)

    def assign_partitions(
        self,
        cluster_partitions: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        partition_racks: PartitionRacks | None = None,
    ) -> dict[str, list[tuple[str, int]]]:
        """The balanced, sticky placement (before any cooperative hold-back)."""
        members = sorted_members(subscriptions)
        subscribed = {m: frozenset(subscriptions[m].topics) for m in members}
        data = {m: self.member_data(subscriptions[m]) for m in members}
        owned = valid_previous_owners(data, subscribed, cluster_partitions)
        racks = {m: r for m in members if (r := subscriptions[m].rack_id) is not None} if self.rack_aware else None
        return sticky_assign(cluster_partitions, subscribed, owned, members, racks, partition_racks)


class CooperativeStickyAssignor(StickyAssignor):
    """Incremental (KIP-429) sticky assignor: a moving partition is revoked in one rebalance, given in the next."""

    name: ClassVar[str] = "cooperative-sticky"
    rebalance_protocol: ClassVar[RebalanceProtocol] = COOPERATIVE

    def subscription_user_data(self, topics: Iterable[str]) -> bytes | None:
        return _I32.pack(self._generation)

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        self._generation = generation

    def member_data(self, sub: Subscription) -> MemberData:
        gen: int | None = None
        if sub.version >= 2 and sub.generation_id >= 0:
            gen = sub.generation_id
        elif sub.user_data is not None and len(sub.user_data) == 4:
            gen = _I32.unpack(sub.user_data)[0]
        elif sub.user_data:
            try:
                gen = decode_sticky_user_data(sub.user_data).generation
            except ConsumerProtocolError:
                gen = None
        return MemberData(tuple(sub.owned_partitions), gen)

    def assign(
        self,
        cluster_partitions: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        partition_racks: PartitionRacks | None = None,
    ) -> dict[str, Assignment]:
        ideal = self.assign_partitions(cluster_partitions, subscriptions, partition_racks)
        declared = {m: s.owned_partitions for m, s in subscriptions.items()}
        return to_assignments(hold_back_transfers(ideal, declared), subscriptions)
