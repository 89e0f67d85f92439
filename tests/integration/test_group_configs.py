"""Per-group configs (issue #37 item 5) on the real daemon over TCP, `groupcoord groups config` and confluent-kafka.

- Acceptance: `groups config keep --set offsets.retention.minutes=-1`; two groups commit; the server's clock is
  moved past offsets.retention.minutes (a test-only sitecustomize written here shifts the server's time.time()
  by the seconds in a file; trio's clock is monotonic and unaffected): the other group's offsets expire at the
  next check (offsets.retention.check.interval.ms 200), "keep"'s stay. Before that, with the clock 6.5 days on,
  groupcoord_offsets_expiring_within_day counts the other group's offsets only. After a restart the config is
  still there (source DYNAMIC_GROUP_CONFIG), and a later expiry still spares "keep".
- Kafka's answers for GROUP: every key with its source; IncrementalAlterConfigs SET / DELETE, APPEND refused,
  unknown key and bad value INVALID_CONFIG, empty name INVALID_REQUEST, validate_only stores nothing; legacy
  AlterConfigs replaces the set. confluent-kafka's AdminClient describes and alters a group's configs.
- KIP-848: consumer.heartbeat.interval.ms set for a group is the interval its member's next heartbeat gets.
Bounded waits only; servers on free ports, stopped by PID.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from server_process import REPO, ServerProcess, read_frame  # type: ignore[import-not-found]

from protocol import codec

DAY_S = 86_400
SITECUSTOMIZE = '''
import os, time
_file, _real = os.environ["TEST_CLOCK_FILE"], time.time
def _time():
    try:
        with open(_file) as f:
            return _real() + float(f.read() or 0)
    except (OSError, ValueError):
        return _real()
time.time = _time
'''


def call(port: int, key: int, version: int, body: dict) -> dict:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(codec.encode_request(key, version, 1, "group-configs-test", body))
        payload = read_frame(s)
        assert payload is not None
        return codec.decode_response(key, version, payload)[1]


def wait_until(what: str, check, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def groups_cli(srv: ServerProcess, *args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "coordinator.cli", "groups", *args, "-b", srv.bootstrap],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 0, r.stderr
    return r.stdout


def commit(port: int, group: str, offset: int) -> None:
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                      "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    answer = call(port, 8, 8, body)
    assert answer["topics"][0]["partitions"][0]["error_code"] == 0, answer


def committed(port: int, group: str) -> int:
    answer = call(port, 9, 7, {"group_id": group, "topics": [{"name": "t", "partition_indexes": [0]}],
                               "require_stable": False})
    assert answer["error_code"] == 0, answer
    return answer["topics"][0]["partitions"][0]["committed_offset"]


def describe(port: int, group: str, keys: list[str] | None = None) -> dict:
    body = {"resources": [{"resource_type": 32, "resource_name": group, "configuration_keys": keys}],
            "include_synonyms": True, "include_documentation": True}
    (r,) = call(port, 32, 4, body)["results"]
    return r


def incremental(port: int, group: str, ops: list[tuple[str, int, str | None]], validate_only: bool = False) -> dict:
    body = {"resources": [{"resource_type": 32, "resource_name": group,
                           "configs": [{"name": n, "config_operation": o, "value": v} for n, o, v in ops]}],
            "validate_only": validate_only}
    (r,) = call(port, 44, 1, body)["responses"]
    return r


def values(port: int, group: str) -> dict[str, tuple[str, int]]:
    r = describe(port, group)
    assert r["error_code"] == 0, r
    return {c["name"]: (c["value"], c["config_source"]) for c in r["configs"]}


def test_retention_minus_one_keeps_one_groups_offsets_while_anothers_expire(tmp_path: Path) -> None:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SITECUSTOMIZE)
    clock = tmp_path / "clock"
    clock.write_text("0")
    env = {"PYTHONPATH": str(shim), "TEST_CLOCK_FILE": str(clock)}
    flags = ("--offsets-retention-check-interval-ms", "200", "--metrics-lag-interval-ms", "200")
    srv = ServerProcess(tmp_path / "data", *flags, env=env).start().wait_loaded()
    try:
        port = srv.port
        out = groups_cli(srv, "config", "keep", "--set", "offsets.retention.minutes=-1")
        assert "altered: offsets.retention.minutes=-1" in out
        assert any(line.split() == ["offsets.retention.minutes", "-1", "DYNAMIC_GROUP_CONFIG"]
                   for line in out.splitlines()), out
        commit(port, "keep", 5)
        commit(port, "lose", 7)
        gauge = "groupcoord_offsets_expiring_within_day"
        wait_until("the gauge computed", lambda: gauge + " 0.0" in srv.scrape())
        clock.write_text(str(6.5 * DAY_S))  # within a day of the server's 7-day retention: "lose" only
        wait_until("the gauge counting lose's offset", lambda: srv.metric(gauge) == 1.0)
        assert committed(port, "lose") == 7
        clock.write_text(str(8 * DAY_S))  # past it: the next check expires "lose"
        wait_until("lose's offsets expired", lambda: committed(port, "lose") == -1)
        assert committed(port, "keep") == 5
        wait_until("nothing left to expire", lambda: srv.metric(gauge) == 0.0 and gauge in srv.scrape())
        srv.stop()
        srv.start()
        port = srv.port  # (wait_loaded would see the first run's line) loaded once the group answers:
        wait_until("the restarted server loaded", lambda: describe(port, "keep")["error_code"] != 14)
        assert values(port, "keep")["offsets.retention.minutes"] == ("-1", 8)
        assert committed(port, "keep") == 5
        commit(port, "lose-again", 9)
        clock.write_text(str(16 * DAY_S))
        wait_until("lose-again's offsets expired", lambda: committed(port, "lose-again") == -1)
        assert committed(port, "keep") == 5
    finally:
        srv.stop()


def test_kafka_answers_for_group_configs_and_clients(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data").start().wait_loaded()
    try:
        port = srv.port
        g = "cfg-group"
        assert values(port, g) == {"consumer.session.timeout.ms": ("45000", 5),
                                   "consumer.heartbeat.interval.ms": ("5000", 5),
                                   "offsets.retention.minutes": ("10080", 5)}
        only = describe(port, g, ["offsets.retention.minutes"])
        assert [c["name"] for c in only["configs"]] == ["offsets.retention.minutes"]
        assert only["configs"][0]["synonyms"] == [{"name": "offsets.retention.minutes", "value": "10080",
                                                   "source": 5}]
        assert incremental(port, g, [("offsets.retention.minutes", 0, "30")], validate_only=True)["error_code"] == 0
        assert values(port, g)["offsets.retention.minutes"] == ("10080", 5)  # validate_only stored nothing
        assert incremental(port, g, [("offsets.retention.minutes", 0, "30"),
                                     ("consumer.session.timeout.ms", 0, "50000")])["error_code"] == 0
        assert values(port, g)["offsets.retention.minutes"] == ("30", 8)
        refused = {
            ("retention.ms", 0, "1"): (40, "Unknown group config name: retention.ms"),
            ("offsets.retention.minutes", 0, "0"): (40, "at least 1"),
            ("consumer.session.timeout.ms", 0, "1000"): (40, "group.consumer.min.session.timeout.ms"),
            ("offsets.retention.minutes", 2, "1"): (40, "because its type is not LIST"),
            ("offsets.retention.minutes", 0, None): (42, "Null value not supported"),
        }
        for op, (code, message) in refused.items():
            r = incremental(port, g, [op])
            assert r["error_code"] == code and message in r["error_message"], (op, r)
        empty = incremental(port, "", [("offsets.retention.minutes", 0, "5")])
        assert empty["error_code"] == 42
        assert describe(port, "")["error_code"] == 42
        assert incremental(port, g, [("offsets.retention.minutes", 1, None)])["error_code"] == 0
        assert values(port, g)["offsets.retention.minutes"] == ("10080", 5)
        assert values(port, g)["consumer.session.timeout.ms"] == ("50000", 8)
        legacy = call(port, 33, 2, {"resources": [{"resource_type": 32, "resource_name": g, "configs": [
            {"name": "offsets.retention.minutes", "value": "-1"}]}], "validate_only": False})
        assert legacy["responses"][0]["error_code"] == 0, legacy
        now = values(port, g)  # the legacy set replaced the whole set
        assert now["offsets.retention.minutes"] == ("-1", 8) and now["consumer.session.timeout.ms"] == ("45000", 5)

        # KIP-848: the group's heartbeat interval reaches its member's next heartbeat
        cg = "cfg-consumer-group"
        member = uuid.uuid4().hex[:22]
        beat = {"group_id": cg, "member_id": member, "member_epoch": 0, "instance_id": None, "rack_id": None,
                "rebalance_timeout_ms": 30000, "subscribed_topic_names": ["t"], "subscribed_topic_regex": None,
                "server_assignor": None, "topic_partitions": []}
        first = call(port, 68, 1, beat)
        assert first["error_code"] == 0 and first["heartbeat_interval_ms"] == 5000, first
        out = groups_cli(srv, "config", cg, "--set", "consumer.heartbeat.interval.ms=7000")
        assert any(line.split() == ["consumer.heartbeat.interval.ms", "7000", "DYNAMIC_GROUP_CONFIG"]
                   for line in out.splitlines()), out
        again = call(port, 68, 1, {**beat, "member_epoch": first["member_epoch"], "rebalance_timeout_ms": -1,
                                   "subscribed_topic_names": None, "topic_partitions": None})
        assert again["error_code"] == 0 and again["heartbeat_interval_ms"] == 7000, again
        out = groups_cli(srv, "config", cg, "--delete", "consumer.heartbeat.interval.ms")
        assert any(line.split() == ["consumer.heartbeat.interval.ms", "5000", "DEFAULT_CONFIG"]
                   for line in out.splitlines()), out

        # confluent-kafka's AdminClient
        from confluent_kafka.admin import (
            AdminClient,
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            ConfigSource,
            ResourceType,
        )

        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        resource = ConfigResource(ResourceType.GROUP, "ck-group", incremental_configs=[
            ConfigEntry("offsets.retention.minutes", "-1", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(15)
        described = admin.describe_configs([ConfigResource(ResourceType.GROUP, "ck-group")])
        [(_, future)] = described.items()
        entries = future.result(15)
        assert entries["offsets.retention.minutes"].value == "-1"
        assert entries["offsets.retention.minutes"].source == ConfigSource.GROUP_CONFIG.value
        assert entries["consumer.session.timeout.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    finally:
        srv.stop()
