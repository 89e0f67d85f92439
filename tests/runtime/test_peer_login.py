"""How a node logs in to its peers (security/peer_login.py): the startup checks of its settings, and the SASL
exchange against a scripted peer (the live path is tests/cluster/test_cluster_security.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trustme

from coordinator.config import load
from coordinator.core.security.listeners import ListenerSpec
from coordinator.core.security.sasl import AuthenticationFailed
from coordinator.core.security.scram import ScramCredential, ScramServer
from coordinator.runtime.security.peer_login import PeerAuthenticationError, PeerLogin

SASL_SSL = ListenerSpec("SASL_SSL", "SASL_SSL", "127.0.0.1", 0, "127.0.0.1", 0)
SASL_PLAIN = ListenerSpec("INTERNAL", "SASL_PLAINTEXT", "127.0.0.1", 0, "127.0.0.1", 0)
JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="node" password="{}";'


def values(**kw: Any) -> dict[str, Any]:
    return {"sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN", **{k.replace("__", "."): v for k, v in kw.items()}}


def test_the_login_comes_from_kafkas_keys_most_specific_first() -> None:
    v = values(**{"sasl.jaas.config": JAAS.format("global"),
                  "listener.name.internal.sasl.jaas.config": JAAS.format("listener"),
                  "listener.name.internal.scram-sha-512.sasl.jaas.config": JAAS.format("mechanism")})
    assert PeerLogin(v, SASL_PLAIN)._password == "mechanism"
    del v["listener.name.internal.scram-sha-512.sasl.jaas.config"]
    assert PeerLogin(v, SASL_PLAIN)._password == "listener"
    del v["listener.name.internal.sasl.jaas.config"]
    login = PeerLogin(v, SASL_PLAIN)
    assert (login.username, login.mechanism, login._password) == ("node", "SCRAM-SHA-512", "global")
    assert "global" not in login.who and "as node with SCRAM-SHA-512 on listener INTERNAL" in login.who


def test_the_per_mechanism_key_is_accepted_from_a_config_file(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config" = \'x required username="a" password="b";\'\n'
                 'sasl.mechanism.inter.broker.protocol = "SCRAM-SHA-512"\n')
    cfg = load(f, env={})
    assert cfg.get("listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config").endswith('password="b";')
    bad = tmp_path / "bad.toml"
    bad.write_text('"listener.name.sasl_ssl.gssapi.sasl.jaas.config" = "x"\n')
    with pytest.raises(Exception, match="unknown config key"):
        load(bad, env={})


@pytest.mark.parametrize(("settings", "message"), [
    ({}, "needs a login for its peers in listener.name.internal.scram-sha-512.sasl.jaas.config"),
    ({"sasl.jaas.config": "not jaas at all"}, "sasl.jaas.config"),
    ({"sasl.jaas.config": JAAS.format("x"), "sasl.mechanism.inter.broker.protocol": "GSSAPI"}, "GSSAPI is not one of"),
    ({"sasl.jaas.config": JAAS.format("x"), "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"},
     "SCRAM-SHA-256 is not enabled on the inter-broker listener INTERNAL"),
])
def test_settings_that_cannot_work_refuse_the_start(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        PeerLogin(values(**settings), SASL_PLAIN)


def test_an_unreadable_truststore_refuses_the_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="inter-broker TLS on listener SASL_SSL"):
        PeerLogin(values(**{"sasl.jaas.config": JAAS.format("x"),
                            "ssl.truststore.location": str(tmp_path / "missing.pem")}), SASL_SSL)


class ScriptedPeer:
    """A peer's SaslHandshake and SaslAuthenticate answers from our own SCRAM server."""

    def __init__(self, password: str) -> None:
        cred = ScramCredential.from_password("SCRAM-SHA-512", password, iterations=4096)
        self.server = ScramServer("SCRAM-SHA-512", lambda user: cred if user == "node" else None)
        self.calls: list[int] = []

    async def __call__(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(api_key)
        if api_key == 17:
            return {"error_code": 0 if body["mechanism"] == "SCRAM-SHA-512" else 33, "mechanisms": ["SCRAM-SHA-512"]}
        try:
            result = self.server.step(bytes(body["auth_bytes"]))
        except AuthenticationFailed as e:
            return {"error_code": 58, "error_message": e.message, "auth_bytes": b""}
        return {"error_code": 0, "error_message": None, "auth_bytes": result.reply}


@pytest.mark.parametrize(("password", "ok"), [("right", True), ("wrong", False)])
def test_the_scram_exchange_against_a_peer(password: str, ok: bool) -> None:
    login = PeerLogin(values(**{"sasl.jaas.config": JAAS.format(password)}), SASL_PLAIN)
    peer = ScriptedPeer("right")

    async def main() -> None:
        if ok:
            await login.login(peer)
        else:
            with pytest.raises(PeerAuthenticationError, match=r"[Aa]uthentication failed"):
                await login.login(peer)

    trio.run(main)
    assert peer.calls[0] == 17 and peer.calls[1:] == [36] * (len(peer.calls) - 1)


def test_tls_checks_the_peer_certificate_and_name(tmp_path: Path) -> None:
    """A peer whose certificate another CA signed, or that names another host, is refused at the handshake."""
    ca, other = trustme.CA(), trustme.CA()
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem.bytes())

    async def serve(cert: trustme.LeafCert, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        cert.configure_cert(ctx)
        listeners = await trio.open_ssl_over_tcp_listeners(0, ctx, host="127.0.0.1")

        async def handle(stream: trio.SSLStream[Any]) -> None:
            try:
                await stream.do_handshake()
                await stream.send_all(b"ok")
            except trio.BrokenResourceError:
                pass
        task_status.started(listeners[0].transport_listener.socket.getsockname()[1])
        await trio.serve_listeners(handle, listeners)

    async def attempt(cert: trustme.LeafCert, check: str) -> bytes | Exception:
        login = PeerLogin({"ssl.truststore.location": str(tmp_path / "ca.pem"),
                           "ssl.endpoint.identification.algorithm": check},
                          ListenerSpec("SSL", "SSL", "127.0.0.1", 0, "127.0.0.1", 0))
        async with trio.open_nursery() as nursery:
            port = await nursery.start(serve, cert)
            try:
                stream = await login.open("127.0.0.1", port)
                got = await stream.receive_some(10)
                await stream.aclose()
                return got
            except (trio.BrokenResourceError, OSError) as e:
                return e
            finally:
                nursery.cancel_scope.cancel()

    assert trio.run(attempt, ca.issue_cert("127.0.0.1"), "https") == b"ok"
    assert isinstance(trio.run(attempt, other.issue_cert("127.0.0.1"), "https"), Exception)
    assert isinstance(trio.run(attempt, ca.issue_cert("elsewhere.example"), "https"), Exception)
    assert trio.run(attempt, ca.issue_cert("elsewhere.example"), "") == b"ok"  # no hostname check when empty
