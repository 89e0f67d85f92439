"""The SASL gate of a connection, driven frame by frame with a manual clock: what is served, answered or
closed before authentication, SCRAM through SaslAuthenticate (scramp as the client), PLAIN through
SaslHandshake v0 raw tokens with its PBKDF2 as a job, failures, and KIP-368 expiry and re-authentication."""

from __future__ import annotations

import pytest
from scramp import ScramClient

from coordinator.core.security.mechanisms import start
from coordinator.core.security.sasl_gate import Kind, SaslGate, State
from coordinator.core.security.scram import SCRAM_MECHANISMS, ScramCredential
from protocol import codec
from protocol.errors import ErrorCode

CREDS = {(u, m): ScramCredential.from_password(m, p, iterations=4096)
         for u, p in (("alice", "alice-secret"), ("bob", "bob-secret")) for m in SCRAM_MECHANISMS}


def lookup(user: str, mech: object) -> ScramCredential | None:
    return CREDS.get((user, mech.name))  # type: ignore[attr-defined]


def gate(lifetime_ms: int = 0, mechanisms: tuple[str, ...] = ("SCRAM-SHA-512", "PLAIN")) -> SaslGate:
    return SaslGate(mechanisms, lambda m, re: start(m, lookup, reauthentication=re), 524288, lifetime_ms)


def req(api_key: int, version: int, body: dict, corr: int = 1) -> bytes:
    return codec.encode_request(api_key, version, corr, "test", body)[4:]


def answer(api_key: int, version: int, frame: bytes | None) -> dict:
    assert frame is not None
    return codec.decode_response(api_key, version, frame[4:])[1]


def scram_login(g: SaslGate, user: str, password: str, now: int = 0, version: int = 1) -> dict:
    d = g.on_frame(req(17, version, {"mechanism": "SCRAM-SHA-512"}), now)
    assert d.kind is Kind.ANSWER and answer(17, version, d.frame)["error_code"] == 0
    client = ScramClient(["SCRAM-SHA-512"], user, password)
    d = g.on_frame(req(36, 2, {"auth_bytes": client.get_client_first().encode()}), now)
    assert d.kind is Kind.ANSWER
    first = answer(36, 2, d.frame)
    client.set_server_first(first["auth_bytes"].decode())
    d = g.on_frame(req(36, 2, {"auth_bytes": client.get_client_final().encode()}), now)
    final = answer(36, 2, d.frame)
    if final["error_code"] == 0:
        client.set_server_final(final["auth_bytes"].decode())  # the server proved it knows the key too
    return {"decision": d, **final}


def test_only_api_versions_and_the_handshake_pass_before_authentication() -> None:
    g = gate()
    assert g.on_frame(req(18, 3, {"client_software_name": "x", "client_software_version": "1"}), 0).kind is Kind.SERVE
    assert g.state is State.HANDSHAKE
    d = g.on_frame(req(3, 12, {"topics": None, "allow_auto_topic_creation": True,
                               "include_topic_authorized_operations": False}), 0)
    assert d.kind is Kind.CLOSE and d.frame is None


def test_a_second_api_versions_closes_but_an_unsupported_one_may_be_retried() -> None:
    g = gate()
    assert g.on_frame(req(18, 0, {}), 0).kind is Kind.SERVE
    assert g.on_frame(req(18, 0, {}), 0).kind is Kind.CLOSE
    g = gate()
    high = bytearray(req(18, 0, {}))
    high[2:4] = (9).to_bytes(2, "big")  # a version we do not serve: answered error 35, state kept
    assert g.on_frame(bytes(high), 0).kind is Kind.SERVE and g.state is State.INITIAL


def test_scram_through_sasl_authenticate_sets_the_principal_and_opens_the_gate() -> None:
    g = gate()
    result = scram_login(g, "alice", "alice-secret")
    assert result["error_code"] == 0 and result["session_lifetime_ms"] == 0
    assert result["decision"].succeeded and g.complete and g.principal == "User:alice"
    assert g.max_frame is None and g.expires_ms is None
    assert g.on_frame(req(3, 12, {"topics": None, "allow_auto_topic_creation": True,
                                  "include_topic_authorized_operations": False}), 5).kind is Kind.SERVE


def test_a_wrong_password_fails_with_kafkas_generic_message() -> None:
    g = gate()
    result = scram_login(g, "alice", "wrong")
    assert result["decision"].kind is Kind.FAIL
    assert result["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert result["error_message"] == ("Authentication failed during authentication due to invalid credentials "
                                       "with SASL mechanism SCRAM-SHA-512")
    assert g.state is State.FAILED and not g.complete


def test_an_unknown_mechanism_answers_the_enabled_list_and_fails() -> None:
    g = gate()
    d = g.on_frame(req(17, 1, {"mechanism": "GSSAPI"}), 0)
    assert d.kind is Kind.FAIL
    assert answer(17, 1, d.frame) == {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                      "mechanisms": ["SCRAM-SHA-512", "PLAIN"]}


def test_plain_over_raw_v0_tokens_runs_pbkdf2_as_a_job_and_answers_an_empty_token() -> None:
    g = gate()
    d = g.on_frame(req(17, 0, {"mechanism": "PLAIN"}), 0)
    assert d.kind is Kind.ANSWER and g.state is State.RAW
    d = g.on_frame(b"\x00bob\x00bob-secret", 0)  # a raw token: no request header
    assert d.kind is Kind.WORK and g.state is State.WORKING and d.job is not None
    done = g.resume(d.job(), 0)
    assert done.kind is Kind.ANSWER and done.frame == b"\x00\x00\x00\x00" and g.principal == "User:bob"


def test_plain_with_a_wrong_password_over_raw_tokens_closes_without_an_answer() -> None:
    g = gate()
    g.on_frame(req(17, 0, {"mechanism": "PLAIN"}), 0)
    d = g.on_frame(b"\x00bob\x00nope", 0)
    d = g.resume(d.job(), 0)
    assert d.kind is Kind.FAIL and d.frame is None


def test_a_request_while_a_job_is_out_closes() -> None:
    g = gate()
    g.on_frame(req(17, 1, {"mechanism": "PLAIN"}), 0)
    assert g.on_frame(req(36, 1, {"auth_bytes": b"\x00bob\x00bob-secret"}), 0).kind is Kind.WORK
    assert g.on_frame(req(36, 1, {"auth_bytes": b"\x00bob\x00bob-secret"}), 0).kind is Kind.CLOSE


def test_an_expired_session_closes_at_the_next_request_but_may_reauthenticate() -> None:
    g = gate(lifetime_ms=6000)
    result = scram_login(g, "alice", "alice-secret", now=1000)
    assert result["session_lifetime_ms"] == 6000 and g.expires_ms == 7000
    metadata = req(3, 12, {"topics": None, "allow_auto_topic_creation": True,
                           "include_topic_authorized_operations": False})
    assert g.on_frame(metadata, 6999).kind is Kind.SERVE
    again = scram_login(g, "alice", "alice-secret", now=6000)  # re-authentication: no ApiVersions step
    assert again["error_code"] == 0 and g.expires_ms == 12000
    assert g.on_frame(metadata, 11000).kind is Kind.SERVE
    assert g.on_frame(metadata, 12000).kind is Kind.CLOSE


def test_reauthentication_may_not_change_the_principal() -> None:
    g = gate(lifetime_ms=6000)
    scram_login(g, "alice", "alice-secret", now=0)
    result = scram_login(g, "bob", "bob-secret", now=2000)
    assert result["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert result["error_message"] == ("Cannot change principals during re-authentication from User:alice: "
                                       "User:bob")


def test_a_handshake_within_a_second_of_the_last_authentication_is_served_not_a_reauthentication() -> None:
    g = gate(lifetime_ms=6000)
    scram_login(g, "alice", "alice-secret", now=0)
    d = g.on_frame(req(17, 1, {"mechanism": "SCRAM-SHA-512"}), 500)
    assert d.kind is Kind.SERVE  # the broker answers ILLEGAL_SASL_STATE; the connection stays


@pytest.mark.parametrize("payload", [b"", b"\x16\x03\x01", b"\x00\x24\x00"])
def test_garbage_before_authentication_closes(payload: bytes) -> None:
    assert gate().on_frame(payload, 0).kind is Kind.CLOSE
