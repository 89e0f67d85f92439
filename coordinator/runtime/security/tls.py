"""TLS for SSL and SASL_SSL listeners: a server ``ssl.SSLContext`` from Kafka's PEM keys, reloadable.

Rules (Kafka's SslConfigs / BrokerSecurityConfigs, PEM stores of KIP-651 given by file):
- ``ssl.keystore.type`` and ``ssl.truststore.type`` must be PEM (JKS and PKCS12 are refused with a clear
  error). ``ssl.keystore.location`` holds the private key and the certificate chain; ``ssl.key.password``
  decrypts an encrypted key. ``ssl.truststore.location`` holds the CA bundle client certificates are
  verified against (needed when ``ssl.client.auth`` is requested or required).
- ``ssl.client.auth``: none (no certificate asked), requested (asked; verified when given; a client without
  one is ``User:ANONYMOUS``), required (a client without a valid one fails the handshake). On a SASL_SSL
  listener only the listener-prefixed key counts (KIP-684), as in Kafka: there the principal comes from SASL.
- ``ssl.enabled.protocols``: a list of TLSv1.2 / TLSv1.3 (older ones are refused: TLS 1.2 is the floor);
  the context's minimum and maximum follow it. ``ssl.cipher.suites``: an OpenSSL cipher list for TLS 1.2
  (Python cannot restrict TLS 1.3 suites); empty = OpenSSL's defaults.
- Keys are looked up for a listener as Kafka does: ``listener.name.<name lower case>.<key>`` first, then
  ``<key>`` (``setting``).
- A missing or unreadable file, a key that does not match its certificate, a wrong key password: a
  ``ValueError`` naming the key and the file (startup refused, one line, exit 2).
- ``TlsContexts.reload()`` builds every listener's context again from the files (SIGHUP): new connections
  get the new certificates; connections already open keep theirs. A reload that fails keeps the old
  contexts and returns the error for one log line.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

from coordinator.core.security.listeners import ListenerSpec

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def setting(values: Mapping[str, Any], listener: str, key: str, default: Any = None) -> Any:
    """A listener's value of ``key``: its ``listener.name.<listener>.`` override, else the global key."""
    prefixed = f"listener.name.{listener.lower()}.{key}"
    v = values.get(prefixed)
    if v is not None:
        return v
    v = values.get(key)
    return default if v is None else v


def server_context(values: Mapping[str, Any], spec: ListenerSpec) -> ssl.SSLContext:
    name = spec.name
    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        kind = str(setting(values, name, key, "PEM")).upper()
        if kind != "PEM":
            raise ValueError(f"{key}={kind} on listener {name}: only PEM files are supported")
    keystore = setting(values, name, "ssl.keystore.location", "")
    if not keystore:
        raise ValueError(f"listener {name} ({spec.protocol}) needs ssl.keystore.location (a PEM file with the "
                         f"private key and the certificate chain)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = [v.strip() for v in str(setting(values, name, "ssl.enabled.protocols", "TLSv1.2,TLSv1.3"))
                .split(",") if v.strip()]
    bad = [v for v in versions if v not in TLS_VERSIONS]
    if bad or not versions:
        raise ValueError(f"ssl.enabled.protocols on listener {name}: {', '.join(bad) or 'empty'}: only "
                         f"TLSv1.2 and TLSv1.3 are allowed")
    ctx.minimum_version = min(TLS_VERSIONS[v] for v in versions)
    ctx.maximum_version = max(TLS_VERSIONS[v] for v in versions)
    password = setting(values, name, "ssl.key.password", "") or None
    try:
        ctx.load_cert_chain(keystore, password=password)
    except FileNotFoundError:
        raise ValueError(f"ssl.keystore.location on listener {name}: no file {keystore}") from None
    except (ssl.SSLError, OSError) as e:
        raise ValueError(f"ssl.keystore.location on listener {name}: {keystore}: cannot load the key and "
                         f"certificate chain ({e}); check ssl.key.password") from None
    ciphers = str(setting(values, name, "ssl.cipher.suites", "") or "")
    if ciphers:
        try:
            ctx.set_ciphers(ciphers.replace(",", ":"))
        except ssl.SSLError:
            raise ValueError(f"ssl.cipher.suites on listener {name}: no usable cipher in {ciphers!r}") from None
    # KIP-684: on SASL_SSL only the listener-prefixed ssl.client.auth counts
    auth_key = f"listener.name.{name.lower()}.ssl.client.auth"
    auth = str(values.get(auth_key) or (values.get("ssl.client.auth") if spec.protocol == "SSL" else None)
               or "none")
    if auth not in CLIENT_AUTH:
        raise ValueError(f"ssl.client.auth on listener {name}: {auth!r} is not none, requested or required")
    ctx.verify_mode = CLIENT_AUTH[auth]
    truststore = setting(values, name, "ssl.truststore.location", "")
    if truststore:
        try:
            ctx.load_verify_locations(cafile=truststore)
        except FileNotFoundError:
            raise ValueError(f"ssl.truststore.location on listener {name}: no file {truststore}") from None
        except (ssl.SSLError, OSError) as e:
            raise ValueError(f"ssl.truststore.location on listener {name}: {truststore}: {e}") from None
    elif auth != "none":
        raise ValueError(f"ssl.client.auth={auth} on listener {name} needs ssl.truststore.location (the CA "
                         f"bundle client certificates are checked against)")
    return ctx


class TlsContexts:
    """The server contexts of every TLS listener, by listener name."""

    def __init__(self, values: Mapping[str, Any], specs: list[ListenerSpec]) -> None:
        self.values = values
        self.specs = [s for s in specs if s.tls]
        self.contexts: dict[str, ssl.SSLContext] = {s.name: server_context(values, s) for s in self.specs}

    def get(self, listener: str) -> ssl.SSLContext | None:
        return self.contexts.get(listener)

    def reload(self) -> str | None:
        """Rebuild every context from the files; None on success, else the error (old contexts kept)."""
        try:
            fresh = {s.name: server_context(self.values, s) for s in self.specs}
        except ValueError as e:
            return str(e)
        self.contexts = fresh
        return None
