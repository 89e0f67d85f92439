"""Consumer: the synchronous, Kafka-shaped API over a group member, offsets and the fetcher.

Rules and invariants:
- Not thread-safe, like Kafka's consumer: one application thread calls it. The only other thread is the
  member's heartbeat thread, which never calls user code.
- ``poll(timeout_ms)`` drives everything on the application thread: coordinator discovery, joins and
  syncs (rebalance listener callbacks run here, inside poll), auto-commit, completion callbacks of
  ``commit_async``, metadata refresh (the leader rejoins when a subscribed topic's partition count
  changes), initialises unknown positions (committed offset, else the reset policy), then asks the record
  source for records. The record source is a seam:
  records come from ``client.fetcher.Fetcher`` (seed 003) through ``RecordSource``; ``NoRecords`` is a
  stand-in for tests.
- Rebalance protocol: cooperative when every configured assignor is cooperative, eager otherwise.
  Eager: every owned partition is revoked before rejoining and the new assignment is assigned whole.
  Cooperative: only partitions that move are revoked, after the assignment, and a follow-up rebalance
  hands them to their new owner. Partitions are "lost" (``on_partitions_lost``) instead of revoked when
  the member's generation was reset (session expiry, fencing, poll timeout).
- A listener exception does not stop the rebalance; the first one is raised from poll() afterwards.
- Auto-commit (``enable_auto_commit``) commits consumed positions asynchronously every
  ``auto_commit_interval_ms`` during poll, synchronously before an eager revocation, and on close.
- ``close()`` commits (auto-commit), revokes, and leaves the group with LeaveGroup unless the member is
  static (``group_instance_id``): a static member's partitions wait for it for ``session_timeout_ms``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from client.assignors import COOPERATIVE, EAGER, PartitionAssignor, RangeAssignor
from client.cluster import Cluster
from client.consumer_protocol import (
    Subscription,
    TopicPartition,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from client.errors import IllegalStateError, KafkaError
from client.fetcher import Fetcher, FetcherRecordSource
from client.member import ClusterTransport, Generation, GroupMember, JoinedMember, MemberConfig
from client.offsets import RESET_POLICIES, GroupOffsets, OffsetAndMetadata, Positions
from client.security import SecurityConfig

log = logging.getLogger(__name__)

CommitCallback = Callable[[Mapping[TopicPartition, OffsetAndMetadata], "Exception | None"], None]


class ConsumerRebalanceListener:
    """Override what you need; every method runs on the application thread, inside poll()."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        pass

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.on_partitions_revoked(lost)


class RecordSource(Protocol):
    """The fetcher's seam: records for the fetchable partitions, waiting at most ``timeout_ms``."""

    def poll(self, positions: Positions, timeout_ms: int) -> dict[TopicPartition, list[Any]]: ...


class NoRecords:
    """Until the fetcher exists: never any records, never waits (poll waits on the member instead)."""

    def poll(self, positions: Positions, timeout_ms: int) -> dict[TopicPartition, list[Any]]:
        return {}


class Consumer:
    def __init__(self, *, bootstrap_servers: str | Sequence[str], group_id: str,
                 client_id: str | None = None, session_timeout_ms: int = 45000,
                 heartbeat_interval_ms: int = 3000, max_poll_interval_ms: int = 300000,
                 rebalance_timeout_ms: int | None = None, group_instance_id: str | None = None,
                 partition_assignment_strategy: Sequence[PartitionAssignor] | None = None,
                 enable_auto_commit: bool = True, auto_commit_interval_ms: int = 5000,
                 auto_offset_reset: str = "latest", request_timeout_ms: int = 30000,
                 retry_backoff_ms: int = 100, metadata_max_age_ms: int = 300000, client_rack: str | None = None,
                 max_poll_records: int = 500, fetch_max_wait_ms: int = 500, fetch_min_bytes: int = 1,
                 fetch_max_bytes: int = 52428800, max_partition_fetch_bytes: int = 1048576,
                 isolation_level: str = "read_uncommitted", check_crcs: bool = True,
                 record_source: RecordSource | None = None, security: SecurityConfig | None = None,
                 **security_settings: Any) -> None:
        """``security`` or Kafka's security keywords (``security_protocol``, ``sasl_mechanism``, ...; see
        ``client.security``) secure every connection of the consumer."""
        security = SecurityConfig.resolve(security, security_settings, "Consumer")
        if auto_offset_reset not in RESET_POLICIES:
            raise ValueError(f"auto_offset_reset must be one of {sorted(RESET_POLICIES)}")
        self.client_id = client_id or f"groupcoord-consumer-{uuid.uuid4().hex[:8]}"
        self.cluster = Cluster(bootstrap_servers, client_id=self.client_id, request_timeout_ms=request_timeout_ms,
                               security=security)
        self.assignors = list(partition_assignment_strategy or [RangeAssignor()])
        if not self.assignors or len({a.name for a in self.assignors}) != len(self.assignors):
            raise ValueError("partition_assignment_strategy needs assignors with distinct names")
        self.protocol = COOPERATIVE if all(a.rebalance_protocol == COOPERATIVE for a in self.assignors) else EAGER
        config = MemberConfig(group_id, session_timeout_ms, rebalance_timeout_ms or max_poll_interval_ms,
                              heartbeat_interval_ms, max_poll_interval_ms, group_instance_id, retry_backoff_ms,
                              request_timeout_ms)
        self.member = GroupMember(config, ClusterTransport(self.cluster), self)
        self.positions = Positions()
        self.offsets = GroupOffsets(self.member, self.cluster, self.positions, auto_offset_reset)
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.client_rack = client_rack
        self.fetcher: Fetcher | None = None
        if record_source is None:
            self.fetcher = Fetcher(self.cluster, positions=self.positions, max_poll_records=max_poll_records,
                                   fetch_max_wait_ms=fetch_max_wait_ms, fetch_min_bytes=fetch_min_bytes,
                                   fetch_max_bytes=fetch_max_bytes,
                                   max_partition_fetch_bytes=max_partition_fetch_bytes,
                                   isolation_level=isolation_level, auto_offset_reset=auto_offset_reset,
                                   check_crcs=check_crcs, request_timeout_ms=request_timeout_ms,
                                   retry_backoff_ms=retry_backoff_ms)
            record_source = FetcherRecordSource(self.fetcher)
        self.records: RecordSource = record_source
        self._subscription: tuple[str, ...] = ()
        self._listener = ConsumerRebalanceListener()
        self._next_auto_commit_ms = 0
        self._assignment_snapshot: dict[str, int] | None = None  # leader: partition counts it assigned with
        self._listener_error: BaseException | None = None
        self._closed = False

    # ------------------------------------------------------------------ public API
    def subscribe(self, topics: Iterable[str], listener: ConsumerRebalanceListener | None = None) -> None:
        self._check_open()
        topics = tuple(sorted(set(topics)))
        if not topics:
            raise ValueError("subscribe() needs at least one topic; use unsubscribe() to leave")
        if listener is not None:
            self._listener = listener
        if topics != self._subscription:
            self._subscription = topics
            self.member.request_rejoin(f"subscription changed to {list(topics)}")

    def subscription(self) -> set[str]:
        return set(self._subscription)

    def assignment(self) -> set[TopicPartition]:
        return self.positions.assigned()

    def poll(self, timeout_ms: int = 0) -> dict[TopicPartition, list[Any]]:
        self._check_open()
        if not self._subscription:
            raise IllegalStateError("poll() before subscribe()")
        deadline = self.member.now_ms() + max(0, timeout_ms)
        while True:
            self._refresh_metadata_if_stale()
            self.member.poll(deadline)
            self._raise_listener_error()
            self.offsets.complete_async_commits()
            self._maybe_auto_commit()
            missing = self.positions.missing()
            if missing:  # newly assigned: start at the committed offset, else the reset policy
                self.offsets.update_positions(missing, None)  # request timeout: never reset for lack of time
            records = self.records.poll(self.positions, max(0, deadline - self.member.now_ms()))
            if records:
                return records
            now = self.member.now_ms()
            if now >= deadline:
                return {}
            wake = min(deadline, self._next_auto_commit_ms if self.enable_auto_commit else deadline)
            with self.member.cond:
                if not self.member.rejoin_needed and self.member.fatal_error is None and wake > now:
                    self.member.cond.wait((wake - now) / 1000)

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
               timeout_ms: int | None = None) -> None:
        """Commit ``offsets`` (default: every consumed position) and wait for the result."""
        self._check_open()
        self.offsets.commit_sync(self._offsets_arg(offsets), timeout_ms)

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
                     callback: CommitCallback | None = None) -> None:
        """Send a commit; ``callback(offsets, error)`` runs on this thread during a later poll/commit/close."""
        self._check_open()
        self.offsets.commit_async(self._offsets_arg(offsets), callback)

    def committed(self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
                  ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        self._check_open()
        parts = [TopicPartition(*tp) for tp in partitions]
        found = self.offsets.fetch_committed(parts, timeout_ms)
        return {tp: found.get(tp) for tp in parts}

    def position(self, partition: TopicPartition, timeout_ms: int | None = None) -> int:
        """The next offset to consume; initialised from the committed offset or the reset policy."""
        self._check_open()
        tp = TopicPartition(*partition)
        if not self.positions.is_assigned(tp):
            raise IllegalStateError(f"{tp} is not assigned to this consumer")
        if self.positions.position(tp) is None:
            self.offsets.update_positions([tp], timeout_ms)
        pos = self.positions.position(tp)
        assert pos is not None
        return pos

    def seek(self, partition: TopicPartition, offset: int) -> None:
        tp = TopicPartition(*partition)
        if not self.positions.is_assigned(tp):
            raise IllegalStateError(f"{tp} is not assigned to this consumer")
        if offset < 0:
            raise ValueError("offset must be >= 0")
        self.positions.seek(tp, offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._fetcher().seek_to_beginning(partitions)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._fetcher().seek_to_end(partitions)

    def _fetcher(self) -> Fetcher:
        if self.fetcher is None:
            raise IllegalStateError("this consumer was built with a custom record source")
        return self.fetcher

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self.positions.paused.update(TopicPartition(*tp) for tp in partitions if self.positions.is_assigned(tp))

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self.positions.paused.difference_update(TopicPartition(*tp) for tp in partitions)

    def paused(self) -> set[TopicPartition]:
        return set(self.positions.paused)

    def generation(self) -> Generation:
        return self.member.generation

    def close(self, timeout_ms: int | None = None) -> None:
        """Auto-commit, revoke (dynamic members), leave the group unless static, close connections."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.enable_auto_commit and self.member.generation_if_stable() is not None:
                try:
                    self.offsets.commit_sync(self.positions.consumed(), timeout_ms)
                except KafkaError as e:
                    log.warning("auto-commit on close failed: %s", e)
            self.offsets.complete_async_commits(wait_ms=timeout_ms or 0)
            owned = self.positions.assigned()
            if owned and not self.member.is_static:
                self._call("on_partitions_revoked", owned)
            self.member.close(timeout_ms, leave=not self.member.is_static)
        finally:
            if self.fetcher is not None:
                self.fetcher.close()
            self.cluster.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ member hooks (application thread)
    def join_protocols(self) -> list[tuple[str, bytes]]:
        topics = self._subscription
        owned = tuple(sorted(self.positions.assigned()))
        gen = self.member.generation.generation_id
        return [(a.name, encode_subscription(Subscription(topics, a.subscription_user_data(topics), owned, gen,
                                                          self.client_rack)))
                for a in self.assignors]

    def on_join_prepare(self, generation: Generation, lost: bool) -> None:
        owned = self.positions.assigned()
        if not lost and self.enable_auto_commit and generation.generation_id >= 0 and self.protocol == EAGER:
            try:
                self.offsets.commit_sync(self.positions.consumed(), None, generation=generation)
            except KafkaError as e:
                log.warning("auto-commit before rebalance failed: %s", e)
        if lost:
            if owned:
                self._call("on_partitions_lost", owned)
            self.positions.remove(owned)
        elif self.protocol == EAGER:
            if owned:
                self._call("on_partitions_revoked", owned)
            self.positions.remove(owned)
        else:
            gone = {tp for tp in owned if tp.topic not in self._subscription}
            if gone:
                self._call("on_partitions_revoked", gone)
                self.positions.remove(gone)

    def perform_assignment(self, leader_id: str, protocol: str, members: list[JoinedMember],
                           skip_assignment: bool) -> dict[str, bytes]:
        assignor = self._assignor(protocol)
        subs = {m.member_id: replace(decode_subscription(m.metadata), group_instance_id=m.group_instance_id)
                for m in members}
        topics = sorted({t for s in subs.values() for t in s.topics})
        self.cluster.refresh_metadata(topics)
        counts = self.cluster.partition_counts(topics)
        self._assignment_snapshot = counts
        if skip_assignment:
            return {}
        assignments = assignor.assign(counts, subs)
        log.info("group %s: leader assigned %s", self.member.config.group_id,
                 {m: list(a.assigned_partitions) for m, a in assignments.items()})
        return {m: encode_assignment(a) for m, a in assignments.items()}

    def on_join_complete(self, generation: Generation, assignment: bytes) -> None:
        if not self.member.is_leader:
            self._assignment_snapshot = None
        decoded = decode_assignment(assignment) if assignment else None
        assigned = set(decoded.assigned_partitions) if decoded else set()
        assignor = self._assignor(generation.protocol or "")
        if decoded is not None:
            assignor.on_assignment(decoded, generation.generation_id)
        self._next_auto_commit_ms = self.member.now_ms() + self.auto_commit_interval_ms
        owned = self.positions.assigned()
        revoked = owned - assigned
        if revoked:  # cooperative: give up what moved, then rebalance again so the new owner gets it
            self._call("on_partitions_revoked", revoked)
            self.positions.remove(revoked)
            self.member.request_rejoin(f"revoked {len(revoked)} partitions")
        added = assigned - owned
        self.positions.add(added)
        self._call("on_partitions_assigned", added)

    # ------------------------------------------------------------------ internals
    def _assignor(self, name: str) -> PartitionAssignor:
        for a in self.assignors:
            if a.name == name:
                return a
        raise KafkaError(f"the coordinator chose protocol {name!r}, which this consumer did not offer")

    def _call(self, method: str, partitions: set[TopicPartition]) -> None:
        try:
            getattr(self._listener, method)(set(partitions))
        except Exception as e:
            log.exception("rebalance listener %s failed", method)
            if self._listener_error is None:
                self._listener_error = e

    def _raise_listener_error(self) -> None:
        err, self._listener_error = self._listener_error, None
        if err is not None:
            raise KafkaError(f"rebalance listener failed: {err!r}") from err

    def _maybe_auto_commit(self) -> None:
        if not self.enable_auto_commit:
            return
        now = self.member.now_ms()
        if now < self._next_auto_commit_ms or self.member.generation_if_stable() is None:
            return
        self._next_auto_commit_ms = now + self.auto_commit_interval_ms
        consumed = self.positions.consumed()
        if consumed:
            self.offsets.commit_async(consumed, None)

    def _refresh_metadata_if_stale(self) -> None:
        last = self.cluster.last_refresh
        if last is not None and (time.monotonic() - last) * 1000 < self.metadata_max_age_ms:
            return
        try:
            self.cluster.refresh_metadata(self._subscription)
        except KafkaError as e:
            log.info("metadata refresh failed: %s", e)
            return
        snapshot = self._assignment_snapshot
        if snapshot is not None and self.cluster.partition_counts(self._subscription) != snapshot:
            self.member.request_rejoin("partition counts of subscribed topics changed")

    def _offsets_arg(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None
                     ) -> dict[TopicPartition, OffsetAndMetadata]:
        if offsets is None:
            return self.positions.consumed()
        return {TopicPartition(*tp): (o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o)))
                for tp, o in offsets.items()}

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")
