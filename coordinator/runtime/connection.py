"""One client connection: read frames, dispatch, write responses in request order.

Rules:
- A connection is given a ``RequestHandler`` (dispatch.py; the broker is one), not the broker: it reads of
  it only what that protocol names, and its slots (``dispatch.Slot``) are all the services see of it
  (``dispatch.ClientConnection``). Imports flow one way: connection -> dispatch -> services.
- Each request gets a ``Slot`` in arrival order; a slot completes now or later (a JoinGroup that waits for
  the rebalance, an OffsetCommit that waits for its fsync). Completed slots leave strictly in slot order:
  every consecutive completed slot at the head moves to the output list, and the output list goes out in
  one ``send_all``. One send at a time: whoever finds a send under way waits for it and then sends what
  has gathered meanwhile.
- Hot path: a request whose API has a hot decoder (``handler.hot_decoders``) is decoded by it (None: by the
  generic codec). A request whose API has a hot handler (``handler.hot``) is first offered to it; a frame it
  returns is the answer, with no slot when nothing is pending ahead of it (it goes straight to the output
  list), else as an already-completed slot, so the order still holds. ``None`` means the generic path. A hot
  handler in ``handler.hot_per_connection`` is given the connection first (bound once, when it opens).
- Reading a socket: the run's poller (poller.py) calls ``on_readable`` when the socket has data; it reads
  once (up to 64 KiB), serves every whole frame, and sends what completed meanwhile itself, as a
  framed-echo server would (one ``os.write`` straight to the descriptor); what the kernel does not take,
  and what completes later (parked requests, durable writes), the writer task sends, parking in trio's
  ``wait_writable`` only on EAGAIN. No task parks per connection to read: the poller's one wake-up per
  batch of ready sockets replaces a scheduler round trip and two epoll changes per request.
  In-memory test streams (no socket) are read by the connection's own task with the stream API.
- Metrics of hot answers are taken once per read (each counts the read's time as its latency): the
  per-frame work is the frame split, the handler and one list append.
- At most ``max.inflight.requests.per.connection`` slots are open; at the cap the serving stops (the rest
  of the read stays in the frame reader) and the socket leaves the poller; the connection's task waits for
  the writer to free room, serves what was left, and gives the socket back to the poller (back-pressure
  instead of unbounded buffering). Likewise when the kernel did not take a read's answers at once: the
  socket leaves the poller until they are sent, so a client that sends and never reads holds at most one
  read's answers here.
- Anything undecodable (``ProtocolError``: a frame over ``socket.request.max.bytes``, a malformed body, an
  unknown API, an unsupported version) closes the connection with one log line. ApiVersions with a version
  we do not support is answered with error 35 and a v0 body, as Kafka does.
- A slot whose request needs no response (Produce with acks=0) completes with ``None`` and writes nothing.
- When the connection ends, pending slots are dropped and the request handler is told (``connection_closed``).
- Security (``security``: the listener's ``ListenerSecurity``; None = PLAINTEXT as before, byte for byte):
  a TLS listener's connection handshakes first (``security/tls_session.py``: the crypto in a worker thread;
  a failed handshake is one log line and a close), then takes the same poller path as PLAINTEXT, its reads
  decrypted and its writes sealed into records on the way (a partial write's rest is kept sealed,
  ``_Sealed``); never the fsync child's hand-off (it cannot speak TLS). A stream without a socket (tests)
  uses ``trio.SSLStream`` and the stream API. A SASL listener's frames go through the
  connection's ``SaslGate`` (core/security/sasl_gate.py) while it guards (until authenticated, and with a
  session lifetime for good): ``_admit`` serves, answers, closes, or runs a mechanism's job in a worker
  thread; a failed authentication's answer goes out, then the connection closes after
  ``connection.failed.authentication.delay.ms``. Frames are capped at ``sasl.server.max.receive.size``
  until authenticated. ``principal`` is the authenticated ``User:<name>`` (``User:ANONYMOUS`` otherwise).
- Hand-off: a slot may be handed to the fsync child, which writes its answer to this socket itself once its
  write is durable (hand_off.py). Handed slots are always a prefix of the slot order, and a slot may be
  handed only when every slot ahead of it is handed and nothing of ours is waiting to be sent or being sent
  (``can_hand_off``): so the child's bytes go out exactly where the slot stands. Until the child reports
  the write, a handed slot is not done, so nothing behind it goes out. A connection the child could not
  write to in full is never handed to again (``hand_off_ok``). ``abort()`` ends the connection at once
  (socket shut down both ways, its task cancelled): what the child may or may not have written is unknown.
- Zero-copy Fetch answers (zero_copy.py): ``zero_copy`` is true for a socket without TLS (PLAINTEXT,
  SASL_PLAINTEXT); the Fetch handler then may complete a slot with an ``Answer`` whose records are file
  ranges. Collected, an answer's parts join the output list in order (``_mixed`` is then set until the list
  is empty), and the list goes out through ``zero_copy.send_items`` (bytes by ``write``, ranges by
  ``sendfile``), with the same partial-write rules: what the kernel does not take stays at the head and the
  writer task sends it on ``wait_writable``; budgets count a range by its length. A send that meets a range
  whose file shrank, or any send error, ends the connection (a shrunk range: ``abort``, one warning line:
  its frame's length went out already). Ranges are released (closed) once sent, or when the connection
  ends with answers still held (output list, slots, a send under way). Without ranges every path is byte
  for byte what it was.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import ssl
from collections import deque
from functools import partial
from typing import TYPE_CHECKING

import trio

from coordinator.runtime.dispatch import Slot
from coordinator.runtime.poller import Poller
from coordinator.runtime.zero_copy import Answer, RangeShrunk, release, send_items
from protocol import codec
from protocol.errors import ErrorCode, ProtocolError
from protocol.framing import FrameReader, FrameTooLarge

if TYPE_CHECKING:
    from coordinator.core.security.sasl_gate import Decision, SaslGate
    from coordinator.runtime.dispatch import RequestHandler
    from coordinator.runtime.security.listener_security import ListenerSecurity
    from coordinator.runtime.security.tls_session import TlsSession

log = logging.getLogger("groupcoord.connection")

API_VERSIONS = 18
READ_BYTES = 65536
TURN_REQUESTS = 128  # frames one turn serves of one connection before the others get theirs
DONE, FULL, TURN = 0, 1, 2  # what stopped a turn: the frames read ran out, a budget is full, the turn's share
ANONYMOUS = "User:ANONYMOUS"
SASL_HANDSHAKE = 17
_keys = itertools.count(1)  # connection keys: unique for the process's life (never reused like fds)


class _Sealed(bytes):
    """TLS records ready for the socket (a partial write's rest, or what a read owes the peer): never sealed
    again."""

    __slots__ = ()


class Connection:
    def __init__(self, stream: trio.abc.Stream, handler: RequestHandler, peer: str,
                 security: ListenerSecurity | None = None, listener: str = "PLAINTEXT") -> None:
        self.stream = stream
        self.handler = handler
        self.peer = peer
        self.host = peer.rsplit(":", 1)[0]
        self.client_id: str | None = None
        self.slots: deque[Slot] = deque()
        self.security = security
        self.listener = security.name if security is not None else listener  # its name, whatever its protocol
        self.principal = ANONYMOUS
        self._ssl_context = security.ssl_context() if security is not None else None
        self.gate: SaslGate | None = security.new_gate() if security is not None else None
        self._guard = self.gate  # the gate while frames must pass it (None: every frame is served)
        self._close_delay = 0.0  # seconds between a failed authentication's answer and the close
        self._read_scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        max_frame = handler.config["socket.request.max.bytes"]
        self.reader = FrameReader(max_frame if self.gate is None else min(max_frame, self.gate.max_receive))
        self.max_inflight = handler.config["max.inflight.requests.per.connection"]
        self.budget = handler.config["socket.max.pending.response.bytes"]
        self.last_request = trio.current_time()  # when a whole request was last read (idle reaping)
        self.deferred = False  # in the poller's backlog: whole frames wait in the reader for a turn
        self.dispatching = False
        self._hot_decoders = handler.hot_decoders
        # api key -> hot handler; those that need the connection (``hot_per_connection``) bound to this one
        per_connection = getattr(handler, "hot_per_connection", None)
        self._hot = {**handler.hot, **{k: partial(h, self) for k, h in per_connection.items()}} \
            if per_connection else handler.hot
        self._out: list = []  # response frames ready to send, all ahead of every slot (zero-copy: their parts)
        self._mixed = False  # _out may hold file ranges and memoryviews (zero_copy.send_items sends it)
        self._sending = False
        self._sent: trio.Event | None = None  # made by the first to wait for a send under way
        self._wake = trio.Event()
        self._room = trio.Event()
        self.closed = False
        sock = getattr(stream, "socket", None)
        self._fd: int | None = sock.fileno() if sock is not None else None  # trio's socket owns and closes it
        # TLS on a socket: records through the same fast path (tls_session.py); on other streams, trio.SSLStream
        self._tls: TlsSession | None = None
        if self._ssl_context is not None and self._fd is not None:
            from coordinator.runtime.security.tls_session import TlsSession

            self._tls = TlsSession(self._ssl_context)
        elif self._ssl_context is not None:
            self._fd = None
        self.zero_copy = self._fd is not None and self._ssl_context is None  # Fetch may answer with file ranges
        self.key = next(_keys)
        self.handed = 0  # slots at the head of the order handed to the fsync child
        self.hand_off_ok = self._fd is not None and self._ssl_context is None  # the child cannot speak TLS
        self._scope: trio.CancelScope | None = None
        self._ended: BaseException | bool | None = None  # why reading ended: True (EOF, protocol error) or an error
        self._paused = trio.Event()  # set when the poller stopped reading (the cap) or reading ended

    @property
    def fd(self) -> int | None:
        return self._fd

    @property
    def ended(self) -> bool:
        """Reading has ended (EOF, an error, a protocol violation)."""
        return self._ended is not None

    def can_hand_off(self, slot: Slot) -> bool:
        """Whether ``slot``'s answer may be written by the fsync child now: every slot ahead of it is
        handed, and nothing of ours is waiting to be sent or being sent."""
        slots = self.slots
        return (self.hand_off_ok and not self.closed and not self._out and not self._sending
                and len(slots) > self.handed and slots[self.handed] is slot)

    def abort(self) -> None:
        """End the connection now (the fsync child may hold a copy of the socket: shut it down both ways)."""
        self.closed = True
        self.hand_off_ok = False
        sock = getattr(self.stream, "socket", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._scope is not None:
            self._scope.cancel()

    def wake(self) -> None:
        """A slot completed outside this connection's reader (a rebalance, a durable write). When it was the
        last one pending and no send is under way, what is ready goes out now, from the caller's turn;
        otherwise, and for whatever is left (EAGAIN, a partial write, an error), the writer task is woken:
        it batches, waits and meets errors."""
        fd = self._fd
        if fd is not None and not self._sending and not self.closed:
            self._collect()
            if not self._out:
                return
            if self.slots:  # more answers pending: the writer's turn comes later and sends them together
                self._wake.set()
                return
            if self._mixed:
                if self._push() and self._out:
                    self._wake.set()
                return
            data = self._wire(self._out)
            try:
                sent = os.write(fd, data)
            except OSError:  # EAGAIN, or a dead peer: the writer's own send meets it and ends the connection
                sent = 0
            if sent == len(data):
                self._out = []
                return
            self._out = [self._rest(data, sent)]
        self._wake.set()

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                self._nursery = nursery
                if self._ssl_context is not None and not await self._tls_handshake():
                    return
                nursery.start_soon(self._write_loop)
                try:
                    if self._fd is None:
                        with trio.CancelScope() as self._read_scope:
                            await self._read_loop()
                    else:
                        await self._polled_reads()
                finally:
                    # drain what has completed, then stop the writer
                    self.closed = True
                    self._wake.set()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError) as group:
            # arrives wrapped by the nursery; e.g. ECONNRESET from a client killed with unread data
            log.debug("connection %s ended: %s", self.peer, group.exceptions[0])
        except* Exception:  # a bug in one connection closes that connection, never the server
            log.exception("connection %s failed; closing it", self.peer)
        finally:
            self.handler.connection_closed(self)
            self._release_answers()
            if self._close_delay:  # a failed authentication: its answer is out; the close waits (KIP-306)
                with trio.move_on_after(self._close_delay + 1):
                    await trio.sleep(self._close_delay)
            with trio.move_on_after(1):
                await self.stream.aclose()

    # ---------------------------------------------------------------- security: TLS and SASL
    async def _tls_handshake(self) -> bool:
        """Wrap the stream in TLS and handshake (bounded by the idle reaper); set the certificate's principal.
        False: the connection is to end (the reason logged once)."""
        assert self.security is not None and self._ssl_context is not None
        try:
            if self._tls is not None:
                await self._tls.handshake(self.stream)  # type: ignore[arg-type]
                der = self._tls.peer_certificate()
            else:
                stream = trio.SSLStream(self.stream, self._ssl_context, server_side=True)
                self.stream = stream
                await stream.do_handshake()
                der = stream.getpeercert(binary_form=True)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError) as e:
            cause = e.__cause__ or e
            self.handler.connection_log.warning("TLS handshake with %s on listener %s failed: %s", self.peer,
                                               self.listener, cause)
            return False
        if self.gate is None:  # SSL: the client certificate's subject (Java's RFC 2253 form), mapped
            from coordinator.core.security.principal_mapping import rfc2253_subject

            try:
                subject = rfc2253_subject(der) if der else None
            except ValueError as e:
                self.handler.connection_log.warning("connection %s on listener %s refused: its certificate's "
                                                   "subject cannot be read: %s", self.peer, self.listener, e)
                return False
            principal = self.security.certificate_principal(subject)
            if principal is None:
                self.handler.connection_log.warning("connection %s on listener %s refused: no "
                                                   "ssl.principal.mapping.rules rule maps its certificate's "
                                                   "subject %s", self.peer, self.listener, subject)
                return False
            self.principal = principal
        return True

    def _admit(self, payload: bytes) -> int:
        """A frame meets the SASL gate: 0 = serve it as any request; 1 = the gate dealt with it; 2 = stop
        serving (the connection ends)."""
        gate = self._guard
        assert gate is not None
        decision = gate.on_frame(payload, int(trio.current_time() * 1000))
        return self._carry_out(decision)

    def _carry_out(self, decision: Decision) -> int:
        from coordinator.core.security.sasl_gate import Kind

        gate = self.gate
        assert gate is not None
        kind = decision.kind
        if kind is Kind.SERVE:
            return 0
        security = self.security
        assert security is not None
        if decision.frame is not None:
            self.handler.metrics.request_started(SASL_HANDSHAKE)
            slot = Slot(self, SASL_HANDSHAKE, 0, 0, trio.current_time())
            self.slots.append(slot)
            slot.complete_frame(decision.frame)
        if kind is Kind.ANSWER:
            if decision.succeeded:
                self._authenticated(gate)
            return 1
        if kind is Kind.WORK:
            assert self._nursery is not None and decision.job is not None
            self._nursery.start_soon(self._work, decision.job)
            return 1
        if kind is Kind.FAIL:
            self.handler.metrics.authentication(self.listener, gate.mechanism or "", "failed")
            self.handler.connection_log.warning("authentication of %s on listener %s failed: %s", self.peer,
                                               self.listener, decision.reason)
            self._close_delay = security.failed_delay_s
        else:
            self.handler.connection_log.warning("closing connection %s on listener %s: %s", self.peer,
                                               self.listener, decision.reason)
        self._end(True)
        return 2

    def _authenticated(self, gate: SaslGate) -> None:
        reauth = self.principal != ANONYMOUS
        self.principal = gate.principal or ANONYMOUS
        self.handler.metrics.authentication(self.listener, gate.mechanism or "",
                                            "reauthenticated" if reauth else "succeeded")
        if gate.expires_ms is None:
            self._guard = None  # nothing more to check per frame
        self.reader.max_frame_bytes = self.handler.config["socket.request.max.bytes"]

    async def _work(self, job: object) -> None:
        """A mechanism's CPU-heavy step (PLAIN's PBKDF2) in a worker thread, then the gate's next move."""
        assert self.security is not None and self.gate is not None
        result = await trio.to_thread.run_sync(job, limiter=self.security.work_limiter)  # type: ignore[arg-type]
        if self.closed:
            return
        if self._carry_out(self.gate.resume(result, int(trio.current_time() * 1000))) == 2:
            return
        if self._fd is not None:
            self.wake()

    # ---------------------------------------------------------------- reading: sockets, through the poller
    async def _polled_reads(self) -> None:
        """The reads of a socket connection are served by the run's ``Poller`` (``on_readable``); this task
        only waits for the end, and for room when a budget (the in-flight cap, the unsent answers' bytes)
        paused the reading."""
        poller = Poller.current()
        poller.add(self)
        if self._tls is not None:  # requests that came with the handshake's last bytes: served first
            data, closed, owed = self._tls.decrypt(b"")
            if owed:
                self._owe(owed)
            if data:
                self.reader.feed(data)
                poller.defer(self)
            if closed:
                self._end(True)
        try:
            while True:
                await self._paused.wait()
                if self._ended is not None:
                    break
                self._paused = trio.Event()
                await self._wait_for_room()
                await self._flush()  # a client that does not read its answers is not read either
                state = self._serve_frames()  # the frames read meanwhile
                if state == FULL:
                    self._paused.set()
                    continue
                if self._out:
                    self._send_now()
                if self._ended is not None:
                    break
                if self._out:  # the kernel did not take it all: send it before reading more
                    self._paused.set()
                    continue
                if state == TURN:
                    poller.defer(self)
                else:
                    poller.add(self)
        finally:
            poller.remove(self)
        if isinstance(self._ended, BaseException):
            raise self._ended

    def on_readable(self) -> None:
        """The poller saw data (or EOF) on the socket: read once, serve a turn of whole frames, send what is
        ready."""
        try:
            data = os.read(self._fd, READ_BYTES)  # type: ignore[arg-type]
        except BlockingIOError:
            return
        except OSError as e:
            self._end(e)
            return
        if not data:
            self._end(True)
            return
        if self._tls is not None:
            try:
                data, closed, owed = self._tls.decrypt(data)
            except ssl.SSLError as e:
                self.handler.connection_log.warning("closing connection %s on listener %s: TLS: %s", self.peer,
                                                   self.listener, e)
                self._end(True)
                return
            if owed:  # records this side owes (a KeyUpdate answer): before anything encrypted after them
                self._owe(owed)
            if closed:
                self._end(True)
            if not data:
                if owed and self._ended is None:
                    self._send_now()
                return
        self.reader.feed(data)
        self.on_turn()

    def on_turn(self) -> None:
        """Serve one turn of the frames read (from ``on_readable``, or from the poller's backlog when a turn
        left whole frames behind): at most ``TURN_REQUESTS``, and only while the answers held stay within
        the byte budget. Then: paused (a budget is full, or the kernel did not take the answers: the
        connection's task resumes it), deferred to the backlog (frames left), or reading again."""
        state = self._serve_frames()
        if self._out and self._ended is None:
            self._send_now()
        if self._ended is not None:
            return
        poller = Poller.current()
        if state == FULL or self._out:
            poller.remove(self)
            self._paused.set()
        elif state == TURN:
            poller.defer(self)
        else:
            poller.add(self)

    def fail(self, error: Exception) -> None:
        """Serving a read raised (a bug): end the connection with that error."""
        self._end(error)

    def _end(self, why: BaseException | bool) -> None:
        if self._ended is None:
            self._ended = why
        if self._fd is not None:
            Poller.current().remove(self)
        elif self._read_scope is not None:  # the stream path may be waiting in a read: stop it
            self._read_scope.cancel()
        self._paused.set()

    def _send_now(self) -> None:
        """Send the output list from the caller's turn; what the kernel does not take goes to the writer."""
        if self._sending:
            self._wake.set()
            return
        if self._mixed:
            if self._push() and self._out:
                self._wake.set()
            return
        data = self._wire(self._out)
        try:
            sent = os.write(self._fd, data)  # type: ignore[arg-type]
        except BlockingIOError:
            sent = 0
        except OSError as e:
            self._out = []
            self._end(e)
            return
        if sent == len(data):
            self._out = []
            return
        self._out = [self._rest(data, sent)]
        self._wake.set()

    def _push(self) -> bool:
        """Send the output list (file ranges among it) as far as the kernel takes it now; the rest stays at its
        head. False: the send failed and the connection is ending (its answers released)."""
        try:
            self._out, by_sendfile = send_items(self._fd, self._out)  # type: ignore[arg-type]
        except OSError as e:
            self._send_failed(e)
            return False
        if by_sendfile:
            self.handler.metrics.fetch_sendfile_bytes.inc(by_sendfile)
        if not self._out:
            self._mixed = False
        return True

    def _send_failed(self, error: OSError) -> None:
        """A send of file ranges failed: nothing more may go out after a partial frame. A shrunk range is the
        server's fault (a segment truncated under a pending answer): one warning, and the socket is shut
        down at once; any other error is the peer's (reset, closed) and ends the connection as a write error
        does."""
        release(self._out)
        self._out = []
        self._mixed = False
        if isinstance(error, RangeShrunk):
            self.handler.connection_log.warning("closing connection %s (client %s): %s", self.peer,
                                               self.client_id, error)
            self._end(True)
            self.abort()
        else:
            self._end(error)

    def _release_answers(self) -> None:
        """The connection ended: close the file ranges of every answer still held here."""
        release(self._out)
        self._out = []
        self._mixed = False
        for slot in self.slots:
            if type(slot.frame) is Answer:
                slot.frame.release()

    def _wire(self, out: list[bytes]) -> bytes:
        """The bytes for the socket of the output list: as they are, or (TLS) sealed into records; a partial
        write's rest (``_Sealed``) is sealed already and goes out as it is, ahead of what follows it."""
        tls = self._tls
        if tls is None:
            return b"".join(out) if len(out) > 1 else out[0]
        parts: list[bytes] = []
        plain: list[bytes] = []
        for item in out:
            if isinstance(item, _Sealed):
                if plain:
                    parts.append(tls.encrypt(b"".join(plain)))
                    plain = []
                parts.append(item)
            else:
                plain.append(item)
        if plain:
            parts.append(tls.encrypt(b"".join(plain) if len(plain) > 1 else plain[0]))
        return b"".join(parts) if len(parts) > 1 else parts[0]

    def _rest(self, data: bytes, sent: int) -> bytes:
        """What a partial write left of ``data`` (wire bytes), to send first next time."""
        return data[sent:] if self._tls is None else _Sealed(data[sent:])

    def _owe(self, records: bytes) -> None:
        """TLS records made by a read: after the sealed head of the output list, before any plaintext (which
        is sealed later, so after them)."""
        out = self._out
        i = 0
        while i < len(out) and isinstance(out[i], _Sealed):
            i += 1
        out.insert(i, _Sealed(records))

    # ---------------------------------------------------------------- reading: in-memory streams (tests)
    async def _read_loop(self) -> None:
        while True:
            data = await self.stream.receive_some(READ_BYTES)
            if not data:
                return
            self.reader.feed(data)
            while (state := self._serve_frames()) != DONE:
                if state == FULL:
                    await self._wait_for_room()
                else:
                    await self._flush()
                    await trio.lowlevel.checkpoint()
            if self._ended is not None:
                return
            if self._out:
                await self._flush()

    def _serve_frames(self) -> int:
        """Serve the whole frames read so far, for one turn: DONE when none is left, FULL when the in-flight
        cap or the byte budget of held answers stopped it, TURN after ``TURN_REQUESTS`` frames (the rest
        stays in the frame reader either way). A protocol error ends the connection (``_ended``)."""
        hot_get = self._hot.get
        slots = self.slots
        next_frame = self.reader.next_frame
        max_inflight = self.max_inflight
        started = trio.current_time()
        hot: list[int] = []  # api key of each request answered on the hot path in this read
        out = self._out
        budget = self.budget
        held = sum(map(len, out)) if out else 0  # bytes of answers held here, counted as they are made
        served = 0
        self.dispatching = True
        done = DONE
        try:
            while True:
                # the budgets hold per frame: one read may carry thousands of small requests
                if len(slots) >= max_inflight or held >= budget:
                    self._collect()
                    out = self._out
                    if len(slots) >= max_inflight or held >= budget:
                        done = FULL
                        break
                if served >= TURN_REQUESTS:
                    done = TURN
                    break
                payload = next_frame()
                if payload is None:
                    break
                served += 1
                if self._guard is not None:
                    admitted = self._admit(payload)
                    if admitted == 2:
                        return DONE
                    if admitted == 1:
                        if slots and (last := slots[-1]).done and last.frame is not None:
                            held += len(last.frame)
                        continue
                # hot path: api keys below 256, handler by the key's low byte (see RequestHandler.hot)
                if len(payload) >= 10 and not payload[0]:
                    api_key = payload[1]
                    handler = hot_get(api_key)
                    if handler is not None and (frame := handler(payload)) is not None:
                        hot.append(api_key)
                        if slots:
                            slot = Slot(self, api_key, payload[2] << 8 | payload[3],
                                        int.from_bytes(payload[4:8], "big", signed=True), started)
                            slot.frame, slot.done = frame, True
                            slots.append(slot)
                        else:
                            out.append(frame)
                        held += len(frame)
                        continue
                self._dispatch(payload)
                if slots and (last := slots[-1]).done and last.frame is not None:  # answered at once
                    held += len(last.frame)
        except ProtocolError as e:
            self.handler.metrics.protocol_error(type(e).__name__)
            if isinstance(e, FrameTooLarge) and (e.size >> 16) in (0x1603, 0x1503):  # a TLS record header
                e = ProtocolError(f"TLS bytes (a ClientHello?) on the {self.listener} listener, which does not "
                                  f"speak TLS")
            self.handler.connection_log.warning("closing connection %s (client %s): %s", self.peer,
                                               self.client_id, e)
            self._end(True)
            return DONE
        finally:
            self.dispatching = False
            if served:
                self.last_request = started
        if hot:
            self._count_hot(hot, started)
        if slots:
            self._collect()
        return done

    def held_bytes(self) -> int:
        """Bytes of answers held here: ready to send, or done behind a slot still pending."""
        return sum(map(len, self._out)) + sum(len(s.frame) for s in self.slots if s.done and s.frame)

    def _full(self) -> bool:
        return len(self.slots) >= self.max_inflight or self.held_bytes() >= self.budget

    async def _wait_for_room(self) -> None:
        """Until fewer than ``max_inflight`` slots are open and the answers held are below the byte budget:
        what is ready goes out meanwhile (a client that does not read keeps this waiting: it slows only
        itself)."""
        self._collect()
        while self._full():
            await self._flush()
            self._room = trio.Event()
            if not self._full():
                break
            await self._room.wait()

    async def _send(self, data: bytes) -> None:
        fd = self._fd
        if fd is None:
            await self.stream.send_all(data)
            return
        try:
            sent = os.write(fd, data)
        except BlockingIOError:
            sent = 0
        if sent == len(data):  # the usual case: the kernel took it all at once
            return
        view = memoryview(data)[sent:]
        while view:
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(fd)

    async def _send_items(self, items: list) -> None:
        """Send an output list holding file ranges, waiting for the socket as needed; whatever is left when
        it fails or is cancelled is released."""
        fd = self._fd
        assert fd is not None
        try:
            while items:
                try:
                    items, by_sendfile = send_items(fd, items)
                except RangeShrunk as e:
                    self._send_failed(e)
                    return
                if by_sendfile:
                    self.handler.metrics.fetch_sendfile_bytes.inc(by_sendfile)
                if items:
                    await trio.lowlevel.wait_writable(fd)
        finally:
            release(items)

    def _count_hot(self, hot: list[int], started: float) -> None:
        """Metrics of the requests one read answered on the hot path (all took the read's time)."""
        metrics = self.handler.metrics
        took = trio.current_time() - started
        first = hot[0]
        n = len(hot)
        if hot.count(first) == n:  # the usual read: one hot API
            metrics.request_started(first, n)
            metrics.request_done(first, took, n)
            return
        for api_key in sorted(set(hot)):
            n = hot.count(api_key)
            metrics.request_started(api_key, n)
            metrics.request_done(api_key, took, n)

    def _dispatch(self, payload: bytes) -> None:
        now = trio.current_time()
        try:
            decode = self._hot_decoders.get(payload[1]) if len(payload) > 1 and not payload[0] else None
            request = (decode(payload) if decode is not None else None) or codec.decode_request(payload)
        except codec.UnsupportedVersion as e:
            if e.api_key != API_VERSIONS:
                raise
            slot = Slot(self, API_VERSIONS, 0, e.correlation_id, now)
            self.slots.append(slot)
            slot.complete(self.handler.api_versions_body(ErrorCode.UNSUPPORTED_VERSION))
            return
        header = request.header
        self.client_id = header.client_id
        slot = Slot(self, header.api_key, header.api_version, header.correlation_id, now)
        self.slots.append(slot)
        self.handler.handle(request, slot)

    def _collect(self) -> None:
        """Move every completed slot at the head of the order to the output list."""
        slots = self.slots
        if not slots or not slots[0].done:
            return
        now = trio.current_time()
        request_done = self.handler.metrics.request_done
        out = self._out
        while slots and slots[0].done:
            slot = slots.popleft()
            frame = slot.frame
            if frame is not None:
                if type(frame) is Answer:  # a Fetch answer with file ranges (zero_copy.py)
                    if self.zero_copy:
                        out.extend(frame.parts)
                        self._mixed = True
                    else:  # not for this connection (the handler checks zero_copy): the copying path
                        out.append(frame.materialize())
                else:
                    out.append(frame)
            request_done(slot.api_key, now - slot.started)
        self._room.set()

    async def _flush(self) -> None:
        """Send the output list; if a send is under way, wait for it and send what gathered meanwhile."""
        while self._out:
            if self._sending:
                if self._sent is None:
                    self._sent = trio.Event()
                await self._sent.wait()
                continue
            out, self._out = self._out, []
            mixed, self._mixed = self._mixed, False
            self._sending = True
            try:
                if mixed:
                    await self._send_items(out)
                else:
                    await self._send(self._wire(out))
            finally:
                self._sending = False
                sent, self._sent = self._sent, None
                if sent is not None:
                    sent.set()

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            self._collect()
            await self._flush()
            if self.closed and (not self.slots or not self.slots[0].done):
                return
