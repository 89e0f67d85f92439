"""Producer: batches records per partition and sends them, per leader node, from a background thread.

Rules and invariants:
- ``send()`` never waits for the network except to learn a new topic's partition count (Metadata with
  auto-creation, up to ``max_block_ms``). It appends the record to its partition's open batch in the
  accumulator and returns a ``FutureRecordMetadata``; ``get(timeout)`` gives ``RecordMetadata(topic,
  partition, offset, timestamp)`` or raises the failure.
- ``send_many(topic, partition, records)`` appends many records of one partition under one lock, with one
  ``RecordsFuture`` for all of them (done when every batch they went into is done): the bulk path.
- Uncompressed batches are encoded by aiokafka's Cython builder when it is installed (the same bytes as
  ``protocol.record_batch.build_batch``, which encodes everything else).
- Partitioning: an explicit ``partition`` wins; otherwise ``client.partitioner.DefaultPartitioner`` (murmur2
  for keys, a sticky partition for keyless records that moves whenever a keyless record would open a new
  batch, as Kafka's ``abortOnNewBatch``).
- A batch holds records of one partition up to ``batch_size`` bytes (estimated, uncompressed; a single
  bigger record gets a batch of its own). It is *ready* when it is full (a newer batch exists behind it),
  ``linger_ms`` has passed since it was opened, or a flush/close is in progress.
- The sender thread drains at most one ready batch per partition, groups them per leader node and sends one
  Produce request per node (at most ``max_request_size`` bytes of batches, at least one), with the highest
  Produce version both sides support (>= 3). Order per partition is kept by muting a partition while a batch
  of it is in flight (Kafka's max.in.flight=1 ordering guarantee, without idempotence).
- Responses are read by one waiter thread per node, in request order. Per partition: success completes the
  futures with ``base_offset + i``; a retriable error (or a lost connection / timeout) puts the batch back at
  the head of its partition and refreshes metadata. As in Kafka's producer (2.1+), retries are bounded by
  ``delivery_timeout_ms`` (120 s) counted from the batch's creation, and by ``retries`` (default unbounded);
  the backoff doubles from ``retry_backoff_ms`` up to ``retry_backoff_max_ms`` (KIP-580, without jitter).
  Anything else fails the batch's futures with ``client.errors.error_for(code)``.
- acks=0: the node sends no response; futures complete with offset -1 as soon as the request is written.
- ``flush(timeout)`` makes every buffered batch ready and waits for the futures that existed when it was
  called. ``close(timeout)`` flushes, stops the threads and closes the connections; what could not be sent
  by then fails with ``ProducerClosedError``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from queue import Queue
from typing import Any, Self

from client.cluster import Cluster
from client.connection import BrokerConnection, ResponseFuture
from client.consumer_protocol import TopicPartition, group_by_topic
from client.errors import AuthenticationError, BrokerResponseError, IllegalStateError, KafkaError, error_for
from client.partitioner import DefaultPartitioner
from client.security import SecurityConfig
from protocol.compression import codec_for
from protocol.errors import ErrorCode, is_retriable
from protocol.record_batch import Compression, build_batch

log = logging.getLogger(__name__)

PRODUCE = 0
MIN_PRODUCE_VERSION = 3
RECORD_OVERHEAD = 21  # worst-case varints + attributes of one record (Kafka's estimate is similar)
BATCH_HEADER = 61
ACKS = {0: 0, 1: 1, -1: -1, "all": -1, "0": 0, "1": 1, "-1": -1}

Headers = Sequence[tuple[str, bytes | None]]
Callback = Callable[["RecordMetadata | None", "BaseException | None"], None]


class ProducerTimeoutError(KafkaError):
    """A wait (metadata for send, get, flush) did not finish in time."""

    retriable = True


class ProducerClosedError(IllegalStateError):
    """The producer was closed before the record could be sent."""


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    topic: str
    partition: int
    offset: int
    timestamp: int


class _BatchResult:
    """The outcome of one batch, shared by its records' futures (Kafka's ProduceRequestResult)."""

    __slots__ = ("base_offset", "callbacks", "error", "event", "lock", "log_append_time")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self.callbacks: list[tuple[FutureRecordMetadata, Callback]] = []
        self.lock = threading.Lock()

    def complete(self, base_offset: int, log_append_time: int, error: BaseException | None) -> None:
        with self.lock:
            if self.event.is_set():
                return
            self.base_offset, self.log_append_time, self.error = base_offset, log_append_time, error
            self.event.set()
            callbacks, self.callbacks = self.callbacks, []
        for fut, fn in callbacks:
            fut._run_callback(fn)


class FutureRecordMetadata:
    """The result of one ``send``: the record's index in a batch whose result completes once."""

    __slots__ = ("_index", "_result", "_timestamp", "partition", "topic")

    def __init__(self, topic: str, partition: int, result: _BatchResult, index: int, timestamp: int) -> None:
        self.topic, self.partition = topic, partition
        self._result, self._index, self._timestamp = result, index, timestamp

    def done(self) -> bool:
        return self._result.event.is_set()

    def succeeded(self) -> bool:
        return self._result.event.is_set() and self._result.error is None

    def exception(self) -> BaseException | None:
        return self._result.error

    def wait(self, timeout: float | None = None) -> bool:
        return self._result.event.wait(timeout)

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Wait up to ``timeout`` seconds; the metadata, or the failure raised."""
        res = self._result
        if not res.event.wait(timeout):
            raise ProducerTimeoutError(f"no acknowledgement for {self.topic}-{self.partition} in {timeout}s")
        if res.error is not None:
            raise res.error
        return self._metadata()

    def _metadata(self) -> RecordMetadata:
        res = self._result
        offset = res.base_offset + self._index if res.base_offset >= 0 else -1
        ts = res.log_append_time if res.log_append_time >= 0 else self._timestamp
        return RecordMetadata(self.topic, self.partition, offset, ts)

    def add_callback(self, fn: Callback) -> None:
        """``fn(metadata, error)`` once completed (at once if already done), on the completing thread."""
        res = self._result
        with res.lock:
            if not res.event.is_set():
                res.callbacks.append((self, fn))
                return
        self._run_callback(fn)

    def _run_callback(self, fn: Callback) -> None:
        err = self._result.error
        try:
            fn(None if err is not None else self._metadata(), err)
        except Exception:
            log.exception("producer callback failed")


class RecordsFuture:
    """The result of one ``send_many``: done when every batch its records went into is done."""

    __slots__ = ("_results",)

    def __init__(self, results: list[_BatchResult]) -> None:
        self._results = results

    def done(self) -> bool:
        return all(r.event.is_set() for r in self._results)

    def succeeded(self) -> bool:
        return all(r.event.is_set() and r.error is None for r in self._results)

    def exception(self) -> BaseException | None:
        """The first failure among the batches done (None while none failed)."""
        return next((r.error for r in self._results if r.event.is_set() and r.error is not None), None)

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for r in self._results:
            if not r.event.wait(None if deadline is None else max(0.0, deadline - time.monotonic())):
                return False
        return True


def failed_future(topic: str, partition: int, error: BaseException) -> FutureRecordMetadata:
    res = _BatchResult()
    res.complete(-1, -1, error)
    return FutureRecordMetadata(topic, partition, res, 0, -1)


@dataclass(slots=True, eq=False)
class ProducerBatch:
    tp: TopicPartition
    created: float
    records: list[tuple[bytes | None, bytes | None, Headers, int]] = field(default_factory=list)
    result: _BatchResult = field(default_factory=_BatchResult)
    size: int = BATCH_HEADER
    attempts: int = 0
    retry_at: float = 0.0
    payload: bytes | None = None

    def try_append(self, key: bytes | None, value: bytes | None, headers: Headers, ts: int, size: int,
                   limit: int) -> FutureRecordMetadata | None:
        records = self.records
        if records and self.size + size > limit:
            return None
        records.append((key, value, headers, ts))
        self.size += size
        return FutureRecordMetadata(self.tp.topic, self.tp.partition, self.result, len(records) - 1, ts)

    def encoded(self, compression: int) -> bytes:
        if self.payload is None:
            self.payload = encode_batch(self.records, compression)
        return self.payload

    def complete(self, base_offset: int, log_append_time: int = -1) -> None:
        self.result.complete(base_offset, log_append_time, None)

    def fail(self, error: BaseException) -> None:
        self.result.complete(-1, -1, error)


_C_BUILDER: Any = None  # aiokafka's Cython DefaultRecordBatchBuilder once looked up; False: not installed


def c_builder() -> Any:
    """aiokafka's Cython ``DefaultRecordBatchBuilder``, or None when not installed. Looked up once, by the first
    Producer: importing aiokafka takes ~0.1 s, which must not stall a sender thread holding the GIL."""
    global _C_BUILDER
    if _C_BUILDER is None:
        try:
            from aiokafka.record._crecords.default_records import DefaultRecordBatchBuilder
            _C_BUILDER = DefaultRecordBatchBuilder
        except ImportError:
            _C_BUILDER = False
    return _C_BUILDER or None


def encode_batch(records: Sequence[tuple[bytes | None, bytes | None, Headers, int]], compression: int) -> bytes:
    """``build_batch(records, compression=compression)``: for an uncompressed batch, built by aiokafka's Cython
    builder when installed (byte for byte the same batch, ~4x faster; the sender thread holds the GIL less)."""
    if compression == Compression.NONE and c_builder() is not None:
        try:
            builder = _C_BUILDER(2, 0, 0, -1, -1, -1, 1 << 62)  # magic 2, no codec, no producer id, no size cap
            append = builder.append
            for i, (key, value, headers, ts) in enumerate(records):
                append(i, ts, key, value, list(headers))
            return bytes(builder.build())
        except (TypeError, ValueError):  # what it does not take (a bytearray header value...): ours below
            pass
    return build_batch(records, compression=compression)


def record_size(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    size = RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    for hkey, hvalue in headers:
        size += 10 + len(hkey) + (len(hvalue) if hvalue else 0)
    return size


class Producer:
    def __init__(self, bootstrap_servers: str | Sequence[str], client_id: str | None = None, *,
                 acks: int | str = 1, linger_ms: int = 5, batch_size: int = 16384,
                 compression_type: str | None = None, max_request_size: int = 1048576,
                 request_timeout_ms: int = 30000, retries: int = 2147483647, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 1000, delivery_timeout_ms: int = 120000,
                 max_block_ms: int = 60000, partitioner: DefaultPartitioner | None = None,
                 cluster: Cluster | None = None, security: SecurityConfig | None = None,
                 **security_settings: Any) -> None:
        """``security`` or Kafka's security keywords (``security_protocol``, ``sasl_mechanism``, ...; see
        ``client.security``) secure every connection; a given ``cluster`` brings its own."""
        security = SecurityConfig.resolve(security, security_settings, "Producer")
        if acks not in ACKS:
            raise ValueError(f"acks must be one of 0, 1, -1, 'all' (got {acks!r})")
        self.client_id = client_id or "groupcoord-producer"
        self.acks = ACKS[acks]
        self.linger_s = max(0, linger_ms) / 1000
        self.batch_size = max(1, batch_size)
        self.compression = codec_for(compression_type)  # none, gzip, snappy, lz4, zstd (ValueError otherwise)
        if self.compression == Compression.NONE:
            c_builder()
        self.max_request_size = max_request_size
        self.request_timeout_ms = request_timeout_ms
        self.retries = max(0, retries)
        self.retry_backoff_s = max(0, retry_backoff_ms) / 1000
        self.retry_backoff_max_s = max(self.retry_backoff_s, max(0, retry_backoff_max_ms) / 1000)
        self.delivery_timeout_s = max(0, delivery_timeout_ms) / 1000
        self.max_block_s = max_block_ms / 1000
        self.partitioner = partitioner or DefaultPartitioner()
        self._own_cluster = cluster is None
        self.cluster = cluster or Cluster(bootstrap_servers, client_id=self.client_id,
                                          request_timeout_ms=request_timeout_ms, security=security)
        self._cond = threading.Condition(threading.Lock())
        self._batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._muted: set[TopicPartition] = set()
        self._in_flight: set[ProducerBatch] = set()
        self._flushing = 0
        self._closing = False
        self._closed = False
        self._metadata_stale = False
        self._metadata_lock = threading.Lock()
        self._topics: set[str] = set()
        self._waiters: dict[int, _ResponseWaiter] = {}
        self._sender = threading.Thread(target=self._run, name=f"kafka-producer-{self.client_id}", daemon=True)
        self._sender.start()

    # ------------------------------------------------------------------ public API
    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None,
             headers: Headers | None = None, partition: int | None = None,
             timestamp_ms: int | None = None) -> FutureRecordMetadata:
        if self._closing:
            raise ProducerClosedError("send() after close()")
        if value is not None and not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError("value must be bytes or None")
        if key is not None and not isinstance(key, (bytes, bytearray, memoryview)):
            raise TypeError("key must be bytes or None")
        key = bytes(key) if key is not None and not isinstance(key, bytes) else key
        value = bytes(value) if value is not None and not isinstance(value, bytes) else value
        hdrs: Headers = tuple(headers or ())
        ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        num_partitions = self._partition_count(topic)
        if partition is not None and not 0 <= partition < num_partitions:
            raise ValueError(f"{topic} has {num_partitions} partitions, partition {partition} does not exist")
        size = record_size(key, value, hdrs)
        if size + BATCH_HEADER > self.max_request_size:
            return failed_future(topic, -1 if partition is None else partition, error_for(
                ErrorCode.MESSAGE_TOO_LARGE, f"record of ~{size} bytes exceeds max_request_size"))
        with self._cond:
            if partition is None:
                p = self.partitioner.partition(topic, key, num_partitions)
                if key is None and self._needs_new_batch(TopicPartition(topic, p), size):
                    self.partitioner.on_new_batch(topic, num_partitions, p)
                    p = self.partitioner.partition(topic, key, num_partitions)
            else:
                p = partition
            return self._append(TopicPartition(topic, p), key, value, hdrs, ts, size)

    def send_many(self, topic: str, partition: int, records: Sequence[tuple[bytes | None, bytes | None, Headers, int]]
                  ) -> RecordsFuture:
        """``send()`` for many records of one partition at once: each ``(key, value, headers, timestamp_ms)``
        (bytes or None, a sequence of headers, epoch ms) is appended in order, under one lock and with no
        future per record. The returned future completes when every record is acknowledged, or fails with the
        first failure. A record over ``max_request_size`` fails the whole call before anything is appended."""
        if self._closing:
            raise ProducerClosedError("send_many() after close()")
        num_partitions = self._partition_count(topic)
        if not 0 <= partition < num_partitions:
            raise ValueError(f"{topic} has {num_partitions} partitions, partition {partition} does not exist")
        limit = self.max_request_size - BATCH_HEADER
        sizes = []
        for key, value, headers, _ in records:
            if not (value is None or type(value) is bytes) or not (key is None or type(key) is bytes):
                raise TypeError("keys and values of send_many() must be bytes or None")
            size = RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)  # record_size, inline
            for hkey, hvalue in headers:
                size += 10 + len(hkey) + (len(hvalue) if hvalue else 0)
            if size > limit:
                refused = _BatchResult()
                refused.complete(-1, -1, error_for(ErrorCode.MESSAGE_TOO_LARGE,
                                                   f"record of ~{size} bytes exceeds max_request_size"))
                return RecordsFuture([refused])
            sizes.append(size)
        if not sizes:
            return RecordsFuture([])
        total = sum(sizes)
        tp = TopicPartition(topic, partition)
        results: list[_BatchResult] = []
        with self._cond:
            q = self._batches.setdefault(tp, deque())
            batch = q[-1] if q and q[-1].payload is None else None
            opened = False
            if batch is None and BATCH_HEADER + total <= self.batch_size:
                batch = ProducerBatch(tp, time.monotonic())
                q.append(batch)
                opened = True
            if batch is not None and batch.size + total <= self.batch_size:  # all of them fit the open batch
                batch.records.extend(records)
                batch.size += total
                results.append(batch.result)
            else:
                for rec, size in zip(records, sizes, strict=True):
                    if batch is None or (batch.records and batch.size + size > self.batch_size):
                        batch = ProducerBatch(tp, time.monotonic())
                        q.append(batch)
                        opened = True
                    batch.records.append(rec)
                    batch.size += size
                    if not results or results[-1] is not batch.result:
                        results.append(batch.result)
            if opened:
                self._cond.notify_all()
        return RecordsFuture(results)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now and wait until it is acknowledged (or failed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            results = [b.result for q in self._batches.values() for b in q]
            results += [b.result for b in self._in_flight]
            self._flushing += 1
            self._cond.notify_all()
        try:
            for res in results:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not res.event.wait(left):
                    raise ProducerTimeoutError(f"flush did not complete in {timeout}s")
        finally:
            with self._cond:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        """Flush (within ``timeout``), stop the sender, fail whatever is left, close the connections."""
        if self._closed:
            return
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._sender.join(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            left = [b for q in self._batches.values() for b in q] + list(self._in_flight)
            self._batches.clear()
        for b in left:
            b.fail(ProducerClosedError("the producer was closed before the record was acknowledged"))
        for waiter in list(self._waiters.values()):
            waiter.stop()
        if self._own_cluster:
            self.cluster.close()

    def partitions_for(self, topic: str) -> list[int]:
        return list(range(self._partition_count(topic)))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ accumulator (under self._cond)
    def _needs_new_batch(self, tp: TopicPartition, size: int) -> bool:
        q = self._batches.get(tp)
        if not q:
            return True
        last = q[-1]
        return last.payload is not None or (bool(last.records) and last.size + size > self.batch_size)

    def _append(self, tp: TopicPartition, key: bytes | None, value: bytes | None, headers: Headers, ts: int,
                size: int) -> FutureRecordMetadata:
        q = self._batches.setdefault(tp, deque())
        if q and q[-1].payload is None:
            fut = q[-1].try_append(key, value, headers, ts, size, self.batch_size)
            if fut is not None:
                return fut
        batch = ProducerBatch(tp, time.monotonic())
        fut = batch.try_append(key, value, headers, ts, size, self.batch_size)
        assert fut is not None
        q.append(batch)
        self._cond.notify_all()
        return fut

    def _is_ready(self, q: deque[ProducerBatch], now: float) -> bool:
        first = q[0]
        if first.retry_at > now:
            return False
        return (len(q) > 1 or self._flushing > 0 or self._closing or first.attempts > 0
                or now - first.created >= self.linger_s or first.size >= self.batch_size)

    def _next_wake(self, now: float) -> float | None:
        """Seconds until some batch becomes ready (None: nothing is buffered)."""
        best: float | None = None
        for tp, q in self._batches.items():
            if not q or tp in self._muted:
                continue
            first = q[0]
            at = max(first.retry_at, first.created + self.linger_s)
            if self._flushing or self._closing or len(q) > 1:
                at = first.retry_at
            best = at if best is None else min(best, at)
        return None if best is None else max(0.0, best - now)

    def _drain(self, now: float) -> tuple[dict[int, list[ProducerBatch]], set[str]]:
        """Ready batches grouped per leader node, and topics whose leader is unknown."""
        by_node: dict[int, list[ProducerBatch]] = {}
        sizes: dict[int, int] = {}
        unknown: set[str] = set()
        for tp, q in self._batches.items():
            if not q or tp in self._muted or not self._is_ready(q, now):
                continue
            leader = self.cluster.leader_for(tp.topic, tp.partition)
            if leader is None:
                unknown.add(tp.topic)
                continue
            size = q[0].size
            if by_node.get(leader) and sizes[leader] + size > self.max_request_size:
                continue
            batch = q.popleft()
            by_node.setdefault(leader, []).append(batch)
            sizes[leader] = sizes.get(leader, 0) + size
            self._muted.add(tp)
            self._in_flight.add(batch)
        for tp in [tp for tp, q in self._batches.items() if not q]:
            del self._batches[tp]
        return by_node, unknown

    def _has_work(self) -> bool:
        return bool(self._batches) or bool(self._in_flight)

    # ------------------------------------------------------------------ sender thread
    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed or (self._closing and not self._has_work()):
                        return
                    now = time.monotonic()
                    by_node, unknown = self._drain(now)
                    if by_node or unknown or self._metadata_stale:
                        break
                    self._cond.wait(self._next_wake(now))
                stale, self._metadata_stale = self._metadata_stale, False
            if unknown or stale:
                self._refresh_metadata(unknown)
            for node_id, batches in by_node.items():
                self._send_to(node_id, batches)
            if unknown and not by_node:
                time.sleep(self.retry_backoff_s)

    def _send_to(self, node_id: int, batches: list[ProducerBatch]) -> None:
        try:
            payloads = {b.tp: b.encoded(self.compression) for b in batches}
            conn = self.cluster.connection(node_id)
            version = conn.version_for(PRODUCE, min_version=MIN_PRODUCE_VERSION)
            body = produce_body(self.acks, self.request_timeout_ms, payloads)
            fut = conn.send_async(PRODUCE, body, version=version)
        except KafkaError as e:
            self._batches_failed(batches, e)
            return
        if self.acks == 0:
            forget_response(conn, fut)
            for b in batches:
                b.complete(-1)
            self._batches_done(batches)
            return
        waiter = self._waiters.get(node_id)
        if waiter is None or not waiter.alive:
            waiter = self._waiters[node_id] = _ResponseWaiter(self, node_id)
        waiter.put(fut, {b.tp: b for b in batches})

    def _refresh_metadata(self, extra: Iterable[str] = ()) -> None:
        topics = set(self._topics) | set(extra)
        try:
            with self._metadata_lock:
                self.cluster.refresh_metadata(topics, allow_auto_topic_creation=True)
        except KafkaError as e:
            log.info("producer metadata refresh failed: %s", e)

    # ------------------------------------------------------------------ completions (waiter threads)
    def _handle_response(self, batches: dict[TopicPartition, ProducerBatch], resp: dict[str, Any]) -> None:
        done: list[ProducerBatch] = []
        retry: list[tuple[ProducerBatch, KafkaError]] = []
        for t in resp["responses"]:
            for p in t["partition_responses"]:
                batch = batches.pop(TopicPartition(t["name"], p["index"]), None)
                if batch is None:
                    continue
                code = p["error_code"]
                if code == ErrorCode.NONE:
                    batch.complete(p["base_offset"], p.get("log_append_time_ms", -1))
                    done.append(batch)
                else:
                    retry.append((batch, error_for(code, p.get("error_message"))))
        for batch in batches.values():
            retry.append((batch, KafkaError(f"the Produce response did not mention {batch.tp}")))
        self._batches_done(done)
        for batch, err in retry:
            self._batches_failed([batch], err)

    def _batches_done(self, batches: Iterable[ProducerBatch]) -> None:
        with self._cond:
            for b in batches:
                self._in_flight.discard(b)
                self._muted.discard(b.tp)
            self._cond.notify_all()

    def _batches_failed(self, batches: Iterable[ProducerBatch], error: KafkaError) -> None:
        """Retry what may be retried (back at the head of its partition), fail the rest."""
        failed: list[ProducerBatch] = []
        with self._cond:
            for b in batches:
                self._in_flight.discard(b)
                self._muted.discard(b.tp)
                now = time.monotonic()
                if (error.retriable and b.attempts < self.retries and not self._closed
                        and now - b.created < self.delivery_timeout_s):
                    b.attempts += 1
                    backoff = min(self.retry_backoff_s * (1 << min(b.attempts - 1, 20)), self.retry_backoff_max_s)
                    b.retry_at = now + backoff
                    self._batches.setdefault(b.tp, deque()).appendleft(b)
                    self._metadata_stale = True
                    log.info("retrying %s (attempt %d) after %s", b.tp, b.attempts, error)
                else:
                    failed.append(b)
            self._cond.notify_all()
        for b in failed:
            b.fail(error)

    # ------------------------------------------------------------------ metadata for send()
    def _partition_count(self, topic: str) -> int:
        self._topics.add(topic)
        meta = self.cluster.topics.get(topic)
        if meta is not None and meta.partitions:
            return len(meta.partitions)
        deadline = time.monotonic() + self.max_block_s
        last: str = "no answer"
        while True:
            try:
                with self._metadata_lock:
                    seen = self.cluster.refresh_metadata([topic], allow_auto_topic_creation=True)
                t = seen.get(topic)
                if t is not None and t.error_code == 0 and t.partitions:
                    return len(t.partitions)
                if t is not None and t.error_code and not is_retriable(t.error_code):
                    raise error_for(t.error_code, f"metadata for {topic}")
                last = f"error {t.error_code}" if t is not None else "topic not in the response"
            except (BrokerResponseError, AuthenticationError):
                raise
            except KafkaError as e:
                last = str(e)
            if time.monotonic() + self.retry_backoff_s > deadline:
                raise ProducerTimeoutError(f"no metadata for topic {topic} within max_block_ms ({last})")
            time.sleep(self.retry_backoff_s)


class _ResponseWaiter:
    """Reads one node's Produce responses in request order and hands them to the producer."""

    def __init__(self, producer: Producer, node_id: int) -> None:
        self.producer = producer
        self.queue: Queue[tuple[ResponseFuture, dict[TopicPartition, ProducerBatch]] | None] = Queue()
        self.thread = threading.Thread(target=self._run, name=f"kafka-producer-acks-{node_id}", daemon=True)
        self.alive = True
        self.thread.start()

    def put(self, fut: ResponseFuture, batches: dict[TopicPartition, ProducerBatch]) -> None:
        self.queue.put((fut, batches))

    def stop(self) -> None:
        self.queue.put(None)

    def _run(self) -> None:
        timeout = self.producer.request_timeout_ms / 1000 + 5.0
        try:
            while (item := self.queue.get()) is not None:
                fut, batches = item
                try:
                    resp = fut.result(timeout)
                except KafkaError as e:
                    self.producer._batches_failed(batches.values(), e)
                    continue
                self.producer._handle_response(batches, resp)
        finally:
            self.alive = False


def produce_body(acks: int, timeout_ms: int, payloads: dict[TopicPartition, bytes]) -> dict[str, Any]:
    return {"transactional_id": None, "acks": acks, "timeout_ms": timeout_ms, "topic_data": [
        {"name": topic, "partition_data": [{"index": p, "records": payloads[TopicPartition(topic, p)]}
                                           for p in parts]}
        for topic, parts in group_by_topic(payloads)]}


def forget_response(conn: BrokerConnection, fut: ResponseFuture) -> None:
    """acks=0: the node never answers, so drop the pending entry (else it leaks and counts as in flight).

    BrokerConnection has no public "no response expected" send yet; this touches its pending table.
    """
    with conn._pending_lock:
        conn._pending.pop(fut.correlation_id, None)
