"""What the stream-processing framework tests (test_quix_exactly_once.py, test_faust_exactly_once.py) share: a
virtualenv of its own for each framework, the app worker child processes, and readers of what the server holds.

Rules for the venvs:
- One venv per framework, under the repo's gitignored ``.venv/`` (``.venv/streams/<name>``, so ``make clean``
  removes them with the main venv), built on the interpreter the main venv was built on.
- Every package is pinned in ``tests/compat/stream_apps/requirements-<name>.txt`` (a ``pip freeze``). Quix Streams
  3.28.x needs confluent-kafka <2.13 while the main venv pins 2.16.1, so it cannot share the main venv; Faust
  (faust-streaming 0.15.3) would install into the main venv without moving a pin, but pyproject.toml is not ours
  to change here and its dependencies (click, aiohttp, ...) have no business in the server's venv: its own too.
- Created on first use (``ensure(name)``, which the tests call), idempotent, and fast when already there: a stamp
  file holds the hash of the requirements file it was built from; a changed file rebuilds the venv.
- Concurrent callers (pytest-xdist workers, two engineers' runs) serialize on a file lock per venv.
- ``python tests/compat/stream_support.py [NAME ...]`` builds them from the command line (all when none named).

Rules for the rest:
- A Worker is an app script of stream_apps/ run by a venv's python as a child process with a minimal
  environment (PATH only: nothing of the main venv leaks in); its stdout and stderr are kept line by line; it is
  ended by its own PID only (one SIGTERM for the app's clean stop, SIGKILL to crash it).
- Readers use the main venv's confluent-kafka against the test's server; every wait has a deadline.
- ``read_log`` reads a partition the way the server wrote it (its segment files, with our own batch and marker
  decoders), after the server stopped: every record with its producer id, epoch, transaction and how that
  transaction ended. ``assert_transactions_sound`` checks on it what Kafka guarantees whatever the client does:
  no transaction left open, read_committed readers saw exactly the records of committed transactions (and the
  non-transactional ones), and a producer id's epochs never go back (a fenced producer's write never lands).
"""

from __future__ import annotations

import fcntl
import hashlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[2]
APPS = Path(__file__).resolve().with_name("stream_apps")
ROOT = REPO / ".venv" / "streams"
NAMES = ("quix", "faust")
INSTALL_TIMEOUT_S = 600


def requirements(name: str) -> Path:
    return APPS / f"requirements-{name}.txt"


def _digest(name: str) -> str:
    return hashlib.sha256(requirements(name).read_bytes()).hexdigest()


def python(name: str) -> Path:
    """The venv's interpreter (it may not exist yet: see ensure)."""
    return ROOT / name / "bin" / "python"


def _ready(name: str, digest: str) -> bool:
    stamp = ROOT / name / ".installed"
    return python(name).exists() and stamp.exists() and stamp.read_text().strip() == digest


def _base_python() -> str:
    """The interpreter the running venv was made from (a venv of a venv would chain to it anyway)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def ensure(name: str) -> Path:
    """The interpreter of venv ``name``, built (or rebuilt after its requirements changed) when needed."""
    if name not in NAMES:
        raise ValueError(f"unknown stream venv {name!r} (known: {', '.join(NAMES)})")
    digest = _digest(name)
    if _ready(name, digest):
        return python(name)
    ROOT.mkdir(parents=True, exist_ok=True)
    with open(ROOT / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it: wait, then look again
        if _ready(name, digest):
            return python(name)
        venv = ROOT / name
        steps = [[_base_python(), "-m", "venv", "--clear", str(venv)],
                 [str(python(name)), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                  "-r", str(requirements(name))]]
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, check=False, timeout=INSTALL_TIMEOUT_S)
            if done.returncode != 0:
                raise RuntimeError(f"building the {name} venv failed: {' '.join(step)}\n{done.stdout}{done.stderr}")
        (venv / ".installed").write_text(digest + "\n")
    return python(name)


class Worker:
    """A stream app child process; its output (stdout and stderr) is kept line by line."""

    def __init__(self, name: str, args: list[str], cwd: Path) -> None:
        self.name = name
        self.lines: list[str] = []
        self.terminated = False
        self.proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"})
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for(self, found: Callable[[str], bool], what: str, timeout_s: float) -> str:
        """The first output line for which ``found`` is true, waiting for it up to ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if found(line):
                    return line
            assert self.proc.poll() is None, f"{self.name} exited ({self.proc.returncode}):\n{self.log()}"
            time.sleep(0.05)
        raise AssertionError(f"{self.name}: no {what} in {timeout_s} s:\n{self.log()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self) -> None:
        """One SIGTERM (the app's own clean shutdown; a second one could cut it short)."""
        if not self.terminated and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.terminated = True

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM (once), SIGKILL if it does not exit in time; the exit status, None when it had to be killed."""
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                return None
        return self.proc.returncode

    def log(self) -> str:
        return "".join(self.lines)[-30000:]


def read_to_end(bootstrap: str, topic: str, isolation: str,
                timeout_s: float = 20.0) -> list[tuple[int, int, bytes | None, bytes]]:
    """(partition, offset, key, value) of every record of ``topic`` a reader of this isolation level sees, from the start
    to the end of each partition (partition EOF: the LSO for read_committed, the high watermark otherwise)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"stream-reader-{isolation}",
                         "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        at_end: set[int] = set()
        out: list[tuple[int, int, bytes | None, bytes]] = []
        deadline = time.monotonic() + timeout_s
        while len(at_end) < len(partitions):
            assert time.monotonic() < deadline, f"{topic}: only partitions {sorted(at_end)} reached their end"
            m = consumer.poll(0.2)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                at_end.add(m.partition())
                continue
            at_end.discard(m.partition())
            out.append((m.partition(), m.offset(), m.key(), m.value()))
        return out
    finally:
        consumer.close()


def wait_until(check: Callable[[], bool], what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"no {what} in {timeout_s} s"
        time.sleep(0.25)


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offset of each partition of ``topic`` (-1001 where none)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    result = admin.list_consumer_group_offsets([request])[group].result(10)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "stream-probe"})
    try:
        return {p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        probe.close()


def wait_group_done(bootstrap: str, group: str, topic: str, partitions: int, workers: list[Worker],
                    timeout_s: float) -> None:
    """Until the group's committed offsets reach the end of every partition of its input ``topic`` (each transaction
    commits its offsets with its outputs: then every output is committed); the workers must keep running."""
    ends = end_offsets(bootstrap, topic, partitions)
    deadline = time.monotonic() + timeout_s
    committed: dict[int, int] = {}
    while time.monotonic() < deadline:
        for w in workers:
            assert w.proc.poll() is None, f"{w.name} exited ({w.proc.returncode}):\n{w.log()}"
        committed = committed_offsets(bootstrap, group, topic, partitions)
        if committed == ends:
            return
        time.sleep(0.25)
    logs = "\n".join(f"--- {w.name} ---\n{w.log()}" for w in workers)
    raise AssertionError(f"the workers did not catch up: committed {committed}, ends {ends}\n"
                         f"{transactions_report(bootstrap)}\n{logs}")


def transactions_report(bootstrap: str) -> str:
    """What the server says of its transactions (groupcoord transactions list, then describe each): for the
    message of a test whose stream app stopped making progress."""
    def cli(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "coordinator.cli", "transactions", *args, "-b", bootstrap],
                              cwd=REPO, capture_output=True, text=True, check=False, timeout=30)
        return done.stdout + done.stderr

    listing = cli("list")
    ids = [line.split()[0] for line in listing.splitlines()[1:] if line.strip()]
    return "--- server transactions ---\n" + listing + "".join(cli("describe", "--transactional-id", t) for t in ids)


class LogRecord(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    producer_id: int
    producer_epoch: int
    txn: int  # the producer's transaction in this partition: how many of its markers came before (-1: none)
    outcome: str  # "plain" (not transactional), "commit", "abort", "open" (no marker yet)
    ended_ms: int = -1  # the timestamp of the marker that ended its transaction (the server's clock)


def read_log(data_dir: Path, topic: str, partition: int) -> list[LogRecord]:
    """Every data record of one partition from the server's segment files, in offset order (server stopped)."""
    from protocol.control_batch import parse_marker
    from protocol.record_batch import decode_batch, split_batches

    out: list[LogRecord] = []
    pending: dict[int, list[int]] = {}  # producer id -> indexes in out of its open transaction
    markers: dict[int, int] = {}
    epochs: dict[int, int] = {}
    for segment in sorted((data_dir / f"{topic}-{partition}").glob("*.log")):
        batches, _ = split_batches(segment.read_bytes())
        for raw in batches:
            header, records = decode_batch(raw)
            pid, epoch = header.producer_id, header.producer_epoch
            if pid >= 0:
                assert epoch >= epochs.get(pid, -1), f"{topic}-{partition}: producer {pid} epoch {epoch} after " \
                    f"{epochs[pid]} at offset {header.base_offset} (a fenced producer's write landed)"
                epochs[pid] = epoch
            if header.is_control:
                marker = parse_marker(raw)
                if marker is not None:
                    for i in pending.pop(pid, []):
                        out[i] = out[i]._replace(outcome="commit" if marker.commit else "abort",
                                                 ended_ms=header.max_timestamp)
                    markers[pid] = markers.get(pid, 0) + 1
                continue
            for r in records:
                if header.is_transactional:
                    pending.setdefault(pid, []).append(len(out))
                out.append(LogRecord(partition, r.offset, r.key, r.value, pid, epoch,
                                     markers.get(pid, 0) if header.is_transactional else -1,
                                     "open" if header.is_transactional else "plain"))
    return out


def assert_transactions_sound(data_dir: Path, topic: str,
                              committed_read: Iterable[tuple[int, int, bytes | None, bytes]]) -> list[LogRecord]:
    """Kafka's guarantees on one topic, whatever its clients did (see the rules); its records as read_log gives."""
    partitions = sorted(int(d.name[len(topic) + 1:]) for d in data_dir.glob(f"{topic}-*")
                        if d.name[len(topic) + 1:].isdigit())
    assert partitions, f"{topic}: no partition directory in {data_dir}"
    records = [r for p in partitions for r in read_log(data_dir, topic, p)]
    still_open = [r for r in records if r.outcome == "open"]
    assert not still_open, f"{topic}: transactions never ended: {still_open[:5]}"
    visible = {(r.partition, r.offset) for r in records if r.outcome in ("plain", "commit")}
    seen = {(p, o) for p, o, _, _ in committed_read}
    assert seen == visible, (f"{topic}: read_committed saw {len(seen - visible)} records of aborted transactions "
                             f"and missed {len(visible - seen)} committed ones")
    return records


class TxnOffset(NamedTuple):
    producer_id: int
    producer_epoch: int
    partition: int
    offset: int
    ended_ms: int  # when the marker that committed it was written


def txn_offset_commits(data_dir: Path, group: str, topic: str) -> list[TxnOffset]:
    """The offsets ``group`` committed for ``topic`` through committed transactions, from the server's
    __consumer_offsets segments, in the order they were written."""
    from coordinator.core.records import OffsetCommitKey, decode_key, decode_offset_value

    out: list[TxnOffset] = []
    for directory in data_dir.glob("__consumer_offsets-*"):
        for r in read_log(data_dir, "__consumer_offsets", int(directory.name.rsplit("-", 1)[1])):
            if r.outcome != "commit" or r.key is None or r.value is None:
                continue
            key = decode_key(r.key)
            if isinstance(key, OffsetCommitKey) and key.group == group and key.topic == topic:
                out.append(TxnOffset(r.producer_id, r.producer_epoch, key.partition,
                                     decode_offset_value(r.value).offset, r.ended_ms))
    return out


if __name__ == "__main__":
    for venv_name in sys.argv[1:] or NAMES:
        print(f"{venv_name}: {ensure(venv_name)}")
