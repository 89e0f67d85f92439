"""Helpers for the Spark suite: topics, reference producing/reading with kafka-python, the admin CLI.

- ``produce`` and ``kafka_read`` use kafka-python, independent of our client, so a round trip checks our
  bytes against a third-party implementation; ``fast_produce`` uses our Producer for bulk test data.
- ``group_offsets_cli`` runs ``groupcoord groups offsets`` as a user would and parses its table.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def make_topic(bootstrap: str, name: str, partitions: int) -> None:
    from client.admin import AdminClient

    with AdminClient(bootstrap) as admin:
        result = admin.create_topics({name: partitions})
        assert result[0].error_code == 0, result


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes, list[tuple[str, bytes]], int]]
            ) -> None:
    """kafka-python producer: (key, value, headers, partition) per record, acks=all, flushed."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        futures = [producer.send(topic, value=v, key=k, headers=h, partition=p) for k, v, h, p in records]
        producer.flush(30)
        for f in futures:
            f.get(10)
    finally:
        producer.close(10)


def fast_produce(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    """Our Producer (for bulk data whose production is not what the test checks)."""
    from client.producer import Producer

    with Producer(bootstrap, acks="all") as p:
        futures = [p.send(topic, v, key=None, partition=i % partitions) for i, v in enumerate(values)]
        p.flush(60)
        for f in futures:
            f.get(10)


def kafka_read(bootstrap: str, topic: str, expected: int, timeout_s: float = 20.0) -> list[Any]:
    """Every record of ``topic`` read with kafka-python (manual assignment from the beginning)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             auto_offset_reset="earliest", consumer_timeout_ms=2000)
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        consumer.assign([TopicPartition(topic, p) for p in parts])
        consumer.seek_to_beginning()
        out: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < expected and time.monotonic() < deadline:
            for recs in consumer.poll(timeout_ms=500).values():
                out += recs
        return out
    finally:
        consumer.close()


def group_offsets_cli(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[int, int, int]]:
    """``groupcoord groups offsets GROUP`` parsed: (topic, partition) -> (current, log end, lag)."""
    exe = Path(sys.executable).parent / "groupcoord"
    out = subprocess.run([str(exe), "groups", "offsets", "-b", bootstrap, group], capture_output=True, text=True,
                         timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    rows: dict[tuple[str, int], tuple[int, int, int]] = {}
    lines = out.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("TOPIC"))
    for line in lines[header + 1:]:
        cols = line.split()
        if len(cols) >= 5:
            rows[(cols[0], int(cols[1]))] = (int(cols[2]), int(cols[3]), int(cols[4]))
    return rows
