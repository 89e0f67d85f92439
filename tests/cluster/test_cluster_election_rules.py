"""The pure cluster rules: replica assignment (Kafka's rack-unaware placement), leader election/ISR, and the
preferred-leader rebalance (Kafka's auto leader rebalance)."""

from __future__ import annotations

from collections import Counter

import pytest

from coordinator.cluster.assignment import assign_replicas
from coordinator.cluster.election import next_state, preferred_elections, reconcile
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


# ---------------------------------------------------------------- preferred-leader rebalance
def balanced_then_failed_over(victim: int) -> tuple[dict[str, dict[int, tuple[int, ...]]], dict]:
    """50 partitions on brokers 1-3, as placed at creation; ``victim``'s leaderships moved to the next replica
    and ``victim`` out of every ISR (a failover), then back in every ISR (it caught up)."""
    assignments = {"__consumer_offsets": assign_replicas([1, 2, 3], 50, 3, start_index=1)}
    states = {}
    for p, replicas in assignments["__consumer_offsets"].items():
        leader = replicas[1] if replicas[0] == victim else replicas[0]
        states[("__consumer_offsets", p)] = st(leader, 1, (1, 2, 3), 3)
    return assignments, states


def test_a_returning_in_sync_broker_gets_exactly_its_preferred_partitions_back() -> None:
    assignments, states = balanced_then_failed_over(victim=2)
    writes = preferred_elections(assignments, states, {1, 2, 3}, 4, 10)
    preferred_by_2 = {("__consumer_offsets", p) for p, r in assignments["__consumer_offsets"].items() if r[0] == 2}
    assert set(writes) == preferred_by_2 and len(writes) in (16, 17)
    for tp, new in writes.items():  # leader epoch bumped, ISR unchanged, written by this controller's epoch
        assert new == st(2, states[tp].leader_epoch + 1, states[tp].isr, 4)
    after = {**states, **writes}
    assert sorted(Counter(s.leader for s in after.values()).values()) == [16, 17, 17]
    assert preferred_elections(assignments, after, {1, 2, 3}, 4, 10) == {}  # balanced: nothing more


def test_preferred_replica_must_be_live_and_in_sync() -> None:
    assignments = {"t": {0: (2, 1), 1: (2, 3), 2: (2, 1)}}
    states = {("t", 0): st(1, 4, (1,)), ("t", 1): st(3, 2, (3, 2)), ("t", 2): st(1, 7, (1, 2))}
    assert preferred_elections(assignments, states, {1, 3}, 5, 10) == {}  # 2 not registered: nothing
    writes = preferred_elections(assignments, states, {1, 2, 3}, 5, 10)
    assert writes == {("t", 1): st(2, 3, (3, 2), 5), ("t", 2): st(2, 8, (1, 2), 5)}  # t-0: 2 not in sync


def test_imbalance_must_exceed_the_percentage() -> None:
    # broker 1 prefers 10 partitions, 1 of them led by 2: 10 % is not above 10 %
    assignments = {"t": {p: (1, 2) for p in range(10)}}
    states = {("t", p): st(1, 0, (1, 2)) for p in range(10)}
    states[("t", 3)] = st(2, 1, (1, 2))
    assert preferred_elections(assignments, states, {1, 2}, 9, 10) == {}
    assert preferred_elections(assignments, states, {1, 2}, 9, 9) == {("t", 3): st(1, 2, (1, 2), 9)}
    states[("t", 4)] = st(NO_LEADER, 3, (1, 2))  # leaderless counts as led elsewhere: 20 % > 10 %
    assert preferred_elections(assignments, states, {1, 2}, 9, 10) == {
        ("t", 3): st(1, 2, (1, 2), 9), ("t", 4): st(1, 4, (1, 2), 9)}
    assert preferred_elections(assignments, states, {1, 2}, 9, 100) == {}  # 100 %: never


def test_partitions_without_state_and_topics_being_deleted_are_left_alone() -> None:
    assignments = {"new": {0: (1, 2)}, "doomed": {0: (1, 2)}}
    states = {("doomed", 0): st(2, 1, (1, 2))}
    assert preferred_elections(assignments, states, {1, 2}, 3, 10, excluded={"doomed"}) == {}
    assert preferred_elections(assignments, states, {1, 2}, 3, 10) == {("doomed", 0): st(1, 2, (1, 2), 3)}
