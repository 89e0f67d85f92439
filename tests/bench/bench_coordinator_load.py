"""The load-generator process of bench_coordinator (always a separate process from the server under test).

Run as ``python -m tests.bench.bench_coordinator_load SCENARIO --port P [options]``; prints progress on
stderr and one line ``RESULT <json>`` on stdout. Scenarios:
- ``echo``: N connections send Heartbeat-v4-shaped frames (the same sizes as in ``groups``) to the echo
  server, ``inflight`` pipelined per connection, for warm-up + measure seconds (closed loop).
- ``groups``: against groupcoord: form a group of ``--small`` members and time its rebalances, leave it;
  form a group of ``--connections`` members (one connection each) and time its rebalances; then every
  member pipelines Heartbeats (closed loop) exactly as in ``echo``. With ``--echo-port``, ``--rounds``
  heartbeat rounds alternate with rounds against that echo server (echo first and last), and each of our
  rounds is compared with the mean of the echo rounds around it.
- ``commits``: against groupcoord: simple OffsetCommit v8 (generation -1, empty member id, one partition,
  a group per connection, the offset increasing per request); closed-loop max throughput, then open-loop
  latency at a fixed offered rate. With ``--floor-port`` (the durable echo floor, bench_coordinator_echo
  ``--durable``), ``--rounds`` latency runs of ours alternate with as many against the floor (O F O F ..),
  each server over its own ``--connections`` connections with the same requests; the latency figures are
  percentiles of each server's runs pooled, and every run's own p50/p99 is reported too. With
  ``--disk-probe DIR``, the disk alone is timed just before and just after the latency runs (both servers
  idle): ``DISK_PROBE_S`` seconds each of a 1-KiB append + fdatasync every ms to a file in DIR, the cost the
  servers' fsync child pays per round; its pooled p50/p99 tell a slow disk from a slow server. The share of
  the machine the host stole (``/proc/stat`` steal) is summed over ours' runs and over the floor's. With
  ``--neighbour DUTY`` (a diagnostic), a busy neighbour spins DUTY of every core during the latency runs
  (``busy_neighbour``; the disk probes run without it).
- ``tail``: against groupcoord: the closed-loop commits of ``commits``, in ``2 * --rounds + 1`` rounds that
  alternate without and with a consumer tailing ``__consumer_offsets`` at full speed (bench_offsets_tail, a
  subprocess started before the round's warm-up and stopped after it; from the log end, or with
  ``--tail-from-beginning`` from offset 0): Q T Q T Q. Each tailed round is
  divided by the mean of the quiet rounds around it; the figure is the median of those ratios (#27's "a read
  of it never slows the commit path", goal >= 0.9). The server's CPU per commit is compared the same way (a
  diagnostic that the CPU the host gives the server does not move: what serving the reader costs it).
Without a scenario it only says that it is a helper (``make bench`` runs every bench_*.py module).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict
from typing import Any

import trio

from protocol import codec
from tests.bench.bench_coordinator_blast import (
    children_cpu,
    closed_loop,
    connect_all,
    machine_ticks,
    open_loop,
    percentiles,
    process_cpu,
)
from tests.bench.bench_coordinator_members import (
    Member,
    form_group,
    leave_all,
    make_members,
    time_rebalance,
)
from tests.bench.busy_neighbour import start_neighbours, stop_neighbours

HEARTBEAT_ERR_FROM_END = 3  # Heartbeat v4 response: ... error_code int16, empty tagged fields (1 byte)
COMMIT_ERR_FROM_END = 5  # OffsetCommit v8, one topic/partition: error_code, 3 empty tagged-field sections
COMMIT_VERSION = 8
DISK_PROBE_S = 2.0
_OFFSET_MARK = 0x0123456789ABCDEF


def say(msg: str) -> None:
    print(f"  [load] {msg}", file=sys.stderr, flush=True)


def probes(args: argparse.Namespace) -> dict[str, Any]:
    out = {"loadgen": process_cpu()}
    if args.server_pid:
        out["server"] = process_cpu(args.server_pid)
    return out


def fmt_cpu(cpu: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.0%} of a core" for k, v in cpu.items())


# ---------------------------------------------------------------- heartbeats
def repeater(frame: bytes) -> Any:
    return lambda n: frame * n


def heartbeat_blast(members: list[Member], args: argparse.Namespace) -> dict[str, Any]:
    makers = [repeater(m.heartbeat_frame()) for m in members]
    r = closed_loop([m.sock for m in members], makers, inflight=args.inflight, warmup_s=args.warmup,
                    measure_s=args.measure, err_from_end=HEARTBEAT_ERR_FROM_END, probes=probes(args))
    say(f"heartbeats: {r.requests_per_s:,.0f}/s, per second {r.per_second}, errors {r.errors}, "
        f"cpu {fmt_cpu(r.cpu)}")
    return asdict(r)


def echo_members(port: int, count: int) -> list[Member]:
    """``count`` connections to the echo server as members with real shapes: "<client_id>-<uuid>" ids,
    generation 2 (the echo server answers whatever it gets)."""
    members = make_members(connect_all(port, count), f"g{count}")
    for i, m in enumerate(members):
        m.member_id, m.generation = f"{m.client_id}-00000000-0000-4000-8000-{i:012d}", 2
    return members


def scenario_echo(args: argparse.Namespace) -> dict[str, Any]:
    return {"heartbeat": heartbeat_blast(echo_members(args.port, args.connections), args)}


def interleaved_heartbeats(ours: list[Member], args: argparse.Namespace) -> dict[str, Any]:
    """Echo and groupcoord blasts alternate, echo first and last (E O E O ... E), so that each of our rounds
    is compared with the echo rounds just before and after it: the machine's speed drifts over a run, and
    this pairs measurements taken under the same conditions. Returns the median round of each and every
    round's ratio."""
    echo = echo_members(args.echo_port, args.connections)
    echo_args = argparse.Namespace(**{**vars(args), "server_pid": args.echo_pid})
    echo_runs, our_runs = [], []
    for r in range(args.rounds):
        say(f"round {r + 1}/{args.rounds}: echo")
        echo_runs.append(heartbeat_blast(echo, echo_args))
        say(f"round {r + 1}/{args.rounds}: groupcoord")
        our_runs.append(heartbeat_blast(ours, args))
    say("closing echo round")
    echo_runs.append(heartbeat_blast(echo, echo_args))
    for m in echo:
        m.sock.close()
    ratios = [o["requests_per_s"] / ((echo_runs[i]["requests_per_s"] + echo_runs[i + 1]["requests_per_s"]) / 2)
              for i, o in enumerate(our_runs)]

    def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
        return sorted(runs, key=lambda x: x["requests_per_s"])[len(runs) // 2]

    return {"heartbeat": median_run(our_runs), "echo": median_run(echo_runs), "ratios": ratios,
            "ratio": statistics.median(ratios), "rounds": {"echo": [x["requests_per_s"] for x in echo_runs],
                                                            "ours": [x["requests_per_s"] for x in our_runs]}}


async def _groups_phase(args: argparse.Namespace, small: list[Member], large: list[Member]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, members, reps in (("small", small, args.reps_small), ("large", large, args.reps_large)):
        t0 = time.perf_counter()
        generation = await form_group(members)
        formed = time.perf_counter() - t0
        say(f"{len(members)} members formed generation {generation} in {formed:.2f} s")
        settled, burst, client_cpu = [], [], []
        settle = 0.1 + len(members) * 0.0005
        for _ in range(reps):
            elapsed, cpu = await time_rebalance(members, settle_s=settle)
            settled.append(elapsed)
            client_cpu.append(cpu)
            await trio.sleep(0.05)
        burst.append((await time_rebalance(members, settle_s=0))[0])
        say(f"{len(members)} members: last JoinGroup -> last SyncGroup {[round(x * 1000, 1) for x in settled]} ms"
            f" (settled), {round(burst[0] * 1000, 1)} ms (all JoinGroups back to back); load generator CPU in"
            f" the settled windows {[round(x * 1000) for x in client_cpu]} ms")
        out[name] = {"members": len(members), "formed_s": formed, "settled_s": settled, "burst_s": burst,
                     "median_ms": statistics.median(settled) * 1000, "max_ms": max(settled) * 1000,
                     "burst_ms": burst[0] * 1000, "settle_s": settle,
                     "client_cpu_ms": statistics.median(client_cpu) * 1000}
        if members is small:
            await leave_all(small)
    return out


def scenario_groups(args: argparse.Namespace) -> dict[str, Any]:
    small = make_members(connect_all(args.port, args.small), f"bench-g{args.small}")
    large = make_members(connect_all(args.port, args.connections), f"bench-g{args.connections}")
    out = trio.run(_groups_phase, args, small, large)
    for m in small:
        m.sock.close()
    if args.echo_port:
        out.update(interleaved_heartbeats(large, args))
    else:
        out["heartbeat"] = heartbeat_blast(large, args)
    return out


# ---------------------------------------------------------------- offset commits
def commit_maker(group_id: str, partition: int, client_id: str) -> Any:
    body = {"group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "bench-topic", "partitions": [
                {"partition_index": partition, "committed_offset": _OFFSET_MARK, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]}
    template = bytearray(codec.encode_request(8, COMMIT_VERSION, 1, client_id, body))
    at = template.find(_OFFSET_MARK.to_bytes(8, "big"))
    assert at > 0
    pack = struct.Struct(">q").pack_into
    state = [0]

    def make(n: int) -> bytes:
        out = []
        for _ in range(n):
            state[0] += 1
            pack(template, at, state[0])
            out.append(bytes(template))
        return b"".join(out)

    return make


def disk_probe(directory: str, seconds: float, keep: list[float]) -> None:
    """``seconds`` of: append 1 KiB to a file in ``directory``, fdatasync it (its time in ms into ``keep``),
    sleep 1 ms. The file is removed afterwards."""
    path = os.path.join(directory, f"disk-probe-{os.getpid()}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        block = b"p" * 1024
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            os.write(fd, block)
            t0 = time.perf_counter()
            os.fdatasync(fd)
            keep.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.001)
    finally:
        os.close(fd)
        os.unlink(path)


def latency_runs(args: argparse.Namespace, rounds_n: int, servers: Any, pooled: dict[str, Any],
                 runs: dict[str, list[dict[str, Any]]], cpu_probes: dict[str, Any], cpu_used: dict[str, list[float]],
                 stolen: dict[str, list[int]]) -> None:
    """``rounds_n`` open-loop latency runs of each server in turn (O F O F ..): latencies into ``pooled``,
    each run's summary into ``runs``, CPU and stolen ticks summed per server."""
    for _ in range(rounds_n):
        for name, ss, mm in servers:
            if not ss:
                continue
            keep, keep_sched = pooled[name]
            probe = cpu_probes.get(name)
            start = (probe[0](), probe[1](), time.perf_counter()) if probe else None
            ticks = machine_ticks()
            o = open_loop(ss, mm, rate=args.rate, warmup_s=args.warmup, measure_s=args.measure,
                          err_from_end=COMMIT_ERR_FROM_END, keep=keep, keep_sched=keep_sched)
            stolen[name] = [a + b - c for a, b, c in zip(stolen[name], machine_ticks(), ticks)]
            if probe and start:
                end = (probe[0](), probe[1](), time.perf_counter())
                for i in range(3):
                    cpu_used[name][i] += end[i] - start[i]
            say(f"{name}: commits at {args.rate:,.0f}/s offered: achieved {o.achieved_per_s:,.0f}/s, "
                f"p50 {o.p50_ms:.2f} ms, p99 {o.p99_ms:.2f} ms, p99.9 {o.p999_ms:.2f} ms, max {o.max_ms:.2f} ms, "
                f"errors {o.errors}")
            runs[name].append(asdict(o))
            time.sleep(0.3)


def scenario_commits(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    socks = connect_all(args.port, args.connections)
    makers = [commit_maker(f"bench-commits-{i}", i % 16, f"bench-committer-{i}") for i in range(len(socks))]
    r = closed_loop(socks, makers, inflight=args.inflight, warmup_s=args.warmup, measure_s=args.measure,
                    err_from_end=COMMIT_ERR_FROM_END, probes=probes(args))
    say(f"commits max: {r.requests_per_s:,.0f}/s, per second {r.per_second}, errors {r.errors}, "
        f"cpu {fmt_cpu(r.cpu)}")
    out["throughput"] = asdict(r)
    time.sleep(0.5)
    floor_socks = connect_all(args.floor_port, args.connections) if args.floor_port else []
    floor_makers = [commit_maker(f"bench-commits-{i}", i % 16, f"bench-committer-{i}")
                    for i in range(len(floor_socks))]
    pooled: dict[str, tuple[list[float], list[float]]] = {"ours": ([], []), "floor": ([], [])}
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "floor": []}
    before = flush_histogram(args.metrics_url)
    pids = {"ours": args.server_pid, "floor": args.floor_pid}
    cpu_probes = {name: (process_cpu(pid), children_cpu(pid)) for name, pid in pids.items() if pid}
    cpu_used = {name: [0.0, 0.0, 0.0] for name in cpu_probes}  # server s, its children s, wall s
    stolen = {"ours": [0, 0], "floor": [0, 0]}  # ticks the host stole, all ticks: over each server's runs
    disk: list[float] = []
    if args.disk_probe:
        disk_probe(args.disk_probe, DISK_PROBE_S, disk)
    rounds_n = args.rounds if floor_socks else 1
    neighbours = start_neighbours(args.neighbour, rounds_n * 2 * (args.warmup + args.measure + 2) + 30) \
        if args.neighbour else []
    try:
        latency_runs(args, rounds_n, (("ours", socks, makers), ("floor", floor_socks, floor_makers)),
                     pooled, runs, cpu_probes, cpu_used, stolen)
    finally:
        stop_neighbours(neighbours)
    rounds = round_stats(before, flush_histogram(args.metrics_url))
    if args.disk_probe:
        disk_probe(args.disk_probe, DISK_PROBE_S, disk)
        out["disk"] = percentiles(disk)
        say(f"disk alone (1 KiB append + fdatasync, {DISK_PROBE_S:g} s before and after the runs): "
            f"p50 {out['disk']['p50_ms']:.2f} ms, p99 {out['disk']['p99_ms']:.2f} ms, max {out['disk']['max_ms']:.2f} ms")
    for name in ("ours", "floor"):
        if not runs[name]:
            continue
        keep, keep_sched = pooled[name]
        summary = percentiles(keep)
        used = cpu_used.get(name)
        if used and used[2] > 0:  # shares of one core over the runs (warm-up and drain included)
            summary.update(cpu_server=used[0] / used[2], cpu_children=used[1] / used[2])
        if stolen[name][1] > 0:  # share of the whole machine (both cores) its host took during these runs
            summary.update(steal=stolen[name][0] / stolen[name][1])
        summary.update(achieved_per_s=min(r["achieved_per_s"] for r in runs[name]),
                       errors=sum(r["errors"] for r in runs[name]),
                       p99_sched_ms=percentiles(keep_sched)["p99_ms"], runs=runs[name])
        say(f"{name}: {len(runs[name])} run(s) pooled: p50 {summary['p50_ms']:.2f} ms, p99 {summary['p99_ms']:.2f} ms,"
            f" max {summary['max_ms']:.2f} ms" + (f"; group-commit rounds {rounds}" if name == "ours" else ""))
        out["latency" if name == "ours" else "floor"] = summary
    out["rounds"] = rounds
    out["neighbour"] = args.neighbour
    for s in floor_socks:
        s.close()
    if args.rate_low:
        time.sleep(0.5)
        low = open_loop(socks, makers, rate=args.rate_low, warmup_s=args.warmup, measure_s=args.measure,
                        err_from_end=COMMIT_ERR_FROM_END)
        say(f"commits at {args.rate_low:,.0f}/s offered: p50 {low.p50_ms:.2f} ms, p99 {low.p99_ms:.2f} ms, "
            f"max {low.max_ms:.2f} ms, errors {low.errors}")
        out["latency_low"] = asdict(low)
    for s in socks:
        s.close()
    return out


def scenario_tail(args: argparse.Namespace) -> dict[str, Any]:
    socks = connect_all(args.port, args.connections)
    makers = [commit_maker(f"bench-commits-{i}", i % 16, f"bench-committer-{i}") for i in range(len(socks))]
    quiet: list[float] = []
    tailed: list[float] = []
    cpu_quiet: list[float] = []  # the server's CPU per commit (µs): robust to the CPU the host gives it
    cpu_tailed: list[float] = []
    reads: list[dict[str, Any]] = []
    for i in range(2 * args.rounds + 1):
        tailer = None
        if i % 2:
            tailer = subprocess.Popen([sys.executable, "-m", "tests.bench.bench_offsets_tail", "--port",
                                       str(args.port), "--seconds", str(args.warmup + args.measure + 30),
                                       *(["--from-beginning"] if args.tail_from_beginning else [])],
                                      stdout=subprocess.PIPE, text=True)
        try:
            r = closed_loop(socks, makers, inflight=args.inflight, warmup_s=args.warmup, measure_s=args.measure,
                            err_from_end=COMMIT_ERR_FROM_END, probes=probes(args))
        finally:
            if tailer is not None:
                tailer.terminate()
                out, _ = tailer.communicate(timeout=30)
                line = next((x for x in out.splitlines() if x.startswith("TAILED ")), None)
                if tailer.returncode or line is None:
                    raise RuntimeError(f"the offsets tailer failed ({tailer.returncode}): {out[-2000:]}")
                reads.append(json.loads(line[len("TAILED "):]))
        (tailed if tailer is not None else quiet).append(r.requests_per_s)
        if "server" in r.cpu and r.requests_per_s:
            (cpu_tailed if tailer is not None else cpu_quiet).append(r.cpu["server"] / r.requests_per_s * 1e6)
        say(f"commits max, {'tailed' if tailer is not None else 'quiet'}: {r.requests_per_s:,.0f}/s, errors {r.errors}, "
            f"cpu {fmt_cpu(r.cpu)}"
            + (f"; the tailer: {reads[-1]}" if tailer is not None else ""))
        time.sleep(0.3)
    for s in socks:
        s.close()
    ratios = [t / ((quiet[k] + quiet[k + 1]) / 2) for k, t in enumerate(tailed)]
    out: dict[str, Any] = {"quiet": quiet, "tailed": tailed, "ratios": ratios, "ratio": statistics.median(ratios),
                           "reads": reads}
    if len(cpu_tailed) == len(tailed) and len(cpu_quiet) == len(quiet):
        cpu_ratios = [t / ((cpu_quiet[k] + cpu_quiet[k + 1]) / 2) for k, t in enumerate(cpu_tailed)]
        out.update(cpu_quiet_us=cpu_quiet, cpu_tailed_us=cpu_tailed, cpu_ratios=cpu_ratios,
                   cpu_ratio=statistics.median(cpu_ratios))
    return out


FLUSH_BUCKET = "groupcoord_log_flush_latency_seconds_bucket{"


def flush_histogram(url: str | None) -> dict[float, int] | None:
    """The server's group-commit round durations so far (histogram groupcoord_log_flush_latency_seconds):
    cumulative count by upper bound in seconds; None without a metrics URL."""
    if not url:
        return None
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(FLUSH_BUCKET):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[float(le)] = int(float(line.rsplit(" ", 1)[1]))
    return out


def round_stats(before: dict[float, int] | None, after: dict[float, int] | None) -> dict[str, Any] | None:
    """Rounds between two scrapes: how many, how many slower than 5 and 10 ms, and the bucket bound (ms) that
    holds the slowest (a round is the fsync that releases a batch of commits: its stalls are the commits')."""
    if before is None or after is None:
        return None
    delta = {le: after[le] - before.get(le, 0) for le in sorted(after)}
    total = delta[float("inf")]
    below = [le for le, n in delta.items() if n == total]
    return {"rounds": total, "over_5ms": total - delta.get(0.005, 0), "over_10ms": total - delta.get(0.01, 0),
            "slowest_le_ms": below[0] * 1000 if below else None}


SCENARIOS = {"echo": scenario_echo, "groups": scenario_groups, "commits": scenario_commits, "tail": scenario_tail}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in SCENARIOS:
        print("helper of tests.bench.bench_coordinator (run that); scenarios:", ", ".join(SCENARIOS))
        return 0
    p = argparse.ArgumentParser(prog="bench_coordinator_load")
    p.add_argument("scenario", choices=sorted(SCENARIOS))
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--connections", type=int, default=1000)
    p.add_argument("--inflight", type=int, default=8)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--measure", type=float, default=5.0)
    p.add_argument("--small", type=int, default=100)
    p.add_argument("--reps-small", type=int, default=5)
    p.add_argument("--reps-large", type=int, default=3)
    p.add_argument("--rate", type=float, default=5000.0)
    p.add_argument("--rate-low", type=float, default=0.0, help="also measure latency at this offered rate")
    p.add_argument("--server-pid", type=int, default=None, help="report this process's CPU use too")
    p.add_argument("--metrics-url", default=None, help="commits: the server's /metrics, to report its "
                   "group-commit round durations during the latency run")
    p.add_argument("--echo-port", type=int, default=0, help="groups: heartbeat rounds alternate with this echo "
                   "server's (E O E ... E)")
    p.add_argument("--echo-pid", type=int, default=None)
    p.add_argument("--rounds", type=int, default=3, help="groups with --echo-port / commits with --floor-port / tail: "
                   "rounds of each")
    p.add_argument("--floor-pid", type=int, default=None, help="commits: report the floor's CPU use too")
    p.add_argument("--floor-port", type=int, default=0, help="commits: latency runs alternate with this durable "
                   "echo floor's (O F O F ..)")
    p.add_argument("--disk-probe", default=None, help="commits: time 1-KiB append + fdatasync in this directory"
                   " just before and after the latency runs")
    p.add_argument("--tail-from-beginning", action="store_true", help="tail: the tailer reads the whole history "
                   "first (bench_offsets_tail --from-beginning)")
    p.add_argument("--neighbour", type=float, default=0.0, help="commits (diagnostic): during the latency runs a"
                   " busy neighbour spins this share of every core (busy_neighbour)")
    args = p.parse_args(argv)
    result = SCENARIOS[args.scenario](args)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
