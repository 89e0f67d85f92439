"""A SASL listener's connection before (and between) authentications: Kafka's SaslServerAuthenticator.

Sans-IO: ``on_frame(payload, now_ms)`` takes one whole request frame (without its size) and returns a
``Decision`` the runtime carries out; a mechanism step that costs CPU (PLAIN's PBKDF2) comes back as a
``WORK`` decision whose job the runtime runs off the event loop, then ``resume(result, now_ms)``. The
mechanisms are ``coordinator.core.security.mechanisms`` exchanges (``sasl.py`` states their contract).

Rules (Kafka 3.9, SaslServerAuthenticator and KafkaApis):
- States: ``INITIAL`` (ApiVersions or SaslHandshake), ``HANDSHAKE`` (after one ApiVersions: SaslHandshake
  only), ``AUTHENTICATE`` (handshake v1: SaslAuthenticate v0-2 frames carry the tokens), ``RAW`` (handshake
  v0: every frame IS a token, no header, and the answers are bare length-prefixed tokens), ``WORKING`` (a
  step's job is out), ``COMPLETE`` (authenticated), ``FAILED``.
- Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are served; anything else
  closes the connection with no answer. A second ApiVersions closes too; an ApiVersions of a version we do
  not serve is served (it answers error 35) and the state stays, so the client may retry lower.
- SaslHandshake names a mechanism: an enabled one answers error 0 with the enabled list; another answers
  UNSUPPORTED_SASL_MECHANISM with the enabled list, then the connection is closed (a failed
  authentication). Versions other than 0-1 close.
- SaslAuthenticate: each token gets one answer with the mechanism's reply (empty bytes when it has none);
  ``session_lifetime_ms`` is 0 until the exchange completes, then ``connections.max.reauth.ms`` (0 = none).
  A failure answers SASL_AUTHENTICATION_FAILED with the mechanism's message (SCRAM's is generic: it never
  tells whether the user exists), then the connection is closed after the failed-authentication delay.
  In RAW mode there is no way to report an error: the connection is closed after the delay.
- ``max_frame``: ``sasl.server.max.receive.size`` until COMPLETE (a larger frame closes), then the
  connection's own limit.
- KIP-368: with a lifetime, a request other than SaslHandshake arriving at or after the session's expiry
  closes the connection with no answer. A SaslHandshake on a COMPLETE connection with a lifetime, at least
  ``MIN_REAUTH_MS`` after the last authentication, starts a re-authentication: no ApiVersions step, the same
  mechanism (else a failure), and it must end with the same principal (else SASL_AUTHENTICATION_FAILED
  "Cannot change principals during re-authentication from X: Y"). Otherwise SaslHandshake and
  SaslAuthenticate after authentication are served (the broker answers them ILLEGAL_SASL_STATE, the
  connection stays open), as is every other request.
- A frame whose header cannot be read, or a token the codec cannot decode, closes the connection.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coordinator.core.security.sasl import AuthenticationFailed, Exchange, StepResult
from protocol import codec
from protocol.errors import ErrorCode, ProtocolError

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
MAX_API_VERSIONS = 4
MIN_REAUTH_MS = 1000


class State(enum.Enum):
    INITIAL = "initial"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    RAW = "raw"
    WORKING = "working"
    COMPLETE = "complete"
    FAILED = "failed"


class Kind(enum.Enum):
    SERVE = "serve"  # dispatch the frame as any request
    ANSWER = "answer"  # send ``frame``; go on reading
    FAIL = "fail"  # send ``frame`` (if any), then close after the failed-authentication delay
    CLOSE = "close"  # close now, send nothing
    WORK = "work"  # run ``job`` off the event loop, then call ``resume`` with its result


@dataclass(frozen=True, slots=True)
class Decision:
    kind: Kind
    frame: bytes | None = None
    reason: str = ""
    job: Callable[[], object] | None = None
    succeeded: bool = False  # an authentication completed with this decision (for metrics and the log)


# mechanism name, whether this is a re-authentication -> a fresh server exchange (mechanisms.start)
Starter = Callable[[str, bool], Exchange]


class SaslGate:
    def __init__(self, mechanisms: tuple[str, ...], start: Starter, max_receive: int, lifetime_ms: int = 0
                 ) -> None:
        self.mechanisms = mechanisms
        self.start = start
        self.max_receive = max_receive
        self.lifetime_ms = lifetime_ms
        self.state = State.INITIAL
        self.mechanism: str | None = None
        self.principal: str | None = None
        self.expires_ms: int | None = None  # session end (with a lifetime)
        self.authenticated_ms: int | None = None
        self.reauthenticating = False
        self._exchange: Exchange | None = None
        self._pending: tuple[int, int] | None = None  # (version, correlation id) of the SaslAuthenticate out
        self._resume_to = State.AUTHENTICATE

    @property
    def complete(self) -> bool:
        return self.state is State.COMPLETE

    @property
    def max_frame(self) -> int | None:
        """The frame limit while authenticating; None once authenticated (the connection's own)."""
        return None if self.state is State.COMPLETE else self.max_receive

    # ---------------------------------------------------------------- frames
    def on_frame(self, payload: bytes, now_ms: int) -> Decision:
        state = self.state
        if state is State.COMPLETE:
            return self._after_auth(payload, now_ms)
        if state is State.RAW:
            return self._token(payload, None, now_ms)
        if state in (State.WORKING, State.FAILED):
            return self._fail_close("a request arrived while an authentication step was under way"
                                    if state is State.WORKING else "a request after a failed authentication")
        try:
            api_key, version, correlation_id = _ids(payload)
        except ProtocolError as e:
            return self._fail_close(f"not a Kafka request before authentication: {e}")
        if state is State.INITIAL and api_key == API_VERSIONS:
            if version <= MAX_API_VERSIONS:
                self.state = State.HANDSHAKE
            return Decision(Kind.SERVE)
        if state in (State.INITIAL, State.HANDSHAKE) and api_key == SASL_HANDSHAKE:
            return self._handshake(payload, now_ms)
        if state is State.AUTHENTICATE and api_key == SASL_AUTHENTICATE:
            try:
                request = codec.decode_request(payload)
            except ProtocolError as e:
                return self._fail_close(f"undecodable SaslAuthenticate: {e}")
            return self._token(bytes(request.body["auth_bytes"]), (version, correlation_id), now_ms)
        return self._fail_close(f"api key {api_key} is not allowed in SASL state {state.value}")

    def _handshake(self, payload: bytes, now_ms: int) -> Decision:
        try:
            request = codec.decode_request(payload)
        except ProtocolError as e:
            return self._fail_close(f"undecodable SaslHandshake: {e}")
        version, corr = request.version, request.header.correlation_id
        mechanism = request.body["mechanism"]
        listed = list(self.mechanisms)
        if mechanism not in self.mechanisms or (self.reauthenticating and mechanism != self.mechanism):
            self.state = State.FAILED
            error = ErrorCode.UNSUPPORTED_SASL_MECHANISM
            reason = f"unsupported SASL mechanism {mechanism!r}" if mechanism not in self.mechanisms else \
                f"re-authentication must use {self.mechanism}, not {mechanism}"
            return Decision(Kind.FAIL, codec.encode_response(SASL_HANDSHAKE, version, corr, {
                "error_code": error, "mechanisms": listed}), reason)
        self.mechanism = mechanism
        self._exchange = self.start(mechanism, self.reauthenticating)
        self.state = State.AUTHENTICATE if version >= 1 else State.RAW
        self._resume_to = self.state
        return Decision(Kind.ANSWER, codec.encode_response(SASL_HANDSHAKE, version, corr,
                                                           {"error_code": 0, "mechanisms": listed}))

    def _token(self, token: bytes, wrapped: tuple[int, int] | None, now_ms: int) -> Decision:
        exchange = self._exchange
        assert exchange is not None
        self._pending = wrapped
        try:
            step = exchange.step(token)
        except AuthenticationFailed as e:
            return self._failed(e)
        return self._apply(exchange, step, now_ms)

    def resume(self, result: Any, now_ms: int) -> Decision:
        """The job of a WORK decision returned ``result``."""
        exchange = self._exchange
        if self.state is not State.WORKING or exchange is None:
            return self._fail_close("a job's result arrived in the wrong state")
        self.state = self._resume_to
        try:
            step = exchange.resume(result)
        except AuthenticationFailed as e:
            return self._failed(e)
        return self._apply(exchange, step, now_ms)

    def _apply(self, exchange: Exchange, step: StepResult, now_ms: int) -> Decision:
        if step.work is not None:
            self.state = State.WORKING
            return Decision(Kind.WORK, job=step.work)
        if not step.done:
            return Decision(Kind.ANSWER, self._answer(step.reply, 0, 0, None))
        principal = exchange.principal
        if self.reauthenticating and principal != self.principal:
            why = f"Cannot change principals during re-authentication from {self.principal}: {principal}"
            return self._failed(AuthenticationFailed(why))
        self.principal = principal
        self.state = State.COMPLETE
        self.reauthenticating = False
        self.authenticated_ms = now_ms
        self.expires_ms = now_ms + self.lifetime_ms if self.lifetime_ms > 0 else None
        self._exchange = None
        return Decision(Kind.ANSWER, self._answer(step.reply, 0, self.lifetime_ms, None), succeeded=True)

    def _failed(self, e: AuthenticationFailed) -> Decision:
        """The client is told ``e.message`` (Kafka's words); the log gets ``e.reason``."""
        self.state = State.FAILED
        self._exchange = None
        if self._pending is None:  # RAW: no way to say why
            return Decision(Kind.FAIL, None, e.reason)
        return Decision(Kind.FAIL, self._answer(b"", ErrorCode.SASL_AUTHENTICATION_FAILED, 0, e.message), e.reason)

    def _answer(self, reply: bytes, error: int, lifetime_ms: int, message: str | None) -> bytes:
        if self._pending is None:
            return len(reply).to_bytes(4, "big") + reply
        version, corr = self._pending
        return codec.encode_response(SASL_AUTHENTICATE, version, corr, {
            "error_code": error, "error_message": message, "auth_bytes": reply, "session_lifetime_ms": lifetime_ms})

    def _fail_close(self, reason: str) -> Decision:
        self.state = State.FAILED
        self._exchange = None
        return Decision(Kind.CLOSE, reason=reason)

    # ---------------------------------------------------------------- authenticated
    def _after_auth(self, payload: bytes, now_ms: int) -> Decision:
        if self.expires_ms is None:
            return Decision(Kind.SERVE)
        api_key = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else -1
        if api_key == SASL_HANDSHAKE and self.authenticated_ms is not None and \
                now_ms - self.authenticated_ms >= MIN_REAUTH_MS:
            self.reauthenticating = True
            return self._handshake(payload, now_ms)
        if now_ms >= self.expires_ms and api_key != SASL_HANDSHAKE:
            return self._fail_close(f"SASL session of {self.principal} expired without re-authentication")
        return Decision(Kind.SERVE)


def _ids(payload: bytes) -> tuple[int, int, int]:
    if len(payload) < 8:
        raise ProtocolError(f"a request of {len(payload)} bytes")
    return (int.from_bytes(payload[0:2], "big", signed=True), int.from_bytes(payload[2:4], "big", signed=True),
            int.from_bytes(payload[4:8], "big", signed=True))
