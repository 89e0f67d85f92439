"""Server configuration: one table of keys, read from defaults, a TOML file, env vars and flags.

Rules:
- Keys use Apache Kafka's broker names wherever one exists (``group.initial.rebalance.delay.ms``); ours are
  marked in their doc. Precedence, lowest first: default, TOML file, ``GROUPCOORD_<KEY>`` env var (dots to
  underscores, upper case), command-line flag (``--group-initial-rebalance-delay-ms``).
- The listener and storage flags are ``--host``, ``--port``, ``--data-dir``, ``--metrics-port``.
- An unknown key, a value of the wrong type or out of range, or a file that is not valid TOML is a
  ``ConfigError`` whose message names the key and where it came from. Nothing is silently ignored.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_PREFIX = "GROUPCOORD_"


class ConfigError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Key:
    name: str
    type: type
    default: Any
    doc: str
    min: int | None = None
    max: int | None = None
    choices: tuple[str, ...] = ()
    check: Callable[[Any], object] | None = None  # raises ValueError on a bad value


def parse_per_ip_overrides(text: str) -> dict[str, int]:
    """``host:count,host:count`` (Kafka's ``max.connections.per.ip.overrides``); ValueError names a bad entry."""
    out: dict[str, int] = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        host, sep, count = entry.rpartition(":")
        if not sep or not host or not count.isdigit():
            raise ValueError(f"{entry!r} is not host:count")
        out[host] = int(count)
    return out


def _policy(text: str) -> None:
    """cleanup.policy's values (Kafka: a list of delete and compact)."""
    for part in filter(None, (p.strip() for p in text.split(","))):
        if part not in ("delete", "compact"):
            raise ValueError(f"{part!r} is not delete or compact")


REBALANCE_PROTOCOLS = ("classic", "consumer")
CONSUMER_ASSIGNORS = ("uniform", "range")


def split_list(text: str) -> tuple[str, ...]:
    """A Kafka list value: comma-separated, blanks around items ignored."""
    return tuple(p.strip() for p in text.split(",") if p.strip())


def _protocols(text: str) -> None:
    """group.coordinator.rebalance.protocols (Kafka's GroupCoordinatorConfig): known names; classic required."""
    names = split_list(text)
    for name in names:
        if name not in REBALANCE_PROTOCOLS:
            raise ValueError(f"{name!r} is not one of {', '.join(REBALANCE_PROTOCOLS)}")
    if "classic" not in names:
        raise ValueError("disabling the 'classic' protocol is not supported")


def _assignors(text: str) -> None:
    names = split_list(text)
    if not names:
        raise ValueError("at least one assignor is required")
    for name in names:
        if name not in CONSUMER_ASSIGNORS:
            raise ValueError(f"{name!r} is not one of {', '.join(CONSUMER_ASSIGNORS)}")
    if len(set(names)) != len(names):
        raise ValueError("an assignor is listed twice")


def consumer_protocol_enabled(cfg: Config) -> bool:
    return "consumer" in split_list(cfg["group.coordinator.rebalance.protocols"])


KEYS: tuple[Key, ...] = (
    Key("host", str, "127.0.0.1", "Kafka listener address (ours). Use 0.0.0.0 to bind all interfaces."),
    Key("port", int, 9092, "Kafka listener port (ours); 0 picks a free port.", 0, 65535),
    Key("advertised.host", str, "", "Host advertised in Metadata/FindCoordinator (ours); default: host."),
    Key("advertised.port", int, 0, "Port advertised (ours); 0 = the bound port.", 0, 65535),
    Key("data.dir", str, "./data", "Directory for all partition logs (Kafka: log.dirs)."),
    Key("metrics.host", str, "127.0.0.1", "Prometheus /metrics address (ours)."),
    Key("metrics.port", int, 9404, "Prometheus /metrics port (ours); 0 picks a free port, -1 disables.", -1,
        65535),
    Key("metrics.lag.interval.ms", int, 5000, "Consumer lag gauges: how often the coordinator computes them (ours;"
        " at least 10 times the last computation's duration).", 100),
    Key("metrics.lag.max.groups", int, 1000, "Consumer lag gauges: groups with series of their own, the most "
        "lagging first; the others are summed under group=\"_other\" (ours).", 0),
    Key("metrics.lag.per.partition", bool, False, "Consumer lag gauges: also one series per partition of each "
        "group with series of its own (ours)."),
    Key("node.id", int, 0, "This node's id.", 0),
    Key("cluster.id", str, "groupcoord-cluster", "Cluster id reported in Metadata (ours)."),
    Key("num.partitions", int, 1, "Partitions of auto-created topics.", 1),
    Key("auto.create.topics.enable", bool, True, "Create topics on Metadata/Produce when missing."),
    Key("group.initial.rebalance.delay.ms", int, 3000, "Delay of the first rebalance of an empty group.", 0),
    Key("group.stuck.threshold.ms", int, -1, "A group waiting for members in a rebalance longer than this "
        "counts in groupcoord_groups_stuck and is logged once (ours); -1: twice its largest rebalance timeout.",
        -1),
    Key("group.history.size", int, 50, "Rebalances kept per group, as records in its offsets partition (ours; "
        "`groupcoord groups history`); 0 records none.", 0, 100_000),
    Key("offsets.history.size", int, 0, "Commits kept per group and partition with time, generation, member, "
        "client id and host, as records in its offsets partition (ours; `groupcoord groups offsets --history`, "
        "`reset-offsets --to-commit-time`); 0 (the default) records none: 16 cost up to ~720 B per partition "
        "beside its ~115 B offset, and tools that read __consumer_offsets (Burrow) warn once per such record.",
        0, 1000),
    Key("offsets.history.min.interval.ms", int, 1000, "Offset history: a committer's commit of a partition less "
        "than this after its newest kept entry (same generation) is not recorded, so fast committers keep one entry a "
        "second and cost nothing more; another committer's is always recorded (ours). 0 records every move.", 0),
    Key("group.min.session.timeout.ms", int, 6000, "Smallest session timeout a member may ask for.", 1),
    Key("group.max.session.timeout.ms", int, 1_800_000, "Largest session timeout a member may ask for.", 1),
    Key("group.max.size", int, 2**31 - 1, "Most members a group may have.", 1),
    Key("group.coordinator.rebalance.protocols", str, "classic,consumer", "Group protocols served: classic, and "
        "consumer (KIP-848: ConsumerGroupHeartbeat and ConsumerGroupDescribe are advertised only with it).",
        check=_protocols),
    Key("group.consumer.session.timeout.ms", int, 45000, "Session timeout of consumer-protocol members.", 1),
    Key("group.consumer.min.session.timeout.ms", int, 45000, "Smallest group.consumer.session.timeout.ms.", 1),
    Key("group.consumer.max.session.timeout.ms", int, 60000, "Largest group.consumer.session.timeout.ms.", 1),
    Key("group.consumer.heartbeat.interval.ms", int, 5000, "Heartbeat interval told to consumer-protocol "
        "members.", 1),
    Key("group.consumer.min.heartbeat.interval.ms", int, 5000, "Smallest group.consumer.heartbeat.interval.ms.",
        1),
    Key("group.consumer.max.heartbeat.interval.ms", int, 15000, "Largest group.consumer.heartbeat.interval.ms.",
        1),
    Key("group.consumer.max.size", int, 2**31 - 1, "Most members a consumer-protocol group may have.", 1),
    Key("group.consumer.assignors", str, "uniform,range", "Server-side assignors of consumer-protocol groups "
        "(uniform, range; the first is the default).", check=_assignors),
    Key("group.consumer.migration.policy", str, "bidirectional", "Online migration between the classic and the "
        "consumer protocol: bidirectional, upgrade, downgrade or disabled (case-insensitive; anything else is "
        "disabled, as Kafka). Empty groups convert whatever the policy."),
    Key("offsets.topic.num.partitions", int, 50, "Offsets partitions groups are sharded onto.", 1),
    Key("transaction.state.log.num.partitions", int, 50, "Partitions of __transaction_state transactional ids "
        "are sharded onto (keep it stable: ids move otherwise).", 1),
    Key("transaction.state.log.replication.factor", int, 3, "Cluster mode: replicas of each __transaction_state "
        "partition, capped at the live brokers when the topic is created.", 1, 32767),
    Key("transaction.max.timeout.ms", int, 900_000, "Largest transaction timeout a producer may ask for.", 1),
    Key("transaction.abort.timed.out.transaction.cleanup.interval.ms", int, 10_000, "How often transactions past "
        "their timeout are aborted.", 1),
    Key("transactional.id.expiration.ms", int, 604_800_000, "A transactional id without a transaction for this "
        "long is forgotten.", 1),
    Key("transaction.remove.expired.transaction.cleanup.interval.ms", int, 3_600_000, "How often expired "
        "transactional ids are removed.", 1),
    Key("offsets.retention.minutes", int, 10080, "Offsets of an empty group expire after this.", 1),
    Key("offsets.retention.check.interval.ms", int, 600_000, "How often expired offsets are removed.", 1),
    Key("offset.metadata.max.bytes", int, 4096, "Largest commit metadata string.", 0),
    Key("offsets.max.committed", int, 20_000_000, "Most committed offsets kept (ours; ~128 B each): past it a "
        "group with no committed offsets gets POLICY_VIOLATION for its commits; groups with offsets keep "
        "committing and may add up to 10 percent more.", 1),
    Key("offsets.load.worker.min.bytes", int, -1, "Loading offsets partitions holding at least this many "
        "bytes decodes them in a second process while it replays (ours; 0 always, -1 never: the default, as "
        "it only helps with a core to spare).", -1),
    Key("socket.request.max.bytes", int, 100 * 1024 * 1024, "Largest request frame; larger closes.", 1024),
    Key("max.connections", int, 10_000, "Most open client connections.", 1),
    Key("max.inflight.requests.per.connection", int, 100, "Requests read ahead per connection (ours).", 1),
    Key("socket.max.pending.response.bytes", int, 1 << 20, "A connection is not read while the answers it has "
        "not taken exceed this many bytes (ours; Kafka mutes a channel until its answer is sent).", 1024),
    Key("connections.max.idle.ms", int, 600_000, "Close a connection that sent no whole request for this "
        "long (none pending; a half-sent frame counts as none).", 1),
    Key("max.connections.per.ip", int, 2**31 - 1, "Most open connections from one address.", 0),
    Key("max.connections.per.ip.overrides", str, "", "Per-address limits, 'host:count,host:count'.",
        check=parse_per_ip_overrides),
    Key("message.max.bytes", int, 1_048_588, "Largest record batch accepted by Produce.", 64),
    Key("log.message.timestamp.type", str, "CreateTime", "User topics: CreateTime keeps the producer's "
        "timestamps; LogAppendTime stamps each batch with the time it is appended.",
        choices=("CreateTime", "LogAppendTime")),
    Key("log.message.timestamp.before.max.ms", int, 2**63 - 1, "CreateTime: refuse (INVALID_TIMESTAMP) a "
        "record older than this; the maximum means no limit.", 0),
    Key("log.message.timestamp.after.max.ms", int, 2**63 - 1, "CreateTime: refuse a record further than "
        "this in the future; the maximum means no limit.", 0),
    Key("log.segment.bytes", int, 1 << 30, "Segment size before a roll.", 1024),
    Key("log.retention.ms", int, 7 * 24 * 3600 * 1000, "User topics: delete segments older than this.", -1),
    Key("log.retention.bytes", int, -1, "User topics: keep at most this many bytes a partition.", -1),
    Key("log.roll.ms", int, 7 * 24 * 3600 * 1000, "User topics: roll the active segment this long after its "
        "first append (topic key segment.ms).", 1),
    Key("log.cleanup.policy", str, "delete", "User topics' default cleanup.policy: delete, compact or "
        "compact,delete.", check=lambda v: _policy(v)),
    Key("log.cleaner.delete.retention.ms", int, 86_400_000, "Compacted topics: tombstones are kept this long "
        "after the cleaner first reached them (topic key delete.retention.ms).", 0),
    Key("log.cleaner.min.compaction.lag.ms", int, 0, "Compacted topics: records younger than this are not "
        "compacted (topic key min.compaction.lag.ms).", 0),
    Key("log.cleaner.max.compaction.lag.ms", int, 2**63 - 1, "Compacted topics: a record older than this is "
        "compacted whatever the dirty ratio (topic key max.compaction.lag.ms).", 1),
    Key("log.cleaner.min.cleanable.ratio", float, 0.5, "Compacted topics: compact once this share of the log "
        "is dirty (topic key min.cleanable.dirty.ratio).", 0, 1),
    Key("log.cleaner.dedupe.buffer.size", int, 128 << 20, "Memory the compactor's key map may use; a dirty "
        "section with more keys is compacted in several passes.", 1 << 16),
    Key("log.cleaner.backoff.ms", int, 15_000, "Compactor: sleep this long when no log needs cleaning.", 0),
    Key("compression.type", str, "producer", "User topics' default compression.type: producer keeps the "
        "producer's codec; uncompressed, gzip, snappy, lz4 or zstd recompresses appended batches.",
        choices=("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")),
    Key("log.retention.check.interval.ms", int, 60_000, "How often user topics' retention runs (Kafka's "
        "default is 300000).", 1),
    Key("log.flush.linger.ms", int, 0, "Group commit: gather appends this long before one fsync (ours; 0: a round"
        " starts at once and gathers what arrives during the previous fsync).", 0),
    Key("log.journal.enable", bool, True, "Offsets partitions: make each group-commit round durable with one "
        "fsync of a shared journal instead of one fsync per partition (ours); false = per-partition fsyncs."),
    Key("log.journal.checkpoint.bytes", int, 32 << 20, "Journal: when its current file reaches this size, "
        "the partitions are fsynced in the background and older journal files are deleted (ours).", 1 << 16),
    Key("log.journal.fsync.process", bool, True, "Journal: fsync it in a small child process, so a "
        "round's fsync never waits for the server's GIL (ours); false = in a worker thread."),
    Key("log.journal.fsync.process.answers", bool, True, "Journal: the fsync child also writes the answers "
        "of plain OffsetCommits to their clients once durable, off the event loop (ours)."),
    Key("hot.path.enable", bool, True, "Serve Heartbeat and plain OffsetCommit with hand-written codecs "
        "(ours); false = the generic codec for every request."),
    Key("shutdown.grace.ms", int, 10_000, "On SIGTERM, time given to in-flight requests (ours).", 0),
    # cluster mode (coordinator/cluster/): off while zookeeper.connect is empty
    Key("zookeeper.connect", str, "", "ZooKeeper hosts with an optional chroot (h1:2181,h2:2181/groupcoord); "
        "empty = single node (no ZooKeeper)."),
    Key("zookeeper.session.timeout.ms", int, 18_000, "ZooKeeper session timeout; also bounds connecting at "
        "startup.", 1000),
    Key("zookeeper.fast.failover.enable", bool, True, "Cluster mode: a peer whose process is gone (its "
        "inter-broker listener refuses connects) has its registration removed at once, so its leaderships "
        "move without waiting for its session to expire (ours)."),
    Key("broker.rack", str, "", "This node's rack, registered and shown in Metadata; empty = none."),
    Key("offsets.topic.replication.factor", int, 3, "Replicas of each offsets partition, capped at the live "
        "nodes when the offsets topic is created.", 1, 32767),
    Key("default.replication.factor", int, 1, "Replicas of a user topic created without its own.", 1, 32767),
    Key("min.insync.replicas", int, 2, "Cluster mode: fewest in-sync replicas for an acks=all write, an "
        "offset commit or a group write (capped at the partition's replica count); single node: unused.", 1),
    Key("replica.lag.time.max.ms", int, 30_000, "A follower not caught up with its leader for this long "
        "leaves the ISR.", 1),
    Key("offsets.commit.timeout.ms", int, 5_000, "Cluster mode: how long a commit or group write waits for "
        "its replicas before it is answered COORDINATOR_NOT_AVAILABLE.", 1),
    Key("unclean.leader.election.enable", bool, False, "Let an out-of-sync replica lead when no in-sync one is"
        " live (may lose data)."),
    Key("auto.leader.rebalance.enable", bool, True, "Cluster mode: the controller moves leaderships back to "
        "each partition's preferred (first) replica once it is live and in sync again."),
    Key("leader.imbalance.per.broker.percentage", int, 10, "Cluster mode: a broker's preferred partitions led "
        "elsewhere, in percent, above which the controller moves them back.", 0, 100),
    Key("leader.imbalance.check.interval.seconds", int, 300, "Cluster mode: how often the controller checks "
        "the leader imbalance.", 1),
    # security (coordinator/runtime/security/): listeners, TLS, SASL, authorization
    Key("listeners", str, "", "Listeners, 'NAME://host:port,...' (e.g. PLAINTEXT://127.0.0.1:9092,"
        "SASL_SSL://0.0.0.0:9093); empty = one PLAINTEXT listener on host:port."),
    Key("advertised.listeners", str, "", "What Metadata and FindCoordinator answer per listener, same form; "
        "default: listeners."),
    Key("listener.security.protocol.map", str, "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
        "SASL_SSL:SASL_SSL", "Security protocol of each listener name, 'NAME:PROTOCOL,...'."),
    Key("inter.broker.listener.name", str, "", "Cluster mode: the listener peers use for node-to-node "
        "requests; empty = the first listener."),
    Key("ssl.keystore.type", str, "PEM", "Keystore file type (only PEM).", choices=("PEM",)),
    Key("ssl.keystore.location", str, "", "PEM file with the private key and the certificate chain."),
    Key("ssl.key.password", str, "", "Password of an encrypted private key in the keystore."),
    Key("ssl.truststore.type", str, "PEM", "Truststore file type (only PEM).", choices=("PEM",)),
    Key("ssl.truststore.location", str, "", "PEM CA bundle that client certificates are checked against."),
    Key("ssl.client.auth", str, "none", "Client certificates: none, requested or required (on SASL_SSL only "
        "the listener-prefixed key counts, KIP-684).", choices=("none", "requested", "required")),
    Key("ssl.enabled.protocols", str, "TLSv1.2,TLSv1.3", "TLS versions accepted (TLSv1.2, TLSv1.3)."),
    Key("ssl.cipher.suites", str, "", "OpenSSL cipher list for TLS 1.2; empty = the defaults."),
    Key("ssl.principal.mapping.rules", str, "DEFAULT", "How a client certificate's subject DN becomes the "
        "principal's name (KIP-371 rules)."),
    Key("sasl.enabled.mechanisms", str, "SCRAM-SHA-256,SCRAM-SHA-512", "SASL mechanisms offered on SASL "
        "listeners: SCRAM-SHA-256, SCRAM-SHA-512, PLAIN (checked against the SCRAM credentials)."),
    Key("sasl.server.max.receive.size", int, 524_288, "Largest frame before and during authentication.", 1024),
    Key("sasl.mechanism.inter.broker.protocol", str, "", "Cluster mode: the SASL mechanism this node logs in "
        "with to its peers' inter-broker listener; empty = that listener's first enabled mechanism."),
    Key("sasl.jaas.config", str, "", "Cluster mode: this node's login to its peers on a SASL inter-broker "
        "listener, Kafka's JAAS text (... required username=\"admin\" password=\"...\";); per listener and "
        "mechanism as listener.name.<listener>.<mechanism>.sasl.jaas.config."),
    Key("ssl.endpoint.identification.algorithm", str, "https", "Cluster mode: 'https' checks a peer's "
        "certificate names its advertised host; empty = no hostname check (the CA is still checked).",
        choices=("https", "HTTPS", "")),
    Key("connection.failed.authentication.delay.ms", int, 100, "A failed authentication's connection is "
        "closed this long after its answer.", 0),
    Key("connections.max.reauth.ms", int, 0, "SASL session lifetime told to clients (KIP-368); a connection "
        "that does not re-authenticate in time is closed at its next request; 0 = no limit.", 0),
    Key("authorizer.class.name", str, "", "Turns ACL authorization on: kafka.security.authorizer.AclAuthorizer "
        "(or groupcoord's name, acl); empty = off.",
        choices=("", "kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer",
                 "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "acl")),
    Key("super.users", str, "", "Principals allowed everything, ';'-separated (User:admin;User:CN=node1)."),
    Key("audit.retention.bytes", int, 256 << 20, "The audit trail (admin changes, authorization denials) keeps "
        "at most this many bytes (ours).", 1 << 20),
    Key("audit.retention.ms", int, 30 * 24 * 3600 * 1000, "The audit trail keeps events this long (ours).", 1),
    Key("allow.everyone.if.no.acl.found", bool, False, "With the authorizer on: a resource with no ACL is "
        "open to all (default: closed)."),
)
# keys a listener may override as ``listener.name.<listener lower case>.<key>`` (Kafka's per-listener configs)
PER_LISTENER = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.key.password", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.client.auth", "ssl.enabled.protocols", "ssl.cipher.suites",
    "ssl.principal.mapping.rules", "sasl.enabled.mechanisms", "sasl.server.max.receive.size",
    "connections.max.reauth.ms", "sasl.jaas.config", "ssl.endpoint.identification.algorithm",
})
BY_NAME = {k.name: k for k in KEYS}
SASL_MECHANISM_NAMES = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class Config:
    """Immutable, validated settings; read with ``cfg["group.max.size"]`` or ``cfg.get(...)``."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        merged = {k.name: k.default for k in KEYS}
        for name, raw in (values or {}).items():
            merged[name] = coerce(name, raw, "argument")
        object.__setattr__(self, "_values", merged)

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self._values.get(name, default)

    def with_overrides(self, **values: Any) -> Config:
        """Overrides given with underscores for dots (``data_dir="..."``)."""
        merged = dict(self._values)
        merged.update({k.replace("_", "."): v for k, v in values.items()})
        return Config(merged)

    def items(self) -> list[tuple[str, Any]]:
        return sorted(self._values.items())

    def __setattr__(self, *_: Any) -> None:
        raise AttributeError("Config is immutable")


def _key(name: str) -> Key | None:
    """The key of ``name``: a table key, or ``listener.name.<listener>.<key>`` for a per-listener key."""
    key = BY_NAME.get(name)
    if key is None and name.startswith("listener.name."):
        listener, _, base = name[len("listener.name."):].partition(".")
        if listener and base in PER_LISTENER:
            return BY_NAME[base]
        mechanism, _, rest = base.partition(".")  # listener.name.<l>.<mechanism>.sasl.jaas.config (Kafka's)
        if listener and rest == "sasl.jaas.config" and mechanism.upper() in SASL_MECHANISM_NAMES:
            return BY_NAME[rest]
    return key


def coerce(name: str, raw: Any, source: str) -> Any:
    key = _key(name)
    if key is None:
        raise ConfigError(f"unknown config key {name!r} (from {source})")
    value: Any
    try:
        if key.type is bool:
            if isinstance(raw, bool):
                value = raw
            elif isinstance(raw, str) and raw.lower() in ("true", "false", "1", "0", "yes", "no"):
                value = raw.lower() in ("true", "1", "yes")
            else:
                raise ValueError(f"expected true or false, got {raw!r}")
        elif key.type is float:
            if isinstance(raw, bool):
                raise ValueError(f"expected a number, got {raw!r}")
            value = float(raw)
        elif key.type is int:
            if isinstance(raw, (bool, float)):
                raise ValueError(f"expected an integer, got {raw!r}")
            value = int(raw)
        else:
            if not isinstance(raw, (str, int)):
                raise ValueError(f"expected a string, got {raw!r}")
            value = str(raw)
        if key.check is not None:
            key.check(value)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"bad value for {name} (from {source}): {e}") from None
    if key.choices and value not in key.choices:
        raise ConfigError(f"bad value for {name} (from {source}): {value!r} is not one of "
                          f"{', '.join(key.choices)}")
    if key.min is not None and value < key.min:
        raise ConfigError(f"bad value for {name} (from {source}): {value} is below the minimum {key.min}")
    if key.max is not None and value > key.max:
        raise ConfigError(f"bad value for {name} (from {source}): {value} is above the maximum {key.max}")
    return value


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in table.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, name + "."))
        else:
            out[name] = v
    return out


def load(file: str | Path | None = None, env: Mapping[str, str] | None = None,
         flags: Mapping[str, Any] | None = None) -> Config:
    values: dict[str, Any] = {}
    if file is not None:
        path = Path(file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"cannot read config file {path}: {e.strerror or e}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"config file {path} is not UTF-8 text") from None
        try:
            table = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {path} is not valid TOML: {e}") from None
        for name, raw in _flatten(table).items():
            values[name] = coerce(name, raw, f"file {path}")
    env = os.environ if env is None else env
    env_names = {ENV_PREFIX + k.name.replace(".", "_").upper(): k.name for k in KEYS}
    for var, raw in env.items():
        if var in env_names:
            values[env_names[var]] = coerce(env_names[var], raw, f"env {var}")
        elif var.startswith(ENV_PREFIX) and var not in ("GROUPCOORD_CONFIG",):
            raise ConfigError(f"unknown config env var {var}")
    for name, raw in (flags or {}).items():
        if raw is not None:
            values[name] = coerce(name, raw, f"flag --{name.replace('.', '-')}")
    cfg = Config(values)
    from coordinator.core.security.listeners import listener_specs  # pure parsing; no runtime import cycle

    try:
        listener_specs(cfg)  # type: ignore[arg-type]
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if cfg["group.min.session.timeout.ms"] > cfg["group.max.session.timeout.ms"]:
        raise ConfigError("group.min.session.timeout.ms is above group.max.session.timeout.ms")
    _check_consumer_group_keys(cfg)
    return cfg


def _check_consumer_group_keys(cfg: Config) -> None:
    """Kafka's GroupCoordinatorConfig requirements on the group.consumer.* timeouts."""
    for what in ("session.timeout.ms", "heartbeat.interval.ms"):
        value, lo, hi = (cfg[f"group.consumer.{what}"], cfg[f"group.consumer.min.{what}"],
                         cfg[f"group.consumer.max.{what}"])
        if lo > hi:
            raise ConfigError(f"group.consumer.min.{what} ({lo}) is above group.consumer.max.{what} ({hi})")
        if not lo <= value <= hi:
            raise ConfigError(f"group.consumer.{what} ({value}) must be between group.consumer.min.{what} ({lo}) "
                              f"and group.consumer.max.{what} ({hi})")
    if cfg["group.consumer.heartbeat.interval.ms"] >= cfg["group.consumer.session.timeout.ms"]:
        raise ConfigError("group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms")
