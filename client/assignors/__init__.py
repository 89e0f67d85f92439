'''Consumer-side partition assignors: the leader's half of Kafka's "consumer" group protocol.

The group leader receives every member's ``Subscription`` (``client.consumer_protocol``) in its JoinGroup
response, runs the assignor the group agreed on, and sends each member an ``Assignment`` in SyncGroup.
Assignors are pure functions of their inputs: no I/O, no clock, no randomness.

Built-in assignors (protocol names are Kafka's, so mixed groups of Java, kafka-python, aiokafka and
librdkafka members agree on them):

=====================  =======================  ============  ============================================
name                   class                    protocol      rule
=====================  =======================  ============  ============================================
``range``              ``RangeAssignor``        eager         per topic, contiguous ranges (rack-aware)
``roundrobin``         ``RoundRobinAssignor``   eager         all partitions dealt around sorted members
``sticky``             ``StickyAssignor``       eager         balanced, keeps previous ownership (racks)
``cooperative-sticky`` ``CooperativeSticky...`` cooperative   sticky, moves take two rebalances (racks)
=====================  =======================  ============  ============================================

Rack awareness is Kafka's (KIP-881): it is not a separate protocol name, it switches on when the leader
passes ``partition_racks`` and members send a ``rack_id`` (subscription v3). Pass ``rack_aware=False`` to
the constructor to turn it off.

The interface (``base.PartitionAssignor``)::

    name: str                          # the protocol name sent in JoinGroup; must be unique in the group
    version: int                       # the assignor's own version (Kafka's ConsumerPartitionAssignor.version)
    rebalance_protocol: "eager" | "cooperative"
    subscription_user_data(topics) -> bytes | None
        # called before each JoinGroup; the bytes travel in Subscription.user_data to the leader
    assign(cluster_partitions: dict[str, int],            # topic -> partition count
           subscriptions: dict[str, Subscription],        # member id -> decoded subscription
           partition_racks: dict[(topic, p), set[str]] | None = None,   # replica racks, optional
           ) -> dict[str, Assignment]                     # member id -> assignment (every member present)
    on_assignment(assignment: Assignment, generation: int) -> None
        # called on every member after SyncGroup, before partitions are handed to the application

The rules every ``assign`` must follow are in ``base``. An eager assignor may move any partition: all
members give up everything before rejoining. A cooperative assignor must not give a partition to a member
while another member still declares it in ``owned_partitions``; it leaves it out and the group rebalances
again (see ``sticky``).

A custom assignor: subclass ``AbstractAssignor`` (no user data, no state) and implement
``assign_partitions``. This one is the seeds' RandomAssignor made deterministic, as the contract requires:
each partition goes to a subscriber of its topic chosen by a hash of its name (this block is executed by
``tests/client/test_assignors_examples.py``)::

    import zlib
    from client.assignors import AbstractAssignor, sorted_members

    class HashAssignor(AbstractAssignor):
        name = "hash"

        def assign_partitions(self, cluster_partitions, subscriptions, partition_racks):
            members = sorted_members(subscriptions)
            result = {m: [] for m in members}
            for topic in sorted({t for s in subscriptions.values() for t in s.topics}):
                subscribers = [m for m in members if topic in subscriptions[m].topics]
                for p in range(cluster_partitions.get(topic, 0)):
                    h = zlib.crc32(f"{topic}-{p}".encode())
                    result[subscribers[h % len(subscribers)]].append((topic, p))
            return result

Register it with the consumer by instance, next to or instead of the built-ins; give it a name no other
assignor in the group uses.
'''

from client.assignors.base import (
    COOPERATIVE,
    EAGER,
    AbstractAssignor,
    PartitionAssignor,
    member_sort_key,
    sorted_members,
    to_assignments,
)
from client.assignors.range import RangeAssignor
from client.assignors.roundrobin import RoundRobinAssignor
from client.assignors.sticky import CooperativeStickyAssignor, StickyAssignor

__all__ = [
    "BUILTIN_ASSIGNORS",
    "COOPERATIVE",
    "EAGER",
    "AbstractAssignor",
    "CooperativeStickyAssignor",
    "PartitionAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "member_sort_key",
    "sorted_members",
    "to_assignments",
]

BUILTIN_ASSIGNORS = {
    cls.name: cls for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)
}
