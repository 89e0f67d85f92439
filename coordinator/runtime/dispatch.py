"""Request dispatch: what a connection needs to serve requests, and where each response goes.

Rules:
- Data flows one way: ``connection.py`` -> dispatch (this module) -> the services (``groups``, ``topics``,
  ``configs``, ...) -> storage and replication. A connection is given a ``RequestHandler`` (the broker is
  one), never the broker itself; a service is given each request's ``Slot`` and uses of its connection only
  what ``ClientConnection`` names. So neither imports ``connection.py`` nor ``broker.py``; only the
  composition roots (``broker.py``, ``server.py``) know every part.
- ``Slot``: a request's place in its connection's response order, and the token the core completes. Its
  ``merge`` (authorization only) rewrites the handler's body before it is encoded. It is completed once
  (``complete`` with a body, ``complete_frame`` with a frame already encoded; later calls are ignored, a
  frame that comes too late is dropped and its file ranges released); ``None`` means the request needs no
  response (Produce with acks=0). A Fetch answer's frame may be a zero-copy ``Answer`` (parts, file ranges
  among them: zero_copy.py), only on a connection whose ``zero_copy`` is true. A completion from outside
  the connection's own dispatching (``dispatching`` false: a rebalance, a durable write) wakes the
  connection, which sends what is ready in slot order (connection.py).
- ``RequestHandler``: exactly what ``Connection`` reads of the broker: ``config`` (its limits, read once),
  ``hot`` / ``hot_decoders`` (the hot path, by api key), ``handle`` (every other request), ``metrics``,
  ``connection_log`` (a protocol violation's one line), ``api_versions_body`` (the answer to an unsupported
  ApiVersions version) and ``connection_closed``.
- ``Handler``: one API's handler, ``(request, slot) -> None``; it completes the slot now or later and never
  raises for something a client sent (broker.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from protocol import codec

if TYPE_CHECKING:
    from coordinator.config import Config
    from coordinator.metrics import Metrics
    from coordinator.runtime.rate_limited_log import RateLimitedLog
    from protocol.codec import Request


Encoder = Callable[[int, int, int, dict[str, Any]], Any]  # (api key, version, correlation id, body) -> frame


class ClientConnection(Protocol):
    """What a slot and the services use of the connection a request came on (connection.Connection)."""

    host: str  # the client's address (JoinGroup's client_host)
    listener: str  # the name of the listener it came in on (Metadata and FindCoordinator answer per listener)
    principal: str  # "User:<name>" once authenticated; "User:ANONYMOUS" otherwise
    key: int  # unique for the process's life (the fsync child's name for the socket)
    dispatching: bool  # its reader is serving frames: it collects completions itself
    closed: bool  # ended, or being ended: nothing more is sent (a waiting fetch stops)
    handed: int  # slots at the head of the order handed to the fsync child (hand_off.py)
    hand_off_ok: bool  # false once the child could not write to it in full
    zero_copy: bool  # a socket without TLS: a Fetch answer may carry file ranges (zero_copy.py)

    @property
    def fd(self) -> int | None: ...

    def wake(self) -> None: ...

    def can_hand_off(self, slot: Slot) -> bool: ...

    def abort(self) -> None: ...


class Slot:
    """A request's place in its connection's response order; also the token the core completes."""

    __slots__ = ("api_key", "conn", "correlation_id", "done", "frame", "merge", "started", "version")

    def __init__(self, conn: ClientConnection, api_key: int, version: int, correlation_id: int,
                 started: float) -> None:
        self.conn = conn
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.frame: Any = None  # bytes, or a zero-copy Answer (zero_copy.py), once done; None: no response
        self.done = False
        self.started = started
        # set by authorization (security/api_acls.py): adds the denied resources' errors to the handler's body
        self.merge: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    def complete(self, body: dict[str, Any] | None, encode: Encoder = codec.encode_response) -> None:
        """Complete with a response body (None: the request needs no response); ``encode`` makes its frame
        (zero_copy.encode_answer: a Fetch answer whose records may be file ranges)."""
        if not self.done:
            if body is not None and self.merge is not None:
                body = self.merge(body)
            self.complete_frame(None if body is None else
                                encode(self.api_key, self.version, self.correlation_id, body))

    def complete_frame(self, frame: Any) -> None:
        """Complete with a response frame already encoded (a hot path's hand-built answer; a zero-copy
        ``Answer``). A slot already done drops it (an answer's file ranges are released)."""
        if self.done:
            release = getattr(frame, "release", None)
            if release is not None:
                release()
            return
        self.frame = frame
        self.done = True
        if not self.conn.dispatching:  # the reader collects what completes while it dispatches
            self.conn.wake()


Handler = Callable[["Request", Slot], None]


class RequestHandler(Protocol):
    """What a connection needs to serve its requests (broker.Broker is one)."""

    config: Config
    metrics: Metrics
    connection_log: RateLimitedLog
    # api key -> hot handler: request payload -> whole response frame, or None for the generic path
    hot: dict[int, Callable[[bytes], bytes | None]]
    # api key -> hot decoder: request payload -> the generic decoder's Request, or None (use the generic)
    hot_decoders: dict[int, Callable[[bytes], Request | None]]
    # optional (read with getattr): api key -> hot handler given the connection too, (conn, payload) -> frame
    # or None; the connection binds it to itself once (``hot_per_connection``)

    def handle(self, request: Request, slot: Slot) -> None: ...

    def api_versions_body(self, error: int = 0) -> dict[str, Any]: ...

    def connection_closed(self, conn: ClientConnection) -> None: ...
