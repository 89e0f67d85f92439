"""The client side of the SASL mechanisms we speak: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, 7677).

Rules:
- Sans-IO and standard library only (``hashlib``, ``hmac``, ``secrets``): a mechanism turns the server's
  challenges into the client's responses; ``client.connection`` carries the tokens in SaslAuthenticate.
  The client package never imports the coordinator, so this is our own client side, not the server's.
- ``mechanism_for(name, username, password)`` gives a fresh ``ClientMechanism`` per connection: ``first()``
  is the initial response, ``respond(challenge)`` answers each challenge (None: nothing more to send),
  ``complete`` is True once the server has proven what the mechanism requires.
- PLAIN: one token ``<authzid NUL> username NUL password`` with an empty authzid; complete once sent.
- SCRAM: client-first ``n,,n=<user>,r=<nonce>`` (``=`` escaped ``=3D``, ``,`` escaped ``=2C``; no SASLprep,
  as Kafka); server-first must carry ``r`` starting with our nonce and longer than it, a base64 salt and
  ``MIN_ITERATIONS <= i <= MAX_ITERATIONS`` (4096 is Kafka's floor; the ceiling stops a hostile server
  making us spin PBKDF2); client-final ``c=biws,r=<nonce>,p=<proof>`` with ``SaltedPassword =
  PBKDF2(password, salt, i)``, ``ClientKey = HMAC(SaltedPassword, "Client Key")``, ``StoredKey = H(ClientKey)``,
  ``proof = ClientKey XOR HMAC(StoredKey, AuthMessage)``. The server-final ``v=`` must equal ``HMAC(ServerKey,
  AuthMessage)`` (``hmac.compare_digest``): a server that does not know the password is refused, as is an
  ``e=`` error, a malformed message or a message out of order.
- Every refusal raises ``SaslMechanismError`` (a ``ValueError``); the connection turns it into
  ``client.errors.SaslAuthenticationError`` naming the listener.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from typing import Protocol

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 1_000_000
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS = ("PLAIN", *SCRAM_HASHES)
GS2_HEADER = "n,,"


class SaslMechanismError(ValueError):
    """The server's message is malformed, out of order, or does not prove what the mechanism requires."""


class ClientMechanism(Protocol):
    name: str

    @property
    def complete(self) -> bool: ...

    def first(self) -> bytes: ...

    def respond(self, challenge: bytes) -> bytes | None: ...


def mechanism_for(name: str, username: str, password: str) -> ClientMechanism:
    if name == "PLAIN":
        return PlainClient(username, password)
    if name in SCRAM_HASHES:
        return ScramClient(name, username, password)
    raise SaslMechanismError(f"unsupported SASL mechanism {name!r} (supported: {', '.join(MECHANISMS)})")


class PlainClient:
    name = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        if "\0" in username or "\0" in password:
            raise SaslMechanismError("PLAIN credentials must not contain NUL")
        self._token = b"\0" + username.encode() + b"\0" + password.encode()
        self._sent = False

    @property
    def complete(self) -> bool:
        return self._sent

    def first(self) -> bytes:
        self._sent = True
        return self._token

    def respond(self, challenge: bytes) -> bytes | None:
        if challenge:
            raise SaslMechanismError("PLAIN takes no challenge from the server")
        return None


def escape_username(username: str) -> str:
    """RFC 5802 saslname: ``=`` -> ``=3D``, ``,`` -> ``=2C`` (in that order)."""
    return username.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise SaslMechanismError(f"malformed SCRAM {what} {message!r}")
        out.append((key, value))
    return out


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise SaslMechanismError(f"SCRAM {what} is not valid base64") from None


class ScramClient:
    """One SCRAM exchange, client side (see the module rules). States: start -> first-sent -> final-sent -> done."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        if mechanism not in SCRAM_HASHES:
            raise SaslMechanismError(f"{mechanism} is not a SCRAM mechanism")
        self.name = mechanism
        self._hash = SCRAM_HASHES[mechanism]
        self._password = password.encode()
        self._nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        if not self._nonce or any(c == "," or not 0x21 <= ord(c) <= 0x7E for c in self._nonce):
            raise SaslMechanismError("a SCRAM nonce is printable ASCII without ','")
        self._client_first_bare = f"n={escape_username(username)},r={self._nonce}"
        self._state = "start"
        self._server_signature = b""

    @property
    def complete(self) -> bool:
        return self._state == "done"

    def first(self) -> bytes:
        if self._state != "start":
            raise SaslMechanismError("SCRAM client-first sent twice")
        self._state = "first-sent"
        return (GS2_HEADER + self._client_first_bare).encode()

    def respond(self, challenge: bytes) -> bytes | None:
        if self._state == "first-sent":
            return self._client_final(challenge)
        if self._state == "final-sent":
            self._verify_server_final(challenge)
            return None
        raise SaslMechanismError(f"unexpected SCRAM message in state {self._state}")

    # ------------------------------------------------------------------ steps
    def _client_final(self, challenge: bytes) -> bytes:
        try:
            server_first = challenge.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslMechanismError("SCRAM server-first is not UTF-8") from None
        attrs = _attributes(server_first, "server-first")
        if attrs and attrs[0][0] == "e":
            raise SaslMechanismError(f"server refused: {attrs[0][1]}")
        if [k for k, _ in attrs[:3]] != ["r", "s", "i"]:
            raise SaslMechanismError(f"SCRAM server-first must start r=,s=,i= (got {server_first!r})")
        nonce, salt_b64, iterations_text = (v for _, v in attrs[:3])
        if not nonce.startswith(self._nonce) or len(nonce) <= len(self._nonce):
            raise SaslMechanismError("SCRAM server nonce does not extend the client nonce")
        salt = _b64decode(salt_b64, "salt")
        if not iterations_text.isdigit():
            raise SaslMechanismError(f"SCRAM iteration count {iterations_text!r} is not a number")
        iterations = int(iterations_text)
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise SaslMechanismError(f"SCRAM iteration count {iterations} is outside "
                                     f"{MIN_ITERATIONS}..{MAX_ITERATIONS}")
        salted = hashlib.pbkdf2_hmac(self._hash, self._password, salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", self._hash)
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c={base64.b64encode(GS2_HEADER.encode()).decode()},r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth_message, self._hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = hmac.digest(salted, b"Server Key", self._hash)
        self._server_signature = hmac.digest(server_key, auth_message, self._hash)
        self._state = "final-sent"
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify_server_final(self, challenge: bytes) -> None:
        try:
            server_final = challenge.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslMechanismError("SCRAM server-final is not UTF-8") from None
        attrs = dict(_attributes(server_final, "server-final"))
        self._state = "failed"
        if "e" in attrs:
            raise SaslMechanismError(f"server refused: {attrs['e']}")
        if "v" not in attrs:
            raise SaslMechanismError(f"SCRAM server-final has no verifier (got {server_final!r})")
        if not hmac.compare_digest(_b64decode(attrs["v"], "server signature"), self._server_signature):
            raise SaslMechanismError("SCRAM server signature is wrong: the server does not know the password")
        self._state = "done"
