"""Shard.replay on its fast path: offset commits, tombstones, bad values and group records, as stories."""

from __future__ import annotations

import pytest

from coordinator.core.config import GroupConfig
from coordinator.core.coordinator import Coordinator
from coordinator.core.records import (
    GroupMetadataValue,
    OffsetCommitValue,
    RecordError,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from coordinator.core.shard import Shard, ShardStatus


def loading_shard() -> Shard:
    shard = Shard(3)
    shard.reset(ShardStatus.LOADING)
    return shard


def test_later_commit_wins_and_tombstone_removes_the_partition_then_the_group():
    shard = loading_shard()
    shard.replay(encode_offset_key("g", "orders", 0), encode_offset_value(OffsetCommitValue(5, 1, "", 100)))
    shard.replay(encode_offset_key("g", "orders", 1), encode_offset_value(OffsetCommitValue(7, 1, "m", 100)))
    shard.replay(encode_offset_key("g", "orders", 0), encode_offset_value(OffsetCommitValue(9, 2, "", 200)))
    assert shard.offsets.as_dict() == {"g": {("orders", 0): OffsetCommitValue(9, 2, "", 200),
                                   ("orders", 1): OffsetCommitValue(7, 1, "m", 100)}}
    shard.replay(encode_offset_key("g", "orders", 0), None)
    shard.replay(encode_offset_key("g", "orders", 9), None)  # tombstone of a partition never committed
    assert shard.offsets.as_dict() == {"g": {("orders", 1): OffsetCommitValue(7, 1, "m", 100)}}
    shard.replay(encode_offset_key("g", "orders", 1), None)
    assert shard.offsets.as_dict() == {} and shard.groups == {}  # loading: no group objects for offsets yet


def test_an_undecodable_value_raises_and_changes_nothing():
    shard = loading_shard()
    bad = encode_offset_value(OffsetCommitValue(5, 1, "", 100))[:-1]
    with pytest.raises(RecordError):
        shard.replay(encode_offset_key("new-group", "t", 0), bad)
    assert shard.offsets.as_dict() == {}


def test_group_records_apply_while_loading_and_offsets_create_groups_when_active():
    shard = loading_shard()
    shard.replay(encode_group_key("g"), encode_group_value(GroupMetadataValue("consumer", 4, None, None, 50)))
    assert shard.groups["g"].generation == 4
    shard.replay(encode_group_key("g"), None)
    assert "g" not in shard.groups
    shard.replay(b"\x00\x63unknown key version", b"ignored")  # skipped (3-8 are consumer-group records)
    shard.finish_loading()
    shard.replay(encode_offset_key("simple", "t", 0), encode_offset_value(OffsetCommitValue(1, -1, "", 10)))
    assert shard.status is ShardStatus.ACTIVE and "simple" in shard.groups
    assert shard.offsets.group_dict("simple")[("t", 0)].offset == 1


def test_replay_many_skips_an_undecodable_record_and_applies_the_rest():
    core = Coordinator(GroupConfig(offsets_topic_num_partitions=1))
    core.begin_loading(0)
    skipped: list[tuple[bytes, str]] = []
    bad_key = encode_offset_key("g", "orders", 1)
    core.replay_many(0, [
        (encode_offset_key("g", "orders", 0), encode_offset_value(OffsetCommitValue(5, 1, "", 100))),
        (bad_key, b"\x00\x03garbage"),
        (encode_offset_key("g", "orders", 2), encode_offset_value(OffsetCommitValue(8, 1, "", 100))),
    ], lambda key, e: skipped.append((key, type(e).__name__)))
    core.finish_loading(0, 1000)
    assert skipped == [(bad_key, "RecordError")]
    assert core.committed_offsets("g") == {("orders", 0): OffsetCommitValue(5, 1, "", 100),
                                           ("orders", 2): OffsetCommitValue(8, 1, "", 100)}
