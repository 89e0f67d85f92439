"""The leader's replica bookkeeping (coordinator/cluster/replica_state.py) with a manual clock: each story gives
a partition's replicas, follower fetches at given times, and checks the high watermark and the ISR change
the leader would write."""

from __future__ import annotations

from coordinator.cluster.replica_state import LeaderReplicaState

LAG = 30_000


def leader(isr: tuple[int, ...] = (1, 2, 3), hw: int = 0, start: int = 0, now: int = 0) -> LeaderReplicaState:
    return LeaderReplicaState(1, 5, (1, 2, 3), isr, hw, start, now)


def test_the_high_watermark_is_the_least_durable_end_over_the_isr() -> None:
    st = leader()
    assert not st.advance(10)  # the followers have not fetched yet: nothing is on their disks
    st.on_fetch(2, 7, 10, 100)
    assert not st.advance(10)
    st.on_fetch(3, 4, 10, 100)
    assert st.advance(10) and st.high_watermark == 4
    st.on_fetch(3, 10, 10, 200)
    assert st.advance(10) and st.high_watermark == 7
    assert not st.advance(6)  # never moves back, even if asked with a lower end
    assert st.high_watermark == 7
    st.on_fetch(2, 10, 12, 300)
    assert st.advance(8) and st.high_watermark == 8  # the leader's own durable end bounds it too


def test_a_follower_outside_the_isr_does_not_hold_the_high_watermark_back() -> None:
    st = leader(isr=(1, 2))
    st.on_fetch(2, 9, 9, 0)
    st.on_fetch(3, 1, 9, 0)
    assert st.advance(9) and st.high_watermark == 9


def test_a_pending_expansion_counts_for_the_high_watermark() -> None:
    st = leader(isr=(1, 2))
    st.on_fetch(2, 5, 5, 0)
    st.on_fetch(3, 5, 5, 0)
    assert st.advance(5)
    st.pending_isr = (1, 2, 3)
    st.on_fetch(2, 9, 9, 10)
    assert not st.advance(9)  # 3 is being added at 5: the maximal ISR keeps the high watermark at 5
    assert st.high_watermark == 5


def test_a_follower_that_stops_fetching_leaves_the_isr_after_the_lag_time() -> None:
    st = leader(now=0)
    st.on_fetch(2, 0, 0, 1_000)
    st.on_fetch(3, 0, 0, 1_000)
    st.on_fetch(2, 50, 50, 20_000)  # 2 keeps up; 3 fetches no more, and the leader's end moves on
    assert st.isr_change(50, 30_000, LAG) is None  # 3 was caught up at 1,000: 29 s ago
    assert st.isr_change(50, 31_000, LAG) is None  # exactly the lag time: still in sync (Kafka's "<=")
    assert st.isr_change(50, 31_001, LAG) == (1, 2)
    st.pending_isr = (1, 2)
    assert st.isr_change(50, 40_000, LAG) is None  # one change at a time
    st.isr_written((1, 2), 40_000)
    assert st.isr == (1, 2) and st.pending_isr is None


def test_a_follower_fully_caught_up_stays_in_sync_however_long_ago_it_fetched() -> None:
    st = leader()
    st.on_fetch(2, 10, 10, 0)
    st.on_fetch(3, 10, 10, 0)
    assert st.isr_change(10, 100_000, LAG) is None  # nothing was written since: its end is the leader's


def test_caught_up_at_the_previous_fetch_counts_from_that_fetch() -> None:
    st = leader()
    st.on_fetch(2, 0, 10, 1_000)  # behind
    st.on_fetch(2, 10, 20, 25_000)  # reached what the leader had at the previous fetch: caught up at 1,000
    assert st.followers[2].caught_up_ms == 1_000
    st.on_fetch(2, 20, 30, 40_000)  # reached the end of 25,000
    assert st.followers[2].caught_up_ms == 25_000


def test_a_follower_that_catches_up_to_the_high_watermark_joins_the_isr() -> None:
    st = leader(isr=(1, 2), start=4)
    st.on_fetch(2, 10, 10, 0)
    assert st.advance(10) and st.high_watermark == 10
    st.on_fetch(3, 6, 10, 0)
    assert st.isr_change(10, 0, LAG) is None  # below the high watermark
    st.on_fetch(3, 10, 10, 100)
    assert st.isr_change(10, 100, LAG) == (1, 2, 3)
    assert st.isr_change(10, 100, LAG, live={1, 2}) is None  # never a replica that is not live
    st.isr_written((1, 2, 3), 100)
    assert st.followers[3].caught_up_ms == 100


def test_a_follower_must_reach_the_start_of_the_leader_epoch_to_join() -> None:
    st = leader(isr=(1,), start=20)  # this leader's epoch began at 20
    st.advance(5)
    st.on_fetch(2, 10, 25, 0)  # past the high watermark (5) but before the epoch's start
    assert st.isr_change(25, 0, LAG) is None


def test_acks_need_min_insync_replicas_capped_at_the_replica_count() -> None:
    st = leader(isr=(1,))
    assert not st.acks_ok(2)
    assert leader(isr=(1, 3)).acks_ok(2)
    single = LeaderReplicaState(1, 0, (1,), (1,), 0, 0, 0)
    assert single.acks_ok(2)  # a replication-factor-1 partition takes writes
