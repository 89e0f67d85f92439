"""KIP-848 "consumer" groups: a sans-IO core beside the classic group code (which it does not touch).

Modules, each with its own rules: ``model`` (assignments, member and group states, error codes),
``records`` (record types 3-8, byte-exact with Kafka), ``member`` (one member's state), ``reconcile``
(Kafka's CurrentAssignmentBuilder), ``assignors`` ("uniform" and "range"), ``group`` (one group's state,
rebuilt only by ``replay``; describe), ``heartbeat`` (ConsumerGroupHeartbeat, leaves and timer expiry over
all the groups of a shard: values and ``now_ms`` in, response + records + deadlines out), ``migration``
(online migration classic <-> consumer, and classic-protocol members inside a consumer group), ``history``
(each group epoch bump as a rebalance history entry, in the classic groups' records: rebalance_history.py).
Nothing here does I/O, reads a clock or imports the runtime, storage or cluster packages.
"""

from coordinator.core.consumer_group.heartbeat import (
    ConsumerGroupConfig,
    ConsumerGroups,
    Deadline,
    HeartbeatOutcome,
    TopicInfo,
)

__all__ = ["ConsumerGroupConfig", "ConsumerGroups", "Deadline", "HeartbeatOutcome", "TopicInfo"]
