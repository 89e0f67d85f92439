"""Per-group configs (issue #37 item 5) in the sans-IO core: coordinator/core/group_configs.py and its hooks.

- The record (key version 1001) round-trips; a bad one is a RecordError; a group with no overrides is a tombstone.
- Checks as Kafka 4's GroupConfig: unknown key, bad value, the consumer timeouts within the server's bounds and
  the session above the interval; -1 retention; APPEND/SUBTRACT refused; describe's sources 8 / 5.
- Through the Coordinator: an alter writes one record, visible once durable, replayed at load (record by record
  and in bulk) and after compaction; two alters in flight both count; a failed write changes nothing and answers
  its error; a shard not served answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS.
- Retention: -1 keeps one group's offsets while another's expire; a shorter per-group retention expires sooner;
  the expiring count sees the next day. DeleteGroups and the expiry take the configs with the group.
- KIP-848: a group's consumer.session.timeout.ms / consumer.heartbeat.interval.ms reach its members' next
  heartbeat (the interval answered, the session deadline armed) and its deadlines after a load.
"""

from __future__ import annotations

import itertools
import re
import uuid

import pytest
from core_harness import COMMIT, DELETE, Harness  # type: ignore[import-not-found]

from coordinator.core import group_configs as gc
from coordinator.core.config import GroupConfig
from coordinator.core.consumer_group import TopicInfo
from coordinator.core.consumer_group import records as R
from coordinator.core.coordinator import Coordinator
from coordinator.core.errors import Err
from coordinator.core.records import RecordError

LIMITS = gc.Limits()
_TOKENS = itertools.count()
MINUTE = 60_000
DAY = 86_400_000


def configs_records(log: list) -> list:
    return [r for r in log if gc.is_configs_key(r[1])]


def alter(h: Harness, group: str, ops: list[tuple[str, int, str | None]], label: str = "alter") -> object:
    token = f"{label}-{next(_TOKENS)}"
    h.apply(h.coord.alter_group_configs(group, lambda cur: gc.apply_incremental(cur, ops, LIMITS), token, h.now))
    return token


def answer(h: Harness, token: object) -> dict:
    return h.responses[token]  # type: ignore[index]


def anonymous_commit(h: Harness, group: str, offsets: dict, version: int = 7, commit_ts: int | None = None) -> None:
    parts = [{"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": "",
              **({"commit_timestamp": commit_ts} if commit_ts is not None else {})}
             for (_, p), o in offsets.items()]
    topic = next(iter(offsets))[0]
    token = h.send(COMMIT, version, {"group_id": group, "generation_id_or_member_epoch": -1, "generation_id": -1,
                                     "member_id": "", "group_instance_id": None, "retention_time_ms": -1,
                                     "topics": [{"name": topic, "partitions": parts}]})
    assert all(p["error_code"] == 0 for t in h[token]["topics"] for p in t["partitions"])


# ---------------------------------------------------------------- the record and the rules

def test_record_round_trips_and_bad_ones_are_record_errors() -> None:
    key = gc.encode_key("grp")
    assert gc.is_configs_key(key) and key[:2] == b"\x03\xe9"
    assert gc.decode_key(key) == "grp"
    value = gc.encode_value({"offsets.retention.minutes": "-1", "consumer.session.timeout.ms": "50000"})
    assert value is not None
    assert gc.decode_value(value) == {"offsets.retention.minutes": "-1", "consumer.session.timeout.ms": "50000"}
    assert gc.encode_value({}) is None  # no overrides: a tombstone
    for bad in (value[:-1], value + b"x", b"\x00\x01" + value[2:], b"\x00"):
        with pytest.raises(RecordError):
            gc.decode_value(bad)
    with pytest.raises(RecordError):
        gc.decode_key(key + b"\x00")
    store = gc.GroupConfigs()
    store.replay(key, value)
    with pytest.raises(RecordError):
        store.replay(key, value[:-1])
    assert store.of("grp")["offsets.retention.minutes"] == "-1"  # a bad value changed nothing
    store.replay(key, None)
    assert store.of("grp") == {}


def test_checks_follow_kafkas_group_config() -> None:
    assert gc.validate({"offsets.retention.minutes": " -1 "}, LIMITS) == {"offsets.retention.minutes": "-1"}
    assert gc.validate({"consumer.session.timeout.ms": "50000", "consumer.heartbeat.interval.ms": "6000"},
                       LIMITS) == {"consumer.heartbeat.interval.ms": "6000", "consumer.session.timeout.ms": "50000"}
    refused = {
        (("retention.ms", "1"),): "Unknown group config name: retention.ms",
        (("offsets.retention.minutes", "0"),): "Value must be -1 (never expire) or at least 1",
        (("offsets.retention.minutes", "x"),): "Not a number of type INT",
        (("offsets.retention.minutes", str(2**31)),): "Not a number of type INT",
        (("consumer.session.timeout.ms", "0"),): "Value must be at least 1",
        (("consumer.session.timeout.ms", "44999"),): "must be greater than or equal to "
                                                     "group.consumer.min.session.timeout.ms",
        (("consumer.session.timeout.ms", "60001"),): "must be less than or equal to "
                                                     "group.consumer.max.session.timeout.ms",
        (("consumer.heartbeat.interval.ms", "4999"),): "group.consumer.min.heartbeat.interval.ms",
        (("consumer.heartbeat.interval.ms", "15001"),): "group.consumer.max.heartbeat.interval.ms",
    }
    for pairs, message in refused.items():
        with pytest.raises(gc.InvalidGroupConfig, match=re.escape(message)):
            gc.validate(dict(pairs), LIMITS)
    wide = gc.Limits(min_session_timeout_ms=1000, min_heartbeat_interval_ms=1000, max_heartbeat_interval_ms=60000)
    with pytest.raises(gc.InvalidGroupConfig, match=re.escape("consumer.session.timeout.ms must be greater "
                                                                    "than consumer.heartbeat.interval.ms")):
        gc.validate({"consumer.session.timeout.ms": "20000", "consumer.heartbeat.interval.ms": "20000"}, wide)
    current = {"offsets.retention.minutes": "5"}
    assert gc.apply_incremental(current, [("offsets.retention.minutes", 1, None),
                                          ("consumer.session.timeout.ms", 0, "46000")], LIMITS) \
        == {"consumer.session.timeout.ms": "46000"}
    with pytest.raises(gc.InvalidGroupConfig, match=re.escape("Can't APPEND to key offsets.retention.minutes "
                                                              "because its type is not LIST.")):
        gc.apply_incremental(current, [("offsets.retention.minutes", 2, "1")], LIMITS)
    with pytest.raises(gc.InvalidGroupConfig, match="Can't SUBTRACT"):
        gc.apply_incremental(current, [("offsets.retention.minutes", 3, "1")], LIMITS)
    with pytest.raises(gc.InvalidGroupConfigRequest, match=re.escape("Null value not supported for : "
                                                                          "offsets.retention.minutes")):
        gc.apply_incremental(current, [("offsets.retention.minutes", 0, None)], LIMITS)
    assert gc.replace({"consumer.heartbeat.interval.ms": "7000"}, LIMITS) == {"consumer.heartbeat.interval.ms": "7000"}


def test_describe_lists_every_key_with_its_source() -> None:
    entries = gc.describe({"offsets.retention.minutes": "-1"}, LIMITS, None, True, True)
    by_name = {e["name"]: e for e in entries}
    assert list(by_name) == ["consumer.session.timeout.ms", "consumer.heartbeat.interval.ms",
                             "offsets.retention.minutes"]
    assert by_name["offsets.retention.minutes"]["value"] == "-1"
    assert by_name["offsets.retention.minutes"]["config_source"] == 8  # DYNAMIC_GROUP_CONFIG
    assert by_name["consumer.session.timeout.ms"]["value"] == "45000"
    assert by_name["consumer.session.timeout.ms"]["config_source"] == 5  # DEFAULT_CONFIG
    assert all(not e["read_only"] and e["config_type"] == 3 and e["documentation"] for e in entries)
    assert by_name["offsets.retention.minutes"]["synonyms"] == [{"name": "offsets.retention.minutes", "value": "-1",
                                                                  "source": 8}]
    only = gc.describe({}, LIMITS, ["consumer.heartbeat.interval.ms", "nope"], False, False)
    assert [(e["name"], e["value"], e["synonyms"]) for e in only] == [("consumer.heartbeat.interval.ms", "5000", [])]


# ---------------------------------------------------------------- through the Coordinator

def reload(h: Harness, *, bulk: bool) -> Coordinator:
    coord = Coordinator(h.cfg)
    for shard in range(h.cfg.offsets_topic_num_partitions):
        coord.begin_loading(shard)
        mine = [(k, v) for s, k, v in h.log if s == shard]
        if bulk:
            coord.replay_many(shard, mine, lambda key, e: pytest.fail(f"skipped {e}"))
        else:
            for k, v in mine:
                coord.replay(shard, k, v)
        coord.finish_loading(shard, h.now)
    return coord


def compacted(log: list) -> list:
    latest: dict = {}
    for i, r in enumerate(log):
        latest[(r[0], r[1])] = (i, r)
    return [r for _, r in sorted(latest.values(), key=lambda x: x[0]) if r[2] is not None]


def test_alter_writes_one_record_visible_once_durable_and_replayed_at_load() -> None:
    h = Harness()
    h.hold_writes = True
    token = alter(h, "g", [("offsets.retention.minutes", 0, "-1")])
    assert token not in h.responses and h.coord.group_configs("g") == {}  # not durable yet: not described
    h.release_writes()
    assert answer(h, token) == {"error_code": 0, "error_message": None}
    assert h.coord.group_configs("g") == {"offsets.retention.minutes": "-1"}
    [record] = configs_records(h.log)
    assert record[0] == h.coord.shard_for("g") and gc.decode_key(record[1]) == "g"
    alter(h, "g", [("consumer.session.timeout.ms", 0, "50000")])
    expected = {"offsets.retention.minutes": "-1", "consumer.session.timeout.ms": "50000"}
    assert h.coord.group_configs("g") == expected
    for bulk in (False, True):
        assert reload(h, bulk=bulk).group_configs("g") == expected
    h.log = compacted(h.log)
    assert reload(h, bulk=True).group_configs("g") == expected
    # deleting every key writes a tombstone
    alter(h, "g", [("offsets.retention.minutes", 1, None), ("consumer.session.timeout.ms", 1, None)])
    assert configs_records(h.log)[-1][2] is None and h.coord.group_configs("g") == {}


def test_two_alters_in_flight_both_count_and_a_failed_write_changes_nothing() -> None:
    h = Harness()
    h.hold_writes = True
    a = alter(h, "g", [("offsets.retention.minutes", 0, "30")])
    b = alter(h, "g", [("consumer.heartbeat.interval.ms", 0, "6000")])
    h.release_writes()
    assert answer(h, a)["error_code"] == 0 and answer(h, b)["error_code"] == 0
    assert h.coord.group_configs("g") == {"offsets.retention.minutes": "30", "consumer.heartbeat.interval.ms": "6000"}
    h.fail_next_write = int(Err.NOT_COORDINATOR)
    failed = alter(h, "g", [("offsets.retention.minutes", 0, "-1")])
    assert answer(h, failed)["error_code"] == Err.NOT_COORDINATOR
    assert h.coord.group_configs("g")["offsets.retention.minutes"] == "30"
    later = alter(h, "g", [("consumer.heartbeat.interval.ms", 1, None)])  # built on the durable set, not the failed
    assert answer(h, later)["error_code"] == 0
    assert h.coord.group_configs("g") == {"offsets.retention.minutes": "30"}


def test_refusals_and_shards_not_served() -> None:
    h = Harness()
    bad = alter(h, "g", [("offsets.retention.minutes", 0, "0")])
    assert answer(h, bad)["error_code"] == 40 and "at least 1" in answer(h, bad)["error_message"]
    null = alter(h, "g", [("offsets.retention.minutes", 0, None)])
    assert answer(h, null)["error_code"] == Err.INVALID_REQUEST
    assert not configs_records(h.log)
    shard = h.coord.shard_for("g")
    h.apply(h.coord.unload(shard, h.now))
    assert h.coord.group_configs("g") == Err.NOT_COORDINATOR
    assert answer(h, alter(h, "g", [("offsets.retention.minutes", 0, "5")]))["error_code"] == Err.NOT_COORDINATOR
    h.coord.begin_loading(shard)
    assert h.coord.group_configs("g") == Err.COORDINATOR_LOAD_IN_PROGRESS
    assert not configs_records(h.log)


# ---------------------------------------------------------------- retention

def retention_harness() -> Harness:
    return Harness(offsets_retention_minutes=60, offsets_retention_check_interval_ms=1000)


def test_retention_minus_one_keeps_one_groups_offsets_while_anothers_expire() -> None:
    h = retention_harness()
    for g in ("keep", "lose"):
        anonymous_commit(h, g, {("t", 0): 5, ("t", 1): 6})
    alter(h, "keep", [("offsets.retention.minutes", 0, "-1")])
    assert sum(h.coord.offsets_expiring(h.now, 59 * MINUTE)) == 0
    assert sum(h.coord.offsets_expiring(h.now, DAY)) == 2  # only "lose"'s two
    h.sleep(61 * MINUTE)
    assert h.coord.committed_offsets("lose") == {}
    assert {tp: v.offset for tp, v in h.coord.committed_offsets("keep").items()} == {("t", 0): 5, ("t", 1): 6}
    assert h.coord.group("lose") is None and h.coord.group("keep") is not None
    h.sleep(3 * 3_600_000)  # hours of checks past the server's retention
    assert len(h.coord.committed_offsets("keep")) == 2
    assert sum(h.coord.offsets_expiring(h.now, DAY)) == 0
    # back to the server's retention: they expire at the next check
    alter(h, "keep", [("offsets.retention.minutes", 1, None)])
    h.sleep(2000)
    assert h.coord.committed_offsets("keep") == {}


def test_a_shorter_group_retention_expires_sooner_and_takes_the_configs_with_the_group() -> None:
    h = retention_harness()
    anonymous_commit(h, "short", {("t", 0): 1})
    anonymous_commit(h, "server", {("t", 0): 1})
    alter(h, "short", [("offsets.retention.minutes", 0, "2")])
    assert sum(h.coord.offsets_expiring(h.now, 3 * MINUTE)) == 1
    h.sleep(3 * MINUTE)
    assert h.coord.committed_offsets("short") == {} and len(h.coord.committed_offsets("server")) == 1
    assert h.coord.group("short") is None
    assert h.coord.group_configs("short") == {}  # removed with the group, by a tombstone
    assert configs_records(h.log)[-1][2] is None
    assert reload(h, bulk=True).group_configs("short") == {}


def test_a_v1_commit_timestamp_in_the_past_expires_at_the_next_check() -> None:
    h = retention_harness()
    h.sleep(2 * 3_600_000)
    anonymous_commit(h, "old", {("t", 0): 3}, version=1, commit_ts=h.now - 2 * 3_600_000)
    anonymous_commit(h, "kept", {("t", 0): 3}, version=1, commit_ts=h.now - 2 * 3_600_000)
    alter(h, "kept", [("offsets.retention.minutes", 0, "-1")])
    assert sum(h.coord.offsets_expiring(h.now, 0)) == 1
    h.sleep(1500)
    assert h.coord.committed_offsets("old") == {} and len(h.coord.committed_offsets("kept")) == 1


def test_delete_groups_takes_the_configs_in_the_same_write() -> None:
    h = Harness()
    anonymous_commit(h, "g", {("t", 0): 1})
    alter(h, "g", [("offsets.retention.minutes", 0, "-1")])
    alter(h, "nogroup", [("offsets.retention.minutes", 0, "-1")])
    token = h.send(DELETE, 2, {"groups_names": ["g", "nogroup"]})
    assert [r["error_code"] for r in h[token]["results"]] == [0, Err.GROUP_ID_NOT_FOUND]
    records, _ = h.writes[-1]
    assert (h.coord.shard_for("g"), gc.encode_key("g"), None) in records
    assert h.coord.group_configs("g") == {}
    assert h.coord.group_configs("nogroup") == {"offsets.retention.minutes": "-1"}  # kept: no group to delete


def test_delete_of_a_group_with_only_configs_to_remove_answers_a_failed_write() -> None:
    h = Harness()
    anonymous_commit(h, "g", {("t", 0): 1})
    offsets_delete = h.send(47, 0, {"group_id": "g", "topics": [{"name": "t", "partitions": [
        {"partition_index": 0}]}]})
    assert h[offsets_delete]["error_code"] == 0 and h.coord.committed_offsets("g") == {}
    alter(h, "g", [("offsets.retention.minutes", 0, "-1")])
    h.fail_next_write = int(Err.NOT_COORDINATOR)
    token = h.send(DELETE, 2, {"groups_names": ["g"]})
    assert [r["error_code"] for r in h[token]["results"]] == [Err.NOT_COORDINATOR]


# ---------------------------------------------------------------- KIP-848 session timeout and interval

def test_consumer_timeouts_reach_the_members_next_heartbeat_and_a_load() -> None:
    core = Coordinator(GroupConfig(offsets_topic_num_partitions=4))
    group = "cg"
    shard = core.shard_for(group)
    core.begin_loading(shard)
    core.finish_loading(shard, 0)
    topics = {"t": TopicInfo(uuid.uuid4(), 2)}
    log: list = []

    def beat(body: dict, now: int):  # type: ignore[no-untyped-def]
        out = core.consumer_groups(shard).heartbeat({"group_id": group, **body}, 1, now, topics)
        for record in out.records:
            key, value = R.encode_record(record)
            core.replay(shard, key, value)
            log.append((key, value))
        return out

    first = beat({"member_id": "m1", "member_epoch": 0, "rebalance_timeout_ms": 30000,
                  "subscribed_topic_names": ["t"], "topic_partitions": []}, 0)
    assert first.response["heartbeat_interval_ms"] == 5000
    assert [d.at_ms for d in first.deadlines if d.kind == "session"] == [45000]
    epoch = first.response["member_epoch"]
    answers: list = []
    out = core.alter_group_configs(group, lambda cur: gc.apply_incremental(cur, [
        ("consumer.session.timeout.ms", 0, "55000"), ("consumer.heartbeat.interval.ms", 0, "7000")], LIMITS),
        "tok", 10)
    for _shard, key, value in out.records:
        log.append((key, value))
    core.on_appended(out.write_id, 10)
    answers.extend(out.completions)
    assert answers == [("tok", {"error_code": 0, "error_message": None})]
    second = beat({"member_id": "m1", "member_epoch": epoch}, 100)
    assert second.response["heartbeat_interval_ms"] == 7000
    assert [d.at_ms for d in second.deadlines if d.kind == "session"] == [100 + 55000]
    other = core.consumer_groups(shard)  # another group of the shard keeps the server's values
    assert other.session_timeout_ms("another") == 45000 and other.heartbeat_interval_ms("another") == 5000
    loaded = Coordinator(GroupConfig(offsets_topic_num_partitions=4))
    loaded.begin_loading(shard)
    for key, value in log:
        loaded.replay(shard, key, value)
    loaded.finish_loading(shard, 1000)
    deadlines = loaded.consumer_groups(shard).loaded_deadlines(1000)
    assert [d.at_ms for d in deadlines if d.kind == "session"] == [1000 + 55000]


# ---------------------------------------------------------------- the authorizer's rule (runtime/security/api_acls.py)

def test_group_resources_need_describe_configs_or_alter_configs_on_the_group() -> None:
    from types import SimpleNamespace

    from coordinator.runtime.security import api_acls
    from protocol.acl_types import AclOperation as Op
    from protocol.acl_types import ResourceType as Res

    asked: list = []

    def acl(op: int, rtype: int, name: str, quiet: bool = False) -> bool:
        asked.append((op, rtype, name))
        return name == "allowed"

    for api, op, field in ((32, Op.DESCRIBE_CONFIGS, "results"), (44, Op.ALTER_CONFIGS, "responses"),
                           (33, Op.ALTER_CONFIGS, "responses")):
        asked.clear()
        body = {"resources": [{"resource_type": 32, "resource_name": n, "configs": [], "configuration_keys": None}
                              for n in ("allowed", "denied")]}
        slot = SimpleNamespace(merge=None, complete=lambda response: pytest.fail(f"answered {response}"))
        request = SimpleNamespace(api_key=api, body=body)
        assert api_acls.admit(request, slot, acl, None)  # type: ignore[arg-type]
        assert asked == [(op, Res.GROUP, "allowed"), (op, Res.GROUP, "denied")]
        assert [r["resource_name"] for r in body["resources"]] == ["allowed"]
        merged = slot.merge({field: []})
        assert [(r["resource_name"], r["error_code"]) for r in merged[field]] == [("denied", 30)]
