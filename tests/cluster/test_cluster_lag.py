"""Consumer lag in cluster mode (issue #37): a group's coordinator shows the exact lag of partitions led by the
other nodes (it asks their leaders: ListOffsets for the ends, Fetch for the record timestamps).

Three real `groupcoord serve` nodes through a real ZooKeeper; a topic of 3 partitions with replication factor 2
(each node misses one of them, and leads at most one); a kafka-python producer writes records with known
timestamps; a simple group commits offsets; the coordinator's /metrics must show log end minus committed,
summed, and the age of the oldest record not consumed. After the coordinator's SIGKILL the group's new
coordinator shows the same lag.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from cluster_nodes import find_coordinator, logs, start_nodes, stop_nodes, wait_for
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata
from server_process import ServerProcess
from test_cluster_user_topics import agreed_topic, create_topic

TOPIC = "lag-spread"
GROUP = "lag-group"


def gauge(node: ServerProcess, name: str, group: str, topic: str) -> float | None:
    m = re.search(rf'^{name}\{{group="{re.escape(group)}",topic="{re.escape(topic)}"\}} (\S+)$', node.scrape(), re.M)
    return float(m.group(1)) if m else None


def test_the_coordinator_shows_the_lag_of_partitions_led_elsewhere(tmp_path: Path, zk_connect: str) -> None:
    nodes = start_nodes(tmp_path, zk_connect, [1, 2, 3], "--metrics-lag-interval-ms", "300")
    try:
        assert create_topic(nodes[1], TOPIC, 3, 2)["error_code"] == 0  # two replicas: each node misses one
        parts = agreed_topic(nodes, TOPIC)
        assert len({p["leader_id"] for p in parts.values()}) >= 2, parts  # spread: some led elsewhere
        now_ms = int(time.time() * 1000)
        stamps = {p: [now_ms - 90_000 + 1000 * p + 10 * i for i in range(20)] for p in range(3)}
        producer = KafkaProducer(bootstrap_servers=nodes[1].bootstrap, acks="all")
        for p, ts in stamps.items():
            for i, t in enumerate(ts):
                producer.send(TOPIC, b"r%d" % i, partition=p, timestamp_ms=t)
        producer.flush()
        producer.close()

        err, coordinator = wait_for("a coordinator", lambda: (lambda r: r if r[0] == 0 else None)(
            find_coordinator(nodes[1], GROUP)), timeout=30)
        committed = {0: 5, 1: 12, 2: 0}
        consumer = KafkaConsumer(bootstrap_servers=nodes[coordinator].bootstrap, group_id=GROUP,
                                 enable_auto_commit=False)
        try:
            consumer.commit({TopicPartition(TOPIC, p): OffsetAndMetadata(o, "", -1) for p, o in committed.items()})
        finally:
            consumer.close()
        led_elsewhere = [p for p, e in parts.items() if e["leader_id"] != coordinator]
        assert led_elsewhere

        want = sum(20 - o for o in committed.values())
        coord = nodes[coordinator]
        wait_for(f"lag {want} on node {coordinator}",
                 lambda: gauge(coord, "groupcoord_group_lag_records", GROUP, TOPIC) == want or None, timeout=30,
                 describe=lambda: coord.scrape()[-3000:] + logs(nodes))
        oldest = min(stamps[p][o] for p, o in committed.items())
        age = wait_for("lag seconds", lambda: gauge(coord, "groupcoord_group_lag_seconds", GROUP, TOPIC), timeout=30)
        assert abs(age - (time.time() * 1000 - oldest) / 1000) < 2, (age, oldest)
        # the other nodes coordinate nothing of it: no series there
        for n, node in nodes.items():
            if n != coordinator:
                assert gauge(node, "groupcoord_group_lag_records", GROUP, TOPIC) is None

        # the coordinator is SIGKILLed: the group's new coordinator shows the same lag (every partition still
        # has a live replica; the committed offsets are replicated)
        nodes[coordinator].kill()
        live = {n: node for n, node in nodes.items() if n != coordinator}
        asked = next(iter(live.values()))
        err, new = wait_for("a new coordinator", lambda: (lambda r: r if r[0] == 0 and r[1] in live else None)(
            find_coordinator(asked, GROUP)), timeout=40, describe=lambda: logs(live))
        wait_for(f"lag {want} on node {new}",
                 lambda: gauge(live[new], "groupcoord_group_lag_records", GROUP, TOPIC) == want or None,
                 timeout=40, describe=lambda: live[new].scrape()[-3000:] + logs(live))
    finally:
        stop_nodes(nodes)
