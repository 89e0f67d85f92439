"""RetryingConsumer: non-blocking retry topics (seed 001) over our Consumer and Producer.

Rules and invariants:
- One consumer, one group, subscribed to the main topic(s) and every retry topic of the policy
  (``client.retry_policy``). The handler ``fn(record) -> None`` is called once per attempt; an exception
  re-publishes the record (key, value, timestamp, user headers kept, ``retry_*`` headers set) to the retry
  topic of its next delay, or to the failed topic after the last delay or for a ``not_retryable`` exception.
  A copy goes to the partition with the source record's partition number (the producer's partitioner on
  the key when the destination has fewer partitions). The copies of one poll's records of one partition are
  sent together, one ``Producer.send_many`` per destination partition; the producer learns where they go
  (retry and failed topics' metadata) at construction, not in the poll loop at the first failure.
- At least once, nothing lost: a partition's offset is committed only up to records whose handler
  succeeded or whose copy was acknowledged (the producer uses acks=all). Acknowledgements are not waited
  for in the poll loop: each poll takes those that arrived and commits (async) up to the first
  unacknowledged copy of each partition, one async commit in flight at a time (while one is, the next poll
  after its answer commits the newer offsets; a failed one is sent again); revocation and close wait for
  all of them (at most ``ack_timeout_ms``) and commit synchronously, never past a copy still
  unacknowledged. Past ``MAX_IN_FLIGHT_COPIES`` unacknowledged copies, a poll waits for the oldest ones
  until half are left (memory stays bounded). A copy that could not be published rewinds its partition to
  it, so the record is handled again. A crash between the acknowledgement and the commit handles the record
  again; that is the one duplicate this design allows.
- Waiting never blocks: a retry record is handled no earlier than its ``retry_timestamp``. When the next
  record of a retry partition is not due, it and the records fetched behind it are kept in memory (parked),
  in order, and the poll loop's wait is shortened to the earliest due time (one timer for all partitions,
  never a sleep per record); records fetched later for a parked partition join the end of its parked ones.
  Parked records are handled straight from memory as they fall due. The fetch position stays after the last
  parked record (never sought back), so the partition can keep being fetched ahead of its due records
  (prefetch: the next ones are in memory when their time comes, no fetch round trip between due records).
  It is paused (nothing more fetched) while its head is not due within ``2 * PREFETCH_MS``, or once it
  holds ``max_poll_records`` records of which the last is not due within ``2 * PREFETCH_MS``, or
  ``PARK_MAX_POLLS * max_poll_records`` records; it is resumed when its head is due within ``PREFETCH_MS``
  and it holds fewer than ``max_poll_records`` records or all of them fall due within ``PREFETCH_MS`` (and
  when nothing is parked any more). The member keeps polling, so it keeps its place in the group through
  delays far longer than ``max_poll_interval_ms``.
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
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from time import time as _clock
from typing import Any

from client.admin import AdminClient, NewTopic
from client.consumer import Consumer, ConsumerRebalanceListener
from client.consumer_protocol import TopicPartition
from client.errors import KafkaError
from client.fetcher import ConsumerRecord
from client.offsets import OffsetAndMetadata
from client.producer import Producer, RecordsFuture
from client.retry_policy import (
    RETRY_EXCEPTION,
    RETRY_HEADERS,
    RETRY_NUMBER,
    RETRY_ORIGINAL_OFFSET,
    RETRY_ORIGINAL_PARTITION,
    RETRY_ORIGINAL_TOPIC,
    RETRY_TIMESTAMP,
    Headers,
    RetryPolicy,
    Route,
    exception_text,
)
from client.security import SECURITY_KEYWORDS, SecurityConfig
from protocol.errors import ErrorCode

log = logging.getLogger(__name__)

Handler = Callable[[ConsumerRecord], None]
Republished = Callable[[ConsumerRecord, Route], None]
LATENESS_SAMPLES = 100_000
DEFAULT_FETCH_MAX_WAIT_MS = 10  # a resumed partition waits for the fetch in flight: this bounds lateness
MAX_IN_FLIGHT_COPIES = 50_000  # past this many unacknowledged copies, a poll waits for the oldest, down to half
COPY_BATCH_BYTES = 512 * 1024  # the producer's default batch_size: a partition has one batch in flight
PREFETCH_MS = 50  # a parked partition is fetched ahead while its parked records fall due within this
PARK_MAX_POLLS = 8  # a parked partition is paused at this many times max_poll_records parked records
_RETRY_HEADER_NAMES = frozenset(RETRY_HEADERS)

__all__ = ["RetryPolicy", "RetryStats", "RetryingConsumer"]


def now_ms() -> float:
    return time.time() * 1000


def _int(value: bytes | None) -> int | None:
    """``ascii_int``: an ASCII decimal header value as an int (None when absent or not a number)."""
    if value is None:
        return None
    try:
        return int(value)  # bytes: ASCII digits (and what int() takes around them), else ValueError
    except (TypeError, ValueError):
        return None


def copy_headers_of(headers: Headers, route: Route, origin_topic: bytes, origin_partition: int, origin_offset: int,
                    exc: BaseException) -> Headers:
    """``copy_headers(headers, route.retry_number, route.timestamp_ms, Origin(...), exc)``, the same tuple: the
    user's headers in order (earlier ``retry_*`` ones left out), then the copy's ``retry_*`` headers."""
    user = tuple([h for h in headers if h[0] not in _RETRY_HEADER_NAMES]) if headers else ()
    return (*user,
            (RETRY_NUMBER, b"%d" % route.retry_number),
            (RETRY_TIMESTAMP, b"%d" % route.timestamp_ms),
            (RETRY_ORIGINAL_TOPIC, origin_topic),
            (RETRY_ORIGINAL_PARTITION, b"%d" % origin_partition),
            (RETRY_ORIGINAL_OFFSET, b"%d" % origin_offset),
            (RETRY_EXCEPTION, exception_text(exc)))


def due_of(headers: Mapping[str, bytes | None]) -> int:
    """A retry copy's due time from its headers (as a dict: the last value wins), 0 when missing or bad."""
    return _int(headers.get(RETRY_TIMESTAMP)) or 0


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


class _Parked:
    """A retry partition's records fetched and not handled yet: ``recs[start:]``, in offset order. ``due`` is the
    first one's due time (epoch ms), ``last_due`` the last one's (what prefetching looks at)."""

    __slots__ = ("due", "last_due", "recs", "start")

    def __init__(self, recs: list[ConsumerRecord], start: int, due: int, last_due: int) -> None:
        self.recs, self.start, self.due, self.last_due = recs, start, due, last_due


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
        destinations = [t for t, (_, label) in self._route.items() if label is not None]
        destinations += [policy.failed_topic(main) for main in self.topics]
        try:  # where copies go, known before the first failure: no metadata round trip in the poll loop then
            self.producer.cluster.refresh_metadata(destinations)
        except KafkaError as e:
            log.info("no metadata yet for the retry topics: %s", e)
        self.consumer.subscribe(list(self._route), listener=_Listener(self))
        self._parked: dict[TopicPartition, _Parked] = {}
        # when to look at each parked partition again (epoch ms): its head's due time, or earlier to resume it
        self._wake: dict[TopicPartition, float] = {}
        self._paused: set[TopicPartition] = set()  # parked partitions this consumer paused
        fetcher = self.consumer.fetcher
        self._park_low = fetcher.max_poll_records if fetcher is not None else 500
        self._park_max = PARK_MAX_POLLS * self._park_low
        self._committing = False  # an async commit is in flight
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
        handled = self._handle_due_parked() if self._wake else 0
        wait = 0 if handled else max(0, timeout_ms)
        if self._wake and wait:
            wait = min(wait, max(0, math.ceil(min(self._wake.values()) - now_ms())))
        records = self.consumer.poll(wait)
        pending: list[_Copies] = []
        done: dict[TopicPartition, int] = {}
        parked = self._parked
        for tp, recs in records.items():
            p = parked.get(tp)
            if p is None:
                handled += self._handle(tp, recs, 0, pending, done, None)
            else:  # behind parked records: they wait their turn
                if p.start:
                    del p.recs[:p.start]
                    p.start = 0
                p.recs += recs
                p.last_due = due_of(dict(recs[-1].headers))
                self._hold(tp, p, now_ms())
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
        ready = [tp for tp, at in self._wake.items() if at <= now]
        if not ready:
            return 0
        pending: list[_Copies] = []
        done: dict[TopicPartition, int] = {}
        handled = 0
        for tp in ready:
            p = self._parked[tp]
            if p.due > now:  # not due yet: time to fetch ahead of it
                self._hold(tp, p, now)
                continue
            del self._parked[tp]
            del self._wake[tp]
            handled += self._handle(tp, p.recs, p.start, pending, done, p)
            if tp not in self._parked and tp in self._paused:  # everything parked is handled: fetch again
                self._paused.discard(tp)
                self.consumer.resume([tp])
        self._finish(pending, done)
        return handled

    def _handle(self, tp: TopicPartition, recs: list[ConsumerRecord], start: int, pending: list[_Copies],
                done: dict[TopicPartition, int], parked: _Parked | None) -> int:
        """Handle ``recs[start:]`` of ``tp`` in order (a retry topic's up to the first not due, which parks it and
        the rest, reusing ``parked``); the copies of the records whose handler raised are sent together at the end."""
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
                    failures.append(failed(tp, rec, main, None, exc, None))
            i = end
        else:
            lateness = self.stats.lateness_ms.append
            while i < end:
                rec = recs[i]
                headers = dict(rec.headers)  # one pass, the last value winning (as header_value)
                value = headers.get(RETRY_TIMESTAMP)
                try:
                    due = 0 if value is None else int(value)  # due_of, inline: once per retry record
                except (TypeError, ValueError):  # not a number: due now, as a missing header
                    due = 0
                now = _clock() * 1000
                if due > now:  # not due: park it and the rest, hold the partition at this record
                    if parked is None:
                        last = due_of(dict(recs[-1].headers)) if end - 1 > i else due
                        parked = _Parked(recs, i, due, last)
                    else:
                        parked.start, parked.due = i, due
                    self._parked[tp] = parked
                    self._hold(tp, parked, now)
                    break
                lateness(now - due)
                try:
                    handler(rec)
                except Exception as exc:
                    failures.append(failed(tp, rec, main, label, exc, headers))
                i += 1
        handled = i - start
        self.stats.attempts += handled
        self.stats.processed += handled - len(failures)
        if handled:
            done[tp] = recs[i - 1].offset + 1
            if parked is not None and parked.start >= self._park_low and self._parked.get(tp) is parked:
                del recs[:parked.start]  # the records handled go now, not with the last parked one
                parked.start = 0
        if failures:
            pending.append(self._republish(tp, failures))
        return handled

    def _hold(self, tp: TopicPartition, p: _Parked, now: float) -> None:
        """Pause or resume parked ``tp`` (module rules: fetch ahead of due records, within bounds) and set when
        to look at it again: its head's due time, or the time it is to be resumed to fetch ahead."""
        count = len(p.recs) - p.start
        soon = now + PREFETCH_MS
        paused = tp in self._paused
        if paused:
            if p.due <= soon and count < self._park_max and (count < self._park_low or p.last_due <= soon):
                self._paused.discard(tp)
                self.consumer.resume([tp])
                paused = False
        elif (p.due > soon + PREFETCH_MS or count >= self._park_max
              or (count >= self._park_low and p.last_due > soon + PREFETCH_MS)):
            self._paused.add(tp)
            self.consumer.pause([tp])
            paused = True
        wake: float = p.due
        if paused and count < self._park_max:  # when the rule above would resume it
            wake = min(wake, (p.due if count < self._park_low else p.last_due) - PREFETCH_MS)
        self._wake[tp] = wake

    def _failed(self, tp: TopicPartition, rec: ConsumerRecord, main: str, label: str | None, exc: Exception,
                headers: Mapping[str, bytes | None] | None) -> tuple[ConsumerRecord, Route, Headers]:
        """Where the copy of ``rec``, whose handler just raised ``exc``, goes, and its headers: ``copy_headers``'s,
        built here without its per-call objects (``copy_headers_of`` is compared with it in the tests).
        ``headers``: a retry topic's record's as a dict, the last value winning as in ``header_value``."""
        now = int(_clock() * 1000)
        if label is None or headers is None:  # a main topic's record: it is its own origin
            route = self.policy.route(main, 0, exc, now)
            return rec, route, copy_headers_of(rec.headers, route, main.encode(), tp.partition, rec.offset, exc)
        route = self.policy.route(main, _int(headers.get(RETRY_NUMBER)) or 0, exc, now)
        # where it was first consumed, from its headers (as ``Origin``, itself when they are missing)
        topic = headers.get(RETRY_ORIGINAL_TOPIC)
        partition = _int(headers.get(RETRY_ORIGINAL_PARTITION))
        offset = _int(headers.get(RETRY_ORIGINAL_OFFSET))
        if topic is None or partition is None or offset is None:
            return rec, route, copy_headers_of(rec.headers, route, main.encode(), tp.partition, rec.offset, exc)
        return rec, route, copy_headers_of(rec.headers, route, topic.decode("utf-8", "replace").encode(), partition,
                                           offset, exc)

    def _republish(self, tp: TopicPartition, failures: list[tuple[ConsumerRecord, Route, Headers]]) -> _Copies:
        """Send the copies of ``failures`` with one ``send_many`` per destination partition: the source
        partition's number when the destination has it (ordering per partition carries over), else the
        producer's partitioner on the key."""
        offsets = [f[0].offset for f in failures]
        labels = [f[1].label for f in failures]
        topics = {f[1].topic for f in failures}
        part = tp.partition
        counts = {topic: self._partition_count(topic) for topic in topics}
        # (topic, partition, its copies, the offset of the first one's source record), in offset order
        groups: list[tuple[str, int, list[tuple[bytes | None, bytes | None, Headers, int]], int]]
        if len(topics) == 1 and (part < counts[next(iter(topics))] or not counts[next(iter(topics))]):
            # the usual round: every copy to one retry topic, in the partition of the source's number
            groups = [(failures[0][1].topic, part, [(rec.key, rec.value, headers, rec.timestamp)
                                                    for rec, _, headers in failures], offsets[0])]
        else:
            by_dest: dict[tuple[str, int], list[tuple[bytes | None, bytes | None, Headers, int]]] = {}
            firsts: dict[tuple[str, int], int] = {}
            for rec, r, headers in failures:
                n = counts[r.topic]
                partition = part if part < n or n == 0 else self.producer.partitioner.partition(r.topic, rec.key, n)
                dest = (r.topic, partition)
                copies = by_dest.get(dest)
                if copies is None:
                    copies = by_dest[dest] = []
                    firsts[dest] = rec.offset
                copies.append((rec.key, rec.value, headers, rec.timestamp))
            groups = [(topic, partition, copies, firsts[(topic, partition)])
                      for (topic, partition), copies in by_dest.items()]
        sends: list[RecordsFuture | None] = []
        for topic, partition, copies, _ in groups:
            fut: RecordsFuture | None = None
            if counts[topic]:
                try:
                    fut = self.producer.send_many(topic, partition, copies)
                except KafkaError as e:
                    log.warning("cannot publish %d copies from %s to %s-%d: %s", len(copies), tp, topic, partition, e)
            sends.append(fut)
        republished = [(rec, r) for rec, r, _ in failures] if self.on_republished is not None else None
        return _Copies(tp, offsets, labels, sends, [g[3] for g in groups], republished)

    def _partition_count(self, topic: str) -> int:
        """The partition count of ``topic`` as the producer knows it (0, with a warning, when it does not)."""
        try:
            return len(self.producer.partitions_for(topic))
        except KafkaError as e:
            log.warning("no partitions known for %s: %s", topic, e)
            return 0

    # ------------------------------------------------------------------ acknowledgements and commits
    def _finish(self, pending: list[_Copies], done: dict[TopicPartition, int], wait: bool = False
                ) -> dict[TopicPartition, int]:
        """Record this round's progress, take the acknowledgements that arrived (all of them when ``wait``),
        rewind partitions whose copy failed, and commit (async, unless ``wait``: the caller commits) what is
        now safe. Returns the offset of each partition's first copy still unacknowledged."""
        for c in pending:
            queue = self._inflight.get(c.tp)
            if queue is None:
                queue = self._inflight[c.tp] = deque()
            queue.append(c)
            self._inflight_count += len(c.offsets)
        self._progress.update(done)
        if wait:
            try:
                self.producer.flush(self.ack_timeout_s)
            except KafkaError as e:
                log.warning("copies not acknowledged within %.1fs: %s", self.ack_timeout_s, e)
        elif self._inflight_count > MAX_IN_FLIGHT_COPIES:
            self._await_oldest(MAX_IN_FLIGHT_COPIES // 2)
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
            self._wake.pop(tp, None)
            self._paused.discard(tp)
            if tp in assigned:
                self.consumer.seek(tp, offset)
                self.consumer.resume([tp])
        if wait or self._committing:  # a wait is followed by a synchronous commit; while an async commit is in
            return unacked  # flight, the next poll after its answer commits what is safe then
        safe = {tp: min(o, unacked.get(tp, o)) for tp, o in self._progress.items() if tp in assigned}
        offsets = {tp: OffsetAndMetadata(o) for tp, o in safe.items() if self._committed.get(tp) != o}
        if offsets:
            self._committed.update({tp: o.offset for tp, o in offsets.items()})
            self.consumer.commit_async(offsets, self._on_commit)  # its callback runs in a later poll, never here
            self._committing = True
        return unacked

    def _await_oldest(self, target: int) -> None:
        """Wait (at most ``ack_timeout_ms``) for the oldest copies in flight, each partition's in order, until no
        more than ``target`` are left unacknowledged: memory stays bounded, and the poll loop stops only as long
        as that takes (not until every copy sent is acknowledged)."""
        deadline = time.monotonic() + self.ack_timeout_s
        left = self._inflight_count
        rounds = [iter(q) for q in self._inflight.values()]
        while left > target and rounds:
            for it in list(rounds):  # one round of each partition at a time: the oldest go first
                c = next(it, None)
                if c is None:
                    rounds.remove(it)
                    continue
                for s in c.sends:
                    if s is not None and not s.wait(max(0.0, deadline - time.monotonic())):
                        log.warning("copies not acknowledged within %.1fs", self.ack_timeout_s)
                        return
                left -= len(c.offsets)
                if left <= target:
                    return

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
        if cut is None and c.republished is None:  # every copy acknowledged, no callback: count them at once
            for label, n in Counter(c.labels).items():
                if label:
                    retried[label] = retried.get(label, 0) + n
                else:
                    self.stats.failed += n
            return None
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

    def _on_commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], error: BaseException | None) -> None:
        self._committing = False
        if error is not None:  # sent again by the next poll (or covered by the commit at revocation)
            log.info("async commit of %d partitions failed: %s", len(offsets), error)
            for tp, o in offsets.items():
                if self._committed.get(tp) == o.offset:
                    del self._committed[tp]

    def _commit_sync(self, partitions: Iterable[TopicPartition]) -> None:
        """Wait for every copy, then commit the handled offsets of ``partitions`` synchronously (never past a copy
        still unacknowledged when the wait timed out)."""
        unacked = self._finish([], {}, wait=True)
        offsets = {tp: OffsetAndMetadata(min(self._progress[tp], unacked.get(tp, self._progress[tp])))
                   for tp in partitions if tp in self._progress}
        if not offsets:
            return
        generation = self.consumer.generation()
        if generation.generation_id < 0:
            return
        try:
            self.consumer.offsets.commit_sync(offsets, None, generation=generation)
        except KafkaError as e:
            log.warning("commit of handled offsets failed: %s", e)
        else:
            self._committed.update({tp: o.offset for tp, o in offsets.items()})

    def _on_revoked(self, partitions: set[TopicPartition], lost: bool) -> None:
        if not lost:
            self._commit_sync(partitions)
        for tp in partitions:
            self._parked.pop(tp, None)
            self._wake.pop(tp, None)
            self._paused.discard(tp)
            self._progress.pop(tp, None)
            self._committed.pop(tp, None)
        for tp in partitions:
            self._inflight_count -= sum(len(c.offsets) for c in self._inflight.pop(tp, ()))
