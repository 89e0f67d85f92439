"""Flood benchmark (issue #25): heartbeats/s of 1,000 group members while 20 connections pipeline all-topics
Metadata (100 topics, a ~5 KB answer to a 27-byte request) and never read an answer, as a ratio to the same
server and load without the flood (the mean of a run before and a run after). Goal: >= 0.8x.

    python -m tests.bench.bench_flood [--connections 1000] [--flooders 20] [--measure 5]

The load generator is bench_coordinator_load's ``groups`` scenario (a separate process); the flooders are
threads of this process. It prints figures; it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import threading
import time

from protocol import codec
from tests.bench.bench_coordinator import groupcoord, run_load


class Flooder:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.settimeout(0.2)
        self.burst = codec.encode_request(3, 4, 1, "flood", {"topics": None}) * 256
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.sock.sendall(self.burst)
                self.sent += 256
            except TimeoutError:
                continue
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def create_topics(port: int, n: int) -> None:
    body = {"topics": [{"name": f"topic-with-a-long-name-{i:03d}", "num_partitions": 1, "replication_factor": 1,
                        "assignments": [], "configs": []} for i in range(n)], "timeout_ms": 10000,
            "validate_only": False}
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(codec.encode_request(19, 4, 1, "bench", body))
        s.recv(1 << 20)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--connections", type=int, default=1000)
    p.add_argument("--flooders", type=int, default=20)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--measure", type=float, default=5.0)
    a = p.parse_args(argv)
    load = ["--connections", str(a.connections), "--inflight", "8", "--warmup", str(a.warmup),
            "--measure", str(a.measure), "--small", "10", "--reps-small", "1", "--reps-large", "1"]
    with tempfile.TemporaryDirectory(prefix="bench-flood-") as work:
        server = groupcoord(work, "--group-initial-rebalance-delay-ms", "0").start()
        try:
            create_topics(server.port, 100)
            plain = [run_load("groups", server.port, server.pid, *load)["heartbeat"]["requests_per_s"]]
            flooders = [Flooder(server.port) for _ in range(a.flooders)]
            try:
                time.sleep(1)
                flooded = run_load("groups", server.port, server.pid, *load)["heartbeat"]["requests_per_s"]
                sent = sum(f.sent for f in flooders)
            finally:
                for f in flooders:
                    f.close()
            plain.append(run_load("groups", server.port, server.pid, *load)["heartbeat"]["requests_per_s"])
        finally:
            server.stop()
    base = sum(plain) / len(plain)
    print(f"heartbeats/s, {a.connections} members, without flood: {plain[0]:,.0f} and {plain[1]:,.0f} "
          f"(mean {base:,.0f})")
    print(f"heartbeats/s with {a.flooders} non-reading Metadata flooders: {flooded:,.0f}  "
          f"ratio {flooded / base:.2f} (goal >= 0.8); the flooders got {sent:,} requests into their sockets")
    print("command: python -m tests.bench.bench_flood " + " ".join(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
