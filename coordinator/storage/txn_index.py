"""The aborted transactions of one partition (Kafka's ``TransactionIndex``, ``AbortedTxn`` and ``CompletedTxn``),
held in memory: what a read_committed Fetch lists as AbortedTransactions.

Rules:
- An entry is (producer id, first offset, last offset, last stable offset). The last offset is the ABORT
  marker's offset; the last stable offset is the LSO once that transaction was removed: the first offset of the
  oldest transaction still open for *another* producer id, else last offset + 1
  (``ProducerStateManager.lastStableOffset``). It is never above last offset + 1.
- Entries are appended in marker order, so their last offsets strictly increase (a smaller or equal one is a
  ``ValueError``, as Kafka's ``TransactionIndex.append`` refuses it).
- ``collect(fetch_offset, upper_bound)`` returns every entry with last offset >= fetch_offset and first offset
  < upper_bound, in first-offset order. It starts at the first entry whose last offset reaches fetch_offset and
  stops after the first entry whose last stable offset is >= upper_bound (``collectAbortedTxns``): any later
  abort began at or after that offset, so the early stop loses nothing.
- ``truncate_before(log_start)`` forgets entries wholly below the log start (last offset < log start), as
  retention deletes Kafka's segments with their ``.txnindex``; ``truncate_from(offset)`` forgets entries whose
  marker is at or after ``offset`` (a log cut back), as ``TransactionIndex.truncateTo`` does.
- Memory: four int64 columns, 32 bytes an entry.
Pure: no IO, no clock.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterator
from typing import NamedTuple


class CompletedTxn(NamedTuple):
    """A transaction a marker ended: its producer id, first data offset, the marker's offset, and the outcome."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class AbortedTxn(NamedTuple):
    """One entry of the aborted-transactions index."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class AbortedTxnIndex:
    """The aborted transactions of one partition, in marker order."""

    __slots__ = ("_first", "_last", "_lso", "_pid")

    def __init__(self) -> None:
        self._pid = array("q")
        self._first = array("q")
        self._last = array("q")
        self._lso = array("q")

    def __len__(self) -> int:
        return len(self._last)

    def __iter__(self) -> Iterator[AbortedTxn]:
        for i in range(len(self._last)):
            yield self._entry(i)

    def _entry(self, i: int) -> AbortedTxn:
        return AbortedTxn(self._pid[i], self._first[i], self._last[i], self._lso[i])

    def append(self, txn: AbortedTxn) -> None:
        if self._last and txn.last_offset <= self._last[-1]:
            raise ValueError(f"aborted transaction ending at {txn.last_offset} does not follow the last one, "
                             f"ending at {self._last[-1]}")
        if txn.first_offset > txn.last_offset or txn.last_stable_offset > txn.last_offset + 1:
            raise ValueError(f"inconsistent aborted transaction {txn}")
        self._pid.append(txn.producer_id)
        self._first.append(txn.first_offset)
        self._last.append(txn.last_offset)
        self._lso.append(txn.last_stable_offset)

    def collect(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound), in first-offset order."""
        out: list[AbortedTxn] = []
        first, lso = self._first, self._lso
        for i in range(bisect_left(self._last, fetch_offset), len(self._last)):
            if first[i] < upper_bound:
                out.append(self._entry(i))
            if lso[i] >= upper_bound:
                break
        out.sort(key=lambda t: (t.first_offset, t.last_offset))
        return out

    def truncate_before(self, log_start_offset: int) -> int:
        """Forget entries whose last offset is below ``log_start_offset``; how many were forgotten."""
        n = bisect_left(self._last, log_start_offset)
        if n:
            for column in (self._pid, self._first, self._last, self._lso):
                del column[:n]
        return n

    def truncate_from(self, offset: int) -> int:
        """Forget entries whose last offset is at or after ``offset``; how many were forgotten."""
        n = bisect_left(self._last, offset)
        dropped = len(self._last) - n
        if dropped:
            for column in (self._pid, self._first, self._last, self._lso):
                del column[n:]
        return dropped
