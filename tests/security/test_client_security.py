"""Our own client over TLS and SASL (issue #34 item 7): Producer, Consumer, AdminClient and RetryingConsumer
against the secured server over TCP (SASL_SSL with SCRAM, SASL_PLAINTEXT with PLAIN and SCRAM-SHA-256, SSL with
a client certificate once the fixture has that listener), refusals that are quick and clear (wrong password,
untrusted CA, host name mismatch, SASL towards a plain listener), and the sans-IO parts: the SCRAM client
against RFC 7677's vectors, Kafka client properties files and JAAS lines."""

from __future__ import annotations

import base64
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from security_support import USERS, bootstrap, port

from client import AdminClient, Consumer, NewTopic, Producer
from client.cluster import Cluster
from client.connection import BrokerConnection
from client.errors import (
    KafkaConnectionError,
    SaslAuthenticationError,
    SecurityConfigError,
    SslAuthenticationError,
)
from client.retry import RetryingConsumer, RetryPolicy
from client.sasl import PlainClient, SaslMechanismError, ScramClient, escape_username, mechanism_for
from client.security import PLAINTEXT, SecurityConfig, parse_jaas, parse_properties, security_settings

FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500, "fetch_max_wait_ms": 100}
QUICK_S = 5.0  # a refused login must be reported within this (no retry loop, no metadata wait)

RFC_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def security(listener: str, pki: Any, mechanism: str = "SCRAM-SHA-512", user: str = "alice",
             password: str | None = None) -> SecurityConfig:
    sasl = listener.startswith("SASL")
    return SecurityConfig(
        security_protocol=listener,
        sasl_mechanism=mechanism if sasl else None,
        sasl_username=user if sasl else None,
        sasl_password=(USERS[user] if password is None else password) if sasl else None,
        ssl_cafile=str(pki.ca) if listener.endswith("SSL") else None,
        ssl_certfile=str(pki.client_cert) if listener == "SSL" else None,
        ssl_keyfile=str(pki.client_key) if listener == "SSL" else None)


def names() -> tuple[str, str]:
    return f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"


def consume(consumer: Consumer, want: int, timeout_s: float = 20.0) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        for records in consumer.poll(200).values():
            got.extend(records)
    return got


def round_trip(server: Any, sec: SecurityConfig, listener: str, count: int = 30) -> None:
    """Create a topic, produce, consume in a group and commit, all over ``listener`` with ``sec``."""
    topic, group = names()
    where = bootstrap(server, listener)
    with AdminClient(where, security=sec) as admin:
        assert [r.error_code for r in admin.create_topics([NewTopic(topic, 3)])] == [0]
    with Producer(where, security=sec, acks="all") as producer:
        futures = [producer.send(topic, b"v%d" % i, key=b"k%d" % i) for i in range(count)]
        producer.flush(20)
        assert all(f.get(10).offset >= 0 for f in futures)
        assert producer.cluster.security is sec
    consumer = Consumer(bootstrap_servers=where, group_id=group, auto_offset_reset="earliest",
                        enable_auto_commit=False, security=sec, **FAST)
    try:
        consumer.subscribe([topic])
        records = consume(consumer, count)
        assert sorted(r.value for r in records) == sorted(b"v%d" % i for i in range(count))
        consumer.commit()
        # every node the client learned is this listener's endpoint, and every connection it opened is secured
        assert {(n.host, n.port) for n in consumer.cluster.nodes.values()} == {("127.0.0.1", port(server, listener))}
        conns = list(consumer.cluster._conns.values())
        assert len(conns) >= 2 and all(c.security is sec for c in conns)  # node + coordinator connections
    finally:
        consumer.close()
    with AdminClient(where, security=sec) as admin:
        committed = admin.list_group_offsets(group)
        assert sum(o.offset for o in committed.values()) == count
        assert [g.group_id for g in admin.list_groups() if g.group_id == group] == [group]


# ---------------------------------------------------------------------------- live: it works
@pytest.mark.parametrize(("listener", "mechanism"), [("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN"),
                                                     ("SASL_PLAINTEXT", "SCRAM-SHA-256"), ("SASL_SSL", "PLAIN")])
def test_producer_consumer_admin_over_sasl(secured: Any, listener: str, mechanism: str) -> None:
    server, pki = secured
    round_trip(server, security(listener, pki, mechanism), listener)


def test_ssl_with_a_client_certificate(secured: Any) -> None:
    server, pki = secured
    if "SSL" not in server.ports:  # enabled when the fixture has the SSL listener (principal mapping)
        pytest.skip("the secured fixture has no SSL listener yet (tests/security/conftest.py LISTENERS_NOW)")
    round_trip(server, security("SSL", pki), "SSL")


def test_kafka_named_keywords_reach_every_connection(secured: Any) -> None:
    """The same settings as keywords (kafka-python's sasl_plain_* names too) instead of security=."""
    server, pki = secured
    topic, group = names()
    where = bootstrap(server, "SASL_SSL")
    kw = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "bob",
          "sasl_plain_password": USERS["bob"], "ssl_cafile": str(pki.ca)}
    with AdminClient(where, **kw) as admin:
        admin.create_topics([NewTopic(topic, 1)])
        assert admin.cluster.security == security("SASL_SSL", pki, "SCRAM-SHA-256", "bob")
    with Producer(where, acks="all", **kw) as producer:
        producer.send(topic, b"one").get(10)
    with Consumer(bootstrap_servers=where, group_id=group, auto_offset_reset="earliest", **FAST, **kw) as consumer:
        consumer.subscribe([topic])
        assert [r.value for r in consume(consumer, 1)] == [b"one"]
        consumer.commit()
    with pytest.raises(TypeError, match="not both"):
        AdminClient(where, security=PLAINTEXT, **kw)
    with pytest.raises(TypeError, match="unexpected keyword argument 'sasl_mechanisms'"):
        Producer(where, sasl_mechanisms="PLAIN")


def test_tls_carries_concurrent_requests_on_one_connection(secured: Any) -> None:
    """Many produce requests in flight (the sender writes while the reader thread reads the same TLS
    connection) and a consumer fetching at the same time: nothing is lost or garbled."""
    server, pki = secured
    sec = security("SASL_SSL", pki)
    topic, group = names()
    where = bootstrap(server, "SASL_SSL")
    with AdminClient(where, security=sec) as admin:
        admin.create_topics([NewTopic(topic, 3)])
    count = 3000
    payload = b"x" * 700
    consumer = Consumer(bootstrap_servers=where, group_id=group, auto_offset_reset="earliest", security=sec, **FAST)
    consumer.subscribe([topic])
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            with Producer(where, security=sec, acks="all", linger_ms=0, batch_size=4096) as producer:
                futures = [producer.send(topic, payload + b"%d" % i) for i in range(count)]
                producer.flush(60)
                for f in futures:
                    f.get(10)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        records = consume(consumer, count, timeout_s=60)
    finally:
        writer.join(60)
        consumer.close()
    assert not errors
    assert sorted(r.value for r in records) == sorted(payload + b"%d" % i for i in range(count))


def test_retrying_consumer_secures_its_consumer_producer_and_admin(secured: Any) -> None:
    """Retry topics are created, written and read with the RetryingConsumer's security settings (given as
    keywords among the consumer settings): the failed record comes back from the retry topic."""
    server, pki = secured
    topic, group = names()
    where = bootstrap(server, "SASL_PLAINTEXT")
    sec = security("SASL_PLAINTEXT", pki, "PLAIN")
    with AdminClient(where, security=sec) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    with Producer(where, security=sec, acks="all") as producer:
        producer.send(topic, b"flaky").get(10)
        producer.send(topic, b"fine").get(10)
    calls: list[tuple[str, bytes | None]] = []

    def handler(rec: Any) -> None:
        calls.append((rec.topic, rec.value))
        if rec.value == b"flaky" and rec.topic == topic:
            raise RuntimeError("first attempt fails")

    rc = RetryingConsumer(bootstrap_servers=where, group_id=group, topics=[topic], handler=handler,
                          policy=RetryPolicy.parse("1s"), security_protocol="SASL_PLAINTEXT",
                          sasl_mechanism="PLAIN", sasl_username="alice", sasl_password=USERS["alice"], **FAST)
    try:
        assert rc.security == sec
        assert rc.consumer.cluster.security == sec and rc.producer.cluster.security == sec
        deadline = time.monotonic() + 30
        while len(calls) < 3 and time.monotonic() < deadline:
            rc.poll_once(200)
    finally:
        rc.close()
    retry_topic = RetryPolicy.parse("1s").retry_topic(topic, "1s")
    assert sorted(calls) == sorted([(topic, b"flaky"), (topic, b"fine"), (retry_topic, b"flaky")])
    with AdminClient(where, security=sec) as admin:
        assert retry_topic in admin.list_topics()


def test_cluster_for_tools(secured: Any) -> None:
    """What `groupcoord users` needs: a Cluster with security= (DescribeUserScramCredentials as admin)."""
    server, pki = secured
    cluster = Cluster(bootstrap(server, "SASL_SSL"), client_id="groupcoord-users",
                      security=security("SASL_SSL", pki, user="admin"))
    try:
        _, resp = cluster.least_loaded_connection().send(50, {"users": None})
    finally:
        cluster.close()
    assert resp["error_code"] == 0
    assert {r["user"] for r in resp["results"]} >= set(USERS)


# ---------------------------------------------------------------------------- live: clear refusals
@pytest.mark.parametrize(("listener", "mechanism"), [("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN")])
def test_a_wrong_password_is_one_quick_clear_error(secured: Any, listener: str, mechanism: str) -> None:
    server, pki = secured
    bad = security(listener, pki, mechanism, password="not-it")
    where = bootstrap(server, listener)
    attempts: list[tuple[str, Any]] = [("AdminClient", _list_topics), ("Producer", _send_one),
                                       ("Consumer", _poll_once)]
    for who, attempt in attempts:
        started = time.monotonic()
        with pytest.raises(SaslAuthenticationError) as info:
            attempt(where, bad)
        took = time.monotonic() - started
        assert took < QUICK_S, f"{who} took {took:.1f}s to report a wrong password"
        text = str(info.value)
        assert "SASL_AUTHENTICATION_FAILED (58)" in text and f"({listener} listener)" in text, text
        assert mechanism in text and "'alice'" in text and "not-it" not in text, text
        assert info.value.error_code == 58 and not info.value.retriable
    assert server.alive()


def _list_topics(where: str, sec: SecurityConfig) -> None:
    with AdminClient(where, security=sec) as admin:
        admin.list_topics()


def _send_one(where: str, sec: SecurityConfig) -> None:
    with Producer(where, security=sec, max_block_ms=60000) as producer:  # would wait 60 s for metadata
        producer.send("anything", b"x")


def _poll_once(where: str, sec: SecurityConfig) -> None:
    consumer = Consumer(bootstrap_servers=where, group_id="never", security=sec, **FAST)
    try:
        consumer.subscribe(["anything"])
        consumer.poll(10000)
    finally:
        consumer.close()


def test_an_unknown_user_is_refused_like_a_wrong_password(secured: Any) -> None:
    server, pki = secured
    sec = SecurityConfig("SASL_SSL", "SCRAM-SHA-256", "mallory", "x", ssl_cafile=str(pki.ca))
    with pytest.raises(SaslAuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
        BrokerConnection("127.0.0.1", port(server, "SASL_SSL"), security=sec).connect()


def test_sasl_towards_a_plaintext_listener_says_so(secured: Any) -> None:
    server, pki = secured
    sec = SecurityConfig("SASL_PLAINTEXT", "PLAIN", "alice", USERS["alice"])
    with pytest.raises(SaslAuthenticationError, match=r"ILLEGAL_SASL_STATE.*SASL listener"):
        BrokerConnection("127.0.0.1", server.port, security=sec, connect_timeout_ms=3000).connect()


def test_an_untrusted_server_certificate_is_refused(secured: Any, tmp_path: Path) -> None:
    server, pki = secured
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    sec = SecurityConfig("SASL_SSL", "SCRAM-SHA-512", "alice", USERS["alice"], ssl_cafile=str(other))
    started = time.monotonic()
    with pytest.raises(SslAuthenticationError, match="certificate verify failed"):
        AdminClient(bootstrap(server, "SASL_SSL"), security=sec).list_topics()
    assert time.monotonic() - started < QUICK_S


def test_tls_towards_a_plaintext_listener_is_a_tls_error(secured: Any) -> None:
    server, pki = secured
    sec = SecurityConfig("SSL", ssl_cafile=str(pki.ca))
    with pytest.raises(SslAuthenticationError, match="TLS handshake"):
        BrokerConnection("127.0.0.1", server.port, security=sec, connect_timeout_ms=3000).connect()


def test_a_bad_certificate_file_fails_when_the_client_is_made(tmp_path: Path) -> None:
    with pytest.raises(SecurityConfigError, match="cannot load the CA file"):
        Cluster("127.0.0.1:9", security=SecurityConfig("SSL", ssl_cafile=str(tmp_path / "missing.pem")))
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(SecurityConfigError, match=r"junk\.pem"):
        Cluster("127.0.0.1:9", security=SecurityConfig("SSL", ssl_cafile=str(junk)))


# ---------------------------------------------------------------------------- host name check (a TLS stub)
@pytest.fixture
def tls_stub(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A TLS server on 127.0.0.1 whose certificate names only example.org; it closes after the handshake."""
    ca = trustme.CA()
    ca_file = tmp_path / "stub-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("example.org").configure_cert(ctx)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            try:
                with ctx.wrap_socket(raw, server_side=True):
                    pass
            except OSError:
                raw.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], ca_file
    finally:
        stop.set()
        listener.close()
        thread.join(10)


def test_the_host_name_is_checked_unless_turned_off(tls_stub: tuple[int, Path]) -> None:
    stub_port, ca_file = tls_stub
    checked = SecurityConfig("SSL", ssl_cafile=str(ca_file))
    with pytest.raises(SslAuthenticationError, match=r"mismatch, certificate is not valid for '127\.0\.0\.1'"):
        BrokerConnection("127.0.0.1", stub_port, security=checked, connect_timeout_ms=3000).connect()
    unchecked = SecurityConfig("SSL", ssl_cafile=str(ca_file), ssl_check_hostname=False)
    # the handshake passes; the stub then closes instead of answering ApiVersions
    with pytest.raises(KafkaConnectionError, match="ApiVersions"):
        BrokerConnection("127.0.0.1", stub_port, security=unchecked, connect_timeout_ms=3000).connect()


# ---------------------------------------------------------------------------- SCRAM and PLAIN (sans-IO)
def test_scram_sha256_client_matches_rfc7677() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_NONCE)
    assert client.first() == b"n,,n=user,r=" + RFC_NONCE.encode()
    assert client.respond(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert not client.complete
    assert client.respond(RFC_SERVER_FINAL) is None
    assert client.complete


def test_scram_refuses_a_wrong_server_signature() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_NONCE)
    client.first()
    client.respond(RFC_SERVER_FIRST)
    forged = bytearray(base64.b64decode(RFC_SERVER_FINAL[2:]))
    forged[0] ^= 1
    with pytest.raises(SaslMechanismError, match="server signature is wrong"):
        client.respond(b"v=" + base64.b64encode(bytes(forged)))
    assert not client.complete


@pytest.mark.parametrize(("server_first", "problem"), [
    (b"r=someone-elses-nonce,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "does not extend"),
    (b"r=" + RFC_NONCE.encode() + b",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "does not extend"),
    (b"r=" + RFC_NONCE.encode() + b"x,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1024", "iteration count"),
    (b"r=" + RFC_NONCE.encode() + b"x,s=not base64!,i=4096", "base64"),
    (b"e=unknown-user", "server refused: unknown-user"),
    (b"garbage", "malformed"),
])
def test_scram_refuses_a_bad_server_first(server_first: bytes, problem: str) -> None:
    client = ScramClient("SCRAM-SHA-512", "user", "pencil", nonce=RFC_NONCE)
    client.first()
    with pytest.raises(SaslMechanismError, match=problem):
        client.respond(server_first)


def test_scram_refuses_a_server_final_error_and_messages_out_of_order() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_NONCE)
    with pytest.raises(SaslMechanismError, match="unexpected"):
        client.respond(RFC_SERVER_FIRST)
    client.first()
    client.respond(RFC_SERVER_FIRST)
    with pytest.raises(SaslMechanismError, match="server refused: invalid-proof"):
        client.respond(b"e=invalid-proof")


def test_scram_escapes_the_username_and_makes_fresh_nonces() -> None:
    assert escape_username("a=b,c") == "a=3Db=2Cc"
    first = ScramClient("SCRAM-SHA-256", "a=b,c", "p").first().decode()
    assert first.startswith("n,,n=a=3Db=2Cc,r=")
    nonces = {ScramClient("SCRAM-SHA-256", "u", "p").first() for _ in range(20)}
    assert len(nonces) == 20


def test_plain_token() -> None:
    plain = mechanism_for("PLAIN", "alice", "alice-secret")
    assert isinstance(plain, PlainClient)
    assert plain.first() == b"\0alice\0alice-secret"
    assert plain.complete and plain.respond(b"") is None
    with pytest.raises(SaslMechanismError, match="unsupported"):
        mechanism_for("GSSAPI", "a", "b")


# ---------------------------------------------------------------------------- SecurityConfig
def test_security_config_validation_and_repr() -> None:
    sec = security_settings(security_protocol="sasl_ssl", sasl_mechanism="scram-sha-512",
                            sasl_plain_username="alice", sasl_plain_password="s3cret")
    assert (sec.security_protocol, sec.sasl_mechanism, sec.sasl_username) == ("SASL_SSL", "SCRAM-SHA-512", "alice")
    assert "s3cret" not in repr(sec) and "s3cret" not in sec.describe()
    assert PLAINTEXT.ssl_context() is None and not PLAINTEXT.uses_sasl
    with pytest.raises(SecurityConfigError, match="needs sasl_mechanism"):
        SecurityConfig("SASL_SSL", sasl_username="a", sasl_password="b")
    with pytest.raises(SecurityConfigError, match="GSSAPI"):
        SecurityConfig("SASL_SSL", "GSSAPI", "a", "b")
    with pytest.raises(SecurityConfigError, match="needs sasl_username and sasl_password"):
        SecurityConfig("SASL_PLAINTEXT", "PLAIN")
    with pytest.raises(SecurityConfigError, match="security_protocol must be one of"):
        SecurityConfig("TLS")
    with pytest.raises(SecurityConfigError, match="ssl_keyfile needs ssl_certfile"):
        SecurityConfig("SSL", ssl_keyfile="k.pem")


# ---------------------------------------------------------------------------- properties files and JAAS
def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return path


def test_properties_with_kafka_names(tmp_path: Path) -> None:
    path = write(tmp_path, """
# Kafka's client.properties
security.protocol=SASL_SSL
sasl.mechanism = SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="alice" \\
    password="alice-secret";
ssl.truststore.location: /etc/kafka/ca.pem
ssl.truststore.type=PEM
ssl.keystore.location=/etc/kafka/alice.pem
ssl.key.password=kp
ssl.endpoint.identification.algorithm=
! ignored: they do not change how a connection is secured
request.timeout.ms=20000
client.id=tool
ssl.enabled.protocols=TLSv1.3,TLSv1.2
""")
    sec = SecurityConfig.from_properties(path)
    assert sec == SecurityConfig("SASL_SSL", "SCRAM-SHA-512", "alice", "alice-secret",
                                 ssl_cafile="/etc/kafka/ca.pem", ssl_certfile="/etc/kafka/alice.pem",
                                 ssl_password="kp", ssl_check_hostname=False)


def test_properties_with_librdkafka_names(tmp_path: Path) -> None:
    path = write(tmp_path, "security.protocol=sasl_plaintext\nsasl.mechanisms=PLAIN\nsasl.username=bob\n"
                           "sasl.password=bob secret \\u00e9\nssl.ca.location=/ca.pem\n"
                           "ssl.certificate.location=/c.pem\nssl.key.location=/k.pem\n"
                           "ssl.endpoint.identification.algorithm=https\n")
    sec = SecurityConfig.from_properties(path)
    assert (sec.security_protocol, sec.sasl_mechanism, sec.sasl_username, sec.sasl_password) == \
        ("SASL_PLAINTEXT", "PLAIN", "bob", "bob secret \u00e9")
    assert (sec.ssl_cafile, sec.ssl_certfile, sec.ssl_keyfile, sec.ssl_check_hostname) == \
        ("/ca.pem", "/c.pem", "/k.pem", True)
    assert SecurityConfig.from_properties(write(tmp_path, "# nothing\n")) == PLAINTEXT


@pytest.mark.parametrize(("text", "problem"), [
    ("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.login.callback.handler.class=x.Y\n",
     r"line 3: sasl.login.callback.handler.class is not supported"),
    ("security.protocol=SSL\nssl.truststore.location=/ts.jks\nssl.truststore.type=JKS\n", "only PEM"),
    ("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\nsasl.jaas.config=com.sun.security.auth.module."
     "Krb5LoginModule required;\n", "Krb5LoginModule is not supported"),
    ("security.protocol=SASL_SSL\nsasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
     'required username="a" password="b";\n', r"needs sasl\.mechanism"),
    ("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n",
     r"needs a username and password \(sasl\.jaas\.config, or sasl\.username"),
    ("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=a\nsasl.password=b\nsasl.jaas.config="
     'org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="b";\n', "not both"),
    ("security.protocol=SSL\nenable.ssl.certificate.verification=false\n", "always verified"),
    ("security.protocol=SSL\nssl.endpoint.identification.algorithm=dns\n", "must be https"),
    ("security.protocol=TLS\n", r"security\.protocol must be one of"),
    ("secuirty.protocol=SSL\n", "secuirty.protocol is not supported"),
    ("security.protocol=SSL\nssl.ca.location=/a.pem\nssl.truststore.location=/b.pem\n", "disagree"),
])
def test_properties_refused_clearly(tmp_path: Path, text: str, problem: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SecurityConfigError, match=problem) as info:
        SecurityConfig.from_properties(path)
    assert str(path) in str(info.value)


def test_missing_properties_file(tmp_path: Path) -> None:
    with pytest.raises(SecurityConfigError, match="cannot read the client properties file"):
        SecurityConfig.from_properties(tmp_path / "nope.properties")


def test_jaas_forms() -> None:
    assert parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
                      'password="al\\"ice";') == ("alice", 'al"ice')
    assert parse_jaas("org.apache.kafka.common.security.scram.ScramLoginModule required\n  username=bob\n"
                      "  password=\"pw with spaces\"") == ("bob", "pw with spaces")
    assert parse_jaas('kafkashaded.org.apache.kafka.common.security.plain.PlainLoginModule optional '
                      'password="p" username="u" ;') == ("u", "p")
    for bad, problem in [("", "class name"), ("x.PlainLoginModule", "control flag"),
                         ('x.PlainLoginModule always username="a" password="b";', "control flag"),
                         ('x.PlainLoginModule required username="a";', "needs password"),
                         ('x.PlainLoginModule required username "a";', "key=\"value\""),
                         ('x.ScramLoginModule required username="a" password="b" tokenauth="true";', "tokenauth"),
                         ('x.PlainLoginModule required username="a" password="b"; y.PlainLoginModule required;',
                          "only one login module"),
                         ('x.PlainLoginModule required username="a" password="s3cr', "cannot parse")]:
        with pytest.raises(SecurityConfigError, match=problem) as info:
            parse_jaas(bad)
        assert "s3cr" not in str(info.value)


def test_java_properties_syntax() -> None:
    props = parse_properties("a=1\n  b : 2\nc 3\n# x=9\n! y=9\nd=line\\\n   continued\ne=\\t\\=\\:\\\\\n"
                             "f\\ g=h\nempty=\na=last\n")
    assert dict(props) == {"a": "last", "b": "2", "c": "3", "d": "linecontinued", "e": "\t=:\\", "f g": "h",
                           "empty": ""}
    assert props.lines["b"] == 2
