"""SASL/PLAIN (RFC 4616) as Apache Kafka 3.9's PlainSaslServer serves it, checked against the user's stored
SCRAM credential (as Redpanda does: users are managed once, with AlterUserScramCredentials). Sans-IO.

Rules:
- One client token: ``authzid NUL username NUL password``, strict UTF-8, at most ``MAX_TOKEN_BYTES``. Split as
  Kafka splits it (at most four parts): not exactly three parts fails with "Invalid SASL/PLAIN response:
  expected 3 tokens, got N"; an empty username "Authentication failed: username not specified"; an empty
  password "Authentication failed: password not specified". Kafka's own messages, sent to the client.
- The password is checked against the user's SCRAM-SHA-512 credential if there is one, else SCRAM-SHA-256:
  ``SaltedPassword = PBKDF2(password UTF-8, stored salt, stored iterations)`` (no SASLprep, as Kafka's SCRAM),
  then ``H(HMAC(SaltedPassword, "Client Key"))`` is compared with the StoredKey in constant time. That PBKDF2
  is the expensive part: ``verify_plain`` is a pure function, and ``PlainServer.step`` hands it to the
  runtime as ``StepResult.work`` to run in a worker thread; ``resume(result)`` finishes the exchange.
- Wrong password, unknown user, or a stored credential unfit to log in with (fewer than 4096 iterations, keys
  of the wrong length): "Authentication failed: Invalid username or password". For an unknown (or unfit)
  user the same PBKDF2 work is still handed out, against a decoy SCRAM-SHA-512 credential with 4096
  iterations (a random StoredKey nothing matches), and the result is ignored: such a login takes as long as
  a real user's with 4096 iterations, so it does not return faster in an obvious way. (A user whose
  credential has more iterations takes longer; that difference remains.)
- After the password is verified (Kafka's order), a non-empty authzid different from the username fails with
  "Authentication failed: Client requested an authorization id that is different from username".
- Success answers an empty token; the principal is ``User:<username>``. One token per exchange: a second
  step, or a resume without pending work, fails.
"""

from __future__ import annotations

import functools
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from .sasl import MAX_TOKEN_BYTES, AuthenticationFailed, StepResult, user_principal
from .scram import (
    AUTHZID_MISMATCH,
    MIN_ITERATIONS,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    ScramMechanism,
    salted_password,
    scram_mechanism,
)

PLAIN = "PLAIN"
INVALID_CREDENTIALS = "Authentication failed: Invalid username or password"
USERNAME_MISSING = "Authentication failed: username not specified"
PASSWORD_MISSING = "Authentication failed: password not specified"

# the user's SCRAM credential for a mechanism, or None (the runtime's user store)
CredentialLookup = Callable[[str, ScramMechanism], ScramCredential | None]

_DECOY_MECHANISM = SCRAM_SHA_512
_DECOY = ScramCredential(salt=secrets.token_bytes(32), stored_key=secrets.token_bytes(64),
                         server_key=secrets.token_bytes(64), iterations=MIN_ITERATIONS)


@dataclass(frozen=True, slots=True)
class PlainResponse:
    authzid: str
    username: str
    password: str = field(repr=False)


def parse_plain(token: bytes) -> PlainResponse:
    """The client's PLAIN token -> its three parts; AuthenticationFailed with Kafka's message if malformed."""
    if len(token) > MAX_TOKEN_BYTES:
        raise AuthenticationFailed(INVALID_CREDENTIALS, f"PLAIN token of {len(token)} bytes exceeds "
                                                        f"{MAX_TOKEN_BYTES}")
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationFailed(INVALID_CREDENTIALS, "PLAIN token is not UTF-8") from None
    parts = text.split("\x00", 3)  # Kafka's extractTokens reads at most four
    if len(parts) != 3:
        raise AuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
    authzid, username, password = parts
    if not username:
        raise AuthenticationFailed(USERNAME_MISSING)
    if not password:
        raise AuthenticationFailed(PASSWORD_MISSING)
    return PlainResponse(authzid, username, password)


def verify_plain(password: str, credential: ScramCredential, mechanism: str | ScramMechanism) -> bool:
    """Whether ``password`` is the one ``credential`` was derived from. Pure; PBKDF2: run it off the loop."""
    mech = scram_mechanism(mechanism)
    salted = salted_password(mech, password, credential.salt, credential.iterations)
    stored_key = mech.hash(mech.hmac(salted, b"Client Key"))
    return hmac.compare_digest(stored_key, credential.stored_key)


def credential_for_plain(username: str, lookup: CredentialLookup) -> tuple[ScramMechanism, ScramCredential] | None:
    """The credential PLAIN checks: the user's SCRAM-SHA-512 one if present, else SCRAM-SHA-256, else None."""
    for mech in (SCRAM_SHA_512, SCRAM_SHA_256):
        credential = lookup(username, mech)
        if credential is not None:
            return mech, credential
    return None


_WAITING, _WORKING, _COMPLETE, _FAILED = "waiting", "working", "complete", "failed"


class PlainServer:
    """The server side of one PLAIN exchange (see the module docstring); implements ``sasl.Exchange``."""

    def __init__(self, lookup: CredentialLookup) -> None:
        self._lookup = lookup
        self._state = _WAITING
        self._username = ""  # the username the token named; authenticated only once complete
        self._authzid = ""
        self._real = False  # the pending work checks the user's own credential (not the decoy)
        self._reason = ""

    @property
    def mechanism(self) -> str:
        return PLAIN

    @property
    def complete(self) -> bool:
        return self._state == _COMPLETE

    @property
    def failed(self) -> bool:
        return self._state == _FAILED

    @property
    def username(self) -> str | None:
        return self._username if self._state == _COMPLETE else None

    @property
    def attempted_username(self) -> str:
        """The username the client named (unauthenticated; for the server's log only)."""
        return self._username

    @property
    def principal(self) -> str | None:
        username = self.username
        return None if username is None else user_principal(username)

    def step(self, token: bytes) -> StepResult:
        """Parse the token and look the user up (cheap); answers the PBKDF2 check as ``work``."""
        if self._state != _WAITING:
            raise self._fail(INVALID_CREDENTIALS, f"PLAIN token received in state {self._state}")
        try:
            response = parse_plain(token)
            found = credential_for_plain(response.username, self._lookup)
        except AuthenticationFailed as e:
            raise self._fail(e.message, e.reason) from None
        except BaseException:
            self._state = _FAILED
            raise
        self._username, self._authzid = response.username, response.authzid  # the password stays in work only
        mech, credential = found if found is not None else (_DECOY_MECHANISM, _DECOY)
        self._real = found is not None
        if found is None:
            self._reason = f"unknown user {response.username!r}"
        elif credential.iterations < MIN_ITERATIONS or len(credential.stored_key) != mech.digest_size:
            self._real = False
            self._reason = f"stored {mech.name} credential of {response.username!r} is unfit for a login"
            mech, credential = _DECOY_MECHANISM, _DECOY
        self._state = _WORKING
        return StepResult(b"", done=False, work=functools.partial(verify_plain, response.password, credential,
                                                                  mech))

    def resume(self, outcome: object) -> StepResult:
        """``outcome``: what the step's ``work()`` returned (True: the password matches)."""
        if self._state != _WORKING:
            raise self._fail(INVALID_CREDENTIALS, f"resume in state {self._state}")
        if not self._real:
            raise self._fail(INVALID_CREDENTIALS, self._reason)
        if outcome is not True:
            raise self._fail(INVALID_CREDENTIALS, f"wrong password for {self._username!r}")
        if self._authzid and self._authzid != self._username:
            raise self._fail(AUTHZID_MISMATCH, f"authzid {self._authzid!r} differs from username")
        self._state = _COMPLETE
        return StepResult(b"", done=True)

    def _fail(self, message: str, reason: str) -> AuthenticationFailed:
        self._state = _FAILED
        return AuthenticationFailed(message, reason)
