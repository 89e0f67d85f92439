"""One transactional id's state and its prepare -> append -> complete transitions (Kafka 3.9
``TransactionMetadata.scala``).

Rules:
- Every change is prepared first: ``prepare_*`` checks the transition is legal, sets ``pending`` to the
  target state and returns an immutable ``Transit`` (what the log record will say). Nothing else changes
  until the record is durable and ``complete(transit)`` installs it, re-checking Kafka's invariants: the
  epoch is unchanged, +1, or 0 with a new producer id (Empty); the partition set only grows (Ongoing) and is
  unchanged by Prepare*; the timeout changes only with InitProducerId. A failed write just clears
  ``pending``. While ``pending`` is set the id takes no other transition.
- Two Kafka exceptions to "memory never runs ahead of the log", kept on purpose: the epoch fence bumps
  ``producer_epoch`` in memory before its PrepareAbort is durable (a failed fence leaves it bumped and sets
  ``failed_epoch_fence`` so the next fence does not bump again: the bumped epoch was never returned to
  anyone), and marker completion empties ``partitions`` before Complete* is durable (Describe then shows
  no partition still waiting for a marker).
- Completing Empty does not reset ``start_ms`` (Kafka keeps the last transaction's start in memory; the
  record says -1).
- Epochs: ``epoch_exhausted`` is epoch >= 32766 (Short.MaxValue - 1), so a fence (+1) always fits an int16.
- ``lastProducerId``/``lastProducerEpoch`` are not stored in a v0 record: after a reload they are -1, so a
  KIP-360 retry that spans a reload is fenced (as in Kafka).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.errors import ErrorCode

from .records import TxnLogValue
from .state import COMPLETE, VALID_PREVIOUS, IllegalTransition, TxnState

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
EPOCH_MAX = 0x7FFF
_EMPTY: frozenset[tuple[str, int]] = frozenset()

Partitions = frozenset[tuple[str, int]]


def epoch_exhausted(epoch: int) -> bool:
    return epoch >= EPOCH_MAX - 1


@dataclass(frozen=True, slots=True)
class Transit:
    """The target of a prepared transition (Kafka's TxnTransitMetadata)."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: Partitions
    start_ms: int
    last_update_ms: int

    def log_value(self) -> TxnLogValue:
        """The record value (Kafka's valueToBytes: Empty writes a null partition array)."""
        if self.state is TxnState.EMPTY:
            if self.partitions:
                raise IllegalTransition(f"an Empty transition carries partitions: {self}")
            parts = None
        else:
            parts = tuple(sorted(self.partitions))
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state, parts,
                           self.last_update_ms, self.start_ms)


@dataclass(slots=True, eq=False)
class TxnMetadata:
    txn_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: Partitions = field(default=_EMPTY)
    start_ms: int = -1
    last_update_ms: int = -1
    pending: TxnState | None = None
    failed_epoch_fence: bool = False

    @classmethod
    def new(cls, txn_id: str, producer_id: int, timeout_ms: int, now_ms: int) -> TxnMetadata:
        """A transactional id seen for the first time: Empty, epoch -1 (becomes 0 at its first write)."""
        return cls(txn_id, producer_id, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, timeout_ms,
                   TxnState.EMPTY, _EMPTY, -1, now_ms)

    @classmethod
    def from_log(cls, txn_id: str, v: TxnLogValue) -> TxnMetadata:
        """Kafka's readTxnRecordValue: last ids unknown; an Empty record's partitions are ignored."""
        parts = _EMPTY if v.state is TxnState.EMPTY or not v.partitions else frozenset(v.partitions)
        return cls(txn_id, v.producer_id, NO_PRODUCER_ID, v.producer_epoch, NO_PRODUCER_EPOCH, v.timeout_ms,
                   v.state, parts, v.start_ms, v.last_update_ms)

    # ------------------------------------------------------------ prepare

    def _prepare(self, state: TxnState, producer_id: int, epoch: int, last_epoch: int, timeout_ms: int,
                 partitions: Partitions, start_ms: int, now_ms: int) -> Transit:
        if self.pending is not None:
            raise IllegalTransition(f"{self.txn_id}: preparing {state.name} while {self.pending.name} is pending")
        if producer_id < 0:
            raise IllegalTransition(f"{self.txn_id}: illegal producer id {producer_id}")
        if state is not TxnState.DEAD and epoch < 0:
            raise IllegalTransition(f"{self.txn_id}: illegal producer epoch {epoch}")
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(f"{self.txn_id}: {self.state.name} -> {state.name} is not a valid transition")
        self.pending = state
        return Transit(producer_id, self.producer_id, epoch, last_epoch, timeout_ms, state, partitions, start_ms,
                       now_ms)

    def prepare_fence_epoch(self) -> Transit:
        """Ongoing -> PrepareEpochFence with epoch + 1 (or the same epoch after a failed fence)."""
        if self.producer_epoch == EPOCH_MAX:
            raise IllegalTransition(f"{self.txn_id}: cannot fence epoch {EPOCH_MAX}")
        bumped = self.producer_epoch if self.failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(TxnState.PREPARE_EPOCH_FENCE, self.producer_id, bumped, NO_PRODUCER_EPOCH,
                             self.timeout_ms, self.partitions, self.start_ms, self.last_update_ms)

    def prepare_increment_epoch(self, timeout_ms: int, expected_epoch: int | None,
                                now_ms: int) -> Transit | ErrorCode:
        """InitProducerId on Empty/Complete*: bump, or (KIP-360) repeat a bump whose answer was lost.

        Kafka raises (an internal error) on an exhausted epoch here, which happens when a KIP-360 request
        expects an epoch other than the exhausted current one; we answer what the rules say instead: the
        repeated bump's epoch, or PRODUCER_FENCED. (A request expecting the current epoch rotates the id.)"""
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            nxt, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            nxt, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            nxt, last = self.producer_epoch, self.last_producer_epoch
        else:
            return ErrorCode.PRODUCER_FENCED
        if nxt > EPOCH_MAX - 1:
            raise IllegalTransition(f"{self.txn_id}: cannot allocate epoch {nxt} for producer {self.producer_id}")
        return self._prepare(TxnState.EMPTY, self.producer_id, nxt, last, timeout_ms, _EMPTY, -1, now_ms)

    def prepare_rotation(self, new_producer_id: int, timeout_ms: int, now_ms: int,
                         record_last_epoch: bool) -> Transit:
        """Epoch exhausted: a fresh producer id at epoch 0 (the old id becomes ``last_producer_id``)."""
        if self.state in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise IllegalTransition(f"{self.txn_id}: cannot rotate the producer id of an open transaction")
        last = self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
        return self._prepare(TxnState.EMPTY, new_producer_id, 0, last, timeout_ms, _EMPTY, -1, now_ms)

    def prepare_add_partitions(self, added: Partitions, now_ms: int) -> Transit:
        start = now_ms if self.state is TxnState.EMPTY or self.state in COMPLETE else self.start_ms
        return self._prepare(TxnState.ONGOING, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.timeout_ms, self.partitions | added, start, now_ms)

    def prepare_end(self, state: TxnState, now_ms: int) -> Transit:
        """Ongoing -> PrepareCommit / PrepareAbort."""
        return self._prepare(state, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.timeout_ms, self.partitions, self.start_ms, now_ms)

    def prepare_complete(self, now_ms: int) -> Transit:
        """PrepareCommit/PrepareAbort -> CompleteCommit/CompleteAbort; the partition set is emptied."""
        state = TxnState.COMPLETE_COMMIT if self.state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        self.failed_epoch_fence = False  # the Prepare* record (with the fenced epoch) is durable
        return self._prepare(state, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.timeout_ms, _EMPTY, self.start_ms, now_ms)

    def prepare_dead(self) -> Transit:
        return self._prepare(TxnState.DEAD, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.timeout_ms, _EMPTY, self.start_ms, self.last_update_ms)

    # ------------------------------------------------------------ complete

    def complete(self, t: Transit) -> None:
        """Install a durable transition (Kafka's completeTransitionTo)."""
        to = self.pending
        if to is None or to is not t.state:
            raise IllegalTransition(f"{self.txn_id}: completing {t.state.name} while pending is {to}")
        same_producer = t.producer_epoch == self.producer_epoch and t.producer_id == self.producer_id
        if to is TxnState.EMPTY:
            bump = t.producer_epoch == self.producer_epoch + 1 or (t.producer_epoch == 0
                                                                   and t.producer_id != self.producer_id)
            if (self.producer_epoch != t.producer_epoch and not bump) or t.partitions or t.start_ms != -1:
                raise IllegalTransition(f"{self.txn_id}: bad Empty transition {t}")
            self.timeout_ms = t.timeout_ms
            self.producer_epoch = t.producer_epoch
            self.last_producer_epoch = t.last_producer_epoch
            self.producer_id = t.producer_id
            self.last_producer_id = t.last_producer_id
        elif to is TxnState.ONGOING:
            if not same_producer or not self.partitions <= t.partitions or self.timeout_ms != t.timeout_ms:
                raise IllegalTransition(f"{self.txn_id}: bad Ongoing transition {t}")
            self.start_ms = t.start_ms
            self.partitions = t.partitions
        elif to in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            if (not same_producer or self.partitions != t.partitions or self.timeout_ms != t.timeout_ms
                    or self.start_ms != t.start_ms):
                raise IllegalTransition(f"{self.txn_id}: bad {to.name} transition {t}")
        elif to in COMPLETE:
            if not same_producer or self.timeout_ms != t.timeout_ms or t.start_ms == -1:
                raise IllegalTransition(f"{self.txn_id}: bad {to.name} transition {t}")
            self.start_ms = t.start_ms
            self.partitions = _EMPTY
        else:  # PrepareEpochFence and Dead are never completed
            raise IllegalTransition(f"{self.txn_id}: {to.name} is never completed")
        self.last_update_ms = t.last_update_ms
        self.pending = None
        self.state = to
