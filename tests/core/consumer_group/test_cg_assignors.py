"""The server assignors: properties for any input (hypothesis), and a few stories with known answers.

Properties: every partition of a subscribed topic is assigned exactly once, to a subscriber; uniform
homogeneous: sizes within 1, and one member joining or leaving moves only what balance requires (joining:
only partitions the newcomer receives change owner; leaving: only the leaver's partitions change owner);
uniform heterogeneous: no partition could move to a subscriber of its topic holding 2 fewer; range:
contiguous ranges per topic, sizes within 1 per topic, co-partitioned for equal topics.
"""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.consumer_group.assignors import MemberSpec, range_assignor, uniform
from coordinator.core.consumer_group.model import Assignment, size

TOPICS = [uuid.UUID(int=i + 1) for i in range(4)]


def owners(result: dict[str, Assignment]) -> dict[tuple[uuid.UUID, int], str]:
    out: dict[tuple[uuid.UUID, int], str] = {}
    for m, a in result.items():
        for t, ps in a.items():
            for p in ps:
                assert (t, p) not in out, f"{t}-{p} assigned twice"
                out[(t, p)] = m
    return out


def check_complete(members: dict[str, MemberSpec], partitions: dict[uuid.UUID, int],
                   result: dict[str, Assignment]) -> dict[tuple[uuid.UUID, int], str]:
    own = owners(result)
    subscribed = {t for s in members.values() for t in s.subscribed}
    assert set(own) == {(t, p) for t in subscribed for p in range(partitions[t])}
    for (t, _), m in own.items():
        assert t in members[m].subscribed
    assert set(result) == set(members)
    return own


partition_counts = st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 12), min_size=1, max_size=4)


@st.composite
def homogeneous(draw: st.DrawFn) -> tuple[dict[str, MemberSpec], dict[uuid.UUID, int]]:
    partitions = draw(partition_counts)
    topics = frozenset(partitions)
    n = draw(st.integers(1, 9))
    return {f"m{i}": MemberSpec(topics) for i in range(n)}, partitions


@st.composite
def heterogeneous(draw: st.DrawFn) -> tuple[dict[str, MemberSpec], dict[uuid.UUID, int]]:
    partitions = draw(partition_counts)
    topics = sorted(partitions, key=lambda u: u.int)
    n = draw(st.integers(1, 8))
    members = {f"m{i}": MemberSpec(frozenset(draw(st.sets(st.sampled_from(topics), min_size=1))))
               for i in range(n)}
    return members, partitions


def with_targets(members: dict[str, MemberSpec], result: dict[str, Assignment]) -> dict[str, MemberSpec]:
    return {m: MemberSpec(s.subscribed, result.get(m, {}), s.instance_id) for m, s in members.items()}


@settings(max_examples=150, deadline=None)
@given(homogeneous(), st.data())
def test_uniform_homogeneous_is_balanced_and_moves_only_what_balance_requires(case, data) -> None:  # type: ignore[no-untyped-def]
    members, partitions = case
    first = uniform(members, partitions)
    own = check_complete(members, partitions, first)
    sizes = [size(a) for a in first.values()]
    assert max(sizes) - min(sizes) <= 1
    # stable: the same input keeps everything
    settled = with_targets(members, first)
    assert uniform(settled, partitions) == first
    # one member joins: only the partitions it receives change owner
    joined = {**settled, "new": MemberSpec(next(iter(members.values())).subscribed)}
    after = uniform(joined, partitions)
    own2 = check_complete(joined, partitions, after)
    moved = {tp for tp in own if own2[tp] != own[tp]}
    assert moved == {tp for tp, m in own2.items() if m == "new"}
    assert max(size(a) for a in after.values()) - min(size(a) for a in after.values()) <= 1
    # one member leaves: only its partitions change owner
    if len(members) > 1:
        leaver = data.draw(st.sampled_from(sorted(members)))
        left = {m: s for m, s in settled.items() if m != leaver}
        after = uniform(left, partitions)
        own3 = check_complete(left, partitions, after)
        assert {tp for tp, m in own.items() if m != leaver and own3[tp] != m} == set()


@settings(max_examples=150, deadline=None)
@given(heterogeneous())
def test_uniform_heterogeneous_assigns_everything_and_is_locally_balanced(case) -> None:  # type: ignore[no-untyped-def]
    members, partitions = case
    result = uniform(members, partitions)
    own = check_complete(members, partitions, result)
    load = {m: size(a) for m, a in result.items()}
    for (t, _), m in own.items():
        for other, spec in members.items():
            if t in spec.subscribed:
                assert load[other] >= load[m] - 1, "a partition could move to a subscriber with 2 fewer"
    # sticky: a second run over its own result changes nothing
    assert uniform(with_targets(members, result), partitions) == result


@settings(max_examples=150, deadline=None)
@given(heterogeneous())
def test_range_gives_contiguous_balanced_ranges_per_topic(case) -> None:  # type: ignore[no-untyped-def]
    members, partitions = case
    result = range_assignor(members, partitions)
    check_complete(members, partitions, result)
    for t in partitions:
        subs = sorted(m for m, s in members.items() if t in s.subscribed)  # no static members here
        if not subs:
            continue
        sizes = [len(result[m].get(t, ())) for m in subs]
        assert max(sizes) - min(sizes) <= 1
        ranges = [sorted(result[m].get(t, ())) for m in subs]
        for ps in ranges:
            assert ps == list(range(ps[0], ps[0] + len(ps))) if ps else True
        # in subscriber order, the ranges follow one another from partition 0
        assert [p for ps in ranges for p in ps] == list(range(partitions[t]))


def test_range_co_partitions_and_orders_static_members_first() -> None:
    a, b = TOPICS[:2]
    members = {"m1": MemberSpec(frozenset({a, b})), "m2": MemberSpec(frozenset({a, b}), instance_id="z"),
               "m0": MemberSpec(frozenset({a, b}))}
    result = range_assignor(members, {a: 5, b: 5})
    assert result == {"m2": {a: frozenset({0, 1}), b: frozenset({0, 1})},
                      "m0": {a: frozenset({2, 3}), b: frozenset({2, 3})},
                      "m1": {a: frozenset({4}), b: frozenset({4})}}


def test_uniform_drops_partitions_of_unsubscribed_or_shrunk_topics() -> None:
    a, b = TOPICS[:2]
    members = {"m": MemberSpec(frozenset({a}), {a: frozenset({0, 5}), b: frozenset({0})})}
    assert uniform(members, {a: 2}) == {"m": {a: frozenset({0, 1})}}
