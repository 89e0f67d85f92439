"""The SASL mechanisms we serve, ``sasl.enabled.mechanisms``, and one way to start an exchange of any of them.

Rules:
- Mechanisms: ``SCRAM-SHA-256``, ``SCRAM-SHA-512`` (``scram.py``) and ``PLAIN`` (``plain.py``, checked against
  the SCRAM credentials). Names are case-sensitive, as in Kafka (a client asking ``scram-sha-256`` in
  SaslHandshake gets UNSUPPORTED_SASL_MECHANISM).
- ``parse_enabled_mechanisms`` reads Kafka's LIST form: comma-separated, whitespace around entries ignored,
  duplicates kept once in first-seen order (the handshake's answer lists them in that order); an empty
  value is an empty tuple (the runtime refuses that on a SASL listener); an empty entry or a name we do
  not serve is a ``ValueError`` naming the key and the entry.
- ``start(mechanism, lookup)`` answers a fresh ``sasl.Exchange`` for one authentication; ``lookup(username,
  scram_mechanism)`` answers the user's stored ``ScramCredential`` for that SCRAM mechanism, or None.
  Drive it as ``sasl.py`` says: ``step(token)``; while the result carries ``work``, run ``work()`` off the
  loop and ``resume(its result)``; send ``reply``; when ``done``, the connection's principal is
  ``exchange.principal`` (``User:<username>``). ``AuthenticationFailed`` (re-exported here) carries the
  client's message.
"""

from __future__ import annotations

from collections.abc import Callable

from .plain import PLAIN, CredentialLookup, PlainServer
from .sasl import AuthenticationFailed, Exchange, StepResult
from .scram import SCRAM_MECHANISMS, ScramServer, random_nonce

SUPPORTED_MECHANISMS: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512", PLAIN)

__all__ = ["SUPPORTED_MECHANISMS", "AuthenticationFailed", "CredentialLookup", "Exchange", "StepResult",
           "parse_enabled_mechanisms", "start"]


def parse_enabled_mechanisms(value: str, key: str = "sasl.enabled.mechanisms") -> tuple[str, ...]:
    """``"SCRAM-SHA-512, PLAIN"`` -> ``("SCRAM-SHA-512", "PLAIN")``; ValueError for an unknown name."""
    out: list[str] = []
    if not value.strip():
        return ()
    for raw in value.split(","):
        name = raw.strip()
        if not name:
            raise ValueError(f"{key}: empty entry in {value!r}")
        if name not in SUPPORTED_MECHANISMS:
            hint = ""
            if name.upper() in SUPPORTED_MECHANISMS:
                hint = f"; mechanism names are case-sensitive: did you mean {name.upper()}?"
            raise ValueError(f"{key}: unsupported SASL mechanism {name!r} "
                             f"(supported: {', '.join(SUPPORTED_MECHANISMS)}){hint}")
        if name not in out:
            out.append(name)
    return tuple(out)


def start(mechanism: str, lookup: CredentialLookup, *, reauthentication: bool = False,
          nonce: Callable[[], str] = random_nonce) -> Exchange:
    """A new server-side exchange of ``mechanism`` (one of SUPPORTED_MECHANISMS, else ValueError).

    ``reauthentication`` words SCRAM's failure message as Kafka does during KIP-368 re-authentication;
    ``nonce`` is SCRAM's server-nonce source (tests inject a fixed one)."""
    if mechanism == PLAIN:
        return PlainServer(lookup)
    scram = SCRAM_MECHANISMS.get(mechanism)
    if scram is None:
        raise ValueError(f"unsupported SASL mechanism {mechanism!r} (supported: {', '.join(SUPPORTED_MECHANISMS)})")
    return ScramServer(scram, lambda username: lookup(username, scram), nonce=nonce,
                       reauthentication=reauthentication)
