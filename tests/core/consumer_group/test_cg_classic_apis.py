"""Where consumer groups meet the classic APIs in the Coordinator (Kafka 4.0's OffsetMetadataManager and
ConsumerGroup.validateOffsetCommit / validateOffsetFetch; GroupMetadataManager.classicGroupJoin): a group
built by a heartbeat whose records are replayed into the coordinator's shard, as the runtime does."""

from __future__ import annotations

import uuid

from coordinator.core.consumer_group import TopicInfo
from coordinator.core.consumer_group import records as R
from coordinator.core.coordinator import Coordinator
from coordinator.core.records import decode_key

GROUP = "cg"
TOPIC = "t"


def _core_with_member() -> tuple[Coordinator, str, int]:
    core = Coordinator()
    shard = core.shard_for(GROUP)
    core.begin_loading(shard)
    core.finish_loading(shard, 0)
    outcome = core.consumer_groups(shard).heartbeat(
        {"group_id": GROUP, "member_id": "m1", "member_epoch": 0, "rebalance_timeout_ms": 30000,
         "subscribed_topic_names": [TOPIC], "topic_partitions": []}, 1, 0,
        {TOPIC: TopicInfo(uuid.uuid4(), 2)})
    assert outcome.response is not None and outcome.response["error_code"] == 0
    for record in outcome.records:
        core.replay(shard, *R.encode_record(record))
    return core, "m1", outcome.response["member_epoch"]


def _commit(core: Coordinator, version: int, epoch: int, member: str) -> int:
    out = core.handle(8, version, {"group_id": GROUP, "generation_id_or_member_epoch": epoch, "member_id": member,
                                   "group_instance_id": None, "topics": [{"name": TOPIC, "partitions": [
                                       {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                                        "committed_metadata": ""}]}]}, "tok", 1)
    return out.completions[0][1]["topics"][0]["partitions"][0]["error_code"]


def test_offset_commit_checks_the_member_epoch() -> None:
    core, member, epoch = _core_with_member()
    assert _commit(core, 9, epoch + 1, member) == 113  # STALE_MEMBER_EPOCH
    assert _commit(core, 9, epoch, "nobody") == 25  # UNKNOWN_MEMBER_ID
    assert _commit(core, 9, -1, "") == 25  # a non-empty group takes no anonymous commit
    assert _commit(core, 8, epoch, member) == 35  # UNSUPPORTED_VERSION below v9
    assert _commit(core, 9, epoch, member) == 0
    # the hot path's one-partition commit follows the same rules
    assert core.commit_offset(1, 9, GROUP, epoch + 1, member, None, TOPIC, 0, 5, -1, "", None) == 113
    assert type(core.commit_offset(1, 9, GROUP, epoch, member, None, TOPIC, 1, 5, -1, "", None)).__name__ \
        == "PendingCommit"


def test_offset_fetch_checks_the_member_epoch() -> None:
    core, member, epoch = _core_with_member()

    def fetch(member_id: str | None, member_epoch: int) -> int:
        out = core.handle(9, 9, {"groups": [{"group_id": GROUP, "member_id": member_id, "member_epoch": member_epoch,
                                             "topics": None}, {"group_id": "other", "topics": None}],
                                 "require_stable": False}, "tok", 1)
        groups = out.completions[0][1]["groups"]
        assert [g["group_id"] for g in groups] == [GROUP, "other"]  # order kept around a refused group
        return groups[0]["error_code"]

    assert fetch(None, -1) == 0  # an admin's fetch
    assert fetch(member, epoch) == 0
    assert fetch(member, epoch - 1) == 113
    assert fetch("nobody", epoch) == 25


def test_classic_join_of_a_consumer_group() -> None:
    core, _, _ = _core_with_member()
    join = {"group_id": GROUP, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}],
            "reason": None}
    out = core.handle(11, 5, join, "tok", 1)
    assert out.completions[0][1]["error_code"] == 23  # INCONSISTENT_GROUP_PROTOCOL while it has members
    assert not out.records


def test_classic_join_deletes_an_empty_consumer_group() -> None:
    core = Coordinator()
    shard = core.shard_for(GROUP)
    core.begin_loading(shard)
    core.replay(shard, *R.encode_record(R.Record(R.MetadataKey(GROUP), R.MetadataValue(3))))
    core.replay(shard, *R.encode_record(R.Record(R.TargetAssignmentMetadataKey(GROUP),
                                                 R.TargetAssignmentMetadataValue(3))))
    core.finish_loading(shard, 0)
    join = {"group_id": GROUP, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "m",
            "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}],
            "reason": None}
    out = core.handle(11, 5, join, "tok", 1)
    tombstones = [(key[:2], value) for _, key, value in out.records]
    assert tombstones and all(value is None for _, value in tombstones) and tombstones[-1][0] == b"\x00\x03"
    assert decode_key(out.records[0][1]) is None  # consumer-group keys, not classic ones
    core.on_appended(out.write_id, 2)  # type: ignore[arg-type]
    assert GROUP not in core.consumer_groups(shard).groups


def test_retention_keeps_the_offsets_of_subscribed_topics_and_expires_the_others_by_commit_time() -> None:
    # Kafka 4: a consumer group's offsets of a topic a member subscribes to never expire; others expire at
    # their commit time + offsets.retention.minutes
    core, member, epoch = _core_with_member()
    shard = core.shard_for(GROUP)
    out = core.handle(8, 9, {"group_id": GROUP, "generation_id_or_member_epoch": epoch, "member_id": member,
                             "group_instance_id": None, "topics": [
                                 {"name": name, "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                                "committed_leader_epoch": -1, "committed_metadata": ""}]}
                                 for name in (TOPIC, "unsubscribed")]}, "tok", 1)
    assert [p["error_code"] for t in out.response_for("tok")["topics"] for p in t["partitions"]] == [0, 0]
    core.on_appended(out.write_id, 1)
    assert set(core.committed_offsets(GROUP)) == {(TOPIC, 0), ("unsubscribed", 0)}
    week = core.config.offsets_retention_ms
    expired = core.on_timers(1 + week + core.config.offsets_retention_check_interval_ms + 1)
    assert set(core.committed_offsets(GROUP)) == {(TOPIC, 0)}
    tombstones = [(s, k) for s, k, v in expired.records if v is None]
    assert tombstones and all(s == shard for s, _ in tombstones)


def _list(core: Coordinator, version: int = 5, **filters: list[str]) -> dict[str, tuple[str, str, str]]:
    out = core.handle(16, version, dict(filters), "tok", 1)
    return {g["group_id"]: (g["protocol_type"], g["group_state"], g["group_type"])
            for g in out.completions[0][1]["groups"]}


def test_list_and_describe_groups_show_a_consumer_group_as_kafka_4_does() -> None:
    core, member, epoch = _core_with_member()
    assert _commit(core, 9, epoch, member) == 0  # its offsets' holder is not listed as a group of its own
    other = core.shard_for("classic")
    if other != core.shard_for(GROUP):
        core.begin_loading(other)
        core.finish_loading(other, 0)
    core.handle(11, 5, {"group_id": "classic", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                        "protocols": [{"name": "range", "metadata": b""}], "reason": None}, "tok", 1)
    listed = _list(core)
    assert listed[GROUP] == ("consumer", "Stable", "consumer")
    assert listed["classic"][2] == "classic"
    assert set(_list(core, types_filter=["Classic"])) == {"classic"}
    assert set(_list(core, types_filter=["consumer"])) == {GROUP}
    assert set(_list(core, states_filter=["stable"], types_filter=[])) == {GROUP}

    def describe(version: int) -> dict:
        out = core.handle(15, version, {"groups": [GROUP], "include_authorized_operations": False}, "tok", 1)
        return out.completions[0][1]["groups"][0]

    old, new = describe(5), describe(6)
    assert (old["error_code"], old["group_state"], old["members"]) == (0, "Dead", [])
    assert (new["error_code"], new["error_message"], new["group_state"]) == (69, f"Group {GROUP} is not a classic "
                                                                                "group.", "Dead")


def test_delete_groups_refuses_a_consumer_group_with_members_and_deletes_it_empty() -> None:
    core, member, epoch = _core_with_member()
    shard = core.shard_for(GROUP)
    assert _commit(core, 9, epoch, member) == 0

    def delete() -> int:
        out = core.handle(42, 2, {"groups_names": [GROUP]}, "tok", 1)
        if out.write_id is not None:
            core.on_appended(out.write_id, 1)
        return out.completions[0][1]["results"][0]["error_code"]

    # OffsetDelete of a subscribed topic is refused while subscribed
    out = core.handle(47, 0, {"group_id": GROUP, "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]},
                      "tok", 1)
    assert out.completions[0][1]["topics"][0]["partitions"][0]["error_code"] == 86  # GROUP_SUBSCRIBED_TO_TOPIC
    assert delete() == 68  # NON_EMPTY_GROUP
    left = core.consumer_groups(shard).heartbeat({"group_id": GROUP, "member_id": member, "member_epoch": -1}, 1, 2,
                                                 {TOPIC: TopicInfo(uuid.uuid4(), 2)})
    for record in left.records:
        core.replay(shard, *R.encode_record(record))
    assert delete() == 0
    assert GROUP not in core.consumer_groups(shard).groups and core.committed_offsets(GROUP) == {}
    assert GROUP not in _list(core)
    assert delete() == 69  # GROUP_ID_NOT_FOUND


def test_offset_commit_takes_an_epoch_since_the_members_previous_one_kip_1251() -> None:
    """A commit sent while the heartbeat answer moving the member on is in flight carries its previous epoch:
    accepted (KIP-1251's relaxed check); older epochs and future ones are stale."""
    core, member, _ = _core_with_member()
    groups = core.consumer_groups(core.shard_for(GROUP)).groups
    m = groups[GROUP].members[member]
    groups[GROUP].members[member] = m.replace(member_epoch=7, previous_member_epoch=5)  # moved on from 5 to 7
    assert _commit(core, 9, 7, member) == 0
    assert _commit(core, 9, 6, member) == 0 and _commit(core, 9, 5, member) == 0
    assert _commit(core, 9, 4, member) == 113 and _commit(core, 9, 8, member) == 113
    assert core.commit_offset(1, 9, GROUP, 5, member, None, TOPIC, 0, 6, -1, "", None).__class__.__name__ \
        == "PendingCommit"
    assert core.commit_offset(1, 9, GROUP, 4, member, None, TOPIC, 0, 6, -1, "", None) == 113
