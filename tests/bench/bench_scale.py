"""Scale benchmark (issue #35): memory per committed offset, first commits of new groups, loading 10M offsets.

Run from the repository root (or `make bench ARGS=scale`):
    .venv/bin/python -m tests.bench.bench_scale [--groups 100000] [--load-groups 1000000] [--skip-load]

Figures, each against the real `groupcoord serve` daemon (a subprocess; RSS from /proc/<pid>/status):
1. Serving: a fresh server's RSS once listening and warmed up (100 groups committed) is the baseline. Then
   ``--groups`` simple groups (generation -1, no members) each commit 10 partitions (2 topics x 5) in one
   OffsetCommit v8, pipelined over ``--connections`` connections (``--window`` requests in flight each):
   the FIRST commit of every group (new groups), then the same groups again (existing groups, new offsets).
   Prints offsets/s of each and their ratio (target >= 0.8), and (RSS now - baseline) / offsets held:
   bytes per committed offset while serving (target <= 128).
2. After a restart: SIGTERM, start again on the same data dir; (RSS once loaded - the fresh baseline) /
   offsets: bytes per committed offset after a restart's load (target <= 128). One group's offsets are
   fetched back to check the load.
3. 10M offsets: ``--load-groups`` groups x 10 written to a data dir as the server itself writes them
   (bench_coordinator_offsets.write_offsets_data_dir), then a server started on it: seconds from spawn to
   its "loaded 50 offsets partitions" line (target <= 20 s) and bytes per offset once loaded.
Every response is checked (each must equal the first's bytes after the correlation id: all partitions
NONE). Prints a table of figure, target and PASS/MISS; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
from typing import Any

from protocol import codec
from tests.bench.bench_coordinator import LOADED, groupcoord
from tests.bench.bench_coordinator_offsets import expected_offset, group_name, write_offsets_data_dir

TOPICS = ("orders", "payments")
PER_TOPIC = 5
PER_GROUP = len(TOPICS) * PER_TOPIC
_SIZE = struct.Struct(">i")


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def commit_frame(group: str, base: int, correlation: int) -> bytes:
    return codec.encode_request(8, 8, correlation, "bench-scale", {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": t, "partitions": [{"partition_index": p, "committed_offset": base + 10 * i + p,
                                               "committed_leader_epoch": -1, "committed_metadata": ""}
                                              for p in range(PER_TOPIC)]} for i, t in enumerate(TOPICS)]})


def frames_for(prefix: str, first: int, count: int, base: int) -> list[bytes]:
    return [commit_frame(f"{prefix}-{g:07d}", base + g, g & 0x7FFFFFFF) for g in range(first, first + count)]


def _drive(sock: socket.socket, frames: list[bytes], window: int, tails: set[bytes]) -> None:
    """Send ``frames`` keeping ``window`` in flight; each response's bytes after the correlation id go into
    ``tails`` (one value when every answer is the same all-NONE answer)."""
    sent = done = 0
    buf = bytearray()
    n = len(frames)
    while done < n:
        if sent < n and sent - done < window:
            upto = min(n, done + window)
            sock.sendall(b"".join(frames[sent:upto]))
            sent = upto
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise RuntimeError("server closed the connection")
        buf += chunk
        pos = 0
        while len(buf) - pos >= 4:
            size = _SIZE.unpack_from(buf, pos)[0]
            if len(buf) - pos - 4 < size:
                break
            tails.add(bytes(buf[pos + 8:pos + 4 + size]))
            pos += 4 + size
            done += 1
        del buf[:pos]


def pipelined(port: int, frames: list[bytes], connections: int, window: int) -> float:
    """Seconds to send every frame and receive every answer, over ``connections`` sockets in threads."""
    socks = [socket.create_connection(("127.0.0.1", port), timeout=120) for _ in range(connections)]
    tails: list[set[bytes]] = [set() for _ in socks]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            _drive(socks[i], frames[i::connections], window, tails[i])
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(connections)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    for s in socks:
        s.close()
    if errors:
        raise errors[0]
    seen = set().union(*tails)
    if len(seen) != 1:
        raise RuntimeError(f"answers differ (some partitions failed): {len(seen)} distinct answers")
    _, body = codec.decode_response(8, 8, b"\0\0\0\0" + seen.pop())
    codes = {p["error_code"] for t in body["topics"] for p in t["partitions"]}
    if codes != {0}:
        raise RuntimeError(f"commits failed with error codes {codes}")
    return elapsed


def fetch_group(port: int, group: str) -> dict[tuple[str, int], int]:
    frame = codec.encode_request(9, 5, 1, "bench-scale", {"group_id": group, "topics": None})
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(frame)
        head = _recv(s, 4)
        _, body = codec.decode_response(9, 5, _recv(s, _SIZE.unpack(head)[0]))
    return {(t["name"], p["partition_index"]): p["committed_offset"] for t in body["topics"] for p in t["partitions"]}


def _recv(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise RuntimeError("connection closed")
        out += chunk
    return out


def serving(a: argparse.Namespace, work: str) -> dict[str, Any]:
    data = os.path.join(work, "serving")
    print(f"\n[1/3] serving: {a.groups:,} groups x {PER_GROUP} partitions", flush=True)
    t0 = time.perf_counter()
    new = frames_for("scale", 0, a.groups, 1000)
    again = frames_for("scale", 0, a.groups, 5000)
    warm = frames_for("warm", 0, 100, 0)
    print(f"  encoded {2 * a.groups + 100:,} requests in {time.perf_counter() - t0:.1f} s", flush=True)
    server = groupcoord(data, *a.serve).start()
    try:
        server.wait_for("offsets partitions (", 120)
        pipelined(server.port, warm, 1, a.window)
        time.sleep(0.5)
        base = rss(server.pid)
        t_new = pipelined(server.port, new, a.connections, a.window)
        t_again = pipelined(server.port, again, a.connections, a.window)
        time.sleep(0.5)
        held = a.groups * PER_GROUP
        serving_rss = rss(server.pid)
    finally:
        server.stop()
    print(f"  first commits: {held / t_new:,.0f} offsets/s; existing groups: {held / t_again:,.0f} offsets/s;"
          f" RSS {base / 2**20:.0f} -> {serving_rss / 2**20:.0f} MiB", flush=True)
    restarted = groupcoord(data, *a.serve).start()
    try:
        line = restarted.wait_for("offsets partitions (", 300)
        time.sleep(0.5)
        loaded_rss = rss(restarted.pid)
        g = a.groups // 2
        got = fetch_group(restarted.port, f"scale-{g:07d}")
        want = {(t, p): 5000 + g + 10 * i + p for i, t in enumerate(TOPICS) for p in range(PER_TOPIC)}
        if got != want:
            raise RuntimeError(f"after the restart scale-{g:07d} has {got}, expected {want}")
    finally:
        restarted.stop()
    m = LOADED.search(line)
    print(f"  restart: {line.strip()}; RSS {loaded_rss / 2**20:.0f} MiB", flush=True)
    shutil.rmtree(data, ignore_errors=True)
    return {"held": held, "new_per_s": held / t_new, "existing_per_s": held / t_again,
            "serving_b": (serving_rss - base) / held, "base_rss": base,
            "restart_b": (loaded_rss - base) / held, "restart_load_s": float(m.group(3)) if m else None}


def load(a: argparse.Namespace, work: str, base_rss: int) -> dict[str, Any]:
    records = a.load_groups * PER_GROUP
    print(f"\n[3/3] load: {a.load_groups:,} groups x {PER_GROUP} = {records:,} offsets", flush=True)
    data = os.path.join(work, "load")
    written = write_offsets_data_dir(data, records, per_group=PER_GROUP, topics=TOPICS)
    print(f"  wrote {written.records:,} records ({written.bytes / 1e6:.0f} MB of batches) in {written.seconds:.1f} s",
          flush=True)
    server = groupcoord(data).start(timeout=600)
    try:
        line = server.wait_for("offsets partitions (", 600)
        to_loaded = server.seen("offsets partitions (") - server.started_at
        time.sleep(0.5)
        loaded_rss = rss(server.pid)
        g = written.groups // 2
        got = fetch_group(server.port, group_name(g))
        want = {(t, p): expected_offset(g, i, p) for i, t in enumerate(TOPICS) for p in range(PER_TOPIC)}
        if got != want:
            raise RuntimeError(f"loaded offsets of {group_name(g)} are {got}, expected {want}")
    finally:
        server.stop()
    shutil.rmtree(data, ignore_errors=True)
    m = LOADED.search(line)
    print(f"  {line.strip()}; spawn to loaded {to_loaded:.1f} s; RSS {loaded_rss / 2**20:.0f} MiB", flush=True)
    return {"records": written.records, "spawn_to_loaded_s": to_loaded,
            "server_load_s": float(m.group(3)) if m else None, "load_b": (loaded_rss - base_rss) / written.records}


def report(s: dict[str, Any], l_: dict[str, Any] | None, command: str) -> None:
    rows = [
        ("bytes per committed offset, serving", f"{s['serving_b']:.0f} B", "<= 128 B", s["serving_b"] <= 128),
        ("bytes per committed offset, after a restart's load", f"{s['restart_b']:.0f} B", "<= 128 B",
         s["restart_b"] <= 128),
        ("first commit of new groups / existing groups", f"{s['new_per_s'] / s['existing_per_s']:.2f}x",
         ">= 0.8x", s["new_per_s"] / s["existing_per_s"] >= 0.8),
    ]
    if l_ is not None:
        rows.append((f"load {l_['records'] / 1e6:.0f}M offsets: spawn to loaded", f"{l_['spawn_to_loaded_s']:.1f} s",
                     "<= 20 s", l_["spawn_to_loaded_s"] <= 20))
        rows.append((f"bytes per committed offset, {l_['records'] / 1e6:.0f}M loaded", f"{l_['load_b']:.0f} B",
                     "<= 128 B", l_["load_b"] <= 128))
    print("\n| figure | value | target | |\n|---|---:|---|---|")
    for name, value, target, ok in rows:
        print(f"| {name} | {value} | {target} | {'PASS' if ok else 'MISS'} |")
    print(f"\nnew groups {s['new_per_s']:,.0f} offsets/s, existing {s['existing_per_s']:,.0f} offsets/s "
          f"({s['held']:,} offsets each); command: {command}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=100_000)
    ap.add_argument("--load-groups", type=int, default=1_000_000)
    ap.add_argument("--skip-load", action="store_true", help="no 10M-offsets load phase")
    ap.add_argument("--connections", type=int, default=2)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--serve", action="append", default=[], metavar="ARG",
                    help="an argument for the serving phase's `groupcoord serve` (repeat it: --serve=--offsets-history-size "
                         "--serve=16), e.g. to see what a setting costs per committed offset")
    a = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="bench-scale-")
    try:
        s = serving(a, work)
        l_ = None if a.skip_load else load(a, work, s["base_rss"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(s, l_, "python -m tests.bench.bench_scale " + " ".join(argv if argv is not None else sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
