"""Random heartbeat / leave / expiry / topic-change sequences (hypothesis). After each step the records
replayed so far give a group whose partition epochs are exactly what its members hold; at the end,
replaying every emitted record into a fresh coordinator gives the same state, and members that keep
heartbeating what they are told converge to a STABLE group where each holds its target."""

from __future__ import annotations

from cg_harness import Driver
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.core.consumer_group.model import GroupState

MEMBERS = ["a", "b", "c", "d"]
STATIC = {"c": "i-c", "d": "i-d"}
TOPIC_NAMES = ["t1", "t2", "t3"]

op = st.one_of(
    st.tuples(st.just("join"), st.sampled_from(MEMBERS), st.sets(st.sampled_from(TOPIC_NAMES))),
    st.tuples(st.just("settle"), st.sampled_from(MEMBERS), st.none()),
    st.tuples(st.just("stale"), st.sampled_from(MEMBERS), st.none()),
    st.tuples(st.just("leave"), st.sampled_from(MEMBERS), st.none()),
    st.tuples(st.just("away"), st.sampled_from(["c", "d"]), st.none()),
    st.tuples(st.just("advance"), st.sampled_from([1000, 20000, 50000]), st.none()),
    st.tuples(st.just("topic"), st.sampled_from(TOPIC_NAMES), st.integers(0, 6)),
)


def check_invariants(d: Driver) -> None:
    for group in d.cg.groups.values():
        held = {}
        for m in group.members.values():
            for t, ps in m.owned.items():
                for p in ps:
                    assert (t, p) not in held
                    held[(t, p)] = m.member_epoch
        assert held == {(t, p): e for t, ps in group.partition_epochs.items() for p, e in ps.items()}
        assert group.assignment_epoch <= group.group_epoch


def step(d: Driver, kind: str, who, arg) -> None:  # type: ignore[no-untyped-def]
    live = d.cg.groups.get("g")
    member = live.members.get(who) if live is not None and isinstance(who, str) else None
    if kind == "join":
        d.join(who, sorted(arg), instance_id=STATIC.get(who), rebalance_timeout_ms=30000)
    elif kind == "settle" and member is not None and member.member_epoch >= 0:
        d.settle(who)
    elif kind == "stale" and member is not None:  # a resent heartbeat with an old epoch
        d.beat(who, max(member.member_epoch - 1, 1), None, instance_id=STATIC.get(who))
    elif kind == "leave":
        d.send(member_id=who, member_epoch=-1, instance_id=STATIC.get(who))
    elif kind == "away":
        d.send(member_id=who, member_epoch=-2, instance_id=STATIC[who])
    elif kind == "advance":
        d.advance(who)
    elif kind == "topic":
        if arg == 0:
            d.topics.pop(who, None)
        else:
            d.topic(who, arg)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, max_size=30))
def test_replaying_the_emitted_records_gives_the_same_state(ops) -> None:  # type: ignore[no-untyped-def]
    d = Driver()
    d.topic("t1", 3)
    d.topic("t2", 2)
    for kind, who, arg in ops:
        step(d, kind, who, arg)
        check_invariants(d)
    fresh = d.replayed_fresh()
    assert {g: x.snapshot() for g, x in fresh.groups.items()} == {g: x.snapshot() for g, x in d.cg.groups.items()}

    # convergence: static members that left temporarily come back, then everyone reports what it holds
    group = d.cg.groups.get("g")
    if group is None or not group.members:
        return
    for m in list(group.members.values()):
        if m.member_epoch < 0:
            d.join(m.member_id + "-back", list(m.subscribed_topic_names), instance_id=m.instance_id,
                   rebalance_timeout_ms=30000)
    for _ in range(3 * len(group.members) + 3):
        for member_id in sorted(d.group().members):
            d.settle(member_id)
    g = d.group()
    assert g.state is GroupState.STABLE
    held = {}
    for m in g.members.values():
        assert m.assigned == g.target(m.member_id)
        assert m.member_epoch == g.assignment_epoch == g.group_epoch
        held.update({(t, p): m for t, ps in m.assigned.items() for p in ps})
    # every partition of every subscribed topic that exists is held, by a subscriber
    wanted = {(d.topics[n].topic_id, p) for m in g.members.values() for n in m.subscribed_topic_names
              if n in d.topics for p in range(d.topics[n].partitions)}
    assert set(held) == wanted
    names = {info.topic_id: n for n, info in d.topics.items()}
    assert all(names[t] in m.subscribed_topic_names for (t, _), m in held.items())
