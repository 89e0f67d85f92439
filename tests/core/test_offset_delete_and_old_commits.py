"""OffsetDelete (47) and OffsetCommit v0/v1 in the sans-IO core, with the manual clock of core_harness.

Stories: a v1 commit's own commit_timestamp is stored and retention counts from it (Kafka's
OffsetAndMetadata.fromRequest); v0 carries no membership, so it is a generation -1 commit refused by a group
with members. OffsetDelete writes one tombstone per deleted offset and the offset disappears only once the
tombstone is replayed; a failed write answers its error at the top level and deletes nothing; a group that
is not Empty and not a consumer group answers NON_EMPTY_GROUP, a consumer group whose subscriptions cannot
be read is taken as subscribed to every topic (GROUP_SUBSCRIBED_TO_TOPIC), as in Kafka's ClassicGroup.
"""

from __future__ import annotations

from core_harness import COMMIT, Harness, subscription

from coordinator.core.errors import Err
from coordinator.core.records import OffsetCommitKey, decode_key, decode_offset_value

OFFSET_DELETE = 47
MINUTE = 60_000


def delete(h: Harness, group: str, parts: dict[str, list[int]]):
    return h.send(OFFSET_DELETE, 0, {"group_id": group, "topics": [
        {"name": t, "partitions": [{"partition_index": p} for p in ps]} for t, ps in parts.items()]}, "delete")


def commit_v1(h: Harness, group: str, generation: int, member: str, offset: int, commit_ts: int):
    return h.send(COMMIT, 1, {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
                              "topics": [{"name": "t", "partitions": [
                                  {"partition_index": 0, "committed_offset": offset, "commit_timestamp": commit_ts,
                                   "committed_metadata": None}]}]}, "commit-v1")


def test_v1_commit_timestamp_is_the_commit_time_and_retention_counts_from_it():
    h = Harness(offsets_retention_minutes=10, offsets_retention_check_interval_ms=MINUTE)
    h.sleep(60 * MINUTE)
    t = commit_v1(h, "old", -1, "", 7, h.now - 9 * MINUTE)  # committed "9 minutes ago"
    assert h[t]["topics"][0]["partitions"][0]["error_code"] == 0
    value = decode_offset_value(h.writes[-1][0][0][2])
    assert (value.offset, value.commit_timestamp) == (7, h.now - 9 * MINUTE)
    now_default = commit_v1(h, "fresh", -1, "", 8, -1)
    assert h[now_default]["topics"][0]["partitions"][0]["error_code"] == 0
    assert decode_offset_value(h.writes[-1][0][0][2]).commit_timestamp == h.now
    h.sleep(2 * MINUTE)  # "old" is now 11 minutes old, "fresh" 2
    assert h.coord.committed_offsets("old") == {}
    assert set(h.coord.committed_offsets("fresh")) == {("t", 0)}


def test_v0_commit_has_no_membership_and_v1_checks_the_generation(h):
    gen, (m,) = h.stable_group("g", 1)
    v0 = h.send(COMMIT, 0, {"group_id": "g", "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}]})
    assert h[v0]["topics"][0]["partitions"][0]["error_code"] == Err.UNKNOWN_MEMBER_ID
    assert h[commit_v1(h, "g", gen, m, 2, -1)]["topics"][0]["partitions"][0]["error_code"] == 0
    assert h[commit_v1(h, "g", gen + 1, m, 3, -1)]["topics"][0]["partitions"][0]["error_code"] == Err.ILLEGAL_GENERATION
    assert h.fetch("g", {"t": [0]}, version=1)[("t", 0)]["committed_offset"] == 2


def test_offset_delete_tombstones_become_visible_on_replay_and_a_failed_write_deletes_nothing(h):
    h.commit("simple", -1, "", {("t", 0): 1, ("t", 1): 2})
    h.fail_next_write = Err.NOT_COORDINATOR
    failed = delete(h, "simple", {"t": [0]})
    assert h[failed] == {"error_code": Err.NOT_COORDINATOR, "topics": []}
    assert set(h.coord.committed_offsets("simple")) == {("t", 0), ("t", 1)}

    h.hold_writes = True
    t = delete(h, "simple", {"t": [0, 5]})  # (t, 5) has no offset: answered NONE, no tombstone
    assert not h.answered(t)
    assert set(h.coord.committed_offsets("simple")) == {("t", 0), ("t", 1)}  # not durable yet
    h.release_writes()
    assert h[t] == {"error_code": 0, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0}, {"partition_index": 5, "error_code": 0}]}]}
    records = h.writes[-1][0]
    assert [(decode_key(k), v) for _, k, v in records] == [(OffsetCommitKey("simple", "t", 0), None)]
    assert set(h.coord.committed_offsets("simple")) == {("t", 1)}


def test_offset_delete_group_level_errors_and_unreadable_subscriptions(h):
    assert h[delete(h, "nobody", {"t": [0]})] == {"error_code": Err.GROUP_ID_NOT_FOUND, "topics": []}
    h.stable_group("connect", 1, ptype="connect")
    assert h[delete(h, "connect", {"t": [0]})] == {"error_code": Err.NON_EMPTY_GROUP, "topics": []}
    gen, (m,) = h.stable_group("garbled", 1, protocols=(("range", b"\x00"),))  # not a ConsumerProtocol subscription
    h.commit("garbled", gen, m, {("other", 0): 4})
    answer = h[delete(h, "garbled", {"other": [0]})]
    assert answer["topics"][0]["partitions"] == [{"partition_index": 0, "error_code": Err.GROUP_SUBSCRIBED_TO_TOPIC}]
    gen, (m,) = h.stable_group("readable", 1, protocols=(("range", subscription("mine")),))
    h.commit("readable", gen, m, {("other", 0): 4, ("mine", 0): 5})
    answer = h[delete(h, "readable", {"other": [0], "mine": [0]})]
    assert [p["error_code"] for t in answer["topics"] for p in t["partitions"]] == [
        0, Err.GROUP_SUBSCRIBED_TO_TOPIC]
    assert set(h.coord.committed_offsets("readable")) == {("mine", 0)}
