"""Compaction of a user topic: MB/s of log cleaned and the cleaner's peak Python memory (tracemalloc, in a
second pass over a copy of the same log: tracing slows the timed pass otherwise).

Data: ``keys`` keys (1M at --scale 1) updated ten times with 100-byte values, in batches of 100 records,
1 GiB segments scaled down with the data. One ``cleaner.clean`` pass with a 128 MiB key map
(``log.cleaner.dedupe.buffer.size``' default). Prints figures; asserts nothing about time.
Run: ``python -m tests.bench.bench_compaction --scale 0.05`` (``make bench ARGS=compaction`` uses the default
scale below).

Then, on a real server (unless ``--no-load``): durable OffsetCommits/s (bench_coordinator_load's ``commits``
scenario, max throughput) on a quiet server, then again right after a topic holding ``--load-mb`` MiB of keyed
updates (four per key) is switched to cleanup.policy=compact, while its cleaner (a worker thread of the server)
compacts them; printed as a ratio (target >= 0.9), with the cleaner's log lines so the overlap can be checked.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import tempfile
import time
import tracemalloc

from client.producer import Producer
from coordinator.storage import cleaner
from coordinator.storage.log import LogConfig, PartitionLog
from protocol import codec
from protocol.record_batch import build_batch
from tests.bench.bench_coordinator import Daemon, groupcoord, run_load
from tests.integration.server_process import read_frame

NOW = 10**12


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=0.05, help="1.0 = 1M keys x 10 updates (about 1.2 GiB)")
    ap.add_argument("--buffer-mb", type=int, default=128)
    ap.add_argument("--no-load", action="store_true", help="skip the commits-while-cleaning part")
    ap.add_argument("--load-mb", type=int, default=400)
    args = ap.parse_args()
    keys = max(1000, int(1_000_000 * args.scale))
    directory = tempfile.mkdtemp(prefix="bench-compaction-")
    try:
        cfg = LogConfig(segment_bytes=max(1 << 20, int((1 << 30) * args.scale)), compact=True, delete=False,
                        retention_ms=None, verify_crc_on_append=False)
        plog = PartitionLog.open(os.path.join(directory, "t-0"), cfg)
        value = b"v" * 100
        t0 = time.perf_counter()
        for update in range(10):
            for start in range(0, keys, 100):
                plog.append([build_batch([(b"key-%09d" % k, value, [], NOW - 1000 + update)
                                          for k in range(start, min(keys, start + 100))])])
        plog.append([build_batch([(b"last", value, [], NOW)])])
        plog._roll()
        plog.flush()
        size = plog.size_bytes()
        print(f"wrote {keys * 10:,} records, {size / 2**20:.1f} MiB in {time.perf_counter() - t0:.1f} s")
        plog.close()
        copy = os.path.join(directory, "t-1")  # the same log twice: one pass timed, one under tracemalloc
        shutil.copytree(os.path.join(directory, "t-0"), copy)
        plog = PartitionLog.open(os.path.join(directory, "t-0"), cfg)
        t0 = time.perf_counter()
        res = cleaner.clean(plog, NOW, args.buffer_mb << 20)
        took = time.perf_counter() - t0
        traced = PartitionLog.open(copy, cfg)
        tracemalloc.start()
        cleaner.clean(traced, NOW, args.buffer_mb << 20)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        traced.close()
        print(f"cleaned {res.bytes_before / 2**20:.1f} MiB -> {res.bytes_after / 2**20:.1f} MiB, "
              f"{res.records_removed:,} records removed, {res.map_entries:,} keys mapped")
        print(f"compaction: {size / 2**20 / took:.1f} MB/s of log ({took:.1f} s, one core)")
        print(f"cleaner peak Python memory: {peak / 2**20:.1f} MiB (buffer {args.buffer_mb} MiB; "
              f"{res.map_entries * cleaner.ENTRY_BYTES / 2**20:.1f} MiB accounted for the key map)")
        plog.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if not args.no_load:
        commits_while_cleaning(args.load_mb)


def call(port: int, api: int, version: int, body: dict) -> dict:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(codec.encode_request(api, version, 1, "bench", body))
        return codec.decode_response(api, version, read_frame(sock))[1]


def create_topic(port: int, topic: str) -> None:
    """A topic that keeps every update (cleanup.policy=delete) until ``start_compacting``."""
    configs = {"cleanup.policy": "delete", "segment.bytes": str(8 << 20), "retention.ms": "-1"}
    answer = call(port, 19, 4, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                                            "assignments": [],
                                            "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                                "timeout_ms": 10000, "validate_only": False})
    assert answer["topics"][0]["error_code"] == 0, answer


def start_compacting(port: int, topic: str) -> None:
    """IncrementalAlterConfigs: switch the topic to compact (applied live: its whole log becomes dirty)."""
    sets = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}
    answer = call(port, 44, 0, {"resources": [{"resource_type": 2, "resource_name": topic, "configs": [
        {"name": k, "config_operation": 0, "value": v} for k, v in sets.items()]}], "validate_only": False})
    assert answer["responses"][0]["error_code"] == 0, answer


def commits_per_s(server: Daemon) -> float:
    out = run_load("commits", server.port, server.pid, "--connections", "100", "--warmup", "1", "--measure", "4",
                   "--rate-low", "0", "--rate", "1000")
    return out["throughput"]["requests_per_s"]


def commits_while_cleaning(load_mb: int) -> None:
    work = tempfile.mkdtemp(prefix="bench-compaction-load-")
    server = groupcoord(work, "--log-cleaner-backoff-ms", "100").start()
    try:
        quiet = commits_per_s(server)
        create_topic(server.port, "changelog")
        value = b"u" * 1000
        keys = max(1000, load_mb * 1024 // 4)  # four updates of each key, 1 KB each
        t0 = time.perf_counter()
        with Producer(f"127.0.0.1:{server.port}", acks=1, linger_ms=5, batch_size=256 * 1024) as p:
            for _update in range(4):
                for k in range(keys):
                    p.send("changelog", value, key=b"key-%08d" % k)
            p.flush(300)
        wrote = time.perf_counter() - t0
        start_compacting(server.port, "changelog")
        start = time.strftime("%H:%M:%S")
        during = commits_per_s(server)
        end = time.strftime("%H:%M:%S")
    finally:
        server.stop()
        log = "".join(line for _, line in server.lines)
        shutil.rmtree(work, ignore_errors=True)
    cleaned = [line for line in log.splitlines() if "cleaned changelog" in line]
    print(f"\ncommits/s on a quiet server: {quiet:,.0f}; right after {load_mb} MiB of updates to a compacted "
          f"topic (written in {wrote:.1f} s), while it is cleaned: {during:,.0f}  ratio {during / quiet:.2f} "
          f"(target >= 0.9)")
    print(f"commits measured from {start} to {end}; the cleaner's passes (server log):")
    for line in cleaned[-12:]:
        print("  " + line[:160])


if __name__ == "__main__":
    main()
