"""The uniform assignor against an oracle: the straightforward implementation it replaced (issue #36).

The oracle below is the uniform assignor as it was before the sticky fast path (it sorts every member's
target and rebuilds every assignment): it is the spec of the result. For the same input the assignor must
give the same targets (or the same AssignorError), for homogeneous and heterogeneous subscriptions, over
chains of rebalances where members join, leave or change subscriptions, partitions grow or shrink, topics
are deleted, static members come and go, and targets carry stale or conflicting entries (a partition held
twice, beyond the count, of an unsubscribed topic, empty). Seeded random cases: bounded in count, no clock.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping

import pytest

from coordinator.core.consumer_group.assignors import AssignorError, MemberSpec, uniform
from coordinator.core.consumer_group.model import Assignment, assignment


# ---------------------------------------------------------------- the oracle (the former implementation)
def _check(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]) -> None:
    for member_id, spec in members.items():
        missing = spec.subscribed - partitions.keys()
        if missing:
            raise AssignorError(f"Member {member_id} is subscribed to topics {sorted(map(str, missing))} "
                                "which don't exist in the topic metadata.")


def oracle(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
    _check(members, partitions)
    if not members:
        return {}
    subscriptions = {spec.subscribed for spec in members.values()}
    if len(subscriptions) == 1:
        return _uniform_homogeneous(members, partitions, next(iter(subscriptions)))
    return _uniform_heterogeneous(members, partitions)


def _valid_current(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]
                   ) -> tuple[dict[str, list[tuple[uuid.UUID, int]]], set[tuple[uuid.UUID, int]]]:
    kept: dict[str, list[tuple[uuid.UUID, int]]] = {}
    taken: set[tuple[uuid.UUID, int]] = set()
    for member_id in sorted(members):
        spec = members[member_id]
        mine = []
        for topic in sorted(spec.target, key=lambda u: u.bytes):
            if topic not in spec.subscribed:
                continue
            for p in sorted(spec.target[topic]):
                if p < partitions[topic] and (topic, p) not in taken:
                    taken.add((topic, p))
                    mine.append((topic, p))
        kept[member_id] = mine
    return kept, taken


def _uniform_homogeneous(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int],
                         topics: frozenset[uuid.UUID]) -> dict[str, Assignment]:
    kept, taken = _valid_current(members, partitions)
    total = sum(partitions[t] for t in topics)
    floor, extra = divmod(total, len(members))
    order = sorted(members, key=lambda m: (-len(kept[m]), m))
    quota = {m: floor + (1 if i < extra else 0) for i, m in enumerate(order)}
    free = [(t, p) for t in sorted(topics, key=lambda u: u.bytes) for p in range(partitions[t])
            if (t, p) not in taken]
    result: dict[str, list[tuple[uuid.UUID, int]]] = {}
    for m in order:
        result[m] = kept[m][:quota[m]]
        free.extend(kept[m][quota[m]:])
    for m in order:
        need = quota[m] - len(result[m])
        if need > 0:
            result[m].extend(free[:need])
            del free[:need]
    if free:
        raise AssignorError("Partitions were left unassigned")
    return {m: _as_assignment(tps) for m, tps in result.items()}


def _uniform_heterogeneous(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]
                           ) -> dict[str, Assignment]:
    kept, taken = _valid_current(members, partitions)
    owner: dict[tuple[uuid.UUID, int], str] = {tp: m for m, tps in kept.items() for tp in tps}
    load = {m: len(tps) for m, tps in kept.items()}
    subscribers: dict[uuid.UUID, list[str]] = {}
    for m in sorted(members):
        for t in members[m].subscribed:
            subscribers.setdefault(t, []).append(m)
    topics = sorted(subscribers, key=lambda t: (len(subscribers[t]), t.bytes))
    for t in topics:
        for p in range(partitions[t]):
            if (t, p) not in owner:
                m = min(subscribers[t], key=lambda x: (load[x], x))
                owner[(t, p)] = m
                load[m] += 1
    moved = True
    while moved:
        moved = False
        for tp in sorted(owner, key=lambda x: (x[0].bytes, x[1])):
            a = owner[tp]
            b = min(subscribers[tp[0]], key=lambda x: (load[x], x))
            if load[b] <= load[a] - 2:
                owner[tp] = b
                load[a] -= 1
                load[b] += 1
                moved = True
    result: dict[str, list[tuple[uuid.UUID, int]]] = {m: [] for m in members}
    for tp, m in owner.items():
        result[m].append(tp)
    return {m: _as_assignment(tps) for m, tps in result.items()}


def _as_assignment(tps: list[tuple[uuid.UUID, int]]) -> Assignment:
    out: dict[uuid.UUID, set[int]] = {}
    for t, p in tps:
        out.setdefault(t, set()).add(p)
    return assignment(out)


# ---------------------------------------------------------------- random groups and their changes
def outcome(fn, members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]):  # type: ignore[no-untyped-def]
    try:
        return fn(members, partitions)
    except AssignorError as e:
        return ("AssignorError", str(e))


def member_ids(rng: random.Random, n: int) -> list[str]:
    # ids whose sort order is not their creation order, some sharing prefixes
    return [rng.choice(["", "a", "m", "z", "m-"]) + format(rng.randrange(1 << 20), "x") for _ in range(n)]


def subscription(rng: random.Random, topics: list[uuid.UUID], homogeneous: bool,
                 shared: frozenset[uuid.UUID]) -> frozenset[uuid.UUID]:
    if homogeneous:
        return shared
    return frozenset(rng.sample(topics, rng.randint(0 if rng.random() < 0.05 else 1, len(topics))))


def noise(rng: random.Random, target: Assignment, topics: list[uuid.UUID], gone: list[uuid.UUID]) -> Assignment:
    """A target with stale or conflicting entries: partitions beyond the count, held by another member too,
    of a deleted or unsubscribed topic, an empty entry, a negative partition."""
    out = {t: set(ps) for t, ps in target.items()}
    for _ in range(rng.randint(1, 3)):
        t = rng.choice(topics + gone)
        kind = rng.random()
        if kind < 0.05:
            out[t] = set()
        elif kind < 0.08:
            out.setdefault(t, set()).add(-1)
        else:
            out.setdefault(t, set()).add(rng.randrange(16))
    return {t: frozenset(ps) for t, ps in out.items()}


def scenario(seed: int) -> None:
    rng = random.Random(seed)
    topics = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(rng.randint(1, 4))]
    gone: list[uuid.UUID] = []
    partitions = {t: rng.randint(0, 12) for t in topics}
    homogeneous = rng.random() < 0.6
    shared = frozenset(topics)
    members: dict[str, MemberSpec] = {}
    for m in member_ids(rng, rng.randint(1, 8)):
        static = f"i-{rng.randrange(100)}" if rng.random() < 0.3 else None
        members[m] = MemberSpec(subscription(rng, topics, homogeneous, shared), {}, static)
    for _ in range(4):   # a chain of rebalances, each over the previous result
        expected = outcome(oracle, members, partitions)
        got = outcome(uniform, members, partitions)
        assert got == expected, f"seed {seed}: {members} {partitions}"
        if isinstance(expected, tuple):
            return
        members = {m: MemberSpec(s.subscribed, expected[m], s.instance_id) for m, s in members.items()}
        for _ in range(rng.randint(1, 2)):
            change = rng.random()
            if change < 0.25:       # one joins
                m = member_ids(rng, 1)[0]
                members[m] = MemberSpec(subscription(rng, topics, homogeneous, shared), {},
                                        f"i-{rng.randrange(100)}" if rng.random() < 0.3 else None)
            elif change < 0.45 and len(members) > 1:   # one leaves
                del members[rng.choice(sorted(members))]
            elif change < 0.55:     # a static member comes back with a new member id and its old target
                old = rng.choice(sorted(members))
                spec = members.pop(old)
                members[member_ids(rng, 1)[0]] = spec
            elif change < 0.65:     # partitions grow or shrink
                t = rng.choice(topics)
                partitions[t] = max(0, partitions[t] + rng.randint(-5, 5))
            elif change < 0.72 and len(topics) > 1:   # a topic is deleted
                t = topics.pop(rng.randrange(len(topics)))
                gone.append(t)
                del partitions[t]
                shared = frozenset(topics)
                members = {m: MemberSpec(s.subscribed - {t} if not homogeneous else shared, s.target, s.instance_id)
                           for m, s in members.items()}
            elif change < 0.8 and not homogeneous:     # one changes its subscription
                m = rng.choice(sorted(members))
                s = members[m]
                members[m] = MemberSpec(subscription(rng, topics, False, shared), s.target, s.instance_id)
            elif change < 0.9:      # stale or conflicting targets
                m = rng.choice(sorted(members))
                s = members[m]
                members[m] = MemberSpec(s.subscribed, noise(rng, s.target, topics, gone), s.instance_id)
            # else: nothing changes (a stable group's rebalance)


@pytest.mark.parametrize("block", range(10))
def test_uniform_gives_the_oracles_result(block: int) -> None:
    for seed in range(block * 40, block * 40 + 40):   # 400 seeded scenarios of 4 rebalances each
        scenario(seed)


def test_uniform_gives_the_oracles_result_for_a_subscribed_topic_that_does_not_exist() -> None:
    a, b = uuid.UUID(int=1), uuid.UUID(int=2)
    members = {"m2": MemberSpec(frozenset({a, b})), "m1": MemberSpec(frozenset({a, b}))}
    assert outcome(uniform, members, {a: 3}) == outcome(oracle, members, {a: 3})
    assert isinstance(outcome(uniform, members, {a: 3}), tuple)


def test_members_keeping_their_target_keep_the_same_object() -> None:
    """One member joins a stable homogeneous group: only the newcomer and the members giving it a
    partition get new targets; the others' targets come back as the very objects passed in."""
    topics = [uuid.UUID(int=i + 1) for i in range(3)]
    partitions = dict.fromkeys(topics, 10)
    members = {f"m{i:02}": MemberSpec(frozenset(topics)) for i in range(7)}
    stable = uniform(members, partitions)
    members = {m: MemberSpec(s.subscribed, stable[m]) for m, s in members.items()}
    joined = {**members, "new": MemberSpec(frozenset(topics))}
    result = uniform(joined, partitions)
    assert result == oracle(joined, partitions)
    same = {m for m in members if result[m] is members[m].target}
    changed = {m for m in members if result[m] != members[m].target}
    assert same == set(members) - changed
    assert len(same) >= len(members) - 4
