"""The mechanism registry (coordinator.core.security.mechanisms): ``sasl.enabled.mechanisms`` and driving any
mechanism through the one interface the runtime uses, with independent clients."""

from __future__ import annotations

import pytest
import scramp
from kafka.net.sasl.scram import ScramClient as KafkaPythonScramClient

from coordinator.core.security.mechanisms import (
    SUPPORTED_MECHANISMS,
    AuthenticationFailed,
    Exchange,
    parse_enabled_mechanisms,
    start,
)
from coordinator.core.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramCredential, ScramMechanism

STORE = {
    ("alice", "SCRAM-SHA-256"): ScramCredential.from_password(SCRAM_SHA_256, "pw-256", b"salt-alice-256", 4096),
    ("alice", "SCRAM-SHA-512"): ScramCredential.from_password(SCRAM_SHA_512, "pw-512", b"salt-alice-512", 4096),
}


def lookup(username: str, mechanism: ScramMechanism) -> ScramCredential | None:
    return STORE.get((username, mechanism.name))


def drive(exchange: Exchange, token: bytes) -> bytes:
    """The runtime's loop for one client token (work inline here; a worker thread there)."""
    result = exchange.step(token)
    while result.work is not None:
        result = exchange.resume(result.work())
    return result.reply


@pytest.mark.parametrize(("value", "expected"), [
    ("SCRAM-SHA-256,SCRAM-SHA-512", ("SCRAM-SHA-256", "SCRAM-SHA-512")),
    (" PLAIN , SCRAM-SHA-512 ", ("PLAIN", "SCRAM-SHA-512")),
    ("PLAIN,PLAIN,SCRAM-SHA-256,PLAIN", ("PLAIN", "SCRAM-SHA-256")),
    ("", ()),
    ("  ", ()),
])
def test_enabled_mechanisms(value: str, expected: tuple[str, ...]) -> None:
    assert parse_enabled_mechanisms(value) == expected


@pytest.mark.parametrize(("value", "message"), [
    ("GSSAPI", "sasl.enabled.mechanisms: unsupported SASL mechanism 'GSSAPI' (supported: SCRAM-SHA-256, "
               "SCRAM-SHA-512, PLAIN)"),
    ("SCRAM-SHA-256,OAUTHBEARER", "unsupported SASL mechanism 'OAUTHBEARER'"),
    ("scram-sha-256", "case-sensitive: did you mean SCRAM-SHA-256?"),
    ("PLAIN,,SCRAM-SHA-256", "empty entry"),
])
def test_enabled_mechanisms_refused(value: str, message: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_enabled_mechanisms(value)
    assert message in str(e.value)


def test_the_key_named_in_errors_can_be_the_listener_prefixed_one() -> None:
    with pytest.raises(ValueError, match=r"^listener\.name\.sasl_ssl\.sasl\.enabled\.mechanisms: "):
        parse_enabled_mechanisms("GSSAPI", "listener.name.sasl_ssl.sasl.enabled.mechanisms")


def test_start_refuses_what_we_do_not_serve() -> None:
    for name in ("GSSAPI", "scram-sha-256", "plain", ""):
        with pytest.raises(ValueError):
            start(name, lookup)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_through_start_with_scramp(mechanism: str) -> None:
    password = "pw-256" if mechanism == "SCRAM-SHA-256" else "pw-512"
    ex = start(mechanism, lookup)
    c = scramp.ScramClient([mechanism], "alice", password)
    c.set_server_first(drive(ex, c.get_client_first().encode()).decode())
    assert not ex.complete
    c.set_server_final(drive(ex, c.get_client_final().encode()).decode())
    assert ex.complete and ex.mechanism == mechanism and ex.principal == "User:alice"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_through_start_with_kafka_python(mechanism: str) -> None:
    password = "pw-256" if mechanism == "SCRAM-SHA-256" else "pw-512"
    ex = start(mechanism, lookup)
    c = KafkaPythonScramClient("alice", password, mechanism)
    c.process_server_first_message(drive(ex, c.first_message()))
    c.process_server_final_message(drive(ex, c.final_message()))
    assert ex.principal == "User:alice"


def test_each_scram_mechanism_looks_up_its_own_credential() -> None:
    ex = start("SCRAM-SHA-256", lookup)
    c = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "pw-512")
    c.set_server_first(drive(ex, c.get_client_first().encode()).decode())
    with pytest.raises(AuthenticationFailed) as e:
        drive(ex, c.get_client_final().encode())
    assert e.value.message == ("Authentication failed during authentication due to invalid credentials with "
                               "SASL mechanism SCRAM-SHA-256")


def test_plain_through_start() -> None:
    ex = start("PLAIN", lookup)
    assert drive(ex, b"\x00alice\x00pw-512") == b""
    assert ex.complete and ex.mechanism == "PLAIN" and ex.principal == "User:alice"
    ex = start("PLAIN", lookup)
    with pytest.raises(AuthenticationFailed, match=r"^Authentication failed: Invalid username or password$"):
        drive(ex, b"\x00alice\x00pw-256")  # PLAIN checks the SCRAM-SHA-512 credential when there is one


def test_supported_names() -> None:
    assert SUPPORTED_MECHANISMS == ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
