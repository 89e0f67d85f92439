"""bulk_replay.replay_records: the same shard as Shard.replay of each record, the same records skipped.

The fast path caches a group's key prefix, its offsets dict and a topic string across records; these tests
feed it what could trip such caches (tombstones and group records between commits of one group, keys that
share a prefix but differ after it, truncated or padded keys, lengths with the sign bit, bad UTF-8, every
value version, group metadata) and compare against the one-record-at-a-time reference.
"""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.bulk_replay import replay_records
from coordinator.core.records import (
    GroupMetadataValue,
    MemberRecord,
    OffsetCommitValue,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from coordinator.core.shard import Shard, ShardStatus

Records = list[tuple[bytes, bytes | None]]


def shard_in(status: ShardStatus) -> Shard:
    shard = Shard(0)
    shard.reset(status)
    return shard


def reference(status: ShardStatus, records: Records) -> tuple[Shard, list[tuple[bytes, str]]]:
    shard, skipped = shard_in(status), []
    for key, value in records:
        try:
            shard.replay(key, value)
        except ValueError as e:
            skipped.append((key, repr(e)))
    return shard, skipped


def bulk(status: ShardStatus, records: Records) -> tuple[Shard, list[tuple[bytes, str]]]:
    shard, skipped = shard_in(status), []
    replay_records(shard, records, lambda key, e: skipped.append((key, repr(e))))
    return shard, skipped


def summary(shard: Shard) -> dict:
    return {gid: (g.state, g.generation, g.protocol_type, g.protocol_name, g.leader_id, sorted(g.members))
            for gid, g in shard.groups.items()}


def assert_same(status: ShardStatus, records: Records) -> Shard:
    want, want_skipped = reference(status, records)
    got, got_skipped = bulk(status, records)
    assert got.offsets == want.offsets
    assert len(got.offsets) == len(want.offsets) and got.offsets.topic_count() == want.offsets.topic_count()
    assert summary(got) == summary(want)
    assert got_skipped == want_skipped
    return got


def commit(group: str, topic: str, partition: int, offset: int, metadata: str = "") -> tuple[bytes, bytes]:
    return encode_offset_key(group, topic, partition), encode_offset_value(
        OffsetCommitValue(offset, 3, metadata, 1_700_000_000_000))


# ---------------------------------------------------------------- stories
def test_consecutive_commits_of_one_group_land_in_its_offsets():
    records = [commit("g", "orders", p, 100 + p) for p in range(3)] + [commit("h", "orders", 0, 7)]
    shard = assert_same(ShardStatus.LOADING, records)
    assert shard.offsets.group_dict("g") == {("orders", p): OffsetCommitValue(100 + p, 3, "", 1_700_000_000_000)
                                  for p in range(3)}
    assert shard.offsets.group_dict("h") == {("orders", 0): OffsetCommitValue(7, 3, "", 1_700_000_000_000)}


def test_a_tombstone_that_empties_a_group_is_not_undone_by_the_cached_dict():
    key, _ = commit("g", "t", 0, 1)
    records = [commit("g", "t", 0, 1), (key, None), commit("g", "t", 1, 2)]
    shard = assert_same(ShardStatus.LOADING, records)
    assert shard.offsets.as_dict() == {"g": {("t", 1): OffsetCommitValue(2, 3, "", 1_700_000_000_000)}}


def test_a_longer_group_sharing_the_previous_groups_bytes_is_its_own_group():
    # the cached prefixes hold the length fields: "abc" (\x00\x03abc) does not start with "ab"'s
    # \x00\x01\x00\x02ab, nor topic "tt" with "t"'s \x00\x01t
    records = [commit("ab", "t", 0, 1), commit("abc", "t", 0, 2), commit("ab", "tt", 0, 3), commit("ab", "t", 0, 4)]
    shard = assert_same(ShardStatus.LOADING, records)
    assert set(shard.offsets.as_dict()) == {"ab", "abc"} and set(shard.offsets.group_dict("ab")) == {("t", 0), ("tt", 0)}


def test_a_key_of_another_version_starting_with_0xff_is_not_taken_for_a_cached_prefix():
    records = [(b"\xff\xff\x00\x01g\x00\x01t\x00\x00\x00\x00", commit("g", "t", 0, 1)[1]), commit("g", "t", 0, 2)]
    assert_same(ShardStatus.LOADING, records)


def test_undecodable_records_are_skipped_with_the_references_error_and_the_rest_apply():
    key, value = commit("g", "t", 0, 1)
    records = [
        (key, value[:-1]),  # truncated value
        (key + b"\x00", value),  # trailing key byte
        (key[:-1], value),  # truncated key
        (b"\x00\x01\x00\x02\xff\xfe\x00\x01t\x00\x00\x00\x00", value),  # group not UTF-8
        (b"\x00\x01\x80\x00", value),  # negative group length
        # lengths with the sign bit, followed by that many bytes (unsigned they would fit exactly)
        (b"\x00\x01\x80\x00" + b"g" * 0x8000 + b"\x00\x01t\x00\x00\x00\x00", value),
        (b"\x00\x01\x00\x01g\x80\x00" + b"t" * 0x8000 + b"\x00\x00\x00\x00", value),
        commit("g", "t", 1, 9),
    ]
    shard = assert_same(ShardStatus.LOADING, records)
    assert shard.offsets.as_dict() == {"g": {("t", 1): OffsetCommitValue(9, 3, "", 1_700_000_000_000)}}


def test_other_value_versions_metadata_and_group_records_go_through_replay():
    members = (MemberRecord("m-1", None, "c", "/127.0.0.1", 300, 100, b"s", b"a"),)
    records = [
        (encode_group_key("g"), encode_group_value(GroupMetadataValue("consumer", 5, "range", "m-1", 50, members))),
        commit("g", "t", 0, 1, metadata="note"),
        (encode_offset_key("g", "t", 1), encode_offset_value(OffsetCommitValue(4, -1, "", 10, 99))),  # v1
        commit("g", "t", 2, 3),
    ]
    shard = assert_same(ShardStatus.LOADING, records)
    assert shard.groups["g"].generation == 5 and shard.offsets.group_dict("g")[("t", 1)].expire_timestamp == 99


def test_an_active_shard_gets_a_group_for_each_new_group_id():
    shard = assert_same(ShardStatus.ACTIVE, [commit("simple", "t", 0, 1)])
    assert "simple" in shard.groups


# ---------------------------------------------------------------- generated sequences
GROUPS = st.sampled_from(["g", "gg", "g\u00e9", "group-long-" + "x" * 40])
TOPICS = st.sampled_from(["t", "tt", "orders"])


def mutated(data: bytes) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.just(data),
        st.integers(0, max(len(data) - 1, 0)).map(lambda n: data[:n]),  # truncated
        st.binary(min_size=1, max_size=3).map(lambda extra: data + extra),  # padded
        st.tuples(st.integers(0, max(len(data) - 1, 0)), st.integers(0, 255)).map(  # one byte changed
            lambda at: data[:at[0]] + bytes([at[1]]) + data[at[0] + 1:]),
    )


@st.composite
def offset_record(draw: st.DrawFn) -> tuple[bytes, bytes | None]:
    key = encode_offset_key(draw(GROUPS), draw(TOPICS), draw(st.integers(-2, 3)))
    if draw(st.booleans()):
        key = b"\x00\x00" + key[2:]  # key version 0
    value: bytes | None = draw(st.one_of(
        st.builds(lambda o, e, m, ts, x: encode_offset_value(OffsetCommitValue(o, e, m, ts, x)),
                  st.integers(-1, 2**40), st.integers(-1, 5), st.sampled_from(["", "", "", "m"]),
                  st.integers(0, 2**41), st.sampled_from([None, None, 7])),
        st.none(),
        # 24 bytes shaped as v3 without metadata, any version and metadata length
        st.builds(lambda v, o, n: struct.pack(">hqihq", v, o, 1, n, 5), st.integers(-1, 4), st.integers(0, 9),
                  st.sampled_from([0, 0, 1, -1])),
    ))
    if draw(st.integers(0, 9)) == 0:
        key = draw(mutated(key))
    if value is not None and draw(st.integers(0, 9)) == 0:
        value = draw(mutated(value))
    return key, value


@st.composite
def group_record(draw: st.DrawFn) -> tuple[bytes, bytes | None]:
    group = draw(GROUPS)
    if draw(st.booleans()):
        return encode_group_key(group), None
    return encode_group_key(group), encode_group_value(GroupMetadataValue("consumer", draw(st.integers(0, 9)),
                                                                          "range", None, 1))


RECORDS = st.lists(st.one_of(offset_record(), offset_record(), offset_record(), group_record(),
                             st.tuples(st.binary(max_size=12), st.one_of(st.none(), st.binary(max_size=30)))),
                   max_size=40)


@settings(max_examples=200, deadline=None)
@given(RECORDS, st.sampled_from([ShardStatus.LOADING, ShardStatus.ACTIVE]))
def test_any_sequence_leaves_the_shard_as_one_by_one_replay_does(records: Records, status: ShardStatus):
    assert_same(status, records)


@st.composite
def commit_batches(draw: st.DrawFn) -> Records:
    """What a load mostly sees: one group's commit of several partitions in a row (often in increasing order,
    sometimes not, sometimes with a partition twice), with tombstones and other groups between."""
    out: Records = []
    for _ in range(draw(st.integers(1, 8))):
        group = draw(GROUPS)
        parts = draw(st.lists(st.tuples(TOPICS, st.integers(-2, 5)), min_size=1, max_size=8))
        if draw(st.booleans()):
            parts.sort()
        for topic, partition in parts:
            if draw(st.integers(0, 15)) == 0:
                out.append((encode_offset_key(group, topic, partition), None))
            else:
                out.append(commit(group, topic, partition, draw(st.integers(0, 99))))
    return out


@settings(max_examples=200, deadline=None)
@given(commit_batches(), st.sampled_from([ShardStatus.LOADING, ShardStatus.FOLLOWING]))
def test_runs_of_one_groups_commits_land_as_one_by_one_replay_does(records: Records, status: ShardStatus):
    assert_same(status, records)
