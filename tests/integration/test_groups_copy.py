"""`groupcoord groups copy SRC DST` (issue #37): a group's committed offsets copied to an empty group, on the real
server with kafka-python: a dry run first (nothing committed), then --execute (DST's offsets, metadata
included, equal SRC's); a DST that already has offsets, or a SRC without any, is refused with a clear message
and changes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata
from server_process import REPO, ServerProcess

TOPIC = "copied"


def committed(bootstrap: str, group: str) -> dict[int, tuple[int, str]]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        got = admin.list_group_offsets({group: None})[group]
    finally:
        admin.close()
    return {tp.partition: (o.offset, o.metadata) for tp, o in got.items() if tp.topic == TOPIC and o.offset >= 0}


def cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coordinator.cli", "groups", "copy", *args, "-b", bootstrap],
                          capture_output=True, text=True, timeout=60, cwd=REPO)


def test_groups_copy_copies_into_an_empty_group_only(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data").start().wait_loaded()
    try:
        admin = KafkaAdminClient(bootstrap_servers=srv.bootstrap)
        admin.create_topics([NewTopic(TOPIC, 2, 1)])
        admin.close()
        consumer = KafkaConsumer(bootstrap_servers=srv.bootstrap, group_id="src", enable_auto_commit=False)
        consumer.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(5, "m0", -1),
                         TopicPartition(TOPIC, 1): OffsetAndMetadata(7, "m1", -1)})
        consumer.close()
        want = {0: (5, "m0"), 1: (7, "m1")}
        assert committed(srv.bootstrap, "src") == want

        dry = cli(srv.bootstrap, "src", "dst")
        assert dry.returncode == 0 and "(dry run" in dry.stdout, dry.stdout + dry.stderr
        assert committed(srv.bootstrap, "dst") == {}

        done = cli(srv.bootstrap, "src", "dst", "--execute")
        assert done.returncode == 0 and "copied 2 offsets from src to dst" in done.stdout, done.stdout + done.stderr
        assert committed(srv.bootstrap, "dst") == want

        again = cli(srv.bootstrap, "src", "dst", "--execute")
        assert again.returncode == 1 and "group dst is not empty" in again.stderr, again.stdout + again.stderr
        none = cli(srv.bootstrap, "nobody", "dst2", "--execute")
        assert none.returncode == 1 and "group nobody has no committed offsets" in none.stderr, none.stderr
        assert committed(srv.bootstrap, "dst2") == {}
    finally:
        srv.stop()
