"""Every (api, version) we declare round-trips, requests and responses, compiled and interpreted alike."""

from __future__ import annotations

from io import BytesIO

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import body as body_strategy  # type: ignore[import-not-found]

from protocol import codec
from protocol.messages import ALL

CASES = [
    (key, v, is_req)
    for key, schema in sorted(ALL.items())
    for v in range(schema.min_version, schema.max_version + 1)
    for is_req in (True, False)
]


def _id(case: tuple[int, int, bool]) -> str:
    key, v, is_req = case
    return f"{ALL[key].name}{'Request' if is_req else 'Response'}v{v}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_roundtrip(case: tuple[int, int, bool]) -> None:
    key, version, is_req = case
    c = codec.codec_for(key, version, is_req)

    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(body_strategy(c.struct))
    def check(value: dict) -> None:
        wire = codec.encode_body(key, version, is_req, value)
        decoded = codec.decode_body(key, version, is_req, wire)
        assert decoded == value
        # the interpreted construct agrees with the compiled one, both ways
        assert c.struct.parse_into(BytesIO(wire)) == decoded
        io = BytesIO()
        c.struct.build_into(value, io)
        assert io.getvalue() == wire

    check()


def test_missing_fields_encode_as_defaults() -> None:
    wire = codec.encode_body(11, 5, False, {"error_code": 79, "member_id": "m-1"})
    decoded = codec.decode_body(11, 5, False, wire)
    assert decoded["error_code"] == 79
    assert decoded["generation_id"] == -1  # Kafka's declared default
    assert decoded["leader"] == "" and decoded["members"] == []


def test_whole_frames_roundtrip_with_headers() -> None:
    req = {"group_id": "g", "generation_id": 3, "member_id": "m", "group_instance_id": None}
    for version in range(5):
        frame = codec.encode_request(12, version, 99, "client-a", req)
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        parsed = codec.decode_request(frame[4:])
        assert parsed.header.correlation_id == 99 and parsed.header.client_id == "client-a"
        assert parsed.body["generation_id"] == 3
        resp = codec.encode_response(12, version, 99, {"error_code": 27})
        corr, body = codec.decode_response(12, version, resp[4:])
        assert corr == 99 and body["error_code"] == 27


@given(st.integers(0, 2**32 - 1))
def test_uvarint_roundtrip(n: int) -> None:
    from protocol import primitives as P

    assert P.read_uvarint(BytesIO(P.encode_uvarint(n))) == n


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_zigzag_roundtrip(n: int) -> None:
    from protocol import primitives as P

    assert P.read_varint(BytesIO(P.encode_varint(n))) == n


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_zigzag_roundtrip(n: int) -> None:
    from protocol import primitives as P

    assert P.read_varlong(BytesIO(P.encode_varlong(n))) == n
