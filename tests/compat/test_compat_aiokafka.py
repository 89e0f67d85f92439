"""aiokafka 0.14.0 end to end (never flexible versions): admin CreateTopics v3, a gzip producer (Produce v7),
and a group of three consumer processes of which one is SIGKILLed mid-way."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from compat_support import PARTITIONS, Member, assert_scenario, keys, run_group_scenario
from server_process import ServerProcess  # type: ignore[import-not-found]

WORKER = str(Path(__file__).with_name("compat_consumer_worker.py"))


async def _create(bootstrap: str, topic: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="compat-admin")
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        await admin.close()


async def _produce(bootstrap: str, topic: str, lo: int, hi: int) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip", acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(topic, key=k.encode(), value=f"value of {k}".encode())
                   for k in keys(lo, hi)]
        metas = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    assert all(m.offset >= 0 for m in metas)


@pytest.mark.compat
def test_aiokafka_group_survives_a_killed_member(server: ServerProcess) -> None:
    # The pytest session runs trio; aiokafka gets its own asyncio loop per call.
    asyncio.run(_create(server.bootstrap, "ak-topic"))
    members = [Member(f"aiokafka-{i}", [sys.executable, WORKER, "aiokafka", server.bootstrap, "ak-topic",
                                         "ak-group"]) for i in range(3)]
    out = run_group_scenario(server.port, "ak-topic", "ak-group",
                             lambda lo, hi: asyncio.run(_produce(server.bootstrap, "ak-topic", lo, hi)),
                             members, server.log)
    assert_scenario(out)
