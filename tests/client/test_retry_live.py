"""RetryingConsumer against the real daemon: the seed's retry sequence scaled down, the main topic flowing
while retries wait, a delay four times max.poll.interval.ms, and a rebalance while a retry waits.

The 20-second case runs in a background thread for the whole module (it starts with the first test and is
checked by the last), so its wait overlaps the other scenarios. Copies are read back with kafka-python.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from client.admin import AdminClient, NewTopic
from client.fetcher import ConsumerRecord
from client.producer import Producer
from client.retry import RetryingConsumer, RetryPolicy

REPO = Path(__file__).resolve().parents[2]

import itertools

from server_process import ServerProcess

FAST = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 300, "fetch_max_wait_ms": 100}


class NotRetryable(ValueError):
    pass


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path_factory.mktemp("retry") / "data", "--num-partitions", "1",
                           "--group-min-session-timeout-ms", "1000", "--group-initial-rebalance-delay-ms", "0").start()
    try:
        yield server
    finally:
        server.stop()


def now_ms() -> float:
    return time.time() * 1000


def header(rec: Any, name: str) -> bytes | None:
    return dict(rec.headers).get(name)


@dataclass
class Calls:
    """Every handler call: (value, retry_number header, retry_timestamp header, call time ms, who)."""

    fail_times: dict[bytes, int] = field(default_factory=dict)  # value -> how many attempts fail
    not_retryable: set[bytes] = field(default_factory=set)
    log: list[tuple[bytes, int, int | None, float, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handler(self, who: str = "") -> Any:
        def handle(rec: ConsumerRecord) -> None:
            assert rec.value is not None
            n = int(header(rec, "retry_number") or b"0")
            due = header(rec, "retry_timestamp")
            with self.lock:
                self.log.append((rec.value, n, int(due) if due else None, now_ms(), who))
            if rec.value in self.not_retryable:
                raise NotRetryable(f"cannot parse {rec.value!r}")
            if n < self.fail_times.get(rec.value, 0):
                raise RuntimeError(f"dependency down for {rec.value!r} (attempt {n + 1})")
        return handle

    def of(self, value: bytes) -> list[tuple[bytes, int, int | None, float, str]]:
        with self.lock:
            return [c for c in self.log if c[0] == value]


def produce(bootstrap: str, topic: str, values: list[bytes]) -> dict[bytes, tuple[int, int]]:
    """value -> (offset, timestamp) of each record produced (key k<value>, header trace=<value>)."""
    out = {}
    with Producer(bootstrap, acks="all") as producer:
        futures = [(v, producer.send(topic, v, key=b"k" + v, headers=[("trace", v)])) for v in values]
        for v, fut in futures:
            md = fut.get(10)
            out[v] = (md.offset, md.timestamp)
    return out


def read_topic(bootstrap: str, topic: str, expected: int) -> list[Any]:
    kc = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                       group_id=None, consumer_timeout_ms=3000)
    try:
        out: list[Any] = []
        deadline = time.monotonic() + 10
        while len(out) < expected and time.monotonic() < deadline:
            for recs in kc.poll(timeout_ms=300).values():
                out += recs
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        kc.close()


# ---------------------------------------------------------------------------- 20 s delay in the background
@dataclass
class LongDelay:
    thread: threading.Thread
    calls: Calls
    result: dict[str, Any]


@pytest.fixture(scope="module")
def long_delay(srv: ServerProcess) -> Iterator[LongDelay]:
    """A record failing once under policy "20s", with max.poll.interval.ms 5000, polled until handled."""
    topic, calls, result = f"slow-{uuid.uuid4().hex[:6]}", Calls(fail_times={b"slow": 1}), {}
    stop = threading.Event()

    def run() -> None:
        rc = RetryingConsumer(bootstrap_servers=srv.bootstrap, group_id="g-slow", topics=[topic],
                              handler=calls.handler(), policy=RetryPolicy.parse("20s"),
                              max_poll_interval_ms=5000, **FAST)
        try:
            produce(srv.bootstrap, topic, [b"slow"])
            deadline = time.monotonic() + 40
            while not stop.is_set() and time.monotonic() < deadline and len(calls.of(b"slow")) < 2:
                rc.poll_once(200)
                if len(calls.of(b"slow")) == 1 and "generation" not in result:
                    result["generation"] = rc.consumer.generation().generation_id
            result["generation_after"] = rc.consumer.generation().generation_id
            result["assignments"] = rc.stats.assignments
            result["lateness"] = list(rc.stats.lateness_ms)
        except BaseException as e:
            result["error"] = e
        finally:
            rc.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield LongDelay(thread, calls, result)
    stop.set()
    thread.join(30)


pytestmark = pytest.mark.usefixtures("long_delay")


# ---------------------------------------------------------------------------- the seed's sequence, scaled
def test_seed_sequence_scaled_down_retries_at_due_times_then_fails(srv: ServerProcess) -> None:
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    values = [b"r%d" % i for i in range(10)]
    calls = Calls(fail_times={b"r2": 1, b"r4": 3, b"r6": 7}, not_retryable={b"r8"})
    policy = RetryPolicy.parse("1s,1s,2s,2s,2s,4s", not_retryable=[NotRetryable])
    produced = produce(srv.bootstrap, topic, values)
    rc = RetryingConsumer(bootstrap_servers=srv.bootstrap, group_id=f"g-{topic}", topics=[topic],
                          handler=calls.handler(), policy=policy, **FAST)
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and (rc.stats.processed < 8 or rc.stats.failed < 2):
            rc.poll_once(200)
        stats = rc.stats
    finally:
        rc.close()

    # a handler failing k times processes the record k+1 times (r6: 1 + 6 retries, then the failed topic)
    assert {v: len(calls.of(v)) for v in values} == {
        b"r0": 1, b"r1": 1, b"r2": 2, b"r3": 1, b"r4": 4, b"r5": 1, b"r6": 7, b"r7": 1, b"r8": 1, b"r9": 1}
    assert [c[1] for c in calls.of(b"r6")] == [0, 1, 2, 3, 4, 5, 6]
    # every retry at or after its due time, and the due time is at least its delay after the failed attempt
    delays = [0, *policy.delays_ms]
    for v in (b"r2", b"r4", b"r6"):
        attempts = calls.of(v)
        for prev, cur in itertools.pairwise(attempts):
            assert cur[2] is not None and cur[3] >= cur[2], f"{v!r} retry {cur[1]} handled before it was due"
            assert cur[2] >= int(prev[3]) + delays[cur[1]]  # epoch ms, truncated
    # the main topic kept flowing: everything after r2 was handled before r2's first retry was due
    r2_due = calls.of(b"r2")[1][2]
    assert r2_due is not None
    assert all(calls.of(v)[0][3] < r2_due for v in values[3:])

    assert stats.processed == 8 and stats.failed == 2
    assert stats.retried == {"1s": 5, "2s": 4, "4s": 1}

    # the copies, read back with kafka-python
    expect = {f"{topic}-retry-1s": [(b"r2", 1), (b"r4", 1), (b"r4", 2), (b"r6", 1), (b"r6", 2)],
              f"{topic}-retry-2s": [(b"r4", 3), (b"r6", 3), (b"r6", 4), (b"r6", 5)],
              f"{topic}-retry-4s": [(b"r6", 6)],
              f"{topic}-failed": [(b"r6", 6), (b"r8", 0)]}
    for name, want in expect.items():
        copies = read_topic(srv.bootstrap, name, len(want))
        got = sorted((r.value, int(dict(r.headers)["retry_number"])) for r in copies)
        assert got == sorted(want), name
        for r in copies:
            h = dict(r.headers)
            offset, timestamp = produced[r.value]
            assert r.key == b"k" + r.value and r.timestamp == timestamp
            assert h["trace"] == r.value
            assert h["retry_original_topic"] == topic.encode()
            assert h["retry_original_partition"] == b"0" and h["retry_original_offset"] == str(offset).encode()
            assert int(h["retry_timestamp"]) > 0
            cls = b"NotRetryable" if r.value == b"r8" else b"RuntimeError"
            assert h["retry_exception"].startswith(cls + b": ")
            assert [k for k, _ in r.headers].count("retry_number") == 1


# ---------------------------------------------------------------------------- rebalance while a retry waits
def test_a_new_owner_after_a_rebalance_honours_the_due_time(srv: ServerProcess) -> None:
    topic = f"moves-{uuid.uuid4().hex[:6]}"
    group = f"g-{topic}"
    calls = Calls(fail_times={b"m0": 1})
    policy = RetryPolicy.parse("4s")
    produce(srv.bootstrap, topic, [b"m0", b"m1"])
    first = RetryingConsumer(bootstrap_servers=srv.bootstrap, group_id=group, topics=[topic],
                             handler=calls.handler("first"), policy=policy, **FAST)
    retry_tp = (f"{topic}-retry-4s", 0)
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and retry_tp not in first.consumer.paused():
            first.poll_once(100)
        assert retry_tp in first.consumer.paused(), "the first owner did not hold the not-yet-due retry"
        # a second member joins while the retry waits: both keep polling through the rebalance
        second = RetryingConsumer(bootstrap_servers=srv.bootstrap, group_id=group, topics=[topic],
                                  handler=calls.handler("second"), policy=policy, **FAST)
        stop = threading.Event()
        worker = threading.Thread(target=second.run, args=(stop,), daemon=True)
        worker.start()
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and second.consumer.generation().generation_id < 0:
                first.poll_once(100)  # until the second member is in the group (it may own nothing yet)
            first.close()  # the first owner leaves before the retry is due: the second takes everything
            closed_at = now_ms()
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and len(calls.of(b"m0")) < 2:
                time.sleep(0.05)
        finally:
            stop.set()
            worker.join(10)
            second.close()
    finally:
        first.close()
    attempts = calls.of(b"m0")
    assert len(attempts) == 2, attempts
    value, n, due, at, who = attempts[1]
    assert n == 1 and who == "second"
    assert due is not None and closed_at < due <= at  # moved while waiting; the new owner waited too
    assert [c[4] for c in calls.of(b"m1")] == ["first"]


# ---------------------------------------------------------------------------- a copy the broker refuses
def test_a_refused_copy_rewinds_its_partition_and_nothing_is_committed_past_it(srv: ServerProcess) -> None:
    """The retry topic takes batches of at most 1,000 bytes: the copy of a 900-byte record (plus its retry
    headers) is refused (MESSAGE_TOO_LARGE), so the partition is rewound to that record and it is handled
    again from the main topic; the small record's copy in the same round is acknowledged and counted."""
    topic = f"refused-{uuid.uuid4().hex[:6]}"
    policy = RetryPolicy.parse("1s")
    with AdminClient(srv.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1), NewTopic(policy.retry_topic(topic, "1s"), 1,
                                                         configs={"max.message.bytes": "1000"})])
    big = b"B" * 900
    calls = Calls()
    record = calls.handler()

    def handler(rec: ConsumerRecord) -> None:  # the big record fails its first attempt only
        record(rec)
        if rec.value == big and len(calls.of(big)) == 1:
            raise RuntimeError("dependency down")

    produce(srv.bootstrap, topic, [big, b"after"])
    rc = RetryingConsumer(bootstrap_servers=srv.bootstrap, group_id=f"g-{topic}", topics=[topic],
                          handler=handler, policy=policy, **FAST)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (len(calls.of(big)) < 2 or rc.stats.processed < 2):
            rc.poll_once(100)
    finally:
        rc.close()
    kc = KafkaConsumer(bootstrap_servers=srv.bootstrap, group_id=f"g-{topic}", enable_auto_commit=False)
    try:
        committed = kc.committed(KafkaTopicPartition(topic, 0))
        retry_end = kc.end_offsets([KafkaTopicPartition(policy.retry_topic(topic, "1s"), 0)])
    finally:
        kc.close()
    assert rc.stats.republish_errors == 1 and rc.stats.retried == {} and rc.stats.failed == 0
    # the big record: its failed attempt, then (rewound: its copy was refused) handled again from the main topic
    assert [c[1] for c in calls.of(big)] == [0, 0]
    assert len(calls.of(b"after")) >= 1
    assert committed == 2
    assert list(retry_end.values()) == [0]  # no copy was ever stored


# ---------------------------------------------------------------------------- checked last
def test_a_delay_longer_than_max_poll_interval_keeps_the_member_in_its_group(long_delay: LongDelay) -> None:
    long_delay.thread.join(45)
    result = long_delay.result
    assert "error" not in result, result.get("error")
    attempts = long_delay.calls.of(b"slow")
    assert len(attempts) == 2
    first, retry = attempts
    assert retry[2] is not None and retry[3] >= retry[2] >= int(first[3]) + 20_000
    assert result["assignments"] == 1 and result["generation"] == result["generation_after"]
