"""The pure cluster rules: replica assignment (Kafka's rack-unaware placement) and leader election/ISR."""

from __future__ import annotations

from collections import Counter

import pytest

from coordinator.cluster.assignment import assign_replicas
from coordinator.cluster.election import next_state, reconcile
from coordinator.cluster.state import NO_LEADER, PartitionState


# ---------------------------------------------------------------- assignment
@pytest.mark.parametrize("start", [0, 1, 2])
def test_fifty_partitions_on_three_brokers_spread_leaders_17_17_16(start: int) -> None:
    replicas = assign_replicas([3, 1, 2], 50, 3, start_index=start)
    assert sorted(replicas) == list(range(50))
    assert all(sorted(r) == [1, 2, 3] for r in replicas.values())  # three distinct brokers each
    leaders = Counter(r[0] for r in replicas.values())
    assert sorted(leaders.values()) == [16, 17, 17]
    # every broker is a follower (second replica) about as often too
    seconds = Counter(r[1] for r in replicas.values())
    assert max(seconds.values()) - min(seconds.values()) <= 2


def test_kafka_placement_for_five_brokers_matches_its_documented_example() -> None:
    # AdminUtils' doc comment: 5 brokers, 10 partitions, 3 replicas, start index 0, shift 0
    replicas = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0)
    assert [replicas[p][:2] for p in range(10)] == [
        (0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (0, 2), (1, 3), (2, 4), (3, 0), (4, 1)]


def test_replication_factor_is_capped_at_live_brokers() -> None:
    replicas = assign_replicas([7, 9], 4, 3)
    assert all(len(r) == 2 and set(r) == {7, 9} for r in replicas.values())
    assert Counter(r[0] for r in replicas.values()) == {7: 2, 9: 2}


def test_no_broker_is_an_error() -> None:
    with pytest.raises(ValueError):
        assign_replicas([], 3, 1)


# ---------------------------------------------------------------- election
def st(leader: int, epoch: int, isr: tuple[int, ...], cepoch: int = 1) -> PartitionState:
    return PartitionState(leader, epoch, isr, cepoch)


def test_new_partition_leader_is_first_live_replica_and_isr_the_live_replicas() -> None:
    assert next_state((2, 3, 1), None, {1, 3}, 4) == st(3, 0, (3, 1), 4)
    assert next_state((2, 3, 1), None, set(), 4) is None  # no live replica: no state yet


def test_leader_loss_elects_first_live_in_sync_replica_in_assignment_order() -> None:
    current = st(1, 5, (1, 2, 3))
    assert next_state((1, 3, 2), current, {2, 3}, 7) == st(3, 6, (2, 3), 7)


def test_out_of_sync_replica_never_leads_unless_unclean() -> None:
    current = st(1, 5, (1, 2))  # 3 fell out of sync
    clean = next_state((1, 2, 3), current, {3}, 7)
    assert clean == st(NO_LEADER, 6, (1, 2), 7)  # last ISR kept so an in-sync replica can come back
    assert next_state((1, 2, 3), clean, {3}, 7) is None  # stays leaderless, nothing more to write
    assert next_state((1, 2, 3), current, {3}, 7, unclean=True) == st(3, 6, (3,), 7)


def test_returning_in_sync_replica_leads_a_leaderless_partition_again() -> None:
    offline = st(NO_LEADER, 6, (1, 2), 7)
    assert next_state((1, 2, 3), offline, {2, 3}, 8) == st(2, 7, (2,), 8)


def test_follower_loss_shrinks_isr_and_bumps_leader_epoch_but_never_empties_it() -> None:
    assert next_state((1, 2, 3), st(1, 0, (1, 2, 3)), {1, 2}, 2) == st(1, 1, (1, 2), 2)
    assert next_state((1, 2, 3), st(1, 0, (1, 2)), {1, 2, 3}, 2) is None  # nothing added back here


def test_reconcile_writes_only_what_changes() -> None:
    assignments = {"t": {0: (1, 2), 1: (2, 1), 2: (3, 1)}}
    states = {("t", 0): st(1, 0, (1, 2)), ("t", 1): st(2, 0, (2, 1))}
    writes = reconcile(assignments, states, {1, 3}, 9)
    assert writes == {("t", 0): st(1, 1, (1,), 9), ("t", 1): st(1, 1, (1,), 9), ("t", 2): st(3, 0, (3, 1), 9)}
    after = {**states, **writes}
    assert reconcile(assignments, after, {1, 3}, 9) == {}
