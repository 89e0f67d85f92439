"""fdatasync in a child process, so that a durable round never waits for this process's GIL.

Why: a worker thread that returns from fdatasync needs the GIL before it can report, and the event loop
holds the GIL while it serves requests, so under load the hand-off to and from a thread costs several times
the fsync itself. A child process does the fsync on the same open files (passed over a Unix socket) and
answers with one small message that the event loop waits for like any socket.

Rules:
- ``FsyncProcess.start()`` spawns ``python -I -S <this file> FD``: the child imports only the standard
  library and serves one ``socketpair(AF_UNIX, SOCK_SEQPACKET)`` end.
- A request is an 8-byte token (1, 2, 3, ... in submission order), with 1..``MAX_FDS`` file descriptors
  attached (SCM_RIGHTS: the child gets its own references to the same open files, so closing ours afterwards
  changes nothing) or with none, meaning "the same files as the last request" (``submit(fds, key)`` sends
  them only when ``key`` differs from the previous request's; the child then closes the copies it held).
- Requests pipeline: ``submit`` never waits for an answer, so a request can be sent while the child is in an
  fdatasync. Whenever the child is free it takes EVERY request waiting on its socket, fdatasyncs the files
  of the newest one (the caller's contract: a later request's files include every file an earlier one
  still needs) and answers once: ``token | errno`` with the newest token taken. An answer covers every
  request up to its token: each was sent, so its bytes were written, before that fdatasync began. errno 0:
  all durable; else the first failure's errno (the files after it are not synced), for all of them.
- fdatasync acts on the file, not on the descriptor: the child's fsync makes durable what this process
  wrote through its own descriptor. An fsync error is reported to every descriptor of the file opened before
  the error, so the child sees it as ours would.
- The parent never blocks: ``poll()`` returns the answers that have arrived (none yet: empty); the caller
  waits for ``fileno()`` to be readable. Answers come in token order, each newer than the last.
- Anything wrong with the child itself (it died, the socket broke, a malformed answer) raises
  ``FsyncProcessGone`` and the object stays dead: the caller then fsyncs in-process. An fsync whose answer
  never came may or may not have happened, so the caller must fsync again; fsync is idempotent, nothing is
  acknowledged on a lost answer.
- The child ignores SIGINT (a Ctrl-C meant for the server must not kill its fsyncs while it drains) and
  exits when the socket reaches EOF, which includes the parent's death. ``close()`` closes the socket and
  reaps the child (killing it after ``timeout`` seconds).
"""

from __future__ import annotations

import errno
import os
import select
import signal
import socket
import struct
import subprocess
import sys

REQUEST = struct.Struct(">Q")
REPLY = struct.Struct(">Qi")
MAX_FDS = 16


class FsyncProcessGone(Exception):
    """The fsync child cannot serve (not running, died, or broke the protocol)."""


class FsyncProcess:
    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._token = 0  # the last request's token
        self._answered = 0  # the newest token answered
        self._key: object = None  # the files the child holds (the last request's key)
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
        self._sock = ours
        self.dead = None
        return self

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def fileno(self) -> int:
        if self._sock is None:
            raise FsyncProcessGone(self.dead or "closed")
        return self._sock.fileno()

    def _fail(self, why: str) -> FsyncProcessGone:
        if self.dead is None:
            self.dead = why
        return FsyncProcessGone(self.dead)

    def submit(self, fds: list[int], key: object = None) -> int:
        """Ask for an fdatasync of ``fds`` (in order); returns the token its answer will carry. ``key`` names
        the set of files: when it equals the previous request's (and is not None), the descriptors are not
        sent again and the child uses the copies it kept."""
        if self.dead is not None or self._sock is None:
            raise FsyncProcessGone(self.dead or "closed")
        if not 0 < len(fds) <= MAX_FDS:
            raise ValueError(f"an fsync request carries 1 to {MAX_FDS} descriptors, not {len(fds)}")
        self._token += 1
        try:
            if key is not None and key == self._key:
                self._sock.send(REQUEST.pack(self._token))
            else:
                self._key = None  # until this send succeeded
                socket.send_fds(self._sock, [REQUEST.pack(self._token)], fds)
                self._key = key
        except OSError as e:  # EPIPE/ECONNRESET (child gone), EAGAIN (child stuck): either way, not serving
            raise self._fail(f"fsync request failed: {e}") from e
        return self._token

    def poll(self) -> list[tuple[int, int]]:
        """The answers that have arrived, oldest first: ``(token, errno)``, each covering every request up to
        ``token`` (errno 0: durable). Empty when none has arrived yet."""
        sock = self._sock
        if self.dead is not None or sock is None:
            raise FsyncProcessGone(self.dead or "closed")
        got: list[tuple[int, int]] = []
        while True:
            try:
                data = sock.recv(64)
            except BlockingIOError:
                return got
            except OSError as e:
                raise self._fail(f"fsync answer failed: {e}") from e
            if len(data) != REPLY.size:
                raise self._fail("fsync child exited" if not data else f"malformed fsync answer {data!r}")
            token, err = REPLY.unpack(data)
            if not self._answered < token <= self._token:
                raise self._fail(f"fsync answer for {token} after {self._answered} (last request {self._token})")
            self._answered = token
            got.append((token, err))

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


def serve(sock: socket.socket) -> None:
    """The child's loop until EOF: wait for a request, take every one waiting, one fdatasync round for all of
    them, one answer."""
    held: list[int] = []  # the files of the newest request that carried some
    sock.setblocking(False)
    waiter = select.poll()
    waiter.register(sock.fileno(), select.POLLIN)
    while True:
        try:
            waiter.poll()
        except InterruptedError:
            continue
        token, taken, bad, eof = 0, 0, False, False
        while True:
            try:
                msg, fds, mflags, _ = socket.recv_fds(sock, 64, MAX_FDS)
            except InterruptedError:
                continue
            except BlockingIOError:
                break
            if not msg and not fds:
                eof = True
                break
            taken += 1
            if fds:
                for fd in held:
                    os.close(fd)
                held = fds
            if len(msg) != REQUEST.size or mflags & socket.MSG_CTRUNC:
                bad = True  # a request we cannot have been sent
            else:
                token = max(token, REQUEST.unpack(msg)[0])
        if taken:
            err = 0
            if bad or not held:
                err = errno.EINVAL
            else:
                for fd in held:
                    try:
                        os.fdatasync(fd)
                    except OSError as e:
                        err = e.errno or errno.EIO
                        break
            if not _answer(sock, REPLY.pack(token, err)):
                return  # the parent is gone
        if eof:
            return


def _answer(sock: socket.socket, data: bytes) -> bool:
    """Send one answer, waiting for room if the parent's side is full; False if the parent is gone."""
    while True:
        try:
            sock.send(data)
            return True
        except (BlockingIOError, InterruptedError):
            select.select([], [sock], [])
        except OSError:
            return False


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(socket.socket(fileno=int(sys.argv[1])))
