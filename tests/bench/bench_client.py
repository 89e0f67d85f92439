"""Client benchmark: our Fetcher-based consumption vs kafka-python's KafkaConsumer, on our server.

Run from the repository root:
    .venv/bin/python -m tests.bench.bench_client [--records 200000] [--size 100] [--partitions 4]
        [--compression none|gzip] [--rounds 2]

Produces ``--records`` records of ``--size`` bytes with our Producer (figure printed too), then reads them all
from offset 0 with each consumer, alternating, ``--rounds`` times; prints records/s and MB/s (best round) and
the ratio ours / kafka-python. Both consumers touch every value (sum of lengths). Asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from kafka import KafkaConsumer
from kafka import TopicPartition as KTP

from client.cluster import Cluster
from client.consumer_protocol import TopicPartition
from client.fetcher import Fetcher
from client.producer import Producer

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from server_process import ServerProcess


def produce(bootstrap: str, topic: str, records: int, size: int, compression: str | None) -> float:
    value = b"x" * size
    start = time.perf_counter()
    with Producer(bootstrap, acks=1, linger_ms=5, batch_size=64 * 1024, compression_type=compression) as p:
        for i in range(records):
            p.send(topic, value, key=b"%d" % (i % 1000))
        p.flush(120)
    return time.perf_counter() - start


def consume_ours(bootstrap: str, topic: str, partitions: int, records: int) -> tuple[float, int]:
    cluster = Cluster(bootstrap, client_id="bench-ours")
    try:
        cluster.refresh_metadata([topic])
        fetcher = Fetcher(cluster, max_poll_records=500)
        fetcher.assign({TopicPartition(topic, p): 0 for p in range(partitions)})
        count = nbytes = 0
        start = time.perf_counter()
        while count < records:
            for recs in fetcher.poll(timeout_ms=1000).values():
                count += len(recs)
                for r in recs:
                    nbytes += len(r.value)
        return time.perf_counter() - start, nbytes
    finally:
        cluster.close()


def consume_kafka_python(bootstrap: str, topic: str, partitions: int, records: int) -> tuple[float, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, client_id="bench-kp",
                             max_poll_records=500)
    try:
        tps = [KTP(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        count = nbytes = 0
        start = time.perf_counter()
        while count < records:
            for msgs in consumer.poll(timeout_ms=1000).values():
                count += len(msgs)
                for m in msgs:
                    nbytes += len(m.value)
        return time.perf_counter() - start, nbytes
    finally:
        consumer.close()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--compression", choices=["none", "gzip"], default="none")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    compression = None if args.compression == "none" else args.compression
    print("command: .venv/bin/python -m tests.bench.bench_client " + " ".join(argv), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        srv = ServerProcess(Path(tmp) / "data", "--num-partitions", str(args.partitions)).start()
        try:
            topic = "bench-client"
            elapsed = produce(srv.bootstrap, topic, args.records, args.size, compression)
            print(f"produce (ours, acks=1, {args.compression}): {args.records / elapsed:,.0f} records/s, "
                  f"{args.records * args.size / elapsed / 1e6:.1f} MB/s", flush=True)
            best: dict[str, float] = {}
            for rnd in range(args.rounds):
                for name, fn in (("ours", consume_ours), ("kafka-python", consume_kafka_python)):
                    secs, nbytes = fn(srv.bootstrap, topic, args.partitions, args.records)
                    assert nbytes >= args.records * args.size, (name, nbytes)
                    rate = args.records / secs
                    best[name] = max(best.get(name, 0.0), rate)
                    print(f"round {rnd + 1} {name:>12}: {rate:,.0f} records/s, {rate * args.size / 1e6:.1f} MB/s "
                          f"({secs:.2f} s)", flush=True)
        finally:
            srv.stop()
    for name, rate in best.items():
        print(f"best {name:>12}: {rate:,.0f} records/s, {rate * args.size / 1e6:.1f} MB/s")
    print(f"ratio ours / kafka-python: {best['ours'] / best['kafka-python']:.2f}x (target >= 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
