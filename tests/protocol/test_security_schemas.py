"""The security APIs' declarations (issue #34) carry real messages, byte for byte, and share Kafka's codes.

The story:
- Every version of SaslHandshake, SaslAuthenticate, Describe/Create/DeleteAcls and Describe/Alter-
  UserScramCredentials carries a realistic request and response through whole frames (size, header, body):
  ``encode_request`` -> ``decode_request`` and ``encode_response`` -> ``decode_response`` give the body back.
- A few frames are written out by hand from Kafka's protocol guide (classic and flexible, request and
  response header versions), so the codec's bytes are pinned independently of its own decoder.
- The ACL pattern type is absent from v0 and defaults to LITERAL (3) from v1; null and empty user lists
  differ on the wire.
- ``protocol.acl_types`` agrees with kafka-python's copies of Kafka's enums, and ``protocol.errors`` has the
  security error codes.
"""

from __future__ import annotations

import struct
import warnings
from typing import Any

import pytest

from protocol import codec
from protocol.acl_types import AclOperation, AclPermissionType, PatternType, ResourceType, ScramMechanismCode
from protocol.errors import ErrorCode
from protocol.messages import ALL
from protocol.schema import Field

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DESCRIBE_SCRAM, ALTER_SCRAM = 50, 51

_ACL = {"principal": "User:alice", "host": "*", "operation": AclOperation.READ,
        "permission_type": AclPermissionType.ALLOW}
_FILTER = {"resource_type_filter": ResourceType.TOPIC, "resource_name_filter": "payments",
           "pattern_type_filter": PatternType.MATCH, "principal_filter": None, "host_filter": "*",
           "operation": AclOperation.ANY, "permission_type": AclPermissionType.ANY}

# One realistic request and response per API, written for its newest version; older versions drop the
# fields they lack (`for_version`).
SAMPLES: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {
    SASL_HANDSHAKE: (
        {"mechanism": "SCRAM-SHA-256"},
        {"error_code": 0, "mechanisms": ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]},
    ),
    SASL_AUTHENTICATE: (
        {"auth_bytes": b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL"},
        {"error_code": 0, "error_message": None, "auth_bytes": b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
         "session_lifetime_ms": 3_600_000},
    ),
    DESCRIBE_ACLS: (
        dict(_FILTER),
        {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": [
            {"resource_type": ResourceType.TOPIC, "resource_name": "payments", "pattern_type": PatternType.LITERAL,
             "acls": [dict(_ACL), {**_ACL, "principal": "User:bob", "host": "10.0.0.7",
                                   "permission_type": AclPermissionType.DENY}]},
            {"resource_type": ResourceType.TOPIC, "resource_name": "pay", "pattern_type": PatternType.PREFIXED,
             "acls": [{**_ACL, "operation": AclOperation.WRITE}]},
        ]},
    ),
    CREATE_ACLS: (
        {"creations": [
            {"resource_type": ResourceType.GROUP, "resource_name": "billing", "resource_pattern_type":
             PatternType.LITERAL, **_ACL},
            {"resource_type": ResourceType.CLUSTER, "resource_name": "kafka-cluster", "resource_pattern_type":
             PatternType.LITERAL, **_ACL, "operation": AclOperation.IDEMPOTENT_WRITE},
        ]},
        {"throttle_time_ms": 0, "results": [
            {"error_code": 0, "error_message": None},
            {"error_code": ErrorCode.INVALID_REQUEST, "error_message": "Invalid operation ANY"},
        ]},
    ),
    DELETE_ACLS: (
        {"filters": [dict(_FILTER), {**_FILTER, "resource_name_filter": None, "host_filter": None}]},
        {"throttle_time_ms": 0, "filter_results": [
            {"error_code": 0, "error_message": None, "matching_acls": [
                {"error_code": 0, "error_message": None, "resource_type": ResourceType.TOPIC,
                 "resource_name": "payments", "pattern_type": PatternType.LITERAL, **_ACL}]},
            {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": "No Authorizer is configured.",
             "matching_acls": []},
        ]},
    ),
    DESCRIBE_SCRAM: (
        {"users": [{"name": "alice"}, {"name": "nobody"}]},
        {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": [
            {"user": "alice", "error_code": 0, "error_message": None, "credential_infos": [
                {"mechanism": ScramMechanismCode.SCRAM_SHA_256, "iterations": 8192},
                {"mechanism": ScramMechanismCode.SCRAM_SHA_512, "iterations": 4096}]},
            {"user": "nobody", "error_code": ErrorCode.RESOURCE_NOT_FOUND,
             "error_message": "Attempt to describe nonexistent SCRAM credentials for user nobody",
             "credential_infos": []},
        ]},
    ),
    ALTER_SCRAM: (
        {"deletions": [{"name": "bob", "mechanism": ScramMechanismCode.SCRAM_SHA_512}],
         "upsertions": [{"name": "alice", "mechanism": ScramMechanismCode.SCRAM_SHA_256, "iterations": 8192,
                         "salt": bytes(range(16)), "salted_password": bytes(range(32, 64))}]},
        {"throttle_time_ms": 0, "results": [
            {"user": "alice", "error_code": 0, "error_message": None},
            {"user": "bob", "error_code": ErrorCode.RESOURCE_NOT_FOUND,
             "error_message": "Attempt to delete a user credential that does not exist"},
        ]},
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
    assert set(out) <= set(value)
    return out


def test_the_samples_cover_exactly_the_security_apis() -> None:
    assert {ALL[k].name for k in SAMPLES} == {
        "SaslHandshake", "SaslAuthenticate", "DescribeAcls", "CreateAcls", "DeleteAcls",
        "DescribeUserScramCredentials", "AlterUserScramCredentials"}


@pytest.mark.parametrize(("key", "version"), CASES, ids=IDS)
def test_request_frames_round_trip(key: int, version: int) -> None:
    body = for_version(ALL[key].request, SAMPLES[key][0], version)
    frame = codec.encode_request(key, version, 4242, "admin-1", body)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    request = codec.decode_request(frame[4:])
    assert (request.header.api_key, request.header.api_version) == (key, version)
    assert (request.header.correlation_id, request.header.client_id) == (4242, "admin-1")
    assert request.body == body


@pytest.mark.parametrize(("key", "version"), CASES, ids=IDS)
def test_response_frames_round_trip(key: int, version: int) -> None:
    body = for_version(ALL[key].response, SAMPLES[key][1], version)
    frame = codec.encode_response(key, version, -7, body)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    assert codec.decode_response(key, version, frame[4:]) == (-7, body)


# --------------------------------------------------------------------- bytes written by hand
def _request_frame(key: int, version: int, corr: int, client_id: bytes, flexible: bool, body: bytes) -> bytes:
    header = struct.pack(">hhih", key, version, corr, len(client_id)) + client_id + (b"\x00" if flexible else b"")
    return struct.pack(">i", len(header) + len(body)) + header + body


def _response_frame(corr: int, flexible: bool, body: bytes) -> bytes:
    header = struct.pack(">i", corr) + (b"\x00" if flexible else b"")
    return struct.pack(">i", len(header) + len(body)) + header + body


def test_sasl_handshake_v1_bytes() -> None:
    request = _request_frame(17, 1, 1, b"c", False, b"\x00\x05PLAIN")
    assert codec.encode_request(17, 1, 1, "c", {"mechanism": "PLAIN"}) == request
    assert codec.decode_request(request[4:]).body == {"mechanism": "PLAIN"}

    body = b"\x00\x21" + b"\x00\x00\x00\x02" + b"\x00\x05PLAIN" + b"\x00\x0dSCRAM-SHA-512"
    response = _response_frame(1, False, body)
    value = {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": ["PLAIN", "SCRAM-SHA-512"]}
    assert codec.encode_response(17, 1, 1, value) == response
    assert codec.decode_response(17, 1, response[4:]) == (1, value)


def test_sasl_authenticate_classic_and_flexible_bytes() -> None:
    token = b"\x00alice\x00secret"
    # v1: request header v1, int32-length bytes; response header v0, int16-length nullable string
    assert codec.encode_request(36, 1, 2, "c", {"auth_bytes": token}) == _request_frame(
        36, 1, 2, b"c", False, struct.pack(">i", len(token)) + token)
    v1 = {"error_code": 58, "error_message": "Authentication failed", "auth_bytes": b"",
          "session_lifetime_ms": 0}
    assert codec.encode_response(36, 1, 2, v1) == _response_frame(
        2, False, b"\x00\x3a\x00\x15Authentication failed\x00\x00\x00\x00" + bytes(8))
    # v2: request header v2 (tagged fields), compact bytes (length + 1); response header v1
    assert codec.encode_request(36, 2, 3, "c", {"auth_bytes": token}) == _request_frame(
        36, 2, 3, b"c", True, bytes([len(token) + 1]) + token + b"\x00")
    v2 = {"error_code": 0, "error_message": None, "auth_bytes": b"v=ok", "session_lifetime_ms": 60_000}
    frame = codec.encode_response(36, 2, 3, v2)
    assert frame == _response_frame(3, True, b"\x00\x00" + b"\x00" + b"\x05v=ok" + struct.pack(">q", 60_000) + b"\x00")
    assert codec.decode_response(36, 2, frame[4:]) == (3, v2)


# --------------------------------------------------------------------- version-dependent fields
def test_acl_pattern_type_is_absent_in_v0_and_literal_by_default_from_v1() -> None:
    v0 = {k: v for k, v in _FILTER.items() if k != "pattern_type_filter"}
    assert codec.decode_body(DESCRIBE_ACLS, 0, True, codec.encode_body(DESCRIBE_ACLS, 0, True, v0)) == v0
    wire_v1 = codec.encode_body(DESCRIBE_ACLS, 1, True, v0)  # missing -> Kafka's default
    assert codec.decode_body(DESCRIBE_ACLS, 1, True, wire_v1)["pattern_type_filter"] == PatternType.LITERAL
    assert len(wire_v1) == len(codec.encode_body(DESCRIBE_ACLS, 0, True, v0)) + 1

    creation = {"resource_type": 2, "resource_name": "t", "principal": "User:a", "host": "*",
                "operation": 3, "permission_type": 3}
    decoded = codec.decode_body(CREATE_ACLS, 3, True, codec.encode_body(CREATE_ACLS, 3, True,
                                                                         {"creations": [creation]}))
    assert decoded["creations"][0]["resource_pattern_type"] == PatternType.LITERAL

    resource = {"resource_type": 2, "resource_name": "t", "acls": []}
    described = codec.decode_body(DESCRIBE_ACLS, 2, False, codec.encode_body(DESCRIBE_ACLS, 2, False,
                                                                              {"resources": [resource]}))
    assert described["resources"][0]["pattern_type"] == PatternType.LITERAL

    matching = {"error_code": 0, "error_message": None, "resource_type": 2, "resource_name": "t", **_ACL}
    result = {"error_code": 0, "error_message": None, "matching_acls": [matching]}
    deleted = codec.decode_body(DELETE_ACLS, 2, False, codec.encode_body(DELETE_ACLS, 2, False,
                                                                          {"filter_results": [result]}))
    assert deleted["filter_results"][0]["matching_acls"][0]["pattern_type"] == PatternType.LITERAL


def test_sasl_authenticate_session_lifetime_is_v1_plus() -> None:
    body = {"error_code": 0, "error_message": None, "auth_bytes": b"x"}
    assert codec.decode_body(36, 0, False, codec.encode_body(36, 0, False, body)) == body
    assert codec.decode_body(36, 1, False, codec.encode_body(36, 1, False, body))["session_lifetime_ms"] == 0


def test_describe_scram_null_and_empty_users_differ_on_the_wire() -> None:
    null, empty = (codec.encode_body(DESCRIBE_SCRAM, 0, True, {"users": u}) for u in (None, []))
    assert (null, empty) == (b"\x00\x00", b"\x01\x00")  # compact array: 0 = null, 1 = empty; tagged fields
    assert codec.decode_body(DESCRIBE_SCRAM, 0, True, null) == {"users": None}
    assert codec.decode_body(DESCRIBE_SCRAM, 0, True, empty) == {"users": []}


# --------------------------------------------------------------------- shared codes
def test_acl_enums_agree_with_kafka_python() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # importing kafka-python loads every schema and warns
        from kafka.admin._users import ScramMechanism
        from kafka.protocol.admin import (
            ACLOperation,
            ACLPermissionType,
            ACLResourcePatternType,
            ACLResourceType,
        )

    def members(enum: Any) -> dict[str, int]:
        return {m.name: int(m.value) for m in enum}

    # kafka-python's ACLResourceType stops at DELEGATION_TOKEN; Kafka added USER (7) with KIP-373
    assert members(ResourceType) == {**members(ACLResourceType), "USER": 7}
    assert members(PatternType) == members(ACLResourcePatternType)
    assert members(AclOperation) == members(ACLOperation)
    assert members(AclPermissionType) == members(ACLPermissionType)
    assert members(ScramMechanismCode) == members(ScramMechanism)
    assert [m.mechanism_name for m in ScramMechanismCode] == ["UNKNOWN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def test_security_error_codes() -> None:
    assert {name: ErrorCode[name].value for name in (
        "TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
        "UNSUPPORTED_SASL_MECHANISM", "ILLEGAL_SASL_STATE", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "SECURITY_DISABLED", "SASL_AUTHENTICATION_FAILED", "LISTENER_NOT_FOUND", "RESOURCE_NOT_FOUND",
        "DUPLICATE_RESOURCE", "UNACCEPTABLE_CREDENTIAL")} == {
        "TOPIC_AUTHORIZATION_FAILED": 29, "GROUP_AUTHORIZATION_FAILED": 30, "CLUSTER_AUTHORIZATION_FAILED": 31,
        "UNSUPPORTED_SASL_MECHANISM": 33, "ILLEGAL_SASL_STATE": 34, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": 53,
        "SECURITY_DISABLED": 54, "SASL_AUTHENTICATION_FAILED": 58, "LISTENER_NOT_FOUND": 72,
        "RESOURCE_NOT_FOUND": 91, "DUPLICATE_RESOURCE": 92, "UNACCEPTABLE_CREDENTIAL": 93}
