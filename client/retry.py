"""RetryingConsumer: non-blocking retry topics (seed 001) over our Consumer and Producer.

Rules and invariants:
- One consumer, one group, subscribed to the main topic(s) and every retry topic of the policy
  (``client.retry_policy``). The handler ``fn(record) -> None`` is called once per attempt; an exception
  re-publishes the record (key, value, timestamp, user headers kept, ``retry_*`` headers set) to the retry
  topic of its next delay, or to the failed topic after the last delay or for a ``not_retryable`` exception.
- At least once, nothing lost: a partition's offset is committed only up to records whose handler
  succeeded or whose copy was acknowledged (the producer uses acks=all). Acknowledgements are not waited
  for in the poll loop: each poll takes those that arrived and commits (async) up to the first
  unacknowledged copy of each partition; revocation and close wait for all of them and commit
  synchronously. A copy that could not be published rewinds its partition to it, so the record is
  handled again. A crash between the acknowledgement and the commit handles the record
  again; that is the one duplicate this design allows.
- Waiting never blocks: a retry record is handled no earlier than its ``retry_timestamp``. When the next
  record of a retry partition is not due, the partition is paused and its position sought back to that
  record; the records already fetched are kept (parked) and the poll loop's wait is shortened to the
  earliest due time (one timer for all partitions, never a sleep per record). When due, parked records are
  handled straight from memory, then the partition is resumed. The member keeps polling, so it keeps
  its place in the group through delays far longer than ``max_poll_interval_ms``.
- Order per partition is kept: a partition's records are handled in offset order, and a record that is
  not due holds back the ones behind it (their due times are later: one delay per retry topic).
- Rebalances: revoked partitions have their handled offsets committed (synchronously) and their parked
  records dropped; lost ones are just dropped. A partition assigned anew starts at its committed offset,
  so a not-yet-due record there is paused again by its new owner: due times survive any move.
- Single-threaded like the Consumer: one application thread calls ``poll_once``/``run``/``close``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from client.admin import AdminClient, NewTopic
from client.consumer import Consumer, ConsumerRebalanceListener
from client.consumer_protocol import TopicPartition
from client.errors import KafkaError
from client.fetcher import ConsumerRecord
from client.offsets import OffsetAndMetadata
from client.producer import FutureRecordMetadata, Producer
from client.retry_policy import (
    RETRY_NUMBER,
    RETRY_ORIGINAL_OFFSET,
    RETRY_ORIGINAL_PARTITION,
    RETRY_ORIGINAL_TOPIC,
    RETRY_TIMESTAMP,
    Origin,
    RetryPolicy,
    Route,
    copy_headers,
    header_int,
    header_value,
)
from protocol.errors import ErrorCode

log = logging.getLogger(__name__)

Handler = Callable[[ConsumerRecord], None]
Republished = Callable[[ConsumerRecord, Route], None]
LATENESS_SAMPLES = 100_000
DEFAULT_FETCH_MAX_WAIT_MS = 10  # a resumed partition waits for the fetch in flight: this bounds lateness
MAX_IN_FLIGHT_COPIES = 10_000  # past this many unacknowledged copies, a poll waits for them

__all__ = ["RetryPolicy", "RetryStats", "RetryingConsumer"]


def now_ms() -> float:
    return time.time() * 1000


@dataclass(slots=True)
class RetryStats:
    """What the user can read: counts and the lateness of retries (handling time minus ``retry_timestamp``)."""

    processed: int = 0  # handler calls that returned
    attempts: int = 0  # handler calls
    retried: dict[str, int] = field(default_factory=dict)  # acknowledged copies per delay label
    failed: int = 0  # acknowledged copies in failed topics
    republish_errors: int = 0  # copies that could not be published (their partition was rewound)
    assignments: int = 0  # rebalances that gave this member partitions
    lateness_ms: deque[float] = field(default_factory=lambda: deque(maxlen=LATENESS_SAMPLES))

    def lateness(self) -> dict[str, float]:
        """p50, p99 and max lateness in ms over the last ``LATENESS_SAMPLES`` retries (empty when none)."""
        values = sorted(self.lateness_ms)
        if not values:
            return {}
        def pct(p: float) -> float:
            return values[min(len(values) - 1, max(0, math.ceil(p * len(values)) - 1))]
        return {"count": float(len(values)), "p50": pct(0.50), "p99": pct(0.99), "max": values[-1]}


@dataclass(slots=True)
class _Pending:
    tp: TopicPartition
    record: ConsumerRecord
    route: Route
    future: FutureRecordMetadata | None  # None: send() itself failed


class _Listener(ConsumerRebalanceListener):
    def __init__(self, owner: RetryingConsumer) -> None:
        self.owner = owner

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.owner._on_revoked(revoked, lost=False)

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.owner._on_revoked(lost, lost=True)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if assigned:
            self.owner.stats.assignments += 1


class RetryingConsumer:
    def __init__(self, *, bootstrap_servers: str | Sequence[str], group_id: str, topics: Iterable[str],
                 handler: Handler, policy: RetryPolicy, create_topics: bool = True,
                 producer_config: Mapping[str, Any] | None = None, ack_timeout_ms: int = 30000,
                 on_republished: Republished | None = None, **consumer_config: Any) -> None:
        """``consumer_config`` goes to ``Consumer`` (``auto_offset_reset`` defaults to "earliest" here, and
        ``fetch_max_wait_ms`` to 10, ``enable_auto_commit`` is always off); ``producer_config`` to ``Producer`` (acks is always "all").
        ``on_republished(record, route)`` runs after a copy is acknowledged and before the commit."""
        self.topics = list(dict.fromkeys(topics))
        if not self.topics:
            raise ValueError("RetryingConsumer needs at least one main topic")
        self.handler = handler
        self.policy = policy
        self.on_republished = on_republished
        self.ack_timeout_s = ack_timeout_ms / 1000
        self.stats = RetryStats()
        self._route: dict[str, tuple[str, str | None]] = {}  # topic -> (main topic, delay label or None)
        for main in self.topics:
            self._route[main] = (main, None)
            for label in policy.labels():
                self._route[policy.retry_topic(main, label)] = (main, label)
        if create_topics:
            self.ensure_topics(bootstrap_servers)
        config = dict(consumer_config)
        config.setdefault("auto_offset_reset", "earliest")
        config.setdefault("fetch_max_wait_ms", DEFAULT_FETCH_MAX_WAIT_MS)
        config["enable_auto_commit"] = False
        self.consumer = Consumer(bootstrap_servers=bootstrap_servers, group_id=group_id, **config)
        pconfig = {"linger_ms": 1, **(producer_config or {}), "acks": "all"}
        self.producer = Producer(bootstrap_servers, **pconfig)
        self.consumer.subscribe(list(self._route), listener=_Listener(self))
        self._parked: dict[TopicPartition, deque[ConsumerRecord]] = {}
        self._due: dict[TopicPartition, int] = {}  # due time (epoch ms) of each parked partition's head
        self._progress: dict[TopicPartition, int] = {}  # next offset after the last handled record
        self._committed: dict[TopicPartition, int] = {}  # last offset sent in a commit
        # copies not yet acknowledged, per source partition in send order (acks come in order per partition,
        # so each poll looks only at the head of each queue: no scan of every copy in flight)
        self._inflight: dict[TopicPartition, deque[_Pending]] = {}
        self._inflight_count = 0
        self._closed = False

    # ------------------------------------------------------------------ public API
    def subscription(self) -> list[str]:
        """Main topics and their retry topics, as subscribed."""
        return list(self._route)

    def ensure_topics(self, bootstrap_servers: str | Sequence[str]) -> None:
        """Create missing retry and failed topics with the main topic's partition count."""
        with AdminClient(bootstrap_servers) as admin:
            existing = admin.list_topics()
            wanted: list[NewTopic] = []
            for main in self.topics:
                count = existing[main].partitions if main in existing else -1
                for name in [*self.policy.retry_topics(main), self.policy.failed_topic(main)]:
                    if name not in existing:
                        wanted.append(NewTopic(name, count))
            if wanted:
                for r in admin.create_topics(wanted):
                    if r.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                        raise KafkaError(f"cannot create retry topic {r.name}: {r.error}")

    def poll_once(self, timeout_ms: int = 100) -> int:
        """Handle what is due and what arrives within ``timeout_ms`` (less when a parked record falls due
        sooner); returns the number of handler calls."""
        if self._closed:
            raise KafkaError("the retrying consumer is closed")
        handled = self._handle_due_parked()
        wait = 0 if handled else max(0, timeout_ms)
        if self._due and wait:
            wait = min(wait, max(0, math.ceil(min(self._due.values()) - now_ms())))
        records = self.consumer.poll(wait)
        pending: list[_Pending] = []
        done: dict[TopicPartition, int] = {}
        for tp, recs in records.items():
            handled += self._handle(tp, deque(recs), pending, done, from_parked=False)
        self._finish(pending, done)
        return handled

    def run(self, stop_event: threading.Event | None = None, poll_timeout_ms: int = 100) -> None:
        """``poll_once`` until ``stop_event`` is set (forever without one); does not close."""
        while stop_event is None or not stop_event.is_set():
            self.poll_once(poll_timeout_ms)

    def close(self, timeout_ms: int | None = None) -> None:
        """Commit what was handled, leave the group, close the producer."""
        if self._closed:
            return
        self._closed = True
        try:
            self._commit_sync(self.consumer.assignment())
        finally:
            try:
                self.consumer.close(timeout_ms)
            finally:
                self.producer.close(None if timeout_ms is None else timeout_ms / 1000)

    def __enter__(self) -> RetryingConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ handling
    def _handle_due_parked(self) -> int:
        now = now_ms()
        due = [tp for tp, at in self._due.items() if at <= now]
        if not due:
            return 0
        pending: list[_Pending] = []
        done: dict[TopicPartition, int] = {}
        handled = 0
        for tp in due:
            recs = self._parked.pop(tp)
            del self._due[tp]
            handled += self._handle(tp, recs, pending, done, from_parked=True)
        self._finish(pending, done)
        return handled

    def _handle(self, tp: TopicPartition, recs: deque[ConsumerRecord], pending: list[_Pending],
                done: dict[TopicPartition, int], from_parked: bool) -> int:
        main, label = self._route.get(tp.topic, (tp.topic, None))
        handled = 0
        while recs:
            rec = recs[0]
            if label is not None:
                due = header_int(rec.headers, RETRY_TIMESTAMP) or 0
                now = now_ms()
                if due > now:  # not due: park the rest, hold the partition at this record
                    self._parked[tp] = recs
                    self._due[tp] = due
                    self.consumer.seek(tp, rec.offset)
                    self.consumer.pause([tp])
                    return handled
                self.stats.lateness_ms.append(now - due)
            recs.popleft()
            self._attempt(tp, rec, main, label, pending)
            done[tp] = rec.offset + 1
            handled += 1
        if from_parked:  # everything fetched is handled: fetch again from after it
            self.consumer.seek(tp, done[tp])
            self.consumer.resume([tp])
        return handled

    def _attempt(self, tp: TopicPartition, rec: ConsumerRecord, main: str, label: str | None,
                 pending: list[_Pending]) -> None:
        retries_done = (header_int(rec.headers, RETRY_NUMBER) or 0) if label is not None else 0
        self.stats.attempts += 1
        try:
            self.handler(rec)
        except Exception as exc:
            origin = self._origin(tp, rec, main, label)
            route = self.policy.route(main, retries_done, exc, int(now_ms()))
            headers = copy_headers(rec.headers, route.retry_number, route.timestamp_ms, origin, exc)
            try:
                fut: FutureRecordMetadata | None = self.producer.send(
                    route.topic, rec.value, rec.key, headers, timestamp_ms=rec.timestamp)
            except KafkaError as e:
                log.warning("cannot publish the copy of %s@%d to %s: %s", tp, rec.offset, route.topic, e)
                fut = None
            pending.append(_Pending(tp, rec, route, fut))
        else:
            self.stats.processed += 1

    @staticmethod
    def _origin(tp: TopicPartition, rec: ConsumerRecord, main: str, label: str | None) -> Origin:
        if label is not None:
            topic = header_value(rec.headers, RETRY_ORIGINAL_TOPIC)
            partition = header_int(rec.headers, RETRY_ORIGINAL_PARTITION)
            offset = header_int(rec.headers, RETRY_ORIGINAL_OFFSET)
            if topic is not None and partition is not None and offset is not None:
                return Origin(topic.decode("utf-8", "replace"), partition, offset)
        return Origin(main, tp.partition, rec.offset)

    # ------------------------------------------------------------------ acknowledgements and commits
    def _finish(self, pending: list[_Pending], done: dict[TopicPartition, int], wait: bool = False) -> None:
        """Record this round's progress, take the acknowledgements that arrived (all of them when ``wait``),
        rewind partitions whose copy failed, and commit (async) what is now safe."""
        for p in pending:
            queue = self._inflight.get(p.tp)
            if queue is None:
                queue = self._inflight[p.tp] = deque()
            queue.append(p)
        self._inflight_count += len(pending)
        self._progress.update(done)
        if wait or self._inflight_count > MAX_IN_FLIGHT_COPIES:
            try:
                self.producer.flush(self.ack_timeout_s)
            except KafkaError as e:
                log.warning("copies not acknowledged within %.1fs: %s", self.ack_timeout_s, e)
        rewind: dict[TopicPartition, int] = {}
        unacked: dict[TopicPartition, int] = {}
        for tp, queue in list(self._inflight.items()):
            while queue:
                p = queue[0]
                offset = p.record.offset
                if p.future is not None and not p.future.done():
                    unacked[tp] = offset
                    break
                queue.popleft()
                self._inflight_count -= 1
                if p.future is None or not p.future.succeeded():
                    err = None if p.future is None else p.future.exception()
                    log.warning("copy of %s@%d to %s failed (%s); handling it again", tp, offset, p.route.topic,
                                err or "not sent")
                    self.stats.republish_errors += 1
                    rewind[tp] = offset
                    self._inflight_count -= len(queue)  # behind it: handled again after the rewind anyway
                    queue.clear()
                    break
                if p.route.failed:
                    self.stats.failed += 1
                else:
                    self.stats.retried[p.route.label] = self.stats.retried.get(p.route.label, 0) + 1
                if self.on_republished is not None:
                    self.on_republished(p.record, p.route)
            if not queue:
                del self._inflight[tp]
        assigned = self.consumer.assignment()
        for tp, offset in rewind.items():
            self._progress[tp] = offset
            self._parked.pop(tp, None)
            self._due.pop(tp, None)
            if tp in assigned:
                self.consumer.seek(tp, offset)
                self.consumer.resume([tp])
        safe = {tp: min(o, unacked.get(tp, o)) for tp, o in self._progress.items() if tp in assigned}
        offsets = {tp: OffsetAndMetadata(o) for tp, o in safe.items() if self._committed.get(tp) != o}
        if offsets:
            self._committed.update({tp: o.offset for tp, o in offsets.items()})
            self.consumer.commit_async(offsets, self._on_commit)

    @staticmethod
    def _on_commit(offsets: Mapping[TopicPartition, OffsetAndMetadata], error: BaseException | None) -> None:
        if error is not None:  # a later commit (or the one at revocation) covers these offsets
            log.info("async commit of %d partitions failed: %s", len(offsets), error)

    def _commit_sync(self, partitions: Iterable[TopicPartition]) -> None:
        """Wait for every copy, then commit the handled offsets of ``partitions`` synchronously."""
        self._finish([], {}, wait=True)
        offsets = {tp: OffsetAndMetadata(self._progress[tp]) for tp in partitions if tp in self._progress}
        if not offsets:
            return
        generation = self.consumer.generation()
        if generation.generation_id < 0:
            return
        try:
            self.consumer.offsets.commit_sync(offsets, None, generation=generation)
        except KafkaError as e:
            log.warning("commit of handled offsets failed: %s", e)

    def _on_revoked(self, partitions: set[TopicPartition], lost: bool) -> None:
        if not lost:
            self._commit_sync(partitions)
        for tp in partitions:
            self._parked.pop(tp, None)
            self._due.pop(tp, None)
            self._progress.pop(tp, None)
            self._committed.pop(tp, None)
        for tp in partitions:
            self._inflight_count -= len(self._inflight.pop(tp, ()))
