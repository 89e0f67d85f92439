"""Transactions at the hosted topics' partitions: verification, markers, read_committed, DescribeProducers.

Rules (Kafka 3.9's ReplicaManager / UnifiedLog / KafkaApis, on one node):
- Produce: a request holding a transactional batch needs a transactional id (else the whole request answers
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as KafkaApis does before anything else). The first transactional batch
  of a producer in a partition (no open transaction there) is verified with the transaction coordinator
  (KIP-890 part 1, a local call): the partition must be in that producer's ongoing transaction. Its refusal is
  the partition's error, mapped as AddPartitionsToTxnManager maps it for Produce: PRODUCER_FENCED ->
  INVALID_PRODUCER_EPOCH, TRANSACTION_ABORTABLE -> INVALID_TXN_STATE below Produce v11. So a batch that arrives
  after its transaction was aborted (a late retry) cannot open a transaction no marker will ever close.
- Markers (``write_marker``): checked against the partition's producer state (a lower producer epoch:
  INVALID_PRODUCER_EPOCH; a lower coordinator epoch: TRANSACTION_COORDINATOR_FENCED), appended as one control
  batch, recorded in the producer state (the open transaction closes; the LSO counts it once the high
  watermark passes the marker), and reported once durable (cluster mode: replicated, ``batch_append``; a
  ``ReplicationError`` reports its produce error); fetchers are woken then. A missing partition (its topic deleted) answers UNKNOWN_TOPIC_OR_PARTITION.
- read_committed Fetch (isolation 1): records at or past the LSO are not returned (the LSO is min(first offset
  of the oldest open transaction, high watermark)); ``last_stable_offset`` is the LSO and
  ``aborted_transactions`` lists every aborted transaction overlapping [fetch offset, LSO) (the client drops
  their batches). read_uncommitted: the high watermark bounds, the LSO is still reported, the list is null.
  ListOffsets with isolation 1: latest is the LSO and by-time lookups answer only offsets below it.
- DescribeProducers (61): the active producers of each partition from its producer state; unknown partitions
  UNKNOWN_TOPIC_OR_PARTITION. Internal topics answer like unknown ones.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from coordinator.runtime import internal_topics
from coordinator.runtime.batch_append import append_batch
from coordinator.storage.errors import LogOfflineError, StorageError
from protocol.control_batch import build_marker_batch
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from coordinator.runtime.dispatch import Slot
    from coordinator.runtime.group_commit import GroupCommit
    from coordinator.storage.log import PartitionLog
    from coordinator.storage.manager import LogManager
    from coordinator.storage.producer_state import ProducerStates
    from protocol.codec import Request
    from protocol.record_batch import BatchHeader

log = logging.getLogger("groupcoord.transactions")

MARKER_TIMEOUT_S = 30.0  # cluster mode: a marker not replicated by then is retried by its sender

Verify = Callable[[str, int, int, str, int], int]  # (txn id, producer id, epoch, topic, partition) -> error code


def verify_error(error: int, produce_version: int) -> int:
    """A verification refusal as a Produce partition error (AddPartitionsToTxnManager's mapping)."""
    if error == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if error == ErrorCode.TRANSACTION_ABORTABLE and produce_version < 11:
        return ErrorCode.INVALID_TXN_STATE
    return error


def check_transactional(states: ProducerStates, header: BatchHeader, verify: Verify | None, txn_id: str | None,
                        topic: str, partition: int, produce_version: int) -> int | None:
    """None when a transactional batch may go on to the producer-state checks; else its partition error."""
    if states.has_open_txn(header.producer_id):
        return None
    if verify is None or txn_id is None:
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    error = verify(txn_id, header.producer_id, header.producer_epoch, topic, partition)
    return None if error == 0 else verify_error(error, produce_version)


def read_committed_view(states: ProducerStates, hw: int, fetch_offset: int) -> tuple[int, list[dict[str, int]]]:
    """(LSO, aborted transactions overlapping [fetch_offset, LSO)) of a partition for a read_committed Fetch."""
    lso = states.last_stable_offset(hw)
    if fetch_offset >= lso:
        return lso, []
    return lso, [{"producer_id": pid, "first_offset": first} for pid, first in states.aborted_between(fetch_offset, lso)]


class Topics(Protocol):
    """What this module uses of the topic service (topics.py owns it and imports this module)."""

    logs: LogManager
    commit: GroupCommit

    def producer_states(self, plog: PartitionLog) -> ProducerStates: ...

    def producer_states_known(self) -> list[tuple[PartitionLog, ProducerStates]]: ...

    def wake_fetchers(self) -> None: ...

    def replication(self) -> Any: ...


class TxnPartitions:
    """The topic service's transaction work (``TopicService.txn``)."""

    def __init__(self, topics: Topics) -> None:
        self.topics = topics

    def write_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                     coordinator_epoch: int, callback: Callable[[int | None], None]) -> None:
        ts = self.topics
        plog = ts.logs.get(topic, partition)
        if plog is None:
            callback(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            return
        states = ts.producer_states(plog)
        error = states.check_marker(producer_id, producer_epoch, coordinator_epoch)
        if error is not None:
            callback(error)
            return
        now = int(time.time() * 1000)
        batch = build_marker_batch(producer_id, producer_epoch, commit, coordinator_epoch, now)

        def durable(err: Exception | None) -> None:
            ts.wake_fetchers()
            callback(None if err is None else getattr(err, "produce_error", ErrorCode.KAFKA_STORAGE_ERROR))

        try:
            info = append_batch(ts.commit, plog, batch, durable, ts.replication(), MARKER_TIMEOUT_S)
        except (LogOfflineError, StorageError, OSError) as e:
            log.error("marker append to %s-%d failed: %s", topic, partition, e)
            callback(ErrorCode.KAFKA_STORAGE_ERROR)
            return
        states.record_marker(producer_id, producer_epoch, coordinator_epoch, commit, info.base_offset, timestamp=now)

    def lso_lags(self) -> list[tuple[str, int, int]]:
        """(topic, partition, high watermark - LSO) of every partition with an open transaction (metrics)."""
        out = []
        for plog, states in list(self.topics.producer_states_known()):
            if states.first_unstable_offset() is None:
                continue
            hw = plog.high_watermark
            topic, _, part = plog.name.rpartition("-")
            out.append((topic, int(part), max(0, hw - states.last_stable_offset(hw))))
        return out

    def lso(self, plog: PartitionLog, hw: int) -> int:
        return self.topics.producer_states(plog).last_stable_offset(hw)

    def handle_describe_producers(self, req: Request, slot: Slot) -> None:
        ts = self.topics
        out = []
        for t in req.body["topics"] or ():
            name, parts = t["name"], []
            for index in t["partition_indexes"] or ():
                res: dict[str, Any] = {"partition_index": index, "error_code": 0, "error_message": None,
                                       "active_producers": []}
                parts.append(res)
                plog = ts.logs.get(name, index)
                if plog is None or internal_topics.hidden(name) or name == internal_topics.OFFSETS_TOPIC:
                    res["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                try:
                    states = ts.producer_states(plog)
                except (StorageError, OSError):
                    res["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                    continue
                res["active_producers"] = [
                    {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
                     "last_sequence": p.last_sequence, "last_timestamp": p.last_timestamp,
                     "coordinator_epoch": p.coordinator_epoch, "current_txn_start_offset": p.current_txn_start_offset}
                    for p in states.producers()]
            out.append({"name": name, "partitions": parts})
        slot.complete({"throttle_time_ms": 0, "topics": out})
