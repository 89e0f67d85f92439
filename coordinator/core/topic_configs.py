"""Topic configs: the keys Apache Kafka 3.9 defines for a topic, how a value is checked, and what a topic's
effective settings are. Sans-IO: strings in, checked values or ``InvalidConfig`` out.

Rules (Kafka's ``LogConfig`` and ``ConfigDef``):
- Only the names in ``DEFS`` are topic configs; any other is ``InvalidConfig("Unknown topic config name:
  <key>")``. A null value is refused ("Null value not supported for topic configs: <key>").
- Each value is parsed by its type (LONG, INT, DOUBLE, BOOLEAN, STRING, LIST; surrounding blanks ignored)
  and checked by its validator; a failure names the key, the value and the reason, as Kafka words it
  ("Invalid value abc for configuration retention.ms: Not a number of type LONG").
- Across keys: ``min.compaction.lag.ms`` must not exceed ``max.compaction.lag.ms`` (topic override, else the
  server default). ``remote.storage.enable=true`` is refused: this server has no tiered storage.
- Stored overrides are the normalised strings (``"compact, delete"`` -> ``"compact,delete"``), which is also
  how DescribeConfigs writes values (Kafka's ``ConfigDef.convertToString``).
- A topic key's default comes from its server synonym (``retention.ms`` <- ``log.retention.ms``) where the
  server has one, else Kafka's default. ``HONOURED`` keys change what the server does; the others are stored
  and reported only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

# DescribeConfigs' ConfigSource and ConfigType ids (Kafka's DescribeConfigsResponse)
SOURCE_TOPIC, SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT_BROKER, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 1, 2, 3, 4, 5
TYPE_IDS = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7, "CLASS": 8,
            "PASSWORD": 9}


class InvalidConfig(ValueError):
    """A topic config Kafka would refuse (INVALID_CONFIG); the message names the key and the reason."""


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: str  # LONG, INT, DOUBLE, BOOLEAN, STRING, LIST
    default: Any  # Kafka's default (parsed form)
    doc: str
    server_key: str | None = None  # our server config key that is this key's default (Kafka's synonym)
    check: Callable[[Any], str | None] | None = None  # a reason the parsed value is bad, or None


def _at_least(lo: float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= lo else f"Value must be at least {_fmt_num(lo)}"


def _between(lo: float, hi: float) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi else f"Value must be no more than {_fmt_num(hi)}" if v > hi \
        else f"Value must be at least {_fmt_num(lo)}"


def _one_of(*allowed: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in allowed else f"String must be one of: {', '.join(allowed)}"


def _list_of(*allowed: str) -> Callable[[Any], str | None]:
    def check(values: list[str]) -> str | None:
        bad = [v for v in values if v not in allowed]
        return f"String must be one of: {', '.join(allowed)}" if bad else None
    return check


def _level(lo: int, hi: int, also: int | None = None) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi or v == also else f"Value must be between {lo} and {hi}"


def _throttled_replicas(values: list[str]) -> str | None:
    if values == ["*"]:
        return None
    for v in values:
        part, sep, broker = v.partition(":")
        if not sep or not part.strip().isdigit() or not broker.strip().isdigit():
            return "Must be the wildcard (*) or a list of partitionId:brokerId pairs"
    return None


def _format_version(v: str) -> str | None:
    return None if re.fullmatch(r"\d+\.\d+(\.\d+)?(-IV\d+)?", v) else f"Version `{v}` is not a valid version"


def _fmt_num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _remote_storage(v: bool) -> str | None:
    return "Tiered Storage functionality is disabled in the broker (groupcoord has no tiered storage)" if v \
        else None


_C = ConfigDef
DEFS: tuple[ConfigDef, ...] = (
    _C("cleanup.policy", "LIST", ["delete"], "delete: remove old segments by retention.ms/retention.bytes; "
       "compact: keep the latest record of each key; both may be given.", "log.cleanup.policy",
       _list_of("compact", "delete")),
    _C("compression.gzip.level", "INT", -1, "Compression level for gzip.", None, _level(1, 9, -1)),
    _C("compression.lz4.level", "INT", 9, "Compression level for lz4.", None, _level(1, 17)),
    _C("compression.type", "STRING", "producer", "producer keeps the producer's codec; a codec name "
       "recompresses every appended batch with it; uncompressed stores them uncompressed.", "compression.type",
       _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    _C("compression.zstd.level", "INT", 3, "Compression level for zstd.", None, _level(-131072, 22)),
    _C("delete.retention.ms", "LONG", 86_400_000, "How long a tombstone of a compacted topic is kept after the "
       "cleaner first reached it.", "log.cleaner.delete.retention.ms", _at_least(0)),
    _C("file.delete.delay.ms", "LONG", 60_000, "Delay before a deleted segment file is removed.", None,
       _at_least(0)),
    _C("flush.messages", "LONG", LONG_MAX, "Messages between forced fsyncs.", None, _at_least(1)),
    _C("flush.ms", "LONG", LONG_MAX, "Time between forced fsyncs.", None, _at_least(0)),
    _C("follower.replication.throttled.replicas", "LIST", [], "Replicas throttled on the follower side.", None,
       _throttled_replicas),
    _C("index.interval.bytes", "INT", 4096, "Bytes between two offset index entries.", None, _at_least(0)),
    _C("leader.replication.throttled.replicas", "LIST", [], "Replicas throttled on the leader side.", None,
       _throttled_replicas),
    _C("local.retention.bytes", "LONG", -2, "Tiered storage: local retention by size.", None, _at_least(-2)),
    _C("local.retention.ms", "LONG", -2, "Tiered storage: local retention by time.", None, _at_least(-2)),
    _C("max.compaction.lag.ms", "LONG", LONG_MAX, "Longest time a record stays uncompacted.",
       "log.cleaner.max.compaction.lag.ms", _at_least(1)),
    _C("max.message.bytes", "INT", 1_048_588, "Largest record batch accepted.", "message.max.bytes",
       _at_least(0)),
    _C("message.downconversion.enable", "BOOLEAN", True, "Down-conversion for old consumers.", None),
    _C("message.format.version", "STRING", "3.0-IV1", "Deprecated message format version.", None,
       _format_version),
    _C("message.timestamp.after.max.ms", "LONG", LONG_MAX, "CreateTime: largest allowed future skew.",
       "log.message.timestamp.after.max.ms", _at_least(0)),
    _C("message.timestamp.before.max.ms", "LONG", LONG_MAX, "CreateTime: largest allowed past skew.",
       "log.message.timestamp.before.max.ms", _at_least(0)),
    _C("message.timestamp.difference.max.ms", "LONG", LONG_MAX, "Deprecated timestamp skew limit.", None,
       _at_least(0)),
    _C("message.timestamp.type", "STRING", "CreateTime", "CreateTime keeps producers' timestamps; "
       "LogAppendTime stamps each batch when appended.", "log.message.timestamp.type",
       _one_of("CreateTime", "LogAppendTime")),
    _C("min.cleanable.dirty.ratio", "DOUBLE", 0.5, "Dirty share of the log that makes it worth compacting.",
       "log.cleaner.min.cleanable.ratio", _between(0, 1)),
    _C("min.compaction.lag.ms", "LONG", 0, "Shortest time a record stays uncompacted.",
       "log.cleaner.min.compaction.lag.ms", _at_least(0)),
    _C("min.insync.replicas", "INT", 1, "Fewest in-sync replicas for an acks=all write.", "min.insync.replicas",
       _at_least(1)),
    _C("preallocate", "BOOLEAN", False, "Preallocate segment files.", None),
    _C("remote.log.copy.disable", "BOOLEAN", False, "Tiered storage: stop copying.", None),
    _C("remote.log.delete.on.disable", "BOOLEAN", False, "Tiered storage: delete on disable.", None),
    _C("remote.storage.enable", "BOOLEAN", False, "Tiered storage (not available here).", None,
       _remote_storage),
    _C("retention.bytes", "LONG", -1, "Largest size of a partition before old segments go (-1: unlimited).",
       "log.retention.bytes"),
    _C("retention.ms", "LONG", 604_800_000, "Age after which old segments go (-1: unlimited).",
       "log.retention.ms", _at_least(-1)),
    _C("segment.bytes", "INT", 1_073_741_824, "Segment size before a roll.", "log.segment.bytes",
       _at_least(14)),
    _C("segment.index.bytes", "INT", 10_485_760, "Offset index size.", None, _at_least(4)),
    _C("segment.jitter.ms", "LONG", 0, "Random jitter subtracted from segment.ms.", None, _at_least(0)),
    _C("segment.ms", "LONG", 604_800_000, "Age of the active segment after which it is rolled.", "log.roll.ms",
       _at_least(1)),
    _C("unclean.leader.election.enable", "BOOLEAN", False, "Let an out-of-sync replica lead.",
       "unclean.leader.election.enable"),
)
BY_NAME: dict[str, ConfigDef] = {d.name: d for d in DEFS}
HONOURED = frozenset({
    "cleanup.policy", "retention.ms", "retention.bytes", "segment.bytes", "segment.ms", "delete.retention.ms",
    "min.compaction.lag.ms", "max.compaction.lag.ms", "min.cleanable.dirty.ratio", "max.message.bytes",
    "message.timestamp.type", "message.timestamp.before.max.ms", "message.timestamp.after.max.ms",
    "compression.type", "min.insync.replicas",
})


def parse(name: str, raw: str | None) -> Any:
    """The parsed value of one topic config, or ``InvalidConfig`` naming the key and the reason."""
    d = BY_NAME.get(name)
    if d is None:
        raise InvalidConfig(f"Unknown topic config name: {name}")
    if raw is None:
        raise InvalidConfig(f"Null value not supported for topic configs: {name}")
    text = raw.strip()
    value: Any
    try:
        if d.type in ("LONG", "INT"):
            value = int(text, 10)
            limit = LONG_MAX if d.type == "LONG" else INT_MAX
            if not -limit - 1 <= value <= limit:
                raise ValueError(text)
        elif d.type == "DOUBLE":
            value = float(text)
        elif d.type == "BOOLEAN":
            if text.lower() not in ("true", "false"):
                raise InvalidConfig(f"Invalid value {raw} for configuration {name}: Expected value to be either "
                                    "true or false")
            value = text.lower() == "true"
        elif d.type == "LIST":
            value = [v.strip() for v in text.split(",")] if text else []
        else:
            value = text
    except ValueError as e:
        if isinstance(e, InvalidConfig):
            raise
        raise InvalidConfig(f"Invalid value {raw} for configuration {name}: Not a number of type {d.type}") from None
    reason = d.check(value) if d.check is not None else None
    if reason is not None:
        raise InvalidConfig(f"Invalid value {raw} for configuration {name}: {reason}")
    return value


def to_string(name: str, value: Any) -> str:
    """Kafka's ConfigDef.convertToString for a parsed value."""
    d = BY_NAME[name]
    if d.type == "LIST":
        return ",".join(value)
    if d.type == "BOOLEAN":
        return "true" if value else "false"
    if d.type == "DOUBLE":
        return repr(float(value))
    return str(value)


def validate(overrides: Mapping[str, str | None], server: Mapping[str, Any]) -> dict[str, str]:
    """Check a topic's complete set of overrides; returns them normalised (see the module rules)."""
    out: dict[str, str] = {}
    for name, raw in overrides.items():
        out[name] = to_string(name, parse(name, raw))
    values = effective(out, server)
    lo, hi = values["min.compaction.lag.ms"], values["max.compaction.lag.ms"]
    if lo > hi:
        raise InvalidConfig(f"conflict topic config setting min.compaction.lag.ms ({lo}) > max.compaction.lag.ms "
                            f"({hi})")
    return out


def server_default(d: ConfigDef, server: Mapping[str, Any]) -> tuple[Any, str | None]:
    """(default value, the server key it came from or None for Kafka's own default)."""
    if d.server_key is not None:
        try:
            raw = server[d.server_key]
        except KeyError:
            return d.default, None
        if d.type == "LIST" and isinstance(raw, str):
            return [v.strip() for v in raw.split(",") if v.strip()], d.server_key
        return raw, d.server_key
    return d.default, None


def effective(overrides: Mapping[str, str], server: Mapping[str, Any]) -> dict[str, Any]:
    """Every topic key's parsed value: the override, else the server default, else Kafka's default."""
    out: dict[str, Any] = {}
    for d in DEFS:
        if d.name in overrides:
            out[d.name] = parse(d.name, overrides[d.name])
        else:
            out[d.name] = server_default(d, server)[0]
    return out


def not_acted_on(overrides: Iterable[str]) -> list[str]:
    return sorted(k for k in overrides if k not in HONOURED)


def describe_entries(overrides: Mapping[str, str], server: Mapping[str, Any],
                     server_is_set: Callable[[str], bool], keys: Iterable[str] | None, synonyms: bool,
                     docs: bool) -> list[dict[str, Any]]:
    """DescribeConfigs entries of a topic, as Kafka's ConfigHelper.createTopicConfigEntry writes them: source
    DYNAMIC_TOPIC_CONFIG when overridden, else STATIC_BROKER_CONFIG when the server key was set, else
    DEFAULT_CONFIG; synonyms (topic, then server key) only when asked; documentation only when asked."""
    wanted = set(keys) if keys else None
    out = []
    for d in DEFS:
        if wanted is not None and d.name not in wanted:
            continue
        chain: list[dict[str, Any]] = []
        if d.name in overrides:
            chain.append({"name": d.name, "value": overrides[d.name], "source": SOURCE_TOPIC})
        default, key = server_default(d, server)
        if key is not None:
            chain.append({"name": key, "value": _server_string(d, default),
                          "source": SOURCE_STATIC_BROKER if server_is_set(key) else SOURCE_DEFAULT})
        value = overrides[d.name] if d.name in overrides else to_string(d.name, default)
        source = chain[0]["source"] if chain else SOURCE_DEFAULT
        out.append({"name": d.name, "value": value, "read_only": False, "is_default": source == SOURCE_DEFAULT,
                    "config_source": source, "is_sensitive": False, "synonyms": chain if synonyms else [],
                    "config_type": TYPE_IDS[d.type], "documentation": d.doc if docs else None})
    return out


def _server_string(d: ConfigDef, value: Any) -> str:
    return to_string(d.name, value)


def apply_incremental(current: Mapping[str, str], ops: Iterable[tuple[str, int, str | None]],
                      server: Mapping[str, Any]) -> dict[str, str]:
    """IncrementalAlterConfigs on a topic's overrides: SET (0), DELETE (1), APPEND (2) and SUBTRACT (3), the
    last two on LIST keys only (from the effective value, as Kafka does); returns the new overrides, checked."""
    new = dict(current)
    for name, op, raw in ops:
        d = BY_NAME.get(name)
        if d is None:
            raise InvalidConfig(f"Unknown topic config name: {name}")
        if op == 0:
            new[name] = to_string(name, parse(name, raw))
        elif op == 1:
            new.pop(name, None)
        elif op in (2, 3):
            if d.type != "LIST":
                verb = "append" if op == 2 else "subtract"
                raise InvalidConfig(f"Config value {verb} is not allowed for config key: {name}")
            have = parse(name, new[name]) if name in new else server_default(d, server)[0]
            given = parse(name, raw)
            if op == 2:
                merged = list(have) + [v for v in given if v not in have]
            else:
                merged = [v for v in have if v not in given]
            new[name] = ",".join(merged)
        else:
            raise InvalidConfig(f"Unknown config operation {op} for {name}")
    return validate(new, server)
