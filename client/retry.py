"""RetryingConsumer: non-blocking retry topics (seed 001) over our Consumer and Producer.

Rules and invariants:
- One consumer, one group, subscribed to the main topic(s) and every retry topic of the policy
  (``client.retry_policy``). The handler ``fn(record) -> None`` is called once per attempt; an exception
  re-publishes the record (key, value, timestamp, user headers kept, ``retry_*`` headers set) to the retry
  topic of its next delay, or to the failed topic after the last delay or for a ``not_retryable`` exception.
  A copy goes to the partition with the source record's partition number (the producer's partitioner on
  the key when the destination has fewer partitions). The copies of one poll's records of one partition are
  sent together, one ``Producer.send_many`` per destination partition.
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
- Security: ``security=SecurityConfig(...)`` or Kafka's security keywords among ``consumer_config`` secure
  the consumer, the producer of the copies and the admin client that creates the retry topics alike
  (``producer_config`` may not name other ones).
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
from client.producer import Producer, RecordsFuture
from client.retry_policy import (
    RETRY_NUMBER,
    RETRY_ORIGINAL_OFFSET,
    RETRY_ORIGINAL_PARTITION,
    RETRY_ORIGINAL_TOPIC,
    RETRY_TIMESTAMP,
    Headers,
    Origin,
    RetryPolicy,
    Route,
    ascii_int,
    copy_headers,
    header_int,
)
from client.security import SECURITY_KEYWORDS, SecurityConfig
from protocol.errors import ErrorCode

log = logging.getLogger(__name__)

Handler = Callable[[ConsumerRecord], None]
Republished = Callable[[ConsumerRecord, Route], None]
LATENESS_SAMPLES = 100_000
DEFAULT_FETCH_MAX_WAIT_MS = 10  # a resumed partition waits for the fetch in flight: this bounds lateness
MAX_IN_FLIGHT_COPIES = 10_000  # past this many unacknowledged copies, a poll waits for them
COPY_BATCH_BYTES = 512 * 1024  # the producer's default batch_size: a partition has one batch in flight

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
class _Copies:
    """One round's copies of one source partition's failed records, sent with one ``send_many`` per destination
    partition. ``offsets``/``labels`` (the delay label; "" for the failed topic) are in offset order;
    ``sends[j]`` (None: the send itself failed) carries the copies whose first record is at offset
    ``firsts[j]``. ``republished`` holds (record, route) pairs only for an ``on_republished`` callback: records
    and routes are tuple subclasses the garbage collector never untracks, so held by the thousand until
    their acknowledgement they would make it run full collections."""

    tp: TopicPartition
    offsets: list[int]
    labels: list[str]
    sends: list[RecordsFuture | None]
    firsts: list[int]
    republished: list[tuple[ConsumerRecord, Route]] | None


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
        ``on_republished(record, route)`` runs after a copy is acknowledged and before the commit.
        ``security`` or the security keywords in ``consumer_config`` secure every connection (module rules)."""
        security_kw = {k: consumer_config.pop(k) for k in list(consumer_config) if k in SECURITY_KEYWORDS}
        self.security = SecurityConfig.resolve(consumer_config.pop("security", None), security_kw,
                                               "RetryingConsumer")
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
            self.ensure_topics(bootstrap_servers, self.security)
        config = dict(consumer_config)
        config.setdefault("auto_offset_reset", "earliest")
        config.setdefault("fetch_max_wait_ms", DEFAULT_FETCH_MAX_WAIT_MS)
        config["enable_auto_commit"] = False
        self.consumer = Consumer(bootstrap_servers=bootstrap_servers, group_id=group_id, security=self.security,
                                 **config)
        pconfig = {"linger_ms": 1, "batch_size": COPY_BATCH_BYTES, **(producer_config or {}), "acks": "all"}
        pconfig.setdefault("security", self.security)
        self.producer = Producer(bootstrap_servers, **pconfig)
        self.consumer.subscribe(list(self._route), listener=_Listener(self))
        self._parked: dict[TopicPartition, tuple[list[ConsumerRecord], int]] = {}  # records, first not handled
        self._due: dict[TopicPartition, int] = {}  # due time (epoch ms) of each parked partition's head
        self._progress: dict[TopicPartition, int] = {}  # next offset after the last handled record
        self._committed: dict[TopicPartition, int] = {}  # last offset sent in a commit
        # copies not yet acknowledged, per source partition in offset order: each poll looks only at the head of
        # each queue (no scan of every copy in flight); the commit stops at the head's first unacknowledged copy
        self._inflight: dict[TopicPartition, deque[_Copies]] = {}
        self._inflight_count = 0
        self._closed = False

    # ------------------------------------------------------------------ public API
    def subscription(self) -> list[str]:
        """Main topics and their retry topics, as subscribed."""
        return list(self._route)

    def ensure_topics(self, bootstrap_servers: str | Sequence[str], security: SecurityConfig | None = None) -> None:
        """Create missing retry and failed topics with the main topic's partition count."""
        with AdminClient(bootstrap_servers, security=security) as admin:
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
        pending: list[_Copies] = []
        done: dict[TopicPartition, int] = {}
        for tp, recs in records.items():
            handled += self._handle(tp, recs, 0, pending, done, from_parked=False)
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
        pending: list[_Copies] = []
        done: dict[TopicPartition, int] = {}
        handled = 0
        for tp in due:
            recs, start = self._parked.pop(tp)
            del self._due[tp]
            handled += self._handle(tp, recs, start, pending, done, from_parked=True)
        self._finish(pending, done)
        return handled

    def _handle(self, tp: TopicPartition, recs: list[ConsumerRecord], start: int, pending: list[_Copies],
                done: dict[TopicPartition, int], from_parked: bool) -> int:
        """Handle ``recs[start:]`` of ``tp`` in order (a retry topic's up to the first not due, which parks the
        rest); the copies of the records whose handler raised are sent together at the end."""
        main, label = self._route.get(tp.topic, (tp.topic, None))
        handler = self.handler
        failed = self._failed
        # (record, route, copy's headers): made in the except clause, so no exception (whose traceback holds
        # this frame, a reference cycle left to the garbage collector) outlives it
        failures: list[tuple[ConsumerRecord, Route, Headers]] = []
        end = len(recs)
        i = start
        if label is None:  # a main topic: nothing to wait for
            for i in range(start, end):
                rec = recs[i]
                try:
                    handler(rec)
                except Exception as exc:
                    failures.append(failed(tp, rec, main, None, exc))
            i = end
        else:
            lateness = self.stats.lateness_ms
            while i < end:
                rec = recs[i]
                due = header_int(rec.headers, RETRY_TIMESTAMP) or 0
                now = now_ms()
                if due > now:  # not due: park the rest, hold the partition at this record
                    self._parked[tp] = (recs, i)
                    self._due[tp] = due
                    self.consumer.seek(tp, rec.offset)
                    self.consumer.pause([tp])
                    break
                lateness.append(now - due)
                try:
                    handler(rec)
                except Exception as exc:
                    failures.append(failed(tp, rec, main, label, exc))
                i += 1
        handled = i - start
        self.stats.attempts += handled
        self.stats.processed += handled - len(failures)
        if handled:
            done[tp] = recs[i - 1].offset + 1
        if failures:
            pending.append(self._republish(tp, failures))
        if from_parked and i == end:  # everything fetched is handled: fetch again from after it
            self.consumer.seek(tp, done[tp])
            self.consumer.resume([tp])
        return handled

    def _failed(self, tp: TopicPartition, rec: ConsumerRecord, main: str, label: str | None, exc: Exception
                ) -> tuple[ConsumerRecord, Route, Headers]:
        """Where the copy of ``rec``, whose handler just raised ``exc``, goes, and its headers."""
        if label is None:  # a main topic's record: it is its own origin
            retries_done = 0
            origin = tuple.__new__(Origin, (main, tp.partition, rec.offset))  # Origin(...), cheaper
        else:  # a retry topic's copy: one pass over its headers (last value wins, as header_value)
            headers = dict(rec.headers)
            retries_done = ascii_int(headers.get(RETRY_NUMBER)) or 0
            origin = self._origin(tp, rec, main, headers)
        route = self.policy.route(main, retries_done, exc, int(now_ms()))
        return rec, route, copy_headers(rec.headers, route.retry_number, route.timestamp_ms, origin, exc)

    def _republish(self, tp: TopicPartition, failures: list[tuple[ConsumerRecord, Route, Headers]]) -> _Copies:
        """Send the copies of ``failures`` with one ``send_many`` per destination partition: the source
        partition's number when the destination has it (ordering per partition carries over), else the
        producer's partitioner on the key."""
        offsets: list[int] = []
        labels: list[str] = []
        by_dest: dict[tuple[str, int], list[int]] = {}
        copies: list[tuple[bytes | None, bytes | None, Headers, int]] = []
        counts: dict[str, int] = {}
        for rec, r, headers in failures:
            copies.append((rec.key, rec.value, headers, rec.timestamp))
            n = counts.get(r.topic)
            if n is None:
                try:
                    n = counts[r.topic] = len(self.producer.partitions_for(r.topic))
                except KafkaError as e:
                    log.warning("no partitions known for %s: %s", r.topic, e)
                    n = counts[r.topic] = 0
            if tp.partition < n or n == 0:
                partition = tp.partition
            else:
                partition = self.producer.partitioner.partition(r.topic, rec.key, n)
            by_dest.setdefault((r.topic, partition), []).append(len(offsets))
            offsets.append(rec.offset)
            labels.append(r.label)
        sends: list[RecordsFuture | None] = []
        firsts: list[int] = []
        for (topic, partition), idxs in by_dest.items():
            fut: RecordsFuture | None = None
            if counts[topic]:
                try:
                    fut = self.producer.send_many(topic, partition, [copies[j] for j in idxs])
                except KafkaError as e:
                    log.warning("cannot publish %d copies from %s to %s-%d: %s", len(idxs), tp, topic, partition, e)
            sends.append(fut)
            firsts.append(offsets[idxs[0]])
        republished = [(rec, r) for rec, r, _ in failures] if self.on_republished is not None else None
        return _Copies(tp, offsets, labels, sends, firsts, republished)

    @staticmethod
    def _origin(tp: TopicPartition, rec: ConsumerRecord, main: str, headers: Mapping[str, bytes | None]) -> Origin:
        """Where a retry topic's copy was first consumed, from its headers (itself when they are missing)."""
        topic = headers.get(RETRY_ORIGINAL_TOPIC)
        partition = ascii_int(headers.get(RETRY_ORIGINAL_PARTITION))
        offset = ascii_int(headers.get(RETRY_ORIGINAL_OFFSET))
        if topic is not None and partition is not None and offset is not None:
            return Origin(topic.decode("utf-8", "replace"), partition, offset)
        return Origin(main, tp.partition, rec.offset)

    # ------------------------------------------------------------------ acknowledgements and commits
    def _finish(self, pending: list[_Copies], done: dict[TopicPartition, int], wait: bool = False) -> None:
        """Record this round's progress, take the acknowledgements that arrived (all of them when ``wait``),
        rewind partitions whose copy failed, and commit (async) what is now safe."""
        for c in pending:
            queue = self._inflight.get(c.tp)
            if queue is None:
                queue = self._inflight[c.tp] = deque()
            queue.append(c)
            self._inflight_count += len(c.offsets)
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
                c = queue[0]
                waiting = [first for first, s in zip(c.firsts, c.sends, strict=True) if s is not None and not s.done()]
                if waiting:  # never commit past a copy not yet acknowledged
                    unacked[tp] = min(waiting)
                    break
                queue.popleft()
                self._inflight_count -= len(c.offsets)
                cut = self._acknowledged(c)
                if cut is not None:  # that record and the ones behind it are handled again after the rewind
                    rewind[tp] = cut
                    self._inflight_count -= sum(len(x.offsets) for x in queue)
                    queue.clear()
                    break
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

    def _acknowledged(self, c: _Copies) -> int | None:
        """Count the copies of ``c`` (all its sends done) and run ``on_republished``, in offset order, up to the
        first record whose copy failed; returns that record's offset (None: every copy acknowledged)."""
        cut: int | None = None
        for first, s in zip(c.firsts, c.sends, strict=True):
            if s is None or not s.succeeded():
                err = None if s is None else s.exception()
                log.warning("copies of %s from offset %d failed (%s); handling them again", c.tp, first,
                            err or "not sent")
                self.stats.republish_errors += 1
                cut = first if cut is None else min(cut, first)
        retried = self.stats.retried
        for i, (offset, label) in enumerate(zip(c.offsets, c.labels, strict=True)):
            if cut is not None and offset >= cut:
                break
            if label:
                retried[label] = retried.get(label, 0) + 1
            else:
                self.stats.failed += 1
            if c.republished is not None and self.on_republished is not None:
                self.on_republished(*c.republished[i])
        return cut

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
            self._inflight_count -= sum(len(c.offsets) for c in self._inflight.pop(tp, ()))
