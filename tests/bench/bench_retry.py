"""Retry benchmark: RetryingConsumer lateness and main-topic throughput, beside a plain Consumer.

Run from the repository root (or `make bench ARGS=retry`):
    .venv/bin/python -m tests.bench.bench_retry [--records 10000] [--partitions 4] [--policy 1s,2s]

Produces ``--records`` records to two topics. A plain ``Consumer`` (no-op handler, auto-commit) reads the
first; a ``RetryingConsumer`` reads the second with a handler that fails a third of the records once or
twice (i % 3 == 0 fails once, i % 6 == 0 twice), so retries are in flight while the main topic is read.
Prints: main-topic throughput of each (records/s from the first record until every main record was seen or had
its first attempt) and their ratio (target >= 0.8); then the plain Consumer again running the same handler
(failures ignored) and the ratio to that, which is the retry layer's own cost; and the lateness of retries, handling time minus ``retry_timestamp``, p50/p99/max
(target p99 <= 50 ms). Each timed phase starts after ``gc.collect()``. Asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import uuid
from pathlib import Path

from client.admin import AdminClient, NewTopic
from client.consumer import Consumer
from client.fetcher import ConsumerRecord
from client.producer import Producer
from client.retry import RetryingConsumer, RetryPolicy

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


def retrying(bootstrap: str, topic: str, records: int, policy: str) -> tuple[float, RetryingConsumer, int]:
    gc.collect()  # as for the plain Consumer
    first_attempts = 0
    start = 0.0
    expected_retries = sum(1 + (i % 6 == 0) for i in range(records) if i % 3 == 0)

    def handler(rec: ConsumerRecord) -> None:
        nonlocal first_attempts, start
        start = start or time.perf_counter()
        if not rec.headers or "retry_number" not in dict(rec.headers):
            first_attempts += 1
        outcome(rec)

    rc = RetryingConsumer(bootstrap_servers=bootstrap, group_id=f"retry-{uuid.uuid4().hex[:6]}", topics=[topic],
                          handler=handler, policy=RetryPolicy.parse(policy))
    deadline = time.monotonic() + 120
    while first_attempts < records and time.monotonic() < deadline:
        rc.poll_once(100)
    rate = first_attempts / (time.perf_counter() - start)
    while len(rc.stats.lateness_ms) < expected_retries and time.monotonic() < deadline:
        rc.poll_once(100)
    return rate, rc, expected_retries


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--policy", default="1s,2s")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        srv = ServerProcess(Path(tmp) / "data", "--group-initial-rebalance-delay-ms", "0",
                            "--num-partitions", str(args.partitions)).start()
        try:
            produce(srv.bootstrap, "plain", args.records, args.partitions)
            produce(srv.bootstrap, "main", args.records, args.partitions)
            plain_rate = plain(srv.bootstrap, "plain", args.records)
            plain_work_rate = plain(srv.bootstrap, "plain", args.records, work=True)
            retry_rate, rc, expected = retrying(srv.bootstrap, "main", args.records, args.policy)
            try:
                lat = rc.stats.lateness()
                stats = rc.stats
            finally:
                rc.close()
        finally:
            srv.stop()
    cmd = f"python -m tests.bench.bench_retry --records {args.records} --partitions {args.partitions} " \
          f"--policy {args.policy}"
    print(f"[{cmd}]")
    print(f"plain Consumer, main topic:        {plain_rate:10,.0f} records/s")
    print(f"RetryingConsumer, main topic:      {retry_rate:10,.0f} records/s  (retries in flight)")
    print(f"ratio retrying / plain:            {retry_rate / plain_rate:10.2f}   (target >= 0.8)")
    print(f"plain Consumer + the same handler: {plain_work_rate:10,.0f} records/s  (failures ignored)")
    print(f"ratio retrying / plain + handler:  {retry_rate / plain_work_rate:10.2f}   (the retry layer's own cost)")
    print(f"retries handled: {int(lat.get('count', 0)):,} of {expected:,}  copies acked per delay: "
          f"{stats.retried}  failed: {stats.failed}  republish errors: {stats.republish_errors}")
    if lat:
        print(f"lateness of retries (ms):  p50 {lat['p50']:.1f}  p99 {lat['p99']:.1f}  max {lat['max']:.1f}"
              "   (target p99 <= 50)")


if __name__ == "__main__":
    main()
