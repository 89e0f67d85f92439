"""fdatasync in a child process, so that a durable round never waits for this process's GIL; the child then
also writes the client responses that the round made durable ("hand-off"), so the event loop does not.

Why: a worker thread that returns from fdatasync needs the GIL before it can report, and the event loop
holds the GIL while it serves requests, so under load the hand-off to and from a thread costs several times
the fsync itself. A child process does the fsync on the same open files (passed over a Unix socket) and
answers with one small message that the event loop waits for like any socket.

Rules:
- ``FsyncProcess.start()`` spawns ``python -I -S <this file> FD``: the child imports only the standard
  library and serves one ``socketpair(AF_UNIX, SOCK_SEQPACKET)`` end.
- Every message starts with one kind byte. Parent -> child:
  ``S token:>Q`` then zero or more write entries ``conn_key:>Q length:>I`` + ``length`` bytes: a sync request
  (tokens 1, 2, 3, ... in submission order), with 1..``MAX_FDS`` files attached (SCM_RIGHTS: the child gets
  its own references to the same open files, so closing ours afterwards changes nothing) or with none,
  meaning "the same files as the last request" (``submit(fds, key)`` sends them only when ``key`` differs
  from the previous request's; the child then closes the copies it held).
  ``R conn_key:>Q`` with exactly one client socket attached: the child keeps its copy under ``conn_key`` (an
  R for a key it holds closes the old copy and keeps the new one; the key stays stuck if it was).
  ``D conn_key:>Q``: the child closes its copy and forgets the key, but only after the writes of every sync
  request taken before it or in the same batch (unknown key: ignored). A conn_key names one connection for
  ever: never reuse one. ``register``/``drop`` send an R/D only while what the child has not taken yet
  (SIOCOUTQ) is under ``CONTROL_SHARE`` of the send buffer, else they send nothing and return False (not an
  error: the caller tries later): a flood of them never fills the room the sync requests need, whose
  EAGAIN means the child is stuck.
  Child -> parent: ``A token:>Q errno:>i``, the durable answer; ``W token:>Q`` then zero or more
  ``conn_key:>Q written:>q``, the write report of the batch answered by the A with that token; a report
  longer than ``REPORT_BYTES`` is sent as ``w`` pieces (same layout) ended by one ``W``; the parent merges.
- Requests pipeline: ``submit`` never waits for an answer, so a request can be sent while the child is in an
  fdatasync. Whenever the child is free it takes EVERY message waiting on its socket, in order (a batch): an
  R is applied at once, the S's are collected (the newest token; their write entries per key, concatenated in
  request order, keys in order of first appearance), the D's are deferred. With at least one S it fdatasyncs
  the files of the newest one (the caller's contract: a later request's files include every file an earlier
  one still needs) and answers once: A with the newest token taken. An answer covers every request up to its
  token: each was sent, so its bytes were written, before that fdatasync began. errno 0: all durable; else
  the first failure's errno (the files after it are not synced), for all of them. A batch of R/D only does
  no fsync and sends nothing.
- Durable before visible: the A goes out before any client byte of its batch. Then, if the fdatasync
  succeeded, no answer so far carried an errno, and the batch had write entries, each key's bytes are sent
  on its copy in one ``send(MSG_DONTWAIT | MSG_NOSIGNAL)`` (never blocking, whatever the socket's
  O_NONBLOCK; the child also ignores SIGPIPE), then the W report (also when empty), then the deferred D's.
- A report lists only the keys whose bytes of the batch were NOT all written, with how many were (a prefix of
  the key's bytes of that batch); a key absent from it got all its bytes. A key that once could not take all
  its bytes (EAGAIN, a short write, any error such as EPIPE) is stuck: the child never writes to it again and
  reports 0 for it; an unregistered key is reported 0. The parent writes the rest itself.
- Sticky failure: after an answer with an errno (a failed fdatasync, or EINVAL for a malformed message:
  unknown kind, wrong size, truncated, an R without exactly one socket, a request with no files held) the
  child never writes client bytes again and sends no W. So as long as every answer was 0, the answer for
  token t is followed by exactly one complete report for t iff a request it covers (after the previous
  answer, up to t) carried write entries (``report_due``). The fds that came with a malformed message are
  closed, and so are the files held (it may have been an S with files), so that no later request is
  answered for the wrong files. A malformed message in a batch with no S is answered with token 0, which
  the parent rejects (FsyncProcessGone).
- Bounds: a message to the child is at most ``MAX_MESSAGE`` bytes and the write bytes of one request at most
  ``MAX_WRITE_BYTES`` (``submit`` raises ValueError); a report message is at most ``REPORT_BYTES``.
- fdatasync acts on the file, not on the descriptor: the child's fsync makes durable what this process
  wrote through its own descriptor. An fsync error is reported to every descriptor of the file opened before
  the error, so the child sees it as ours would.
- The parent never blocks: ``poll()`` returns the answers that have arrived (none yet: empty) and keeps the
  complete reports for ``take_written()``; the caller waits for ``fileno()`` to be readable. Answers come in
  token order, each newer than the last; a report names the newest answer, and is due before the next one.
  The child never blocks on a client; it waits only for room to answer the parent.
- Anything wrong with the child itself (it died, the socket broke, a malformed answer) raises
  ``FsyncProcessGone`` and the object stays dead: the caller then fsyncs in-process. An fsync whose answer
  never came may or may not have happened, so the caller must fsync again; fsync is idempotent, nothing is
  acknowledged on a lost answer. Client bytes whose report never came may or may not have been written.
- The child ignores SIGINT (a Ctrl-C meant for the server must not kill its fsyncs while it drains) and
  exits when the socket reaches EOF, which includes the parent's death. ``close()`` closes the socket and
  reaps the child (killing it after ``timeout`` seconds).
"""

from __future__ import annotations

import array
import errno
import fcntl
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

HEAD = struct.Struct(">cQ")  # kind, then a token (S, W, w) or a conn_key (R, D)
ENTRY = struct.Struct(">QI")  # a write entry of S: conn_key, length
ANSWER = struct.Struct(">cQi")  # A, token, errno
REPORTED = struct.Struct(">Qq")  # a report entry of W: conn_key, bytes written
MAX_FDS = 16
MAX_MESSAGE = 64 * 1024
MAX_WRITE_BYTES = 32 * 1024
REPORT_BYTES = 32 * 1024
REPORT_ENTRIES = (REPORT_BYTES - HEAD.size) // REPORTED.size
CONTROL_SHARE = 0.25  # R and D messages are sent only while less than this share of the send buffer is queued
SEND_BUFFER = 1 << 20  # the parent's SO_SNDBUF wish (clamped by net.core.wmem_max): room for pipelined requests
_ANCILLARY = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
_A, _W, _WPART, _S, _R, _D = (ord(c) for c in "AWwSRD")


class FsyncProcessGone(Exception):
    """The fsync child cannot serve (not running, died, or broke the protocol)."""


class FsyncProcess:
    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._token = 0  # the last request's token
        self._answered = 0  # the newest token answered
        self._key: object = None  # the files the child holds (the last request's key)
        self._with_writes: deque[int] = deque()  # tokens of unanswered requests that carried write entries
        self._errored = False  # an answer carried an errno: the child writes no more
        self._report_due = 0  # the token whose write report has not (completely) arrived
        self._piece: dict[int, int] = {}  # the report being merged
        self._reports: list[tuple[int, dict[int, int]]] = []
        self._buf = bytearray(REPORT_BYTES + 1)  # a longer message shows as one byte too long
        self._buffer: int | None = None  # the socket's send buffer, read once
        self.dead: str | None = "not started"

    @classmethod
    def start(cls) -> FsyncProcess:
        """Spawn the child; raises OSError if it cannot be spawned."""
        self = cls()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__), str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, close_fds=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        self._sock = ours
        self.dead = None
        return self

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def report_due(self) -> int:
        """The token of an answer already returned by ``poll`` whose write report has not arrived (0: none)."""
        return self._report_due

    def fileno(self) -> int:
        if self._sock is None:
            raise FsyncProcessGone(self.dead or "closed")
        return self._sock.fileno()

    def _fail(self, why: str) -> FsyncProcessGone:
        if self.dead is None:
            self.dead = why
        return FsyncProcessGone(self.dead)

    def _live(self) -> socket.socket:
        if self.dead is not None or self._sock is None:
            raise FsyncProcessGone(self.dead or "closed")
        return self._sock

    def submit(self, fds: list[int], key: object = None, writes: Iterable[tuple[int, bytes]] = ()) -> int:
        """Ask for an fdatasync of ``fds`` (in order); returns the token its answer will carry. ``key`` names
        the set of files: when it equals the previous request's (and is not None), the descriptors are not
        sent again and the child uses the copies it kept. ``writes``: ``(conn_key, bytes)`` to send to the
        registered client sockets once the fsync succeeded (see ``take_written``)."""
        sock = self._live()
        if not 0 < len(fds) <= MAX_FDS:
            raise ValueError(f"an fsync request carries 1 to {MAX_FDS} descriptors, not {len(fds)}")
        msg, with_writes = _sync_request(self._token + 1, writes)
        self._token += 1
        try:
            if key is not None and key == self._key:
                sock.send(msg)
            else:
                self._key = None  # until this send succeeded
                socket.send_fds(sock, [msg], fds)
                self._key = key
        except OSError as e:  # EPIPE/ECONNRESET (child gone), EAGAIN (child stuck): either way, not serving
            raise self._fail(f"fsync request failed: {e}") from e
        if with_writes:
            self._with_writes.append(self._token)
        return self._token

    def register(self, conn_key: int, fd: int) -> bool:
        """Give the child its own copy of client socket ``fd`` (ours stays open), for writes to ``conn_key``.
        False, with nothing sent, when the requests waiting for the child fill ``CONTROL_SHARE`` of the
        socket's buffer (an R or D never takes the room the sync requests need; try again later)."""
        sock = self._live()
        msg = _keyed(b"R", conn_key)
        if not self._control_room(sock):
            return False
        try:
            socket.send_fds(sock, [msg], [fd])
        except BlockingIOError:
            return False
        except OSError as e:
            raise self._fail(f"fsync register failed: {e}") from e
        return True

    def drop(self, conn_key: int) -> bool:
        """Let the child close its copy of ``conn_key``'s socket once the writes already submitted are done.
        False, with nothing sent, as for ``register``."""
        sock = self._live()
        msg = _keyed(b"D", conn_key)
        if not self._control_room(sock):
            return False
        try:
            sock.send(msg)
        except BlockingIOError:
            return False
        except OSError as e:
            raise self._fail(f"fsync drop failed: {e}") from e
        return True

    def _control_room(self, sock: socket.socket) -> bool:
        """Whether the bytes the child has not taken yet (SIOCOUTQ) leave room for one more R or D."""
        if self._buffer is None:
            self._buffer = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        try:
            queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
        except OSError:
            return True
        return queued < self._buffer * CONTROL_SHARE

    def poll(self) -> list[tuple[int, int]]:
        """The answers that have arrived, oldest first: ``(token, errno)``, each covering every request up to
        ``token`` (errno 0: durable). Empty when none has arrived yet. Reports are kept for ``take_written``."""
        sock = self._live()
        buf = self._buf
        got: list[tuple[int, int]] = []
        while True:
            try:
                n = sock.recv_into(buf)
            except BlockingIOError:
                return got
            except OSError as e:
                raise self._fail(f"fsync answer failed: {e}") from e
            kind = buf[0] if n else None
            if kind == _A and n == ANSWER.size:
                _, token, err = ANSWER.unpack_from(buf)
                self._on_answer(token, err)
                got.append((token, err))
            elif kind in (_W, _WPART) and HEAD.size <= n <= REPORT_BYTES and not (n - HEAD.size) % REPORTED.size:
                self._on_report(n, final=kind == _W)
            else:
                raise self._fail("fsync child exited" if not n else f"malformed fsync answer {bytes(buf[:32])!r}")

    def take_written(self) -> list[tuple[int, dict[int, int]]]:
        """The complete write reports received by ``poll`` since the last call, oldest first: ``(token,
        {conn_key: bytes written})`` for the keys whose bytes in that batch were not all written."""
        got, self._reports = self._reports, []
        return got

    def _on_answer(self, token: int, err: int) -> None:
        if self._report_due:
            raise self._fail(f"fsync answer for {token} before the write report for {self._report_due}")
        if not self._answered < token <= self._token:
            raise self._fail(f"fsync answer for {token} after {self._answered} (last request {self._token})")
        had_writes = False
        while self._with_writes and self._with_writes[0] <= token:
            self._with_writes.popleft()
            had_writes = True
        if err:
            self._errored = True
        elif had_writes and not self._errored:
            self._report_due = token
        self._answered = token

    def _on_report(self, n: int, final: bool) -> None:
        buf = self._buf
        _, token = HEAD.unpack_from(buf)
        if not self._report_due or token != self._report_due:
            raise self._fail(f"fsync write report for {token}, due {self._report_due}")
        piece = self._piece
        for offset in range(HEAD.size, n, REPORTED.size):
            key, written = REPORTED.unpack_from(buf, offset)
            if written < 0 or key in piece:
                raise self._fail(f"malformed fsync write report for {token}: {key} {written}")
            piece[key] = written
        if final:
            self._reports.append((token, piece))
            self._piece = {}
            self._report_due = 0

    def abandon(self) -> None:
        """Stop using the child at once, without waiting: our end is closed (it exits at EOF, which closes its
        copies of client sockets) and it is sent SIGKILL; ``close()`` reaps it. The caller tells its event
        loop that the socket closes first."""
        if self.dead is None:
            self.dead = "abandoned"
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None and self._proc.returncode is None:
            try:
                self._proc.kill()
            except OSError:
                pass

    def close(self, timeout: float = 5.0) -> None:
        if self.dead is None:
            self.dead = "closed"
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _sync_request(token: int, writes: Iterable[tuple[int, bytes]]) -> tuple[bytes, bool]:
    """The S message and whether it carries write entries; ValueError if it breaks a bound."""
    parts = [HEAD.pack(b"S", token)]
    total = 0
    try:
        for conn_key, data in writes:
            total += len(data)
            if total > MAX_WRITE_BYTES:
                raise ValueError(f"an fsync request carries at most {MAX_WRITE_BYTES} bytes to write")
            parts += (ENTRY.pack(conn_key, len(data)), data)
    except struct.error as e:
        raise ValueError(f"bad write entry: {e}") from e
    msg = b"".join(parts)
    if len(msg) > MAX_MESSAGE:
        raise ValueError(f"an fsync request is at most {MAX_MESSAGE} bytes, not {len(msg)}")
    return msg, len(parts) > 1


def _keyed(kind: bytes, conn_key: int) -> bytes:
    try:
        return HEAD.pack(kind, conn_key)
    except struct.error as e:
        raise ValueError(f"bad conn_key {conn_key!r}: {e}") from e


@dataclass(slots=True)
class _Batch:
    """What the child took from its socket in one go."""

    token: int = 0  # the newest sync request's
    syncs: int = 0
    bad: bool = False
    eof: bool = False
    writes: dict[int, list[bytes]] = field(default_factory=dict)  # conn_key -> chunks, in request order
    drops: list[int] = field(default_factory=list)


class _Child:
    """The child's state: the files of the newest request that carried some, the client sockets by key."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.held: list[int] = []
        self.conns: dict[int, socket.socket] = {}
        self.stuck: set[int] = set()
        self.failed = False  # an answer carried an errno: no client bytes, no reports any more
        self.buf = bytearray(MAX_MESSAGE)
        self.view = memoryview(self.buf)

    def serve(self) -> None:
        """Until EOF: wait for a message, take every one waiting, one fdatasync round, one answer."""
        self.sock.setblocking(False)
        waiter = select.poll()
        waiter.register(self.sock.fileno(), select.POLLIN)
        while True:
            try:
                waiter.poll()
            except InterruptedError:
                continue
            batch = self.take()
            if (batch.syncs or batch.bad) and not self.run(batch):
                return  # the parent is gone
            for key in batch.drops:
                conn = self.conns.pop(key, None)
                if conn is not None:
                    conn.close()
                self.stuck.discard(key)
            if batch.eof:
                return

    def take(self) -> _Batch:
        batch = _Batch()
        while True:
            try:
                n, ancillary, flags, _ = self.sock.recvmsg_into([self.buf], _ANCILLARY)
            except InterruptedError:
                continue
            except BlockingIOError:
                return batch
            fds = _fds(ancillary)
            if not n and not fds:
                batch.eof = True
                return batch
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or not self.apply(batch, n, fds):
                batch.bad = True  # the answer is EINVAL; it may have been an S with files we did not keep,
                self.replace_held([])  # so no later request may be answered for the files we hold
                for fd in fds:  # a malformed message keeps none of its fds
                    os.close(fd)

    def apply(self, batch: _Batch, n: int, fds: list[int]) -> bool:
        """Apply one message to the batch; False if malformed."""
        kind = self.buf[0] if n else None
        if kind == _S and n >= HEAD.size:
            _, token = HEAD.unpack_from(self.buf)
            batch.token = max(batch.token, token)
            batch.syncs += 1
            entries = _entries(self.view, n)
            if entries is None or len(fds) > MAX_FDS:
                return False
            if fds:
                self.replace_held(fds)
            for key, data in entries:
                batch.writes.setdefault(key, []).append(data)
            return True
        if kind == _R and n == HEAD.size and len(fds) == 1:
            _, key = HEAD.unpack_from(self.buf)
            try:
                conn = socket.socket(fileno=fds[0])
            except OSError:
                return False  # not a socket
            old = self.conns.pop(key, None)
            if old is not None:
                old.close()
            self.conns[key] = conn
            return True
        if kind == _D and n == HEAD.size and not fds:
            batch.drops.append(HEAD.unpack_from(self.buf)[1])
            return True
        return False

    def replace_held(self, fds: list[int]) -> None:
        for fd in self.held:
            os.close(fd)
        self.held = fds

    def run(self, batch: _Batch) -> bool:
        """fdatasync, answer, hand off; False if the parent is gone."""
        err = 0
        if batch.bad or not self.held:
            err = errno.EINVAL
        else:
            for fd in self.held:
                try:
                    os.fdatasync(fd)
                except OSError as e:
                    err = e.errno or errno.EIO
                    break
        if err:
            self.failed = True
        if not _answer(self.sock, ANSWER.pack(b"A", batch.token, err)):
            return False
        if self.failed or not batch.writes:
            return True
        return self.report(batch.token, self.write(batch.writes))

    def write(self, writes: dict[int, list[bytes]]) -> list[tuple[int, int]]:
        """Send each key's bytes; the keys not fully written, with how many bytes were."""
        short: list[tuple[int, int]] = []
        for key, chunks in writes.items():
            data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            if not data:
                continue
            conn = self.conns.get(key)
            sent = 0
            if conn is not None and key not in self.stuck:
                try:
                    sent = conn.send(data, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
                except OSError:  # EAGAIN, EPIPE, ECONNRESET...: the parent writes it
                    sent = 0
            if sent < len(data):
                if conn is not None:
                    self.stuck.add(key)
                short.append((key, sent))
        return short

    def report(self, token: int, short: list[tuple[int, int]]) -> bool:
        for start in range(0, max(len(short), 1), REPORT_ENTRIES):
            piece = short[start:start + REPORT_ENTRIES]
            kind = b"W" if start + REPORT_ENTRIES >= len(short) else b"w"
            msg = HEAD.pack(kind, token) + b"".join(REPORTED.pack(key, sent) for key, sent in piece)
            if not _answer(self.sock, msg):
                return False
        return True


def _entries(view: memoryview, n: int) -> list[tuple[int, bytes]] | None:
    """The write entries of an S message of ``n`` bytes; None if they do not fill it exactly."""
    entries: list[tuple[int, bytes]] = []
    offset = HEAD.size
    while offset < n:
        if offset + ENTRY.size > n:
            return None
        key, length = ENTRY.unpack_from(view, offset)
        offset += ENTRY.size
        if offset + length > n:
            return None
        entries.append((key, bytes(view[offset:offset + length])))
        offset += length
    return entries


def _fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    return list(fds)


def _answer(sock: socket.socket, data: bytes) -> bool:
    """Send one message, waiting for room if the parent's side is full; False if the parent is gone."""
    while True:
        try:
            sock.send(data)
            return True
        except (BlockingIOError, InterruptedError):
            select.select([], [sock], [])
        except OSError:
            return False


def serve(sock: socket.socket) -> None:
    _Child(sock).serve()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    serve(socket.socket(fileno=int(sys.argv[1])))
