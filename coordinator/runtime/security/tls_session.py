"""One server-side TLS connection over memory BIOs: the handshake with its crypto off the event loop, then
records in, plaintext out, and plaintext in, records out, for the connection's own fast socket path.

Rules:
- ``ssl.SSLObject`` over two ``ssl.MemoryBIO``s (as trio.SSLStream does), so the connection keeps reading and
  writing its socket's descriptor itself, through the poller, as it does for PLAINTEXT: TLS adds the
  record work and nothing else per read or write.
- ``handshake``: bytes are moved on the event loop; every ``do_handshake`` step (the key exchange and the
  certificate signature: the costly part) runs in a worker thread, at most ``HANDSHAKE_THREADS`` at a time
  (OpenSSL releases the GIL meanwhile). A storm of handshakes queues there and never stalls the loop, so the
  connections already open keep their latency. Nothing else touches the object during the handshake.
- After it, every call is on the trio thread. ``decrypt(data)`` gives the plaintext of the whole records
  read so far, whether the peer closed (close_notify), and any records the read made this side owe the peer
  (a TLS 1.3 KeyUpdate answer): those must go out before anything encrypted later. ``encrypt(data)`` gives
  the records of ``data``, in order after everything encrypted before.
- A peer's garbage or a failed check is ``ssl.SSLError`` (from ``handshake``: the reason for the one log line;
  from ``decrypt``: the connection ends). A peer gone mid-handshake is ``trio.BrokenResourceError``.
"""

from __future__ import annotations

import ssl

import trio

HANDSHAKE_THREADS = 2
READ_CHUNK = 1 << 16
_limiter: trio.CapacityLimiter | None = None


def _handshake_limiter() -> trio.CapacityLimiter:
    global _limiter
    if _limiter is None:
        _limiter = trio.CapacityLimiter(HANDSHAKE_THREADS)
    return _limiter


class TlsSession:
    __slots__ = ("_in", "_out", "obj")

    def __init__(self, context: ssl.SSLContext) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self.obj = context.wrap_bio(self._in, self._out, server_side=True)

    async def handshake(self, stream: trio.SocketStream) -> None:
        limiter = _handshake_limiter()
        while True:
            data = await stream.receive_some(65536)
            if not data:
                raise trio.BrokenResourceError("the peer closed the connection during the TLS handshake")
            self._in.write(data)
            try:
                await trio.to_thread.run_sync(self.obj.do_handshake, limiter=limiter)
                done = True
            except ssl.SSLWantReadError:
                done = False
            except ssl.SSLError:
                if self._out.pending:  # the alert tells the peer why, as trio.SSLStream sends it
                    try:
                        await stream.send_all(self._out.read())
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
                raise
            if self._out.pending:
                await stream.send_all(self._out.read())
            if done:
                return

    def decrypt(self, data: bytes) -> tuple[bytes, bool, bytes]:
        """(plaintext of the whole records so far, the peer closed, records owed to the peer now)."""
        self._in.write(data)
        chunks: list[bytes] = []
        closed = False
        read = self.obj.read
        while True:
            try:
                chunk = read(READ_CHUNK)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            chunks.append(chunk)
        owed = self._out.read() if self._out.pending else b""
        return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), closed, owed

    def encrypt(self, data: bytes) -> bytes:
        self.obj.write(data)
        return self._out.read()

    def peer_certificate(self) -> bytes | None:
        return self.obj.getpeercert(binary_form=True)
