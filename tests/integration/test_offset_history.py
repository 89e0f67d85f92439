"""Offset history and point-in-time rewind (issue #37 item 4) on the real server, with kafka-python committing:

- `groupcoord groups offsets G --history` shows each partition's commits newest first, with the committer's
  client id and host; a re-commit of the same offset adds nothing.
- `groupcoord groups reset-offsets G --to-commit-time T` at a time between two commits: the dry run shows the
  earlier offsets and changes nothing; --execute restores them; the reset appears in --history with who did it.
- After a SIGKILL, the server restarted on the same data dir (the replay a cluster follower also does) shows the
  same offset history.
"""

from __future__ import annotations

import getpass
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata
from server_process import REPO, ServerProcess

from client.admin import AdminClient
from client.consumer_protocol import TopicPartition as TP

TOPIC = "rewound"
GROUP = "rewind"


def cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coordinator.cli", "groups", *args, "-b", bootstrap],
                          capture_output=True, text=True, timeout=60, cwd=REPO)


def committed(bootstrap: str) -> dict[int, int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        got = admin.list_group_offsets({GROUP: None})[GROUP]
    finally:
        admin.close()
    return {tp.partition: o.offset for tp, o in got.items() if tp.topic == TOPIC}


def history(bootstrap: str) -> dict[TP, list]:
    with AdminClient(bootstrap, request_timeout_ms=15000) as admin:
        h = admin.offset_history(GROUP)
    assert h.error_code == 0
    return h.partitions


def commit(consumer: KafkaConsumer, offsets: dict[int, int]) -> None:
    consumer.commit({TopicPartition(TOPIC, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})
    time.sleep(0.005)  # the next commit gets a later commit time (ms): a time between two commits exists


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


# history on (off by default), and the commits here are close together: record each one
EVERY_MOVE = ("--offsets-history-size", "16", "--offsets-history-min-interval-ms", "0")


def test_history_and_rewind_to_a_commit_time_survive_a_kill(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", *EVERY_MOVE).start().wait_loaded()
    try:
        admin = KafkaAdminClient(bootstrap_servers=srv.bootstrap)
        admin.create_topics([NewTopic(TOPIC, 2, 1)])
        admin.close()
        consumer = KafkaConsumer(bootstrap_servers=srv.bootstrap, group_id=GROUP, client_id="app-1",
                                 enable_auto_commit=False)
        commit(consumer, {0: 10, 1: 100})
        commit(consumer, {0: 20, 1: 150})
        commit(consumer, {0: 20})  # the same offset again: not a new entry
        commit(consumer, {0: 30})  # one partition: the server's hot commit path
        consumer.close()
        assert committed(srv.bootstrap) == {0: 30, 1: 150}

        kept = history(srv.bootstrap)
        assert [e.offset for e in kept[TP(TOPIC, 0)]] == [30, 20, 10]
        assert [e.offset for e in kept[TP(TOPIC, 1)]] == [150, 100]
        assert {(e.client_id, e.member_id, e.generation) for es in kept.values() for e in es} == {("app-1", "", -1)}
        assert all("127.0.0.1" in e.client_host for es in kept.values() for e in es)
        shown = cli(srv.bootstrap, "offsets", GROUP, "--history")
        assert shown.returncode == 0, shown.stdout + shown.stderr
        assert "CLIENT-ID" in shown.stdout and shown.stdout.count("app-1") == 5, shown.stdout

        first = kept[TP(TOPIC, 0)][-1]
        second = kept[TP(TOPIC, 0)][-2]
        assert first.commit_ms < second.commit_ms
        at = iso(first.commit_ms)  # between the first two commits
        dry = cli(srv.bootstrap, "reset-offsets", GROUP, "--to-commit-time", at)
        assert dry.returncode == 0 and "(dry run" in dry.stdout, dry.stdout + dry.stderr
        assert committed(srv.bootstrap) == {0: 30, 1: 150}
        rows = {tuple(line.split()[:4]) for line in dry.stdout.splitlines()[1:] if line.startswith(TOPIC)}
        assert rows == {(TOPIC, "0", "30", "10"), (TOPIC, "1", "150", "100")}, dry.stdout

        done = cli(srv.bootstrap, "reset-offsets", GROUP, "--to-commit-time", at, "--execute")
        assert done.returncode == 0, done.stdout + done.stderr
        assert committed(srv.bootstrap) == {0: 10, 1: 100}
        kept = history(srv.bootstrap)
        who = f"groupcoord-reset-offsets/{getpass.getuser()}"
        for tp, want in ((TP(TOPIC, 0), [10, 30, 20, 10]), (TP(TOPIC, 1), [100, 150, 100])):
            assert [e.offset for e in kept[tp]] == want
            assert (kept[tp][0].client_id, kept[tp][0].member_id, kept[tp][0].generation) == (who, "", -1)
        shown = cli(srv.bootstrap, "offsets", GROUP, "--history")
        assert shown.stdout.count(who) == 2, shown.stdout

        too_early = cli(srv.bootstrap, "reset-offsets", GROUP, "--to-commit-time", iso(first.commit_ms - 1))
        assert too_early.returncode == 1 and "no partition of rewind has a kept commit" in too_early.stderr

        srv.kill()
        srv = ServerProcess(tmp_path / "data", *EVERY_MOVE).start().wait_loaded()
        assert history(srv.bootstrap) == kept
        assert committed(srv.bootstrap) == {0: 10, 1: 100}
    finally:
        srv.stop()
