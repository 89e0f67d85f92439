"""Random sequences of joins (names, a regex, or both), heartbeats, leaves, clock moves and topic creations and
deletions (hypothesis). After each step the group's indexes (subscribed topics, regex users, resolutions of
regexes in use only) are what its members and records say; replaying every emitted record (records 16
included) gives the same state; and once a refresh interval has passed, members that keep heartbeating
converge to a STABLE group holding exactly the partitions of what their names and regexes match now."""

from __future__ import annotations

from collections import Counter

import re2
from cg_harness import Driver
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.core.consumer_group.model import GroupState
from coordinator.core.consumer_group.regex import REGEX_REFRESH_MS

MEMBERS = ["a", "b", "c"]
TOPICS = ["t1", "t2", "x1", "__t3"]
REGEXES = [None, "t.*", "t1|x1", "x.*", ".*"]

op = st.one_of(
    st.tuples(st.just("join"), st.sampled_from(MEMBERS),
              st.tuples(st.sets(st.sampled_from(TOPICS[:3]), max_size=2), st.sampled_from(REGEXES))),
    st.tuples(st.just("settle"), st.sampled_from(MEMBERS), st.none()),
    st.tuples(st.just("regex"), st.sampled_from(MEMBERS), st.sampled_from(REGEXES)),
    st.tuples(st.just("leave"), st.sampled_from(MEMBERS), st.none()),
    st.tuples(st.just("advance"), st.sampled_from([1000, 5000, 12000]), st.none()),
    st.tuples(st.just("topic"), st.sampled_from(TOPICS), st.integers(0, 3)),
)


def effective(d: Driver, names: tuple[str, ...], regex: str | None) -> set[str]:
    out = set(names)
    if regex:
        out |= {t for t in d.topics if not t.startswith("__") and re2.fullmatch(regex, t)}
    return out


def check_indexes(d: Driver) -> None:
    group = d.cg.groups.get("g")
    if group is None:
        return
    users = Counter(m.subscribed_topic_regex for m in group.members.values() if m.subscribed_topic_regex)
    assert group.regex_members == users
    assert set(group.resolved_regexes) <= set(users)  # a regex nobody uses was tombstoned
    names: Counter[str] = Counter()
    for m in group.members.values():
        names.update(group.effective_names(m))
    assert group.subscribed_topic_names == +names


def step(d: Driver, kind: str, who, arg) -> None:  # type: ignore[no-untyped-def]
    live = d.cg.groups.get("g")
    member = live.members.get(who) if live is not None and isinstance(who, str) else None
    if kind == "join":
        names, regex = arg
        d.send(member_id=who, member_epoch=0, rebalance_timeout_ms=30000, subscribed_topic_names=sorted(names),
               subscribed_topic_regex=regex or "", topic_partitions=[])
    elif kind == "settle" and member is not None and member.member_epoch >= 0:
        d.settle(who)
    elif kind == "regex" and member is not None and member.member_epoch >= 0:
        d.beat(who, member.member_epoch, None, subscribed_topic_regex=arg or "")
    elif kind == "leave":
        d.send(member_id=who, member_epoch=-1)
    elif kind == "advance":
        d.advance(who)
    elif kind == "topic":
        if arg == 0:
            d.topics.pop(who, None)
        else:
            d.topic(who, arg)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, max_size=30))
def test_regex_groups_replay_and_converge(ops) -> None:  # type: ignore[no-untyped-def]
    d = Driver()
    d.topic("t1", 2)
    d.topic("x1", 1)
    for kind, who, arg in ops:
        step(d, kind, who, arg)
        check_indexes(d)
    fresh = d.replayed_fresh()
    assert {g: x.snapshot() for g, x in fresh.groups.items()} == {g: x.snapshot() for g, x in d.cg.groups.items()}

    group = d.cg.groups.get("g")
    if group is None or not group.members:
        return
    for member_id in sorted(group.members):  # sessions renewed, so the clock move below expires none
        if group.members[member_id].member_epoch >= 0:
            d.settle(member_id)
    d.advance(REGEX_REFRESH_MS)  # the next heartbeat re-resolves against the topics as they are now
    assert d.group().members
    for _ in range(3 * len(MEMBERS) + 3):
        for member_id in sorted(d.group().members):
            d.settle(member_id)
    g = d.group()
    check_indexes(d)
    assert g.state is GroupState.STABLE
    held = {}
    for m in g.members.values():
        assert m.assigned == g.target(m.member_id)
        held.update({(t, p): m for t, ps in m.assigned.items() for p in ps})
    wanted = {(d.topics[n].topic_id, p) for m in g.members.values()
              for n in effective(d, m.subscribed_topic_names, m.subscribed_topic_regex)
              if n in d.topics for p in range(d.topics[n].partitions)}
    assert set(held) == wanted
    names = {info.topic_id: n for n, info in d.topics.items()}
    assert all(names[t] in effective(d, m.subscribed_topic_names, m.subscribed_topic_regex)
               for (t, _), m in held.items())
