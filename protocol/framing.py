"""Kafka framing: an int32 size, then that many bytes.

Rules:
- ``FrameReader`` is sans-IO: ``feed(bytes)`` then ``next_frame()`` until it returns None.
- The size is checked against ``max_frame_bytes`` before anything is allocated for the frame: a negative
  size, or one over the limit (a TLS ClientHello read as a size is ~370 MB), raises ``FrameTooLarge``
  / ``ProtocolError`` and the connection is unusable afterwards.
- Buffered bytes never exceed one maximal frame plus one read.
"""

from __future__ import annotations

import struct

from protocol.errors import ProtocolError

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024
_SIZE = struct.Struct(">i")


class FrameTooLarge(ProtocolError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame size {size} outside 0..{limit} (socket.request.max.bytes)")
        self.size = size
        self.limit = limit


class FrameReader:
    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf: bytes | bytearray = b""
        self._pos = 0
        self._need: int | None = None

    def feed(self, data: bytes) -> None:
        buf = self._buf
        if self._pos >= len(buf) and type(data) is bytes:
            # everything before was consumed: keep the read itself (a slice of bytes is one copy, a frame
            # cut out of a bytearray costs two)
            self._buf, self._pos = data, 0
            return
        if type(buf) is bytes:
            buf = self._buf = bytearray(buf[self._pos:])
            self._pos = 0
        elif self._pos and self._pos >= len(buf) // 2:
            del buf[: self._pos]
            self._pos = 0
        buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def next_frame(self) -> bytes | None:
        buf, pos = self._buf, self._pos
        if self._need is None:
            if len(buf) - pos < 4:
                return None
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > self.max_frame_bytes:
                raise FrameTooLarge(size, self.max_frame_bytes)
            self._need = size
            pos += 4
            self._pos = pos
        need = self._need
        if len(buf) - pos < need:
            return None
        frame = buf[pos: pos + need]
        if type(frame) is not bytes:
            frame = bytes(frame)
        self._pos = pos + need
        self._need = None
        return frame


def frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload
