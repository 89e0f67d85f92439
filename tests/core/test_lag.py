"""coordinator.core.lag against a plain model: lag per group and topic, the cardinality bound, lag seconds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.lag import OTHER, scan, series
from coordinator.core.offset_store import OffsetStore
from coordinator.core.records import OffsetCommitValue

TOPICS = ["a", "b", "c"]


def value(offset: int) -> OffsetCommitValue:
    return OffsetCommitValue(offset, -1, "", 1_000, None)


commits = st.lists(st.tuples(st.sampled_from(["g1", "g2", "g3", "g4", OTHER]), st.sampled_from(TOPICS),
                             st.integers(0, 3), st.integers(0, 50)), max_size=40)
ends_st = st.dictionaries(st.tuples(st.sampled_from(TOPICS), st.integers(0, 3)), st.integers(0, 60), max_size=12)


@settings(max_examples=300, deadline=None)
@given(commits, ends_st, st.integers(0, 5))
def test_lag_matches_a_plain_model_and_the_bound_sums_the_rest(rows: list[tuple[str, str, int, int]],
                                                               ends: dict[tuple[str, int], int],
                                                               max_groups: int) -> None:
    store = OffsetStore()
    model: dict[str, dict[tuple[str, int], int]] = {}
    for g, t, p, o in rows:
        store.put(g, t, p, value(o))
        model.setdefault(g, {})[(t, p)] = o
    lags = scan(store, store.groups(), ends)
    want: dict[str, dict[str, int]] = {}
    for g, offsets in model.items():
        for (t, p), o in offsets.items():
            if (t, p) in ends:
                want.setdefault(g, {})[t] = want.get(g, {}).get(t, 0) + max(0, ends[(t, p)] - o)
    assert {g: lag.topics for g, lag in lags.items()} == want
    assert all(lag.total == sum(lag.topics.values()) for lag in lags.values())

    out = series(lags, max_groups, 10_000, lambda t, p, o: None)
    named = sorted(g for g in want if g != OTHER)
    own = sorted(sorted(named, key=lambda g: (-sum(want[g].values()), g))[:max_groups])
    assert sorted(out.own_groups) == own
    assert {g for g, _ in out.records} <= set(own) | {OTHER}
    # nothing is lost or counted twice: per topic, the series sum to the groups' lag
    for topic in TOPICS:
        assert sum(n for (g, t), n in out.records.items() if t == topic) == \
            sum(want[g].get(topic, 0) for g in want)


def test_lag_seconds_is_the_age_of_the_oldest_unconsumed_record_per_topic() -> None:
    store = OffsetStore()
    store.put("g", "a", 0, value(5))  # 5 behind: the record at 5 was written at 4,000 ms
    store.put("g", "a", 1, value(9))  # 1 behind: the record at 9 at 8,000 ms
    store.put("g", "b", 0, value(3))  # caught up
    stamps = {("a", 0, 5): 4_000, ("a", 1, 9): 8_000}
    lags = scan(store, ["g"], {("a", 0): 10, ("a", 1): 10, ("b", 0): 3})
    out = series(lags, 10, 10_000, lambda t, p, o: stamps.get((t, p, o)), per_partition=True)
    assert out.records == {("g", "a"): 6, ("g", "b"): 0}
    assert out.seconds == {("g", "a"): 6.0, ("g", "b"): 0.0}
    assert out.partition_records == {("g", "a", 0): 5, ("g", "a", 1): 1}
    assert out.partition_seconds == {("g", "a", 0): 6.0, ("g", "a", 1): 2.0}


def test_a_partition_without_a_known_end_is_left_out_not_counted_as_caught_up() -> None:
    store = OffsetStore()
    store.put("g", "a", 0, value(5))
    store.put("h", "remote", 0, value(1))
    lags = scan(store, ["g", "h"], {("a", 0): 7})
    assert set(lags) == {"g"} and lags["g"].topics == {"a": 2}
    out = series(lags, 10, 0, lambda t, p, o: None)
    assert out.records == {("g", "a"): 2}


def test_a_committed_offset_past_the_end_is_no_lag() -> None:
    store = OffsetStore()
    store.put("g", "a", 0, value(50))
    assert scan(store, ["g"], {("a", 0): 7})["g"].topics == {"a": 0}


def test_unknown_ends_are_collected_and_an_unreadable_age_is_absent_not_zero() -> None:
    store = OffsetStore()
    store.put("g", "a", 0, value(2))
    store.put("g", "remote", 3, value(1))
    unknown: set[tuple[str, int]] = set()
    lags = scan(store, ["g"], {("a", 0): 5}, unknown)
    assert unknown == {("remote", 3)}
    out = series(lags, 10, 10_000, lambda t, p, o: None, per_partition=True)
    assert out.records == {("g", "a"): 3} and out.seconds == {} and out.partition_seconds == {}
    assert out.partition_records == {("g", "a", 0): 3}
