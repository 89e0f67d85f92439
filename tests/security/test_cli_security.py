"""The `groupcoord` client commands against the secured server with `--command-config FILE` (Kafka's client
properties file): groups, topics, produce/consume, cluster and retry over SASL_SSL (SCRAM, `sasl.jaas.config`)
and SASL_PLAINTEXT (librdkafka's `sasl.username`/`sasl.password`); a wrong password is exit 1 with Kafka's
error name, a bad file is exit 2 naming the key. Each command is the real CLI in a subprocess."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from security_support import USERS, bootstrap
from server_process import REPO

from client import AdminClient, Consumer, NewTopic, Producer
from client.security import SecurityConfig

CLI_TIMEOUT_S = 60


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coordinator.cli", *args], cwd=REPO, capture_output=True,
                          text=True, input=stdin, timeout=CLI_TIMEOUT_S)


def scram_properties(tmp_path: Path, pki: Any, password: str = USERS["alice"], name: str = "scram") -> Path:
    path = tmp_path / f"{name}.properties"
    path.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{password}";\n'
        f"ssl.truststore.location={pki.ca}\n"
        "ssl.truststore.type=PEM\n"
        "client.id=groupcoord-cli-test\n")
    return path


def plain_properties(tmp_path: Path) -> Path:
    path = tmp_path / "plain.properties"
    path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanisms=PLAIN\nsasl.username=bob\n"
                    f"sasl.password={USERS['bob']}\n")
    return path


def sec(pki: Any) -> SecurityConfig:
    return SecurityConfig("SASL_SSL", "SCRAM-SHA-512", "alice", USERS["alice"], ssl_cafile=str(pki.ca))


def make_group(server: Any, pki: Any, topic: str, group: str, count: int = 5) -> None:
    where = bootstrap(server, "SASL_SSL")
    with AdminClient(where, security=sec(pki)) as admin:
        admin.create_topics([NewTopic(topic, 2)])
    with Producer(where, security=sec(pki), acks="all") as producer:
        for i in range(count):
            producer.send(topic, b"m%d" % i).get(10)
    with Consumer(bootstrap_servers=where, group_id=group, auto_offset_reset="earliest", security=sec(pki),
                  session_timeout_ms=6000, heartbeat_interval_ms=500, fetch_max_wait_ms=100) as consumer:
        consumer.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 20
        while got < count and time.monotonic() < deadline:
            got += sum(len(v) for v in consumer.poll(200).values())
        assert got == count
        consumer.commit()


def test_groups_over_sasl_ssl_with_a_jaas_properties_file(secured: Any, tmp_path: Path) -> None:
    server, pki = secured
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    make_group(server, pki, topic, group)
    props = scram_properties(tmp_path, pki)
    where = bootstrap(server, "SASL_SSL")
    listed = cli("groups", "list", "--bootstrap-server", where, "--command-config", str(props))
    assert listed.returncode == 0, listed.stderr
    assert any(line.split()[:1] == [group] for line in listed.stdout.splitlines()), listed.stdout
    offsets = cli("groups", "offsets", group, "--bootstrap-server", where, "--command-config", str(props))
    assert offsets.returncode == 0, offsets.stderr
    rows = [line.split() for line in offsets.stdout.splitlines() if line.startswith(topic)]
    assert sum(int(r[2]) for r in rows) == 5 and all(r[4] == "0" for r in rows), offsets.stdout  # no lag


def test_topics_produce_consume_cluster_and_retry_commands(secured: Any, tmp_path: Path) -> None:
    server, pki = secured
    topic = f"t-{uuid.uuid4().hex[:8]}"
    scram = ["--command-config", str(scram_properties(tmp_path, pki))]
    ssl_at = ["--bootstrap-server", bootstrap(server, "SASL_SSL")]
    plain = ["--command-config", str(plain_properties(tmp_path))]
    plain_at = ["--bootstrap-server", bootstrap(server, "SASL_PLAINTEXT")]
    created = cli("topics", "create", topic, "--partitions", "2", *ssl_at, *scram)
    assert created.returncode == 0 and "created" in created.stdout, created.stderr
    listed = cli("topics", "list", *plain_at, *plain)
    assert listed.returncode == 0 and topic in listed.stdout, listed.stderr
    produced = cli("produce", topic, *plain_at, *plain, stdin="a\nb\nc\n")
    assert produced.returncode == 0 and "produced 3 records" in produced.stderr, produced.stderr
    consumed = cli("consume", topic, "--from-beginning", "--max-messages", "3", "--timeout-ms", "10000",
                   "--group", f"g-{topic}", *ssl_at, *scram)
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.split()) == ["a", "b", "c"]
    described = cli("cluster", "describe", *ssl_at, *scram)
    assert described.returncode == 0 and described.stdout.startswith("CLUSTER "), described.stderr
    assert bootstrap(server, "SASL_SSL").split(":")[1] in described.stdout  # this listener's endpoint
    status = cli("retry", "status", topic, "--policy", "1s", *ssl_at, *scram)
    assert status.returncode == 0 and f"FAILED {topic}-failed" in status.stdout, status.stderr


def test_a_wrong_password_is_exit_1_with_kafkas_error(secured: Any, tmp_path: Path) -> None:
    server, pki = secured
    props = scram_properties(tmp_path, pki, password="not-it", name="wrong")
    started = time.monotonic()
    result = cli("groups", "list", "--bootstrap-server", bootstrap(server, "SASL_SSL"), "--command-config",
                 str(props))
    assert time.monotonic() - started < 20
    assert result.returncode == 1
    assert "SASL_AUTHENTICATION_FAILED" in result.stderr and "SASL_SSL listener" in result.stderr, result.stderr
    assert "not-it" not in result.stderr


@pytest.mark.parametrize(("command", "text", "problem"), [
    (["groups", "list"], "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.kerberos.service.name=kafka\n",
     "sasl.kerberos.service.name is not supported"),
    (["produce", "t"], "security.protocol=SASL_SSL\n", "needs sasl.mechanism"),
    (["cluster", "describe"], "security.protocol=SSL\nssl.keystore.type=PKCS12\n", "only PEM"),
    (["retry", "status", "t"], "security.protocol=SSL\nssl.truststore.location=/no/such/ca.pem\n",
     "cannot load the CA file"),
])
def test_a_bad_properties_file_is_exit_2_naming_the_key(tmp_path: Path, command: list[str], text: str,
                                                        problem: str) -> None:
    props = tmp_path / "bad.properties"
    props.write_text(text)
    result = cli(*command, "--bootstrap-server", "127.0.0.1:9", "--command-config", str(props))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert problem in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_every_client_command_takes_command_config() -> None:
    for command in (["groups", "list"], ["groups", "describe", "g"], ["groups", "offsets", "g"],
                    ["groups", "delete", "g"], ["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest"],
                    ["groups", "delete-offsets", "g", "--topic", "t"], ["topics", "create", "t"], ["topics", "list"],
                    ["topics", "describe", "t"], ["topics", "alter", "t"], ["topics", "delete", "t"],
                    ["retry", "status", "t"], ["retry", "replay", "t-failed"], ["produce", "t"], ["consume", "t"],
                    ["cluster", "describe"]):
        result = cli(*command, "--help")
        assert result.returncode == 0 and "--command-config" in result.stdout, command


def test_users_add_list_delete_over_sasl_ssl_and_the_new_user_logs_in(secured: Any, tmp_path: Path) -> None:
    """`groupcoord users` against the running server (AlterUserScramCredentials: only the salted password
    travels), then the new user's SCRAM login works and, once deleted, fails."""
    server, pki = secured
    props = ["--command-config", str(scram_properties(tmp_path, pki))]
    where = ["--bootstrap-server", bootstrap(server, "SASL_SSL")]
    added = cli("users", "add", "carol", "--password", "carol-secret", "--mechanism", "SCRAM-SHA-512", *where, *props)
    assert added.returncode == 0, added.stderr
    listed = cli("users", "list", *where, *props)
    assert listed.returncode == 0 and any(line.split()[:3] == ["carol", "SCRAM-SHA-512", "8192"]
                                          for line in listed.stdout.splitlines()), listed.stdout
    carol = scram_properties(tmp_path, pki, password="carol-secret", name="carol")
    carol.write_text(carol.read_text().replace('username="alice"', 'username="carol"'))
    assert cli("topics", "list", *where, "--command-config", str(carol)).returncode == 0
    deleted = cli("users", "delete", "carol", *where, *props)
    assert deleted.returncode == 0, deleted.stderr
    refused = cli("topics", "list", *where, "--command-config", str(carol))
    assert refused.returncode == 1 and "SASL_AUTHENTICATION_FAILED" in refused.stderr, refused.stderr
    missing = cli("users", "delete", "carol", *where, *props)
    assert missing.returncode == 1 and "RESOURCE_NOT_FOUND" in missing.stderr, missing.stderr
