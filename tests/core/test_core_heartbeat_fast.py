"""``Coordinator.heartbeat`` (the hot path) against ``Coordinator.handle(12, ...)`` (the generic path).

Two coordinators are driven identically (same config, same seeded ids, same manual clock); one answers the
Heartbeat under test with ``heartbeat()``, the other with ``handle()``. For every situation both must give
the same error code and leave the same timers behind (the member's session deadline is what a heartbeat
moves). ``heartbeat()`` answers None exactly when a timer may be due; the runtime then falls back to
``handle()``, which fires due timers, and that fallback must again match the generic twin.
Both paths share ``membership.heartbeat``, which inlines the member checks SyncGroup makes through
``_member_lookup``; ``shared_rule`` recomputes the answer from ``_member_lookup`` so the inlined copy is
checked against the original, check for check, in every situation and random drive.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from core_harness import HEARTBEAT, Harness
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.errors import Err
from coordinator.core.group import EMPTY, PREPARING
from coordinator.core.membership import _member_lookup

SESSION = 6000


@dataclass(frozen=True)
class Beat:
    group: str
    generation: int
    member: str
    instance: str | None = None


def generic(h: Harness, version: int, beat: Beat) -> int:
    body = {"group_id": beat.group, "generation_id": beat.generation, "member_id": beat.member}
    if version >= 3:
        body["group_instance_id"] = beat.instance
    return h.error(h.send(HEARTBEAT, version, body, f"hb {beat.member}"))


def hot(h: Harness, version: int, beat: Beat) -> int | None:
    """Exactly what the hot decoder hands the core: the instance id exists from v3 on."""
    return h.coord.heartbeat(beat.group, beat.generation, beat.member, beat.instance if version >= 3 else None,
                             h.now)


def shared_rule(h: Harness, version: int, beat: Beat) -> int:
    """The answer by the checks SyncGroup uses (a loading shard answers NONE for Heartbeat), then
    Heartbeat's own state rule: Empty -> UNKNOWN_MEMBER_ID, PreparingRebalance -> REBALANCE_IN_PROGRESS."""
    group, error = _member_lookup(h.coord._env, beat.group, beat.member, beat.instance if version >= 3 else None,
                                  beat.generation, Err.NONE)
    if error is not None:
        return error
    if group.state is EMPTY:
        return Err.UNKNOWN_MEMBER_ID
    return Err.REBALANCE_IN_PROGRESS if group.state is PREPARING else Err.NONE


def hot_or_generic(h: Harness, version: int, beat: Beat) -> int:
    """What the runtime does (GroupService.hot_heartbeat): the hot answer, or the generic path on None."""
    error = hot(h, version, beat)
    return generic(h, version, beat) if error is None else error


def deadlines(h: Harness) -> dict:
    """Every live timer key -> its deadline (sequence numbers left out)."""
    return {key: entry[0] for key, entry in h.coord._env.timers._live.items()}


def snapshot(h: Harness) -> tuple:
    return h.now, h.coord.next_deadline(), deadlines(h), sorted(h.coord.groups(), key=lambda g: g.group_id)


# ------------------------------------------------------------------ situations
# Each builds state on a fresh Harness and returns (the heartbeat to send, the error Kafka answers by version).

Situation = Callable[[Harness], tuple[Beat, Callable[[int], int]]]


def _always(err: Err) -> Callable[[int], int]:
    return lambda version: err


def stable_member(h: Harness):
    gen, (lead, _m2) = h.stable_group("g", 2, session=SESSION)
    h.sleep(2500)
    return Beat("g", gen, lead), _always(Err.NONE)


def preparing_rebalance(h: Harness):
    gen, (lead, _m2) = h.stable_group("g", 2, session=SESSION)
    h.sleep(1000)
    h.join_new("g", client_id="newcomer", session=SESSION)  # parked: the group prepares a rebalance
    assert h.state("g") == "PreparingRebalance"
    h.sleep(500)
    return Beat("g", gen, lead), _always(Err.REBALANCE_IN_PROGRESS)


def completing_rebalance(h: Harness):
    t1, _m1 = h.join_new("g", client_id="a", session=SESSION)
    t2, m2 = h.join_new("g", client_id="b", session=SESSION)
    h.settle(t1)
    assert h.state("g") == "CompletingRebalance" and h.answered(t2)
    h.sleep(300)
    return Beat("g", h[t1]["generation_id"], m2), _always(Err.NONE)


def empty_group(h: Harness):
    h.commit("simple", -1, "", {("t", 0): 5})  # a simple consumer's commit leaves an Empty group
    assert h.state("simple") == "Empty"
    return Beat("simple", 0, "someone"), _always(Err.UNKNOWN_MEMBER_ID)


def unknown_group(h: Harness):
    h.stable_group("g", 1, session=SESSION)
    return Beat("nope", 1, "c0-u1"), _always(Err.UNKNOWN_MEMBER_ID)


def unknown_member(h: Harness):
    gen, _ = h.stable_group("g", 2, session=SESSION)
    return Beat("g", gen, "ghost"), _always(Err.UNKNOWN_MEMBER_ID)


def wrong_generation(h: Harness):
    gen, (lead, _m2) = h.stable_group("g", 2, session=SESSION)
    h.sleep(100)
    return Beat("g", gen + 1, lead), _always(Err.ILLEGAL_GENERATION)


def _static_group(h: Harness) -> tuple[int, str]:
    t = h.join("s", instance="pod-0", client_id="static", session=SESSION)
    h.settle(t)
    member, gen = h[t]["member_id"], h[t]["generation_id"]
    assert h.error(h.sync("s", gen, member, {member: b"x"}, instance="pod-0")) == 0
    h.sleep(700)
    return gen, member


def static_member(h: Harness):
    gen, member = _static_group(h)
    return Beat("s", gen, member, "pod-0"), _always(Err.NONE)


def fenced_static_instance(h: Harness):
    gen, _member = _static_group(h)
    # a zombie with an old member id still claims pod-0; before v3 the instance id is not on the wire
    return Beat("s", gen, "pod-0-old", "pod-0"), lambda v: Err.FENCED_INSTANCE_ID if v >= 3 else Err.UNKNOWN_MEMBER_ID


def empty_group_id(h: Harness):
    h.stable_group("g", 1, session=SESSION)
    return Beat("", 1, "c0-u1"), _always(Err.INVALID_GROUP_ID)


def loading_shard(h: Harness):
    gen, (lead,) = h.stable_group("g", 1, session=SESSION)
    shard = h.coord.shard_for("g")
    h.apply(h.coord.unload(shard, h.now))
    h.coord.begin_loading(shard)
    return Beat("g", gen, lead), _always(Err.NONE)  # Kafka's quirk: a loading coordinator answers NONE


def not_owned_shard(h: Harness):
    gen, (lead,) = h.stable_group("g", 1, session=SESSION)
    h.apply(h.coord.unload(h.coord.shard_for("g"), h.now))
    return Beat("g", gen, lead), _always(Err.NOT_COORDINATOR)


SITUATIONS: list[Situation] = [
    stable_member, preparing_rebalance, completing_rebalance, empty_group, unknown_group, unknown_member,
    wrong_generation, static_member, fenced_static_instance, empty_group_id, loading_shard, not_owned_shard,
]
REARMS = {stable_member, preparing_rebalance, completing_rebalance, static_member}


def twins(situation: Situation) -> tuple[Harness, Harness, Beat, Callable[[int], int]]:
    a, b = Harness(), Harness()
    beat, expected = situation(a)
    beat_b, _ = situation(b)
    assert beat == beat_b and snapshot(a) == snapshot(b)  # identical drives give identical coordinators
    return a, b, beat, expected


@pytest.mark.parametrize("version", range(5))
@pytest.mark.parametrize("situation", SITUATIONS, ids=lambda s: s.__name__)
def test_hot_heartbeat_answers_and_rearms_like_handle(situation: Situation, version: int) -> None:
    a, b, beat, expected = twins(situation)
    before = deadlines(a)
    rule = shared_rule(a, version, beat)
    got = hot(a, version, beat)
    assert got is not None, "no timer is due after h.sleep, so the hot path must answer"
    assert got == generic(b, version, beat) == expected(version) == rule
    assert snapshot(a) == snapshot(b)
    key = ("member", beat.group, beat.member)
    if situation in REARMS:  # the session deadline moved to now + session timeout
        assert before[key] < a.now + SESSION and deadlines(a)[key] == a.now + SESSION
    else:
        assert deadlines(a) == before


def test_a_rearmed_member_outlives_its_old_deadline_on_both_paths() -> None:
    a, b, beat, _ = twins(stable_member)  # lead and m2 synced at the same time; lead heartbeats at +2500
    old = deadlines(a)[("member", "g", beat.member)]
    assert hot(a, 4, beat) == generic(b, 4, beat) == Err.NONE
    for h in (a, b):
        h.sleep(old - h.now + 1)  # past the old deadline: only the silent member expires
    for h in (a, b):
        assert h.state("g") == "PreparingRebalance"
        assert h.coord.group("g").members == (beat.member,)
    assert snapshot(a) == snapshot(b)


# ------------------------------------------------------------------ a timer is due

def test_due_timer_makes_the_hot_path_step_aside_without_touching_state() -> None:
    a, b, beat, _ = twins(stable_member)
    deadline = a.coord.next_deadline()
    assert deadline is not None
    for h in (a, b):
        h.now = deadline  # the runtime's timer task has not run yet
    before = snapshot(a)
    assert hot(a, 3, beat) is None
    assert snapshot(a) == before
    assert hot_or_generic(a, 3, beat) == generic(b, 3, beat)
    assert snapshot(a) == snapshot(b)


def test_fallback_fires_the_due_join_timer_like_the_generic_path() -> None:
    def rebalance_waiting_for_the_leader(h: Harness):
        gen, (lead, m2) = h.stable_group("g", 2, session=SESSION, rebalance=2000)
        h.sleep(100)
        # m2 rejoins with a new subscription: a rebalance starts and waits for the leader to rejoin
        return Beat("g", gen, lead), h.join("g", m2, session=SESSION, rebalance=2000,
                                             protocols=(("range", b"new topics"),))

    a, b = Harness(), Harness()
    (beat, ta), (_, tb) = rebalance_waiting_for_the_leader(a), rebalance_waiting_for_the_leader(b)
    assert a.state("g") == "PreparingRebalance" and not a.answered(ta)
    due = a.coord.next_deadline()
    assert due == a.now + 2000  # the rebalance timeout, before any session deadline
    for h in (a, b):
        h.now = due + 50  # the runtime's timer task lags behind
    assert hot(a, 4, beat) is None
    # the heartbeat is answered first (the leader is told to rejoin), then the due join timer completes
    # the rebalance without the leader, which never rejoined
    assert hot_or_generic(a, 4, beat) == generic(b, 4, beat) == Err.REBALANCE_IN_PROGRESS
    assert a.answered(ta) and b.answered(tb) and a[ta] == b[tb]
    assert snapshot(a) == snapshot(b)


# ------------------------------------------------------------------ random drives

MEMBERS = 3
op = st.one_of(
    st.tuples(st.just("sleep"), st.integers(0, 4000)),
    st.tuples(st.just("lag"), st.integers(0, 10_000)),  # time passes, the timer task has not run
    st.tuples(st.just("beat"), st.integers(0, MEMBERS), st.integers(-1, 1), st.integers(0, 4),
              st.sampled_from(["g", "s", "nope", ""]), st.sampled_from([None, "pod-0", "pod-9"])),
    st.tuples(st.just("rejoin"), st.integers(0, MEMBERS - 1)),
    st.tuples(st.just("sync"), st.integers(0, MEMBERS - 1)),
)


class Drive:
    """One coordinator with a 3-member dynamic group "g" and a static group "s" (instance pod-0)."""

    def __init__(self) -> None:
        self.h = Harness()
        _, self.members = self.h.stable_group("g", MEMBERS, session=SESSION)
        _gen, self.static = _static_group(self.h)
        self.tokens: list = []

    def generation(self, group: str) -> int:
        view = self.h.coord.group(group)
        return -1 if view is None else view.generation

    def beat(self, who: int, delta: int, group: str, instance: str | None) -> Beat:
        member = "ghost" if who == MEMBERS else (self.static if group == "s" else self.members[who])
        return Beat(group, self.generation(group) + delta, member, instance)

    def rejoin(self, who: int) -> None:
        self.tokens.append(self.h.join("g", self.members[who], session=SESSION))

    def sync(self, who: int) -> None:
        h, member = self.h, self.members[who]
        assignments = {m: m.encode() for m in self.members} if h.coord.group("g").leader == member else None
        self.tokens.append(h.sync("g", self.generation("g"), member, assignments))


def drive_both(a: Drive, b: Drive, step: tuple) -> bool:
    """The steps every random drive shares, done to both twins: time passing (with or without the timer
    task running), a rejoin, a sync. False for any other step (the caller does it)."""
    kind = step[0]
    for d in (a, b):
        if kind == "sleep":
            d.h.sleep(step[1])
        elif kind == "lag":
            d.h.now += step[1]
        elif kind == "rejoin":
            d.rejoin(step[1])
        elif kind == "sync":
            d.sync(step[1])
        else:
            return False
    return True


@settings(max_examples=120, deadline=None)
@given(ops=st.lists(op, max_size=25))
def test_random_drives_answer_and_expire_alike(ops) -> None:
    a, b = Drive(), Drive()  # a: hot path first (generic on None), b: always the generic path
    assert snapshot(a.h) == snapshot(b.h)
    for step in ops:
        if not drive_both(a, b, step):  # a heartbeat
            _, who, delta, version, group, instance = step
            beat = a.beat(who, delta, group, instance)
            assert beat == b.beat(who, delta, group, instance)
            rule = shared_rule(a.h, version, beat)  # due timers fire after the answer, on both paths
            assert hot_or_generic(a.h, version, beat) == generic(b.h, version, beat) == rule, (step, beat)
        assert snapshot(a.h) == snapshot(b.h), step
        answers_a = [a.h.responses.get(t) for t in a.tokens]
        answers_b = [b.h.responses.get(t) for t in b.tokens]
        assert answers_a == answers_b, step
