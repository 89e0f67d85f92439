"""``Coordinator.commit_offset`` (the one-partition hot path) against ``Coordinator.handle(8, ...)``.

Two coordinators are driven identically; one serves the OffsetCommit under test with ``commit_offset``
(+ ``commit_settled`` once "durable" or "failed"), the other with ``handle``. In every situation and version
both must answer the same error, write the same record (key and value bytes), and end in the same state:
the committed offsets OffsetFetch returns, the pending-commit counts while the write is in flight, and the
timers (a member's commit re-arms its session).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from core_harness import COMMIT, Harness

from coordinator.core.errors import Err
from coordinator.core.offsets import PendingCommit

SESSION = 6000


@dataclass(frozen=True)
class Commit:
    group: str | None
    generation: int
    member: str
    instance: str | None = None
    offset: int = 42
    metadata: str | None = "meta"
    epoch: int | None = 7
    retention: int | None = -1


def body(c: Commit) -> dict:
    return {"group_id": c.group, "generation_id_or_member_epoch": c.generation, "member_id": c.member,
            "group_instance_id": c.instance, "retention_time_ms": c.retention,
            "topics": [{"name": "orders", "partitions": [{"partition_index": 3, "committed_offset": c.offset,
                                                          "committed_leader_epoch": c.epoch,
                                                          "committed_metadata": c.metadata}]}]}


def hot(h: Harness, version: int, c: Commit) -> Err | PendingCommit | None:
    """Every field, whatever the version: the core itself ignores the instance id before v7, the leader
    epoch before v6 and the retention time outside v2-4, as the generic handler does."""
    return h.coord.commit_offset(h.now, version, c.group, c.generation, c.member, c.instance, "orders", 3,
                                 c.offset, c.epoch, c.metadata, c.retention)


def state(h: Harness) -> tuple:
    shards = h.coord._env.shards
    return (sorted((k, v[0]) for k, v in h.coord._env.timers._live.items()),
            [s.offsets.as_dict() for s in shards], [dict(s.pending_commits) for s in shards],
            sorted(h.coord.groups(), key=lambda g: g.group_id))


# ------------------------------------------------------------------ situations
Situation = Callable[[Harness], tuple[Commit, Callable[[int], int]]]


def _always(err: Err) -> Callable[[int], int]:
    return lambda version: err


def simple_new_group(h: Harness):
    return Commit("fresh", -1, ""), _always(Err.NONE)


def simple_empty_group(h: Harness):
    h.commit("simple", -1, "", {("orders", 1): 5})
    return Commit("simple", -1, "", offset=9), _always(Err.NONE)


def member_of_stable_group(h: Harness):
    gen, (lead, _m2) = h.stable_group("g", 2, session=SESSION)
    h.sleep(2500)
    return Commit("g", gen, lead), _always(Err.NONE)


def member_while_preparing(h: Harness):
    gen, (lead, _m2) = h.stable_group("g", 2, session=SESSION)
    h.join_new("g", client_id="newcomer", session=SESSION)
    h.sleep(50)
    return Commit("g", gen, lead), _always(Err.NONE)


def completing_rebalance(h: Harness):
    t1, _m1 = h.join_new("g", client_id="a", session=SESSION)
    t2, m2 = h.join_new("g", client_id="b", session=SESSION)
    h.settle(t1)
    return Commit("g", h[t1]["generation_id"], m2), _always(Err.REBALANCE_IN_PROGRESS)


def wrong_generation(h: Harness):
    gen, (lead, _m2) = h.stable_group("g", 2, session=SESSION)
    return Commit("g", gen - 1, lead), _always(Err.ILLEGAL_GENERATION)


def unknown_member(h: Harness):
    gen, _ = h.stable_group("g", 2, session=SESSION)
    return Commit("g", gen, "ghost"), _always(Err.UNKNOWN_MEMBER_ID)


def anonymous_commit_to_live_group(h: Harness):
    h.stable_group("g", 1, session=SESSION)
    return Commit("g", -1, ""), _always(Err.UNKNOWN_MEMBER_ID)


def generation_for_unknown_group(h: Harness):
    return Commit("nope", 3, "m"), _always(Err.ILLEGAL_GENERATION)


def fenced_static_instance(h: Harness):
    t = h.join("s", instance="pod-0", client_id="static", session=SESSION)
    h.settle(t)
    member, gen = h[t]["member_id"], h[t]["generation_id"]
    assert h.error(h.sync("s", gen, member, {member: b"x"}, instance="pod-0")) == 0
    return Commit("s", gen, "pod-0-old", "pod-0"), \
        lambda v: Err.FENCED_INSTANCE_ID if v >= 7 else Err.UNKNOWN_MEMBER_ID


def metadata_too_large(h: Harness):
    return Commit("big", -1, "", metadata="x" * (h.cfg.offset_metadata_max_bytes + 1)), \
        _always(Err.OFFSET_METADATA_TOO_LARGE)


def null_metadata_and_epoch(h: Harness):
    return Commit("nulls", -1, "", metadata=None, epoch=None), _always(Err.NONE)


def explicit_retention(h: Harness):  # v2-4 carry it: the record gets an expire timestamp
    return Commit("keep", -1, "", retention=60_000), _always(Err.NONE)


def null_group_id(h: Harness):
    return Commit(None, -1, ""), _always(Err.INVALID_GROUP_ID)


def loading_shard(h: Harness):
    shard = h.coord.shard_for("g")
    h.apply(h.coord.unload(shard, h.now))
    h.coord.begin_loading(shard)
    return Commit("g", -1, ""), _always(Err.COORDINATOR_LOAD_IN_PROGRESS)


def not_owned_shard(h: Harness):
    h.apply(h.coord.unload(h.coord.shard_for("g"), h.now))
    return Commit("g", -1, ""), _always(Err.NOT_COORDINATOR)


SITUATIONS: list[Situation] = [
    simple_new_group, simple_empty_group, member_of_stable_group, member_while_preparing, completing_rebalance,
    wrong_generation, unknown_member, anonymous_commit_to_live_group, generation_for_unknown_group,
    fenced_static_instance, metadata_too_large, null_metadata_and_epoch, explicit_retention, null_group_id,
    loading_shard, not_owned_shard,
]


def twins(situation: Situation) -> tuple[Harness, Harness, Commit, Callable[[int], int]]:
    a, b = Harness(), Harness()
    c, expected = situation(a)
    situation(b)
    assert state(a) == state(b)
    return a, b, c, expected


def generic_error(b: Harness, token) -> int:
    return b[token]["topics"][0]["partitions"][0]["error_code"]


@pytest.mark.parametrize("version", range(2, 10))
@pytest.mark.parametrize("situation", SITUATIONS, ids=lambda s: s.__name__)
def test_commit_offset_writes_and_answers_like_handle(situation: Situation, version: int) -> None:
    a, b, c, expected = twins(situation)
    b.hold_writes = True  # the generic write waits for its "fsync", as the hot one does
    token = b.send(COMMIT, version, body(c), "commit")
    got = hot(a, version, c)
    assert got is not None, "no timer is due: the hot path must answer"
    if isinstance(got, int):
        assert not b.held and got == generic_error(b, token) == expected(version)
        assert state(a) == state(b)
        return
    assert expected(version) == Err.NONE
    (out,) = b.held
    assert [(r[0], r[1], r[2]) for r in out.records] == [(got.shard_id, got.key, got.value)]
    assert state(a) == state(b)  # in flight: the same pending commit, not yet visible
    a.coord.commit_settled(got, durable=True)
    b.release_writes()
    assert generic_error(b, token) == Err.NONE
    assert state(a) == state(b)
    assert a.fetch(c.group) == b.fetch(c.group)  # type: ignore[arg-type]


@pytest.mark.parametrize("situation", [simple_new_group, member_of_stable_group], ids=lambda s: s.__name__)
def test_a_failed_write_changes_no_offset_on_both_paths(situation: Situation) -> None:
    a, b, c, _ = twins(situation)
    before = a.fetch(c.group) if a.coord.group(c.group) else None  # type: ignore[arg-type]
    b.fail_next_write = Err.NOT_COORDINATOR
    token = b.send(COMMIT, 8, body(c), "commit")
    got = hot(a, 8, c)
    assert isinstance(got, PendingCommit)
    a.coord.commit_settled(got, durable=False)
    assert generic_error(b, token) == Err.NOT_COORDINATOR  # the runtime answers the hot one the same
    assert state(a) == state(b)
    if before is not None:
        assert a.fetch(c.group) == before  # type: ignore[arg-type]


def test_a_due_timer_makes_the_hot_commit_step_aside() -> None:
    a, b, c, _ = twins(member_of_stable_group)
    deadline = a.coord.next_deadline()
    assert deadline is not None
    a.now = deadline
    before = state(a)
    assert hot(a, 8, c) is None
    assert state(a) == before
