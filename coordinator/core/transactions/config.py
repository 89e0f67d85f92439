"""Transaction coordinator settings, named and defaulted as Kafka's broker configs.

Rules: ``max_timeout_ms`` is transaction.max.timeout.ms (an InitProducerId timeout above it, or <= 0, is
INVALID_TRANSACTION_TIMEOUT); ``abort_timed_out_interval_ms`` is
transaction.abort.timed.out.transaction.cleanup.interval.ms (how often Ongoing transactions past their
timeout are fenced and aborted); ``id_expiration_ms`` is transactional.id.expiration.ms (an idle Empty or
Complete* id is then deleted); ``remove_expired_interval_ms`` is
transaction.remove.expired.transaction.cleanup.interval.ms (how often that is checked);
``complete_retry_backoff_ms`` (ours) spaces retries of a failed CompleteCommit/CompleteAbort write.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TxnConfig:
    max_timeout_ms: int = 900_000
    abort_timed_out_interval_ms: int = 10_000
    id_expiration_ms: int = 7 * 24 * 3600 * 1000
    remove_expired_interval_ms: int = 3_600_000
    complete_retry_backoff_ms: int = 100
