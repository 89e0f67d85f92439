"""A blocking, thread-safe connection to one Kafka node.

Rules and invariants:
- ``connect()`` opens the socket and negotiates versions with ApiVersions before anything else is sent:
  it asks with our highest ApiVersions version and, if the node answers UNSUPPORTED_VERSION (35) or with a
  body it cannot parse, reads the v0 body the node sends in that case. For every API both sides know, the
  usable range is the overlap of the node's range and our declarations (``protocol.messages.ALL``);
  ``version_for(api)`` picks the highest version in it (optionally capped by the caller).
- Any number of threads may send at once. Sends are serialized by one lock; each request gets the next
  correlation id and a ``ResponseFuture``; one reader thread per connection reads size-prefixed frames and
  completes the future whose correlation id the response carries (responses to abandoned requests are
  dropped).
- A request body is a dict, or a function of the chosen version returning the dict (so callers can build
  version-dependent shapes).
- Failure is total and clear: when the socket fails, the node closes it, a frame cannot be framed, or a
  request times out, the connection is closed and every pending future fails with
  ``KafkaConnectionError`` (the timed-out one with ``RequestTimedOutError``). A closed connection is never
  reused; the owner (``client.cluster``) opens a new one.
- A response body that fails to decode fails only its own future (framing is still intact).
- Security (``client.security.SecurityConfig``, default PLAINTEXT): for SSL/SASL_SSL the socket speaks TLS
  (``client.tls``; the node's certificate is checked against ``host``, the address we connect to) before
  ApiVersions. For SASL_PLAINTEXT/SASL_SSL, after ApiVersions: SaslHandshake v1 with the mechanism, then
  SaslAuthenticate (the highest of v0-2 both sides support) carrying the mechanism's tokens
  (``client.sasl``) until the mechanism is complete; only then does the reader thread start and
  ``connect()`` return. A refused login (an error code, or a SCRAM server we do not believe) raises
  ``SaslAuthenticationError`` naming the node, the security protocol, the mechanism and user, and Kafka's
  error name and message; a failed TLS handshake raises ``SslAuthenticationError``. Neither is a
  ``KafkaConnectionError``: nothing retries them. Re-authentication (KIP-368) is not done: a node that
  ends the session closes the connection, and the owner opens a new, freshly authenticated one.
"""

from __future__ import annotations

import itertools
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from typing import Any

from client.errors import (
    KafkaConnectionError,
    KafkaError,
    RequestTimedOutError,
    SaslAuthenticationError,
    SslAuthenticationError,
    UnsupportedVersionError,
)
from client.sasl import SaslMechanismError, mechanism_for
from client.security import PLAINTEXT, SecurityConfig
from client.tls import TlsTransport
from protocol import codec
from protocol.errors import ErrorCode, ProtocolError, error_name
from protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameReader
from protocol.messages import ALL

log = logging.getLogger(__name__)

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
CLIENT_SOFTWARE_NAME = "groupcoord-python"
CLIENT_SOFTWARE_VERSION = "0.1.0"

Body = dict[str, Any] | Callable[[int], dict[str, Any]]


class ResponseFuture:
    """The pending response to one request; completed once, by the reader thread or by a failure."""

    __slots__ = ("_conn", "_error", "_event", "_value", "api_key", "correlation_id", "version")

    def __init__(self, conn: BrokerConnection, api_key: int, version: int, correlation_id: int) -> None:
        self.api_key, self.version, self.correlation_id = api_key, version, correlation_id
        self._event = threading.Event()
        self._value: dict[str, Any] | None = None
        self._error: BaseException | None = None
        self._conn = conn

    def done(self) -> bool:
        return self._event.is_set()

    def failed(self) -> bool:
        return self._event.is_set() and self._error is not None

    def exception(self) -> BaseException | None:
        return self._error

    def _complete(self, value: dict[str, Any] | None, error: BaseException | None) -> None:
        if not self._event.is_set():
            self._value, self._error = value, error
            self._event.set()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait up to ``timeout_s`` for completion without failing the request; True when done."""
        return self._event.wait(timeout_s)

    def result(self, timeout_s: float | None = None) -> dict[str, Any]:
        """The decoded response body; raises the failure, or RequestTimedOutError (closing the connection)."""
        if not self._event.wait(timeout_s):
            err = RequestTimedOutError(
                f"no response to api {self.api_key} v{self.version} from {self._conn} in {timeout_s:.3f}s")
            self._conn.close(err, timed_out=self)
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


class BrokerConnection:
    """One TCP connection to one node (see the module rules)."""

    def __init__(self, host: str, port: int, *, client_id: str | None = "groupcoord-client",
                 request_timeout_ms: int = 30000, connect_timeout_ms: int = 10000,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, node_id: int | None = None,
                 security: SecurityConfig = PLAINTEXT, ssl_context: ssl.SSLContext | None = None) -> None:
        self.host, self.port, self.node_id = host, port, node_id
        self.security = security
        self._ssl_context = ssl_context
        if security.uses_tls and ssl_context is None:
            self._ssl_context = security.ssl_context()
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.max_frame_bytes = max_frame_bytes
        self.api_ranges: dict[int, tuple[int, int]] = {}
        self._sock: socket.socket | None = None
        self._sendall: Callable[[bytes], None] = _not_connected
        self._recv: Callable[[int], bytes] = _not_connected
        self._frames = FrameReader(max_frame_bytes)
        self._send_lock = threading.Lock()
        self._pending: dict[int, ResponseFuture] = {}
        self._pending_lock = threading.Lock()
        self._corr = itertools.count(1)
        self._closed_error: KafkaError | None = None
        self._reader: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port}>"

    # ------------------------------------------------------------------ lifecycle
    def connect(self) -> BrokerConnection:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout_ms / 1000)
        except OSError as e:
            raise KafkaConnectionError(f"cannot connect to {self.host}:{self.port}: {e}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        step = "ApiVersions"
        try:
            sock.settimeout(max(self.connect_timeout_ms, 1) / 1000)
            if self._ssl_context is not None:
                step = "the TLS handshake"
                self._start_tls(sock, self._ssl_context)
            else:
                self._sendall, self._recv = sock.sendall, sock.recv
            step = "ApiVersions"
            self.api_ranges = self._negotiate(sock)
            if self.security.uses_sasl:
                step = "SASL authentication"
                self._authenticate()
        except ssl.SSLError as e:
            sock.close()
            if isinstance(e, ssl.SSLEOFError | ssl.SSLZeroReturnError) and step != "the TLS handshake":
                raise KafkaConnectionError(f"{step} with {self.host}:{self.port} failed: {e}") from None
            why = (f"certificate verify failed: {e.verify_message}" if isinstance(e, ssl.SSLCertVerificationError)
                   else getattr(e, "reason", None) or str(e))
            raise SslAuthenticationError(f"TLS handshake with {self.host}:{self.port} "
                                         f"({self.security.security_protocol}) failed: {why}") from None
        except (OSError, ProtocolError) as e:
            sock.close()
            raise KafkaConnectionError(f"{step} with {self.host}:{self.port} failed: {e}") from None
        except KafkaError:
            sock.close()
            raise
        sock.settimeout(None)
        self._reader = threading.Thread(target=self._read_loop, name=f"kafka-reader-{self.host}:{self.port}",
                                        daemon=True)
        self._reader.start()
        return self

    @property
    def connected(self) -> bool:
        return self._sock is not None and self._closed_error is None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def close(self, error: KafkaError | None = None, timed_out: ResponseFuture | None = None) -> None:
        """Close the socket and fail every pending request (idempotent)."""
        with self._pending_lock:
            if self._closed_error is None:
                self._closed_error = error or KafkaConnectionError(f"connection to {self} closed")
            pending, self._pending = self._pending, {}
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        for fut in pending.values():
            if fut is timed_out:
                fut._complete(None, error)
            else:
                fut._complete(None, KafkaConnectionError(f"connection to {self} closed: {self._closed_error}"))
        if timed_out is not None:
            timed_out._complete(None, error)

    # ------------------------------------------------------------------ versions
    def version_for(self, api_key: int, max_version: int | None = None, min_version: int | None = None) -> int:
        """The highest version of ``api_key`` both sides support, within the caller's optional bounds."""
        rng = self.api_ranges.get(api_key)
        lo, hi = rng if rng else (1, 0)
        if max_version is not None:
            hi = min(hi, max_version)
        if min_version is not None:
            lo = max(lo, min_version)
        if lo > hi:
            raise UnsupportedVersionError(
                f"{self} supports no usable version of api {api_key} (node/ours: {rng}, wanted "
                f"{min_version}-{max_version})")
        return hi

    def supports(self, api_key: int) -> bool:
        return api_key in self.api_ranges

    # ------------------------------------------------------------------ requests
    def send_async(self, api_key: int, body: Body, *, version: int | None = None,
                   max_version: int | None = None) -> ResponseFuture:
        if version is None:
            version = self.version_for(api_key, max_version)
        payload = body(version) if callable(body) else body
        with self._send_lock:
            corr = next(self._corr) & 0x7FFFFFFF
            fut = ResponseFuture(self, api_key, version, corr)
            frame = codec.encode_request(api_key, version, corr, self.client_id, payload)
            with self._pending_lock:
                if self._closed_error is not None or self._sock is None:
                    raise KafkaConnectionError(f"{self} is not connected ({self._closed_error})")
                self._pending[corr] = fut
            try:
                self._sendall(frame)
            except OSError as e:
                self.close(KafkaConnectionError(f"send to {self} failed: {e}"))
        return fut

    def send(self, api_key: int, body: Body, *, timeout_ms: int | None = None, version: int | None = None,
             max_version: int | None = None) -> tuple[int, dict[str, Any]]:
        """Send one request and wait for its response: ``(version used, response body)``."""
        fut = self.send_async(api_key, body, version=version, max_version=max_version)
        timeout = (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000
        return fut.version, fut.result(timeout)

    # ------------------------------------------------------------------ internals
    def _start_tls(self, sock: socket.socket, context: ssl.SSLContext) -> None:
        tls = TlsTransport(sock, context, self.host)
        tls.handshake()
        self._sendall, self._recv = tls.sendall, tls.recv

    def _next_frame(self, during: str) -> bytes:
        """The next response frame before the reader thread runs (ApiVersions, SASL)."""
        while (payload := self._frames.next_frame()) is None:
            chunk = self._recv(65536)
            if not chunk:
                hint = (" (an SSL or SASL_SSL listener closes a PLAINTEXT client: check security_protocol)"
                        if during == "ApiVersions" and not self.security.uses_tls else "")
                raise KafkaConnectionError(f"{self.host}:{self.port} closed the connection during {during}{hint}")
            self._frames.feed(chunk)
        return payload

    def _negotiate(self, sock: socket.socket) -> dict[int, tuple[int, int]]:
        ours = ALL[API_VERSIONS].max_version
        frame = codec.encode_request(API_VERSIONS, ours, 0, self.client_id, {
            "client_software_name": CLIENT_SOFTWARE_NAME, "client_software_version": CLIENT_SOFTWARE_VERSION})
        self._sendall(frame)
        payload = self._next_frame("ApiVersions")
        body = None
        try:
            _, body = codec.decode_response(API_VERSIONS, ours, payload)
        except ProtocolError:
            pass
        if body is None or body["error_code"] == ErrorCode.UNSUPPORTED_VERSION:
            _, body = codec.decode_response(API_VERSIONS, 0, payload)
        if body["error_code"] not in (0, ErrorCode.UNSUPPORTED_VERSION):
            raise KafkaConnectionError(f"ApiVersions failed with error {body['error_code']}")
        return negotiate_ranges(body["api_keys"])

    def _exchange(self, api_key: int, version: int, body: dict[str, Any], during: str) -> dict[str, Any]:
        """One request and its response before the reader thread runs."""
        corr = next(self._corr) & 0x7FFFFFFF
        self._sendall(codec.encode_request(api_key, version, corr, self.client_id, body))
        got, resp = codec.decode_response(api_key, version, self._next_frame(during))
        if got != corr:
            raise KafkaConnectionError(f"{self} answered correlation id {got} to {corr} during {during}")
        return resp

    def _authenticate(self) -> None:
        sec = self.security
        assert sec.sasl_mechanism is not None and sec.sasl_username is not None and sec.sasl_password is not None
        who = f"SASL authentication with {sec.sasl_mechanism} as {sec.sasl_username!r} to {self.host}:{self.port} " \
              f"({sec.security_protocol} listener)"
        try:
            handshake_v = self.version_for(SASL_HANDSHAKE, max_version=1, min_version=1)
            auth_v = self.version_for(SASL_AUTHENTICATE)
        except UnsupportedVersionError:
            raise SaslAuthenticationError(f"{who} failed: the node offers no SaslHandshake v1 / SaslAuthenticate "
                                          "(is this a SASL listener?)") from None
        resp = self._exchange(SASL_HANDSHAKE, handshake_v, {"mechanism": sec.sasl_mechanism}, "SaslHandshake")
        if resp["error_code"]:
            code = resp["error_code"]
            offered = ", ".join(resp["mechanisms"]) or "none"
            hint = (f"; the listener offers: {offered}" if code == ErrorCode.UNSUPPORTED_SASL_MECHANISM else
                    " (is this a SASL listener?)" if code == ErrorCode.ILLEGAL_SASL_STATE else "")
            raise SaslAuthenticationError(f"{who} failed: {error_name(code)} ({code}){hint}", code)
        try:
            mechanism = mechanism_for(sec.sasl_mechanism, sec.sasl_username, sec.sasl_password)
            token: bytes | None = mechanism.first()
            while token is not None:
                resp = self._exchange(SASL_AUTHENTICATE, auth_v, {"auth_bytes": token}, "SaslAuthenticate")
                if resp["error_code"]:
                    code = resp["error_code"]
                    message = resp.get("error_message")
                    raise SaslAuthenticationError(
                        f"{who} failed: {error_name(code)} ({code})" + (f": {message}" if message else ""), code)
                token = mechanism.respond(resp["auth_bytes"] or b"")
                if token is None and not mechanism.complete:
                    raise SaslMechanismError("the exchange ended before the mechanism completed")
        except SaslMechanismError as e:
            raise SaslAuthenticationError(f"{who} refused: {e}") from None
        log.debug("%s: authenticated with %s as %r", self, sec.sasl_mechanism, sec.sasl_username)

    def _read_loop(self) -> None:
        reader = self._frames
        try:
            while True:
                chunk = self._recv(1 << 16)
                if not chunk:
                    raise KafkaConnectionError(f"{self} closed by the node")
                reader.feed(chunk)
                while (payload := reader.next_frame()) is not None:
                    self._dispatch(payload)
        except KafkaError as e:
            self.close(e)
        except (OSError, ProtocolError) as e:
            self.close(KafkaConnectionError(f"{self} failed: {e}"))

    def _dispatch(self, payload: bytes) -> None:
        corr = int.from_bytes(payload[:4], "big", signed=True)
        with self._pending_lock:
            fut = self._pending.pop(corr, None)
        if fut is None:
            log.debug("%s: dropping response to abandoned request %d", self, corr)
            return
        try:
            _, body = codec.decode_response(fut.api_key, fut.version, payload)
        except ProtocolError as e:
            fut._complete(None, KafkaConnectionError(f"undecodable response from {self}: {e}"))
            return
        fut._complete(body, None)


def _not_connected(*_: object) -> Any:
    raise OSError("not connected")


def negotiate_ranges(api_keys: list[dict[str, Any]]) -> dict[int, tuple[int, int]]:
    """Overlap of the node's advertised ranges with our declarations: api key -> (lowest, highest)."""
    ranges: dict[int, tuple[int, int]] = {}
    for entry in api_keys:
        schema = ALL.get(entry["api_key"])
        if schema is None:
            continue
        lo = max(entry["min_version"], schema.min_version)
        hi = min(entry["max_version"], schema.max_version)
        if lo <= hi:
            ranges[schema.key] = (lo, hi)
    return ranges
