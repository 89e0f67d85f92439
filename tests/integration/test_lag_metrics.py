"""Consumer lag at the coordinator (issue #37): the lag gauges of a real server, moved by real clients.

Checked on the real daemon over TCP, scraped from its /metrics:
- A kafka-python group that committed less than a kafka-python producer wrote: groupcoord_group_lag_records
  equals log end minus committed, summed per topic, exactly; it rises as more is written and falls to 0
  once the group commits the ends. groupcoord_group_lag_seconds is the age of the oldest record not
  consumed (the producer sets the records' timestamps) within a second, and 0 when caught up.
- metrics.lag.per.partition: one series per partition as well; `groupcoord groups offsets` shows the same lag
  and a LAG-SECONDS column.
- Cardinality: 1,500 groups with lag, metrics.lag.max.groups 1,000: exactly 1,000 group label values of
  their own plus "_other", and the series of a topic still sum to every group's lag; the same bound for
  groupcoord_group_offset_commits_total (the first 1,000 groups, 500 commits under "_other").
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata
from server_process import REPO, ServerProcess, read_frame

from protocol import codec

TOPIC = "lagged"
OTHER_TOPIC = "crowd"
SERIES = re.compile(r'^(groupcoord_group_(?:partition_)?lag_(?:records|seconds))\{([^}]*)\} (\S+)$', re.M)


def lag_series(srv: ServerProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for name, labels, value in SERIES.findall(srv.scrape()):
        pairs = tuple(sorted((k, v) for k, v in re.findall(r'(\w+)="([^"]*)"', labels)))
        out[(name, pairs)] = float(value)
    return out


def gauge(srv: ServerProcess, name: str, **labels: str) -> float | None:
    return lag_series(srv).get((name, tuple(sorted(labels.items()))))


def wait_until(what: str, check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def commit(bootstrap: str, group: str, offsets: dict[int, int], topic: str = TOPIC) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})
    finally:
        consumer.close()


def test_lag_gauges_follow_a_slow_group_exactly_and_fall_to_zero(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", "--metrics-lag-interval-ms", "200", "--metrics-lag-per-partition",
                        "true").start().wait_loaded()
    try:
        admin = KafkaAdminClient(bootstrap_servers=srv.bootstrap)
        admin.create_topics([NewTopic(TOPIC, 2, 1)])
        admin.close()
        now_ms = int(time.time() * 1000)
        stamps = {0: [now_ms - 60_000 + 100 * i for i in range(100)], 1: [now_ms - 30_000 + 100 * i for i in range(50)]}
        producer = KafkaProducer(bootstrap_servers=srv.bootstrap, acks="all")
        for p, ts in stamps.items():
            for i, t in enumerate(ts):
                producer.send(TOPIC, b"v%d" % i, partition=p, timestamp_ms=t)
        producer.flush()

        # the group has read 30 records of partition 0 and none of partition 1
        consumer = KafkaConsumer(bootstrap_servers=srv.bootstrap, group_id="slow", enable_auto_commit=False,
                                 auto_offset_reset="earliest", consumer_timeout_ms=5000)
        consumer.assign([TopicPartition(TOPIC, 0)])
        got = []
        for msg in consumer:
            got.append(msg)
            if len(got) == 30:
                break
        consumer.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(30, "", -1),
                         TopicPartition(TOPIC, 1): OffsetAndMetadata(0, "", -1)})
        consumer.close()
        wait_until("lag 70 + 50", lambda: gauge(srv, "groupcoord_group_lag_records", group="slow", topic=TOPIC) == 120)
        seconds = gauge(srv, "groupcoord_group_lag_seconds", group="slow", topic=TOPIC)
        oldest = min(stamps[0][30], stamps[1][0])  # the oldest record not consumed: partition 0's 31st
        assert seconds is not None and abs(seconds - (time.time() * 1000 - oldest) / 1000) < 1.5, seconds
        assert gauge(srv, "groupcoord_group_partition_lag_records", group="slow", topic=TOPIC, partition="0") == 70
        assert gauge(srv, "groupcoord_group_partition_lag_records", group="slow", topic=TOPIC, partition="1") == 50
        p1_age = gauge(srv, "groupcoord_group_partition_lag_seconds", group="slow", topic=TOPIC, partition="1")
        assert p1_age is not None and abs(p1_age - (time.time() * 1000 - stamps[1][0]) / 1000) < 1.5, p1_age

        # `groupcoord groups offsets` shows the same lag and, per partition, the age of the oldest record not read
        shown = subprocess.run([sys.executable, "-m", "coordinator.cli", "groups", "offsets", "slow", "-b",
                                srv.bootstrap], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert shown.returncode == 0, shown.stderr
        header, *rows = [ln.split() for ln in shown.stdout.splitlines() if ln.startswith(("TOPIC", TOPIC))]
        assert header[:6] == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "LAG-SECONDS"]
        by_partition = {int(r[1]): (int(r[4]), float(r[5])) for r in rows}
        now = time.time() * 1000
        assert by_partition[0][0] == 70 and abs(by_partition[0][1] - (now - stamps[0][30]) / 1000) < 2
        assert by_partition[1][0] == 50 and abs(by_partition[1][1] - (now - stamps[1][0]) / 1000) < 2

        # the producer goes on writing: the lag rises by what it wrote
        for _ in range(10):
            producer.send(TOPIC, b"more", partition=1)
        producer.flush()
        producer.close()
        wait_until("lag 130", lambda: gauge(srv, "groupcoord_group_lag_records", group="slow", topic=TOPIC) == 130)

        # the group catches up: 0 records, 0 seconds
        commit(srv.bootstrap, "slow", {0: 100, 1: 60})
        wait_until("lag 0", lambda: gauge(srv, "groupcoord_group_lag_records", group="slow", topic=TOPIC) == 0)
        assert gauge(srv, "groupcoord_group_lag_seconds", group="slow", topic=TOPIC) == 0
        assert gauge(srv, "groupcoord_group_partition_lag_records", group="slow", topic=TOPIC, partition="0") is None
        # two commits of two partitions each, counted for the group
        assert re.search(r'^groupcoord_group_offset_commits_total\{group="slow"\} 4\.0$', srv.scrape(), re.M)
    finally:
        srv.stop()


def commit_frames(count: int) -> list[bytes]:
    """Group g-i commits offset i % 7 of partition 0 of OTHER_TOPIC (its end is 10: lag 10 - i % 7)."""
    return [codec.encode_request(8, 8, i, "lag", {
        "group_id": f"g-{i}", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": OTHER_TOPIC, "partitions": [{"partition_index": 0, "committed_offset": i % 7,
                                                         "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        for i in range(count)]


def test_at_most_max_groups_get_series_of_their_own_and_the_rest_sum_under_other(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", "--metrics-lag-interval-ms", "200").start().wait_loaded()
    try:
        admin = KafkaAdminClient(bootstrap_servers=srv.bootstrap)
        admin.create_topics([NewTopic(OTHER_TOPIC, 1, 1)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=srv.bootstrap, acks="all")
        for _ in range(10):
            producer.send(OTHER_TOPIC, b"x", partition=0)
        producer.flush()
        producer.close()
        frames = commit_frames(1500)
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
            for start in range(0, len(frames), 100):
                chunk = frames[start:start + 100]
                s.sendall(b"".join(chunk))
                for _ in chunk:
                    payload = read_frame(s)
                    assert payload is not None
                    _, body = codec.decode_response(8, 8, payload)
                    assert body["topics"][0]["partitions"][0]["error_code"] == 0

        total = sum(10 - i % 7 for i in range(1500))

        def crowd() -> dict[str, float] | None:  # a computation after the last commit: every group counted
            got = {dict(labels)["group"]: v for (name, labels), v in lag_series(srv).items()
                   if name == "groupcoord_group_lag_records" and dict(labels)["topic"] == OTHER_TOPIC}
            return got if sum(got.values()) == total else None

        series = wait_until("every group's lag", crowd)
        assert len(series) == 1001 and "_other" in series
        commits = {g: float(v) for g, v in re.findall(r'^groupcoord_group_offset_commits_total\{group="([^"]*)"\} '
                                                       r'(\S+)$', srv.scrape(), re.M)}
        assert len(commits) == 1001 and commits["_other"] == 500 and sum(commits.values()) == 1500
        # the most lagging first: every group committed at offset 0 (lag 10) has series of its own
        assert all(f"g-{i}" in series for i in range(0, 1500, 7))
    finally:
        srv.stop()
