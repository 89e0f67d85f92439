"""Partition leader election and ISR bookkeeping on broker loss and return: Kafka's controller rules.

Given a partition's replicas (assignment order, first = preferred leader), its current state (or None for a
new partition), the live brokers and the controller's epoch, ``next_state`` returns the state the controller
must write, or None when nothing changes. Rules:
- New partition: the leader is the first live replica, the ISR every live replica, leader epoch 0. With no
  live replica it stays without state (Kafka's NewPartition).
- Live leader: dead replicas leave the ISR, except that the ISR never becomes empty (Kafka's
  ``removeReplicasFromIsr`` keeps a last member); a change bumps the leader epoch.
- Dead (or no) leader: the new leader is the first replica in assignment order that is live AND in the ISR
  (Kafka's ``offlinePartitionLeaderElection``); the ISR keeps its live members; the leader epoch is bumped.
  If no ISR member is live: with ``unclean`` the first live replica leads with ISR = [it] (data may be
  lost: Kafka's unclean election); otherwise the partition has NO_LEADER and keeps its last ISR, so that a
  returning in-sync replica can lead again without loss.
- Every new state carries the writing controller's epoch. Nothing here adds a replica back to the ISR:
  that is the leader's job once it has caught up (replication slice).

``preferred_elections`` is Kafka's auto leader rebalance (``KafkaController.checkAndTriggerAutoLeaderRebalance``
with ``PreferredReplicaPartitionLeaderElectionStrategy``):
- Partitions are grouped by their preferred replica (the first in the assignment). For each broker, the
  imbalance is the share of its preferred partitions that have a state whose leader is another broker (or
  none). Only when it exceeds ``imbalance_pct`` percent are that broker's partitions elected.
- A partition is elected only when its preferred replica is live AND in the ISR (never an out-of-sync or
  unregistered one, so a node that left or has not caught up gets nothing back); the new state has the
  preferred replica as leader, the leader epoch bumped, the ISR unchanged, the controller's epoch.
- Topics in ``excluded`` (queued for deletion) are neither counted nor elected. A partition with no state
  yet counts as balanced (it is ``next_state``'s to elect).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from .state import NO_LEADER, PartitionState, TopicPartition


def next_state(replicas: tuple[int, ...], current: PartitionState | None, live: Collection[int],
               controller_epoch: int, unclean: bool = False) -> PartitionState | None:
    if current is None:
        online = tuple(r for r in replicas if r in live)
        if not online:
            return None
        return PartitionState(online[0], 0, online, controller_epoch)
    leader, isr = current.leader, current.isr
    if leader != NO_LEADER and leader in live:
        shrunk = tuple(r for r in isr if r in live) or isr
        if shrunk == isr:
            return None
        return PartitionState(leader, current.leader_epoch + 1, shrunk, controller_epoch)
    live_isr = tuple(r for r in isr if r in live)
    eligible = [r for r in replicas if r in live_isr]
    if eligible:
        return PartitionState(eligible[0], current.leader_epoch + 1, live_isr, controller_epoch)
    if unclean:
        online = [r for r in replicas if r in live]
        if online:
            return PartitionState(online[0], current.leader_epoch + 1, (online[0],), controller_epoch)
    if leader == NO_LEADER:
        return None
    return PartitionState(NO_LEADER, current.leader_epoch + 1, isr, controller_epoch)


def reconcile(assignments: Mapping[str, Mapping[int, tuple[int, ...]]],
              states: Mapping[TopicPartition, PartitionState], live: Collection[int], controller_epoch: int,
              unclean: bool = False) -> dict[TopicPartition, PartitionState]:
    """Every partition's ``next_state`` that changes something: the writes the controller owes."""
    out: dict[TopicPartition, PartitionState] = {}
    for topic, parts in assignments.items():
        for p, replicas in parts.items():
            new = next_state(replicas, states.get((topic, p)), live, controller_epoch, unclean)
            if new is not None:
                out[(topic, p)] = new
    return out


def preferred_elections(assignments: Mapping[str, Mapping[int, tuple[int, ...]]],
                        states: Mapping[TopicPartition, PartitionState], live: Collection[int],
                        controller_epoch: int, imbalance_pct: int,
                        excluded: Collection[str] = ()) -> dict[TopicPartition, PartitionState]:
    """The preferred-replica elections an imbalance check calls for: partition -> the state to write."""
    by_preferred: dict[int, list[TopicPartition]] = {}
    for topic, parts in assignments.items():
        if topic in excluded:
            continue
        for p, replicas in parts.items():
            if replicas:
                by_preferred.setdefault(replicas[0], []).append((topic, p))
    out: dict[TopicPartition, PartitionState] = {}
    for preferred, tps in sorted(by_preferred.items()):
        elsewhere = [tp for tp in tps if (st := states.get(tp)) is not None and st.leader != preferred]
        if len(elsewhere) * 100 <= imbalance_pct * len(tps):  # Kafka: ratio > percentage / 100 triggers
            continue
        if preferred not in live:
            continue
        for tp in elsewhere:
            st = states[tp]
            if preferred in st.isr:
                out[tp] = PartitionState(preferred, st.leader_epoch + 1, st.isr, controller_epoch)
    return out
