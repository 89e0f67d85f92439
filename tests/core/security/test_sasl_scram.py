"""SCRAM-SHA-256/512 server side (coordinator.core.security.scram) against RFC 7677's vector and two
independent clients (scramp, and kafka-python's own SCRAM client), plus every refusal the module promises.

Each test: given a stored credential and the client's messages, this server reply or this AuthenticationFailed
(always Kafka's generic message for the client, the specific cause in ``reason``)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
import scramp
from kafka.net.sasl.scram import ScramClient as KafkaPythonScramClient

from coordinator.core.security import mechanisms
from coordinator.core.security.sasl import MAX_TOKEN_BYTES, AuthenticationFailed
from coordinator.core.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    ScramServer,
    iterations_problem,
    mechanism_for_code,
    salted_password,
)

GENERIC_256 = ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
               "SCRAM-SHA-256")
GENERIC_512 = GENERIC_256.replace("SCRAM-SHA-256", "SCRAM-SHA-512")
AUTHZID = "Authentication failed: Client requested an authorization id that is different from username"

# RFC 7677 section 3
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CNONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SNONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
RFC_CREDENTIAL = ScramCredential.from_password("SCRAM-SHA-256", "pencil", RFC_SALT, 4096)

SNONCE = "serverNonce0123456789"
_CREDENTIALS: dict[tuple[str, str, str], ScramCredential] = {}


def credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
               salt: bytes = b"0123456789abcdef") -> ScramCredential:
    key = (mechanism, password, f"{iterations}/{salt.hex()}")
    if key not in _CREDENTIALS:  # PBKDF2 once per distinct credential
        _CREDENTIALS[key] = ScramCredential.from_password(mechanism, password, salt, iterations)
    return _CREDENTIALS[key]


def server(mechanism: str = "SCRAM-SHA-256", users: dict[str, ScramCredential] | None = None,
           snonce: str = SNONCE, **kw) -> ScramServer:
    users = {"alice": credential(mechanism, "secret")} if users is None else users
    return ScramServer(mechanism, users.get, nonce=lambda: snonce, **kw)


def client_final_for(mechanism: str, password: str, client_first: str, server_first: str,
                     gs2_header: str = "n,,", nonce: str | None = None) -> str:
    """A test-side client-final (RFC 5802 section 3), for messages scramp will not build."""
    h = mechanism.split("-", 1)[1].replace("-", "").lower()
    fields = dict(a.split("=", 1) for a in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(h, password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac.digest(salted, b"Client Key", h)
    stored_key = hashlib.new(h, client_key).digest()
    without_proof = f"c={base64.b64encode(gs2_header.encode()).decode()},r={nonce or fields['r']}"
    bare = client_first[len(gs2_header):]
    signature = hmac.digest(stored_key, f"{bare},{server_first},{without_proof}".encode(), h)
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"


def refused(call, *args, message: str = GENERIC_256) -> AuthenticationFailed:
    with pytest.raises(AuthenticationFailed) as e:
        call(*args)
    assert e.value.message == message == str(e.value)
    return e.value


# --- RFC 7677 and independent clients


def test_rfc7677_vector() -> None:
    s = ScramServer("SCRAM-SHA-256", {"user": RFC_CREDENTIAL}.get, nonce=lambda: RFC_SNONCE)
    assert s.client_first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert not s.complete and s.username is None and s.principal is None
    assert s.client_final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert s.complete and s.username == "user" and s.principal == "User:user"


def test_rfc7677_vector_through_the_uniform_interface() -> None:
    ex = mechanisms.start("SCRAM-SHA-256", lambda u, m: RFC_CREDENTIAL if (u, m) == ("user", SCRAM_SHA_256)
                          else None, nonce=lambda: RFC_SNONCE)
    first = ex.step(RFC_CLIENT_FIRST)
    assert (first.reply, first.done, first.work) == (RFC_SERVER_FIRST, False, None)
    final = ex.step(RFC_CLIENT_FINAL)
    assert (final.reply, final.done, final.work) == (RFC_SERVER_FINAL, True, None)
    assert ex.principal == "User:user"


def test_rfc7677_credential_matches_an_independent_derivation() -> None:
    salt, stored_key, server_key, i = scramp.ScramMechanism("SCRAM-SHA-256").make_auth_info(
        "pencil", iteration_count=4096, salt=RFC_SALT)
    assert (RFC_CREDENTIAL.salt, RFC_CREDENTIAL.stored_key, RFC_CREDENTIAL.server_key,
            RFC_CREDENTIAL.iterations) == (salt, stored_key, server_key, i)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("username", ["alice", "a,b=c", "=2C,,==", "ünïcødé user"])
def test_scramp_client_round_trip(mechanism: str, username: str) -> None:
    s = ScramServer(mechanism, {username: credential(mechanism, "s3cret pass")}.get)
    c = scramp.ScramClient([mechanism], username, "s3cret pass")
    c.set_server_first(s.client_first(c.get_client_first().encode()).decode())
    c.set_server_final(s.client_final(c.get_client_final().encode()).decode())  # raises if v= is wrong
    assert s.complete and s.username == username and s.principal == f"User:{username}"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scramp_verifies_our_credentials_on_its_own_server(mechanism: str) -> None:
    """Our derivation, scramp's server: the same keys (the reverse direction of the round trip)."""
    ours = credential(mechanism, "pw")
    m = scramp.ScramMechanism(mechanism)
    ss = m.make_server(lambda _u: (ours.salt, ours.stored_key, ours.server_key, ours.iterations))
    c = scramp.ScramClient([mechanism], "bob", "pw")
    ss.set_client_first(c.get_client_first())
    c.set_server_first(ss.get_server_first())
    ss.set_client_final(c.get_client_final())
    c.set_server_final(ss.get_server_final())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python_client_round_trip(mechanism: str) -> None:
    s = ScramServer(mechanism, {"alice": credential(mechanism, "secret")}.get)
    c = KafkaPythonScramClient("alice", "secret", mechanism)
    c.process_server_first_message(s.client_first(c.first_message()))
    c.process_server_final_message(s.client_final(c.final_message()))  # raises if v= is wrong
    assert s.principal == "User:alice"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_is_the_generic_failure(mechanism: str) -> None:
    s = server(mechanism)
    c = scramp.ScramClient([mechanism], "alice", "not the secret")
    c.set_server_first(s.client_first(c.get_client_first().encode()).decode())
    e = refused(s.client_final, c.get_client_final().encode(),
                message=GENERIC_512 if mechanism == "SCRAM-SHA-512" else GENERIC_256)
    assert "wrong password" in e.reason
    assert s.failed and not s.complete and s.principal is None


def test_unknown_user_fails_at_client_first_with_the_same_message() -> None:
    s = server()
    e = refused(s.client_first, b"n,,n=mallory,r=abc")
    assert "unknown user" in e.reason
    assert s.failed
    refused(s.client_final, b"c=biws,r=abc" + SNONCE.encode() + b",p=AAAA")


def test_a_credential_of_another_mechanism_does_not_serve() -> None:
    s = server("SCRAM-SHA-512", users={"alice": credential("SCRAM-SHA-256", "secret")})
    e = refused(s.client_first, b"n,,n=alice,r=abc", message=GENERIC_512)
    assert "wrong size" in e.reason


def test_reauthentication_words_the_message_as_kafka() -> None:
    s = server(reauthentication=True)
    with pytest.raises(AuthenticationFailed) as e:
        s.client_first(b"n,,n=nobody,r=abc")
    assert e.value.message == GENERIC_256.replace("during authentication", "during re-authentication")


# --- client-final checks


def _first(s: ScramServer, cnonce: str = "clientNonce", gs2: str = "n,,", user: str = "alice") -> tuple[str, str]:
    client_first = f"{gs2}n={user},r={cnonce}"
    return client_first, s.client_first(client_first.encode()).decode()


def test_a_valid_hand_built_client_final_passes() -> None:
    """The control for the nonce/c= tests below: the same helper with nothing altered succeeds."""
    s = server()
    cf, sf = _first(s)
    assert s.client_final(client_final_for("SCRAM-SHA-256", "secret", cf, sf).encode()).startswith(b"v=")


@pytest.mark.parametrize("nonce", [
    "otherClientNonce" + SNONCE,  # ends with the server's part only, not the whole nonce of server-first
    "clientNonce" + SNONCE + "x",
    "clientNonce",
    "clientNonce" + SNONCE[:-1],
    SNONCE,
])
def test_a_nonce_that_does_not_end_with_the_whole_nonce_fails(nonce: str) -> None:
    s = server()
    cf, sf = _first(s)
    e = refused(s.client_final, client_final_for("SCRAM-SHA-256", "secret", cf, sf, nonce=nonce).encode())
    assert "nonce" in e.reason


def test_librdkafkas_repeated_client_nonce_passes() -> None:
    """librdkafka <= 2.0.2 (kcat 1.7.1) sends r=<cnonce><cnonce><snonce>: Kafka's check (ends with the
    whole nonce) accepts it, and so do we; its proof covers the text it sent."""
    s = server()
    cf, sf = _first(s)
    final = client_final_for("SCRAM-SHA-256", "secret", cf, sf, nonce="clientNonce" + "clientNonce" + SNONCE)
    assert s.client_final(final.encode()).startswith(b"v=")


@pytest.mark.parametrize("c_header", ["y,,", "n,a=alice,", "p=tls-unique,,", "n,"])
def test_c_must_be_the_gs2_header_of_client_first(c_header: str) -> None:
    s = server()
    cf, sf = _first(s)
    final = client_final_for("SCRAM-SHA-256", "secret", cf, sf)
    final = final.replace("c=biws", "c=" + base64.b64encode(c_header.encode()).decode())
    e = refused(s.client_final, final.encode())
    assert "c=" in e.reason


def test_authzid_equal_to_the_username_is_accepted_and_bound_into_c() -> None:
    s = server()
    cf, sf = _first(s, gs2="n,a=alice,")
    final = client_final_for("SCRAM-SHA-256", "secret", cf, sf, gs2_header="n,a=alice,")
    assert final.startswith("c=bixhPWFsaWNlLA==,")
    assert s.client_final(final.encode()).startswith(b"v=")
    assert s.principal == "User:alice"


def test_authzid_different_from_the_username_fails_with_kafkas_message() -> None:
    s = server()
    e = refused(s.client_first, b"n,a=bob,n=alice,r=abc", message=AUTHZID)
    assert "authzid" in e.reason and s.failed


def test_authzid_is_compared_unescaped() -> None:
    s = server(users={"a,b": credential("SCRAM-SHA-256", "secret")})
    assert s.client_first(b"n,a=a=2Cb,n=a=2Cb,r=abc").startswith(b"r=abc" + SNONCE.encode())


@pytest.mark.parametrize("final", [
    b"c=biws,r=clientNonce" + SNONCE.encode(),  # missing proof
    b"c=biws,r=clientNonce" + SNONCE.encode() + b",p=",  # empty proof
    b"c=biws,r=clientNonce" + SNONCE.encode() + b",p=not*base64",
    b"c=biws,r=clientNonce" + SNONCE.encode() + b",p=AAAA",  # base64, but not a hash's length
    b"r=clientNonce" + SNONCE.encode() + b",c=biws,p=AAAA",  # order
    b"c=biws,r=clientNonce" + SNONCE.encode() + b",1x=y,p=AAAA",  # malformed extension
    b"",
])
def test_malformed_client_final_fails(final: bytes) -> None:
    s = server()
    _first(s)
    refused(s.client_final, final)
    assert s.failed


def test_a_finished_exchange_takes_no_more_tokens() -> None:
    s = server()
    c = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "secret")
    client_first = c.get_client_first().encode()
    c.set_server_first(s.client_first(client_first).decode())
    final = c.get_client_final().encode()
    s.client_final(final)
    assert s.complete
    e = refused(s.client_final, final)
    assert "state complete" in e.reason
    assert s.failed and s.principal is None  # as Kafka: a token after COMPLETE fails the exchange
    refused(s.step, final)
    refused(s.client_first, client_first)


def test_a_client_final_replayed_on_a_new_exchange_fails() -> None:
    first = server(snonce="firstServerNonce")
    c = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "secret")
    client_first = c.get_client_first().encode()
    c.set_server_first(first.client_first(client_first).decode())
    final = c.get_client_final().encode()
    first.client_final(final)
    second = server(snonce="secondServerNonce")
    second.client_first(client_first)
    refused(second.client_final, final)


def test_steps_out_of_order_fail() -> None:
    s = server()
    refused(s.client_final, b"c=biws,r=abc,p=AAAA")
    refused(s.client_first, b"n,,n=alice,r=abc")  # failed: nothing more
    s = server()
    _first(s)
    refused(s.client_first, b"n,,n=alice,r=abc")
    s = server()
    refused(s.resume, True)


# --- client-first checks


@pytest.mark.parametrize(("first", "reason"), [
    (b"y,,n=alice,r=abc", "channel binding"),
    (b"p=tls-unique,,n=alice,r=abc", "channel binding"),
    (b"x,,n=alice,r=abc", "gs2"),
    (b"n,", "gs2"),
    (b"n,,", "client-first-bare"),
    (b"n,,r=abc,n=alice", "client-first-bare"),
    (b"n,,n=alice", "client-first-bare"),
    (b"n,b=x,n=alice,r=abc", "authzid"),
    (b"n,a=,n=alice,r=abc", "authzid"),
    (b"n,,m=ext,n=alice,r=abc", "reserved"),
    (b"n,,n=,r=abc", "empty username"),
    (b"n,,n=al=3Cice,r=abc", "escape"),
    (b"n,,n=alice=,r=abc", "escape"),
    (b"n,,n=alice=2,r=abc", "escape"),
    (b"n,,n=alice,r=", "nonce"),
    (b"n,,n=alice,r=ab c", "nonce"),
    (b"n,,n=alice,r=ab\x7fc", "nonce"),
    ("n,,n=alice,r=abç".encode(), "nonce"),
    (b"n,,n=alice,r=abc,tokenauth=true", "delegation token"),
    (b"n,,n=alice,r=abc,tokenauth=TRUE", "delegation token"),
    (b"n,,n=alice,r=abc,=x", "extension"),
    (b"n,,n=alice,r=abc,ext", "extension"),
    (b"n,,n=al\xffice,r=abc", "UTF-8"),
    (b"n,,n=al\x00ice,r=abc", "NUL"),
    (b"n,,n=alice,r=" + b"a" * MAX_TOKEN_BYTES, "exceeds"),
])
def test_malformed_client_first_fails(first: bytes, reason: str) -> None:
    s = server()
    e = refused(s.client_first, first)
    assert reason in e.reason, e.reason
    assert s.failed


def test_unknown_extensions_are_ignored_as_kafka_does() -> None:
    s = server()
    assert s.client_first(b"n,,n=alice,r=abc,tokenauth=false,foo=bar").startswith(b"r=abc" + SNONCE.encode())


def test_usernames_with_comma_and_equals_are_unescaped() -> None:
    s = server(users={"a,b=c": credential("SCRAM-SHA-256", "secret")})
    cf, sf = _first(s, user="a=2Cb=3Dc")
    s.client_final(client_final_for("SCRAM-SHA-256", "secret", cf, sf).encode())
    assert s.username == "a,b=c"


def test_no_saslprep_usernames_are_taken_as_written() -> None:
    s = server(users={"ALICE": credential("SCRAM-SHA-256", "secret")})
    refused(s.client_first, b"n,,n=alice,r=abc")


# --- stored credentials at login


def test_a_credential_below_4096_iterations_is_refused() -> None:
    low = credential("SCRAM-SHA-256", "secret", iterations=4095)
    e = refused(server(users={"alice": low}).client_first, b"n,,n=alice,r=abc")
    assert e.reason == "Iterations 4095 is less than the minimum 4096 for SCRAM-SHA-256"


def test_a_credential_above_the_alter_bound_still_logs_in() -> None:
    """Kafka only bounds what AlterUserScramCredentials accepts, not logins."""
    high = credential("SCRAM-SHA-256", "secret", iterations=MAX_ITERATIONS + 1)
    s = server(users={"alice": high})
    c = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "secret")
    c.set_server_first(s.client_first(c.get_client_first().encode()).decode())
    c.set_server_final(s.client_final(c.get_client_final().encode()).decode())


def test_a_lookup_error_propagates_and_fails_the_exchange() -> None:
    def broken(_user: str) -> ScramCredential | None:
        raise OSError("store down")

    s = ScramServer("SCRAM-SHA-256", broken)
    with pytest.raises(OSError):
        s.client_first(b"n,,n=alice,r=abc")
    assert s.failed


def test_an_invalid_injected_nonce_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="invalid nonce"):
        server(snonce="has,comma").client_first(b"n,,n=alice,r=abc")


def test_the_default_server_nonce_is_fresh_and_valid() -> None:
    users = {"alice": credential("SCRAM-SHA-256", "secret")}
    replies = {ScramServer("SCRAM-SHA-256", users.get).client_first(b"n,,n=alice,r=abc") for _ in range(3)}
    assert len(replies) == 3
    for reply in replies:
        nonce = reply.decode().split(",")[0][2:]
        assert nonce.startswith("abc") and len(nonce) >= 3 + 24
        assert all("\x21" <= ch <= "\x7e" and ch != "," for ch in nonce)


# --- the credential format and derivations


def test_credential_string_is_kafkas_format_exactly() -> None:
    cred = ScramCredential(salt=b"\x01\x02\x03", stored_key=b"\xff" * 32, server_key=b"\x00" * 32, iterations=8192)
    text = ("salt=AQID,stored_key=//////////////////////////////////////////8=,"
            "server_key=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=,iterations=8192")
    assert cred.encode() == text
    assert ScramCredential.parse(text) == cred
    assert RFC_CREDENTIAL.encode() == ("salt=W22ZaJ0SNY7soEsUEjb6gQ==,"
                                       "stored_key=WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=,"
                                       "server_key=wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=,iterations=4096")
    assert ScramCredential.parse(RFC_CREDENTIAL.encode()) == RFC_CREDENTIAL


def test_credential_string_keys_may_come_in_any_order() -> None:
    text = "iterations=4096,server_key=AAAA,salt=AQID,stored_key=//8="
    assert ScramCredential.parse(text) == ScramCredential(b"\x01\x02\x03", b"\xff\xff", b"\x00\x00\x00", 4096)


@pytest.mark.parametrize("text", [
    "",
    "salt=AQID,stored_key=AAAA,server_key=AAAA",  # missing iterations
    "salt=AQID,stored_key=AAAA,server_key=AAAA,iterations=4096,extra=1",
    "salt=AQID,salt=AQID,stored_key=AAAA,server_key=AAAA,iterations=4096",
    "salt=AQID,stored_key=AAAA,server_key=AAAA,iterations=0",
    "salt=AQID,stored_key=AAAA,server_key=AAAA,iterations=-1",
    "salt=AQID,stored_key=AAAA,server_key=AAAA,iterations=4k",
    "salt=AQID,stored_key=AAAA,server_key=AAAA,iterations=2147483648",
    "salt=AQID,stored_key=AA*A,server_key=AAAA,iterations=4096",
    "salt=AQI,stored_key=AAAA,server_key=AAAA,iterations=4096",  # unpadded
    "salt=AQID,stored_key=AAAA,server_key=AAAA,=4096",
    "salt=AQID;stored_key=AAAA,server_key=AAAA,iterations=4096",
])
def test_malformed_credential_strings_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="SCRAM credential not valid"):
        ScramCredential.parse(text)


def test_a_parse_error_does_not_repeat_the_keys() -> None:
    with pytest.raises(ValueError) as e:
        ScramCredential.parse("salt=AQID,stored_key=c2VjcmV0c2VjcmV0,server_key=AAAA,iterations=x")
    assert "c2VjcmV0c2VjcmV0" not in str(e.value)
    assert "c2VjcmV0" not in repr(ScramCredential.parse("salt=AQID,stored_key=c2VjcmV0,server_key=AAAA,"
                                                       "iterations=1"))


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_from_salted_password_is_what_alter_user_scram_credentials_sends(mechanism) -> None:
    salted = salted_password(mechanism, "pw", b"salt", 4096)
    assert len(salted) == mechanism.digest_size
    assert ScramCredential.from_salted_password(mechanism, salted, b"salt", 4096) == \
        ScramCredential.from_password(mechanism.name, "pw", b"salt", 4096)


def test_passwords_are_utf8_without_saslprep() -> None:
    assert salted_password("SCRAM-SHA-256", "p\u00e4ss", b"s", 4096) == \
        hashlib.pbkdf2_hmac("sha256", "p\u00e4ss".encode(), b"s", 4096)
    assert salted_password("SCRAM-SHA-256", "a\u00a0b", b"s", 4096) != salted_password("SCRAM-SHA-256", "a b",
                                                                                         b"s", 4096)


def test_from_password_picks_a_random_salt() -> None:
    a = ScramCredential.from_password("SCRAM-SHA-256", "pw")
    b = ScramCredential.from_password("SCRAM-SHA-256", "pw")
    assert a.salt != b.salt and len(a.salt) == 32 and a.iterations == MIN_ITERATIONS


def test_mechanism_codes_and_iteration_bounds() -> None:
    assert (SCRAM_SHA_256.code, SCRAM_SHA_512.code) == (1, 2)
    assert mechanism_for_code(1) is SCRAM_SHA_256 and mechanism_for_code(2) is SCRAM_SHA_512
    assert mechanism_for_code(0) is None and mechanism_for_code(3) is None
    assert (MIN_ITERATIONS, MAX_ITERATIONS) == (4096, 16384)
    assert [iterations_problem(i) for i in (4095, 4096, 16384, 16385)] == \
        ["Too few iterations", None, None, "Too many iterations"]
    with pytest.raises(ValueError):
        ScramServer("SCRAM-SHA-1", {}.get)
    with pytest.raises(ValueError):
        ScramCredential(b"s", b"k", b"k", 0)
