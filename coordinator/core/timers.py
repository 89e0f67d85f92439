"""Timers as data: keyed deadlines, no clock.

Rules:
- ``schedule(key, deadline_ms)`` sets (or moves) the single deadline of ``key``.
- ``extend(key, deadline_ms)`` is ``schedule`` for a live key whose deadline moves no earlier than its
  queued entry (the heap is untouched, so ``lower_bound`` stays); otherwise it changes nothing and returns
  False.
- ``cancel(key)`` forgets it; cancelling an unknown key is fine.
- ``pop_due(now_ms)`` removes and returns the earliest key whose deadline <= now_ms (ties: the one
  scheduled first), or None; ``expired(now_ms)`` pops all of them in that order.
- ``next_deadline()`` is the earliest live deadline, or None; ``lower_bound()`` is O(1) and never later
  than it (a queued entry is never later than its key's live deadline), or None when nothing is queued.
Implementation: a heap with lazy deletion, and one record per live key, [live deadline, its sequence number,
deadline and sequence number of the key's heap entry that counts] (a list, changed in place: re-arming a
deadline allocates nothing). Sequence numbers are unique, so a heap entry counts iff its sequence number
is its key's fourth field. A key's counting entry may be earlier than its live deadline (moving a deadline
later — every heartbeat — pushes nothing); such an entry is re-pushed at the live deadline when it reaches
the top. Stale entries (superseded, cancelled) are dropped when seen and the heap is rebuilt when it holds
more than twice the live keys (plus 64), so memory stays O(live keys).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable


class Timers:
    __slots__ = ("_heap", "_live", "_seq")

    def __init__(self) -> None:
        self._live: dict[Hashable, list[int]] = {}  # key -> [deadline, seq, queued deadline, queued seq]
        self._heap: list[tuple[int, int, Hashable]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._live

    def deadline(self, key: Hashable) -> int | None:
        rec = self._live.get(key)
        return None if rec is None else rec[0]

    def schedule(self, key: Hashable, deadline_ms: int) -> None:
        if self.extend(key, deadline_ms):
            return  # the queued entry fires first and is then moved to the live deadline
        seq = self._seq = self._seq + 1
        rec = self._live.get(key)
        if rec is None:
            self._live[key] = [deadline_ms, seq, deadline_ms, seq]
        else:  # earlier than the queued entry: queue a new one, which is the one that counts
            rec[0] = rec[2] = deadline_ms
            rec[1] = rec[3] = seq
        heapq.heappush(self._heap, (deadline_ms, seq, key))
        if len(self._heap) > 2 * len(self._live) + 64:
            self._compact()

    def extend(self, key: Hashable, deadline_ms: int) -> bool:
        rec = self._live.get(key)
        if rec is None or deadline_ms < rec[2]:
            return False
        seq = self._seq = self._seq + 1
        rec[0] = deadline_ms
        rec[1] = seq
        return True

    def cancel(self, key: Hashable) -> None:
        if self._live.pop(key, None) is not None and len(self._heap) > 2 * len(self._live) + 64:
            self._compact()

    def _drop_stale(self) -> None:
        heap, live = self._heap, self._live
        while heap:
            _, seq, key = heap[0]
            rec = live.get(key)
            if rec is None or rec[3] != seq:
                heapq.heappop(heap)  # cancelled, or superseded by a later push
                continue
            if rec[1] == seq:
                return
            heapq.heapreplace(heap, (rec[0], rec[1], key))  # deadline moved later: re-queue
            rec[2] = rec[0]
            rec[3] = rec[1]

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
        return key

    def expired(self, now_ms: int) -> list[Hashable]:
        keys = []
        while (key := self.pop_due(now_ms)) is not None:
            keys.append(key)
        return keys

    def _compact(self) -> None:
        heap = []
        for key, rec in self._live.items():
            rec[2] = rec[0]
            rec[3] = rec[1]
            heap.append((rec[0], rec[1], key))
        heapq.heapify(heap)
        self._heap = heap
