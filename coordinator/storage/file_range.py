"""A file range: stored batch bytes named by (descriptor, offset, length) instead of copied into memory, so a
plaintext connection can send them with ``sendfile`` (zero-copy consume, #35; Kafka's ``FileRecords``).

Rules:
- A ``FileRange`` owns its descriptor: a ``dup`` of the segment's, taken under the log's lock while the
  segment's own descriptor is open (``PartitionLog.read_range``). The segment may then be deleted by retention,
  replaced by the cleaner's rename, or its log closed: the dup keeps the same open file, so the bytes stay
  readable until the range is closed. ``close()`` releases it (idempotent); a range dropped without
  ``close()`` is closed when collected (a safety net, not the way).
- What a range names was valid when it was made: whole batches below the segment's valid size. Appends only
  write past that size, and compaction and retention never write into an existing file (they rename over
  it or unlink it), so those bytes do not change under an open descriptor. The one exception is a
  truncation in place (``PartitionLog.truncate_to``, a cluster follower cutting its log by leader epoch, or
  shortening a log that lost the lead), which bumps the segment's ``truncations`` count first. A sender
  therefore checks ``valid()`` before each send of a range, and treats a send that yields fewer bytes than
  are left (the file got shorter) as fatal for its connection: the frame's length went out already, so the
  stream could only be corrupted, never padded. Both end the connection (the client fetches again).
- ``length`` and ``offset`` move as a sender sends (``advance``); ``len()`` is what is left to send, so the
  byte budgets of a connection count a range by its length.
- ``read()`` gives the bytes (the copying path: TLS, tests); it checks they are all there.
- Nothing here does network IO; the sender (``coordinator.runtime.zero_copy``) does.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Protocol


class _Truncations(Protocol):
    truncations: int


class RangeShrunk(OSError):
    """The file holds fewer bytes than the range names, or was truncated since the range was made."""


class FileRange:
    __slots__ = ("_generation", "_owner", "fd", "length", "offset")

    def __init__(self, fd: int, offset: int, length: int, owner: _Truncations | None = None) -> None:
        self.fd = fd  # owned: closed by close()
        self.offset = offset
        self.length = length
        self._owner = owner  # the segment, to see a truncation made after this range was
        self._generation = owner.truncations if owner is not None else 0

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"FileRange(fd={self.fd}, offset={self.offset}, length={self.length})"

    def valid(self) -> bool:
        """False once the segment was truncated in place after this range was made (its bytes may differ)."""
        owner = self._owner
        return owner is None or owner.truncations == self._generation

    def advance(self, n: int) -> None:
        """``n`` bytes of the front were sent."""
        self.offset += n
        self.length -= n

    def read(self) -> bytes:
        """The bytes, read into memory (closes nothing); RangeShrunk if they are not all there."""
        if not self.valid():
            raise RangeShrunk(f"segment truncated under a pending range at {self.offset}")
        parts = []
        offset, left = self.offset, self.length
        while left > 0:
            chunk = os.pread(self.fd, left, offset)
            if not chunk:
                raise RangeShrunk(f"file ends {left} bytes before the range's end (offset {offset})")
            parts.append(chunk)
            offset += len(chunk)
            left -= len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self, _close: Callable[[int], None] = os.close) -> None:  # bound early: __del__ at exit
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                _close(fd)
            except OSError:
                pass

    def __del__(self) -> None:
        self.close()
