"""Compaction of a user topic: MB/s of log cleaned and the cleaner's peak Python memory (tracemalloc, in a
second pass over a copy of the same log: tracing slows the timed pass otherwise).

Data: ``keys`` keys (1M at --scale 1) updated ten times with 100-byte values, in batches of 100 records,
1 GiB segments scaled down with the data. One ``cleaner.clean`` pass with a 128 MiB key map
(``log.cleaner.dedupe.buffer.size``' default). Prints figures; asserts nothing about time.
Run: ``python -m tests.bench.bench_compaction --scale 0.05`` (``make bench ARGS=compaction`` uses the default
scale below). Not measured here yet: the coordinator's heartbeats/s and commits/s while the cleaner runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import tracemalloc

from coordinator.storage import cleaner
from coordinator.storage.log import LogConfig, PartitionLog
from protocol.record_batch import build_batch

NOW = 10**12


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=0.05, help="1.0 = 1M keys x 10 updates (about 1.2 GiB)")
    ap.add_argument("--buffer-mb", type=int, default=128)
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


if __name__ == "__main__":
    main()
