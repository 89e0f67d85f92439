"""SASL/PLAIN (coordinator.core.security.plain), checked against the stored SCRAM credentials.

Each test: given stored credentials and the client's token, the step hands out the PBKDF2 check as work;
running it and resuming gives success (empty reply, principal User:<name>) or Kafka's PLAIN message."""

from __future__ import annotations

import pytest

from coordinator.core.security.plain import (
    INVALID_CREDENTIALS,
    PLAIN,
    PlainServer,
    parse_plain,
    verify_plain,
)
from coordinator.core.security.sasl import MAX_TOKEN_BYTES, AuthenticationFailed, StepResult
from coordinator.core.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramCredential, ScramMechanism

AUTHZID = "Authentication failed: Client requested an authorization id that is different from username"
SALT = b"plain-test-salt!"
C512 = ScramCredential.from_password(SCRAM_SHA_512, "secret512", SALT, 4096)
C256 = ScramCredential.from_password(SCRAM_SHA_256, "secret256", SALT, 4096)
STORE: dict[tuple[str, str], ScramCredential] = {
    ("both", "SCRAM-SHA-512"): C512, ("both", "SCRAM-SHA-256"): C256,
    ("only256", "SCRAM-SHA-256"): C256,
    ("only512", "SCRAM-SHA-512"): C512,
    ("low", "SCRAM-SHA-256"): ScramCredential.from_password(SCRAM_SHA_256, "lowpass", SALT, 4095),
    ("p\u00e4ss\u00a0user", "SCRAM-SHA-256"): ScramCredential.from_password(SCRAM_SHA_256, "p\u00e4ss\u00a0w",
                                                                            SALT, 4096),
}


def lookup(username: str, mechanism: ScramMechanism) -> ScramCredential | None:
    return STORE.get((username, mechanism.name))


def login(token: bytes, store=lookup) -> PlainServer:
    """What the runtime does: step, run the work (here: inline), resume."""
    s = PlainServer(store)
    first = s.step(token)
    assert (first.reply, first.done) == (b"", False) and first.work is not None
    assert not s.complete and s.principal is None
    result = s.resume(first.work())
    assert result == StepResult(b"", True)
    return s


def fails(token: bytes, message: str = INVALID_CREDENTIALS) -> AuthenticationFailed:
    s = PlainServer(lookup)
    with pytest.raises(AuthenticationFailed) as e:
        result = s.step(token)
        s.resume(result.work())
    assert e.value.message == message == str(e.value)
    assert s.failed and s.principal is None
    return e.value


@pytest.mark.parametrize(("token", "principal"), [
    (b"\x00both\x00secret512", "User:both"),  # SCRAM-SHA-512's credential is preferred...
    (b"\x00only256\x00secret256", "User:only256"),  # ...SCRAM-SHA-256's is used when it is the only one
    (b"\x00only512\x00secret512", "User:only512"),
    (b"both\x00both\x00secret512", "User:both"),  # authzid equal to the username
    ("\x00p\u00e4ss\u00a0user\x00p\u00e4ss\u00a0w".encode(), "User:p\u00e4ss\u00a0user"),  # UTF-8, no SASLprep
])
def test_plain_success(token: bytes, principal: str) -> None:
    s = login(token)
    assert s.complete and s.principal == principal and s.username == principal[5:] and s.mechanism == PLAIN


@pytest.mark.parametrize("token", [
    b"\x00both\x00secret256",  # the SHA-256 credential's password: not the one checked
    b"\x00only256\x00secret512",
    b"\x00both\x00SECRET512",
    b"\x00nobody\x00secret512",  # unknown user
    b"\x00BOTH\x00secret512",  # usernames are case-sensitive
    b"\x00low\x00lowpass",  # a credential below 4096 iterations does not log in
    "\x00p\u00e4ss\u00a0user\x00p\u00e4ss w".encode(),  # no SASLprep: U+00A0 is not a space
    b"\x00both\x00secret512\xff",  # not UTF-8
    b"\x00both\x00" + b"x" * MAX_TOKEN_BYTES,
])
def test_plain_invalid_username_or_password(token: bytes) -> None:
    fails(token)


@pytest.mark.parametrize(("token", "message"), [
    (b"both\x00secret512", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
    (b"", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
    (b"\x00both\x00secret512\x00", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
    (b"\x00both\x00se\x00cr\x00et", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
    (b"\x00\x00secret512", "Authentication failed: username not specified"),
    (b"\x00both\x00", "Authentication failed: password not specified"),
    (b"other\x00both\x00secret512", AUTHZID),
    (b"other\x00both\x00wrong", INVALID_CREDENTIALS),  # the password is checked first, as Kafka does
])
def test_plain_kafka_messages(token: bytes, message: str) -> None:
    fails(token, message)


def test_an_unknown_user_gets_the_same_work_and_fails_even_if_it_says_true() -> None:
    s = PlainServer(lookup)
    result = s.step(b"\x00nobody\x00pw")
    assert result.work is not None  # PBKDF2 against a decoy, so the answer is not obviously faster
    assert result.work() is False
    with pytest.raises(AuthenticationFailed) as e:
        s.resume(True)
    assert e.value.message == INVALID_CREDENTIALS and "unknown user" in e.value.reason


def test_the_work_is_pure_and_carries_the_credential_to_check() -> None:
    s = PlainServer(lookup)
    work = s.step(b"\x00both\x00secret512").work
    assert work is not None
    assert work.args == ("secret512", C512, SCRAM_SHA_512)  # a functools.partial of verify_plain
    assert work() is True and work() is True


def test_one_token_per_exchange() -> None:
    s = login(b"\x00both\x00secret512")
    with pytest.raises(AuthenticationFailed):
        s.step(b"\x00both\x00secret512")
    s = PlainServer(lookup)
    with pytest.raises(AuthenticationFailed):
        s.resume(True)  # no work pending
    s = PlainServer(lookup)
    s.step(b"\x00both\x00secret512")
    with pytest.raises(AuthenticationFailed):
        s.step(b"\x00both\x00secret512")


def test_a_lookup_error_propagates_and_fails_the_exchange() -> None:
    def broken(_u: str, _m: ScramMechanism) -> ScramCredential | None:
        raise OSError("store down")

    s = PlainServer(broken)
    with pytest.raises(OSError):
        s.step(b"\x00both\x00secret512")
    assert s.failed


def test_parse_and_verify_directly() -> None:
    r = parse_plain(b"az\x00user\x00pw")
    assert (r.authzid, r.username, r.password) == ("az", "user", "pw")
    assert "pw" not in repr(r)
    assert verify_plain("secret256", C256, "SCRAM-SHA-256")
    assert not verify_plain("secret256", C256, SCRAM_SHA_512)
    assert not verify_plain("secret", C256, SCRAM_SHA_256)
