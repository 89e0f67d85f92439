"""Listeners as Kafka names them: where the server accepts connections, with which security protocol, and
what it advertises for each.

Rules (Kafka's SocketServerConfigs, KIP-103):
- ``listeners`` is a comma list of ``NAME://host:port``; names are unique, upper case as written (Kafka
  upper-cases them), ports unique (0 = pick a free one). An empty host binds the default interface,
  ``0.0.0.0`` every interface. Empty (the default): one ``PLAINTEXT`` listener on the old ``host``/``port``
  keys, so ``make run`` and every existing config keep working. ``listeners`` and a ``host``/``port`` other
  than the defaults together are a config error (which one wins would be a guess).
- ``listener.security.protocol.map`` maps each name to PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL; the
  default maps the four protocol names to themselves, so any other name (INTERNAL, EXTERNAL) must be mapped.
- ``advertised.listeners`` (same form) is what Metadata and FindCoordinator answer, per listener name; it
  defaults to ``listeners``; it may not hold ``0.0.0.0``; a listener it does not name advertises its own
  address; ports may repeat (a load balancer). Port 0 advertises the bound port; an empty or ``0.0.0.0``
  host advertises the old ``advertised.host`` if set, else 127.0.0.1. The old ``advertised.host`` and
  ``advertised.port`` keys apply to the single default listener only.
- ``inter.broker.listener.name`` names the listener peers use to reach this node (replica fetches); empty:
  the first listener.
- Every problem is a ``ValueError`` naming the key and the entry; the server turns it into a startup error
  (one line, exit 2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_MAP = ",".join(f"{p}:{p}" for p in PROTOCOLS)
_ENTRY = re.compile(r"^([A-Za-z0-9_]+)://(\[[0-9A-Fa-f:.]+\]|[^:\s]*):(\d+)$")


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    name: str  # upper case, e.g. "SASL_SSL" or "INTERNAL"
    protocol: str  # one of PROTOCOLS
    host: str  # bind address ("" = default interface)
    port: int  # 0 = a free port
    advertised_host: str
    advertised_port: int  # 0 = the bound port

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def parse_endpoints(text: str, key: str) -> list[tuple[str, str, int]]:
    """``NAME://host:port,...`` -> [(NAME, host, port)] (an IPv6 host keeps no brackets)."""
    out: list[tuple[str, str, int]] = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        m = _ENTRY.match(entry)
        if m is None:
            raise ValueError(f"{key}: {entry!r} is not NAME://host:port")
        name, host, port = m.group(1).upper(), m.group(2).strip("[]"), int(m.group(3))
        if port > 65535:
            raise ValueError(f"{key}: {entry!r}: port {port} is above 65535")
        out.append((name, host, port))
    return out


def parse_protocol_map(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        name, sep, proto = entry.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name or proto not in PROTOCOLS:
            raise ValueError(f"listener.security.protocol.map: {entry!r} is not NAME:PROTOCOL with PROTOCOL one "
                             f"of {', '.join(PROTOCOLS)}")
        if name in out:
            raise ValueError(f"listener.security.protocol.map: {name} is mapped twice")
        out[name] = proto
    return out


def listener_specs(values: dict[str, object]) -> list[ListenerSpec]:
    """The listeners of a config (its values by key name: ``Config`` or a dict in tests), checked."""
    text = str(values.get("listeners") or "")
    old_host, old_port = str(values.get("host", "127.0.0.1")), int(values.get("port", 9092))  # type: ignore[arg-type]
    adv_host, adv_port = str(values.get("advertised.host") or ""), int(values.get("advertised.port") or 0)  # type: ignore[arg-type]
    protocols = parse_protocol_map(str(values.get("listener.security.protocol.map") or DEFAULT_MAP))
    if not text:
        return [ListenerSpec("PLAINTEXT", "PLAINTEXT", old_host, old_port, adv_host or _advertisable(old_host),
                             adv_port)]
    if (old_host, old_port) != ("127.0.0.1", 9092):
        raise ValueError("listeners is set: host and port apply only without it (put the address in listeners)")
    if adv_host or adv_port:
        raise ValueError("listeners is set: use advertised.listeners, not advertised.host/advertised.port")
    entries = parse_endpoints(text, "listeners")
    names = [n for n, _, _ in entries]
    if len(set(names)) != len(names):
        raise ValueError(f"listeners: a name is used twice in {text!r}")
    ports = [p for _, _, p in entries if p]
    if len(set(ports)) != len(ports):
        raise ValueError(f"listeners: a port is used twice in {text!r}")
    advertised = {n: (h, p) for n, h, p in parse_endpoints(str(values.get("advertised.listeners") or ""),
                                                             "advertised.listeners")}
    for n, (h, _) in advertised.items():
        if n not in names:
            raise ValueError(f"advertised.listeners: {n} is not a listener (listeners: {', '.join(names)})")
        if h == "0.0.0.0":
            raise ValueError(f"advertised.listeners: {n} advertises 0.0.0.0, which no client can reach")
    specs = []
    for name, host, port in entries:
        if name not in protocols:
            raise ValueError(f"listener {name} has no security protocol: add {name}:<PROTOCOL> to "
                             f"listener.security.protocol.map")
        a_host, a_port = advertised.get(name, (_advertisable(host), 0))
        specs.append(ListenerSpec(name, protocols[name], host, port, a_host or _advertisable(host), a_port))
    inter = str(values.get("inter.broker.listener.name") or "").upper()
    if inter and inter not in names:
        raise ValueError(f"inter.broker.listener.name: {inter} is not a listener (listeners: {', '.join(names)})")
    return specs


def inter_broker_listener(specs: list[ListenerSpec], values: dict[str, object]) -> ListenerSpec:
    name = str(values.get("inter.broker.listener.name") or "").upper()
    return next((s for s in specs if s.name == name), specs[0])


def _advertisable(host: str) -> str:
    return "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
