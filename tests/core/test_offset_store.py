"""The compact committed-offsets layout (``OffsetStore``) against a plain dict model.

Rules:
- ``test_store_matches_a_dict_model``: random puts (empty and non-empty metadata, expire timestamps, int64
  and int32 extremes, negative partitions), deletes and whole-group removals; after every step the store
  answers exactly as a ``dict[group, dict[(topic, partition), value]]`` does, and its topic table holds
  just the topics some entry uses (freed ids are reused, so it never outgrows the entries).
- ``test_coordinator_offsets_match_a_model_through_restarts``: the whole core, through its requests: random
  commits (v2 with a retention time, v7 with metadata and epochs), OffsetDelete, DeleteGroups, time passing
  past offsets.retention (expiration) and restarts (the log replayed into a fresh Coordinator, through the
  load path's bulk replay); after every step OffsetFetch of every group answers what the model holds.
- Out-of-range values are refused before anything changes.
"""

from __future__ import annotations

import pytest
from core_harness import COMMIT, DELETE, FETCH, Harness
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.core.offset_store import OffsetStore
from coordinator.core.records import OffsetCommitValue

GROUPS = ("g", "gg", "group-3", "ü")
TOPICS = ("a", "bb", "orders", "t" * 40, "ä")
INT64 = st.integers(-(2**63), 2**63 - 1)
PARTITIONS = st.one_of(st.integers(0, 6), st.sampled_from((-1, -(2**31), 2**31 - 1, 1000)))
VALUES = st.builds(OffsetCommitValue, INT64, st.integers(-(2**31), 2**31 - 1),
                   st.one_of(st.just(""), st.text(max_size=5)), INT64, st.one_of(st.none(), INT64))
OPS = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(GROUPS), st.sampled_from(TOPICS), PARTITIONS, VALUES),
    st.tuples(st.just("delete"), st.sampled_from(GROUPS), st.sampled_from(TOPICS), PARTITIONS),
    st.tuples(st.just("pop"), st.sampled_from(GROUPS)),
)


def check(store: OffsetStore, model: dict[str, dict]) -> None:
    assert store.as_dict() == model
    assert len(store) == sum(len(v) for v in model.values())
    assert store.group_count() == len(model)
    assert store.topic_count() == len({t for v in model.values() for t, _ in v})
    for group in GROUPS:
        assert store.has_group(group) == (group in model)
        entries = model.get(group, {})
        assert store.group_size(group) == len(entries)
        assert sorted(store.group_partitions(group)) == sorted(entries)
        for (topic, partition), value in entries.items():
            assert store.get(group, topic, partition) == value
            assert store.has(group, topic, partition)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, max_size=60))
def test_store_matches_a_dict_model(ops: list[tuple]) -> None:
    store, model = OffsetStore(), {}
    for op in ops:
        if op[0] == "put":
            _, group, topic, partition, value = op
            store.put(group, topic, partition, value)
            model.setdefault(group, {})[(topic, partition)] = value
        elif op[0] == "delete":
            _, group, topic, partition = op
            had = (topic, partition) in model.get(group, {})
            assert store.delete(group, topic, partition) == had
            if had:
                del model[group][(topic, partition)]
                if not model[group]:
                    del model[group]
        else:
            _, group = op
            assert store.pop_group(group) == len(model.pop(group, {}))
        check(store, model)


def test_out_of_range_values_are_refused_and_change_nothing() -> None:
    store = OffsetStore()
    store.put("g", "t", 0, OffsetCommitValue(5, 1, "m", 7, 9))
    for bad in (OffsetCommitValue(2**63, 1, "", 7), OffsetCommitValue(1, 2**31, "", 7),
                OffsetCommitValue(1, 1, "", -(2**63) - 1), OffsetCommitValue(1, 1, "", 7, 2**63)):
        with pytest.raises(ValueError):
            store.put("g", "t", 0, bad)
        with pytest.raises(ValueError):
            store.put("h", "u", 0, bad)
    with pytest.raises(ValueError):
        store.put("g", "t", 2**31, OffsetCommitValue(1, 1, "", 7))
    assert store.as_dict() == {"g": {("t", 0): OffsetCommitValue(5, 1, "m", 7, 9)}} and store.topic_count() == 1


def test_topic_ids_are_freed_and_reused() -> None:
    store = OffsetStore()
    for i in range(1000):  # a thousand topics come and go: the table stays as small as what is held
        store.put("g", f"topic-{i}", 0, OffsetCommitValue(i, -1, "", 0))
        assert store.delete("g", f"topic-{i}", 0)
    assert store.topic_count() == 0 and len(store._names) == 1 and not store.has_group("g")


# ------------------------------------------------------------------ the core, through requests

RETENTION_MS = 60_000
CHECK_MS = 1_000
CORE_GROUPS = ("s1", "s2", "s3")
CORE_TOPICS = ("orders", "clicks")
CORE_OPS = st.one_of(
    st.tuples(st.just("commit"), st.sampled_from(CORE_GROUPS),
              st.lists(st.tuples(st.sampled_from(CORE_TOPICS), st.integers(0, 3), st.integers(0, 10**12)),
                       min_size=1, max_size=4),
              st.sampled_from(("", "meta")), st.sampled_from((7, 2))),
    st.tuples(st.just("offset_delete"), st.sampled_from(CORE_GROUPS), st.sampled_from(CORE_TOPICS),
              st.integers(0, 3)),
    st.tuples(st.just("delete_group"), st.sampled_from(CORE_GROUPS)),
    st.tuples(st.just("sleep"), st.integers(1, 90_000)),
    st.tuples(st.just("restart")),
)


def restarted(old: Harness) -> Harness:
    fresh = Harness(offsets_retention_minutes=1, offsets_retention_check_interval_ms=CHECK_MS)
    fresh.now, fresh.log = old.now, list(old.log)
    shards = fresh.cfg.offsets_topic_num_partitions
    for shard in range(shards):
        fresh.coord.unload(shard, old.now)
        fresh.coord.begin_loading(shard)
    for shard in range(shards):
        items = [(k, v) for s, k, v in old.log if s == shard]
        fresh.coord.replay_many(shard, items, lambda key, error: (_ for _ in ()).throw(error))
        fresh.coord.finish_loading(shard, old.now)
    return fresh


def fetched(h: Harness, group: str) -> dict[tuple[str, int], tuple[int, str, int]]:
    token = h.send(FETCH, 7, {"group_id": group, "topics": None, "require_stable": False}, "fetch")
    assert h.error(token) == 0
    return {(t["name"], p["partition_index"]): (p["committed_offset"], p["metadata"], p["committed_leader_epoch"])
            for t in h[token]["topics"] for p in t["partitions"]}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(CORE_OPS, max_size=25))
def test_coordinator_offsets_match_a_model_through_restarts(ops: list[tuple]) -> None:
    h = Harness(offsets_retention_minutes=1, offsets_retention_check_interval_ms=CHECK_MS)
    model: dict[tuple[str, str, int], tuple[int, str, int, int]] = {}  # -> (offset, metadata, epoch, commit time)
    for op in ops:
        if op[0] == "commit":
            _, group, parts, metadata, version = op
            topics: dict[str, list] = {}
            for topic, partition, offset in parts:
                topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                                     "committed_leader_epoch": 3, "committed_metadata": metadata,
                                                     "commit_timestamp": -1})
            token = h.send(COMMIT, version, {"group_id": group, "generation_id_or_member_epoch": -1,
                                             "member_id": "", "group_instance_id": None,
                                             "retention_time_ms": RETENTION_MS if version == 2 else -1,
                                             "topics": [{"name": t, "partitions": p} for t, p in topics.items()]})
            assert all(p["error_code"] == 0 for t in h[token]["topics"] for p in t["partitions"])
            for topic, partition, offset in parts:
                model[(group, topic, partition)] = (offset, metadata, 3 if version >= 6 else -1, h.now)
        elif op[0] == "offset_delete":
            _, group, topic, partition = op
            token = h.send(47, 0, {"group_id": group, "topics": [{"name": topic, "partitions": [
                {"partition_index": partition}]}]})
            if h.error(token) == 0:
                model.pop((group, topic, partition), None)
        elif op[0] == "delete_group":
            _, group = op
            token = h.send(DELETE, 2, {"groups_names": [group]})
            if h[token]["results"][0]["error_code"] == 0:
                model = {k: v for k, v in model.items() if k[0] != group}
        elif op[0] == "sleep":
            h.sleep(op[1])
            for key, (_, _, _, at) in list(model.items()):
                age = h.now - at
                held = key[1:] in fetched(h, key[0])
                if age >= RETENTION_MS + CHECK_MS:
                    assert not held, (key, age)
                    del model[key]
                elif age < RETENTION_MS:
                    assert held, (key, age)
                elif not held:  # expired at a check between retention and retention + one interval
                    del model[key]
        else:
            h = restarted(h)
        for group in CORE_GROUPS:
            want = {(t, p): v[:3] for (g, t, p), v in model.items() if g == group}
            assert fetched(h, group) == want, (op, group)
