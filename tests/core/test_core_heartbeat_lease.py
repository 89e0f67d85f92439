"""Heartbeat leases: ``Coordinator.lease`` after a heartbeat that re-armed a session, ``Coordinator.renew`` to
repeat it. A renewed heartbeat must answer and re-arm exactly as ``heartbeat``/``handle`` would, and a lease
must stop working the moment anything else could change that answer (a join, a sync, a leave, a timer,
an unload, a write settling); heartbeats of other members and offset commits leave it valid.

The random drive runs two coordinators in lockstep: ``a`` answers every Heartbeat as the runtime does (renew
a lease for the same request if there is one, else the hot path, then the generic path on None, and take a
lease), ``b`` always through ``handle``. Answers, timers, group states and parked requests must agree after
every step.
"""

from __future__ import annotations

from core_harness import Harness
from hypothesis import given, settings
from hypothesis import strategies as st
from test_core_heartbeat_fast import (
    MEMBERS,
    SESSION,
    Beat,
    Drive,
    drive_both,
    generic,
    hot,
    hot_or_generic,
    snapshot,
)

from coordinator.core.errors import Err

Leases = dict[tuple[Beat, int], object]


def runtime_like(h: Harness, leases: Leases, version: int, beat: Beat) -> int:
    """GroupService.hot_heartbeat: renew the lease of this exact request, else the hot heartbeat and take a
    lease, else (a timer is due) the generic path, whose answer is never leased."""
    key = (beat, version)
    lease = leases.get(key)
    if lease is not None:
        error = h.coord.renew(lease, h.now)
        if error is not None:
            return error
    error = hot(h, version, beat)
    if error is None:
        return generic(h, version, beat)
    lease = h.coord.lease(beat.group, beat.member, error)
    if lease is not None:
        leases[key] = lease
    return error


def test_a_lease_repeats_the_heartbeat_until_something_else_happens() -> None:
    h = Harness()
    gen, (lead, other) = h.stable_group("g", 2, session=SESSION)
    beat = Beat("g", gen, lead)
    assert hot_or_generic(h, 3, beat) == Err.NONE
    lease = h.coord.lease("g", lead, Err.NONE)
    assert lease is not None
    h.now += 1000
    assert h.coord.renew(lease, h.now) == Err.NONE
    assert h.coord._env.timers.deadline(("member", "g", lead)) == h.now + SESSION  # re-armed from now
    assert hot(h, 3, Beat("g", gen, other)) == Err.NONE  # another member's heartbeat: still valid
    h.now += 1000
    assert h.coord.renew(lease, h.now) == Err.NONE
    h.join_new("g", client_id="newcomer", session=SESSION)  # a join moves the group to PreparingRebalance
    assert h.coord.renew(lease, h.now) is None
    assert hot_or_generic(h, 3, beat) == Err.REBALANCE_IN_PROGRESS


def test_no_lease_for_an_answer_that_rearmed_nothing() -> None:
    h = Harness()
    gen, (lead,) = h.stable_group("g", 1, session=SESSION)
    assert h.coord.lease("g", lead, Err.ILLEGAL_GENERATION) is None
    assert h.coord.lease("g", "ghost", Err.NONE) is None
    shard = h.coord.shard_for("g")
    h.apply(h.coord.unload(shard, h.now))
    h.coord.begin_loading(shard)
    assert hot_or_generic(h, 3, Beat("g", gen, lead)) == Err.NONE  # a loading shard answers NONE...
    assert h.coord.lease("g", lead, Err.NONE) is None  # ...but re-armed nothing: no lease


def test_a_due_timer_or_an_earlier_deadline_refuses_the_renewal() -> None:
    h = Harness()
    gen, (lead, other) = h.stable_group("g", 2, session=SESSION)
    assert hot_or_generic(h, 3, Beat("g", gen, lead)) == Err.NONE
    lease = h.coord.lease("g", lead, Err.NONE)
    h.now += SESSION + 1  # the other member's session is due: handle must fire it, not renew
    assert h.coord.renew(lease, h.now) is None
    h2 = Harness()
    gen2, (lead2,) = h2.stable_group("g", 1, session=SESSION)
    assert hot_or_generic(h2, 3, Beat("g", gen2, lead2)) == Err.NONE
    lease2 = h2.coord.lease("g", lead2, Err.NONE)
    assert h2.coord.renew(lease2, h2.now - 5000) is None  # the clock went back: the heap would change


def test_no_lease_after_the_generic_path_which_fired_timers_after_answering() -> None:
    # the members' sessions are all due: the hot path declines, handle answers the heartbeat (NONE, its
    # session re-armed) and then expires the two others, so the group prepares a rebalance: a lease of that
    # NONE would answer the next heartbeat wrongly
    h = Harness()
    gen, (lead, _b, _c) = h.stable_group("g", 3, session=SESSION)
    h.now += SESSION
    beat = Beat("g", gen, lead)
    assert hot(h, 3, beat) is None
    assert generic(h, 3, beat) == Err.NONE and h.state("g") == "PreparingRebalance"
    assert h.coord.lease("g", lead, Err.NONE) is None
    assert hot(h, 3, beat) == Err.REBALANCE_IN_PROGRESS
    assert h.coord.lease("g", lead, Err.REBALANCE_IN_PROGRESS) is not None  # right after a hot heartbeat
    assert h.coord.lease("g", "someone-else", Err.NONE) is None  # not the member that last beat


def test_a_commit_leaves_the_lease_valid() -> None:
    h = Harness()
    gen, (lead,) = h.stable_group("g", 1, session=SESSION)
    assert hot_or_generic(h, 3, Beat("g", gen, lead)) == Err.NONE
    lease = h.coord.lease("g", lead, Err.NONE)
    pending = h.coord.commit_offset(h.now, 8, "g", gen, lead, None, "t", 0, 42, -1, "", None)
    assert pending is not None and not isinstance(pending, Err)
    h.coord.commit_settled(pending, True)
    assert h.coord.renew(lease, h.now) == Err.NONE


# ------------------------------------------------------------------ random drive

op = st.one_of(
    st.tuples(st.just("sleep"), st.integers(0, 4000)),
    st.tuples(st.just("lag"), st.integers(0, 10_000)),  # time passes, the timer task has not run
    st.tuples(st.just("beat"), st.integers(0, MEMBERS), st.integers(-1, 1), st.integers(0, 4),
              st.sampled_from(["g", "s", "nope"]), st.sampled_from([None, "pod-0"])),
    st.tuples(st.just("beat"), st.integers(0, MEMBERS - 1), st.just(0), st.just(3), st.just("g"), st.none()),
    st.tuples(st.just("rejoin"), st.integers(0, MEMBERS - 1)),
    st.tuples(st.just("sync"), st.integers(0, MEMBERS - 1)),
    st.tuples(st.just("leave"), st.integers(0, MEMBERS - 1)),
    st.tuples(st.just("commit"), st.integers(0, MEMBERS - 1), st.integers(-1, 0)),
    st.tuples(st.just("reload")),
)


def commit(d: Drive, who: int, delta: int) -> int:
    """A one-partition commit through the hot path (settled at once), or handle on None."""
    h = d.h
    generation = d.generation("g") + delta
    out = h.coord.commit_offset(h.now, 8, "g", generation, d.members[who], None, "t", who, 7, -1, "", None)
    if out is None:
        token = h.commit("g", generation, d.members[who], {("t", who): 7}, version=8)
        return h[token]["topics"][0]["partitions"][0]["error_code"]
    if isinstance(out, Err):
        return int(out)
    h.coord.commit_settled(out, True)
    return 0


def reload(d: Drive) -> None:
    """Move group "g"'s shard away and load it back from what was written (as a restart would)."""
    h = d.h
    shard = h.coord.shard_for("g")
    h.apply(h.coord.unload(shard, h.now))
    h.coord.begin_loading(shard)
    for shard_id, key, value in h.log:
        if shard_id == shard:
            h.coord.replay(shard, key, value)
    h.apply(h.coord.finish_loading(shard, h.now))


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(op, max_size=30))
def test_random_drives_with_leases_answer_and_expire_alike(ops) -> None:
    a, b = Drive(), Drive()
    leases: Leases = {}
    for step in ops:
        kind = step[0]
        if drive_both(a, b, step):
            pass
        elif kind == "beat":
            _, who, delta, version, group, instance = step
            beat = a.beat(who, delta, group, instance)
            assert beat == b.beat(who, delta, group, instance)
            assert runtime_like(a.h, leases, version, beat) == generic(b.h, version, beat), (step, beat)
        elif kind == "leave":
            a.h.leave("g", a.members[step[1]])
            b.h.leave("g", b.members[step[1]])
        elif kind == "commit":
            assert commit(a, step[1], step[2]) == commit(b, step[1], step[2]), step
        else:
            reload(a)
            reload(b)
        assert snapshot(a.h) == snapshot(b.h), step
        assert [a.h.responses.get(t) for t in a.tokens] == [b.h.responses.get(t) for t in b.tokens], step
