"""The contract every SASL mechanism's server side keeps (``scram.py``, ``plain.py``), sans-IO.

Rules:
- An exchange serves one authentication of one connection. The runtime feeds it the client's tokens in order
  with ``step(token)``; each step answers a ``StepResult``: the ``reply`` token to send and whether the
  exchange is ``done`` (then ``principal`` is ``User:<username>``). Kafka's SaslHandshake v0 raw tokens and
  SaslAuthenticate v1 ``auth_bytes`` are the same tokens: the exchange does not know how they travel.
- A step that needs an expensive pure computation (PLAIN: PBKDF2 of the offered password) does not do it: it
  answers a result with ``work`` set (and no reply). The runtime calls ``work()`` off the event loop (a worker
  thread; it touches no exchange state and does not raise for any input the exchange built it from), then
  ``resume(work's return value)`` on the loop, which answers the next ``StepResult``. SCRAM never needs work:
  the server holds stored keys, so verifying a login is a few HMACs.
- Every failure raises ``AuthenticationFailed``: ``message`` is what Kafka would send the client (SaslAuthenticate
  ``error_message``), ``reason`` the specific cause for the server's own log, never for the client. After a
  failure, after success, or out of order, any further call fails: an exchange is used once.
- Tokens longer than ``MAX_TOKEN_BYTES`` fail before they are parsed (the runtime also caps frames with
  ``sasl.server.max.receive.size``); no mechanism of ours has a legitimate token near that size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

MAX_TOKEN_BYTES = 4096
USER_PRINCIPAL_PREFIX = "User:"


class AuthenticationFailed(Exception):
    """An authentication failure: ``message`` for the client (as Kafka words it), ``reason`` for our log."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason or message

    def __str__(self) -> str:
        return self.message


def generic_failure_message(mechanism: str, reauthentication: bool = False) -> str:
    """Kafka's SaslServerAuthenticator message for a mechanism's SaslException (e.g. every SCRAM failure)."""
    phase = "re-authentication" if reauthentication else "authentication"
    return f"Authentication failed during {phase} due to invalid credentials with SASL mechanism {mechanism}"


def user_principal(username: str) -> str:
    return USER_PRINCIPAL_PREFIX + username


@dataclass(frozen=True, slots=True)
class StepResult:
    reply: bytes  # the token to send the client (may be empty: PLAIN's success)
    done: bool  # True: authenticated, the exchange's principal is set
    work: Callable[[], object] | None = None  # set: run it off the loop, then exchange.resume(its result)

    def __post_init__(self) -> None:
        if self.work is not None and (self.reply or self.done):
            raise ValueError("a step that needs work has no reply yet and is not done")


class Exchange(Protocol):
    """What the runtime's SASL state machine drives (see the module docstring)."""

    @property
    def mechanism(self) -> str: ...

    @property
    def complete(self) -> bool: ...

    @property
    def username(self) -> str | None: ...  # the authenticated user once complete, else None

    @property
    def principal(self) -> str | None: ...  # "User:<username>" once complete, else None

    def step(self, token: bytes) -> StepResult: ...

    def resume(self, outcome: object) -> StepResult: ...
