"""Burrow (LinkedIn's lag monitor, Debian's ``burrow`` 1.2.1) watching groupcoord, as operators run it (#27).

The story: a real ZooKeeper (Burrow keeps its own locks there; tests/cluster/zookeeper_process.py) and a
real groupcoord. Topic ``bw-a`` (2 partitions, 10 and 14 records); group ``bw-g``, a kafka-python consumer
that stays in the group, commits offsets 4 and 9. Burrow is configured with groupcoord as both its cluster
(topics and log end offsets: Metadata, ListOffsets v0/v1) and its consumer source (it consumes
``__consumer_offsets`` with Fetch v4 and decodes the commits itself). ``kafka-version`` is "2.1.0", the newest
this Burrow accepts; its Sarama (1.22) sends Metadata v5, ListOffsets v0 and v1, Fetch v4 then. (At "0.10.x"
and below Sarama fetches with v2/v3, the pre-2017 message format that groupcoord refuses, as Kafka 4 does.)

Burrow's HTTP API then lists the topic and the group, and reports per partition the committed offset and the
lag that ``groupcoord groups offsets`` (our CLI, run as a process) reports. The group commits again (6 and
12) and Burrow shows the new offsets and lags (bounded polling). Burrow runs at least 60 s in all, and its
log holds no error, panic or fatal line, and no warning but one kind: "failed to decode" a GroupMetadataValue
of version 3. Burrow 1.2.1 decodes group metadata values v0-v2 only; Kafka writes v3 since 2.3 (KIP-345's
group instance id) and so do we (#27 asks for it), so Burrow logs the same warning against Kafka 2.3-3.9.
It only costs Burrow the members' client ids in its answers (``owner``, ``client_id`` stay empty). It also
logs "failed to decode" (key version 1000) once per rebalance record of ours (``group.history.size``), as it
does for Kafka 4's consumer-group records, and skips them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata
from server_process import REPO, ServerProcess  # type: ignore[import-not-found]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
from zookeeper_process import ZooKeeperProcess, free_port, terminate  # type: ignore[import-not-found]  # noqa: E402

BURROW = "/usr/bin/Burrow"
TOPIC, GROUP, CLUSTER = "bw-a", "bw-g", "gc"
RUN_AT_LEAST_S = 60.0
BAD_LEVELS = ('"level":"error"', '"level":"warn"', '"level":"panic"', '"level":"fatal"', '"level":"dpanic"')
# the one warning Burrow 1.2.1 logs against Kafka 2.3+ as well (see the module docstring)
KNOWN_WARNING = ('"level":"warn"', '"msg":"failed to decode"', '"message_type":"metadata"',
                 '"reason":"value version"', '"version":3}')
# and one per rebalance record of ours (key version 1000: group.history.size), as it logs for the key versions
# of Kafka 4's consumer-group records (3-8, 16): it skips the record
HISTORY_WARNING = ('"level":"warn"', '"msg":"failed to decode"', '"reason":"key version"', '"version":1000}')


def burrow_config(zk: str, bootstrap: str, http_port: int, pidfile: Path) -> str:
    return f"""
[general]
pidfile="{pidfile}"
[logging]
level="info"
[zookeeper]
servers=["{zk}"]
timeout=6
root-path="/burrow"
[client-profile.gc]
client-id="burrow-test"
kafka-version="2.1.0"
[cluster.{CLUSTER}]
class-name="kafka"
servers=["{bootstrap}"]
client-profile="gc"
topic-refresh=2
offset-refresh=1
[consumer.{CLUSTER}]
class-name="kafka"
cluster="{CLUSTER}"
servers=["{bootstrap}"]
client-profile="gc"
start-latest=false
[httpserver.default]
address="127.0.0.1:{http_port}"
[storage.default]
class-name="inmemory"
workers=4
intervals=10
expire-group=604800
min-distance=1
"""


class BurrowProcess:
    def __init__(self, directory: Path, zk: str, bootstrap: str) -> None:
        self.dir = directory
        self.http_port = free_port()
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "burrow.toml").write_text(burrow_config(zk, bootstrap, self.http_port,
                                                             directory / "burrow.pid"))
        self.log_path = directory / "burrow.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0

    def start(self) -> BurrowProcess:
        if not Path(BURROW).exists():
            raise RuntimeError(f"{BURROW} is missing: `make test` installs Debian's burrow package")
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen([BURROW, "-config-dir", str(self.dir)], cwd=self.dir, stdout=out,
                                         stderr=subprocess.STDOUT)
        self.started = time.monotonic()
        return self

    def get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/v3/kafka{path}", timeout=5) as r:
            return json.loads(r.read())

    def poll(self, path: str, ok: Any, seconds: float = 40.0) -> dict[str, Any]:
        """GET ``path`` until ``ok(body)`` holds (bounded); the last body otherwise fails the test."""
        deadline, last = time.monotonic() + seconds, None
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, "Burrow exited:\n" + self.log()
            try:
                last = self.get(path)
                if ok(last):
                    return last
            except (OSError, ValueError) as e:  # not listening yet, or a 404 for a group not seen yet
                last = {"error": str(e)}
            time.sleep(0.5)
        raise AssertionError(f"Burrow never satisfied the check on {path}: {last}\n{self.log()[-4000:]}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        terminate(self.proc)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[ServerProcess, ZooKeeperProcess, Path]]:
    zk = ZooKeeperProcess(tmp_path / "zk").start()
    srv = ServerProcess(tmp_path / "data", "--group-min-session-timeout-ms", "1000",
                        "--group-initial-rebalance-delay-ms", "0")
    try:
        # loaded before Burrow asks for __consumer_offsets' end offsets: a partition still loading answers
        # UNKNOWN_TOPIC_OR_PARTITION, which Burrow logs as a warning (seen on a loaded machine, `make test`)
        srv.start().wait_loaded()
        yield srv, zk, tmp_path
    finally:
        srv.stop()
        zk.stop()
        print(srv.log()[-20000:])


def cli_offsets(bootstrap: str) -> dict[int, tuple[int, int]]:
    """``groupcoord groups offsets bw-g``: partition -> (current offset, lag), parsed from its table."""
    exe = shutil.which("groupcoord", path=str(Path(sys.executable).parent)) or "groupcoord"
    out = subprocess.run([exe, "groups", "offsets", GROUP, "-b", bootstrap], capture_output=True, text=True,
                         timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    rows: dict[int, tuple[int, int]] = {}
    for line in out.stdout.splitlines():
        cols = line.split()
        if cols and cols[0] == TOPIC:
            rows[int(cols[1])] = (int(cols[2]), int(cols[4]))
    assert rows, out.stdout
    return rows


def burrow_rows(body: dict[str, Any]) -> dict[int, tuple[int, int]]:
    """Burrow's lag answer: partition -> (last committed offset, current lag)."""
    return {p["partition"]: (p["end"]["offset"], p["current_lag"])
            for p in body["status"]["partitions"] if p["topic"] == TOPIC and p.get("end")}


@pytest.mark.compat
def test_burrow_monitors_groupcoord(setup: tuple[ServerProcess, ZooKeeperProcess, Path]) -> None:
    srv, zk, tmp = setup
    bs = srv.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bs)
    admin.create_topics([NewTopic(TOPIC, 2, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bs)
    for i in range(24):
        producer.send(TOPIC, b"r%d" % i, partition=0 if i < 10 else 1)
    producer.flush()
    producer.close()

    consumer = KafkaConsumer(TOPIC, bootstrap_servers=bs, group_id=GROUP, enable_auto_commit=False,
                             session_timeout_ms=6000, heartbeat_interval_ms=500)
    burrow = BurrowProcess(tmp / "burrow", zk.connect, bs)
    try:
        for _ in range(60):  # bounded: ~30 s
            consumer.poll(500)
            if len(consumer.assignment()) == 2:
                break
        tps = sorted(consumer.assignment(), key=lambda tp: tp.partition)
        assert len(tps) == 2
        consumer.commit({tps[0]: OffsetAndMetadata(4, "", -1), tps[1]: OffsetAndMetadata(9, "", -1)})
        burrow.start()

        burrow.poll("", lambda b: CLUSTER in b.get("clusters", []))
        burrow.poll(f"/{CLUSTER}/topic", lambda b: TOPIC in b.get("topics", []))
        burrow.poll(f"/{CLUSTER}/consumer", lambda b: GROUP in b.get("consumers", []))
        topic = burrow.poll(f"/{CLUSTER}/topic/{TOPIC}", lambda b: b.get("offsets") == [10, 14])
        assert topic["offsets"] == [10, 14]  # log end offsets, as ListOffsets latest gives them

        expected = cli_offsets(bs)
        assert expected == {0: (4, 6), 1: (9, 5)}
        burrow.poll(f"/{CLUSTER}/consumer/{GROUP}/lag", lambda b: burrow_rows(b) == expected)

        # the group commits again: Burrow follows
        for _ in range(4):  # keep the member's heartbeats going while committing
            consumer.poll(100)
        consumer.commit({tps[0]: OffsetAndMetadata(6, "", -1), tps[1]: OffsetAndMetadata(12, "", -1)})
        expected = cli_offsets(bs)
        assert expected == {0: (6, 4), 1: (12, 2)}
        burrow.poll(f"/{CLUSTER}/consumer/{GROUP}/lag", lambda b: burrow_rows(b) == expected)

        # run at least 60 s in all (bounded), the member staying alive meanwhile
        while time.monotonic() - burrow.started < RUN_AT_LEAST_S:
            consumer.poll(500)
            assert burrow.proc is not None and burrow.proc.poll() is None, "Burrow exited:\n" + burrow.log()
        burrow.poll(f"/{CLUSTER}/consumer/{GROUP}/lag", lambda b: burrow_rows(b) == expected, seconds=10)
    finally:
        consumer.close()
        burrow.stop()
    log = burrow.log()
    bad = [line for line in log.splitlines() if any(level in line for level in BAD_LEVELS)
           and not all(part in line for part in KNOWN_WARNING) and not all(part in line for part in HISTORY_WARNING)]
    assert not bad, "\n".join(bad[:20])
    assert "starting consumers" in log  # it did consume __consumer_offsets
