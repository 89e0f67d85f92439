"""Hand-off: success answers that the fsync child writes to their clients itself, once durable.

Group commit (group_commit.py) owns the rounds; this module owns what rides with them. Rules:
- A durability callback may offer its success answer (``HandOff.offer()``: the client connection's key,
  socket and answer frame; the answer is then handed). ``offer_all`` asks every callback appended since the
  last request to the child, registers new connections with the child (a copy of the socket, once per
  connection), and returns what goes with the next request; ``sent(token, handed)`` records it under that
  request's token. A connection offers only when nothing of its own is pending ahead (connection.py
  ``can_hand_off``), so the child's bytes go out exactly where the answer stands.
- The child answers durability ("A") before it writes, then reports ("W") what it could not write:
  ``written(token, partial)`` completes the handed answers up to ``token`` (``HandOff.written(rest)``, rest =
  the bytes it did not write, which the server sends).
- The child writes nothing once an fdatasync failed: at an answer with an errno, or any answer after one,
  the answers up to it are taken back (``take_back()``: answered by the server, with the error). Reports
  read together with such an answer came before it and are applied first (``answered`` is told the
  reports to apply) — the child wrote those.
- An answer the child may or may not have written (the child given up on: ``child_gone``) ends its
  connection (``abandon()``): an answer is never sent twice.
- At most ``MAX_HANDED_BYTES`` of answers ride in requests the child has not answered (its socket buffer is
  bounded) and at most ``MAX_WRITE_BYTES`` in one; beyond that, answers are sent by the server as before.
- A registered connection that closes is dropped in the child (``forget``); a register or drop that finds
  the child's socket busy (fsync_process.py ``CONTROL_SHARE``) is no error: the answer is sent by the
  server, the drop waits, and ``send_drops`` (a task beside the rounds) tries again every few ms, so the
  client of a closed connection gets its EOF.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

import trio

from coordinator.metrics import Metrics
from coordinator.storage.fsync_process import MAX_WRITE_BYTES, FsyncProcess, FsyncProcessGone

MAX_HANDED_BYTES = 64 << 10  # answers riding in fsync requests the child has not answered yet
DROP_RETRY_S = 0.005


class HandOff(Protocol):
    """A durability callback whose success answer the fsync child may write to the client itself."""

    def __call__(self, error: Exception | None) -> None: ...

    def offer(self) -> tuple[int, int, bytes] | None:
        """(connection key, socket fd, answer frame) if the answer may be handed now (it is then handed)."""

    def written(self, rest: bytes | None) -> None:
        """The child wrote the answer; ``rest`` is what it could not write (to send here), None if all."""

    def take_back(self) -> None:
        """The child will not write it: the callback answers as usual (itself, now, if it was already called
        back durable: a checkpoint may have made its write durable before the child's answer)."""

    def abandon(self) -> None:
        """Whether the child wrote it is unknown: end the client's connection."""


Handed = tuple[HandOff, int, bytes]  # (callback, connection key, frame)
Reports = list[tuple[int, dict[int, int]]]


class HandOffs:
    def __init__(self, child: FsyncProcess, metrics: Metrics | None,
                 on_child_gone: Callable[[Exception], None]) -> None:
        self.child = child
        self.metrics = metrics
        self._on_child_gone = on_child_gone
        self.fresh: list[Callable[[Exception | None], None]] = []  # callbacks appended since the last request
        self.handed: deque[tuple[int, list[Handed]]] = deque()  # by token: answers the child is to write
        self._sizes: deque[tuple[int, int]] = deque()  # by token: answer bytes the child has not taken yet
        self._unanswered = 0  # their sum
        self.registered: set[int] = set()  # connection keys whose socket the child holds
        self.failed = False  # an fdatasync of the child failed: it writes nothing any more
        self.pending_drops: deque[int] = deque()  # closed connections' keys the child still holds
        self._drops_waiting = trio.Event()  # set when a drop found no room

    def offer_all(self) -> list[Handed]:
        """What goes with the next request: the answers of the callbacks appended since the last one that can
        be handed now (registering their connections first); they are handed once this returns."""
        fresh, self.fresh = self.fresh, []
        if self.failed or not fresh:
            return []
        room = min(MAX_WRITE_BYTES, MAX_HANDED_BYTES - self._unanswered)
        handed: list[Handed] = []
        for cb in fresh:
            offer = getattr(cb, "offer", None)
            if offer is None or (got := offer()) is None:
                continue
            key, fd, frame = got
            if len(frame) > room or not self._register(key, fd):
                cb.take_back()  # type: ignore[attr-defined]
                continue
            room -= len(frame)
            handed.append((cb, key, frame))  # type: ignore[arg-type]
        return handed

    def _register(self, key: int, fd: int) -> bool:
        if key in self.registered:
            return True
        try:
            sent = self.child.register(key, fd)
        except FsyncProcessGone as e:
            self._on_child_gone(e)
            return False
        if sent:
            self.registered.add(key)
        return sent

    def sent(self, token: int, handed: list[Handed]) -> None:
        """``handed`` went with the request ``token``."""
        if handed:
            size = sum(len(frame) for _, _, frame in handed)
            self.handed.append((token, handed))
            self._sizes.append((token, size))
            self._unanswered += size

    def answered(self, token: int, errno: int, reports: Callable[[], Reports]) -> None:
        """A durability answer up to ``token``: the child has taken those answers' bytes; if its fdatasync
        failed (now or before), it writes none of them and they are taken back, after the reports that came
        before this answer (``reports()``: those the child did write) are applied."""
        sizes = self._sizes
        while sizes and sizes[0][0] <= token:
            self._unanswered -= sizes.popleft()[1]
        if errno or self.failed:
            for reported, partial in reports():
                self.written(reported, partial)
        if errno:
            self.failed = True
        if self.failed:
            handed = self.handed
            while handed and handed[0][0] <= token:
                take_back(handed.popleft()[1])

    def written(self, token: int, partial: dict[int, int]) -> None:
        """The child's write report up to ``token``: ``partial`` maps a connection key whose bytes were not
        all written to how many were (in order over its answers); the rest of those is sent here."""
        handed = self.handed
        left = dict(partial)
        count = 0
        while handed and handed[0][0] <= token:
            for cb, key, frame in handed.popleft()[1]:
                n = left.get(key)
                if n is None or n >= len(frame):
                    if n is not None:
                        left[key] = n - len(frame)
                    count += 1
                    cb.written(None)
                else:
                    left[key] = 0
                    cb.written(frame[n:])
        if count and self.metrics is not None:
            self.metrics.handed_answers.inc(count)

    def forget(self, key: int) -> None:
        """A client connection closed: the child drops its copy of the socket (after its pending writes)."""
        if key in self.registered:
            self.registered.discard(key)
            self.pending_drops.append(key)
            self.drop_now()

    def drop_now(self) -> None:
        """Send the drops waiting, as far as the child's socket has room for them now."""
        drops = self.pending_drops
        if self.child.dead is not None:
            drops.clear()
            return
        try:
            while drops and self.child.drop(drops[0]):
                drops.popleft()
        except FsyncProcessGone as e:
            self._on_child_gone(e)
        if drops:
            self._drops_waiting.set()

    async def send_drops(self) -> None:
        """Drops that found no room are tried again every few ms until all are sent (a closed connection's
        socket stays open in the child until then: its client waits for EOF)."""
        while True:
            await self._drops_waiting.wait()
            self._drops_waiting = trio.Event()
            while self.pending_drops:
                await trio.sleep(DROP_RETRY_S)
                self.drop_now()

    def child_gone(self) -> None:
        """The child was given up on: every answer it was to write may or may not have been written."""
        handed, self.handed = self.handed, deque()
        self._sizes.clear()
        self._unanswered = 0
        self.registered.clear()
        self.pending_drops.clear()
        for _, entries in handed:
            for cb, _, _ in entries:
                cb.abandon()


def take_back(handed: list[Handed]) -> None:
    for cb, _, _ in handed:
        cb.take_back()
