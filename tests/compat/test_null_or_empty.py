"""Null or empty, as Kafka's broker writes it (issue #26's sweep; decisions in each protocol/messages module's
docstring); a coordinator key type we do not serve refused at once, and transactional clients served."""

from __future__ import annotations

import asyncio

import pytest
from compat_support import call
from server_process import ServerProcess  # type: ignore[import-not-found]

from protocol.errors import ErrorCode


def test_find_coordinator_error_message_by_version(server: ServerProcess) -> None:
    for v in (1, 2, 3):
        ok = call(server.port, 10, v, {"key": "g", "key_type": 0})
        assert (ok["error_code"], ok["error_message"], ok["port"]) == (0, "NONE", server.port), v
        txn = call(server.port, 10, v, {"key": "t", "key_type": 1})  # the transaction coordinator: this node
        assert (txn["error_code"], txn["error_message"], txn["port"]) == (0, "NONE", server.port), v
    ok0 = call(server.port, 10, 0, {"key": "g"})
    assert (ok0["error_code"], ok0["port"]) == (0, server.port)
    for v in (4, 5, 6):
        got = call(server.port, 10, v, {"key_type": 0, "coordinator_keys": ["a", "b"]})["coordinators"]
        assert [(c["key"], c["error_code"], c["error_message"]) for c in got] == [("a", 0, None), ("b", 0, None)]
        txn = call(server.port, 10, v, {"key_type": 1, "coordinator_keys": ["t"]})["coordinators"]
        assert [(c["error_code"], c["error_message"], c["port"]) for c in txn] == [(0, None, server.port)]
    share = call(server.port, 10, 6, {"key_type": 2, "coordinator_keys": ["s"]})["coordinators"]  # no share groups
    assert [(c["error_code"], c["node_id"]) for c in share] == [(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)]


def test_delete_unknown_topic_and_list_unknown_partition(server: ServerProcess) -> None:
    got = call(server.port, 20, 5, {"topic_names": ["nope"], "timeout_ms": 1000})["responses"]
    assert [(r["name"], r["error_code"]) for r in got] == [("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert got[0]["error_message"], "Kafka writes the error's message"
    body = {"replica_id": -1, "isolation_level": 0,
            "topics": [{"name": "nope", "partitions": [{"partition_index": 0, "timestamp": -1}]}]}
    part = call(server.port, 2, 5, body)["topics"][0]["partitions"][0]
    assert (part["error_code"], part["offset"], part["timestamp"], part["leader_epoch"]) == \
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1)


@pytest.mark.compat
def test_confluent_transactional_producer_is_served(server: ServerProcess) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": "txn-1"})
    p.init_transactions(30)
    p.begin_transaction()
    p.abort_transaction(30)  # nothing sent: completes locally, as librdkafka does for an empty transaction


@pytest.mark.compat
def test_aiokafka_transactional_producer_is_served(server: ServerProcess) -> None:
    import aiokafka

    async def start() -> None:
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="txn-2",
                                      enable_idempotence=True)
        await p.start()
        try:
            async with p.transaction():
                pass
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(start(), 30))
