"""Hypothesis properties of the built-in assignors over random groups.

Groups: 1-8 members, 1-5 topics of 0-12 partitions (plus a topic nobody created), random non-empty
subscriptions. Properties: full and exclusive coverage; range and roundrobin follow Kafka's rules
(checked in a different form than they are implemented); sticky is balanced and moves nothing it need not
when a member leaves or joins; cooperative-sticky never gives a partition away in the rebalance that
revokes it, and completes the move in the next one.
"""

from __future__ import annotations

from itertools import cycle

from hypothesis import given, settings
from hypothesis import strategies as st

from client.assignors import (
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
)
from client.consumer_protocol import Assignment, Subscription

SETTINGS = settings(max_examples=150, deadline=None)
ALL = [RangeAssignor(), RoundRobinAssignor(), StickyAssignor(), CooperativeStickyAssignor()]


@st.composite
def groups(draw: st.DrawFn, identical: bool = False) -> tuple[dict[str, int], dict[str, Subscription]]:
    n_topics = draw(st.integers(1, 5))
    partitions = {f"t{i}": draw(st.integers(0, 12)) for i in range(n_topics)}
    topics = sorted(partitions) + ["missing"]
    members = draw(st.lists(st.text("abcdefgh", min_size=1, max_size=3), min_size=1, max_size=8, unique=True))
    if identical:
        chosen = tuple(draw(st.lists(st.sampled_from(topics), min_size=1, unique=True)))
        subs = {m: Subscription(chosen) for m in members}
    else:
        subs = {
            m: Subscription(tuple(draw(st.lists(st.sampled_from(topics), min_size=1, unique=True))))
            for m in members
        }
    return partitions, subs


def wanted(partitions: dict[str, int], subs: dict[str, Subscription]) -> set[tuple[str, int]]:
    topics = {t for s in subs.values() for t in s.topics if t in partitions}
    return {(t, p) for t in topics for p in range(partitions[t])}


def owned(result: dict[str, Assignment]) -> dict[str, list[tuple[str, int]]]:
    return {m: list(a.assigned_partitions) for m, a in result.items()}


def check_exclusive_coverage(partitions, subs, result, complete: bool = True) -> None:
    assert set(result) == set(subs)
    assigned = [tp for a in result.values() for tp in a.assigned_partitions]
    assert len(assigned) == len(set(assigned)), "assigned twice"
    assert set(assigned) <= wanted(partitions, subs)
    if complete:
        assert set(assigned) == wanted(partitions, subs), "left unassigned"
    for m, a in result.items():
        assert all(t in subs[m].topics for t, _ in a.assigned_partitions), "given to a non-subscriber"


@SETTINGS
@given(groups())
def test_every_subscribed_partition_is_assigned_exactly_once_to_a_subscriber(group) -> None:
    partitions, subs = group
    for assignor in ALL:
        check_exclusive_coverage(partitions, subs, assignor.assign(partitions, subs))


@SETTINGS
@given(groups())
def test_range_gives_each_subscriber_a_contiguous_range_sized_by_kafkas_rule(group) -> None:
    partitions, subs = group
    result = RangeAssignor().assign(partitions, subs)
    for topic, n in partitions.items():
        consumers = sorted(m for m in subs if topic in subs[m].topics)
        if not consumers:
            continue
        next_start = 0
        for i, m in enumerate(consumers):
            mine = [p for t, p in result[m].assigned_partitions if t == topic]
            expected_len = n // len(consumers) + (1 if i < n % len(consumers) else 0)
            assert mine == list(range(next_start, next_start + expected_len)), (topic, m)
            next_start += expected_len


@SETTINGS
@given(groups())
def test_roundrobin_deals_sorted_partitions_around_sorted_members_skipping_non_subscribers(group) -> None:
    partitions, subs = group
    result = RoundRobinAssignor().assign(partitions, subs)
    expected: dict[str, list] = {m: [] for m in subs}
    circle = cycle(sorted(subs))
    for t, p in sorted(wanted(partitions, subs)):
        member = next(m for m in circle if t in subs[m].topics)
        expected[member].append((t, p))
    assert owned(result) == expected


def spread_by_subscription(subs, result) -> list[int]:
    by_subscription: dict[frozenset, list[int]] = {}
    for m, a in result.items():
        by_subscription.setdefault(frozenset(subs[m].topics), []).append(len(a.assigned_partitions))
    return [max(v) - min(v) for v in by_subscription.values()]


@SETTINGS
@given(groups(), st.randoms(use_true_random=False))
def test_sticky_is_balanced_among_identical_subscriptions_even_from_arbitrary_previous_claims(group, rnd) -> None:
    partitions, subs = group
    every = sorted(wanted(partitions, subs) | {("t0", 99)})
    claimed = {
        m: Subscription(s.topics, None, tuple(rnd.sample(every, rnd.randint(0, len(every)))), rnd.choice([-1, 3, 4]))
        for m, s in subs.items()
    }
    for assignor in (StickyAssignor(), CooperativeStickyAssignor()):
        ideal = StickyAssignor().assign(partitions, claimed)
        check_exclusive_coverage(partitions, claimed, ideal)
        assert all(spread <= 1 for spread in spread_by_subscription(subs, ideal))
        check_exclusive_coverage(partitions, claimed, assignor.assign(partitions, claimed),
                                 complete=assignor.rebalance_protocol == "eager")


def with_ownership(subs, result) -> dict[str, Subscription]:
    return {m: Subscription(subs[m].topics, None, result[m].assigned_partitions, 5) for m in subs}


@SETTINGS
@given(groups(identical=True), st.data())
def test_sticky_moves_only_the_leavers_partitions_when_a_member_leaves(group, data) -> None:
    partitions, subs = group
    before = StickyAssignor().assign(partitions, subs)
    leaver = data.draw(st.sampled_from(sorted(subs)))
    survivors = {m: s for m, s in with_ownership(subs, before).items() if m != leaver}
    if not survivors:
        return
    after = StickyAssignor().assign(partitions, survivors)
    check_exclusive_coverage(partitions, survivors, after)
    for m in survivors:
        assert set(before[m].assigned_partitions) <= set(after[m].assigned_partitions), m
    loads = [len(a.assigned_partitions) for a in after.values()]
    assert max(loads) - min(loads) <= 1


@SETTINGS
@given(groups(identical=True))
def test_sticky_moves_only_what_the_joiner_needs_when_a_member_joins(group) -> None:
    partitions, subs = group
    before = StickyAssignor().assign(partitions, subs)
    joined = with_ownership(subs, before)
    joined["zz-new"] = Subscription(next(iter(subs.values())).topics)
    after = StickyAssignor().assign(partitions, joined)
    check_exclusive_coverage(partitions, joined, after)
    for m in subs:
        assert set(after[m].assigned_partitions) <= set(before[m].assigned_partitions), m
    moved = sum(len(set(before[m].assigned_partitions) - set(after[m].assigned_partitions)) for m in subs)
    total = len(wanted(partitions, subs))
    assert moved == len(after["zz-new"].assigned_partitions) in (total // len(joined), -(-total // len(joined)))


def violations(subs: dict[str, Subscription], result: dict[str, Assignment]) -> list:
    """Partitions given to a member while another member of the same rebalance still declares them."""
    owners: dict = {}
    for m, s in subs.items():
        for tp in s.owned_partitions:
            owners.setdefault(tp, set()).add(m)
    return [(m, tp) for m, a in result.items() for tp in a.assigned_partitions if owners.get(tp, {m}) - {m}]


@SETTINGS
@given(groups(), st.data())
def test_cooperative_sticky_never_assigns_a_partition_in_the_rebalance_that_revokes_it(group, data) -> None:
    partitions, subs = group
    assignor = CooperativeStickyAssignor()
    stable = assignor.assign(partitions, subs)  # fresh group: nothing owned yet, so nothing held back
    check_exclusive_coverage(partitions, subs, stable)
    # the group changes: one member may leave, one joins (subscribed like a random existing member)
    members = dict(with_ownership(subs, stable))
    if data.draw(st.booleans()) and len(members) > 1:
        del members[data.draw(st.sampled_from(sorted(members)))]
    members["new"] = Subscription(subs[data.draw(st.sampled_from(sorted(subs)))].topics)
    round1 = assignor.assign(partitions, members)
    assert violations(members, round1) == []
    check_exclusive_coverage(partitions, members, round1, complete=False)
    held_back = wanted(partitions, members) - {tp for a in round1.values() for tp in a.assigned_partitions}
    declared = {tp for s in members.values() for tp in s.owned_partitions}
    assert held_back <= declared, "only partitions someone still owns may wait for the next rebalance"
    # follow-up rebalance: everyone now owns exactly its round-1 assignment
    rejoin = {m: Subscription(s.topics, None, round1[m].assigned_partitions, 6) for m, s in members.items()}
    round2 = assignor.assign(partitions, rejoin)
    assert violations(rejoin, round2) == []
    check_exclusive_coverage(partitions, rejoin, round2)  # the held-back partitions have now moved
    assert all(spread <= 1 for spread in spread_by_subscription(members, round2))
