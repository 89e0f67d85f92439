"""Storage benchmark: append+flush throughput and recovery/scan time for 1M small records.

Run from the repository root:  .venv/bin/python -m tests.bench.bench_storage [--records N] [--dir D]
Prints figures; asserts nothing (not part of the test suite).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from coordinator.storage.log import LogConfig, PartitionLog
from protocol.record_batch import build_batch, iter_records

KEY = b"offset-commit:group-0042:orders:17"
VALUE = b"\x00\x03" + bytes(40)  # about the size of an OffsetCommit value record


def small_batch(i: int) -> bytes:
    return build_batch([(KEY, VALUE + i.to_bytes(8, "big"), [], 1_700_000_000_000 + i)])


def bench_append_flush(directory: str, batches: int, per_flush: int) -> float:
    path = os.path.join(directory, f"append-{per_flush}")
    plog = PartitionLog.open(path, LogConfig(segment_bytes=100 << 20))
    template = small_batch(0)
    start = time.perf_counter()
    for i in range(batches):
        plog.append([template])
        if (i + 1) % per_flush == 0:
            plog.flush()
    plog.flush()
    elapsed = time.perf_counter() - start
    plog.close()
    shutil.rmtree(path)
    return batches / elapsed


def write_log(path: str, records: int, cfg: LogConfig) -> int:
    plog = PartitionLog.open(path, cfg)
    template = small_batch(0)
    chunk = [template] * 1000
    for _ in range(records // 1000):
        plog.append(chunk)
    plog.close()
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path) if n.endswith(".log"))


def timed_open(path: str, cfg: LogConfig) -> tuple[str, PartitionLog]:
    start, cpu = time.perf_counter(), time.process_time()
    plog = PartitionLog.open(path, cfg)
    return f"{time.perf_counter() - start:.2f} s (cpu {time.process_time() - cpu:.2f} s)", plog


def full_replay(plog: PartitionLog) -> tuple[str, int]:
    """Read every batch and decode every record, as the coordinator does when it loads a shard."""
    start, cpu = time.perf_counter(), time.process_time()
    count = 0
    offset = plog.log_start_offset
    end = plog.high_watermark
    while offset < end:
        records = list(iter_records(plog.read(offset, 4 << 20)))
        count += len(records)
        offset = records[-1].offset + 1
    return f"{time.perf_counter() - start:.2f} s (cpu {time.process_time() - cpu:.2f} s)", count


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--append-batches", type=int, default=20_000)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args(argv)
    directory = tempfile.mkdtemp(prefix="bench-storage-", dir=args.dir)
    print("command:", " ".join([os.path.basename(sys.executable), "-m", "tests.bench.bench_storage"]
                                + (argv if argv is not None else sys.argv[1:])))
    print(f"dir: {directory}; batch size {len(small_batch(0))} bytes (1 record)")
    try:
        for per_flush in (1, 100, 10_000):
            n = args.append_batches if per_flush > 1 else min(args.append_batches, 2_000)
            rate = bench_append_flush(directory, n, per_flush)
            print(f"append+flush, fsync every {per_flush:>6} batches: {rate:>10,.0f} batches/s ({n} batches)")
        for label, cfg in (("1 segment", LogConfig()), ("100 MiB segments", LogConfig(segment_bytes=100 << 20))):
            path = os.path.join(directory, f"recovery-{label.split()[0]}")
            start = time.perf_counter()
            size = write_log(path, args.records, cfg)
            print(f"[{label}] wrote {args.records:,} records ({size / 1e6:.1f} MB) in "
                  f"{time.perf_counter() - start:.2f} s")
            took, plog = timed_open(path, cfg)
            print(f"[{label}] open after clean close (checkpoint + index files trusted): {took}")
            took, count = full_replay(plog)
            print(f"[{label}] read + decode all records (iter_records): {took} ({count:,} records)")
            plog.close()
            os.unlink(os.path.join(path, "recovery-point"))
            for name in os.listdir(path):
                if name.endswith(".index"):
                    os.unlink(os.path.join(path, name))
            took, plog = timed_open(path, cfg)
            print(f"[{label}] open after crash (no checkpoint, no index: CRC of every batch): {took}, "
                  f"log end {plog.log_end_offset:,}")
            plog.close()
            shutil.rmtree(path)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
