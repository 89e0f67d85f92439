"""What one listener does to a new connection before it serves requests: TLS, SASL, and its principal.

Rules:
- PLAINTEXT: no TLS, no SASL; the principal is ``User:ANONYMOUS``.
- SSL: TLS (``tls.py``); with a client certificate the principal is ``User:`` + the certificate's subject DN
  (RFC 2253, most specific first) mapped by ``ssl.principal.mapping.rules``; without one, ANONYMOUS. A DN
  that no rule maps refuses the connection (one log line).
- SASL_PLAINTEXT / SASL_SSL: a ``SaslGate`` per connection (core/security/sasl_gate.py) with the listener's
  ``sasl.enabled.mechanisms``, ``sasl.server.max.receive.size`` and ``connections.max.reauth.ms``; the
  principal is the SASL user's (on SASL_SSL even when a certificate is presented).
- Credentials come from the user store (``users.py``); a mechanism's CPU-heavy step (PLAIN's PBKDF2) runs in
  a worker thread under ``WORK_LIMIT`` threads, so a storm of wrong passwords queues behind itself and never
  stalls the event loop.
- PLAIN on a listener without TLS sends passwords in the clear: said once at startup (WARNING).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import trio

from coordinator.core.security.listeners import ListenerSpec
from coordinator.core.security.sasl_gate import Exchange, SaslGate
from coordinator.runtime.security.tls import TlsContexts, setting

log = logging.getLogger("groupcoord.security")

ANONYMOUS = "User:ANONYMOUS"
WORK_LIMIT = 2  # worker threads for PBKDF2 (PLAIN logins); more logins wait for one


class ListenerSecurity:
    def __init__(self, spec: ListenerSpec, values: Mapping[str, Any], tls: TlsContexts | None,
                 start_exchange: Callable[[str], Exchange] | None, map_principal: Callable[[str], str | None]
                 ) -> None:
        self.spec = spec
        self.name = spec.name
        self.tls = tls if spec.tls else None
        self.start_exchange = start_exchange
        self.map_principal = map_principal
        self.mechanisms: tuple[str, ...] = ()
        if spec.sasl:
            text = str(setting(values, spec.name, "sasl.enabled.mechanisms", ""))
            self.mechanisms = tuple(m.strip() for m in text.split(",") if m.strip())
            self.max_receive = int(setting(values, spec.name, "sasl.server.max.receive.size", 524288))
            self.lifetime_ms = int(setting(values, spec.name, "connections.max.reauth.ms", 0))
            if "PLAIN" in self.mechanisms and not spec.tls:
                log.warning("listener %s offers SASL PLAIN without TLS: passwords cross the network in clear "
                            "text", spec.name)
        self.failed_delay_s = int(values.get("connection.failed.authentication.delay.ms") or 0) / 1000
        self.work_limiter = trio.CapacityLimiter(WORK_LIMIT)

    def ssl_context(self) -> Any:
        return None if self.tls is None else self.tls.get(self.name)

    def new_gate(self) -> SaslGate | None:
        if not self.spec.sasl or self.start_exchange is None:
            return None
        return SaslGate(self.mechanisms, self.start_exchange, self.max_receive, self.lifetime_ms)

    def certificate_principal(self, subject_dn: str | None) -> str | None:
        """The principal of an SSL connection (None: the DN maps to nothing; refuse the connection)."""
        if subject_dn is None:
            return ANONYMOUS
        name = self.map_principal(subject_dn)
        return None if name is None else f"User:{name}"
