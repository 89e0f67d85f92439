"""Cluster state and its ZooKeeper encoding, laid out as Apache Kafka's ZooKeeper-era ``ZkData``.

Paths (under the chroot of ``zookeeper.connect``):
- ``/brokers/ids/<id>``: ephemeral, the live broker's registration (host, port, rack, endpoints).
- ``/controller``: ephemeral, ``{"brokerid": id}`` of the elected controller.
- ``/controller_epoch``: persistent, the controller epoch as a decimal string; bumped (version-checked)
  by every newly elected controller in the same transaction that creates ``/controller``.
- ``/brokers/topics/<topic>``: persistent, the replica assignment ``{"partitions": {"0": [1, 2, 3]}}``.
- ``/brokers/topics/<topic>/partitions/<p>/state``: persistent, ``{"leader", "leader_epoch", "isr",
  "controller_epoch"}``; written only by the controller, each write checked against the controller epoch's
  znode version and (for updates) the state znode's own version.
- ``/config/topics/<topic>``: persistent, the topic's config overrides ``{"version": 1, "config": {...}}``;
  created in the same transaction as ``/brokers/topics/<topic>`` (Kafka writes it first, separately).
  AlterConfigs sets it (version-checked) in one transaction with a change notification.
- ``/config/changes/config_change_<seq>``: persistent sequential, Kafka's
  ``ConfigEntityChangeNotificationSequenceZNode`` ``{"version": 2, "entity_path": "topics/<topic>"}``;
  every node watches the children and re-reads the named topics' configs; a notification older than
  ``CONFIG_CHANGE_EXPIRY_MS`` (Kafka's 15 minutes) is purged by the nodes that read it.
- ``/admin/delete_topics/<topic>``: persistent and empty, a deletion request (Kafka's
  ``DeleteTopicsTopicZNode``); the controller deletes the topic's znodes, its config and the request in one
  transaction fenced by the controller epoch.

Rules:
- Everything here is plain data and pure functions: no kazoo, no clock. Decoders raise ``ValueError`` on
  JSON that is not what they expect (a corrupt znode is reported, never half-read).
- ``NO_LEADER`` (-1) is Kafka's ``LeaderAndIsr.NO_LEADER``: a partition whose leader is gone and for which
  no eligible replica is live.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

NO_LEADER = -1

BROKERS_IDS = "/brokers/ids"
BROKERS_TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
CONFIG_CHANGE_EXPIRY_MS = 15 * 60 * 1000  # Kafka's ZkNodeChangeNotificationListener changeExpirationMs
DELETE_TOPICS = "/admin/delete_topics"
PERSISTENT_PATHS = ("/brokers", BROKERS_IDS, BROKERS_TOPICS, "/config", CONFIG_TOPICS, CONFIG_CHANGES, "/admin",
                    DELETE_TOPICS)

TopicPartition = tuple[str, int]


def broker_path(node_id: int) -> str:
    return f"{BROKERS_IDS}/{node_id}"


def topic_path(topic: str) -> str:
    return f"{BROKERS_TOPICS}/{topic}"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKERS_TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{BROKERS_TOPICS}/{topic}/partitions/{partition}"


def state_path(topic: str, partition: int) -> str:
    return f"{BROKERS_TOPICS}/{topic}/partitions/{partition}/state"


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live node. ``endpoints`` are its advertised listeners (name, host, port) and ``protocols`` each
    listener's security protocol; a node with one PLAINTEXT listener leaves both empty and ``host``:``port``
    is that listener. ``host``/``port`` are otherwise the znode's fields: the PLAINTEXT endpoint, if any."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[tuple[str, str, int], ...] = ()
    protocols: tuple[tuple[str, str], ...] = ()

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """Where a client of ``listener`` reaches this node; None when the node has no such listener."""
        if not self.endpoints:
            return (self.host, self.port) if listener in ("PLAINTEXT", "") else None
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Kafka's ``LeaderIsrAndControllerEpoch``: who leads, since which leader epoch, who is in sync, and the
    epoch of the controller that wrote it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What one node knows of the cluster at a moment: every field read from ZooKeeper."""

    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    controller_id: int = -1
    controller_epoch: int = 0
    assignments: dict[str, dict[int, tuple[int, ...]]] = field(default_factory=dict)  # topic -> p -> replicas
    states: dict[TopicPartition, PartitionState] = field(default_factory=dict)

    def leader(self, topic: str, partition: int) -> int:
        """The partition's live leader, or NO_LEADER (none, unknown, or its broker is not registered)."""
        st = self.states.get((topic, partition))
        if st is None or st.leader not in self.brokers:
            return NO_LEADER
        return st.leader

    def led_by(self, node_id: int, topic: str) -> set[int]:
        return {p for (t, p), st in self.states.items() if t == topic and st.leader == node_id
                and node_id in self.brokers}


# ---------------------------------------------------------------- JSON, as Kafka writes it
def _load(data: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{what}: not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{what}: expected a JSON object")
    return obj


def _int(obj: dict[str, Any], key: str, what: str) -> int:
    v = obj.get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        raise ValueError(f"{what}: {key!r} is not an integer")
    return v


def _ints(v: Any, what: str) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in v):
        raise ValueError(f"{what}: expected a list of integers")
    return tuple(v)


def encode_broker(b: BrokerInfo, timestamp_ms: int) -> bytes:
    """Kafka's BrokerIdZNode v5: every advertised listener in ``endpoints`` with its security protocol;
    ``host``/``port`` are the PLAINTEXT endpoint's (null and -1 without one), as Kafka writes them."""
    endpoints = b.endpoints or (("PLAINTEXT", b.host, b.port),)
    protocols = dict(b.protocols) if b.endpoints else {"PLAINTEXT": "PLAINTEXT"}
    plain = next(((h, p) for n, h, p in endpoints if protocols.get(n) == "PLAINTEXT"), (None, -1))
    obj: dict[str, Any] = {
        "listener_security_protocol_map": protocols,
        "endpoints": [f"{n}://{f'[{h}]' if ':' in h else h}:{p}" for n, h, p in endpoints], "jmx_port": -1,
        "features": {}, "host": plain[0], "port": plain[1], "timestamp": str(timestamp_ms), "version": 5,
    }
    if b.rack is not None:
        obj["rack"] = b.rack
    return json.dumps(obj).encode()


def decode_broker(node_id: int, data: bytes) -> BrokerInfo:
    what = f"broker {node_id} registration"
    obj = _load(data, what)
    host = obj.get("host")
    if host is not None and not isinstance(host, str):
        raise ValueError(f"{what}: 'host' is not a string")
    port = _int(obj, "port", what)
    rack = obj.get("rack")
    rack = rack if isinstance(rack, str) else None
    raw_map = obj.get("listener_security_protocol_map") or {"PLAINTEXT": "PLAINTEXT"}
    raw_endpoints = obj.get("endpoints")
    if raw_endpoints is None:  # an old registration: host and port are its one (PLAINTEXT) listener
        if host is None:
            raise ValueError(f"{what}: neither 'endpoints' nor 'host'")
        return BrokerInfo(node_id, host, port, rack)
    if not isinstance(raw_map, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                for k, v in raw_map.items()):
        raise ValueError(f"{what}: 'listener_security_protocol_map' is not an object of strings")
    if not isinstance(raw_endpoints, list) or not all(isinstance(e, str) for e in raw_endpoints):
        raise ValueError(f"{what}: 'endpoints' is not a list of strings")
    endpoints: list[tuple[str, str, int]] = []
    for entry in raw_endpoints:
        name, sep, address = entry.partition("://")
        h, _, p = address.rpartition(":")
        if not sep or not p.isdigit() or name.upper() not in raw_map:
            raise ValueError(f"{what}: endpoint {entry!r} is not NAME://host:port of a mapped listener")
        endpoints.append((name.upper(), h.strip("[]"), int(p)))
    return broker_info(node_id, rack, endpoints, {k.upper(): v.upper() for k, v in raw_map.items()})


def broker_info(node_id: int, rack: str | None, endpoints: list[tuple[str, str, int]],
                protocols: dict[str, str]) -> BrokerInfo:
    """A node with these listeners; one PLAINTEXT listener gives the plain form (no ``endpoints``)."""
    plain = next(((h, p) for n, h, p in endpoints if protocols.get(n) == "PLAINTEXT"), ("", -1))
    if len(endpoints) == 1 and endpoints[0][0] == "PLAINTEXT" and protocols.get("PLAINTEXT") == "PLAINTEXT":
        return BrokerInfo(node_id, plain[0], plain[1], rack)
    return BrokerInfo(node_id, plain[0], plain[1], rack, tuple(endpoints),
                      tuple((n, protocols[n]) for n, _, _ in endpoints if n in protocols))


def encode_controller(node_id: int, timestamp_ms: int) -> bytes:
    return json.dumps({"version": 1, "brokerid": node_id, "timestamp": str(timestamp_ms)}).encode()


def decode_controller(data: bytes) -> int:
    return _int(_load(data, "controller"), "brokerid", "controller")


def decode_controller_epoch(data: bytes) -> int:
    try:
        return int(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"controller epoch: not an integer: {data[:40]!r}") from None


def encode_assignment(replicas: dict[int, tuple[int, ...]]) -> bytes:
    return json.dumps({"version": 2, "partitions": {str(p): list(r) for p, r in sorted(replicas.items())},
                       "adding_replicas": {}, "removing_replicas": {}}).encode()


def decode_assignment(topic: str, data: bytes) -> dict[int, tuple[int, ...]]:
    what = f"topic {topic} assignment"
    parts = _load(data, what).get("partitions")
    if not isinstance(parts, dict):
        raise ValueError(f"{what}: 'partitions' is not an object")
    out: dict[int, tuple[int, ...]] = {}
    for p, replicas in parts.items():
        try:
            index = int(p)
        except ValueError:
            raise ValueError(f"{what}: partition {p!r} is not an integer") from None
        out[index] = _ints(replicas, what)
    return out


def encode_state(st: PartitionState) -> bytes:
    return json.dumps({"controller_epoch": st.controller_epoch, "leader": st.leader, "version": 1,
                       "leader_epoch": st.leader_epoch, "isr": list(st.isr)}).encode()


def decode_state(tp: TopicPartition, data: bytes) -> PartitionState:
    what = f"partition {tp[0]}-{tp[1]} state"
    obj = _load(data, what)
    return PartitionState(_int(obj, "leader", what), _int(obj, "leader_epoch", what),
                          _ints(obj.get("isr"), what), _int(obj, "controller_epoch", what))


def encode_topic_config(configs: dict[str, str]) -> bytes:
    """Kafka's ``ConfigEntityZNode`` for a topic."""
    return json.dumps({"version": 1, "config": dict(sorted(configs.items()))}).encode()


def decode_topic_config(topic: str, data: bytes) -> dict[str, str]:
    what = f"topic {topic} config"
    config = _load(data, what).get("config")
    if not isinstance(config, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                               for k, v in config.items()):
        raise ValueError(f"{what}: 'config' is not an object of strings")
    return dict(config)


def encode_config_change(topic: str) -> bytes:
    """Kafka's ``ConfigEntityChangeNotificationSequenceZNode`` naming a topic's config."""
    return json.dumps({"version": 2, "entity_path": f"topics/{topic}"}).encode()


def decode_config_change(data: bytes) -> str | None:
    """The topic a change notification names; None for another entity type (brokers, clients, ...)."""
    what = "config change notification"
    path = _load(data, what).get("entity_path")
    if not isinstance(path, str):
        raise ValueError(f"{what}: 'entity_path' is not a string")
    kind, _, name = path.partition("/")
    return name if kind == "topics" and name else None


def change_sequence(name: str) -> int | None:
    """The sequence number of a ``config_change_<seq>`` child; None for any other name."""
    digits = name[len(CONFIG_CHANGE_PREFIX):] if name.startswith(CONFIG_CHANGE_PREFIX) else ""
    return int(digits) if digits.isdigit() else None


def expired_changes(ctimes: dict[str, int], now_ms: int, expiry_ms: int = CONFIG_CHANGE_EXPIRY_MS) -> list[str]:
    """The notifications (name -> creation time in ms) older than ``expiry_ms`` at ``now_ms``: to purge."""
    return sorted(n for n, ctime in ctimes.items() if now_ms - ctime > expiry_ms)
