"""Observability benchmark (#37): what lag tracking and rebalance history cost, each against the same server with
it off, in the same run.

Run from the repository root (or `make bench ARGS=observe`):
    .venv/bin/python -m tests.bench.bench_observe [--groups 10000] [--partitions 10] [--window 20]

1. Lag tracking: a server holding ``--groups`` groups x ``--partitions`` committed offsets of one hosted topic
   (one OffsetCommit per group, pipelined) sits idle for ``--window`` seconds; its CPU (utime + stime from
   /proc) is measured with lag tracking at its default interval, then the same data dir is served again with
   ``metrics.lag.interval.ms`` at a day (no computation in the window). Printed: % of one core each, and the
   difference (target <= 5% of one core).
2. History: simple commits (one partition, generation -1) and a heartbeat loop of one member, on a server with
   ``group.history.size`` 50 against one with 0 (and ``offsets.history.size`` likewise when the server has that
   key): requests/s each, both servers up, measured in ``--rounds`` alternating rounds, and the ratio of the
   medians (target >= 0.95x).
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
from coordinator.config import BY_NAME  # noqa: E402

TOPIC = "obs"


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime, stime in clock ticks (100/s)


def _conn(srv: ServerProcess) -> tuple[Cluster, Any]:
    cluster = Cluster(srv.bootstrap, client_id="bench-observe")
    cluster.refresh_metadata(None)
    return cluster, cluster.connection(next(iter(cluster.nodes)))


def _fill(srv: ServerProcess, groups: int, partitions: int) -> None:
    cluster, c = _conn(srv)
    _, made = c.send(19, {"topics": [{"name": TOPIC, "num_partitions": partitions, "replication_factor": 1,
                                      "assignments": [], "configs": []}], "timeout_ms": 10000, "validate_only": False})
    assert made["topics"][0]["error_code"] in (0, 36), made
    pending = []
    for g in range(groups):
        pending.append(c.send_async(8, {"group_id": f"obs-{g}", "generation_id_or_member_epoch": -1, "member_id": "",
                                        "group_instance_id": None, "retention_time_ms": -1, "topics": [
                                            {"name": TOPIC, "partitions": [
                                                {"partition_index": p, "committed_offset": 0,
                                                 "committed_leader_epoch": -1, "committed_metadata": ""}
                                                for p in range(partitions)]}]}))
        if len(pending) >= 500:
            for f in pending:
                f.result(60)
            pending.clear()
    for f in pending:
        f.result(60)
    cluster.close()


def _idle_cpu(srv: ServerProcess, window_s: float) -> float:
    assert srv.proc is not None
    time.sleep(2)  # past the start
    before = _cpu_s(srv.proc.pid)
    time.sleep(window_s)
    return (_cpu_s(srv.proc.pid) - before) / window_s * 100


def _rates(srv: ServerProcess, seconds: float = 3.0) -> tuple[float, float]:
    """(simple commits/s, heartbeats/s of one member), each for ``seconds``, pipelined 50 deep."""
    cluster, c = _conn(srv)
    try:
        def run(make: Any) -> float:
            n, t0, inflight = 0, time.perf_counter(), []
            while time.perf_counter() - t0 < seconds:
                inflight.append(make(n))
                if len(inflight) >= 50:
                    for f in inflight:
                        f.result(30)
                    n += len(inflight)
                    inflight.clear()
            for f in inflight:
                f.result(30)
            return (n + len(inflight)) / (time.perf_counter() - t0)

        commits = run(lambda i: c.send_async(8, {
            "group_id": "obs-rate", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "retention_time_ms": -1, "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": 0, "committed_offset": i, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]}))
        _, joined = c.send(11, {"group_id": "obs-hb", "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
                                "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                                "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00"}],
                                "reason": None}, version=4)
        if joined["error_code"] == 79:  # MEMBER_ID_REQUIRED: join again with the id
            _, joined = c.send(11, {"group_id": "obs-hb", "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
                                    "member_id": joined["member_id"], "group_instance_id": None,
                                    "protocol_type": "consumer", "protocols": [
                                        {"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00"}],
                                    "reason": None}, version=4)
        member, generation = joined["member_id"], joined["generation_id"]
        c.send(14, {"group_id": "obs-hb", "generation_id": generation, "member_id": member, "group_instance_id": None,
                    "protocol_type": "consumer", "protocol_name": "range",
                    "assignments": [{"member_id": member, "assignment": b""}]}, version=3)
        beats = run(lambda i: c.send_async(12, {"group_id": "obs-hb", "generation_id": generation,
                                                "member_id": member, "group_instance_id": None}))
        return commits, beats
    finally:
        cluster.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--window", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"[bench_observe --groups {args.groups} --partitions {args.partitions} --window {args.window:g}]")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        srv = ServerProcess(data, "--metrics-lag-interval-ms", "5000").start().wait_loaded()
        try:
            _fill(srv, args.groups, args.partitions)
            on = _idle_cpu(srv, args.window)
        finally:
            srv.stop()
        srv = ServerProcess(data, "--metrics-lag-interval-ms", str(86_400_000)).start().wait_loaded()
        try:
            off = _idle_cpu(srv, args.window)
        finally:
            srv.stop()
        print(f"lag tracking, {args.groups * args.partitions:,} committed offsets, idle {args.window:g} s: "
              f"on {on:5.2f}% of a core, off {off:5.2f}%: costs {on - off:5.2f}% (target <= 5)")

        history_flags = [("--group-history-size", "50", "0")]
        if "offsets.history.size" in BY_NAME:
            history_flags.append(("--offsets-history-size", "16", "0"))
        servers = {}
        try:
            for side in ("on", "off"):
                flags = [x for flag, on_v, off_v in history_flags for x in (flag, on_v if side == "on" else off_v)]
                srv = servers[side] = ServerProcess(Path(tmp) / f"hist-{side}", *flags, "--num-partitions",
                                                    "1").start().wait_loaded()
                cluster, c = _conn(srv)
                c.send(19, {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 1,
                                        "assignments": [], "configs": []}], "timeout_ms": 10000,
                            "validate_only": False})
                cluster.close()
            rounds: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
            for r in range(args.rounds):  # alternating, so a drift of the machine's load favours neither
                for side in (("on", "off") if r % 2 == 0 else ("off", "on")):
                    rounds[side].append(_rates(servers[side]))
        finally:
            for srv in servers.values():
                srv.stop()
        med = {side: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
               for side, v in rounds.items()}
        (c_on, h_on), (c_off, h_off) = med["on"], med["off"]
        names = " and ".join(f[0][2:] for f in history_flags)
        print(f"commits/s with {names} on {c_on:10,.0f}, off {c_off:10,.0f}: ratio {c_on / c_off:5.2f} "
              f"(median of {args.rounds} alternating rounds; target >= 0.95)")
        print(f"heartbeats/s with {names} on {h_on:10,.0f}, off {h_off:10,.0f}: ratio {h_on / h_off:5.2f} "
              "(target >= 0.95)")

if __name__ == "__main__":
    main()
