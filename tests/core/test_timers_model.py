"""Timers agree with a naive model under random schedule/cancel/pop sequences (lazy re-queueing included);
the heap never holds more than twice the live keys plus 64 entries, and re-arming a key later (a heartbeat)
pushes nothing."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.timers import Timers

ops = st.lists(
    st.one_of(
        st.tuples(st.just("schedule"), st.integers(0, 7), st.integers(0, 60)),
        st.tuples(st.just("cancel"), st.integers(0, 7), st.just(0)),
        st.tuples(st.just("pop"), st.just(0), st.integers(0, 60)),
        st.tuples(st.just("next"), st.just(0), st.just(0)),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_timers_match_a_sorted_dict_model(sequence: list[tuple[str, int, int]]) -> None:
    timers = Timers()
    model: dict[int, tuple[int, int]] = {}
    seq = 0
    for op, key, value in sequence:
        if op == "schedule":
            seq += 1
            model[key] = (value, seq)
            timers.schedule(key, value)
        elif op == "cancel":
            model.pop(key, None)
            timers.cancel(key)
        elif op == "pop":
            due = sorted((d, s, k) for k, (d, s) in model.items() if d <= value)
            expected = due[0][2] if due else None
            if expected is not None:
                del model[expected]
            assert timers.pop_due(value) == expected
        else:
            expected_next = min((d for d, _ in model.values()), default=None)
            assert timers.next_deadline() == expected_next
        assert len(timers) == len(model)
        assert len(timers._heap) <= 2 * len(model) + 64


def test_rearming_later_pushes_nothing_and_the_entry_moves_when_it_reaches_the_top() -> None:
    timers = Timers()
    timers.schedule("a", 100)
    timers.schedule("b", 150)
    for deadline in range(200, 1200, 100):  # ten heartbeats of "a", each moving its deadline later
        timers.schedule("a", deadline)
    assert len(timers._heap) == 2 and timers.lower_bound() == 100  # the stale entry stays queued
    assert timers.pop_due(1000) == "b"  # "a"'s entry at 100 reached the top and moved to 1100
    assert timers.lower_bound() == 1100 and len(timers._heap) == 1
    assert timers.pop_due(1099) is None and timers.pop_due(1100) == "a"
    assert len(timers) == 0 and timers.next_deadline() is None


def test_an_earlier_deadline_is_pushed_and_the_later_entry_is_dropped_as_stale() -> None:
    timers = Timers()
    timers.schedule("a", 500)
    timers.schedule("a", 300)  # moved earlier: the timer task must see it (lower_bound drops)
    assert timers.lower_bound() == 300 and timers.deadline("a") == 300
    assert timers.pop_due(300) == "a"
    assert timers.next_deadline() is None and not timers._heap  # the entry at 500 was stale


def test_cancel_then_reschedule_fires_once_at_the_new_deadline() -> None:
    timers = Timers()
    timers.schedule("a", 100)
    timers.cancel("a")
    timers.schedule("a", 200)
    assert timers.pop_due(150) is None
    assert timers.expired(1000) == ["a"]


def test_cancelling_many_keys_keeps_the_heap_bounded() -> None:
    timers = Timers()
    for k in range(300):
        timers.schedule(k, k)
    for k in range(290):
        timers.cancel(k)
    assert len(timers) == 10 and len(timers._heap) <= 2 * 10 + 64
    assert timers.expired(10_000) == list(range(290, 300))
