"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69) encode to the bytes Kafka's JSON defines.

The story: kafka-python ships neither schema, so each case below is a byte string built by hand from
Kafka's message JSON (clients/src/main/resources/common/message/ConsumerGroup{Heartbeat,Describe}*.json,
4.x): compact strings/arrays (uvarint length + 1, 0 = null), uuid as 16 raw bytes, int8 -1 / 1 before a
nullable struct, an empty tagged-field section (one 0 byte) after every struct. Our codec must decode
each to the given body and encode the body back to exactly those bytes. Then: null and empty are different
on the wire, v1-only fields do not exist in v0, and declaring the schemas does not advertise the APIs.
"""

from __future__ import annotations

import uuid

import pytest

from protocol import codec
from protocol.messages import ALL

HB, DESCRIBE = 68, 69
TOPIC = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
TOPIC_HEX = "00112233445566778899aabbccddeeff"


def roundtrip(key: int, version: int, is_request: bool, body: dict, wire_hex: str) -> None:
    wire = bytes.fromhex(wire_hex.replace(" ", ""))
    assert codec.decode_body(key, version, is_request, wire) == body
    assert codec.encode_body(key, version, is_request, body) == wire


# ---------------------------------------------------------------- ConsumerGroupHeartbeat

def test_heartbeat_request_v0_join() -> None:
    body = {"group_id": "g", "member_id": "", "member_epoch": 0, "instance_id": None, "rack_id": "r1",
            "rebalance_timeout_ms": 300000, "subscribed_topic_names": ["t"], "server_assignor": None,
            "topic_partitions": []}
    roundtrip(HB, 0, True, body,
              "02 67"             # group_id "g"
              "01"                # member_id ""
              "00000000"          # member_epoch 0
              "00"                # instance_id null
              "03 7231"           # rack_id "r1"
              "000493e0"          # rebalance_timeout_ms 300000
              "02 02 74"          # subscribed_topic_names ["t"]
              "00"                # server_assignor null (v0 has no regex before it)
              "01"                # topic_partitions [] (empty, not null)
              "00")               # tagged fields


def test_heartbeat_request_v1_with_regex_and_owned_partitions() -> None:
    body = {"group_id": "g", "member_id": "m", "member_epoch": 5, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": -1, "subscribed_topic_names": None, "subscribed_topic_regex": "^t.*",
            "server_assignor": "uniform",
            "topic_partitions": [{"topic_id": TOPIC, "partitions": [0, 2]}]}
    roundtrip(HB, 1, True, body,
              "02 67 02 6d 00000005 00 00"       # group, member "m", epoch 5, instance null, rack null
              "ffffffff"                         # rebalance_timeout_ms -1 (unchanged)
              "00"                               # subscribed_topic_names null (unchanged)
              "05 5e742e2a"                      # subscribed_topic_regex "^t.*" (v1+)
              "08 756e69666f726d"                # server_assignor "uniform"
              "02" + TOPIC_HEX + "03 00000000 00000002 00"  # one owned topic: partitions [0, 2]
              "00")


def test_heartbeat_response_v0_without_assignment() -> None:
    body = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": "m",
            "member_epoch": 1, "heartbeat_interval_ms": 5000, "assignment": None}
    roundtrip(HB, 0, False, body,
              "00000000 0000 00"   # throttle, error 0, error_message null
              "02 6d"              # member_id "m"
              "00000001 00001388"  # member_epoch 1, heartbeat_interval_ms 5000
              "ff"                 # assignment null: int8 -1
              "00")


def test_heartbeat_response_v1_with_assignment() -> None:
    body = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": "m",
            "member_epoch": 2, "heartbeat_interval_ms": 5000,
            "assignment": {"topic_partitions": [{"topic_id": TOPIC, "partitions": [1]}]}}
    roundtrip(HB, 1, False, body,
              "00000000 0000 00 02 6d 00000002 00001388"
              "01"                                # assignment present: int8 1
              "02" + TOPIC_HEX + "02 00000001 00"  # topic_partitions: one topic, [1]
              "00"                                # assignment's tagged fields
              "00")


def test_heartbeat_error_response_and_empty_assignment() -> None:
    body = {"throttle_time_ms": 0, "error_code": 110, "error_message": "fenced", "member_id": None,
            "member_epoch": 0, "heartbeat_interval_ms": 0, "assignment": {"topic_partitions": []}}
    roundtrip(HB, 0, False, body,
              "00000000 006e 07 66656e636564"  # error 110 FENCED_MEMBER_EPOCH, message "fenced"
              "00"                             # member_id null
              "00000000 00000000"
              "01 01 00"                       # an assignment with no partitions is not null
              "00")


def test_null_and_empty_differ_on_the_wire() -> None:
    base = {"group_id": "g", "member_id": "m", "member_epoch": 1, "rebalance_timeout_ms": -1}
    null = codec.encode_body(HB, 0, True, {**base, "subscribed_topic_names": None, "topic_partitions": None})
    empty = codec.encode_body(HB, 0, True, {**base, "subscribed_topic_names": [], "topic_partitions": []})
    assert null != empty
    assert codec.decode_body(HB, 0, True, null)["topic_partitions"] is None
    assert codec.decode_body(HB, 0, True, empty)["topic_partitions"] == []
    assert codec.decode_body(HB, 0, True, null)["subscribed_topic_names"] is None
    assert codec.decode_body(HB, 0, True, empty)["subscribed_topic_names"] == []


def test_regex_exists_only_from_v1() -> None:
    body = {"group_id": "g", "member_id": "m", "member_epoch": 1, "subscribed_topic_regex": "x.*"}
    v0 = codec.decode_body(HB, 0, True, codec.encode_body(HB, 0, True, body))
    v1 = codec.decode_body(HB, 1, True, codec.encode_body(HB, 1, True, body))
    assert "subscribed_topic_regex" not in v0
    assert v1["subscribed_topic_regex"] == "x.*"
    # defaults Kafka declares: -1 for the rebalance timeout, null for the nullable fields
    assert v0["rebalance_timeout_ms"] == -1 and v0["instance_id"] is None and v0["topic_partitions"] is None


def test_truncated_nullable_struct_is_a_protocol_error() -> None:
    from protocol.errors import ProtocolError

    wire = codec.encode_body(HB, 0, False, {"member_id": "m", "assignment": {"topic_partitions": []}})
    with pytest.raises(ProtocolError):
        codec.decode_response(HB, 0, (8).to_bytes(4, "big") + b"\x00" + wire[:-3])


# ---------------------------------------------------------------- ConsumerGroupDescribe

@pytest.mark.parametrize("version", [0, 1])
def test_describe_request(version: int) -> None:
    roundtrip(DESCRIBE, version, True, {"group_ids": ["g"], "include_authorized_operations": True},
              "02 02 67"  # group_ids ["g"]
              "01"        # include_authorized_operations true
              "00")


def _described(version: int) -> dict:
    member = {"member_id": "m", "instance_id": None, "rack_id": None, "member_epoch": 3, "client_id": "c",
              "client_host": "/127.0.0.1", "subscribed_topic_names": ["t"], "subscribed_topic_regex": None,
              "assignment": {"topic_partitions": [{"topic_id": TOPIC, "topic_name": "t", "partitions": [0]}]},
              "target_assignment": {"topic_partitions": []}}
    if version >= 1:
        member["member_type"] = 1
    group = {"error_code": 0, "error_message": None, "group_id": "g", "group_state": "Stable",
             "group_epoch": 3, "assignment_epoch": 3, "assignor_name": "uniform", "members": [member],
             "authorized_operations": -2147483648}
    return {"throttle_time_ms": 0, "groups": [group]}


MEMBER_HEX = (
    "02 6d 00 00 00000003"        # member_id "m", instance null, rack null, member_epoch 3
    "02 63 0b 2f3132372e302e302e31"  # client_id "c", client_host "/127.0.0.1"
    "02 02 74 00"                 # subscribed_topic_names ["t"], regex null
    "02" + TOPIC_HEX + "02 74 02 00000000 00 00"  # assignment: t (id, name) [0]; struct tags
    "01 00"                       # target_assignment: no topics; struct tags
)


def test_describe_response_v0() -> None:
    roundtrip(DESCRIBE, 0, False, _described(0),
              "00000000 02"                       # throttle, one group
              "0000 00 02 67 07 537461626c65"     # error 0, message null, "g", "Stable"
              "00000003 00000003 08 756e69666f726d"  # epochs 3/3, assignor "uniform"
              "02" + MEMBER_HEX + "00"            # one member (no member_type in v0), its tags
              "80000000 00"                       # authorized_operations INT32_MIN, group tags
              "00")


def test_describe_response_v1_has_member_type() -> None:
    roundtrip(DESCRIBE, 1, False, _described(1),
              "00000000 02 0000 00 02 67 07 537461626c65 00000003 00000003 08 756e69666f726d"
              "02" + MEMBER_HEX + "01 00"         # member_type 1 (consumer), member tags
              "80000000 00 00")


def test_member_type_defaults_to_unknown_and_is_absent_in_v0() -> None:
    body = _described(1)
    del body["groups"][0]["members"][0]["member_type"]
    v1 = codec.decode_body(DESCRIBE, 1, False, codec.encode_body(DESCRIBE, 1, False, body))
    assert v1["groups"][0]["members"][0]["member_type"] == -1
    v0 = codec.decode_body(DESCRIBE, 0, False, codec.encode_body(DESCRIBE, 0, False, _described(1)))
    assert "member_type" not in v0["groups"][0]["members"][0]


def test_declared_ranges_and_flexible_versions() -> None:
    for key in (HB, DESCRIBE):
        schema = ALL[key]
        assert (schema.min_version, schema.max_version) == (0, 1)
        assert schema.is_flexible(0) and schema.is_flexible(1)


# ---------------------------------------------------------------- not advertised

def test_declaring_the_schemas_does_not_advertise_the_apis() -> None:
    """ApiVersions lists the keys of the broker's handler table that ALL declares; a schema alone is not a
    handler. The broker's table is its constructor's plus SUPPORTED_APIS and the services' keys at start."""
    from coordinator.config import Config
    from coordinator.core.coordinator import SUPPORTED_APIS
    from coordinator.metrics import Metrics
    from coordinator.runtime.broker import Broker

    assert HB not in SUPPORTED_APIS and DESCRIBE not in SUPPORTED_APIS
    broker = Broker(Config({}), Metrics())
    for key in SUPPORTED_APIS:  # what start() registers for the group service
        broker.handlers.setdefault(key, broker.handle_api_versions)
    advertised = {k["api_key"] for k in broker.api_versions_body()["api_keys"]}
    assert 18 in advertised and 12 in advertised
    assert HB not in advertised and DESCRIBE not in advertised
    # and the check can fail: a handler for 68 would advertise it
    broker.handlers[HB] = broker.handle_api_versions
    assert HB in {k["api_key"] for k in broker.api_versions_body()["api_keys"]}
