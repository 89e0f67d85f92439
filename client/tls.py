"""TLS over a blocking socket for ``client.connection``: one reader thread and many writers at once.

Rules:
- OpenSSL does not allow one SSL object to be used by two threads at the same time, and a connection has a
  reader thread blocked in recv while other threads send. So TLS runs in memory (``ssl.SSLObject`` over two
  ``ssl.MemoryBIO``): the socket is only ever used raw, and ``_tls_lock`` guards the SSL object and the BIOs;
  it is held for in-memory work only, never while waiting on the network.
- Ciphertext leaves in the order it was produced: it is queued under ``_tls_lock`` and sent, in queue order,
  by whoever holds ``_send_lock``. Writers wait for ``_send_lock``; the reader (whose decryption may produce
  a reply, e.g. a TLS 1.3 KeyUpdate) only tries it, and a writer leaving ``_send_lock`` sends what was queued
  meanwhile. So the reader never blocks on the network for a write, and never deadlocks with a writer.
- ``handshake()`` runs before any other thread uses the transport, under the socket's timeout. A failure
  raises ``ssl.SSLError`` (certificate, host name, alert from the node) or ``OSError``; the caller turns
  them into ``client.errors``.
- ``recv`` returns b"" at the end of the stream (the node closed, with or without close_notify), like a
  socket; ``sendall`` and ``recv`` raise ``OSError`` (``ssl.SSLError`` included) on failure.
- Renegotiation is off (``OP_NO_RENEGOTIATION``, set by ``client.security``), so writing never has to read.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections import deque

RECV_BYTES = 1 << 16


class TlsTransport:
    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_hostname: str) -> None:
        self._sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=False,
                                     server_hostname=server_hostname)
        self._tls_lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._queue: deque[bytes] = deque()

    def handshake(self) -> None:
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._send_direct()
                data = self._sock.recv(RECV_BYTES)
                if not data:
                    raise ssl.SSLEOFError("the node closed the connection during the TLS handshake") from None
                self._incoming.write(data)
            except ssl.SSLError:
                self._send_direct()  # our alert, so the node logs why
                raise
        self._send_direct()

    def _send_direct(self) -> None:
        data = self._outgoing.read()
        if data:
            try:
                self._sock.sendall(data)
            except OSError:
                pass

    def version(self) -> str | None:
        return self._tls.version()

    def sendall(self, data: bytes) -> None:
        with self._tls_lock:
            self._tls.write(data)
            out = self._outgoing.read()
            if out:
                self._queue.append(out)
        self._flush(blocking=True)

    def recv(self, size: int = RECV_BYTES) -> bytes:
        while True:
            with self._tls_lock:
                try:
                    data: bytes | None = self._tls.read(size)
                except ssl.SSLWantReadError:
                    data = None
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    data = b""
                out = self._outgoing.read()
                if out:
                    self._queue.append(out)
            if out:
                self._flush(blocking=False)
            if data is not None:
                return data
            raw = self._sock.recv(RECV_BYTES)
            if not raw:
                return b""
            with self._tls_lock:
                self._incoming.write(raw)

    def _flush(self, blocking: bool) -> None:
        while self._queue:
            if not self._send_lock.acquire(blocking=blocking):
                return  # the holder sends what we queued when it leaves
            try:
                while self._queue:
                    self._sock.sendall(self._queue.popleft())
            finally:
                self._send_lock.release()
