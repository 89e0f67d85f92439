"""The audit trail on the real server: an offsets reset and a group deletion made with the real CLI over
SASL_SSL are listed by ``groupcoord audit`` with the principal and host that did them, and so is an
authorization denial; ``--json`` gives one object a line, ``--since`` filters, and the events survive a
restart."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from security_support import USERS, bootstrap, start_secured
from server_process import REPO, ServerProcess

from client import AdminClient, Consumer, NewTopic, Producer, SecurityConfig

TOPIC, GROUP = "audited-topic", "audited-group"


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Any, Path]]:
    root = tmp_path_factory.mktemp("audit")
    extra = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
             "super.users": "User:admin;User:ANONYMOUS"}
    server, pki = start_secured(root, extra, listeners=("PLAINTEXT", "SASL_SSL"))
    try:
        yield server, pki, root
    finally:
        server.stop()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coordinator.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def properties(path: Path, pki: Any, user: str) -> Path:
    path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                    f'username="{user}" password="{USERS[user]}";\nssl.truststore.location={pki.ca}\n')
    return path


def events(root: Path, *extra: str) -> list[dict[str, Any]]:
    out = cli("audit", "--data-dir", str(root / "data"), "--json", *extra)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_a_reset_a_group_deletion_and_a_denial_are_in_the_trail(audited: Any, tmp_path: Path) -> None:
    server, pki, root = audited
    started = time.time()
    with AdminClient(server.bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, 1)])
    admin_sec = SecurityConfig(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="admin",
                               sasl_password=USERS["admin"], ssl_cafile=str(pki.ca))
    with Producer(bootstrap(server, "SASL_SSL"), security=admin_sec) as producer:
        for i in range(5):
            producer.send(TOPIC, value=b"%d" % i)
        producer.flush(10)
    consumer = Consumer(bootstrap_servers=bootstrap(server, "SASL_SSL"), group_id=GROUP, auto_offset_reset="earliest",
                        security=admin_sec)
    try:
        consumer.subscribe([TOPIC])
        got = 0
        deadline = time.monotonic() + 20
        while got < 5 and time.monotonic() < deadline:
            got += sum(len(r) for r in consumer.poll(500).values())
        consumer.commit()
    finally:
        consumer.close()
    admin_props = ["--bootstrap-server", bootstrap(server, "SASL_SSL"), "--command-config",
                   str(properties(tmp_path / "admin.properties", pki, "admin"))]
    reset = cli("groups", "reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest", "--execute", *admin_props)
    assert reset.returncode == 0, reset.stderr
    deleted = cli("groups", "delete", GROUP, *admin_props)
    assert deleted.returncode == 0, deleted.stderr
    alice_props = ["--bootstrap-server", bootstrap(server, "SASL_SSL"), "--command-config",
                   str(properties(tmp_path / "alice.properties", pki, "alice"))]
    refused = cli("topics", "delete", TOPIC, *alice_props)
    assert refused.returncode == 1 and "TOPIC_AUTHORIZATION_FAILED" in refused.stdout, refused

    trail = events(root)
    resets = [e for e in trail if e["api"] == "OffsetCommit" and e["operation"] == "RESET_OFFSETS"]
    assert resets and resets[-1]["principal"] == "User:admin" and resets[-1]["host"] == "127.0.0.1"
    assert GROUP in resets[-1]["resource"] and resets[-1]["outcome"] in ("ok", "requested")
    deletions = [e for e in trail if e["api"] == "DeleteGroups"]
    assert [(e["principal"], e["host"], e["resource"], e["outcome"]) for e in deletions] == [
        ("User:admin", "127.0.0.1", GROUP, "ok")]
    denials = [e for e in trail if e["outcome"] == "denied"]
    assert {(e["principal"], e["api"], e["resource"], e["operation"]) for e in denials} >= {
        ("User:alice", "DeleteTopics", TOPIC, "DELETE")}
    created = [e for e in trail if e["api"] == "CreateTopics"]
    assert created and created[0]["principal"] == "User:ANONYMOUS" and created[0]["resource"] == TOPIC
    assert all(e["time"] >= int(started * 1000) - 1000 for e in trail)

    table = cli("audit", "--data-dir", str(root / "data"))
    assert table.returncode == 0 and table.stdout.splitlines()[0].split() == [
        "TIME", "PRINCIPAL", "HOST", "CLIENT", "API", "OPERATION", "RESOURCE", "OUTCOME"]
    assert any("DeleteGroups" in line and "User:admin" in line for line in table.stdout.splitlines())
    assert events(root, "--since", "1d") == trail
    assert events(root, "--since", "2099-01-01T00:00:00") == []
    bad = cli("audit", "--data-dir", str(root / "data"), "--since", "yesterday")
    assert bad.returncode == 2 and "--since" in bad.stderr

    server.stop()
    server.start()
    assert events(root) == trail  # durable across a restart
