"""Transaction states: their log ids, the names Describe/List show, and which transitions are legal.

Rules (Kafka 3.9 ``TransactionMetadata.scala``):
- The id is what ``__transaction_state`` stores (TransactionStatus int8); the name is what
  DescribeTransactions and ListTransactions show and what ListTransactions' state filters match.
- A state may be entered only from one of its ``VALID_PREVIOUS`` states (a transition to anything else is a
  bug, raised as IllegalTransition).
- ``Dead`` is never a current state: it is the pending state of an id whose tombstone is being written.
  ``PrepareEpochFence`` is never written: it is the pending state of an epoch bump that is immediately
  followed by the PrepareAbort write.
- Only Empty, CompleteCommit and CompleteAbort ids may expire.
"""

from __future__ import annotations

from enum import IntEnum


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return _NAMES[self]


class IllegalTransition(RuntimeError):
    """A transition Kafka's state machine forbids: a coordinator bug, never a client error."""


_NAMES: dict[TxnState, str] = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
BY_NAME: dict[str, TxnState] = {name: state for state, name in _NAMES.items()}

_S = TxnState
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_ABORT, _S.COMPLETE_COMMIT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}
EXPIRATION_ALLOWED = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
PREPARING = frozenset({_S.PREPARE_COMMIT, _S.PREPARE_ABORT})
COMPLETE = frozenset({_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})


def from_id(state_id: int) -> TxnState:
    """The state a log record's TransactionStatus names; ValueError for an unknown id."""
    return TxnState(state_id)
