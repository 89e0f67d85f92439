"""kafka-python against the secured server with its ordinary settings: SCRAM-SHA-512 over SASL_SSL,
SCRAM-SHA-256 and PLAIN over SASL_PLAINTEXT, and a client certificate over SSL; each produces, consumes in a
group and commits. A wrong password is kafka-python's own authentication error, and the server stays healthy
for everybody else. Metadata answers each client the endpoint of the listener it came in on."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError
from security_support import USERS, bootstrap, port

from client import AdminClient, NewTopic


def settings(listener: str, pki: Any, mechanism: str = "SCRAM-SHA-512", user: str = "alice",
             password: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"security_protocol": listener}
    if listener.startswith("SASL"):
        conf.update(sasl_mechanism=mechanism, sasl_plain_username=user,
                    sasl_plain_password=USERS[user] if password is None else password)
    if listener.endswith("SSL"):
        conf.update(ssl_cafile=str(pki.ca))
    if listener == "SSL":
        conf.update(ssl_certfile=str(pki.client_cert), ssl_keyfile=str(pki.client_key))
    return conf


def round_trip(server: Any, pki: Any, listener: str, mechanism: str = "SCRAM-SHA-512") -> None:
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    with AdminClient(server.bootstrap) as admin:  # the PLAINTEXT listener
        admin.create_topics([NewTopic(topic, 3)])
    conf = settings(listener, pki, mechanism)
    producer = KafkaProducer(bootstrap_servers=bootstrap(server, listener), acks="all", **conf)
    try:
        for i in range(30):
            producer.send(topic, key=b"k%d" % i, value=b"v%d" % i)
        producer.flush(20)
    finally:
        producer.close(5)
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap(server, listener), group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=15000,
                             **conf)
    try:
        seen = set()
        for record in consumer:
            seen.add(record.value)
            if len(seen) == 30:
                break
        assert seen == {b"v%d" % i for i in range(30)}
        consumer.commit()
        # every node the client learned of is this listener's endpoint
        assert {(b.host, b.port) for b in consumer._client.cluster.brokers()} == \
            {("127.0.0.1", port(server, listener))}
    finally:
        consumer.close()
    with AdminClient(server.bootstrap) as admin:
        committed = admin.list_group_offsets(group)
    assert sum(o.offset for o in committed.values()) == 30


@pytest.mark.parametrize(("listener", "mechanism"), [("SASL_SSL", "SCRAM-SHA-512"),
                                                     ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
                                                     ("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "PLAIN"),
                                                     ("SSL", "")])
def test_kafka_python_produces_consumes_and_commits(secured: Any, listener: str, mechanism: str) -> None:
    server, pki = secured
    round_trip(server, pki, listener, mechanism)


@pytest.mark.parametrize(("listener", "mechanism"), [("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN")])
def test_a_wrong_password_is_an_authentication_error_and_others_go_on(
        secured: Any, listener: str, mechanism: str, caplog: pytest.LogCaptureFixture) -> None:
    server, pki = secured
    conf = settings(listener, pki, mechanism, password="not-it")
    # kafka-python 3 logs the broker's SaslAuthenticationFailedError and retries its bootstrap until the timeout
    with pytest.raises(KafkaError):
        KafkaProducer(bootstrap_servers=bootstrap(server, listener), bootstrap_timeout_ms=3000, **conf)
    assert "SaslAuthenticationFailedError" in caplog.text
    assert server.alive()
    round_trip(server, pki, "SASL_SSL")  # the server is fine for everybody else
    failed = server.metric(f'groupcoord_authentications_total{{listener="{listener}",mechanism="{mechanism}",'
                           f'result="failed"}}')
    assert failed >= 1
