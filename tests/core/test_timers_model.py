"""Timers agree with a naive model under random schedule/cancel/pop sequences (lazy re-queueing included)."""

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
        assert len(timers._heap) <= 2 * len(model) + 64 + 1
