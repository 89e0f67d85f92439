"""Consume benchmark (#35 item 6): the server's CPU per MB a confluent-kafka consumer fetches.

Run from the repository root:
    .venv/bin/python -m tests.bench.bench_consume [--sizes 1024,16384,262144] [--mb 256] [--rounds 5]
        [--partitions 4] [--baseline-ref REF | --baseline-tree DIR]
    .venv/bin/python -m tests.bench.bench_consume --micro

``--micro`` picks ``zero_copy.MIN_RANGE``: this process's CPU per Fetch answer (one partition, v12) of S bytes
sent to a loopback TCP socket drained by a child process, the copying way (pread, encode, write) against the
zero-copy way (dup, encode as parts, write + sendfile, close), best of 3, for S from 4 KiB to 1 MiB.

One ``groupcoord serve`` of this tree (a subprocess on a free 127.0.0.1 port, its own temp data dir); with
``--baseline-ref`` (a commit, extracted with ``git archive`` into a temp dir: this tree's git state is not
touched) or ``--baseline-tree`` (a directory holding an older tree) a second server runs from that tree, and
the two take turns in every round (drifting load on a shared machine hits both alike).

Per record size: a topic of ``--partitions`` partitions is filled with ``--mb`` MB of records of that size
(a confluent Producer, acks=all, 1 MB batches, no compression: bench_topics' settings). Then ``--rounds``
rounds; in each, a fresh confluent Consumer (``assign()`` at OFFSET_BEGINNING: no group join, no commits;
bench_topics' consumer settings: 1 MiB per partition, 50 MB per fetch) reads the whole topic, touching every
value. Figure: the server process's CPU (utime + stime of every thread, from ``/proc/<pid>/stat``) from
just before ``assign()`` to the last record, in milliseconds, over the MB (10^6 bytes of record values) the
consumer received. Every round must read every record with the right size, or the run fails.

Prints per round, then per size the median and best ms/MB of each server (target: <= 0.5 ms/MB for this
tree) and, when the server shows it, how many of the bytes fetched went out by ``sendfile``
(``groupcoord_fetch_sendfile_bytes_total``). Asserts nothing about time (a shared, noisy machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from tests.bench.bench_topics import CONSUMER_CONF, STEP_TIMEOUT_S, BenchFailure, create_topic, produce

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from server_process import ServerProcess  # noqa: E402

TARGET_MS_PER_MB = 0.5
SENDFILE_SERIES = "groupcoord_fetch_sendfile_bytes_total"


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (all its threads) so far, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sendfile_bytes(srv: ServerProcess) -> float | None:
    """The server's count of Fetch bytes sent by sendfile; None when it has no such series (an older tree)."""
    if srv.metrics_port is None:
        return None
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(SENDFILE_SERIES + " "):
                return float(line.split()[-1])
    return None


def consume_all(bootstrap: str, topic: str, records: int, size: int, partitions: int, pid: int
                ) -> tuple[float, float, int]:
    """(server CPU seconds, wall seconds, value bytes received) reading the whole topic once."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-consume-{uuid.uuid4().hex[:8]}",
                         **CONSUMER_CONF})
    try:
        consumer.list_topics(topic, timeout=10)  # connect + metadata outside the measured part
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        count = nbytes = 0
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while count < records:
            if time.monotonic() > deadline:
                raise BenchFailure(f"read {count} of {records} records in {STEP_TIMEOUT_S:.0f} s")
            for msg in consumer.consume(num_messages=10_000, timeout=0.05):  # not a 1 s wait for the last few
                if msg.error():
                    raise BenchFailure(f"consumer error: {msg.error()}")
                value = msg.value()
                count += 1
                nbytes += len(value)
        cpu, wall = cpu_seconds(pid) - cpu0, time.perf_counter() - t0
    finally:
        consumer.close()
    if count != records or nbytes != records * size:
        raise BenchFailure(f"read {count} records / {nbytes} bytes, expected {records} / {records * size}")
    return cpu, wall, nbytes


@dataclass(slots=True)
class Server:
    label: str
    srv: ServerProcess
    ms_per_mb: dict[int, list[float]] = field(default_factory=dict)
    mb_per_s: dict[int, list[float]] = field(default_factory=dict)
    sendfile: dict[int, float | None] = field(default_factory=dict)  # share of fetched bytes sent by sendfile


def micro() -> int:
    """See the module docstring (``--micro``)."""
    import socket

    from coordinator.runtime import zero_copy
    from coordinator.storage.file_range import FileRange
    from protocol import codec

    def body(records: object) -> dict[str, object]:
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{"topic": "t", "partitions": [
            {"partition_index": 0, "error_code": 0, "high_watermark": 5, "last_stable_offset": 5,
             "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
             "records": records}]}]}

    span = 64 << 20
    with tempfile.TemporaryFile() as f, socket.socket() as listener:
        f.write(os.urandom(span))
        f.flush()
        fd = f.fileno()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        drain = subprocess.Popen([sys.executable, "-c", "import socket,sys\ns=socket.create_connection(('127.0.0.1',"
                                  f"{listener.getsockname()[1]}))\nwhile s.recv(1<<20): pass"])
        sock, _ = listener.accept()
        out = sock.fileno()
        print(f"{'answer bytes':>12} {'copy us/answer':>15} {'sendfile us/answer':>19}")
        for size in (4096, 16384, 32768, 65536, 131072, 262144, 1048576):
            n = min(20000, max(200, (256 << 20) // size))
            best: dict[str, float] = {}
            for mode in ("copy", "range") * 3:
                t0 = time.process_time()
                off = 0
                for i in range(n):
                    off = 0 if off + size > span else off
                    if mode == "copy":
                        sock.sendall(codec.encode_response(1, 12, i, body(os.pread(fd, size, off))))
                    else:
                        answer = zero_copy.encode_answer(1, 12, i, body(FileRange(os.dup(fd), off, size)))
                        items = list(answer.parts)  # type: ignore[union-attr]
                        while items:
                            items, _ = zero_copy.send_items(out, items)
                    off += size
                best[mode] = min(best.get(mode, 1e9), (time.process_time() - t0) / n * 1e6)
            print(f"{size:>12,} {best['copy']:>15.1f} {best['range']:>19.1f}", flush=True)
        sock.close()
        drain.wait(30)
    print(f"(zero_copy.MIN_RANGE = {zero_copy.MIN_RANGE:,} bytes)")
    return 0


def main(argv: list[str]) -> int:
    if "--micro" in argv:
        return micro()
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1024,16384,262144")
    ap.add_argument("--mb", type=int, default=256, help="MB of record values per size (10^6 bytes)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--baseline-ref", default=None, help="a commit to compare with (git archive)")
    ap.add_argument("--baseline-tree", default=None, help="a directory holding the tree to compare with")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    print("command: .venv/bin/python -m tests.bench.bench_consume " + " ".join(argv), flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-consume-") as tmp_s:
        tmp = Path(tmp_s)
        trees: list[tuple[str, Path]] = [("this tree", REPO)]
        if args.baseline_ref:
            base = tmp / "baseline-tree"
            base.mkdir()
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.baseline_ref], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
            trees.insert(0, (f"baseline {args.baseline_ref}", base))
        elif args.baseline_tree:
            trees.insert(0, (f"baseline {args.baseline_tree}", Path(args.baseline_tree)))
        servers: list[Server] = []
        try:
            for i, (label, tree) in enumerate(trees):
                srv = ServerProcess(tmp / f"data-{i}", "--num-partitions", str(args.partitions), repo=tree)
                servers.append(Server(label, srv.start()))
                print(f"  {label}: pid {srv.proc.pid if srv.proc else '?'} on {srv.bootstrap}", flush=True)
            for size in sizes:
                records = args.mb * 1_000_000 // size
                topic = f"bench-consume-{size}"
                for s in servers:
                    create_topic(s.srv.bootstrap, topic, args.partitions)
                    secs = produce(s.srv.bootstrap, topic, records, size, args.partitions)
                    print(f"  {s.label}: produced {records:,} x {size:,} B in {secs:.1f} s", flush=True)
                    s.ms_per_mb[size], s.mb_per_s[size] = [], []
                    s.sendfile[size] = sendfile_bytes(s.srv)
                for rnd in range(args.rounds):
                    for s in servers:
                        assert s.srv.proc is not None
                        cpu, wall, nbytes = consume_all(s.srv.bootstrap, topic, records, size, args.partitions,
                                                        s.srv.proc.pid)
                        mb = nbytes / 1e6
                        s.ms_per_mb[size].append(cpu * 1000 / mb)
                        s.mb_per_s[size].append(mb / wall)
                        print(f"  {size:>7,} B round {rnd + 1} {s.label:>24}: {mb:.1f} MB, server CPU {cpu:.2f} s "
                              f"= {cpu * 1000 / mb:.3f} ms/MB, {mb / wall:.1f} MB/s", flush=True)
                for s in servers:
                    before, after = s.sendfile[size], sendfile_bytes(s.srv)
                    fetched = args.rounds * records * size
                    s.sendfile[size] = None if before is None or after is None else (after - before) / fetched
        finally:
            for s in servers:
                s.srv.stop()
    print(f"\n{'records':>9} {'server':>26} {'ms/MB median':>13} {'ms/MB best':>11} {'MB/s median':>12} "
          f"{'sendfile':>9} {'target':>7}")
    for size in sizes:
        for s in servers:
            med, best = statistics.median(s.ms_per_mb[size]), min(s.ms_per_mb[size])
            share = s.sendfile[size]
            shown = "n/a" if share is None else f"{share:.0%}"
            verdict = ("met" if med <= TARGET_MS_PER_MB else "MISSED") if s.label == "this tree" else ""
            print(f"{size:>9,} {s.label:>26} {med:>13.3f} {best:>11.3f} {statistics.median(s.mb_per_s[size]):>12.1f} "
                  f"{shown:>9} {verdict:>7}")
    print(f"(server CPU = utime+stime from /proc/<pid>/stat over the record-value MB (10^6 B) the consumer "
          f"received, {args.rounds} rounds per size, {args.mb} MB per round, {args.partitions} partitions; "
          f"sendfile: bytes counted by {SENDFILE_SERIES} over the value bytes fetched (wire bytes hold "
          f"batch and record headers too: a little over 100% when every answer went by sendfile); target <= "
          f"{TARGET_MS_PER_MB} ms/MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
