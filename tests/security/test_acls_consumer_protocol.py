"""ACLs on KIP-848's APIs, on the real secured server (Kafka's AclAuthorizer; alice over SASL_SSL with SCRAM):
ConsumerGroupHeartbeat needs READ on the group (GROUP_AUTHORIZATION_FAILED otherwise) and DESCRIBE on each
subscribed topic (TOPIC_AUTHORIZATION_FAILED, Kafka 4.0); ConsumerGroupDescribe needs DESCRIBE on the group
(per-group GROUP_AUTHORIZATION_FAILED). confluent-kafka consumers with group.protocol=consumer, and our admin
client for ConsumerGroupDescribe. Every wait is bounded."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from security_support import USERS, bootstrap, start_secured
from server_process import ServerProcess
from test_acls import grant, ours

from client import AdminClient, NewTopic

TOPIC, SECRET, GROUP, FORBIDDEN = "kip-orders", "kip-secret", "kip-app", "kip-forbidden"


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Any]]:
    extra = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
             "super.users": "User:admin;User:ANONYMOUS"}
    server, pki = start_secured(tmp_path_factory.mktemp("acls848"), extra, listeners=("PLAINTEXT", "SASL_SSL"))
    try:
        with AdminClient(server.bootstrap) as admin:  # PLAINTEXT = ANONYMOUS = a super user
            admin.create_topics([NewTopic(TOPIC, 2), NewTopic(SECRET, 1)])
        grant(server, [("TOPIC", TOPIC, "LITERAL", "User:alice", "READ", "ALLOW"),
                       ("GROUP", GROUP, "LITERAL", "User:alice", "READ", "ALLOW")])
        yield server, pki
    finally:
        server.stop()


def consumer(server: ServerProcess, pki: Any, group: str, errors: list[Any]) -> Any:
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap(server, "SASL_SSL"), "security.protocol": "SASL_SSL",
                     "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice",
                     "sasl.password": USERS["alice"], "ssl.ca.location": str(pki.ca), "group.id": group,
                     "group.protocol": "consumer", "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "error_cb": errors.append})


def poll_for(c: Any, done: Any, timeout: float = 30.0) -> list[Any]:
    """Poll until ``done()``; the error messages poll returned."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not done():
        msg = c.poll(0.2)
        if msg is not None and msg.error():
            seen.append(msg.error())
    return seen


def test_alice_joins_a_group_she_may_read_and_gets_the_topic_she_may_read(acl_server: Any) -> None:
    server, pki = acl_server
    errors: list[Any] = []
    c = consumer(server, pki, GROUP, errors)
    try:
        c.subscribe([TOPIC])
        poll_for(c, lambda: len(c.assignment()) == 2)
        assert {tp.partition for tp in c.assignment()} == {0, 1}, errors
    finally:
        c.close()


def test_a_group_without_read_is_group_authorization_failed(acl_server: Any) -> None:
    from confluent_kafka import KafkaError

    server, pki = acl_server
    errors: list[Any] = []
    c = consumer(server, pki, FORBIDDEN, errors)
    try:
        c.subscribe([TOPIC])
        seen: list[Any] = []

        def refused() -> bool:
            return any(e.code() == KafkaError.GROUP_AUTHORIZATION_FAILED for e in errors + seen)

        seen += poll_for(c, refused, timeout=20)
        assert refused(), [str(e) for e in errors + seen]
        assert not c.assignment()
    finally:
        c.close()


def test_a_subscribed_topic_without_describe_is_topic_authorization_failed(acl_server: Any) -> None:
    from confluent_kafka import KafkaError

    server, pki = acl_server
    errors: list[Any] = []
    c = consumer(server, pki, GROUP + "-2", errors)  # no READ on this group either: grant it first
    grant(server, [("GROUP", GROUP + "-2", "LITERAL", "User:alice", "READ", "ALLOW")])
    try:
        c.subscribe([TOPIC, SECRET])
        seen: list[Any] = []

        def refused() -> bool:
            return any(e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors + seen)

        seen += poll_for(c, refused, timeout=20)
        assert refused(), [str(e) for e in errors + seen]
        assert not any(tp.topic == SECRET for tp in c.assignment())
    finally:
        c.close()


def test_consumer_group_describe_needs_describe_on_the_group(acl_server: Any) -> None:
    server, pki = acl_server
    with AdminClient(bootstrap(server, "SASL_SSL"), security=ours(pki)) as admin:
        # (FindCoordinator already refuses the forbidden group, as Kafka's: ask the one node directly)
        _, resp = admin.cluster.request_any(69, lambda v: {"group_ids": [FORBIDDEN, GROUP],
                                                           "include_authorized_operations": False})
    codes = {g["group_id"]: g["error_code"] for g in resp["groups"]}
    assert codes[FORBIDDEN] == 30, resp  # GROUP_AUTHORIZATION_FAILED
    assert codes[GROUP] in (0, 69), resp  # READ implies DESCRIBE: known (alice joined above), or gone
