"""Topic configs against the real server over TCP: created, checked, stored, applied and described.

Stories: CreateTopics with configs lists them (v5+) and they survive a restart; bad keys/values are
INVALID_CONFIG naming the key and nothing is created; validate_only creates nothing; a repeated name is
INVALID_REQUEST and nothing of it is created; keyless records to a compacted topic are refused with nothing
appended; per-topic retention beats the server default both ways; LogAppendTime and compression.type are
applied per topic; a garbage stored config file stops startup naming the file; the CLI creates, describes and
alters configs."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "compat"))

from compat_support import call  # noqa: E402
from server_process import ServerProcess  # noqa: E402

from protocol.errors import ErrorCode  # noqa: E402
from protocol.record_batch import (  # noqa: E402
    TIMESTAMP_TYPE_MASK,
    Compression,
    build_batch,
    parse_header,
    split_batches,
)

HOUR = 3_600_000


def create(port: int, topics: list[tuple[str, int, dict[str, str | None]]], validate_only: bool = False,
           version: int = 7) -> dict[str, dict]:
    body = {"topics": [{"name": n, "num_partitions": p, "replication_factor": -1, "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in c.items()]} for n, p, c in topics],
            "timeout_ms": 5000, "validate_only": validate_only}
    return {t["name"]: t for t in call(port, 19, version, body)["topics"]}


def exists(port: int, topic: str) -> bool:
    body = call(port, 3, 4, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    return body["topics"][0]["error_code"] == 0


def describe(port: int, topic: str, version: int = 4, keys: list[str] | None = None, synonyms: bool = False) -> dict:
    body = {"resources": [{"resource_type": 2, "resource_name": topic, "configuration_keys": keys}],
            "include_synonyms": synonyms, "include_documentation": True}
    (r,) = call(port, 32, version, body)["results"]
    return r


def produce(port: int, topic: str, batch: bytes, partition: int = 0) -> dict:
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}
    return call(port, 0, 9, body)["responses"][0]["partition_responses"][0]


def offsets(port: int, topic: str) -> tuple[int, int]:
    res = []
    for ts in (-2, -1):
        body = {"replica_id": -1, "isolation_level": 0,
                "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": ts}]}]}
        res.append(call(port, 2, 7, body)["topics"][0]["partitions"][0]["offset"])
    return res[0], res[1]


def fetch_batches(port: int, topic: str, offset: int = 0) -> list[bytes]:
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 24, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                         "fetch_offset": offset, "log_start_offset": -1,
                                                         "partition_max_bytes": 1 << 24}]}]}
    data = call(port, 1, 12, body)["responses"][0]["partitions"][0]["records"] or b""
    return [bytes(b) for b in split_batches(data)[0]]


@pytest.fixture
def server(tmp_path: Path):
    srv = ServerProcess(tmp_path / "data", "--log-retention-check-interval-ms", "100").start()
    try:
        yield srv
    finally:
        srv.stop()
        print(srv.log()[-20000:])


def test_configs_are_listed_on_create_and_survive_a_restart(tmp_path: Path, server: ServerProcess) -> None:
    got = create(server.port, [("changelog", 2, {"cleanup.policy": "compact", "retention.ms": " 86400000 ",
                                                 "preallocate": "true"})])["changelog"]
    assert got["error_code"] == 0 and got["error_message"] is None
    listed = {c["name"]: (c["value"], c["config_source"]) for c in got["configs"]}
    assert listed["cleanup.policy"] == ("compact", 1) and listed["retention.ms"] == ("86400000", 1)
    assert listed["segment.bytes"] == ("1073741824", 5)
    server.stop()
    again = ServerProcess(server.data_dir, "--log-segment-bytes", "2048").start()
    try:
        r = describe(again.port, "changelog", synonyms=True)
        assert r["error_code"] == 0
        by = {c["name"]: c for c in r["configs"]}
        assert (by["cleanup.policy"]["value"], by["cleanup.policy"]["config_source"]) == ("compact", 1)
        assert (by["retention.ms"]["value"], by["retention.ms"]["config_source"]) == ("86400000", 1)
        assert (by["preallocate"]["value"], by["preallocate"]["config_source"]) == ("true", 1)
        assert (by["segment.bytes"]["value"], by["segment.bytes"]["config_source"]) == ("2048", 4)
        assert [s["name"] for s in by["segment.bytes"]["synonyms"]] == ["log.segment.bytes"]
        assert by["retention.ms"]["documentation"]
        v0 = {c["name"]: c for c in describe(again.port, "changelog", version=0)["configs"]}
        assert v0["cleanup.policy"]["is_default"] is False and v0["flush.ms"]["is_default"] is True
        # an unknown topic is an error for that resource only
        body = {"resources": [{"resource_type": 2, "resource_name": "nope", "configuration_keys": None},
                              {"resource_type": 2, "resource_name": "changelog",
                               "configuration_keys": ["cleanup.policy"]}], "include_synonyms": False}
        nope, ok = call(again.port, 32, 2, body)["results"]
        assert nope["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and nope["configs"] == []
        assert ok["error_code"] == 0 and [c["name"] for c in ok["configs"]] == ["cleanup.policy"]
    finally:
        again.stop()
    assert "configs stored and reported but not acted on: preallocate" in server.log()


@pytest.mark.parametrize(("configs", "named"), [
    ({"bogus.key": "1"}, "bogus.key"),
    ({"cleanup.policy": "nonsense"}, "cleanup.policy"),
    ({"retention.ms": "abc"}, "retention.ms"),
    ({"segment.bytes": "1"}, "segment.bytes"),
    ({"retention.ms": None}, "retention.ms"),
])
def test_bad_configs_are_invalid_config_naming_the_key_and_nothing_is_created(
        server: ServerProcess, configs: dict, named: str) -> None:
    got = create(server.port, [("bad", 1, configs)])["bad"]
    assert got["error_code"] == ErrorCode.INVALID_CONFIG and named in got["error_message"]
    assert got["configs"] is None and got["num_partitions"] == -1
    assert not exists(server.port, "bad")
    assert not (server.data_dir / "topic-configs" / "bad.json").exists()


def test_validate_only_checks_without_creating(server: ServerProcess) -> None:
    got = create(server.port, [("v", 1, {"cleanup.policy": "compact"})], validate_only=True)["v"]
    assert got["error_code"] == 0 and {c["name"]: c["value"] for c in got["configs"]}["cleanup.policy"] == "compact"
    assert not exists(server.port, "v")


def test_a_repeated_name_is_invalid_request_and_nothing_of_it_is_created(server: ServerProcess) -> None:
    body = {"topics": [{"name": n, "num_partitions": 1, "replication_factor": -1, "assignments": [],
                        "configs": []} for n in ("dup", "single", "dup")], "timeout_ms": 5000, "validate_only": False}
    results = call(server.port, 19, 4, body)["topics"]
    assert sorted((r["name"], r["error_code"]) for r in results) == [("dup", ErrorCode.INVALID_REQUEST),
                                                                      ("single", 0)]
    assert [r["error_message"] for r in results if r["name"] == "dup"] == ["Duplicate topic name."]
    assert not exists(server.port, "dup") and exists(server.port, "single")


def test_keyless_records_to_a_compacted_topic_are_refused_and_nothing_is_appended(server: ServerProcess) -> None:
    assert create(server.port, [("table", 1, {"cleanup.policy": "compact"})])["table"]["error_code"] == 0
    now = int(time.time() * 1000)
    res = produce(server.port, "table", build_batch([(b"k", b"v", [], now), (None, b"no key", [], now)]))
    assert res["error_code"] == ErrorCode.INVALID_RECORD
    assert [e["batch_index"] for e in res["record_errors"]] == [1]
    assert offsets(server.port, "table") == (0, 0)
    assert produce(server.port, "table", build_batch([(b"k", b"v", [], now)]))["error_code"] == 0
    assert offsets(server.port, "table") == (0, 1)


def _fill(port: int, topic: str, batches: int, ts: int) -> None:
    for i in range(batches):
        assert produce(port, topic, build_batch([(b"k%d" % i, b"x" * 200, [], ts)]))["error_code"] == 0


def _wait(cond, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def test_a_topic_with_short_retention_loses_old_segments_while_the_server_default_is_seven_days(
        server: ServerProcess) -> None:
    old = int(time.time() * 1000) - HOUR
    create(server.port, [("short", 1, {"retention.ms": "60000", "segment.bytes": "1024"}),
                         ("default", 1, {"segment.bytes": "1024"})])
    _fill(server.port, "short", 20, old)
    _fill(server.port, "default", 20, old)
    assert _wait(lambda: offsets(server.port, "short")[0] > 0)
    time.sleep(0.5)  # several more retention passes
    assert offsets(server.port, "default")[0] == 0


def test_a_topic_with_long_retention_keeps_old_segments_while_the_server_default_is_short(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "d2", "--log-retention-ms", "1000", "--log-segment-bytes", "1024",
                        "--log-retention-check-interval-ms", "100").start()
    try:
        old = int(time.time() * 1000) - HOUR
        create(srv.port, [("long", 1, {"retention.ms": str(30 * 24 * HOUR)}), ("plain", 1, {})])
        _fill(srv.port, "long", 20, old)
        _fill(srv.port, "plain", 20, old)
        assert _wait(lambda: offsets(srv.port, "plain")[0] > 0)  # retention ran and the default applied
        time.sleep(0.5)
        assert offsets(srv.port, "long")[0] == 0
        # lowering retention.ms live: the next retention pass deletes
        body = {"resources": [{"resource_type": 2, "resource_name": "long", "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "60000"}]}], "validate_only": False}
        assert call(srv.port, 44, 1, body)["responses"][0]["error_code"] == 0
        assert _wait(lambda: offsets(srv.port, "long")[0] > 0)
    finally:
        srv.stop()


def test_log_append_time_and_compression_type_apply_per_topic(server: ServerProcess) -> None:
    create(server.port, [("stamped", 1, {"message.timestamp.type": "LogAppendTime", "compression.type": "gzip"}),
                         ("plain", 1, {})])
    # within the default retention.ms: a 1970 CreateTime would be deleted, active segment and all, at once
    ts = int(time.time() * 1000) - HOUR
    for topic in ("stamped", "plain"):
        res = produce(server.port, topic, build_batch([(b"k", b"v" * 100, [], ts)], compression=Compression.LZ4))
        assert res["error_code"] == 0
    (stamped,) = fetch_batches(server.port, "stamped")
    (plain,) = fetch_batches(server.port, "plain")
    h, p = parse_header(stamped), parse_header(plain)
    assert h.compression == Compression.GZIP and h.attributes & TIMESTAMP_TYPE_MASK and h.max_timestamp > ts
    assert p.compression == Compression.LZ4 and not p.attributes & TIMESTAMP_TYPE_MASK and p.max_timestamp == ts


def test_a_garbage_stored_config_file_stops_startup_naming_the_file(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "d").start()
    create(srv.port, [("orders", 1, {"cleanup.policy": "compact"})])
    srv.stop()
    path = tmp_path / "d" / "topic-configs" / "orders.json"
    path.write_text("{garbage")
    with pytest.raises(RuntimeError) as e:
        ServerProcess(tmp_path / "d").start()
    assert str(path) in str(e.value)
    path.write_text('{"version": 1, "configs": {"cleanup.policy": "nonsense"}}')
    with pytest.raises(RuntimeError) as e:
        ServerProcess(tmp_path / "d").start()
    assert str(path) in str(e.value) and "cleanup.policy" in str(e.value)


def test_cli_creates_describes_and_alters_topic_configs(server: ServerProcess) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "coordinator.cli", "topics", *args, "-b", server.bootstrap],
                              capture_output=True, text=True, timeout=60, cwd=HERE.parents[1])

    made = cli("create", "cfgd", "--partitions", "2", "--config", "cleanup.policy=compact",
               "--config", "retention.ms=5000")
    assert made.returncode == 0, made.stderr
    shown = cli("describe", "cfgd")
    assert shown.returncode == 0, shown.stderr
    rows = {tuple(line.split()) for line in shown.stdout.splitlines()}
    assert ("cleanup.policy", "compact", "DYNAMIC_TOPIC_CONFIG") in rows
    assert ("retention.ms", "5000", "DYNAMIC_TOPIC_CONFIG") in rows
    altered = cli("alter", "cfgd", "--set", "segment.ms=60000", "--delete", "retention.ms")
    assert altered.returncode == 0, altered.stderr
    rows = {tuple(line.split()) for line in cli("describe", "cfgd", "--all-configs").stdout.splitlines()}
    assert ("segment.ms", "60000", "DYNAMIC_TOPIC_CONFIG") in rows
    assert ("retention.ms", "604800000", "DEFAULT_CONFIG") in rows
    bad = cli("alter", "cfgd", "--set", "cleanup.policy=nonsense")
    assert bad.returncode == 1 and "cleanup.policy" in bad.stderr
    bad = cli("create", "other", "--config", "bogus.key=1")
    assert bad.returncode == 1 and "bogus.key" in bad.stdout + bad.stderr
