"""One client connection: read frames, dispatch, write responses in request order.

Rules:
- Each request gets a ``Slot`` in arrival order; a slot completes now or later (a JoinGroup that waits for
  the rebalance, an OffsetCommit that waits for its fsync). The writer sends completed slots strictly in
  slot order, batching every consecutive completed slot into one ``send_all``.
- At most ``max.inflight.requests.per.connection`` slots are open; the reader stops reading until the writer
  frees one (back-pressure instead of unbounded buffering).
- Anything undecodable (``ProtocolError``: a frame over ``socket.request.max.bytes``, a malformed body, an
  unknown API, an unsupported version) closes the connection with one log line. ApiVersions with a version
  we do not support is answered with error 35 and a v0 body, as Kafka does.
- A slot whose request needs no response (Produce with acks=0) completes with ``None`` and writes nothing.
- When the connection ends, pending slots are dropped and the broker is told (``connection_closed``).
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Any

import trio

from protocol import codec
from protocol.errors import ErrorCode, ProtocolError
from protocol.framing import FrameReader

if TYPE_CHECKING:
    from coordinator.runtime.broker import Broker

log = logging.getLogger("groupcoord.connection")

API_VERSIONS = 18


class Slot:
    """A request's place in its connection's response order; also the token the core completes."""

    __slots__ = ("api_key", "conn", "correlation_id", "done", "frame", "started", "version")

    def __init__(self, conn: Connection, api_key: int, version: int, correlation_id: int, started: float) -> None:
        self.conn = conn
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.frame: bytes | None = None
        self.done = False
        self.started = started

    def complete(self, body: dict[str, Any] | None) -> None:
        if self.done:
            return
        if body is not None:
            self.frame = codec.encode_response(self.api_key, self.version, self.correlation_id, body)
        self.done = True
        self.conn.wake()


class Connection:
    def __init__(self, stream: trio.SocketStream, broker: Broker, peer: str) -> None:
        self.stream = stream
        self.broker = broker
        self.peer = peer
        self.host = peer.rsplit(":", 1)[0]
        self.client_id: str | None = None
        self.slots: deque[Slot] = deque()
        self.reader = FrameReader(broker.config["socket.request.max.bytes"])
        self.max_inflight = broker.config["max.inflight.requests.per.connection"]
        self._wake = trio.Event()
        self._room = trio.Event()
        self.closed = False

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_loop)
                try:
                    await self._read_loop()
                finally:
                    # drain what has completed, then stop the writer
                    self.closed = True
                    self.wake()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError) as group:
            # arrives wrapped by the nursery; e.g. ECONNRESET from a client killed with unread data
            log.debug("connection %s ended: %s", self.peer, group.exceptions[0])
        except* Exception:  # a bug in one connection closes that connection, never the server
            log.exception("connection %s failed; closing it", self.peer)
        finally:
            self.broker.connection_closed(self)
            with trio.move_on_after(1):
                await self.stream.aclose()

    async def _read_loop(self) -> None:
        while True:
            data = await self.stream.receive_some(65536)
            if not data:
                return
            self.reader.feed(data)
            while True:
                # the cap holds per frame: one read may carry thousands of small requests
                while len(self.slots) >= self.max_inflight:
                    self._room = trio.Event()
                    await self._room.wait()
                try:
                    payload = self.reader.next_frame()
                    if payload is None:
                        break
                    self._dispatch(payload)
                except ProtocolError as e:
                    self.broker.metrics.protocol_error(type(e).__name__)
                    log.warning("closing connection %s (client %s): %s", self.peer, self.client_id, e)
                    return

    def _dispatch(self, payload: bytes) -> None:
        now = trio.current_time()
        try:
            request = codec.decode_request(payload)
        except codec.UnsupportedVersion as e:
            if e.api_key != API_VERSIONS:
                raise
            slot = Slot(self, API_VERSIONS, 0, e.correlation_id, now)
            self.slots.append(slot)
            slot.complete(self.broker.api_versions_body(ErrorCode.UNSUPPORTED_VERSION))
            return
        header = request.header
        self.client_id = header.client_id
        slot = Slot(self, header.api_key, header.api_version, header.correlation_id, now)
        self.slots.append(slot)
        self.broker.handle(request, slot)

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            out = []
            popped = False
            while self.slots and self.slots[0].done:
                slot = self.slots.popleft()
                popped = True
                if slot.frame is not None:
                    out.append(slot.frame)
                self.broker.metrics.request_done(slot.api_key, trio.current_time() - slot.started)
            if popped:
                self._room.set()
            if out:
                await self.stream.send_all(b"".join(out) if len(out) > 1 else out[0])
            if self.closed and (not self.slots or not self.slots[0].done):
                return
