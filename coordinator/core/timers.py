"""Timers as data: keyed deadlines, no clock.

Rules:
- ``schedule(key, deadline_ms)`` sets (or moves) the single deadline of ``key``.
- ``cancel(key)`` forgets it; cancelling an unknown key is fine.
- ``pop_due(now_ms)`` removes and returns the earliest key whose deadline <= now_ms (ties: the one
  scheduled first), or None; ``expired(now_ms)`` pops all of them in that order.
- ``next_deadline()`` is the earliest live deadline, or None; ``lower_bound()`` is O(1) and never later
  than it (a queued entry is never later than its key's live deadline), or None when nothing is queued.
Implementation: a heap with lazy deletion. A key's heap entry may be earlier than its live deadline
(moving a deadline later — every heartbeat — pushes nothing); such an entry is re-pushed at the live deadline
when it reaches the top. Stale entries are dropped when seen and the heap is rebuilt when it holds more than
twice the live keys, so memory stays O(live keys).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable


class Timers:
    __slots__ = ("_heap", "_inheap", "_live", "_seq")

    def __init__(self) -> None:
        self._live: dict[Hashable, tuple[int, int]] = {}
        self._inheap: dict[Hashable, tuple[int, int]] = {}  # the one heap entry of a key that counts
        self._heap: list[tuple[int, int, Hashable]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._live

    def deadline(self, key: Hashable) -> int | None:
        entry = self._live.get(key)
        return None if entry is None else entry[0]

    def schedule(self, key: Hashable, deadline_ms: int) -> None:
        self._seq += 1
        entry = (deadline_ms, self._seq)
        self._live[key] = entry
        queued = self._inheap.get(key)
        if queued is not None and queued[0] <= deadline_ms:
            return  # the queued entry fires first and is then moved to the live deadline
        self._inheap[key] = entry
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))
        if len(self._heap) > 2 * len(self._live) + 64:
            self._compact()

    def cancel(self, key: Hashable) -> None:
        self._live.pop(key, None)

    def _drop_stale(self) -> None:
        heap, live, inheap = self._heap, self._live, self._inheap
        while heap:
            deadline, seq, key = heap[0]
            if inheap.get(key) != (deadline, seq):
                heapq.heappop(heap)  # superseded by a later push
                continue
            entry = live.get(key)
            if entry is None:
                heapq.heappop(heap)
                del inheap[key]
                continue
            if entry == (deadline, seq):
                return
            heapq.heapreplace(heap, (entry[0], entry[1], key))  # deadline moved later: re-queue
            inheap[key] = entry

    def next_deadline(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def lower_bound(self) -> int | None:
        heap = self._heap
        return heap[0][0] if heap else None

    def pop_due(self, now_ms: int) -> Hashable | None:
        self._drop_stale()
        if not self._heap or self._heap[0][0] > now_ms:
            return None
        _, _, key = heapq.heappop(self._heap)
        del self._live[key]
        del self._inheap[key]
        return key

    def expired(self, now_ms: int) -> list[Hashable]:
        keys = []
        while (key := self.pop_due(now_ms)) is not None:
            keys.append(key)
        return keys

    def _compact(self) -> None:
        self._heap = [(d, s, k) for k, (d, s) in self._live.items()]
        self._inheap = dict(self._live)
        heapq.heapify(self._heap)
