"""Transactions benchmark (#38): each figure against a baseline doing the same work in the same run.

Run from the repository root (or `make bench ARGS=txn`):
    .venv/bin/python -m tests.bench.bench_txn [--records 20000] [--ids 1000] [--rounds 200]

One server (fresh data dir). Prints:
1. Transactional produce throughput with confluent-kafka (transactions of 100 records: begin, 100 produce,
   commit), to one partition and spread over ten, against an idempotent producer sending the same records
   (flushed every 100, so both wait for the same acknowledgements); each warmed up first (one record per
   partition, or one such transaction); ratio target >= 0.7. Then the same with ``--producers`` (8) of each
   kind at once (each its own transactional id), where the server's group commit shares its fsyncs.
2. EndTxn latency: ``commit_transaction()`` of a transaction whose one record is already acknowledged (so
   the time is the EndTxn round: the PrepareCommit record made durable), p50/p99, against the durable commit
   floor of the same run: a synchronous OffsetCommit (one offset record made durable), p50/p99; p99 ratio
   target <= 3.
3. read_committed consume throughput against read_uncommitted, both reading the same transactional data
   (the 1-partition topic of 1, with its markers) from the start; ratio target >= 0.9.
4. ``--ids`` concurrent transactional ids over raw requests (our client's connection; as Faust runs one per
   partition): InitProducerId for each, then AddPartitionsToTxn (one partition each, ``--ids`` partitions),
   then one EndTxn(commit) each, pipelined: commits/s; and the server's resident memory growth per open
   transaction (VmRSS after the adds minus before, over ``--ids``).
Asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from server_process import ServerProcess  # noqa: E402

from client.cluster import Cluster  # noqa: E402

TXN_SIZE = 100


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _create(bootstrap: str, topics: dict[str, int]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()]).values():
        f.result(30)


def _concurrently(n: int, run: Any) -> float:
    """``run(i)`` in ``n`` threads at once (each returns its records/s over its own span); the records/s of all
    together: the sum of their records over the longest span."""
    import threading

    spans: list[tuple[float, float, int]] = []

    def one(i: int) -> None:
        t0 = time.perf_counter()
        count = run(i)
        spans.append((t0, time.perf_counter(), count))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    start, end = min(s[0] for s in spans), max(s[1] for s in spans)
    return sum(s[2] for s in spans) / (end - start)


def _idempotent(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    value = b"x" * 100
    for i in range(partitions):  # warm up: producer id, metadata, a connection to the leader
        p.produce(topic, value, partition=i)
    p.flush(60)
    t0 = time.perf_counter()
    for i in range(records):
        p.produce(topic, value, partition=i % partitions)
        if (i + 1) % TXN_SIZE == 0:
            p.flush(60)
    p.flush(60)
    return records / (time.perf_counter() - t0)


def _transactional(bootstrap: str, topic: str, partitions: int, records: int, txn_id: str) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5})
    p.init_transactions(30)
    value = b"x" * 100
    p.begin_transaction()  # warm up, as the idempotent producer does
    for i in range(partitions):
        p.produce(topic, value, partition=i)
    p.commit_transaction(60)
    t0 = time.perf_counter()
    for start in range(0, records, TXN_SIZE):
        p.begin_transaction()
        for i in range(start, min(records, start + TXN_SIZE)):
            p.produce(topic, value, partition=i % partitions)
        p.commit_transaction(60)
    return records / (time.perf_counter() - t0)


def _end_txn_latencies(bootstrap: str, topic: str, rounds: int) -> list[float]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-endtxn", "linger.ms": 0})
    p.init_transactions(30)
    out = []
    for _ in range(rounds):
        p.begin_transaction()
        p.produce(topic, b"y", partition=0)
        p.flush(30)
        t0 = time.perf_counter()
        p.commit_transaction(30)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def _commit_latencies(bootstrap: str, topic: str, rounds: int) -> list[float]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-commit-floor", "enable.auto.commit": False})
    out = []
    for i in range(rounds):
        t0 = time.perf_counter()
        c.commit(offsets=[TopicPartition(topic, 0, i + 1)], asynchronous=False)
        out.append((time.perf_counter() - t0) * 1000)
    c.close()
    return out


def _consume_rate(bootstrap: str, topic: str, isolation: str, expected: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{isolation}", "enable.auto.commit": False,
                  "isolation.level": isolation, "fetch.wait.max.ms": 10})
    c.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    t0 = time.perf_counter()
    deadline = time.monotonic() + 120
    while seen < expected and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error() is None:
                seen += 1
    rate = seen / (time.perf_counter() - t0)
    c.close()
    return rate


def _many_ids(srv: ServerProcess, ids: int) -> tuple[float, float]:
    """(commits/s, resident KiB per open transaction) for ``ids`` transactional ids on one partition each."""
    cluster = Cluster(srv.bootstrap, client_id="bench-txn-ids")
    cluster.refresh_metadata(None)
    conn = cluster.connection(next(iter(cluster.nodes)))
    pids: dict[str, tuple[int, int]] = {}
    futures = [(f"many-{i}", conn.send_async(22, {"transactional_id": f"many-{i}", "transaction_timeout_ms": 60000,
                                                  "producer_id": -1, "producer_epoch": -1}))
               for i in range(ids)]
    for txn_id, fut in futures:
        resp: dict[str, Any] = fut.result(60)
        assert resp["error_code"] == 0, resp
        pids[txn_id] = (resp["producer_id"], resp["producer_epoch"])
    before = _rss_kib(srv.proc.pid) if srv.proc else 0
    adds = [conn.send_async(24, {"v3_and_below_transactional_id": t, "v3_and_below_producer_id": pid,
                                 "v3_and_below_producer_epoch": ep,
                                 "v3_and_below_topics": [{"name": "bench-many", "partitions": [i]}]})
            for i, (t, (pid, ep)) in enumerate(pids.items())]
    for fut in adds:
        resp = fut.result(60)
        codes = {p["partition_error_code"] for t in resp["results_by_topic_v3_and_below"]
                 for p in t["results_by_partition"]}
        assert codes == {0}, resp
    after = _rss_kib(srv.proc.pid) if srv.proc else 0
    t0 = time.perf_counter()
    ends = [conn.send_async(26, {"transactional_id": t, "producer_id": pid, "producer_epoch": ep, "committed": True})
            for t, (pid, ep) in pids.items()]
    for fut in ends:
        resp = fut.result(60)
        assert resp["error_code"] == 0, resp
    rate = ids / (time.perf_counter() - t0)
    cluster.close()
    return rate, (after - before) / ids


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--ids", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--producers", type=int, default=8, help="producers at once for the second throughput pair")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        srv = ServerProcess(Path(tmp) / "data", "--num-partitions", "1").start().wait_loaded()
        try:
            _create(srv.bootstrap, {"bench-i1": 1, "bench-t1": 1, "bench-i10": 10, "bench-t10": 10,
                                    "bench-lat": 1, "bench-many": args.ids})
            print(f"[bench_txn --records {args.records} --ids {args.ids} --rounds {args.rounds}]")
            for parts in (1, 10):
                idem = _idempotent(srv.bootstrap, f"bench-i{parts}", parts, args.records)
                txn = _transactional(srv.bootstrap, f"bench-t{parts}", parts, args.records, f"bench-t{parts}")
                print(f"{parts:2d} partition(s): idempotent {idem:10,.0f} rec/s  transactional ({TXN_SIZE}/txn) "
                      f"{txn:10,.0f} rec/s  ratio {txn / idem:5.2f}  (target >= 0.7; one producer each)")
            n, each = args.producers, args.records // args.producers
            for parts in (1, 10):
                idem = _concurrently(n, lambda i, parts=parts: _idempotent(
                    srv.bootstrap, f"bench-i{parts}", parts, each) * 0 + each)
                txn = _concurrently(n, lambda i, parts=parts: _transactional(
                    srv.bootstrap, f"bench-t{parts}", parts, each, f"bench-c{parts}-{i}") * 0 + each)
                print(f"{parts:2d} partition(s), {n} producers at once: idempotent {idem:10,.0f} rec/s  "
                      f"transactional {txn:10,.0f} rec/s  ratio {txn / idem:5.2f}  (target >= 0.7)")
            commit = _commit_latencies(srv.bootstrap, "bench-lat", args.rounds)
            end = _end_txn_latencies(srv.bootstrap, "bench-lat", args.rounds)
            print(f"durable OffsetCommit (floor): p50 {statistics.median(commit):6.2f} ms  p99 {_pct(commit, .99):6.2f} ms")
            print(f"EndTxn (commit_transaction):  p50 {statistics.median(end):6.2f} ms  p99 {_pct(end, .99):6.2f} ms  "
                  f"p99 ratio {_pct(end, .99) / _pct(commit, .99):5.2f}  (target <= 3)")
            unc = _consume_rate(srv.bootstrap, "bench-t1", "read_uncommitted", args.records + 1)
            com = _consume_rate(srv.bootstrap, "bench-t1", "read_committed", args.records + 1)
            print(f"consume {args.records:,} transactional records: read_uncommitted {unc:10,.0f} rec/s  "
                  f"read_committed {com:10,.0f} rec/s  ratio {com / unc:5.2f}  (target >= 0.9)")
            rate, kib = _many_ids(srv, args.ids)
            print(f"{args.ids:,} transactional ids, one partition each: {rate:10,.0f} commits/s (pipelined EndTxn); "
                  f"server memory {kib * 1024:8,.0f} B per open transaction (VmRSS growth)")
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
