"""How this node reaches its peers (cluster mode): the inter-broker listener, with TLS and SASL as a client.

Rules (Kafka's inter-broker security, KIP-103 and KIP-84):
- Every node-to-node connection (replica fetches and OffsetForLeaderEpoch: all of them) goes to the peer's
  endpoint on ``inter.broker.listener.name`` and speaks that listener's security protocol. Nodes share the
  listener name; a peer that does not advertise it is not fetched from (one line, retried on the next view).
- TLS (SSL, SASL_SSL): the peer's certificate chain is checked against the listener's
  ``ssl.truststore.location`` (the system CAs when unset), and its name against the host the peer advertises
  unless ``ssl.endpoint.identification.algorithm`` is empty. This node shows its own keystore as its client
  certificate (a listener requiring client certificates then maps it to a principal), and follows the
  listener's ``ssl.enabled.protocols`` (TLS 1.2 is the floor).
- SASL (SASL_PLAINTEXT, SASL_SSL): the mechanism is ``sasl.mechanism.inter.broker.protocol`` (empty: the
  listener's first enabled mechanism); the login is the ``username``/``password`` of Kafka's JAAS text in
  ``listener.name.<listener>.<mechanism>.sasl.jaas.config``, else ``listener.name.<listener>.sasl.jaas.config``,
  else ``sasl.jaas.config``. SaslHandshake v1, then SaslAuthenticate v2 until the mechanism completes; SCRAM
  also proves the peer knows the credential.
- Built at startup: a SASL listener with no login, a mechanism the listener does not enable, or a JAAS text
  that does not parse is a ``ValueError`` (startup refused, one line, exit 2). The certificate files are read
  again for each connection, so renewed files (SIGHUP on the peers) are used without a restart here.
- A refused login raises ``PeerAuthenticationError`` with the peer's message; the caller says so in one line
  and retries. The password never reaches a log line.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from client.errors import SecurityConfigError
from client.sasl import MECHANISMS, SaslMechanismError, mechanism_for
from client.security import parse_jaas
from coordinator.core.security.listeners import ListenerSpec
from coordinator.runtime.security.tls import TLS_VERSIONS, setting

Call = Callable[[int, int, dict[str, Any]], Awaitable[dict[str, Any]]]
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DEFAULT_LISTENER = ListenerSpec("PLAINTEXT", "PLAINTEXT", "", 0, "", 0)


class PeerAuthenticationError(Exception):
    """A peer refused this node's login (or failed to prove its own)."""


class PeerLogin:
    def __init__(self, values: Mapping[str, Any], spec: ListenerSpec) -> None:
        self.spec = spec
        self.listener = spec.name
        self.values = values
        self.mechanism = ""
        self.username = ""
        self._password = ""
        if spec.sasl:
            enabled = [m.strip().upper() for m in
                       str(setting(values, spec.name, "sasl.enabled.mechanisms", "")).split(",") if m.strip()]
            mech = str(values.get("sasl.mechanism.inter.broker.protocol") or "").upper() or (
                enabled[0] if enabled else "")
            if mech not in MECHANISMS:
                raise ValueError(f"sasl.mechanism.inter.broker.protocol: {mech or 'empty'} is not one of "
                                 f"{', '.join(MECHANISMS)}")
            if mech not in enabled:
                raise ValueError(f"sasl.mechanism.inter.broker.protocol: {mech} is not enabled on the inter-broker "
                                 f"listener {spec.name} (sasl.enabled.mechanisms: {', '.join(enabled)})")
            prefix = f"listener.name.{spec.name.lower()}."
            jaas_key = next((k for k in (f"{prefix}{mech.lower()}.sasl.jaas.config", f"{prefix}sasl.jaas.config",
                                         "sasl.jaas.config") if values.get(k)), None)
            if jaas_key is None:
                raise ValueError(f"the inter-broker listener {spec.name} is {spec.protocol}: this node needs a login "
                                 f"for its peers in {prefix}{mech.lower()}.sasl.jaas.config (or sasl.jaas.config)")
            try:
                self.username, self._password = parse_jaas(str(values[jaas_key]))
            except SecurityConfigError as e:
                raise ValueError(f"{jaas_key}: {e}") from None
            self.mechanism = mech
        if spec.tls:
            self._tls_context()  # the files are checked now: a bad one refuses the start

    @property
    def who(self) -> str:
        """How this node logs in, for log lines (never the password)."""
        if self.spec.sasl:
            return f"as {self.username} with {self.mechanism} on listener {self.spec.name} ({self.spec.protocol})"
        return f"on listener {self.spec.name} ({self.spec.protocol})"

    def _tls_context(self) -> ssl.SSLContext:
        name, values = self.spec.name, self.values
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        versions = [TLS_VERSIONS[v.strip()] for v in str(setting(values, name, "ssl.enabled.protocols",
                                                                  "TLSv1.2,TLSv1.3")).split(",")
                    if v.strip() in TLS_VERSIONS] or [ssl.TLSVersion.TLSv1_2]
        ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)
        trust = setting(values, name, "ssl.truststore.location", "")
        keystore = setting(values, name, "ssl.keystore.location", "")
        try:
            if trust:
                ctx.load_verify_locations(cafile=trust)
            else:
                ctx.load_default_certs()
            if keystore:
                ctx.load_cert_chain(keystore, password=setting(values, name, "ssl.key.password", "") or None)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"inter-broker TLS on listener {name}: {e}") from None
        ctx.check_hostname = str(setting(values, name, "ssl.endpoint.identification.algorithm", "https")) != ""
        return ctx

    async def open(self, host: str, port: int) -> trio.abc.Stream:
        """A connection to a peer's inter-broker endpoint, encrypted as the listener is (not yet logged in)."""
        stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
        if self.spec.tls:
            try:
                ctx = self._tls_context()
            except ValueError:
                await stream.aclose()
                raise
            tls = trio.SSLStream(stream, ctx, server_hostname=host)
            try:
                await tls.do_handshake()
            except BaseException:
                await stream.aclose()
                raise
            stream = tls
        return stream

    async def login(self, call: Call) -> None:
        """SASL on an open connection (nothing to do on SSL and PLAINTEXT listeners)."""
        if not self.spec.sasl:
            return
        answer = await call(SASL_HANDSHAKE, 1, {"mechanism": self.mechanism})
        if answer["error_code"]:
            raise PeerAuthenticationError(f"the peer does not enable {self.mechanism} (it offers "
                                          f"{', '.join(answer.get('mechanisms') or []) or 'none'})")
        try:
            client = mechanism_for(self.mechanism, self.username, self._password)
            token: bytes | None = client.first()
            while token is not None:
                answer = await call(SASL_AUTHENTICATE, 2, {"auth_bytes": token})
                if answer["error_code"]:
                    raise PeerAuthenticationError(answer.get("error_message") or f"error {answer['error_code']}")
                # SCRAM's PBKDF2 runs off the event loop (the node's other work never waits on it)
                token = await trio.to_thread.run_sync(client.respond, bytes(answer["auth_bytes"] or b""))
                if token is None and not client.complete:
                    raise SaslMechanismError("the exchange ended before the mechanism completed")
        except SaslMechanismError as e:
            raise PeerAuthenticationError(f"the peer did not prove the credential: {e}") from None
