"""Per-group configs (issue #37 item 5, #36): Kafka 4's group configs (ConfigResource GROUP, 32) plus ours, as records.

Rules:
- Keys: ``offsets.retention.minutes`` (ours: this group's offsets retention; -1 = its offsets never expire, not
  even those a v2-4 commit gave an explicit retention time; else 1..INT_MAX), and Kafka 4's
  ``consumer.session.timeout.ms`` / ``consumer.heartbeat.interval.ms`` (KIP-848 groups; INT, at least 1). Each
  unset key is the server's value (``Limits``: offsets.retention.minutes, group.consumer.session.timeout.ms,
  group.consumer.heartbeat.interval.ms).
- Checks (Kafka's GroupConfig.validate over the server's values overlaid with the group's): an unknown key is
  INVALID_CONFIG "Unknown group config name: k"; a value that is not an INT or is out of range INVALID_CONFIG;
  the consumer session timeout and heartbeat interval must lie within group.consumer.min/max.session.timeout.ms
  and group.consumer.min/max.heartbeat.interval.ms, and the session timeout must be above the interval
  (INVALID_CONFIG naming the keys). Values are stored normalised (``str(int(v))``).
- Changes (``replace``: legacy AlterConfigs, the given set replaces the group's; ``apply_incremental``:
  IncrementalAlterConfigs SET (0) / DELETE (1); APPEND (2) / SUBTRACT (3) are INVALID_CONFIG "Can't APPEND to
  key k because its type is not LIST." as in Kafka's controller). A null value other than in a DELETE is
  INVALID_REQUEST "Null value not supported for : k" (Kafka's ConfigAdminManager). All return the new set.
- Record (ours, in the group's offsets partition; Kafka uses key versions 0-8 and 16, rebalance_history 1000):
  key = int16 1001, group string; value = int16 0, int32 count, then count (name, value) string pairs. A group
  whose overrides all went is a tombstone. Compaction keeps the latest per group.
- Replay (load, following, and after the durable write, like every record): a record sets the group's
  overrides, a tombstone clears them. A write is ``stage``d while it is not durable: a later change of the same
  group is computed from it (``latest``), so two concurrent IncrementalAlterConfigs both count; ``unstage``
  drops it once durable or failed. Describe and the rules read only what replay made (``of``).
- A group's configs go with the group: DeleteGroups of the group, and the offsets expiry removing it (unless a
  KIP-848 consumer group of that id remains), write the tombstone in the same write (``forget``). A config set
  for a group id that has no group yet is kept (Kafka 4 stores group configs on their own) until then.
- Read by the rules: ``retention_ms`` (offsets.py, the expiry) and ``int_value`` (the KIP-848 heartbeat's session
  timeout and interval, from each member's next heartbeat).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .records import RecordError

CONFIGS_KEY_VERSION = 1001
_KEY_HEAD = b"\x03\xe9"  # int16 1001
CONFIGS_VALUE_VERSION = 0
INT_MAX = 2**31 - 1

RETENTION = "offsets.retention.minutes"
SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
NEVER = -1  # offsets.retention.minutes: the group's offsets never expire
KEYS = (SESSION_TIMEOUT, HEARTBEAT_INTERVAL, RETENTION)  # described in this order (Kafka's two first)
DOCS = {
    RETENTION: "How long this group's committed offsets are kept (as the server's offsets.retention.minutes); -1 "
               "keeps them forever.",
    SESSION_TIMEOUT: "The timeout to detect client failures when using the consumer group protocol.",
    HEARTBEAT_INTERVAL: "The heartbeat interval given to the members of a consumer group.",
}

_H, _I = struct.Struct(">h"), struct.Struct(">i")


class InvalidGroupConfig(ValueError):
    """A group config Kafka would refuse (INVALID_CONFIG); the message names the key and the reason."""


class InvalidGroupConfigRequest(ValueError):
    """A malformed change (INVALID_REQUEST), e.g. a null value to set."""


class ConfigsRecordError(RecordError):
    """A group configs record does not decode."""


@dataclass(frozen=True, slots=True)
class Limits:
    """The server's values: each key's default and the bounds of the consumer timeouts."""

    retention_minutes: int = 10_080
    session_timeout_ms: int = 45_000
    min_session_timeout_ms: int = 45_000
    max_session_timeout_ms: int = 60_000
    heartbeat_interval_ms: int = 5_000
    min_heartbeat_interval_ms: int = 5_000
    max_heartbeat_interval_ms: int = 15_000

    def defaults(self) -> dict[str, int]:
        return {SESSION_TIMEOUT: self.session_timeout_ms, HEARTBEAT_INTERVAL: self.heartbeat_interval_ms,
                RETENTION: self.retention_minutes}


# ---------------------------------------------------------------- checks and changes

def _parse(name: str, raw: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidGroupConfig(f"Invalid value {raw} for configuration {name}: Not a number of type INT") from None
    if not -2**31 <= value <= INT_MAX:
        raise InvalidGroupConfig(f"Invalid value {raw} for configuration {name}: Not a number of type INT")
    if name == RETENTION:
        if value != NEVER and value < 1:
            raise InvalidGroupConfig(f"Invalid value {raw} for configuration {name}: Value must be -1 (never "
                                     "expire) or at least 1")
    elif value < 1:
        raise InvalidGroupConfig(f"Invalid value {raw} for configuration {name}: Value must be at least 1")
    return value


def validate(overrides: Mapping[str, str | None], limits: Limits) -> dict[str, str]:
    """The overrides checked (module rules) and normalised; InvalidGroupConfig(Request) otherwise."""
    nulls = [k for k, v in overrides.items() if v is None]
    if nulls:
        raise InvalidGroupConfigRequest("Null value not supported for : " + ", ".join(nulls))
    for name in overrides:
        if name not in KEYS:
            raise InvalidGroupConfig(f"Unknown group config name: {name}")
    parsed = {k: _parse(k, v) for k, v in overrides.items() if v is not None}
    merged = {**limits.defaults(), **parsed}
    interval, session = merged[HEARTBEAT_INTERVAL], merged[SESSION_TIMEOUT]
    if interval < limits.min_heartbeat_interval_ms:
        raise InvalidGroupConfig(f"{HEARTBEAT_INTERVAL} must be greater than or equal to "
                                 "group.consumer.min.heartbeat.interval.ms")
    if interval > limits.max_heartbeat_interval_ms:
        raise InvalidGroupConfig(f"{HEARTBEAT_INTERVAL} must be less than or equal to "
                                 "group.consumer.max.heartbeat.interval.ms")
    if session < limits.min_session_timeout_ms:
        raise InvalidGroupConfig(f"{SESSION_TIMEOUT} must be greater than or equal to "
                                 "group.consumer.min.session.timeout.ms")
    if session > limits.max_session_timeout_ms:
        raise InvalidGroupConfig(f"{SESSION_TIMEOUT} must be less than or equal to "
                                 "group.consumer.max.session.timeout.ms")
    if session <= interval:
        raise InvalidGroupConfig(f"{SESSION_TIMEOUT} must be greater than {HEARTBEAT_INTERVAL}")
    return {k: str(v) for k, v in sorted(parsed.items())}


def replace(given: Mapping[str, str | None], limits: Limits) -> dict[str, str]:
    """Legacy AlterConfigs: the given set becomes the group's whole set."""
    return validate(given, limits)


def apply_incremental(current: Mapping[str, str], ops: Iterable[tuple[str, int, str | None]],
                      limits: Limits) -> dict[str, str]:
    """IncrementalAlterConfigs SET (0) / DELETE (1) on the group's overrides; returns the new set, checked."""
    new: dict[str, str | None] = dict(current)
    ops = list(ops)
    nulls = [name for name, op, raw in ops if op != 1 and raw is None]
    if nulls:
        raise InvalidGroupConfigRequest("Null value not supported for : " + ", ".join(nulls))
    for name, op, raw in ops:
        if name not in KEYS:
            raise InvalidGroupConfig(f"Unknown group config name: {name}")
        if op == 0:
            new[name] = raw
        elif op == 1:
            new.pop(name, None)
        elif op in (2, 3):
            raise InvalidGroupConfig(f"Can't {'APPEND' if op == 2 else 'SUBTRACT'} to key {name} because its type "
                                     "is not LIST.")
        else:
            raise InvalidGroupConfigRequest(f"Unknown config operation {op} for {name}")
    return validate(new, limits)


def describe(overrides: Mapping[str, str], limits: Limits, keys: Iterable[str] | None, synonyms: bool,
             docs: bool) -> list[dict]:
    """DescribeConfigs entries (Kafka's ConfigHelper for GROUP): every key (or those asked), its value, source
    DYNAMIC_GROUP_CONFIG (8) when the group sets it, else DEFAULT_CONFIG (5); never read-only; type INT."""
    wanted = set(keys) if keys else None
    defaults = limits.defaults()
    out = []
    for name in KEYS:
        if wanted is not None and name not in wanted:
            continue
        value = overrides.get(name, str(defaults[name]))
        source = SOURCE_GROUP if name in overrides else SOURCE_DEFAULT
        out.append({"name": name, "value": value, "read_only": False, "is_default": source == SOURCE_DEFAULT,
                    "config_source": source, "is_sensitive": False,
                    "synonyms": [{"name": name, "value": value, "source": source}] if synonyms else [],
                    "config_type": TYPE_INT, "documentation": DOCS[name] if docs else None})
    return out


SOURCE_GROUP, SOURCE_DEFAULT, TYPE_INT = 8, 5, 3  # DescribeConfigs' ConfigSource / ConfigType ids


# ---------------------------------------------------------------- the store

class GroupConfigs:
    """One offsets partition's group configs: durable (``values``, what replay made) and staged writes."""

    __slots__ = ("staged", "values")

    def __init__(self) -> None:
        self.values: dict[str, dict[str, str]] = {}
        self.staged: dict[str, tuple[object, dict[str, str]]] = {}

    def replay(self, key: bytes, value: bytes | None) -> None:
        group = decode_key(key)
        if value is None:
            self.values.pop(group, None)
            return
        configs = decode_value(value)  # decoded whole: a bad value changes nothing
        if configs:
            self.values[group] = configs
        else:
            self.values.pop(group, None)

    def of(self, group_id: str) -> dict[str, str]:
        """The group's durable overrides."""
        return dict(self.values.get(group_id, ()))

    def latest(self, group_id: str) -> dict[str, str]:
        """The overrides a change builds on: the last staged write's, else the durable ones."""
        staged = self.staged.get(group_id)
        return dict(staged[1]) if staged is not None else self.of(group_id)

    def stage(self, group_id: str, configs: dict[str, str]) -> object:
        ticket = object()
        self.staged[group_id] = (ticket, dict(configs))
        return ticket

    def unstage(self, group_id: str, ticket: object) -> None:
        staged = self.staged.get(group_id)
        if staged is not None and staged[0] is ticket:
            del self.staged[group_id]

    def int_value(self, group_id: str, name: str) -> int | None:
        """The group's override of ``name`` as an int, None when it has none."""
        configs = self.values.get(group_id)
        raw = configs.get(name) if configs is not None else None
        try:
            return None if raw is None else int(raw)
        except ValueError:  # written by something other than ``validate``: the server's value applies
            return None

    def retention_ms(self, group_id: str, default_ms: int) -> int | None:
        """The group's offsets retention in ms (``default_ms`` without an override); None: never expire."""
        minutes = self.int_value(group_id, RETENTION) if self.values else None
        if minutes is None:
            return default_ms
        return None if minutes == NEVER else minutes * 60_000


def forget(configs: GroupConfigs, group_id: str) -> list[bytes]:
    """The key to tombstone when the group goes (none when it has no configs, durable or staged)."""
    if group_id in configs.values or group_id in configs.staged:
        configs.staged.pop(group_id, None)
        return [encode_key(group_id)]
    return []


def is_configs_key(key: bytes) -> bool:
    return key[:2] == _KEY_HEAD


# ---------------------------------------------------------------- codec

def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > 32767:
        raise ValueError("string too long for a group configs record")
    return _H.pack(len(b)) + b


def encode_key(group_id: str) -> bytes:
    return _KEY_HEAD + _str(group_id)


def encode_value(configs: Mapping[str, str]) -> bytes | None:
    """The record's value; None (a tombstone) when there are no overrides."""
    if not configs:
        return None
    parts = [_H.pack(CONFIGS_VALUE_VERSION), _I.pack(len(configs))]
    for name, value in sorted(configs.items()):
        parts += [_str(name), _str(value)]
    return b"".join(parts)


def _read_str(buf: bytes, pos: int) -> tuple[str, int]:
    try:
        n = _H.unpack_from(buf, pos)[0]
    except struct.error:
        raise ConfigsRecordError("group configs record truncated") from None
    end = pos + 2 + n
    if n < 0 or end > len(buf):
        raise ConfigsRecordError("group configs record truncated")
    return bytes(buf[pos + 2:end]).decode("utf-8", "replace"), end


def decode_key(key: bytes) -> str:
    if key[:2] != _KEY_HEAD:
        raise ConfigsRecordError("not a group configs key")
    group, end = _read_str(key, 2)
    if end != len(key):
        raise ConfigsRecordError("trailing bytes in group configs key")
    return group


def decode_value(value: bytes) -> dict[str, str]:
    try:
        version, count = _H.unpack_from(value, 0)[0], _I.unpack_from(value, 2)[0]
    except struct.error:
        raise ConfigsRecordError("group configs record truncated") from None
    if version != CONFIGS_VALUE_VERSION:
        raise ConfigsRecordError(f"unsupported group configs value version {version}")
    if count < 0 or count > len(value):
        raise ConfigsRecordError("bad count")
    out, pos = {}, 6
    for _ in range(count):
        name, pos = _read_str(value, pos)
        out[name], pos = _read_str(value, pos)
    if pos != len(value):
        raise ConfigsRecordError("trailing bytes in group configs record")
    return out
