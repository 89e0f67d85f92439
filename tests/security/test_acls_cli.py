"""``groupcoord acls add/list/remove`` (the real CLI, a subprocess) against the real server with Kafka's
AclAuthorizer, over the PLAINTEXT listener (User:ANONYMOUS, a super user): bindings are added, listed as a
table of names, filtered, removed, and take effect for alice over SASL_SSL; without an authorizer the command
names authorizer.class.name and exits 1; a bad operation name is bad usage (exit 2)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaProducer
from kafka.errors import TopicAuthorizationFailedError
from security_support import USERS, bootstrap, start_secured
from server_process import REPO, ServerProcess

from client import AdminClient, NewTopic


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Any]]:
    extra = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
             "super.users": "User:admin;User:ANONYMOUS"}
    server, pki = start_secured(tmp_path_factory.mktemp("acls-cli"), extra, listeners=("PLAINTEXT", "SASL_SSL"))
    try:
        with AdminClient(server.bootstrap) as admin:
            admin.create_topics([NewTopic("orders", 1), NewTopic("logs-app", 1)])
        yield server, pki
    finally:
        server.stop()


def acls(server: ServerProcess, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coordinator.cli", "acls", *argv, "--bootstrap-server",
                           server.bootstrap], cwd=REPO, capture_output=True, text=True, timeout=60)


def rows(out: str) -> set[tuple[str, ...]]:
    lines = out.splitlines()
    assert lines[0].split() == ["RESOURCE-TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"]
    return {tuple(line.split()) for line in lines[1:]}


def test_add_list_remove_and_the_acls_take_effect(acl_server: Any) -> None:
    server, pki = acl_server
    added = acls(server, "add", "--allow-principal", "User:alice", "--operation", "read", "--operation", "Write",
                 "--topic", "orders")
    assert added.returncode == 0, added.stderr
    assert rows(added.stdout) == {("TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW"),
                                  ("TOPIC", "orders", "LITERAL", "User:alice", "*", "WRITE", "ALLOW")}
    prefixed = acls(server, "add", "--allow-principal", "User:alice", "--operation", "WRITE", "--topic", "logs-",
                    "--resource-pattern-type", "prefixed")
    assert prefixed.returncode == 0, prefixed.stderr

    everything = acls(server, "list")
    assert everything.returncode == 0, everything.stderr
    assert rows(everything.stdout) == {("TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW"),
                                       ("TOPIC", "orders", "LITERAL", "User:alice", "*", "WRITE", "ALLOW"),
                                       ("TOPIC", "logs-", "PREFIXED", "User:alice", "*", "WRITE", "ALLOW")}
    orders = acls(server, "list", "--topic", "orders")
    assert orders.returncode == 0 and len(rows(orders.stdout)) == 2
    matching = acls(server, "list", "--topic", "logs-app", "--resource-pattern-type", "match")
    assert rows(matching.stdout) == {("TOPIC", "logs-", "PREFIXED", "User:alice", "*", "WRITE", "ALLOW")}
    assert rows(acls(server, "list", "--principal", "User:bob").stdout) == set()

    removed = acls(server, "remove", "--topic", "orders", "--allow-principal", "User:alice", "--operation", "Write")
    assert removed.returncode == 0, removed.stderr
    assert rows(removed.stdout) == {("TOPIC", "orders", "LITERAL", "User:alice", "*", "WRITE", "ALLOW")}
    assert rows(acls(server, "list", "--topic", "orders").stdout) == {
        ("TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW")}

    producer = KafkaProducer(bootstrap_servers=bootstrap(server, "SASL_SSL"), max_block_ms=5000,
                             security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                             sasl_plain_username="alice", sasl_plain_password=USERS["alice"], ssl_cafile=str(pki.ca))
    try:
        assert producer.send("logs-app", value=b"x").get(timeout=10).offset >= 0  # PREFIXED logs-: Write
        with pytest.raises(TopicAuthorizationFailedError):  # Write on orders was removed, Read is left
            producer.send("orders", value=b"x").get(timeout=10)
    finally:
        producer.close(5)

    cleared = acls(server, "remove", "--topic", "orders")  # a resource alone: every ACL of it
    assert cleared.returncode == 0 and len(rows(cleared.stdout)) == 1
    assert rows(acls(server, "list", "--topic", "orders").stdout) == set()


def test_cluster_resource_and_a_refused_binding(acl_server: Any) -> None:
    server, _ = acl_server
    ok = acls(server, "add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.1", "--operation",
              "DescribeConfigs", "--cluster")
    assert ok.returncode == 0, ok.stderr
    assert rows(ok.stdout) == {("CLUSTER", "kafka-cluster", "LITERAL", "User:bob", "10.0.0.1", "DESCRIBE_CONFIGS",
                                "DENY")}
    bad = acls(server, "add", "--allow-principal", "User:bob", "--operation", "Read", "--cluster",
               "--resource-pattern-type", "prefixed")  # Kafka: no PREFIXED cluster resource
    assert bad.returncode == 1 and "INVALID_REQUEST" in bad.stderr
    gone = acls(server, "remove", "--cluster")
    assert gone.returncode == 0 and len(rows(gone.stdout)) == 1


def test_without_an_authorizer_and_bad_usage(secured: Any) -> None:
    server, _ = secured
    listed = acls(server, "list")
    assert listed.returncode == 1
    assert "SECURITY_DISABLED" in listed.stderr and "authorizer.class.name" in listed.stderr
    added = acls(server, "add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "t")
    assert added.returncode == 1 and "authorizer.class.name" in added.stderr
    bad = acls(server, "add", "--allow-principal", "User:alice", "--operation", "Frobnicate", "--topic", "t")
    assert bad.returncode == 2 and "unknown operation" in bad.stderr
    assert acls(server, "add", "--allow-principal", "alice", "--operation", "Read", "--topic", "t").returncode == 2
    assert acls(server, "add", "--allow-principal", "User:alice", "--operation", "Read").returncode == 2
