"""fdatasync in a child process, so that a durable round never waits for this process's GIL.

Why: a worker thread that returns from fdatasync needs the GIL before it can report, and the event loop
holds the GIL while it serves requests, so under load the hand-off to and from a thread costs several times
the fsync itself. A child process does the fsync on the same open files (passed over a Unix socket) and
answers with one small message that the event loop waits for like any socket.

Rules:
- ``FsyncProcess.start()`` spawns ``python -I -S <this file> FD``: the child imports only the standard
  library and serves one ``socketpair(AF_UNIX, SOCK_SEQPACKET)`` end.
- A request is an 8-byte token, with 1..``MAX_FDS`` file descriptors attached (SCM_RIGHTS: the child gets
  its own references to the same open files, so closing ours afterwards changes nothing) or with none,
  meaning "the same files as the last request" (``submit(fds, key)`` sends them only when ``key`` differs
  from the previous request's; the child then closes the copies it held). The child fdatasyncs them in
  order and answers ``token | errno`` (0: all durable; else the first failure's errno, and the files after
  it are not synced). Requests are served one at a time, in order.
- fdatasync acts on the file, not on the descriptor: the child's fsync makes durable what this process
  wrote through its own descriptor. An fsync error is reported to every descriptor of the file opened before
  the error, so the child sees it as ours would.
- The parent never blocks: ``submit`` sends without waiting (a full socket buffer is an error), ``reply``
  returns None until the answer arrives; the caller waits for ``fileno()`` to be readable. Answers with an
  older token (a waiter that was cancelled) are skipped.
- Anything wrong with the child itself (it died, the socket broke, a malformed answer) raises
  ``FsyncProcessGone`` and the object stays dead: the caller then fsyncs in-process. An fsync whose answer
  never came may or may not have happened, so the caller must fsync again; fsync is idempotent, nothing is
  acknowledged on a lost answer.
- The child ignores SIGINT (a Ctrl-C meant for the server must not kill its fsyncs while it drains) and
  exits when the socket reaches EOF, which includes the parent's death. ``close()`` closes the socket and
  reaps the child (killing it after ``timeout`` seconds).
"""

from __future__ import annotations

import os
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
        self._token = 0
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

    def reply(self, token: int) -> int | None:
        """The errno answered for ``token`` (0: durable), or None if it has not arrived yet."""
        sock = self._sock
        if self.dead is not None or sock is None:
            raise FsyncProcessGone(self.dead or "closed")
        while True:
            try:
                data = sock.recv(64)
            except BlockingIOError:
                return None
            except OSError as e:
                raise self._fail(f"fsync answer failed: {e}") from e
            if len(data) != REPLY.size:
                raise self._fail("fsync child exited" if not data else f"malformed fsync answer {data!r}")
            got, err = REPLY.unpack(data)
            if got == token:
                return err
            if got > token:
                raise self._fail(f"fsync answer for {got} while waiting for {token}")
            # an answer to a request whose waiter went away: skip it

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
    """The child's loop: one request at a time until EOF."""
    held: list[int] = []  # the files of the last request that carried some
    while True:
        try:
            msg, fds, flags, _ = socket.recv_fds(sock, 64, MAX_FDS)
        except InterruptedError:
            continue
        if not msg and not fds:
            return
        if fds:
            for fd in held:
                os.close(fd)
            held = fds
        err = 0
        if len(msg) != REQUEST.size or flags & socket.MSG_CTRUNC or not held:
            err = 22  # EINVAL: a request we cannot have been sent
        else:
            for fd in held:
                try:
                    os.fdatasync(fd)
                except OSError as e:
                    err = e.errno or 5
                    break
        token = REQUEST.unpack(msg)[0] if len(msg) == REQUEST.size else 0
        try:
            sock.send(REPLY.pack(token, err))
        except OSError:  # the parent is gone
            return


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(socket.socket(fileno=int(sys.argv[1])))
