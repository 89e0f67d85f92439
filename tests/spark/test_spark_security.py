"""The ``groupcoord`` data source over a secured listener with Spark's Kafka security options
(``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``,
``kafka.ssl.truststore.location``, librdkafka's ``kafka.sasl.username``/``password``): a batch read over
SASL_SSL with SCRAM-SHA-512 and a batch write over SASL_PLAINTEXT with PLAIN, against a secured server of
this module's own (tests/security/security_support.py). The option parsing itself is checked without Spark."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "security"))

from security_support import USERS, bootstrap, start_secured

from client import AdminClient, Consumer, NewTopic, Producer
from client.security import PLAINTEXT, SecurityConfig
from spark_bridge.options import OptionsError, parse_read, parse_write

LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL")
JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
        f'password="{USERS["alice"]}";')


def scram_options(ca: Path) -> dict[str, str]:
    return {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": JAAS, "kafka.ssl.truststore.location": str(ca)}


PLAIN_OPTIONS = {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
                 "kafka.sasl.username": "bob", "kafka.sasl.password": USERS["bob"]}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    server, pki = start_secured(tmp_path_factory.mktemp("spark-secured"), listeners=LISTENERS)
    try:
        yield server, pki
    finally:
        server.stop()


# ---------------------------------------------------------------------------- options (no Spark)
def test_security_options_become_one_security_config(tmp_path: Path) -> None:
    read = parse_read({"kafka.bootstrap.servers": "h:1", "subscribe": "t", **scram_options(tmp_path / "ca.pem")},
                      streaming=False)
    assert read.security == SecurityConfig("SASL_SSL", "SCRAM-SHA-512", "alice", USERS["alice"],
                                           ssl_cafile=str(tmp_path / "ca.pem"))
    assert USERS["alice"] not in repr(read)
    write = parse_write({"kafka.bootstrap.servers": "h:1", "topic": "t", "KAFKA.SECURITY.PROTOCOL": "sasl_plaintext",
                         **{k: v for k, v in PLAIN_OPTIONS.items() if k != "kafka.security.protocol"},
                         "kafka.ssl.endpoint.identification.algorithm": ""})
    assert write.security == SecurityConfig("SASL_PLAINTEXT", "PLAIN", "bob", USERS["bob"], ssl_check_hostname=False)
    assert parse_read({"kafka.bootstrap.servers": "h:1", "subscribe": "t"}, streaming=True).security == PLAINTEXT


@pytest.mark.parametrize(("options", "problem"), [
    ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN"},
     r"needs a username and password \(kafka\.sasl\.jaas\.config, or kafka\.sasl\.username"),
    ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.jaas.config": JAAS}, r"needs kafka\.sasl\.mechanism"),
    ({"kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "JKS"}, r"kafka\.ssl\.truststore\.type=JKS"),
    ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
      "kafka.sasl.jaas.config": "x.PlainLoginModule required username=\"a\";"}, "needs password"),
    ({"kafka.sasl.kerberos.service.name": "kafka"}, "unknown option 'kafka.sasl.kerberos.service.name'"),
])
def test_bad_security_options_are_options_errors(options: dict[str, str], problem: str) -> None:
    with pytest.raises(OptionsError, match=problem):
        parse_read({"kafka.bootstrap.servers": "h:1", "subscribe": "t", **options}, streaming=False)


# ---------------------------------------------------------------------------- Spark over SASL
def test_batch_read_over_sasl_ssl_and_write_over_sasl_plaintext(spark: Any, secured: tuple[Any, Any]) -> None:
    server, pki = secured
    src, dst = f"t-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    scram = SecurityConfig("SASL_SSL", "SCRAM-SHA-512", "alice", USERS["alice"], ssl_cafile=str(pki.ca))
    with AdminClient(bootstrap(server, "SASL_SSL"), security=scram) as admin:
        admin.create_topics([NewTopic(src, 2), NewTopic(dst, 2)])
    with Producer(bootstrap(server, "SASL_SSL"), security=scram, acks="all") as producer:
        for i in range(50):
            producer.send(src, b"v%d" % i, key=b"k%d" % i).get(10)
    reader = (spark.read.format("groupcoord").option("kafka.bootstrap.servers", bootstrap(server, "SASL_SSL"))
              .option("subscribe", src).option("startingOffsets", "earliest"))
    for key, value in scram_options(pki.ca).items():
        reader = reader.option(key, value)
    df = reader.load()
    rows = df.select("key", "value").collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(b"v%d" % i for i in range(50))
    writer = (df.selectExpr("key", "value").write.format("groupcoord")
              .option("kafka.bootstrap.servers", bootstrap(server, "SASL_PLAINTEXT")).option("topic", dst))
    for key, value in PLAIN_OPTIONS.items():
        writer = writer.option(key, value)
    writer.mode("append").save()
    plain = SecurityConfig("SASL_PLAINTEXT", "PLAIN", "bob", USERS["bob"])
    with Consumer(bootstrap_servers=bootstrap(server, "SASL_PLAINTEXT"), group_id=f"g-{dst}", security=plain,
                  auto_offset_reset="earliest", fetch_max_wait_ms=100) as consumer:
        consumer.subscribe([dst])
        got: list[bytes] = []
        for _ in range(100):
            if len(got) >= 50:
                break
            got += [r.value for recs in consumer.poll(200).values() for r in recs]
    assert sorted(got) == sorted(b"v%d" % i for i in range(50))


def test_a_wrong_password_fails_the_read_with_kafkas_error(spark: Any, secured: tuple[Any, Any]) -> None:
    server, pki = secured
    options = scram_options(pki.ca) | {"kafka.sasl.jaas.config": JAAS.replace(USERS["alice"], "not-it")}
    reader = (spark.read.format("groupcoord").option("kafka.bootstrap.servers", bootstrap(server, "SASL_SSL"))
              .option("subscribe", "anything"))
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception, match="SASL_AUTHENTICATION_FAILED") as info:
        reader.load().collect()
    assert "not-it" not in str(info.value)
