"""Offsets: commit validation, visibility after replay, fetch shapes, KIP-211 retention, deletion."""

from __future__ import annotations

from core_harness import COMMIT, DELETE, DESCRIBE, FETCH, LIST, Harness, Token, subscription

from coordinator.core.errors import Err
from coordinator.core.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_key,
    decode_offset_value,
)

DAY = 24 * 3600 * 1000


def partition_errors(h, token):
    return {(t["name"], p["partition_index"]): p["error_code"] for t in h[token]["topics"] for p in t["partitions"]}


def tombstones(records):
    return sorted((decode_key(k) for _, k, v in records if v is None), key=repr)


def test_simple_consumer_commit_with_generation_minus_one_creates_an_offsets_only_group(h):
    t = h.commit("simple", -1, "", {("orders", 0): 42, ("orders", 1): 43}, metadata="m", epoch=7)
    assert partition_errors(h, t) == {("orders", 0): 0, ("orders", 1): 0}
    (records, released), = h.writes
    assert [decode_key(k) for _, k, _ in records] == [OffsetCommitKey("simple", "orders", 0),
                                                      OffsetCommitKey("simple", "orders", 1)]
    value = decode_offset_value(records[0][2])
    assert (value.offset, value.leader_epoch, value.metadata, value.commit_timestamp) == (42, 7, "m", 0)
    assert [tok for tok, _ in released] == [t]
    got = h.fetch("simple", {"orders": [0, 1, 2]})
    assert (got[("orders", 0)]["committed_offset"], got[("orders", 0)]["metadata"],
            got[("orders", 0)]["committed_leader_epoch"]) == (42, "m", 7)
    assert (got[("orders", 2)]["committed_offset"], got[("orders", 2)]["metadata"]) == (-1, "")
    assert h.state("simple") == "Empty"


def test_committed_offsets_become_visible_only_when_the_write_is_replayed(h):
    coord = h.coord
    out = coord.handle(COMMIT, 7, {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                                   "topics": [{"name": "t", "partitions": [
                                       {"partition_index": 0, "committed_offset": 5, "committed_metadata": None}]}]},
                       Token(1, "c"), 0)
    assert out.write_id is not None and len(out.records) == 1
    assert h.fetch("g", {"t": [0]})[("t", 0)]["committed_offset"] == -1
    stable = coord.handle(FETCH, 7, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}],
                                     "require_stable": True}, Token(2, "f"), 0)
    assert stable.completions[0][1]["topics"][0]["partitions"][0]["error_code"] == Err.UNSTABLE_OFFSET_COMMIT
    coord.on_appended(out.write_id)
    assert h.fetch("g", {"t": [0]})[("t", 0)]["committed_offset"] == 5


def test_failed_commit_write_answers_the_error_and_commits_nothing(h):
    h.fail_next_write = Err.NOT_COORDINATOR
    t = h.commit("g", -1, "", {("t", 0): 5})
    assert partition_errors(h, t) == {("t", 0): Err.NOT_COORDINATOR}
    assert h.fetch("g", {"t": [0]})[("t", 0)]["committed_offset"] == -1


def test_member_commits_are_checked_against_membership_generation_and_state(h):
    gen, (lead, m2) = h.stable_group("g", 2)
    assert partition_errors(h, h.commit("g", gen, m2, {("t", 0): 1})) == {("t", 0): 0}
    assert partition_errors(h, h.commit("g", -1, "", {("t", 0): 2})) == {("t", 0): Err.UNKNOWN_MEMBER_ID}
    assert partition_errors(h, h.commit("g", gen, "stranger", {("t", 0): 3})) == {("t", 0): Err.UNKNOWN_MEMBER_ID}
    assert partition_errors(h, h.commit("nogroup", 3, "m", {("t", 0): 3})) == {("t", 0): Err.ILLEGAL_GENERATION}
    too_long = h.commit("g", gen, m2, {("t", 1): 4}, metadata="x" * 4097)
    assert partition_errors(h, too_long) == {("t", 1): Err.OFFSET_METADATA_TOO_LARGE}
    h.join("g", lead)
    h.join("g", m2)  # generation gen+1 formed, SyncGroup not yet done
    assert partition_errors(h, h.commit("g", gen + 1, m2, {("t", 0): 5})) == {("t", 0): Err.REBALANCE_IN_PROGRESS}
    assert h.fetch("g", {"t": [0, 1]})[("t", 0)]["committed_offset"] == 1


def test_commit_during_preparing_rebalance_is_accepted_and_keeps_the_member_alive(h):
    gen, (lead, m2) = h.stable_group("g", 2, session=5000)
    h.join("g", lead, session=5000)  # PreparingRebalance; m2 has not rejoined yet
    h.sleep(4000)
    assert partition_errors(h, h.commit("g", gen, m2, {("t", 0): 9}, version=2)) == {("t", 0): 0}
    h.sleep(4000)  # without the commit m2's session (5 s) would have expired by now
    assert "g" in h.coord.member_counts() and m2 in h.coord.group("g").members


def test_offset_fetch_all_v7_and_groups_v8_shapes(h):
    h.commit("g", -1, "", {("b", 1): 11, ("a", 0): 10, ("b", 0): 12})
    all_v7 = h[h.send(FETCH, 7, {"group_id": "g", "topics": None})]
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in all_v7["topics"]] == [
        ("a", [0]), ("b", [0, 1])]
    v8 = h[h.send(FETCH, 8, {"groups": [{"group_id": "g", "topics": [{"name": "b", "partition_indexes": [1, 5]}]},
                                        {"group_id": "unknown", "topics": None}], "require_stable": False})]
    g, unknown = v8["groups"]
    assert [(p["partition_index"], p["committed_offset"]) for p in g["topics"][0]["partitions"]] == [(1, 11), (5, -1)]
    assert unknown == {"group_id": "unknown", "topics": [], "error_code": 0}


def test_offset_fetch_v1_reports_coordinator_errors_per_partition():
    h = Harness()
    h.coord.unload(h.coord.shard_for("g"), 0)
    v1 = h[h.send(FETCH, 1, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}]})]
    assert [p["error_code"] for p in v1["topics"][0]["partitions"]] == [Err.NOT_COORDINATOR] * 2
    v3 = h[h.send(FETCH, 3, {"group_id": "g", "topics": None})]
    assert v3 == {"topics": [], "error_code": Err.NOT_COORDINATOR}


def test_kip_211_offsets_of_a_consumer_group_expire_only_after_it_was_empty_for_the_retention():
    h = Harness(offsets_retention_minutes=24 * 60, offsets_retention_check_interval_ms=3600_000)
    gen, (m,) = h.stable_group("g", 1, session=1_800_000, protocols=[("range", subscription("t"))])
    h.commit("g", gen, m, {("t", 0): 1})
    for _ in range(3 * 72):  # stays Stable for 3 days, heartbeating; the old commit does not expire
        h.sleep(1_200_000)
        assert h.error(h.heartbeat("g", gen, m)) == 0
    assert h.fetch("g", {"t": [0]})[("t", 0)]["committed_offset"] == 1
    h.leave("g", m)
    empty_at = h.now
    log_before = len(h.log)
    h.sleep(DAY - 1)
    assert h.fetch("g", {"t": [0]})[("t", 0)]["committed_offset"] == 1
    h.sleep(3600_000)  # the next check after a full day of being Empty
    assert h.now - empty_at >= DAY
    assert tombstones(h.log[log_before:]) == [GroupMetadataKey("g"), OffsetCommitKey("g", "t", 0)]
    assert h.state("g") is None


def test_stable_consumer_group_expires_offsets_of_topics_nobody_subscribes_to():
    h = Harness(offsets_retention_minutes=60, offsets_retention_check_interval_ms=600_000)
    gen, (m,) = h.stable_group("g", 1, session=1_800_000, protocols=[("range", subscription("kept"))])
    h.commit("g", gen, m, {("kept", 0): 1, ("dropped", 0): 2})
    log_before = len(h.log)
    for _ in range(7):
        h.sleep(600_000)
        h.heartbeat("g", gen, m)
    assert tombstones(h.log[log_before:]) == [OffsetCommitKey("g", "dropped", 0)]
    assert set(h.coord.committed_offsets("g")) == {("kept", 0)}


def test_standalone_commits_expire_by_commit_time_and_pending_commits_never_expire():
    h = Harness(offsets_retention_minutes=10, offsets_retention_check_interval_ms=60_000)
    h.commit("simple", -1, "", {("t", 0): 1})
    h.sleep(5 * 60_000)
    h.commit("simple", -1, "", {("t", 1): 2})
    h.sleep(5 * 60_000)  # t=10 min: (t,0) is 10 minutes old
    assert set(h.coord.committed_offsets("simple")) == {("t", 1)}
    pending = h.coord.handle(COMMIT, 7, {"group_id": "simple", "generation_id_or_member_epoch": -1, "member_id": "",
                                         "topics": [{"name": "t", "partitions": [
                                             {"partition_index": 1, "committed_offset": 3}]}]}, Token(0, "p"), h.now)
    h.sleep(10 * 60_000)  # (t,1) is old but its newer commit is still being written
    assert set(h.coord.committed_offsets("simple")) == {("t", 1)}
    h.coord.on_appended(pending.write_id)
    assert h.coord.committed_offsets("simple")[("t", 1)].offset == 3


def test_delete_groups_only_empty_groups_writing_tombstones(h):
    _gen, (m,) = h.stable_group("live", 1)
    h.commit("done", -1, "", {("t", 0): 1, ("t", 1): 2})
    log_before = len(h.log)
    t = h.send(DELETE, 2, {"groups_names": ["done", "live", "never"]})
    assert h[t]["results"] == [{"group_id": "done", "error_code": 0},
                               {"group_id": "live", "error_code": Err.NON_EMPTY_GROUP},
                               {"group_id": "never", "error_code": Err.GROUP_ID_NOT_FOUND}]
    assert tombstones(h.log[log_before:]) == [OffsetCommitKey("done", "t", 0), OffsetCommitKey("done", "t", 1)]
    assert h.state("done") is None and h.fetch("done", {"t": [0]})[("t", 0)]["committed_offset"] == -1
    h.leave("live", m)
    log_before = len(h.log)
    h.send(DELETE, 2, {"groups_names": ["live"]})
    assert tombstones(h.log[log_before:]) == [GroupMetadataKey("live")]


def test_list_groups_with_state_filter_and_describe_groups_with_members(h):
    _gen, (a, b) = h.stable_group("stable", 2)
    h.commit("simple", -1, "", {("t", 0): 1})
    h.join("forming", version=3)
    all_groups = h[h.send(LIST, 3, {})]["groups"]
    assert sorted((g["group_id"], g["protocol_type"]) for g in all_groups) == [
        ("forming", "consumer"), ("simple", ""), ("stable", "consumer")]
    only = h[h.send(LIST, 4, {"states_filter": ["stable", "Empty"]})]["groups"]
    assert sorted((g["group_id"], g["group_state"]) for g in only) == [("simple", "Empty"), ("stable", "Stable")]
    described = h[h.send(DESCRIBE, 5, {"groups": ["stable", "forming", "ghost"]})]["groups"]
    stable, forming, ghost = described
    assert (stable["group_state"], stable["protocol_type"], stable["protocol_data"]) == ("Stable", "consumer", "range")
    assert [(m["member_id"], m["client_id"], m["member_metadata"], m["member_assignment"]) for m in stable["members"]] == [
        (a, "c0", b"m", a.encode()), (b, "c1", b"m", b.encode())]
    assert forming["group_state"] == "PreparingRebalance" and forming["members"][0]["member_assignment"] == b""
    assert (ghost["group_state"], ghost["error_code"]) == ("Dead", 0)
    v6 = h[h.send(DESCRIBE, 6, {"groups": ["ghost"]})]["groups"][0]
    assert v6["error_code"] == Err.GROUP_ID_NOT_FOUND


def test_v2_commit_with_explicit_retention_time_expires_at_its_own_timestamp():
    h = Harness(offsets_retention_check_interval_ms=60_000)
    t = h.send(COMMIT, 2, {"group_id": "old", "generation_id_or_member_epoch": -1, "member_id": "",
                           "retention_time_ms": 120_000, "topics": [{"name": "t", "partitions": [
                               {"partition_index": 0, "committed_offset": 8, "committed_metadata": None}]}]})
    assert partition_errors(h, t) == {("t", 0): 0}
    value = decode_offset_value(h.log[-1][2])
    assert h.log[-1][2][:2] == b"\x00\x01" and value.expire_timestamp == 120_000
    h.sleep(60_000)
    assert h.fetch("old", {"t": [0]})[("t", 0)]["committed_offset"] == 8
    h.sleep(60_000)  # t=120 s: the explicit expire timestamp, long before the 7-day default retention
    assert h.fetch("old", {"t": [0]})[("t", 0)]["committed_offset"] == -1 and h.state("old") is None


def test_failed_delete_groups_write_answers_the_error_for_the_deleted_groups(h):
    h.commit("a", -1, "", {("t", 0): 1})
    h.fail_next_write = Err.NOT_COORDINATOR
    t = h.send(DELETE, 1, {"groups_names": ["a", "missing"]})
    assert h[t]["results"] == [{"group_id": "a", "error_code": Err.NOT_COORDINATOR},
                               {"group_id": "missing", "error_code": Err.GROUP_ID_NOT_FOUND}]
