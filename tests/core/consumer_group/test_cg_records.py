"""Records 3-8: hand-built bytes per Kafka's JSON layout (key: int16 type + int16-length strings; value:
int16 version 0 + flexible body), tolerant reads, and replay of each type with its ordering rules."""

from __future__ import annotations

import uuid

import pytest
from cg_harness import Driver

from coordinator.core.consumer_group import ConsumerGroups
from coordinator.core.consumer_group import records as R
from coordinator.core.consumer_group.model import MemberState, ReplayError
from coordinator.core.records import RecordError

T = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
TH = "00112233445566778899aabbccddeeff"


def h(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))


CASES = [
    ("metadata", R.Record(R.MetadataKey("g"), R.MetadataValue(10)),
     "0003 0001 67", "0000 0000000a 00"),
    ("partition metadata", R.Record(R.PartitionMetadataKey("g"),
                                    R.PartitionMetadataValue((R.TopicMetadata(T, "t", 3),))),
     "0004 0001 67", "0000 02" + TH + "02 74 00000003 01 00 00"),  # racks [] then the topic's tags
    ("member metadata", R.Record(R.MemberMetadataKey("g", "m"), R.MemberMetadataValue(
        None, "r", "c", "h", ("t",), None, 10000, "range")),
     "0005 0001 67 0001 6d",
     "0000 00 02 72 02 63 02 68 02 02 74 00 00002710 06 72616e6765 00"),
    ("target metadata", R.Record(R.TargetAssignmentMetadataKey("g"), R.TargetAssignmentMetadataValue(5)),
     "0006 0001 67", "0000 00000005 00"),
    ("target member", R.Record(R.TargetAssignmentMemberKey("g", "m"),
                               R.TargetAssignmentMemberValue({T: frozenset({0, 2})})),
     "0007 0001 67 0001 6d", "0000 02" + TH + "03 00000000 00000002 00 00"),
    ("current assignment", R.Record(R.CurrentAssignmentKey("g", "m"), R.CurrentAssignmentValue(
        5, 4, 1, {T: frozenset({1})}, {T: frozenset({2})})),
     "0008 0001 67 0001 6d",
     "0000 00000005 00000004 01 02" + TH + "02 00000001 00 02" + TH + "02 00000002 00 00"),
]


@pytest.mark.parametrize(("name", "record", "key_hex", "value_hex"), CASES, ids=[c[0] for c in CASES])
def test_records_encode_to_kafkas_bytes(name: str, record: R.Record, key_hex: str, value_hex: str) -> None:
    assert R.encode_record(record) == (h(key_hex), h(value_hex))
    assert R.decode_record(h(key_hex), h(value_hex)) == record
    assert R.decode_record(h(key_hex), None) == R.Record(record.key, None)  # tombstone


def test_unknown_tagged_fields_are_skipped() -> None:
    # MemberMetadata with a tag this version does not know (tag 1, 3 opaque bytes; tag 0 is ClassicMemberMetadata)
    value = h("0000 00 00 01 01 01 00 ffffffff 00 01 01 03 abcdef")
    got = R.decode_record(h("0005 0001 67 0001 6d"), value)
    assert got is not None and got.value == R.MemberMetadataValue()
    # PartitionMetadata with (deprecated) rack data
    value = h("0000 02" + TH + "02 74 00000001 02 00000000 02 02 72 00 00 00")
    got = R.decode_record(h("0004 0001 67"), value)
    assert got is not None and got.value == R.PartitionMetadataValue((R.TopicMetadata(T, "t", 1),))


def test_other_record_types_are_not_ours() -> None:
    assert R.decode_record(h("0002 0001 67"), None) is None  # classic GroupMetadata
    assert R.decode_record(h("0001 0001 67 0001 74 00000000"), None) is None


@pytest.mark.parametrize("value_hex", ["0001 0000000a 00", "0000 0000000a", "0000 0000000a 00 ff", "00"])
def test_bad_values_raise_record_error(value_hex: str) -> None:
    with pytest.raises(RecordError):
        R.decode_record(h("0003 0001 67"), h(value_hex))


def test_bad_keys_raise_record_error() -> None:
    for key in ("0003 0005 67", "0003 0001 67 00", "0005 0001 67"):
        with pytest.raises(RecordError):
            R.decode_record(h(key), None)


# ---------------------------------------------------------------- replay

def test_replay_group_metadata_records() -> None:
    cg = ConsumerGroups()
    for record, _, _, _ in [(c[1], 0, 0, 0) for c in CASES]:
        cg.replay(record)
    g = cg.groups["g"]
    assert (g.group_epoch, g.assignment_epoch) == (10, 5)
    assert g.subscription_metadata == {"t": R.TopicMetadata(T, "t", 3)}
    m = g.members["m"]
    assert (m.rack_id, m.client_id, m.subscribed_topic_names, m.rebalance_timeout_ms, m.server_assignor) == (
        "r", "c", ("t",), 10000, "range")
    assert (m.member_epoch, m.previous_member_epoch, m.state) == (5, 4, MemberState.UNREVOKED_PARTITIONS)
    assert g.targets == {"m": {T: frozenset({0, 2})}}
    assert g.partition_epochs == {T: {1: 5, 2: 5}}  # assigned and pending revocation are both held
    assert g.subscribed_topic_names == {"t": 1}


def test_tombstones_in_order_delete_the_group_and_out_of_order_is_an_error() -> None:
    cg = ConsumerGroups()
    for c in CASES:
        cg.replay(c[1])
    with pytest.raises(ReplayError):  # the member still has an epoch and a target
        cg.replay(R.Record(R.MemberMetadataKey("g", "m"), None))
    with pytest.raises(ReplayError):  # the group still has members
        cg.replay(R.Record(R.MetadataKey("g"), None))
    with pytest.raises(ReplayError):  # targets remain
        cg.replay(R.Record(R.TargetAssignmentMetadataKey("g"), None))
    for key in (R.CurrentAssignmentKey("g", "m"), R.TargetAssignmentMemberKey("g", "m"),
                R.TargetAssignmentMetadataKey("g"), R.MemberMetadataKey("g", "m"), R.PartitionMetadataKey("g"),
                R.MetadataKey("g")):
        cg.replay(R.Record(key, None))
    assert cg.groups == {}


def test_tombstones_for_unknown_groups_and_members_are_ignored() -> None:
    cg = ConsumerGroups()
    cg.replay(R.Record(R.MemberMetadataKey("nope", "m"), None))
    cg.replay(R.Record(R.MetadataKey("nope"), None))
    assert cg.groups == {}
    cg.replay(R.Record(R.MetadataKey("g"), R.MetadataValue(1)))
    cg.replay(R.Record(R.CurrentAssignmentKey("g", "ghost"), None))
    assert cg.groups["g"].members == {}


def test_a_partition_held_twice_is_a_replay_error() -> None:
    cg = ConsumerGroups()
    cg.replay(R.Record(R.CurrentAssignmentKey("g", "a"), R.CurrentAssignmentValue(1, 0, 0, {T: frozenset({0})})))
    with pytest.raises(ReplayError):
        cg.replay(R.Record(R.CurrentAssignmentKey("g", "b"), R.CurrentAssignmentValue(1, 0, 0, {T: frozenset({0})})))


def test_on_consumer_group_state_transition_on_loading() -> None:
    d = Driver()
    d.topic("foo", 4)
    d.join("a", ["foo"], rebalance_timeout_ms=7000)
    d.join("b", ["foo"])
    d.settle("a")  # a is revoking
    loaded = d.replayed_fresh()
    assert loaded.groups["g"].snapshot() == d.group().snapshot()
    assert loaded.groups["g"].state == d.group().state
    deadlines = {(x.kind, x.member_id): (x.at_ms, x.epoch) for x in loaded.loaded_deadlines(100)}
    assert deadlines == {("session", "a"): (45100, -1), ("session", "b"): (45100, -1),
                         ("rebalance", "a"): (7100, 1)}
