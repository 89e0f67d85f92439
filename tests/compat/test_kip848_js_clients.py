"""KIP-848 from JavaScript (issue #36): a two-member consumer-protocol group of each npm client consumes and
commits against a real ``groupcoord serve``. Clients (pinned in tests/compat/js/package.json):
@confluentinc/kafka-javascript 1.10.1 (``group.protocol: 'consumer'``; librdkafka 2.15.1 inside, through its
KafkaJS-style API) and @platformatic/kafka 1.35.0 (``groupProtocol: 'consumer'``, pure JavaScript; 1.35.0 is its
last release for node 20, 2.x needs node >= 22.22).

Rules:
- Per client, one server with a 1 s consumer heartbeat interval (the default 5 s only makes each reconciliation
  step wait longer), a 4-partition topic and keyed records from Python confluent-kafka (record i to partition
  i % 4), in three parts: 200 before the first member starts (it takes all 4 partitions and consumes them);
  batches of 20 from the second member's start until both show their share (records flow during the whole
  rebalance, a few hundred to a few thousand); 100 after it (both then consume).
- Members are node child processes (tests/compat/js/kip848_*.js) printing JSON lines; each commits every record's
  offset+1 (awaited) before taking the next, with auto commit off.
- Exactly once is asserted, not at least once: a member commits each record before the next, and KIP-848 gives a
  revoked partition to the other member only after its owner acknowledged the revocation (so after its last
  commit), so the new owner starts right after the last record the old one printed. A duplicate therefore
  means a partition was owned by both at once or a commit was lost: a bug of the server or the client.
- Two work-arounds in the @platformatic/kafka 1.35.0 member, for bugs of that client (see the script): it skips
  records of partitions no longer assigned (the stream keeps delivering fetched records of revoked partitions
  after the revocation was acknowledged; without the skip those are consumed twice and their commits move the
  new owner's offsets back), and it retries a commit answered STALE_MEMBER_EPOCH (sent with the epoch an
  acknowledging heartbeat in flight just replaced; librdkafka retries those itself). Both are counted in the
  output (``dropped``, ``commit_retry``); a commit that still fails fails the test.
- The server's view is checked without the client under test: committed offsets with Python confluent-kafka's
  ``committed()``, the group with our CLI (``groupcoord groups describe``).
- The npm project is installed by ``make test`` (Makefile); run alone, the test installs it itself (``npm
  install`` with CKJS_LINKING=dynamic, see ``_ensure_installed``), serialised by a lock file. Every wait is
  bounded; processes are ended by PID.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from server_process import REPO, ServerProcess  # type: ignore[import-not-found]

JS = Path(__file__).with_name("js")
PARTITIONS = 4
BEFORE, BATCH, AFTER = 200, 20, 100  # records before A; batches while B joins, until the split; after it
SCRIPTS = {"confluent": "kip848_confluent.js", "platformatic": "kip848_platformatic.js"}
# what must exist once the npm project is installed (the native addon: built or downloaded by node-pre-gyp)
INSTALLED = [JS / "node_modules" / "kafkajs" / "package.json",
             JS / "node_modules" / "@platformatic" / "kafka" / "package.json",
             JS / "node_modules" / "@confluentinc" / "kafka-javascript" / "build" / "Release"
             / "confluent-kafka-javascript.node"]

pytestmark = pytest.mark.compat


def _ensure_installed() -> str:
    """node's path, after installing tests/compat/js from its lock file if a package is missing. CKJS_LINKING=
    dynamic: when node-pre-gyp cannot download @confluentinc/kafka-javascript's prebuilt addon (from
    github.com), it builds librdkafka from the bundled source against the system's OpenSSL and zlib instead
    of downloading and building OpenSSL, zlib, zstd and curl (the default static build), ~2 min on 2 cores."""
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "node and npm must be installed"
    if all(p.exists() for p in INSTALLED):
        return node
    with open(Path(tempfile.gettempdir()) / "groupcoord-compat-js-npm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test (or worker) may be installing the same directory
        if not all(p.exists() for p in INSTALLED):
            done = subprocess.run([npm, "install", "--no-audit", "--no-fund"], cwd=JS, capture_output=True, text=True,
                                  check=False, timeout=900, env=dict(os.environ, CKJS_LINKING="dynamic"))
            assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]
    missing = [str(p) for p in INSTALLED if not p.exists()]
    assert not missing, f"npm install left out {missing}"
    return node


class Member:
    """One node member: its JSON lines collected by a reader thread."""

    def __init__(self, node: str, script: str, bootstrap: str, topic: str, group: str, name: str) -> None:
        self.name = name
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self._lock = threading.Lock()
        self._terminated = False
        self.proc = subprocess.Popen([node, script, bootstrap, topic, group, name], cwd=JS, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            with self._lock:
                self.events.append(event)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def of(self, kind: str) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if e["ev"] == kind]

    def assignment(self) -> set[int]:
        """The last assignment it printed (empty before the first)."""
        changes = self.of("assignment")
        return set(changes[-1]["partitions"]) if changes else set()

    def keys(self) -> list[str]:
        return [e["key"] for e in self.of("record")]

    def terminate(self) -> None:
        """SIGTERM (once): it prints its final assignment, leaves the group and exits 0."""
        if self.proc.poll() is None and not self._terminated:
            self._terminated = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 30.0) -> int:
        """terminate() and wait; SIGKILL if it hangs."""
        self.terminate()
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def describe(self) -> str:
        return (f"{self.name} (pid {self.proc.pid}, exit {self.proc.poll()}): assignment {sorted(self.assignment())}, "
                f"{len(self.of('record'))} records, events {self.events[-10:]}, stderr {''.join(self.stderr)[-3000:]}")


def _wait(done: Callable[[], bool], timeout: float, what: str, members: list[Member]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return
        for m in members:
            assert m.proc.poll() is None, f"{what}: member exited early: {m.describe()}"
        time.sleep(0.05)
    pytest.fail(f"{what}: not reached in {timeout} s:\n" + "\n".join(m.describe() for m in members))


def _produce(bootstrap: str, topic: str, lo: int, hi: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(lo, hi):
        key = f"key-{i:04d}"
        producer.produce(topic, key=key, value=f"value of {key}", partition=i % PARTITIONS)
    assert producer.flush(20) == 0


def _committed_and_end(bootstrap: str, group: str, topic: str) -> tuple[list[int], list[int]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = [tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                                                     timeout=10)]
        ends = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)]
    finally:
        c.close()
    return committed, ends


def _cli_describe(bootstrap: str, group: str) -> str:
    done = subprocess.run([sys.executable, "-m", "coordinator.cli", "groups", "describe", "-b", bootstrap, group],
                          cwd=REPO, capture_output=True, text=True, check=False, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture
def kip848_server(tmp_path: Path) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path / "data", "--group-consumer-heartbeat-interval-ms", "1000",
                        "--group-consumer-min-heartbeat-interval-ms", "1000").start().wait_loaded()
    try:
        yield srv
    finally:
        alive = srv.alive()
        status = srv.stop()
        print(f"--- server (alive at teardown: {alive}, exit status {status}) ---\n{srv.log()[-200000:]}")


@pytest.mark.parametrize("client", sorted(SCRIPTS))
def test_two_member_consumer_group(kip848_server: ServerProcess, client: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    node = _ensure_installed()
    srv = kip848_server
    topic, group = f"kip848-{client}", f"kip848-{client}-group"
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})  # kept referenced until the result is in
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(10)
    _produce(srv.bootstrap, topic, 0, BEFORE)

    members: list[Member] = []
    try:
        a = Member(node, SCRIPTS[client], srv.bootstrap, topic, group, f"{client}-a")
        members.append(a)
        _wait(lambda: a.assignment() == set(range(PARTITIONS)) and len(a.keys()) >= BEFORE, 40,
              "the first member holds all 4 partitions and consumed the first part", members)

        b = Member(node, SCRIPTS[client], srv.bootstrap, topic, group, f"{client}-b")
        members.append(b)

        def split() -> bool:
            pa, pb = a.assignment(), b.assignment()
            return bool(pa) and bool(pb) and not pa & pb and pa | pb == set(range(PARTITIONS))

        # records flow during the whole rebalance: batches of BATCH until the split shows (at most 40 s)
        produced = BEFORE
        deadline = time.monotonic() + 40
        while not split() and time.monotonic() < deadline:
            _produce(srv.bootstrap, topic, produced, produced + BATCH)
            produced += BATCH
        _wait(split, 1, "each member holds a share, together all 4", members)
        during = {f"key-{i:04d}" for i in range(BEFORE, produced)}
        _produce(srv.bootstrap, topic, produced, produced + AFTER)
        produced += AFTER
        everything = {f"key-{i:04d}" for i in range(produced)}
        _wait(lambda: set(a.keys()) | set(b.keys()) == everything, 40, "every record consumed", members)

        # the server's view, with both members in: committed offsets at every partition's end; our CLI
        per_partition = [len(range(p, produced, PARTITIONS)) for p in range(PARTITIONS)]
        seen: list[tuple[list[int], list[int]]] = []

        def committed_at_end() -> bool:
            seen.append(_committed_and_end(srv.bootstrap, group, topic))
            return seen[-1][0] == seen[-1][1] == per_partition

        try:
            _wait(committed_at_end, 20, "committed offsets at the log end", members)
        except pytest.fail.Exception:
            print(f"committed, log end offsets (expected {per_partition}) last seen: {seen[-1:]}")
            raise
        text = _cli_describe(srv.bootstrap, group)
        head = text.splitlines()[0]
        assert head.startswith(f"GROUP {group}  TYPE consumer ") and head.endswith("MEMBERS 2"), text
        rows = [line for line in text.splitlines()[1:] if line.strip() and not line.startswith("CONSUMER-ID")]
        assert len(rows) == 2, text
        listed = sorted(p for row in rows for p in row.split()[-1].split(","))
        assert listed == sorted(f"{topic}-{p}" for p in range(PARTITIONS)), text

        # each member consumed records of the last part (both own partitions of it), every record exactly once
        last_part = {f"key-{i:04d}" for i in range(produced - AFTER, produced)}
        for m in (a, b):
            assert set(m.keys()) & last_part, f"{m.name} consumed none of the last part: {m.describe()}"
            print(f"{m.name}: {len(set(m.keys()) & during)} of the {len(during)} records produced during the rebalance, "
                  f"{len(m.of('dropped'))} dropped, {len(m.of('commit_retry'))} commit retries")
        counts = Counter(a.keys() + b.keys())
        assert set(counts) == everything
        duplicates = {k: n for k, n in counts.items() if n > 1}
        assert not duplicates, f"consumed more than once: {sorted(duplicates)[:20]} ({len(duplicates)})"
        for m in (a, b):
            assert not m.of("commit_error"), f"{m.name}: {m.of('commit_error')[:5]}"
            records = m.of("record")
            assert all(r["partition"] == int(r["key"][4:]) % PARTITIONS for r in records)

        # clean shutdown, both at once: final assignments (each non-empty, disjoint, all 4), then both leave
        for m in (a, b):
            m.terminate()
        for m in (a, b):
            assert m.stop() == 0, m.describe()
        finals = [set(m.of("final")[0]["partitions"]) for m in (a, b)]
        assert all(finals) and not finals[0] & finals[1] and finals[0] | finals[1] == set(range(PARTITIONS)), finals
        assert all(m.of("closed") for m in (a, b))
        assert _committed_and_end(srv.bootstrap, group, topic)[0] == per_partition
    finally:
        for m in members:
            m.stop(10)
