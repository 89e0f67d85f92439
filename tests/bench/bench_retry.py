"""Retry benchmark: RetryingConsumer lateness and main-topic throughput, beside a plain Consumer.

Run from the repository root (or `make bench ARGS=retry`):
    .venv/bin/python -m tests.bench.bench_retry [--records 10000] [--partitions 4] [--policy 1s,2s]
                                                [--retrying-first] [--rounds 1]

Produces ``--records`` records to two topics. A plain ``Consumer`` (no-op handler, auto-commit) reads the
first; a ``RetryingConsumer`` reads the second with a handler that fails a third of the records once or
twice (i % 3 == 0 fails once, i % 6 == 0 twice), so retries are in flight while the main topic is read.
Prints: main-topic throughput of each (records/s from the first record until every main record was seen or had
its first attempt) and their ratio; then the plain Consumer again running the same handler (failures ignored)
and the ratio to that; then the floor: a plain Consumer running the same handler plus a Producer sending the
same copies (same key, value, timestamp and the ``retry_*`` headers the RetryingConsumer sets, to a retry
topic's partition of the same number, acks=all, one ``send_many`` per partition and poll as the
RetryingConsumer sends them) and committing (async, no auto-commit) each partition only up to its first copy
not yet acknowledged, and the RetryingConsumer's ratio to that (target >= 0.8: the retry layer's own cost
over the work any at-least-once retry scheme does); and the lateness of retries, handling time minus
``retry_timestamp``, p50/p99/max (target p99 <= 50 ms). Each timed phase starts after ``gc.collect()``.
The floor is measured just before the RetryingConsumer (``--retrying-first``: just after it; alternate runs
so that a drift of the machine's load does not favour one side). ``--rounds N`` measures both N times in one
run, in alternating order (a main topic of its own for each RetryingConsumer), and prints each round and the
median ratio: each phase lasts a fraction of a second, so one pair is at the mercy of a busy machine.
Asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
import uuid
from collections import deque
from pathlib import Path

from client.admin import AdminClient, NewTopic
from client.consumer import Consumer
from client.consumer_protocol import TopicPartition
from client.fetcher import ConsumerRecord
from client.offsets import OffsetAndMetadata
from client.producer import Producer, RecordsFuture
from client.retry import COPY_BATCH_BYTES, RetryingConsumer, RetryPolicy, RetryStats
from client.retry_policy import Origin, copy_headers

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from server_process import ServerProcess


def produce(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(topic, partitions)])
    with Producer(bootstrap, acks=1, linger_ms=5, batch_size=64 * 1024) as p:
        for i in range(records):
            p.send(topic, b"%d" % i + b" " + b"x" * 90, key=b"%d" % i)
        p.flush(120)


def outcome(rec: ConsumerRecord) -> None:
    """The bench's application work: parse the record, raise for the ones that fail (a third, once or twice)."""
    assert rec.value is not None
    i = int(rec.value.split(b" ", 1)[0])
    n = int(dict(rec.headers).get("retry_number") or b"0")
    if (i % 3 == 0 and n == 0) or (i % 6 == 0 and n == 1):
        raise RuntimeError("dependency down")


class Timed:
    """The handler of both timed phases (the floor's and the RetryingConsumer's): ``outcome``, counting first
    attempts (records without a ``retry_number`` header) and noting when it is first called; the same
    instrumentation, at the same cost, on both sides of the ratio."""

    __slots__ = ("first_attempts", "start")

    def __init__(self) -> None:
        self.first_attempts = 0
        self.start = 0.0

    def __call__(self, rec: ConsumerRecord) -> None:
        if not self.start:
            self.start = time.perf_counter()
        if not rec.headers or "retry_number" not in dict(rec.headers):
            self.first_attempts += 1
        outcome(rec)

    def rate(self) -> float:
        return self.first_attempts / (time.perf_counter() - self.start)


def plain(bootstrap: str, topic: str, records: int, work: bool = False) -> float:
    """A plain Consumer's records/s; with ``work``, running the same handler and ignoring its failures (the
    retry layer's own cost is then what the ratio shows)."""
    # each timed phase starts without the garbage of the phases before: a full collection (tens of ms)
    # landing in one phase's window alone skews the ratio, at 10,000 records by up to 2x
    gc.collect()
    seen = 0
    with Consumer(bootstrap_servers=bootstrap, group_id=f"plain-{uuid.uuid4().hex[:6]}",
                  auto_offset_reset="earliest") as consumer:
        consumer.subscribe([topic])
        start = 0.0
        deadline = time.monotonic() + 120
        while seen < records and time.monotonic() < deadline:
            for recs in consumer.poll(100).values():
                start = start or time.perf_counter()  # from the first record on, as for the retrying one
                if work:
                    for r in recs:
                        try:
                            outcome(r)
                        except RuntimeError:
                            pass
                        seen += 1
                else:
                    for r in recs:
                        seen += r.value is not None
        return seen / (time.perf_counter() - start)


def plain_copies(bootstrap: str, topic: str, records: int, policy: str) -> float:
    """The floor: a plain Consumer's records/s running the same handler and, for each record it fails, a
    Producer sending the copy the RetryingConsumer would send (its first retry: same key, value, timestamp
    and headers, to the first delay's retry topic, the source partition's number, acks=all, the same batch
    size and linger), the copies of one poll's records of one partition in one ``send_many``; each poll
    commits (async) every partition up to its first copy not yet acknowledged, as the RetryingConsumer does."""
    retry_policy = RetryPolicy.parse(policy)
    dest = retry_policy.retry_topic(topic, retry_policy.labels()[0])
    delay = retry_policy.delays_ms[0]
    with AdminClient(bootstrap) as admin:
        count = admin.list_topics()[topic].partitions
        admin.create_topics([NewTopic(dest, count)])
    gc.collect()  # as for the other phases
    handler = Timed()
    inflight: dict[TopicPartition, deque[tuple[int, RecordsFuture]]] = {}  # (first copy's offset, its send)
    progress: dict[TopicPartition, int] = {}
    committed: dict[TopicPartition, int] = {}
    with Consumer(bootstrap_servers=bootstrap, group_id=f"copies-{uuid.uuid4().hex[:6]}",
                  auto_offset_reset="earliest", enable_auto_commit=False) as consumer, \
            Producer(bootstrap, acks="all", linger_ms=1, batch_size=COPY_BATCH_BYTES) as producer:
        producer.partitions_for(dest)  # metadata before the timed phase, as the RetryingConsumer's
        consumer.subscribe([topic])
        deadline = time.monotonic() + 120
        while handler.first_attempts < records and time.monotonic() < deadline:
            for tp, recs in consumer.poll(100).items():
                copies = []
                first = -1
                for r in recs:
                    try:
                        handler(r)
                    except RuntimeError as exc:
                        if not copies:
                            first = r.offset
                        headers = copy_headers(r.headers, 1, int(time.time() * 1000) + delay,
                                               Origin(topic, tp.partition, r.offset), exc)
                        copies.append((r.key, r.value, headers, r.timestamp))
                if copies:
                    inflight.setdefault(tp, deque()).append((first, producer.send_many(dest, tp.partition, copies)))
                progress[tp] = recs[-1].offset + 1
            offsets = {}
            for tp, end in progress.items():
                queue = inflight.get(tp)
                while queue and queue[0][1].done():
                    if not queue[0][1].succeeded():
                        raise RuntimeError(f"copy not acknowledged: {queue[0][1].exception()}")
                    queue.popleft()
                safe = queue[0][0] if queue else end
                if committed.get(tp) != safe:
                    committed[tp] = safe
                    offsets[tp] = OffsetAndMetadata(safe)
            if offsets:
                consumer.commit_async(offsets)
        rate = handler.rate()
        producer.flush(30)
        return rate


def retrying(bootstrap: str, topic: str, records: int, policy: str) -> tuple[float, RetryingConsumer, int]:
    gc.collect()  # as for the plain Consumer
    handler = Timed()
    expected_retries = sum(1 + (i % 6 == 0) for i in range(records) if i % 3 == 0)
    rc = RetryingConsumer(bootstrap_servers=bootstrap, group_id=f"retry-{uuid.uuid4().hex[:6]}", topics=[topic],
                          handler=handler, policy=RetryPolicy.parse(policy))
    deadline = time.monotonic() + 120
    while handler.first_attempts < records and time.monotonic() < deadline:
        rc.poll_once(100)
    rate = handler.rate()
    while len(rc.stats.lateness_ms) < expected_retries and time.monotonic() < deadline:
        rc.poll_once(100)
    return rate, rc, expected_retries


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--policy", default="1s,2s")
    ap.add_argument("--retrying-first", action="store_true", help="measure the floor after the RetryingConsumer")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure the floor and the RetryingConsumer (a main topic of its own each time) this many "
                         "times, in alternating order; prints each round and the median ratio")
    args = ap.parse_args()
    rounds: list[tuple[float, float, dict[str, float], RetryStats, int]] = []  # floor, retrying, lateness, ...
    with tempfile.TemporaryDirectory() as tmp:
        srv = ServerProcess(Path(tmp) / "data", "--group-initial-rebalance-delay-ms", "0",
                            "--num-partitions", str(args.partitions)).start()
        try:
            produce(srv.bootstrap, "plain", args.records, args.partitions)
            mains = ["main"] + [f"main{r + 1}" for r in range(1, args.rounds)]
            for topic in mains:
                produce(srv.bootstrap, topic, args.records, args.partitions)
            plain_rate = plain(srv.bootstrap, "plain", args.records)
            plain_work_rate = plain(srv.bootstrap, "plain", args.records, work=True)
            for r, topic in enumerate(mains):
                retrying_first = args.retrying_first != (r % 2 == 1)
                if not retrying_first:
                    floor_rate = plain_copies(srv.bootstrap, "plain", args.records, args.policy)
                retry_rate, rc, expected = retrying(srv.bootstrap, topic, args.records, args.policy)
                try:
                    lat = rc.stats.lateness()
                    stats = rc.stats
                finally:
                    rc.close()
                if retrying_first:
                    floor_rate = plain_copies(srv.bootstrap, "plain", args.records, args.policy)
                rounds.append((floor_rate, retry_rate, lat, stats, expected))
        finally:
            srv.stop()
    cmd = f"python -m tests.bench.bench_retry --records {args.records} --partitions {args.partitions} " \
          f"--policy {args.policy}" + (" --retrying-first" if args.retrying_first else "") + \
          (f" --rounds {args.rounds}" if args.rounds != 1 else "")
    print(f"[{cmd}]")
    floor_rate, retry_rate, lat, stats, expected = rounds[0]
    print(f"plain Consumer, main topic:        {plain_rate:10,.0f} records/s")
    print(f"RetryingConsumer, main topic:      {retry_rate:10,.0f} records/s  (retries in flight)")
    print(f"ratio retrying / plain:            {retry_rate / plain_rate:10.2f}   (a consumer doing no work)")
    print(f"plain Consumer + the same handler: {plain_work_rate:10,.0f} records/s  (failures ignored)")
    print(f"ratio retrying / plain + handler:  {retry_rate / plain_work_rate:10.2f}")
    print(f"plain + handler + Producer copies: {floor_rate:10,.0f} records/s  (same copies, acks=all, "
          "commit behind acks)")
    print(f"ratio retrying / plain + copies:   {retry_rate / floor_rate:10.2f}   (target >= 0.8: the retry "
          "layer's own cost)")
    print(f"retries handled: {int(lat.get('count', 0)):,} of {expected:,}  copies acked per delay: "
          f"{stats.retried}  failed: {stats.failed}  republish errors: {stats.republish_errors}")
    if lat:
        print(f"lateness of retries (ms):  p50 {lat['p50']:.1f}  p99 {lat['p99']:.1f}  max {lat['max']:.1f}"
              "   (target p99 <= 50)")
    if len(rounds) > 1:
        for r, (floor_rate, retry_rate, lat, _, expected) in enumerate(rounds):
            order = "retrying first" if args.retrying_first != (r % 2 == 1) else "floor first"
            print(f"round {r + 1} ({order}): floor {floor_rate:,.0f}  retrying {retry_rate:,.0f} records/s  ratio "
                  f"{retry_rate / floor_rate:.2f}  lateness p50 {lat.get('p50', 0):.1f} p99 {lat.get('p99', 0):.1f} "
                  f"max {lat.get('max', 0):.1f} ms  retries {int(lat.get('count', 0)):,} of {expected:,}")
        ratios = [retry / floor for floor, retry, *_ in rounds]
        print(f"median ratio retrying / plain + copies over {len(rounds)} rounds: {statistics.median(ratios):.2f}   "
              f"worst lateness p99: {max(lat.get('p99', 0) for _, _, lat, _, _ in rounds):.1f} ms")


if __name__ == "__main__":
    main()
