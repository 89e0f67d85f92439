"""What one call into the transaction coordinator asks the runtime to do.

Rules:
- ``writes``: each TxnWrite's records (key, value | None) go, in order and durably (acks=-1), to
  ``__transaction_state-<partition>``; then the runtime calls ``TxnCoordinator.write_done(write_id, None,
  now_ms)``, or ``write_done(write_id, error_code, now_ms)`` if the append failed. A reply that depends on a
  write is only ever in the outcome of that ``write_done``.
- ``replies``: (token, response body dict) to send now, in order. Field names are the Kafka JSON names in
  snake_case; throttle_time_ms is left to the encoder.
- ``markers``: each MarkerTask is a COMMIT (commit=True) or ABORT control batch for producer_id /
  producer_epoch with coordinator_epoch, to append durably to every listed partition; once all of them
  are durable the runtime calls ``markers_done(txn_id, producer_id, producer_epoch, now_ms)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class TxnWrite:
    write_id: int
    partition: int
    records: list[tuple[bytes, bytes | None]]


@dataclass(slots=True)
class MarkerTask:
    txn_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: list[tuple[str, int]]  # sorted


@dataclass(slots=True)
class TxnOutcome:
    writes: list[TxnWrite] = field(default_factory=list)
    replies: list[tuple[object, dict]] = field(default_factory=list)
    markers: list[MarkerTask] = field(default_factory=list)

    def reply_for(self, token: object) -> dict | None:
        for t, body in self.replies:
            if t == token:
                return body
        return None
