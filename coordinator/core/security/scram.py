"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Apache Kafka 3.9 serves them: the credential and
the server side of one exchange, sans-IO (no sockets, files, clock or threads; randomness only from
``secrets`` and injectable).

Credentials (Kafka's ScramFormatter / ScramCredentialUtils):
- ``SaltedPassword = PBKDF2-HMAC-H(UTF-8 password, salt, i)`` (no SASLprep: Kafka does none),
  ``ClientKey = HMAC(SaltedPassword, "Client Key")``, ``StoredKey = H(ClientKey)``,
  ``ServerKey = HMAC(SaltedPassword, "Server Key")``. The server keeps salt, StoredKey, ServerKey and i only.
- String form: ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`` (standard padded base64);
  parsing takes the four keys in any order, each once, and nothing else.
- AlterUserScramCredentials bounds: ``MIN_ITERATIONS`` <= i <= ``MAX_ITERATIONS`` (``iterations_problem``
  words Kafka's refusals); mechanism codes there: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512, 0 unknown.
- PBKDF2 is the only expensive step and is never run by an exchange: ``salted_password`` is a pure function
  the runtime calls in a worker thread (deriving a credential, or PLAIN checking a password).

The exchange (``ScramServer``, Kafka's ScramSaslServer / ScramMessages, stricter where noted):
- client-first ``n,[a=<authzid>],n=<saslname>,r=<cnonce>[,<ext>=<value>...]``: gs2 flag ``n`` only (``y``/``p``,
  channel binding, fail); the reserved ``m=`` attribute fails (RFC 5802; Kafka ignores it); in a saslname
  ``=2C`` is ``,`` and ``=3D`` is ``=``, any other ``=`` fails; the username is non-empty UTF-8 without NUL
  (Kafka only takes ASCII; we take RFC 5802's UTF-8). A non-empty authzid (unescaped; Kafka compares it
  escaped) must equal the username: checked before the user is looked up, so Kafka's own message for it
  ("...authorization id that is different from username") tells nothing about the user. Extensions are
  ``ALPHA=VALUE``; ``tokenauth=true`` (delegation tokens) fails, others are ignored as Kafka does.
- The user is looked up at client-first; an unknown user, or a credential with fewer than 4096 iterations
  or keys of the wrong length for the mechanism, fails there (as Kafka: the step at which a login fails
  thus tells a client whether the user exists, as it does with Kafka).
- server-first ``r=<cnonce><snonce>,s=<b64 salt>,i=<i>``; the server nonce comes from ``nonce()``.
- client-final ``c=<b64 gs2 header>,r=<nonce>[,ext...],p=<b64 proof>``: r must END WITH the whole nonce of
  server-first, cnonce+snonce (Kafka's check since CVE-2024-56128): librdkafka up to at least 2.0.2 (kcat
  1.7.1) sends its client nonce again in front of it (seen on the wire: ``r=<cnonce><cnonce><snonce>``), and
  the proof binds whatever it sent (AuthMessage has the client's own text); c must be exactly the base64 of the gs2 header the client
  sent (Kafka does not check it); the proof must be valid base64 of the hash's length, and
  ``H(proof XOR HMAC(StoredKey, AuthMessage)) == StoredKey`` (``hmac.compare_digest``), with
  ``AuthMessage = client-first-bare "," server-first "," client-final-without-proof`` (the client's own
  text). Then server-final ``v=<b64 HMAC(ServerKey, AuthMessage)>``, and the exchange is complete.
- Nonces are non-empty printable ASCII (0x21-0x7E) without ','. Messages are strict UTF-8, without NUL, at
  most ``MAX_TOKEN_BYTES``.
- Every failure raises ``AuthenticationFailed`` with Kafka's generic message ("Authentication failed during
  authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"), the cause in ``reason``;
  a malformed message, a step out of order and any use after success or failure fail the same way. An
  exception from ``lookup`` itself propagates unchanged (a store error is not a wrong password), and the
  exchange is failed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from .sasl import MAX_TOKEN_BYTES, AuthenticationFailed, StepResult, generic_failure_message, user_principal

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
UNKNOWN_MECHANISM_CODE = 0
AUTHZID_MISMATCH = ("Authentication failed: Client requested an authorization id that is different from "
                    "username")


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str  # "SCRAM-SHA-256"
    hash_name: str  # hashlib's name
    code: int  # AlterUserScramCredentials / DescribeUserScramCredentials mechanism code
    digest_size: int  # bytes of a StoredKey, ServerKey, SaltedPassword and proof

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.digest(key, message, self.hash_name)

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1, 32)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2, 64)
SCRAM_MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}


def scram_mechanism(mechanism: str | ScramMechanism) -> ScramMechanism:
    """The mechanism named (case-sensitive, as Kafka); ValueError for any other name."""
    if isinstance(mechanism, ScramMechanism):
        return mechanism
    found = SCRAM_MECHANISMS.get(mechanism)
    if found is None:
        raise ValueError(f"not a SCRAM mechanism: {mechanism!r} (SCRAM-SHA-256 or SCRAM-SHA-512)")
    return found


def mechanism_for_code(code: int) -> ScramMechanism | None:
    """AlterUserScramCredentials' mechanism code -> the mechanism; None for 0 (UNKNOWN) and any other."""
    return next((m for m in SCRAM_MECHANISMS.values() if m.code == code), None)


def iterations_problem(iterations: int) -> str | None:
    """Kafka's AlterUserScramCredentials refusal (UNACCEPTABLE_CREDENTIAL) for an iteration count, or None."""
    if iterations < MIN_ITERATIONS:
        return "Too few iterations"
    if iterations > MAX_ITERATIONS:
        return "Too many iterations"
    return None


def salted_password(mechanism: str | ScramMechanism, password: str | bytes, salt: bytes, iterations: int) -> bytes:
    """PBKDF2-HMAC-H of the password's UTF-8 bytes (no SASLprep). Expensive by design: run it off the loop."""
    mech = scram_mechanism(mechanism)
    if iterations < 1:
        raise ValueError(f"iterations must be positive, not {iterations}")
    data = password.encode("utf-8") if isinstance(password, str) else password
    return hashlib.pbkdf2_hmac(mech.hash_name, data, salt, iterations)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64decode(text: str) -> bytes | None:
    """Canonical standard base64 (padded, no stray bits or characters) -> bytes; None for anything else."""
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error, ValueError):
        return None
    return data if _b64(data) == text else None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    def __post_init__(self) -> None:
        for name in ("salt", "stored_key", "server_key"):
            if not isinstance(getattr(self, name), bytes):
                raise TypeError(f"ScramCredential.{name} must be bytes")
        if not isinstance(self.iterations, int) or isinstance(self.iterations, bool) or self.iterations < 1:
            raise ValueError(f"ScramCredential.iterations must be a positive int, not {self.iterations!r}")

    @classmethod
    def from_salted_password(cls, mechanism: str | ScramMechanism, salted: bytes, salt: bytes,
                             iterations: int) -> ScramCredential:
        """What AlterUserScramCredentials carries (the client ran PBKDF2) -> the stored credential. Cheap."""
        mech = scram_mechanism(mechanism)
        client_key = mech.hmac(salted, b"Client Key")
        return cls(salt=salt, stored_key=mech.hash(client_key), server_key=mech.hmac(salted, b"Server Key"),
                   iterations=iterations)

    @classmethod
    def from_password(cls, mechanism: str | ScramMechanism, password: str, salt: bytes | None = None,
                      iterations: int = MIN_ITERATIONS) -> ScramCredential:
        """A credential for a password (PBKDF2: expensive). ``salt`` defaults to 32 random bytes."""
        salt = secrets.token_bytes(32) if salt is None else salt
        return cls.from_salted_password(mechanism, salted_password(mechanism, password, salt, iterations),
                                        salt, iterations)

    def encode(self) -> str:
        """Kafka's ScramCredentialUtils.credentialToString."""
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},server_key={_b64(self.server_key)},"
                f"iterations={self.iterations}")

    @classmethod
    def parse(cls, text: str) -> ScramCredential:
        """Kafka's ScramCredentialUtils.credentialFromString; ValueError (without the secret) if malformed."""
        values: dict[str, str] = {}
        for token in text.split(","):
            key, sep, value = token.partition("=")
            if not sep or not key:
                raise ValueError(f"SCRAM credential not valid: entry {key or token[:20]!r} is not key=value")
            if key not in ("salt", "stored_key", "server_key", "iterations"):
                raise ValueError(f"SCRAM credential not valid: unknown key {key[:40]!r}")
            if key in values:
                raise ValueError(f"SCRAM credential not valid: {key} given twice")
            values[key] = value
        missing = [key for key in ("salt", "stored_key", "server_key", "iterations") if key not in values]
        if missing:
            raise ValueError(f"SCRAM credential not valid: missing {', '.join(missing)}")
        decoded: dict[str, bytes] = {}
        for key in ("salt", "stored_key", "server_key"):
            data = _b64decode(values[key])
            if data is None:
                raise ValueError(f"SCRAM credential not valid: {key} is not base64")
            decoded[key] = data
        text_i = values["iterations"]
        if not (text_i.isascii() and text_i.isdigit()) or len(text_i) > 10 or not 1 <= int(text_i) < 2**31:
            raise ValueError(f"SCRAM credential not valid: iterations {text_i[:20]!r} is not a positive int32")
        return cls(salt=decoded["salt"], stored_key=decoded["stored_key"], server_key=decoded["server_key"],
                   iterations=int(text_i))


def random_nonce() -> str:
    """A server nonce: 192 random bits, URL-safe base64 (printable, no ',')."""
    return secrets.token_urlsafe(24)


def is_valid_nonce(nonce: str) -> bool:
    return bool(nonce) and all("\x21" <= ch <= "\x7e" and ch != "," for ch in nonce)


class _Refused(Exception):  # noqa: N818 - internal: a reason for the log, turned into AuthenticationFailed
    pass


def _unescape_saslname(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "=":
            escape = text[i:i + 3]
            if escape == "=2C":
                out.append(",")
            elif escape == "=3D":
                out.append("=")
            else:
                raise _Refused(f"invalid escape {escape!r} in a saslname")
            i += 3
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _check_extensions(attrs: list[str]) -> dict[str, str]:
    """``ALPHA=VALUE`` attributes (Kafka's ScramExtensions) -> dict; anything else is refused."""
    out: dict[str, str] = {}
    for attr in attrs:
        key, sep, value = attr.partition("=")
        if not sep or not key or not (key.isascii() and key.isalpha()) or not value:
            raise _Refused(f"malformed extension {attr[:40]!r}")
        out[key] = value
    return out


def _decode(message: bytes, what: str) -> str:
    if len(message) > MAX_TOKEN_BYTES:
        raise _Refused(f"{what} of {len(message)} bytes exceeds {MAX_TOKEN_BYTES}")
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused(f"{what} is not UTF-8") from None
    if "\x00" in text:
        raise _Refused(f"{what} contains NUL")
    return text


_CLIENT_FIRST, _CLIENT_FINAL, _COMPLETE, _FAILED = "client-first", "client-final", "complete", "failed"


class ScramServer:
    """The server side of one SCRAM exchange (see the module docstring); implements ``sasl.Exchange``.

    ``lookup(username)`` answers the user's credential for this mechanism, or None. ``nonce()`` answers a
    fresh server nonce (inject a fixed one in tests). ``reauthentication`` only words the failure message
    as Kafka does during KIP-368 re-authentication.
    """

    def __init__(self, mechanism: str | ScramMechanism, lookup: Callable[[str], ScramCredential | None], *,
                 nonce: Callable[[], str] = random_nonce, reauthentication: bool = False) -> None:
        self._mech = scram_mechanism(mechanism)
        self._lookup = lookup
        self._new_nonce = nonce
        self._message = generic_failure_message(self._mech.name, reauthentication)
        self._state = _CLIENT_FIRST
        self._credential: ScramCredential | None = None
        self._claimed = ""  # the username of client-first (for logs); authenticated only once complete
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    @property
    def mechanism(self) -> str:
        return self._mech.name

    @property
    def complete(self) -> bool:
        return self._state == _COMPLETE

    @property
    def failed(self) -> bool:
        return self._state == _FAILED

    @property
    def username(self) -> str | None:
        return self._claimed if self._state == _COMPLETE else None

    @property
    def attempted_username(self) -> str:
        """The username the client named (unauthenticated; for the server's log only)."""
        return self._claimed

    @property
    def principal(self) -> str | None:
        return user_principal(self._claimed) if self._state == _COMPLETE else None

    # --- the uniform interface (sasl.Exchange)

    def step(self, token: bytes) -> StepResult:
        if self._state == _CLIENT_FIRST:
            return StepResult(self.client_first(token), done=False)
        if self._state == _CLIENT_FINAL:
            return StepResult(self.client_final(token), done=True)
        raise self._fail(f"token received in state {self._state}")

    def resume(self, outcome: object) -> StepResult:
        raise self._fail("resume called, but SCRAM never asks for work")

    # --- the two steps

    def client_first(self, message: bytes) -> bytes:
        """client-first -> server-first (bytes)."""
        if self._state != _CLIENT_FIRST:
            raise self._fail(f"client-first received in state {self._state}")
        try:
            return self._client_first(message)
        except _Refused as e:
            raise self._fail(str(e)) from None
        except AuthenticationFailed as e:
            raise self._fail(e.reason, e.message) from None
        except BaseException:
            self._state, self._credential = _FAILED, None
            raise

    def client_final(self, message: bytes) -> bytes:
        """client-final -> server-final (bytes); the exchange is then complete."""
        if self._state != _CLIENT_FINAL:
            raise self._fail(f"client-final received in state {self._state}")
        try:
            return self._client_final(message)
        except _Refused as e:
            raise self._fail(str(e)) from None
        except BaseException:
            self._state, self._credential = _FAILED, None
            raise

    def _fail(self, reason: str, message: str | None = None) -> AuthenticationFailed:
        self._state, self._credential = _FAILED, None
        return AuthenticationFailed(message or self._message, reason)

    def _client_first(self, message: bytes) -> bytes:
        text = _decode(message, "client-first")
        if text.startswith(("y,", "p=")):
            raise _Refused("channel binding requested (gs2 flag y/p); only 'n' is supported")
        if not text.startswith("n,"):
            raise _Refused("client-first does not start with the gs2 flag 'n,'")
        end = text.find(",", 2)
        if end < 0:
            raise _Refused("client-first has no complete gs2 header")
        authz = text[2:end]
        authzid = ""
        if authz:
            if not authz.startswith("a=") or len(authz) == 2:
                raise _Refused(f"malformed authzid in the gs2 header: {authz[:40]!r}")
            authzid = _unescape_saslname(authz[2:])
        gs2_header, bare = text[:end + 1], text[end + 1:]
        attrs = bare.split(",")
        if attrs[0].startswith("m="):
            raise _Refused("client-first carries the reserved m= attribute")
        if len(attrs) < 2 or not attrs[0].startswith("n=") or not attrs[1].startswith("r="):
            raise _Refused("client-first-bare is not n=<saslname>,r=<nonce>[,extensions]")
        username = _unescape_saslname(attrs[0][2:])
        if not username:
            raise _Refused("empty username")
        client_nonce = attrs[1][2:]
        if not is_valid_nonce(client_nonce):
            raise _Refused("client nonce is empty or not printable ASCII without ','")
        extensions = _check_extensions(attrs[2:])
        self._claimed = username
        if extensions.get("tokenauth", "").lower() == "true":
            raise _Refused("delegation token authentication (tokenauth=true) is not supported")
        if authzid and authzid != username:
            raise AuthenticationFailed(AUTHZID_MISMATCH, f"authzid {authzid!r} differs from username")
        credential = self._lookup(username)
        if credential is None:
            raise _Refused(f"unknown user {username!r} for {self._mech.name}")
        if credential.iterations < MIN_ITERATIONS:
            raise _Refused(f"Iterations {credential.iterations} is less than the minimum {MIN_ITERATIONS} "
                           f"for {self._mech.name}")
        if len(credential.stored_key) != self._mech.digest_size or \
                len(credential.server_key) != self._mech.digest_size:
            raise _Refused(f"stored credential of {username!r} has keys of the wrong size for {self._mech.name}")
        server_nonce = self._new_nonce()
        if not is_valid_nonce(server_nonce):
            raise ValueError(f"the nonce source returned an invalid nonce {server_nonce!r}")
        self._credential = credential
        self._gs2_header = gs2_header
        self._client_first_bare = bare
        self._nonce = client_nonce + server_nonce
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._state = _CLIENT_FINAL
        return self._server_first.encode("ascii")

    def _client_final(self, message: bytes) -> bytes:
        text = _decode(message, "client-final")
        attrs = text.split(",")
        if len(attrs) < 2 or not attrs[0].startswith("c=") or not attrs[1].startswith("r="):
            raise _Refused("client-final does not start with c=<b64>,r=<nonce>")
        if len(attrs) < 3 or not attrs[-1].startswith("p="):
            raise _Refused("client-final carries no proof (p=)")
        _check_extensions(attrs[2:-1])
        if attrs[0][2:] != _b64(self._gs2_header.encode("utf-8")):
            raise _Refused("channel binding c= is not the gs2 header of client-first")
        if not attrs[1][2:].endswith(self._nonce):
            raise _Refused("client-final nonce does not end with the nonce of server-first")
        proof = _b64decode(attrs[-1][2:])
        if proof is None or len(proof) != self._mech.digest_size:
            raise _Refused("client proof is not base64 of the hash's length")
        credential = self._credential
        assert credential is not None
        without_proof = text[:len(text) - len(attrs[-1]) - 1]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = self._mech.hmac(credential.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        if not hmac.compare_digest(self._mech.hash(client_key), credential.stored_key):
            raise _Refused(f"invalid client proof for {self._claimed!r} (wrong password)")
        server_signature = self._mech.hmac(credential.server_key, auth_message)
        self._state, self._credential = _COMPLETE, None
        return f"v={_b64(server_signature)}".encode("ascii")
