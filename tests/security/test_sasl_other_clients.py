"""confluent-kafka (librdkafka 2.x), aiokafka and kcat against the secured server with their ordinary
settings (``security.protocol``, ``sasl.mechanism``, ``sasl.username``/``sasl.password``,
``ssl.ca.location``; aiokafka's ``ssl_context``): each produces, consumes in a group and commits over
SASL_SSL with SCRAM-SHA-512 and over SASL_PLAINTEXT with PLAIN; a wrong password is each client's own
authentication error, and the server goes on serving the others."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import uuid
from typing import Any

import pytest
from security_support import USERS, bootstrap

from client import AdminClient, NewTopic

CASES = [("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-256")]


def new_topic(server: Any, partitions: int = 3) -> str:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    with AdminClient(server.bootstrap) as admin:  # the PLAINTEXT listener
        admin.create_topics([NewTopic(topic, partitions)])
    return topic


def committed_total(server: Any, group: str) -> int:
    with AdminClient(server.bootstrap) as admin:
        return sum(o.offset for o in admin.list_group_offsets(group).values())


def rdkafka_conf(server: Any, pki: Any, listener: str, mechanism: str, password: str | None = None
                 ) -> dict[str, Any]:
    conf = {"bootstrap.servers": bootstrap(server, listener), "security.protocol": listener,
            "sasl.mechanism": mechanism, "sasl.username": "alice",
            "sasl.password": USERS["alice"] if password is None else password}
    if listener.endswith("SSL"):
        conf["ssl.ca.location"] = str(pki.ca)
    return conf


@pytest.mark.parametrize(("listener", "mechanism"), CASES)
def test_confluent_kafka_produces_consumes_and_commits(secured: Any, listener: str, mechanism: str) -> None:
    from confluent_kafka import Consumer, Producer

    server, pki = secured
    topic, group = new_topic(server), f"g-{uuid.uuid4().hex[:8]}"
    conf = rdkafka_conf(server, pki, listener, mechanism)
    producer = Producer({**conf, "acks": "all"})
    for i in range(30):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    assert producer.flush(20) == 0
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        seen: set[bytes] = set()
        for _ in range(150):  # bounded: 150 polls of at most 0.2 s
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.add(msg.value())
            if len(seen) == 30:
                break
        assert seen == {b"v%d" % i for i in range(30)}
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert committed_total(server, group) == 30


def test_confluent_kafka_wrong_password_is_its_authentication_error(secured: Any) -> None:
    from confluent_kafka import KafkaError, Producer

    server, pki = secured
    errors: list[Any] = []
    conf = rdkafka_conf(server, pki, "SASL_SSL", "SCRAM-SHA-512", password="nope")
    producer = Producer({**conf, "error_cb": errors.append})  # librdkafka reports it to error_cb while polled
    for _ in range(50):  # bounded: 50 polls of at most 0.1 s
        producer.poll(0.1)
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            break
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth and "Authentication failed" in auth[0].str(), errors
    assert server.alive()


async def _aiokafka_round_trip(server: Any, pki: Any, listener: str, mechanism: str, topic: str, group: str
                               ) -> set[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    context = ssl.create_default_context(cafile=str(pki.ca)) if listener.endswith("SSL") else None
    conf = {"bootstrap_servers": bootstrap(server, listener), "security_protocol": listener,
            "sasl_mechanism": mechanism, "sasl_plain_username": "alice", "sasl_plain_password": USERS["alice"],
            "ssl_context": context}
    producer = AIOKafkaProducer(acks="all", **conf)
    await producer.start()
    try:
        for i in range(30):
            await producer.send_and_wait(topic, key=b"k%d" % i, value=b"v%d" % i)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                                **conf)
    await consumer.start()
    seen: set[bytes] = set()
    try:
        async with asyncio.timeout(20):
            async for msg in consumer:
                seen.add(msg.value)
                if len(seen) == 30:
                    break
        await consumer.commit()
    finally:
        await consumer.stop()
    return seen


@pytest.mark.parametrize(("listener", "mechanism"), CASES)
def test_aiokafka_produces_consumes_and_commits(secured: Any, listener: str, mechanism: str) -> None:
    server, pki = secured
    topic, group = new_topic(server), f"g-{uuid.uuid4().hex[:8]}"
    seen = asyncio.run(_aiokafka_round_trip(server, pki, listener, mechanism, topic, group))
    assert seen == {b"v%d" % i for i in range(30)}
    assert committed_total(server, group) == 30


def test_aiokafka_wrong_password_is_its_authentication_error(secured: Any, caplog: pytest.LogCaptureFixture
                                                             ) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed

    server, pki = secured

    async def attempt() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap(server, "SASL_SSL"), security_protocol="SASL_SSL",
                                    sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                                    sasl_plain_password="nope", request_timeout_ms=5000,
                                    ssl_context=ssl.create_default_context(cafile=str(pki.ca)))
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises((SaslAuthenticationFailed, KafkaConnectionError)):
        asyncio.run(attempt())
    # aiokafka logs the broker's error 58 and gives up bootstrapping
    assert "SaslAuthenticationFailed: Authentication failed" in caplog.text


def kcat_args(server: Any, pki: Any, listener: str, mechanism: str, password: str | None = None) -> list[str]:
    kcat = shutil.which("kcat")
    assert kcat, "kcat must be installed (make test installs it with apt-get)"
    args = [kcat, "-b", bootstrap(server, listener), "-X", f"security.protocol={listener}",
            "-X", f"sasl.mechanisms={mechanism}", "-X", "sasl.username=alice",
            "-X", f"sasl.password={USERS['alice'] if password is None else password}"]
    if listener.endswith("SSL"):
        args += ["-X", f"ssl.ca.location={pki.ca}"]
    return args


@pytest.mark.parametrize(("listener", "mechanism"), CASES[:2])
def test_kcat_produces_and_consumes_in_a_group(secured: Any, listener: str, mechanism: str) -> None:
    server, pki = secured
    topic, group = new_topic(server), f"g-{uuid.uuid4().hex[:8]}"
    base = kcat_args(server, pki, listener, mechanism)
    lines = "".join(f"k{i}:v{i}\n" for i in range(30))
    produced = subprocess.run([*base, "-P", "-t", topic, "-K:", "-X", "acks=all"], input=lines, text=True,
                              capture_output=True, timeout=30, check=False)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run([*base, "-G", group, "-o", "beginning", "-e", "-f", r"%s\n",
                               "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100", topic],
                              text=True, capture_output=True, timeout=60, check=False)
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.split()) == sorted(f"v{i}" for i in range(30))


def test_kcat_wrong_password_fails_with_its_authentication_error(secured: Any) -> None:
    server, pki = secured
    listed = subprocess.run([*kcat_args(server, pki, "SASL_SSL", "SCRAM-SHA-512", password="nope"), "-L",
                             "-m", "5"], text=True, capture_output=True, timeout=30, check=False)
    assert listed.returncode != 0
    assert "Authentication failed" in listed.stderr or "SASL authentication error" in listed.stderr, listed.stderr
