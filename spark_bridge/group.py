"""Mirror a streaming query's progress into a coordinator consumer group, so lag tools can see it.

Rules:
- The Spark checkpoint is the truth for Spark; the group is a mirror. A commit that fails is logged and
  retried at the next batch, never fails the query.
- Commits are "simple" OffsetCommits, as Kafka's admin tools and Spark-less offset mirrors make: no
  member, generation -1. The group therefore has no members (state Empty) and its offsets never expire
  while the query keeps committing.
- Each commit carries the batch id in the metadata (``{"batchId": N, "source": "spark_bridge"}``) and
  offsets that are the *next* offset to read per partition (Kafka's convention), so ``groupcoord groups
  offsets`` shows lag 0 once the query has caught up.
- The same offsets are not committed twice in a row.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping

from client.cluster import Cluster
from client.consumer_protocol import TopicPartition
from client.errors import KafkaError, error_for
from client.offsets import (
    OFFSET_COMMIT,
    OffsetAndMetadata,
    first_error,
    offset_commit_body,
    parse_offset_commit,
)
from client.security import SecurityConfig
from protocol.errors import ErrorCode

log = logging.getLogger(__name__)
_RETRY = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
                    ErrorCode.COORDINATOR_NOT_AVAILABLE})


class GroupMirror:
    def __init__(self, bootstrap: str, group_id: str, *, client_id: str = "groupcoord-spark",
                 request_timeout_ms: int = 30000, retry_backoff_ms: int = 100,
                 security: SecurityConfig | None = None) -> None:
        self.bootstrap, self.group_id = bootstrap, group_id
        self.security = security
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_s = retry_backoff_ms / 1000
        self._cluster: Cluster | None = None
        self._last: dict[TopicPartition, int] | None = None

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def commit(self, offsets: Mapping[TopicPartition, int], batch_id: int) -> bool:
        """Commit ``offsets`` with the batch id; True when the coordinator took them (or nothing changed)."""
        offsets = dict(offsets)
        if not offsets or offsets == self._last:
            return True
        try:
            self._commit(offsets, batch_id)
        except KafkaError as e:
            log.warning("could not mirror batch %d of group %s to the coordinator: %s", batch_id, self.group_id, e)
            self.close()
            return False
        self._last = offsets
        return True

    def _commit(self, offsets: dict[TopicPartition, int], batch_id: int) -> None:
        if self._cluster is None:
            self._cluster = Cluster(self.bootstrap, client_id=self.client_id,
                                    request_timeout_ms=self.request_timeout_ms, security=self.security)
        meta = json.dumps({"batchId": batch_id, "source": "spark_bridge"}, separators=(",", ":"))
        body = offset_commit_body(self.group_id, -1, "", None,
                                  {tp: OffsetAndMetadata(off, meta) for tp, off in offsets.items()})
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        while True:
            try:
                node = self._cluster.find_coordinator(self.group_id)
                _, resp = self._cluster.coordinator_connection(node).send(OFFSET_COMMIT, body)
            except KafkaError as e:
                if not e.retriable or time.monotonic() >= deadline:
                    raise
                time.sleep(self.retry_backoff_s)
                continue
            code = first_error(parse_offset_commit(resp))
            if code == ErrorCode.NONE:
                return
            if code not in _RETRY or time.monotonic() >= deadline:
                raise error_for(code, f"OffsetCommit for group {self.group_id}")
            time.sleep(self.retry_backoff_s)
