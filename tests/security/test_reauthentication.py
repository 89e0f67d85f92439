"""KIP-368 on the real server with ``connections.max.reauth.ms`` short: confluent-kafka (librdkafka 2.x
re-authenticates on the same connection) keeps consuming across re-authentications, counted by the server;
a raw connection that lets its session expire is closed at its next request, with no answer."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from security_support import USERS, bootstrap, port, start_secured
from server_process import ServerProcess, read_frame

from client import AdminClient, NewTopic
from protocol import codec

LIFETIME_MS = 3000


@pytest.fixture(scope="module")
def short_sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Any]]:
    server, pki = start_secured(tmp_path_factory.mktemp("reauth"), {"connections.max.reauth.ms": LIFETIME_MS},
                                listeners=("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL"))
    try:
        yield server, pki
    finally:
        server.stop()


def test_confluent_kafka_consumes_across_reauthentications(short_sessions: Any) -> None:
    from confluent_kafka import Consumer, Producer

    server, pki = short_sessions
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    with AdminClient(server.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    conf = {"bootstrap.servers": bootstrap(server, "SASL_SSL"), "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": USERS["alice"],
            "ssl.ca.location": str(pki.ca)}
    producer = Producer(conf)
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen: list[bytes] = []
    try:
        deadline = time.monotonic() + 4 * LIFETIME_MS / 1000  # several session lifetimes, bounded
        i = 0
        while time.monotonic() < deadline:
            producer.produce(topic, value=b"v%d" % i)
            producer.poll(0)
            i += 1
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
                consumer.commit(msg, asynchronous=False)
        assert producer.flush(10) == 0
        for _ in range(50):  # the tail, bounded
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
            if len(seen) == i:
                break
    finally:
        consumer.close()
    assert seen == [b"v%d" % n for n in range(i)]  # every record once, in order, through the re-authentications
    reauthed = server.metric('groupcoord_authentications_total{listener="SASL_SSL",mechanism="SCRAM-SHA-512",'
                             'result="reauthenticated"}')
    failed = server.metric('groupcoord_authentications_total{listener="SASL_SSL",mechanism="SCRAM-SHA-512",'
                           'result="failed"}')
    assert reauthed >= 2 and failed == 0, (reauthed, failed)


def test_a_session_that_expires_without_reauthentication_is_closed_at_its_next_request(short_sessions: Any
                                                                                       ) -> None:
    server, _ = short_sessions
    with socket.create_connection(("127.0.0.1", port(server, "SASL_PLAINTEXT")), timeout=5) as sock:
        sock.sendall(codec.encode_request(17, 1, 1, "raw", {"mechanism": "PLAIN"}))
        read_frame(sock)
        sock.sendall(codec.encode_request(36, 2, 2, "raw", {"auth_bytes": b"\0alice\0" + USERS["alice"].encode()}))
        answer = codec.decode_response(36, 2, read_frame(sock) or b"")[1]
        assert answer["error_code"] == 0 and answer["session_lifetime_ms"] == LIFETIME_MS
        versions = codec.encode_request(18, 3, 3, "raw", {"client_software_name": "raw",
                                                           "client_software_version": "1"})
        sock.sendall(versions)
        assert read_frame(sock) is not None  # inside the session: served
        time.sleep(LIFETIME_MS / 1000 + 0.5)
        sock.sendall(versions)
        assert read_frame(sock) is None  # expired: closed with no answer
