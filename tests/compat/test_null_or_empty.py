"""Null or empty, as Kafka's broker writes it (issue #26's sweep; decisions in each protocol/messages module's
docstring), and a transactional client refused at once instead of retrying forever."""

from __future__ import annotations

import asyncio

import pytest
from compat_support import call
from server_process import ServerProcess  # type: ignore[import-not-found]

from protocol.errors import ErrorCode

TXN_REFUSED = "transactions are not supported by this server"


def test_find_coordinator_error_message_by_version(server: ServerProcess) -> None:
    for v in (1, 2, 3):
        ok = call(server.port, 10, v, {"key": "g", "key_type": 0})
        assert (ok["error_code"], ok["error_message"], ok["port"]) == (0, "NONE", server.port), v
        txn = call(server.port, 10, v, {"key": "t", "key_type": 1})
        assert (txn["error_code"], txn["error_message"], txn["node_id"]) == \
            (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TXN_REFUSED, -1), v
    ok0 = call(server.port, 10, 0, {"key": "g"})
    assert (ok0["error_code"], ok0["port"]) == (0, server.port)
    for v in (4, 5, 6):
        got = call(server.port, 10, v, {"key_type": 0, "coordinator_keys": ["a", "b"]})["coordinators"]
        assert [(c["key"], c["error_code"], c["error_message"]) for c in got] == [("a", 0, None), ("b", 0, None)]
        txn = call(server.port, 10, v, {"key_type": 1, "coordinator_keys": ["t"]})["coordinators"]
        assert [(c["error_code"], c["error_message"]) for c in txn] == \
            [(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TXN_REFUSED)]


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
def test_confluent_transactional_producer_fails_at_once(server: ServerProcess) -> None:
    from confluent_kafka import KafkaException, Producer

    p = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": "txn-1"})
    with pytest.raises(KafkaException) as info:
        p.init_transactions(30)
    err = info.value.args[0]
    assert err.code() != err._TIMED_OUT, f"retried until the timeout instead of failing: {err}"
    assert TXN_REFUSED in err.str() and err.fatal(), err.str()  # librdkafka shows the broker's message


@pytest.mark.compat
def test_aiokafka_transactional_producer_fails_at_once(server: ServerProcess) -> None:
    import aiokafka
    from aiokafka.errors import KafkaError

    async def start() -> None:
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="txn-2",
                                      enable_idempotence=True)
        try:
            await p.start()
        finally:
            await p.stop()

    with pytest.raises(KafkaError) as info:  # a retrying client would end in asyncio's TimeoutError instead
        asyncio.run(asyncio.wait_for(start(), 30))
    assert "TransactionalIdAuthorizationFailed" in type(info.value).__name__, repr(info.value)
