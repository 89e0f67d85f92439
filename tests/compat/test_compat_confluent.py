"""confluent-kafka 2.16.1 (librdkafka) end to end: admin CreateTopics, an idempotent gzip producer
(Produce v10 flexible), and a group of three consumer processes of which one is SIGKILLed mid-way."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from compat_support import PARTITIONS, Member, assert_scenario, keys, run_group_scenario
from server_process import ServerProcess  # type: ignore[import-not-found]

WORKER = str(Path(__file__).with_name("compat_consumer_worker.py"))


@pytest.mark.compat
def test_confluent_group_survives_a_killed_member(server: ServerProcess) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for fut in admin.create_topics([NewTopic("ck-topic", PARTITIONS, 1)]).values():
        assert fut.result(10) is None
    producer = Producer({"bootstrap.servers": server.bootstrap, "compression.type": "gzip", "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    failures: list[str] = []

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    def produce(lo: int, hi: int) -> None:
        for k in keys(lo, hi):
            producer.produce("ck-topic", key=k.encode(), value=f"value of {k}".encode(), on_delivery=delivered)
        assert producer.flush(20) == 0
        assert failures == []

    members = [Member(f"confluent-{i}", [sys.executable, WORKER, "confluent", server.bootstrap, "ck-topic",
                                          "ck-group"]) for i in range(3)]
    out = run_group_scenario(server.port, "ck-topic", "ck-group", produce, members, server.log)
    # librdkafka (confluent-kafka's client library) skips gzip for small batches and may commit a stale offset as it
    # closes right after a rebalance (seen: p3@1 after p3@250, at the new generation): see assert_scenario
    assert_scenario(out, may_skip_compression=True, close_may_commit_stale=True)
