"""ACLs on the real server (authorizer.class.name = Kafka's AclAuthorizer, super.users = User:admin and the
loopback PLAINTEXT listener's User:ANONYMOUS, as operators bootstrap it): CreateAcls/DescribeAcls/DeleteAcls
through confluent-kafka's admin client; alice, with ACLs for one topic and one group, produces, consumes and
commits there over SASL_SSL; another topic is TOPIC_AUTHORIZATION_FAILED and absent from Metadata, another
group GROUP_AUTHORIZATION_FAILED; DeleteTopics, DeleteGroups and AlterConfigs are refused with Kafka's
codes; a super user may do all of it; a DENY beats an ALLOW; PREFIXED patterns work; the ACLs survive a
restart; without an authorizer the ACL APIs answer SECURITY_DISABLED."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
from security_support import USERS, bootstrap, port, start_secured
from server_process import ServerProcess, read_frame

from client import AdminClient, NewTopic, SecurityConfig
from protocol import codec
from protocol.errors import ErrorCode

TOPIC, GROUP = "orders", "orders-app"


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Any, Any]]:
    root = tmp_path_factory.mktemp("acls")
    extra = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
             "super.users": "User:admin;User:ANONYMOUS"}
    server, pki = start_secured(root, extra, listeners=("PLAINTEXT", "SASL_SSL"))
    try:
        with AdminClient(server.bootstrap) as admin:  # PLAINTEXT = ANONYMOUS = a super user
            admin.create_topics([NewTopic(TOPIC, 2), NewTopic("other", 1), NewTopic("logs-app1", 1),
                                 NewTopic("mixed", 1)])
        grant(server, [("TOPIC", TOPIC, "LITERAL", "User:alice", "READ", "ALLOW"),
                       ("TOPIC", TOPIC, "LITERAL", "User:alice", "WRITE", "ALLOW"),
                       ("GROUP", GROUP, "LITERAL", "User:alice", "READ", "ALLOW"),
                       ("TOPIC", "logs-", "PREFIXED", "User:alice", "WRITE", "ALLOW"),
                       ("TOPIC", "mixed", "LITERAL", "User:*", "READ", "ALLOW"),
                       ("TOPIC", "mixed", "LITERAL", "User:alice", "READ", "DENY"),
                       ("GROUP", "mixed-", "PREFIXED", "User:alice", "READ", "ALLOW")])
        yield server, pki, root
    finally:
        server.stop()


def ck_admin(server: ServerProcess) -> Any:
    from confluent_kafka.admin import AdminClient as CkAdmin

    return CkAdmin({"bootstrap.servers": server.bootstrap})


def binding(kind: str, name: str, pattern: str, principal: str, op: str, perm: str) -> Any:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return AclBinding(getattr(ResourceType, kind), name, getattr(ResourcePatternType, pattern), principal, "*",
                      getattr(AclOperation, op), getattr(AclPermissionType, perm))


def grant(server: ServerProcess, specs: list[tuple[str, ...]]) -> None:
    admin = ck_admin(server)  # kept alive until its futures are done
    for fut in admin.create_acls([binding(*s) for s in specs]).values():
        assert fut.result(10) is None


def alice(pki: Any) -> dict[str, Any]:
    return {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "alice",
            "sasl_plain_password": USERS["alice"], "ssl_cafile": str(pki.ca)}


def ours(pki: Any, user: str = "alice") -> SecurityConfig:
    return SecurityConfig(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username=user,
                          sasl_password=USERS[user], ssl_cafile=str(pki.ca))


def test_alice_produces_consumes_and_commits_where_she_may(acl_server: Any) -> None:
    server, pki, _ = acl_server
    producer = KafkaProducer(bootstrap_servers=bootstrap(server, "SASL_SSL"), acks="all", **alice(pki))
    try:
        for i in range(20):
            producer.send(TOPIC, value=b"o%d" % i)
        producer.flush(20)
    finally:
        producer.close(5)
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap(server, "SASL_SSL"), group_id=GROUP,
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=15000,
                             **alice(pki))
    try:
        seen = set()
        for record in consumer:
            seen.add(record.value)
            if len(seen) == 20:
                break
        assert seen == {b"o%d" % i for i in range(20)}
        consumer.commit()
        visible = consumer.topics()
    finally:
        consumer.close()
    assert TOPIC in visible and "other" not in visible and "__consumer_offsets" not in visible
    with AdminClient(server.bootstrap) as admin:
        assert sum(o.offset for o in admin.list_group_offsets(GROUP).values()) == 20


def test_another_topic_is_refused_and_hidden(acl_server: Any) -> None:
    server, pki, _ = acl_server
    producer = KafkaProducer(bootstrap_servers=bootstrap(server, "SASL_SSL"), max_block_ms=5000, **alice(pki))
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("other", value=b"x").get(timeout=10)
    finally:
        producer.close(5)
    sec = ours(pki)
    from client.cluster import Cluster

    cluster = Cluster(bootstrap(server, "SASL_SSL"), security=sec)
    try:
        conn = cluster.least_loaded_connection()
        md = conn.send(3, {"topics": None, "allow_auto_topic_creation": False,
                           "include_topic_authorized_operations": False}, version=12)[1]
        # mixed: User:*'s ALLOW Read implies Describe, and her DENY Read does not deny Describe (Kafka's rule)
        assert {t["name"] for t in md["topics"]} == {TOPIC, "logs-app1", "mixed"}
        named = conn.send(3, {"topics": [{"name": "other", "topic_id": None}, {"name": "nope", "topic_id": None}],
                              "allow_auto_topic_creation": True, "include_topic_authorized_operations": False},
                          version=12)[1]
        # the same answer whether or not the topic exists, and no auto-creation without Create
        assert {t["name"]: t["error_code"] for t in named["topics"]} == {
            "other": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "nope": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
        fetched = conn.send(2, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "other", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]},
            {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]},
            version=7)[1]
        codes = {t["name"]: t["partitions"][0]["error_code"] for t in fetched["topics"]}
        assert codes == {"other": ErrorCode.TOPIC_AUTHORIZATION_FAILED, TOPIC: 0}  # Read implies Describe
        # Fetch v13 names topics by id: the id's topic decides (Read on orders, none on other)
        from coordinator.runtime.topics import topic_id

        by_id = conn.send(1, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                              "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                              "forgotten_topics_data": [], "rack_id": "", "topics": [
                                  {"topic_id": topic_id(name), "partitions": [
                                      {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                       "last_fetched_epoch": -1, "log_start_offset": -1,
                                       "partition_max_bytes": 1 << 16}]} for name in ("other", TOPIC)]},
                          version=13)[1]
        codes = {r["topic_id"]: r["partitions"][0]["error_code"] for r in by_id["responses"]}
        assert codes == {topic_id("other"): ErrorCode.TOPIC_AUTHORIZATION_FAILED, topic_id(TOPIC): 0}
    finally:
        cluster.close()
    with AdminClient(server.bootstrap) as admin:  # the super user sees it was not auto-created
        assert "nope" not in admin.list_topics() and "other" in admin.list_topics()


def test_another_group_is_refused(acl_server: Any) -> None:
    server, pki, _ = acl_server
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap(server, "SASL_SSL"), group_id="not-hers",
                             consumer_timeout_ms=5000, **alice(pki))
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            for _ in consumer:
                break
    finally:
        consumer.close()


def test_admin_operations_are_refused_with_kafkas_codes_and_a_super_user_may(acl_server: Any) -> None:
    server, pki, _ = acl_server
    from client.cluster import Cluster

    cluster = Cluster(bootstrap(server, "SASL_SSL"), security=ours(pki))
    try:
        conn = cluster.least_loaded_connection()
        deleted = conn.send(20, {"topic_names": [TOPIC], "timeout_ms": 5000}, version=5)[1]
        assert deleted["responses"][0]["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        groups = conn.send(42, {"groups_names": [GROUP]}, version=2)[1]
        assert groups["results"][0]["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
        altered = conn.send(33, {"resources": [{"resource_type": 2, "resource_name": TOPIC, "configs": [
            {"name": "retention.ms", "value": "1000"}]}], "validate_only": False}, version=2)[1]
        assert altered["responses"][0]["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        described = conn.send(29, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                                   "principal_filter": None, "host_filter": None, "operation": 1,
                                   "permission_type": 1}, version=3)[1]
        assert described["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        listed = conn.send(16, {"states_filter": [], "types_filter": []}, version=4)[1]
        assert {g["group_id"] for g in listed["groups"]} <= {GROUP}  # only groups she may describe
    finally:
        cluster.close()
    with AdminClient(bootstrap(server, "SASL_SSL"), security=ours(pki, "admin")) as admin:  # a super user
        admin.create_topics([NewTopic("scratch", 1)])
        admin.delete_topics(["scratch"])


def test_deny_beats_allow_and_prefixed_patterns_work(acl_server: Any) -> None:
    server, pki, _ = acl_server
    producer = KafkaProducer(bootstrap_servers=bootstrap(server, "SASL_SSL"), acks="all", **alice(pki))
    try:
        assert producer.send("logs-app1", value=b"l").get(timeout=10).offset >= 0  # PREFIXED logs-: Write
    finally:
        producer.close(5)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(server, "SASL_SSL"), group_id="mixed-readers",
                             consumer_timeout_ms=5000, **alice(pki))
    try:
        consumer.subscribe(["mixed"])  # User:* may Read mixed, alice is denied: DENY wins
        with pytest.raises(TopicAuthorizationFailedError):
            for _ in consumer:
                break
    finally:
        consumer.close()


def test_describe_and_delete_acls_with_filters_and_they_survive_a_restart(acl_server: Any) -> None:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    server, pki, root = acl_server
    admin = ck_admin(server)
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    before = admin.describe_acls(everything).result(10)
    assert len(before) == 7
    match = AclBindingFilter(ResourceType.TOPIC, "logs-app1", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert [(b.name, b.resource_pattern_type) for b in admin.describe_acls(match).result(10)] == [
        ("logs-", ResourcePatternType.PREFIXED)]
    grant(server, [("TOPIC", "temp", "LITERAL", "User:bob", "READ", "ALLOW")])
    gone = AclBindingFilter(ResourceType.TOPIC, "temp", ResourcePatternType.LITERAL, "User:bob", None,
                            AclOperation.ANY, AclPermissionType.ANY)
    removed = [r.result(10) for r in admin.delete_acls([gone]).values()]
    assert [b.name for b in removed[0]] == ["temp"]
    server.stop()
    server.start()  # same data dir, same config
    again = ck_admin(server)
    assert sorted(map(str, again.describe_acls(everything).result(10))) == sorted(map(str, before))


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(secured: Any) -> None:
    server, _ = secured
    with socket.create_connection(("127.0.0.1", port(server, "PLAINTEXT")), timeout=5) as sock:
        sock.sendall(codec.encode_request(29, 3, 1, "raw", {
            "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}))
        got = codec.decode_response(29, 3, read_frame(sock) or b"")[1]
    assert got["error_code"] == ErrorCode.SECURITY_DISABLED
    assert got["error_message"] == "No Authorizer is configured on the broker"
