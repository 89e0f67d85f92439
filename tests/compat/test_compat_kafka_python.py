"""kafka-python 3.0.12 end to end: admin CreateTopics, an idempotent gzip producer, and a group of three
consumer processes of which one is SIGKILLed mid-way (see compat_support.run_group_scenario)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from compat_support import PARTITIONS, Member, assert_scenario, keys, run_group_scenario
from server_process import ServerProcess  # type: ignore[import-not-found]

WORKER = str(Path(__file__).with_name("compat_consumer_worker.py"))


@pytest.mark.compat
def test_kafka_python_group_survives_a_killed_member(server: ServerProcess) -> None:
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, client_id="compat-admin")
    try:
        admin.create_topics([NewTopic("kp-topic", PARTITIONS, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, compression_type="gzip", acks="all",
                             linger_ms=5)

    def produce(lo: int, hi: int) -> None:
        futures = [producer.send("kp-topic", key=k.encode(), value=f"value of {k}".encode())
                   for k in keys(lo, hi)]
        producer.flush(20)
        assert all(f.get(timeout=1).offset >= 0 for f in futures)

    members = [Member(f"kafka-python-{i}", [sys.executable, WORKER, "kafka-python", server.bootstrap,
                                             "kp-topic", "kp-group"]) for i in range(3)]
    try:
        out = run_group_scenario(server.port, "kp-topic", "kp-group", produce, members, server.log)
    finally:
        producer.close(5)
    assert_scenario(out, may_skip_compression=True)
