"""The transaction APIs' declarations (24-28, 61, 65, 66) carry real messages and read independent encodings.

The story:
- Every declared version of AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, WriteTxnMarkers, TxnOffsetCommit,
  DescribeProducers, DescribeTransactions and ListTransactions carries a realistic request and response
  through whole frames (size, header, body) and back; each sample is written for the newest version and
  older versions drop the fields they lack, so the version-specific fields are checked to come and go.
- A request per API, at every version kafka-python 3.0.12 supports inside our range, is encoded by
  kafka-python's JSON-driven classes (a whole frame) and decoded by ours to the same header and body.
- Bodies kafka-python cannot write (WriteTxnMarkers v0, dropped from Kafka 4's JSON), responses, and a few
  other classic and flexible requests are written byte by byte from Kafka 3.9's JSON
  (clients/src/main/resources/common/message/), pinning the codec independently of its own decoder.
- Defaults (-1 epochs and offsets, null group instance id) and the edges of the ranges: AddPartitionsToTxn
  v4-5 (the broker form), EndTxn v5 and the rest of TV2 are unsupported; FindCoordinator declares
  ``key_type`` (v1+) and ``coordinator_keys`` (v4+), which transactional clients use.
"""

from __future__ import annotations

import struct
import warnings
from typing import Any

import pytest

from protocol import codec
from protocol.errors import ErrorCode
from protocol.messages import ALL
from protocol.schema import Field

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # importing kafka-python loads every schema and warns
    from kafka.protocol import admin as kp_admin
    from kafka.protocol import producer as kp_producer

ADD_PARTITIONS, ADD_OFFSETS, END_TXN, WRITE_MARKERS, TXN_COMMIT = 24, 25, 26, 27, 28
DESCRIBE_PRODUCERS, DESCRIBE_TXNS, LIST_TXNS = 61, 65, 66
TRANSACTIONAL_ID_NOT_FOUND = 105  # Errors.java; not yet in protocol.errors

RANGES = {ADD_PARTITIONS: (0, 3), ADD_OFFSETS: (0, 4), END_TXN: (0, 4), WRITE_MARKERS: (0, 1),
          TXN_COMMIT: (0, 4), DESCRIBE_PRODUCERS: (0, 0), DESCRIBE_TXNS: (0, 0), LIST_TXNS: (0, 1)}
FLEXIBLE_FROM = {ADD_PARTITIONS: 3, ADD_OFFSETS: 3, END_TXN: 3, WRITE_MARKERS: 1, TXN_COMMIT: 3,
                 DESCRIBE_PRODUCERS: 0, DESCRIBE_TXNS: 0, LIST_TXNS: 0}

TXN_ID, PID, EPOCH = "payments-tx-1", 4001, 3

# One realistic request and response per API, written for its newest declared version.
SAMPLES: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {
    ADD_PARTITIONS: (
        {"v3_and_below_transactional_id": TXN_ID, "v3_and_below_producer_id": PID,
         "v3_and_below_producer_epoch": EPOCH,
         "v3_and_below_topics": [{"name": "payments", "partitions": [0, 2, 5]}, {"name": "audit", "partitions": [1]}]},
        {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
            {"name": "payments", "results_by_partition": [
                {"partition_index": 0, "partition_error_code": 0},
                {"partition_index": 2, "partition_error_code": ErrorCode.OPERATION_NOT_ATTEMPTED}]},
            {"name": "audit", "results_by_partition": [
                {"partition_index": 1, "partition_error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}]}]},
    ),
    ADD_OFFSETS: (
        {"transactional_id": TXN_ID, "producer_id": PID, "producer_epoch": EPOCH, "group_id": "billing"},
        {"throttle_time_ms": 5, "error_code": ErrorCode.CONCURRENT_TRANSACTIONS},
    ),
    END_TXN: (
        {"transactional_id": TXN_ID, "producer_id": PID, "producer_epoch": EPOCH, "committed": True},
        {"throttle_time_ms": 0, "error_code": ErrorCode.PRODUCER_FENCED},
    ),
    WRITE_MARKERS: (
        {"markers": [
            {"producer_id": PID, "producer_epoch": EPOCH, "transaction_result": True,
             "topics": [{"name": "payments", "partition_indexes": [0, 2]},
                        {"name": "__consumer_offsets", "partition_indexes": [17]}],
             "coordinator_epoch": 9},
            {"producer_id": PID + 1, "producer_epoch": 0, "transaction_result": False,
             "topics": [{"name": "audit", "partition_indexes": [1]}], "coordinator_epoch": 9}]},
        {"markers": [
            {"producer_id": PID, "topics": [
                {"name": "payments", "partitions": [{"partition_index": 0, "error_code": 0},
                                                    {"partition_index": 2, "error_code": 0}]},
                {"name": "__consumer_offsets", "partitions": [
                    {"partition_index": 17, "error_code": ErrorCode.TRANSACTION_COORDINATOR_FENCED}]}]},
            {"producer_id": PID + 1, "topics": [
                {"name": "audit", "partitions": [{"partition_index": 1, "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER}]}
            ]}]},
    ),
    TXN_COMMIT: (
        {"transactional_id": TXN_ID, "group_id": "billing", "producer_id": PID, "producer_epoch": EPOCH,
         "generation_id": 12, "member_id": "consumer-1-4c2e", "group_instance_id": None,
         "topics": [{"name": "payments", "partitions": [
             {"partition_index": 0, "committed_offset": 1042, "committed_leader_epoch": 4,
              "committed_metadata": None},
             {"partition_index": 2, "committed_offset": 7, "committed_leader_epoch": -1,
              "committed_metadata": "é-meta"}]}]},
        {"throttle_time_ms": 0, "topics": [{"name": "payments", "partitions": [
            {"partition_index": 0, "error_code": 0},
            {"partition_index": 2, "error_code": ErrorCode.ILLEGAL_GENERATION}]}]},
    ),
    DESCRIBE_PRODUCERS: (
        {"topics": [{"name": "payments", "partition_indexes": [0, 1]}]},
        {"throttle_time_ms": 0, "topics": [{"name": "payments", "partitions": [
            {"partition_index": 0, "error_code": 0, "error_message": None, "active_producers": [
                {"producer_id": PID, "producer_epoch": EPOCH, "last_sequence": 41, "last_timestamp": 1_732_500_000_000,
                 "coordinator_epoch": 9, "current_txn_start_offset": 1000},
                {"producer_id": 17, "producer_epoch": 0, "last_sequence": 4, "last_timestamp": 1_732_400_000_000,
                 "coordinator_epoch": -1, "current_txn_start_offset": -1}]},
            {"partition_index": 1, "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER,
             "error_message": "not the leader", "active_producers": []}]}]},
    ),
    DESCRIBE_TXNS: (
        {"transactional_ids": [TXN_ID, "gone"]},
        {"throttle_time_ms": 0, "transaction_states": [
            {"error_code": 0, "transactional_id": TXN_ID, "transaction_state": "Ongoing",
             "transaction_timeout_ms": 60000, "transaction_start_time_ms": 1_732_500_000_000,
             "producer_id": PID, "producer_epoch": EPOCH,
             "topics": [{"topic": "payments", "partitions": [0, 2]}]},
            {"error_code": TRANSACTIONAL_ID_NOT_FOUND, "transactional_id": "gone", "transaction_state": "",
             "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1,
             "producer_epoch": -1, "topics": []}]},
    ),
    LIST_TXNS: (
        {"state_filters": ["Ongoing", "Sleeping"], "producer_id_filters": [PID], "duration_filter": 30000},
        {"throttle_time_ms": 0, "error_code": 0, "unknown_state_filters": ["Sleeping"], "transaction_states": [
            {"transactional_id": TXN_ID, "producer_id": PID, "transaction_state": "Ongoing"}]},
    ),
}

CASES = [(key, v) for key in sorted(SAMPLES) for v in range(ALL[key].min_version, ALL[key].max_version + 1)]
IDS = [f"{ALL[k].name}-v{v}" for k, v in CASES]


def for_version(fields: tuple[Field, ...], value: dict[str, Any], version: int) -> dict[str, Any]:
    """``value`` without the fields (at any depth) that ``version`` does not carry."""
    out: dict[str, Any] = {}
    for fd in fields:
        if not fd.present_in(version):
            continue
        v = value[fd.name]
        if fd.type == "[]" and v is not None:
            v = [for_version(fd.fields, e, version) for e in v]
        out[fd.name] = v
    return out


def paths(value: Any, prefix: str = "") -> set[str]:
    """Every field path in a body, e.g. ``topics[].partitions[].committed_leader_epoch``."""
    out: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            out.add(prefix + k)
            if isinstance(v, list) and v and isinstance(v[0], dict):
                out |= paths(v[0], prefix + k + "[].")
    return out


# --------------------------------------------------------------------- declarations
def test_declared_ranges_and_flexible_versions() -> None:
    for key, (lo, hi) in RANGES.items():
        schema = ALL[key]
        assert (schema.min_version, schema.max_version) == (lo, hi), schema.name
        assert [v for v in range(lo, hi + 1) if schema.is_flexible(v)] == list(range(FLEXIBLE_FROM[key], hi + 1))


def test_the_samples_cover_exactly_the_transaction_apis() -> None:
    assert {ALL[k].name for k in SAMPLES} == {
        "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn", "WriteTxnMarkers", "TxnOffsetCommit",
        "DescribeProducers", "DescribeTransactions", "ListTransactions"}


def test_modules_are_listed_in_api_key_order() -> None:
    from protocol import messages

    keys = [m.SCHEMA.key for m in messages._MODULES]
    assert keys == sorted(keys) and len(keys) == len(set(keys))


def test_find_coordinator_declares_the_transaction_key_type_and_batched_keys() -> None:
    schema = ALL[10]
    request = {fd.name: fd for fd in schema.request}
    assert request["key_type"].type == "int8" and request["key_type"].versions == "1+"
    assert request["coordinator_keys"].type == "[]string" and request["coordinator_keys"].versions == "4+"
    assert request["key"].versions == "0-3"
    wire = codec.encode_body(10, 4, True, {"key_type": 1, "coordinator_keys": [TXN_ID]})
    assert codec.decode_body(10, 4, True, wire) == {"key_type": 1, "coordinator_keys": [TXN_ID]}
    assert codec.decode_body(10, 1, True, codec.encode_body(10, 1, True, {"key": TXN_ID, "key_type": 1})) == {
        "key": TXN_ID, "key_type": 1}


# --------------------------------------------------------------------- round trips, every version
@pytest.mark.parametrize(("key", "version"), CASES, ids=IDS)
def test_request_frames_round_trip(key: int, version: int) -> None:
    body = for_version(ALL[key].request, SAMPLES[key][0], version)
    frame = codec.encode_request(key, version, 4242, "producer-1", body)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    request = codec.decode_request(frame[4:])
    assert (request.header.api_key, request.header.api_version) == (key, version)
    assert (request.header.correlation_id, request.header.client_id) == (4242, "producer-1")
    assert request.body == body
    assert codec.decode_body(key, version, True, codec.encode_body(key, version, True, body)) == body


@pytest.mark.parametrize(("key", "version"), CASES, ids=IDS)
def test_response_frames_round_trip(key: int, version: int) -> None:
    body = for_version(ALL[key].response, SAMPLES[key][1], version)
    frame = codec.encode_response(key, version, -7, body)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    assert codec.decode_response(key, version, frame[4:]) == (-7, body)


def test_version_specific_fields_come_and_go() -> None:
    """The round trips above are not vacuous: the samples lose exactly the fields older versions lack."""
    def request_paths(key: int, version: int) -> set[str]:
        return paths(for_version(ALL[key].request, SAMPLES[key][0], version))

    leader_epoch = "topics[].partitions[].committed_leader_epoch"
    assert request_paths(TXN_COMMIT, 4) - request_paths(TXN_COMMIT, 2) == {
        "generation_id", "member_id", "group_instance_id"}
    assert request_paths(TXN_COMMIT, 2) - request_paths(TXN_COMMIT, 1) == {leader_epoch}
    assert request_paths(LIST_TXNS, 1) - request_paths(LIST_TXNS, 0) == {"duration_filter"}
    assert request_paths(ADD_PARTITIONS, 0) == request_paths(ADD_PARTITIONS, 3) == paths(SAMPLES[ADD_PARTITIONS][0])


# --------------------------------------------------------------------- kafka-python's encodings
def kafka_class(name: str) -> Any:
    for module in (kp_admin, kp_producer):
        cls = getattr(module, name, None)
        if cls is not None:
            return cls
    raise LookupError(name)


def to_kafka(struct_: Any, value: dict[str, Any], version: int) -> dict[str, Any]:
    """Keyword arguments for kafka-python's data class of ``struct_`` holding our dict ``value``."""
    kwargs: dict[str, Any] = {}
    for fd in struct_.fields.values():
        if not fd.for_version_q(version):
            continue
        v = value[fd.name]
        if fd.is_struct_array() and v is not None:
            v = [fd.data_class(**to_kafka(fd.array_of, e, version)) for e in v]
        kwargs[fd.name] = v
    assert set(kwargs) == set(value), f"ours {sorted(value)} vs kafka-python {sorted(kwargs)}"
    return kwargs


KP_CASES = [(key, v) for key, v in CASES
            if kafka_class(ALL[key].name + "Request").valid_versions[0] <= v
            <= kafka_class(ALL[key].name + "Request").valid_versions[1]]


def test_kafka_python_covers_every_declared_version_but_write_txn_markers_v0() -> None:
    assert sorted(set(CASES) - set(KP_CASES)) == [(WRITE_MARKERS, 0)]


@pytest.mark.parametrize(("key", "version"), KP_CASES, ids=[f"{ALL[k].name}-v{v}" for k, v in KP_CASES])
def test_kafka_python_request_frames_decode_with_ours(key: int, version: int) -> None:
    body = for_version(ALL[key].request, SAMPLES[key][0], version)
    cls = kafka_class(ALL[key].name + "Request")
    message = cls[version](**to_kafka(cls._struct, body, version))
    message.with_header(correlation_id=99, client_id="kafka-python")
    frame = bytes(message.encode(header=True, framed=True))

    request = codec.decode_request(frame[4:])
    assert (request.header.api_key, request.header.api_version) == (key, version)
    assert (request.header.correlation_id, request.header.client_id) == (99, "kafka-python")
    assert request.body == body
    assert codec.encode_request(key, version, 99, "kafka-python", body) == frame


# --------------------------------------------------------------------- bytes written by hand
def _s(text: str) -> str:
    """A classic string: int16 length, UTF-8 bytes (hex)."""
    raw = text.encode()
    return struct.pack(">h", len(raw)).hex() + raw.hex()


def _cs(text: str | None) -> str:
    """A compact string: uvarint length + 1 (0 = null), UTF-8 bytes (hex); lengths below 127 only."""
    if text is None:
        return "00"
    raw = text.encode()
    return bytes([len(raw) + 1]).hex() + raw.hex()


def roundtrip(key: int, version: int, is_request: bool, body: dict[str, Any], wire_hex: str) -> None:
    wire = bytes.fromhex(wire_hex.replace(" ", ""))
    assert codec.decode_body(key, version, is_request, wire) == body
    assert codec.encode_body(key, version, is_request, body) == wire


def test_write_txn_markers_v0_request_bytes() -> None:
    """Kafka 3.9: v0 is v1 without flexible encoding (classic strings and arrays, no tagged fields)."""
    body = for_version(ALL[WRITE_MARKERS].request, SAMPLES[WRITE_MARKERS][0], 0)
    roundtrip(WRITE_MARKERS, 0, True, body,
              "00000002"                                       # markers: 2
              "0000000000000fa1 0003 01"                       # producer 4001, epoch 3, COMMIT
              "00000002" + _s("payments") + "00000002 00000000 00000002"   # topic, partitions [0, 2]
              + _s("__consumer_offsets") + "00000001 00000011"             # topic, partitions [17]
              "00000009"                                       # coordinator_epoch 9
              "0000000000000fa2 0000 00"                       # producer 4002, epoch 0, ABORT
              "00000001" + _s("audit") + "00000001 00000001"
              "00000009")


def test_write_txn_markers_v0_response_bytes() -> None:
    body = {"markers": [{"producer_id": PID, "topics": [
        {"name": "payments", "partitions": [{"partition_index": 0, "error_code": 0},
                                            {"partition_index": 2, "error_code": 52}]}]}]}
    roundtrip(WRITE_MARKERS, 0, False, body,
              "00000001 0000000000000fa1"          # markers: 1, producer 4001
              "00000001" + _s("payments") +        # topics: 1
              "00000002 00000000 0000 00000002 0034")  # partition 0 ok, partition 2 TRANSACTION_COORDINATOR_FENCED


def test_write_txn_markers_v1_request_bytes_are_flexible() -> None:
    body = {"markers": [{"producer_id": PID, "producer_epoch": EPOCH, "transaction_result": False,
                         "topics": [{"name": "t", "partition_indexes": [3]}], "coordinator_epoch": 0}]}
    roundtrip(WRITE_MARKERS, 1, True, body,
              "02 0000000000000fa1 0003 00"        # compact array of 1; producer, epoch, ABORT
              "02" + _cs("t") + "02 00000003 00"   # topics [{t, [3]}], topic's tagged fields
              "00000000 00"                        # coordinator_epoch 0, marker's tagged fields
              "00")                                # top-level tagged fields


def test_add_partitions_to_txn_v3_request_bytes() -> None:
    body = {"v3_and_below_transactional_id": TXN_ID, "v3_and_below_producer_id": PID,
            "v3_and_below_producer_epoch": EPOCH, "v3_and_below_topics": [{"name": "payments", "partitions": [0, 5]}]}
    roundtrip(ADD_PARTITIONS, 3, True, body,
              _cs(TXN_ID) + "0000000000000fa1 0003"
              "02" + _cs("payments") + "03 00000000 00000005 00"
              "00")


def test_add_partitions_to_txn_v0_response_bytes() -> None:
    body = {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
        {"name": "payments", "results_by_partition": [{"partition_index": 5, "partition_error_code": 51}]}]}
    roundtrip(ADD_PARTITIONS, 0, False, body,
              "00000000 00000001" + _s("payments") + "00000001 00000005 0033")


def test_end_txn_v0_and_v3_request_bytes() -> None:
    body = {"transactional_id": TXN_ID, "producer_id": PID, "producer_epoch": EPOCH, "committed": False}
    roundtrip(END_TXN, 0, True, body, _s(TXN_ID) + "0000000000000fa1 0003 00")
    roundtrip(END_TXN, 3, True, {**body, "committed": True}, _cs(TXN_ID) + "0000000000000fa1 0003 01 00")


def test_txn_offset_commit_v3_request_bytes() -> None:
    body = {"transactional_id": TXN_ID, "group_id": "g", "producer_id": PID, "producer_epoch": EPOCH,
            "generation_id": 12, "member_id": "m", "group_instance_id": None,
            "topics": [{"name": "payments", "partitions": [
                {"partition_index": 0, "committed_offset": 1042, "committed_leader_epoch": -1,
                 "committed_metadata": None}]}]}
    roundtrip(TXN_COMMIT, 3, True, body,
              _cs(TXN_ID) + _cs("g") + "0000000000000fa1 0003"
              "0000000c" + _cs("m") + "00"                          # generation 12, member "m", instance null
              "02" + _cs("payments") +                              # topics: 1
              "02 00000000 0000000000000412 ffffffff 00 00"         # partition 0, offset 1042, epoch -1, null, tags
              "00"                                                  # topic's tagged fields
              "00")


def test_list_transactions_v1_request_bytes() -> None:
    body = {"state_filters": ["Ongoing"], "producer_id_filters": [], "duration_filter": 30000}
    roundtrip(LIST_TXNS, 1, True, body, "02" + _cs("Ongoing") + "01 0000000000007530 00")


def test_describe_producers_v0_response_bytes() -> None:
    """The producer's epoch is an int32 here (an int16 everywhere else)."""
    body = {"throttle_time_ms": 0, "topics": [{"name": "t", "partitions": [
        {"partition_index": 1, "error_code": 0, "error_message": None, "active_producers": [
            {"producer_id": PID, "producer_epoch": EPOCH, "last_sequence": -1, "last_timestamp": -1,
             "coordinator_epoch": 9, "current_txn_start_offset": 1000}]}]}]}
    roundtrip(DESCRIBE_PRODUCERS, 0, False, body,
              "00000000 02" + _cs("t") +                     # throttle 0, topics: 1
              "02 00000001 0000 00"                          # partitions: 1; index 1, no error, message null
              "02 0000000000000fa1 00000003"                 # active_producers: 1; id 4001, epoch 3 (int32)
              "ffffffff ffffffffffffffff 00000009"           # last_sequence -1, last_timestamp -1, coord epoch 9
              "00000000000003e8 00"                          # current_txn_start_offset 1000, producer's tags
              "00 00 00")                                    # partition's, topic's, top-level tagged fields


def test_describe_transactions_v0_response_bytes() -> None:
    body = {"throttle_time_ms": 0, "transaction_states": [
        {"error_code": 0, "transactional_id": "x", "transaction_state": "Ongoing", "transaction_timeout_ms": 60000,
         "transaction_start_time_ms": 1000, "producer_id": PID, "producer_epoch": EPOCH,
         "topics": [{"topic": "t", "partitions": [0]}]}]}
    roundtrip(DESCRIBE_TXNS, 0, False, body,
              "00000000 02 0000" + _cs("x") + _cs("Ongoing") +  # throttle, states: 1, error 0, id, state name
              "0000ea60 00000000000003e8 0000000000000fa1 0003"  # timeout 60000, start 1000, producer 4001, epoch 3
              "02" + _cs("t") + "02 00000000 00"                 # topics [{t, [0]}], topic's tags
              "00 00")                                           # state's, top-level tagged fields


def test_describe_transactions_v0_request_bytes() -> None:
    roundtrip(DESCRIBE_TXNS, 0, True, {"transactional_ids": [TXN_ID]}, "02" + _cs(TXN_ID) + "00")


# --------------------------------------------------------------------- defaults and range edges
def test_missing_fields_encode_kafkas_defaults() -> None:
    commit = codec.decode_body(TXN_COMMIT, 3, True, codec.encode_body(TXN_COMMIT, 3, True, {
        "transactional_id": TXN_ID, "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}))
    assert (commit["generation_id"], commit["member_id"], commit["group_instance_id"]) == (-1, "", None)
    assert commit["topics"][0]["partitions"][0]["committed_leader_epoch"] == -1
    assert codec.decode_body(LIST_TXNS, 1, True, codec.encode_body(LIST_TXNS, 1, True, {}))["duration_filter"] == -1
    producers = codec.decode_body(DESCRIBE_PRODUCERS, 0, False, codec.encode_body(DESCRIBE_PRODUCERS, 0, False, {
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "active_producers": [{"producer_id": 1}]}]}]}))
    partition = producers["topics"][0]["partitions"][0]
    assert partition["error_message"] is None
    producer = partition["active_producers"][0]
    assert (producer["last_sequence"], producer["last_timestamp"], producer["current_txn_start_offset"]) == (
        -1, -1, -1)


@pytest.mark.parametrize(("key", "version"), [(ADD_PARTITIONS, 4), (ADD_PARTITIONS, 5), (ADD_OFFSETS, 5),
                                              (END_TXN, 5), (WRITE_MARKERS, 2), (TXN_COMMIT, 5),
                                              (DESCRIBE_PRODUCERS, 1), (DESCRIBE_TXNS, 1), (LIST_TXNS, 2)])
def test_versions_outside_our_range_are_unsupported(key: int, version: int) -> None:
    frame = codec.encode_request(key, 0, 5, "c", {})  # a valid v0 frame, then the version patched
    payload = bytearray(frame[4:])
    payload[2:4] = struct.pack(">h", version)
    with pytest.raises(codec.UnsupportedVersion) as raised:
        codec.decode_request(bytes(payload))
    assert (raised.value.api_key, raised.value.api_version, raised.value.correlation_id) == (key, version, 5)
