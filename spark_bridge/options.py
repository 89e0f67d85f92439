"""Options of the ``groupcoord`` data source: Spark's Kafka source/sink option names, checked up front.

Rules:
- Parsing is pure (no network): every mistake a user can make in the options is reported here, before
  Spark plans anything, as ``OptionsError`` with a message that names the option and what is expected.
  Reachability and topic existence are checked by the driver-side planner (``spark_bridge.planner``).
- Option names are case-insensitive (Spark passes them so); an unknown option is an error that lists the
  valid ones. Spark's own bookkeeping options (``path``, ``checkpointLocation``) are accepted and ignored.
- Exactly one of ``subscribe``, ``subscribePattern``, ``assign`` for reads. Offsets specs are ``earliest``,
  ``latest`` or JSON ``{"topic": {"0": 23, "1": -2}}`` (-2 earliest, -1 latest), as Spark's.
- The parsed options are frozen dataclasses: they are pickled to Spark's Python workers with the reader.
- Security, as Spark's Kafka source passes Kafka client settings: ``kafka.security.protocol``,
  ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config`` (or librdkafka's ``kafka.sasl.username`` /
  ``kafka.sasl.password``), ``kafka.ssl.truststore.location`` / ``.type``, ``kafka.ssl.keystore.location`` /
  ``.type``, ``kafka.ssl.key.password``, ``kafka.ssl.endpoint.identification.algorithm`` (PEM files only),
  on reads and writes alike. They become one ``client.security.SecurityConfig`` (``security``) used by every
  connection of the planner, the executors' range readers, the group mirror and the sink's producers; a bad
  combination is an ``OptionsError`` naming the option. The certificate files must exist where the
  executors run. Passwords stay out of the options' ``repr``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from client.errors import SecurityConfigError
from client.security import PLAINTEXT, SecurityConfig

EARLIEST, LATEST = -2, -1
DEFAULT_GROUP_PREFIX = "spark-groupcoord"

# canonical spelling, as documented (lookups are case-insensitive)
SECURITY_OPTIONS = (
    "kafka.security.protocol", "kafka.sasl.mechanism", "kafka.sasl.jaas.config", "kafka.sasl.username",
    "kafka.sasl.password", "kafka.ssl.truststore.location", "kafka.ssl.truststore.type",
    "kafka.ssl.keystore.location", "kafka.ssl.keystore.type", "kafka.ssl.key.password",
    "kafka.ssl.endpoint.identification.algorithm",
)
READ_OPTIONS = (
    "kafka.bootstrap.servers", "subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets",
    "startingTimestamp", "endingTimestamp", "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
    "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "minPartitions", "failOnDataLoss",
    "includeHeaders", "groupIdPrefix", "kafka.group.id", "commitOffsetsToGroup", "kafka.request.timeout.ms",
    "kafka.client.id", *SECURITY_OPTIONS,
)
WRITE_OPTIONS = ("kafka.bootstrap.servers", "topic", "kafka.request.timeout.ms", "kafka.client.id",
                 "kafka.linger.ms", "kafka.batch.size", *SECURITY_OPTIONS)
IGNORED = ("path", "checkpointLocation")


class OptionsError(ValueError):
    """A data source option is missing, unknown, or malformed."""


# An offsets spec: "earliest", "latest", or {topic: {partition: offset}} with -2/-1 meaning earliest/latest.
OffsetSpec = str | dict[str, dict[int, int]]


@dataclass(frozen=True, slots=True)
class ReadOptions:
    bootstrap: str
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: dict[str, tuple[int, ...]] = field(default_factory=dict)
    starting: OffsetSpec = "earliest"
    ending: OffsetSpec = "latest"
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    starting_by_timestamp: dict[str, dict[int, int]] | None = None
    ending_by_timestamp: dict[str, dict[int, int]] | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    group_id: str | None = None
    group_id_prefix: str = DEFAULT_GROUP_PREFIX
    commit_offsets_to_group: bool = True
    request_timeout_ms: int = 30000
    client_id: str = "groupcoord-spark"
    security: SecurityConfig = PLAINTEXT

    def subscription(self) -> str:
        if self.subscribe:
            return f"subscribe={','.join(self.subscribe)}"
        if self.pattern is not None:
            return f"subscribePattern={self.pattern}"
        return f"assign={json.dumps({t: list(p) for t, p in self.assign.items()})}"


@dataclass(frozen=True, slots=True)
class WriteOptions:
    bootstrap: str
    topic: str | None = None
    request_timeout_ms: int = 30000
    client_id: str = "groupcoord-spark-sink"
    linger_ms: int = 5
    batch_size: int = 262144
    security: SecurityConfig = PLAINTEXT


def _check_names(options: Mapping[str, str], valid: tuple[str, ...], what: str) -> dict[str, str]:
    lower = {k.lower(): k for k in valid}
    ignored = {k.lower() for k in IGNORED}
    out: dict[str, str] = {}
    for key, value in options.items():
        k = key.lower()
        if k in ignored:
            continue
        if k not in lower:
            raise OptionsError(f"unknown option {key!r} for the groupcoord {what}; valid options: "
                               f"{', '.join(valid)}")
        out[lower[k]] = str(value)
    return out


def _int(opts: dict[str, str], name: str, minimum: int | None = None) -> int | None:
    if name not in opts:
        return None
    try:
        value = int(opts[name])
    except ValueError:
        raise OptionsError(f"option {name} must be an integer, got {opts[name]!r}") from None
    if minimum is not None and value < minimum:
        raise OptionsError(f"option {name} must be >= {minimum}, got {value}")
    return value


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    if name not in opts:
        return default
    value = opts[name].strip().lower()
    if value not in ("true", "false"):
        raise OptionsError(f"option {name} must be true or false, got {opts[name]!r}")
    return value == "true"


def _duration_ms(text: str, name: str) -> int:
    """Spark's duration strings: "30s", "5 minutes", "100ms", or plain milliseconds."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", text.lower())
    units = {"": 1, "ms": 1, "millisecond": 1, "milliseconds": 1, "s": 1000, "second": 1000, "seconds": 1000,
             "m": 60000, "min": 60000, "minute": 60000, "minutes": 60000, "h": 3600000, "hour": 3600000,
             "hours": 3600000}
    if not m or m.group(2) not in units:
        raise OptionsError(f"option {name} must be a duration such as 30s or 5m, got {text!r}")
    return int(m.group(1)) * units[m.group(2)]


def _partition_map(text: str, name: str, value_name: str) -> dict[str, dict[int, int]]:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise OptionsError(f"option {name} is not valid JSON ({e.msg} at character {e.pos}): {text!r}; expected "
                           f'e.g. {{"topicA":{{"0":23,"1":-1}}}}') from None
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise OptionsError(f'option {name} must map topics to {{partition: {value_name}}}, e.g. '
                           f'{{"topicA":{{"0":23,"1":-1}}}}; got {text!r}')
    out: dict[str, dict[int, int]] = {}
    for topic, parts in raw.items():
        out[topic] = {}
        for p, v in parts.items():
            try:
                pi = int(p)
            except ValueError:
                raise OptionsError(f"option {name}: partition {p!r} of topic {topic!r} is not a number") from None
            if not isinstance(v, int) or isinstance(v, bool):
                raise OptionsError(f"option {name}: {value_name} of {topic}-{p} must be an integer, got {v!r}")
            out[topic][pi] = v
    return out


def _offsets(opts: dict[str, str], name: str, default: str, allowed: tuple[str, ...]) -> OffsetSpec:
    text = opts.get(name, default).strip()
    if text.lower() in ("earliest", "latest"):
        if text.lower() not in allowed:
            raise OptionsError(f"option {name}={text} is not allowed here (use {' or '.join(allowed)} or JSON)")
        return text.lower()
    if not text.startswith("{"):
        raise OptionsError(f"option {name} must be earliest, latest or JSON such as "
                           f'{{"topicA":{{"0":23,"1":-2}}}}; got {text!r}')
    spec = _partition_map(text, name, "offset")
    for topic, parts in spec.items():
        for p, off in parts.items():
            if off < -2:
                raise OptionsError(f"option {name}: offset {off} of {topic}-{p} is invalid (-2 earliest, -1 latest)")
    return spec


def _security(opts: dict[str, str]) -> SecurityConfig:
    given = {k[len("kafka."):]: v for k, v in opts.items() if k in SECURITY_OPTIONS}
    if not given:
        return PLAINTEXT
    try:
        return SecurityConfig.from_mapping(given, source="groupcoord data source options", prefix="kafka.")
    except SecurityConfigError as e:
        raise OptionsError(str(e)) from None


def parse_read(options: Mapping[str, str], streaming: bool) -> ReadOptions:
    opts = _check_names(options, READ_OPTIONS, "source")
    bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise OptionsError("option kafka.bootstrap.servers is required (e.g. 127.0.0.1:9092)")
    chosen = [n for n in ("subscribe", "subscribePattern", "assign") if n in opts]
    if len(chosen) != 1:
        raise OptionsError("exactly one of the options subscribe, subscribePattern, assign must be given; got "
                           + (", ".join(chosen) if chosen else "none"))
    subscribe: tuple[str, ...] = ()
    pattern = None
    assign: dict[str, tuple[int, ...]] = {}
    if chosen[0] == "subscribe":
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise OptionsError("option subscribe must name at least one topic")
    elif chosen[0] == "subscribePattern":
        pattern = opts["subscribePattern"]
        try:
            re.compile(pattern)
        except re.error as e:
            raise OptionsError(f"option subscribePattern is not a valid regular expression: {e}") from None
    else:
        try:
            raw = json.loads(opts["assign"])
        except json.JSONDecodeError as e:
            raise OptionsError(f'option assign is not valid JSON ({e.msg}); expected e.g. {{"topicA":[0,1]}}') \
                from None
        if (not isinstance(raw, dict) or not raw
                or not all(isinstance(v, list) and all(isinstance(p, int) for p in v) for v in raw.values())):
            raise OptionsError(f'option assign must map topics to partition lists, e.g. {{"topicA":[0,1]}}; '
                               f"got {opts['assign']!r}")
        assign = {t: tuple(sorted(set(ps))) for t, ps in raw.items()}
    starting = _offsets(opts, "startingOffsets", "latest" if streaming else "earliest",
                        ("earliest", "latest") if streaming else ("earliest",))
    if streaming and "endingOffsets" in opts:
        raise OptionsError("option endingOffsets is for batch reads only (a stream has no end)")
    ending = _offsets(opts, "endingOffsets", "latest", ("latest",))
    if isinstance(starting, dict) or isinstance(ending, dict):
        for spec, name, bad in ((starting, "startingOffsets", LATEST), (ending, "endingOffsets", EARLIEST)):
            if not streaming and isinstance(spec, dict) and any(v == bad for ps in spec.values() for v in ps.values()):
                raise OptionsError(f"option {name}: {bad} ({'latest' if bad == LATEST else 'earliest'}) is not "
                                   "allowed for a batch read")
    by_ts = {n: _partition_map(opts[n], n, "timestamp") if n in opts else None
             for n in ("startingOffsetsByTimestamp", "endingOffsetsByTimestamp")}
    min_rows = _int(opts, "minOffsetsPerTrigger", 1)
    return ReadOptions(
        bootstrap=bootstrap, subscribe=subscribe, pattern=pattern, assign=assign, starting=starting,
        ending=ending, starting_timestamp=_int(opts, "startingTimestamp", 0),
        ending_timestamp=_int(opts, "endingTimestamp", 0),
        starting_by_timestamp=by_ts["startingOffsetsByTimestamp"],
        ending_by_timestamp=by_ts["endingOffsetsByTimestamp"],
        max_offsets_per_trigger=_int(opts, "maxOffsetsPerTrigger", 1),
        min_offsets_per_trigger=min_rows,
        max_trigger_delay_ms=_duration_ms(opts.get("maxTriggerDelay", "15m"), "maxTriggerDelay"),
        min_partitions=_int(opts, "minPartitions", 1),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        group_id=opts.get("kafka.group.id") or None,
        group_id_prefix=opts.get("groupIdPrefix", DEFAULT_GROUP_PREFIX),
        commit_offsets_to_group=_bool(opts, "commitOffsetsToGroup", True),
        request_timeout_ms=_int(opts, "kafka.request.timeout.ms", 1) or 30000,
        client_id=opts.get("kafka.client.id", "groupcoord-spark"),
        security=_security(opts),
    )


def parse_write(options: Mapping[str, str]) -> WriteOptions:
    opts = _check_names(options, WRITE_OPTIONS, "sink")
    bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise OptionsError("option kafka.bootstrap.servers is required (e.g. 127.0.0.1:9092)")
    return WriteOptions(bootstrap=bootstrap, topic=opts.get("topic") or None,
                        request_timeout_ms=_int(opts, "kafka.request.timeout.ms", 1) or 30000,
                        client_id=opts.get("kafka.client.id", "groupcoord-spark-sink"),
                        linger_ms=_int(opts, "kafka.linger.ms", 0) or 5,
                        batch_size=_int(opts, "kafka.batch.size", 1) or 262144,
                        security=_security(opts))


def as_dict(options: Any) -> dict[str, str]:
    """Spark's option mapping (a CaseInsensitiveDict) as a plain dict."""
    return {str(k): str(v) for k, v in dict(options).items()}
