"""`groupcoord groups ...` / `groupcoord topics ...` against the real daemon, with a kafka-python group."""

from __future__ import annotations

import subprocess
import sys

from kafka import KafkaConsumer, KafkaProducer
from server_process import REPO, ServerProcess  # type: ignore[import-not-found]


def gc(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coordinator.cli", *args, "-b", server.bootstrap],
                          capture_output=True, text=True, timeout=60, cwd=REPO)


def rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.strip()]


def test_topics_and_groups_commands(server: ServerProcess) -> None:
    r = gc(server, "topics", "create", "clicks", "--partitions", "3")
    assert r.returncode == 0 and "created (3 partitions)" in r.stdout
    assert gc(server, "topics", "create", "clicks", "--partitions", "3").returncode == 1
    assert ["clicks", "3"] in rows(gc(server, "topics", "list").stdout)

    producer = KafkaProducer(bootstrap_servers=server.bootstrap)
    for i in range(30):
        producer.send("clicks", key=b"k%d" % i, value=b"v", partition=i % 3)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer("clicks", bootstrap_servers=server.bootstrap, group_id="cli-group",
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=5000)
    got = 0
    for _ in consumer:
        got += 1
        if got == 30:
            break
    consumer.commit()

    live = gc(server, "groups", "describe", "cli-group")
    assert "STATE Stable" in live.stdout and "MEMBERS 1" in live.stdout
    offsets = rows(gc(server, "groups", "offsets", "cli-group").stdout)
    table = {(r[0], r[1]): r[2:5] for r in offsets if r[0] == "clicks"}
    assert table == {("clicks", str(p)): ["10", "10", "0"] for p in range(3)}
    refused = gc(server, "groups", "delete", "cli-group")
    assert refused.returncode == 1 and "NON_EMPTY_GROUP" in refused.stdout
    consumer.close()

    assert ["cli-group", "Empty", "consumer", "classic"] in rows(gc(server, "groups", "list").stdout)  # + TYPE
    dry = gc(server, "groups", "reset-offsets", "cli-group", "--topic", "clicks", "--shift-by", "-4")
    assert dry.returncode == 0 and "dry run" in dry.stdout
    assert rows(gc(server, "groups", "offsets", "cli-group").stdout)[2][2] == "10"  # unchanged
    done = gc(server, "groups", "reset-offsets", "cli-group", "--topic", "clicks", "--shift-by", "-4", "--execute")
    assert done.returncode == 0, done.stderr
    offsets = rows(gc(server, "groups", "offsets", "cli-group").stdout)
    assert {r[2] for r in offsets if r[0] == "clicks"} == {"6"}
    early = gc(server, "groups", "reset-offsets", "cli-group", "--topic", "clicks", "--to-earliest", "--execute")
    assert early.returncode == 0
    assert {r[2] for r in rows(gc(server, "groups", "offsets", "cli-group").stdout) if r[0] == "clicks"} == {"0"}

    deleted = gc(server, "groups", "delete", "cli-group", "no-such-group")
    assert deleted.returncode == 1
    assert ["cli-group", "deleted"] in rows(deleted.stdout)
    assert ["no-such-group", "GROUP_ID_NOT_FOUND"] in rows(deleted.stdout)
    assert gc(server, "topics", "delete", "clicks").returncode == 0
    assert ["clicks", "3"] not in rows(gc(server, "topics", "list").stdout)


def test_console_produce_and_consume(server: ServerProcess) -> None:
    assert gc(server, "topics", "create", "lines", "--partitions", "2").returncode == 0
    text = "".join(f"key{i % 3}:value-{i}\n" for i in range(30))
    produced = subprocess.run([sys.executable, "-m", "coordinator.cli", "produce", "lines", "--key-separator", ":",
                               "--compression", "gzip", "-b", server.bootstrap], input=text, capture_output=True,
                              text=True, timeout=60, cwd=REPO)
    assert produced.returncode == 0 and "produced 30 records" in produced.stderr
    everything = gc(server, "consume", "lines", "--from-beginning", "--timeout-ms", "2000", "--print-key")
    lines = everything.stdout.splitlines()
    assert sorted(lines) == sorted(f"key{i % 3}\tvalue-{i}" for i in range(30))
    # per key, records keep their order (one key lives on one partition)
    for k in range(3):
        mine = [ln.split("\t")[1] for ln in lines if ln.startswith(f"key{k}\t")]
        assert mine == [f"value-{i}" for i in range(30) if i % 3 == k]
    first = gc(server, "consume", "lines", "--group", "console", "--from-beginning", "--max-messages", "10")
    assert len(first.stdout.splitlines()) == 10
    rest = gc(server, "consume", "lines", "--group", "console", "--from-beginning", "--timeout-ms", "2000")
    assert len(rest.stdout.splitlines()) == 20  # the group resumed after what it committed
    assert set(first.stdout.splitlines()).isdisjoint(rest.stdout.splitlines())
