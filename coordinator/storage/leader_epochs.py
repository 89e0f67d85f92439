"""A partition's leader-epoch cache (KIP-101): which leader epoch started at which offset, and its file.

Rules (Kafka's ``LeaderEpochFileCache`` and ``leader-epoch-checkpoint``):
- Entries are ``(epoch, start offset)`` with both strictly increasing; ``assign(epoch, start)`` ignores an
  epoch not above the latest, and drops earlier entries whose start offset is not below ``start`` (a new
  leader that starts where an earlier epoch wrote nothing).
- ``end_offset_for(epoch, log_end)`` answers OffsetForLeaderEpoch: the largest epoch <= ``epoch`` and the
  start offset of the first epoch above it, or ``log_end`` when ``epoch`` is the latest; (-1, -1)
  (UNDEFINED) when ``epoch`` is below every entry or the cache is empty.
- ``truncate_from_end(offset)``: the log was cut at ``offset``; entries starting at or above it go.
  ``truncate_from_start(offset)``: the log start moved; the last entry below it now starts at ``offset``.
- File: ``0\\n<count>\\n<epoch> <offset>\\n...`` (Kafka's checkpoint format, version 0), written atomically
  whenever the entries change; an unreadable file is an empty cache (the follower then truncates to its
  high watermark, as Kafka did before KIP-101). Pure data plus ``encode``/``decode``: the log does the I/O.
"""

from __future__ import annotations

import bisect

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED = (-1, -1)


class LeaderEpochCache:
    __slots__ = ("epochs", "starts")

    def __init__(self, entries: list[tuple[int, int]] | None = None) -> None:
        self.epochs: list[int] = []
        self.starts: list[int] = []
        for epoch, start in entries or ():
            self.assign(epoch, start)

    @property
    def latest_epoch(self) -> int:
        return self.epochs[-1] if self.epochs else -1

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self.epochs, self.starts))

    def assign(self, epoch: int, start: int) -> bool:
        """Record that ``epoch`` starts at ``start``; True when the entries changed."""
        if epoch < 0 or (self.epochs and epoch <= self.epochs[-1]):
            return False
        while self.starts and self.starts[-1] >= start:
            self.epochs.pop()
            self.starts.pop()
        self.epochs.append(epoch)
        self.starts.append(start)
        return True

    def end_offset_for(self, epoch: int, log_end: int) -> tuple[int, int]:
        if not self.epochs or epoch < self.epochs[0]:
            return UNDEFINED
        if epoch >= self.epochs[-1]:
            return self.epochs[-1], log_end
        i = bisect.bisect_right(self.epochs, epoch)  # first entry above ``epoch``
        return self.epochs[i - 1], self.starts[i]

    def truncate_from_end(self, offset: int) -> bool:
        i = bisect.bisect_left(self.starts, offset)
        if i == len(self.starts):
            return False
        del self.epochs[i:], self.starts[i:]
        return True

    def truncate_from_start(self, offset: int) -> bool:
        i = bisect.bisect_right(self.starts, offset)
        if i <= 1:
            return False if not self.starts or self.starts[0] >= offset else self._restart(offset)
        del self.epochs[:i - 1], self.starts[:i - 1]
        self.starts[0] = offset
        return True

    def _restart(self, offset: int) -> bool:
        self.starts[0] = offset
        return True

    def encode(self) -> bytes:
        lines = ["0", str(len(self.epochs))] + [f"{e} {s}" for e, s in zip(self.epochs, self.starts)]
        return ("\n".join(lines) + "\n").encode("ascii")

    @classmethod
    def decode(cls, data: bytes | None) -> LeaderEpochCache | None:
        """The cache a file holds, or None when it is not one (missing or damaged)."""
        if data is None:
            return None
        try:
            lines = data.decode("ascii").split("\n")
            if lines[0] != "0":
                return None
            count = int(lines[1])
            pairs = [tuple(map(int, line.split())) for line in lines[2:2 + count]]
            if len(pairs) != count or any(len(p) != 2 for p in pairs):
                return None
        except (UnicodeDecodeError, ValueError, IndexError):
            return None
        cache = cls()
        for epoch, start in pairs:
            if not cache.assign(epoch, start):
                return None
        return cache
