"""Topic configs are checked as Kafka's LogConfig checks them, and described with Kafka's sources.

Each case: given these overrides (and server settings), this result or this INVALID_CONFIG message."""

from __future__ import annotations

import pytest

from coordinator.config import Config
from coordinator.core import topic_configs as tc

SERVER = Config()


@pytest.mark.parametrize(("given", "message"), [
    ({"bogus.key": "1"}, "Unknown topic config name: bogus.key"),
    ({"cleanup.policy": "nonsense"}, "Invalid value nonsense for configuration cleanup.policy: String must be "
                                     "one of: compact, delete"),
    ({"retention.ms": "abc"}, "Invalid value abc for configuration retention.ms: Not a number of type LONG"),
    ({"retention.ms": "-2"}, "Invalid value -2 for configuration retention.ms: Value must be at least -1"),
    ({"segment.bytes": "2147483648"}, "Not a number of type INT"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "Value must be no more than 1"),
    ({"message.timestamp.type": "Now"}, "String must be one of: CreateTime, LogAppendTime"),
    ({"compression.type": "brotli"}, "String must be one of"),
    ({"preallocate": "yes"}, "Expected value to be either true or false"),
    ({"retention.ms": None}, "Null value not supported for topic configs: retention.ms"),
    ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
     "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"),
    ({"remote.storage.enable": "true"}, "Tiered Storage functionality is disabled"),
])
def test_bad_configs_are_refused_naming_the_key_and_reason(given: dict, message: str) -> None:
    with pytest.raises(tc.InvalidConfig) as e:
        tc.validate(given, SERVER)
    assert message in str(e.value)


def test_good_values_are_normalised_as_kafka_writes_them() -> None:
    got = tc.validate({"cleanup.policy": " compact , delete ", "retention.ms": " 1000 ",
                       "min.cleanable.dirty.ratio": "0.01", "preallocate": "TRUE"}, SERVER)
    assert got == {"cleanup.policy": "compact,delete", "retention.ms": "1000", "min.cleanable.dirty.ratio": "0.01",
                   "preallocate": "true"}


def test_effective_values_come_from_override_then_server_then_kafka_default() -> None:
    server = Config({"log.retention.ms": 20_000})
    v = tc.effective({"segment.bytes": "4096"}, server)
    assert v["segment.bytes"] == 4096  # override
    assert v["retention.ms"] == 20_000  # server key log.retention.ms
    assert v["segment.jitter.ms"] == 0  # Kafka's default (no server key here)
    assert v["cleanup.policy"] == ["delete"]


def test_describe_sources_and_synonyms() -> None:
    server = Config({"log.retention.ms": 20_000})
    is_set = {"log.retention.ms"}.__contains__
    entries = {e["name"]: e for e in tc.describe_entries({"cleanup.policy": "compact"}, server, is_set, None,
                                                         True, True)}
    assert set(entries) == {d.name for d in tc.DEFS}
    cp = entries["cleanup.policy"]
    assert (cp["value"], cp["config_source"], cp["is_default"]) == ("compact", tc.SOURCE_TOPIC, False)
    assert [s["name"] for s in cp["synonyms"]] == ["cleanup.policy", "log.cleanup.policy"]
    rm = entries["retention.ms"]
    assert (rm["value"], rm["config_source"]) == ("20000", tc.SOURCE_STATIC_BROKER)
    sb = entries["segment.bytes"]
    assert (sb["value"], sb["config_source"], sb["is_default"]) == ("1073741824", tc.SOURCE_DEFAULT, True)
    assert entries["min.cleanable.dirty.ratio"]["value"] == "0.5"
    assert rm["config_type"] == tc.TYPE_IDS["LONG"] and cp["config_type"] == tc.TYPE_IDS["LIST"]
    assert rm["documentation"]
    only = tc.describe_entries({}, server, is_set, ["retention.ms"], False, False)
    assert [(e["name"], e["synonyms"], e["documentation"]) for e in only] == [("retention.ms", [], None)]


def test_incremental_operations() -> None:
    cur = {"retention.ms": "1000"}
    assert tc.apply_incremental(cur, [("cleanup.policy", 2, "compact")], SERVER) == {
        "retention.ms": "1000", "cleanup.policy": "delete,compact"}  # APPEND to the effective default
    assert tc.apply_incremental({"cleanup.policy": "compact,delete"}, [("cleanup.policy", 3, "delete")],
                                SERVER) == {"cleanup.policy": "compact"}
    assert tc.apply_incremental(cur, [("retention.ms", 1, None), ("segment.bytes", 0, "4096")], SERVER) == {
        "segment.bytes": "4096"}
    with pytest.raises(tc.InvalidConfig, match=r"Config value append is not allowed for config key: retention\.ms"):
        tc.apply_incremental(cur, [("retention.ms", 2, "5")], SERVER)
    with pytest.raises(tc.InvalidConfig, match="Unknown topic config name: nope"):
        tc.apply_incremental(cur, [("nope", 1, None)], SERVER)
