"""The error codes the transaction coordinator answers, and how Kafka rewrites them per request version.

Rules (Kafka 3.9 ``KafkaApis``, ``TransactionStateManager.appendTransactionToLog``,
``AddPartitionsToTxnManager``):
- ``append_error``: a failed ``__transaction_state`` append becomes a coordinator error: UNKNOWN_TOPIC_OR_
  PARTITION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT -> COORDINATOR_NOT_AVAILABLE;
  NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR -> NOT_COORDINATOR; MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE
  -> UNKNOWN_SERVER_ERROR; anything else passes through.
- ``client_error``: PRODUCER_FENCED is INVALID_PRODUCER_EPOCH for InitProducerId < 4 and AddPartitionsToTxn,
  AddOffsetsToTxn, EndTxn < 2; TRANSACTION_ABORTABLE is INVALID_TXN_STATE below the first version that
  knows it (InitProducerId 5, AddPartitionsToTxn 5, AddOffsetsToTxn 4, EndTxn 4, Produce 11,
  TxnOffsetCommit 4).
- ``verification_error``: what a KIP-890 verify answer becomes for the Produce / TxnOffsetCommit that asked:
  PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH always (producers expect it there), TRANSACTION_ABORTABLE as
  ``client_error``.
TRANSACTION_ABORTABLE (120) and TRANSACTIONAL_ID_NOT_FOUND (105) are not in protocol.errors.ErrorCode yet;
they are plain ints here until they are.
"""

from __future__ import annotations

from protocol.errors import ErrorCode


def _code(name: str, number: int) -> int:
    return ErrorCode[name] if name in ErrorCode.__members__ else number


TRANSACTION_ABORTABLE = _code("TRANSACTION_ABORTABLE", 120)
TRANSACTIONAL_ID_NOT_FOUND = _code("TRANSACTIONAL_ID_NOT_FOUND", 105)

PRODUCE = 0
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28

_FENCED_SINCE = {INIT_PRODUCER_ID: 4, ADD_PARTITIONS_TO_TXN: 2, ADD_OFFSETS_TO_TXN: 2, END_TXN: 2}
_ABORTABLE_SINCE = {INIT_PRODUCER_ID: 5, ADD_PARTITIONS_TO_TXN: 5, ADD_OFFSETS_TO_TXN: 4, END_TXN: 4,
                    PRODUCE: 11, TXN_OFFSET_COMMIT: 4}

_APPEND = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


def append_error(error: int) -> int:
    return int(_APPEND.get(error, error))


def client_error(api_key: int, version: int, error: int) -> int:
    if error == ErrorCode.PRODUCER_FENCED and version < _FENCED_SINCE.get(api_key, 0):
        return int(ErrorCode.INVALID_PRODUCER_EPOCH)
    if error == TRANSACTION_ABORTABLE and version < _ABORTABLE_SINCE.get(api_key, 0):
        return int(ErrorCode.INVALID_TXN_STATE)
    return int(error)


def verification_error(api_key: int, version: int, error: int) -> int:
    if error == ErrorCode.PRODUCER_FENCED:
        return int(ErrorCode.INVALID_PRODUCER_EPOCH)
    return client_error(api_key, version, error)
