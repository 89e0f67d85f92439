"""Topic configs through the real clients' admin APIs, and compaction of a topic a real client created.

Stories: confluent-kafka and kafka-python describe a topic's and the broker's configs with values and
sources; alter_configs and incremental_alter_configs change a topic's configs, which survive a restart; a
compacted topic created by confluent-kafka (small segments, low dirty ratio) with twenty keys updated fifty
times reads back, from earliest, every key's latest value in far fewer records with increasing offsets; a
tombstoned key disappears after delete.retention.ms; a SIGKILL while the cleaner runs loses no latest value."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from server_process import ServerProcess

TOPIC, DYNAMIC_TOPIC, STATIC_BROKER, DEFAULT = "topic", 1, 4, 5


def _admin(srv: ServerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": srv.bootstrap})


def _describe(admin: AdminClient, rtype: str, name: str) -> dict:
    res = ConfigResource(rtype, name)
    return admin.describe_configs([res])[res].result(15)


def test_confluent_describe_alter_and_incremental_alter_survive_a_restart(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", "--log-retention-ms", "3600000").start()
    try:
        admin = _admin(srv)
        admin.create_topics([NewTopic("cl", 1, 1, config={"cleanup.policy": "compact"})])["cl"].result(15)
        cfg = _describe(admin, TOPIC, "cl")
        assert (cfg["cleanup.policy"].value, int(cfg["cleanup.policy"].source)) == ("compact", DYNAMIC_TOPIC)
        assert (cfg["retention.ms"].value, int(cfg["retention.ms"].source)) == ("3600000", STATIC_BROKER)
        assert (cfg["retention.bytes"].value, int(cfg["retention.bytes"].source)) == ("-1", DEFAULT)
        broker = _describe(admin, "broker", "0")
        assert (broker["log.retention.ms"].value, int(broker["log.retention.ms"].source)) == ("3600000",
                                                                                              STATIC_BROKER)
        assert broker["num.partitions"].is_read_only and int(broker["num.partitions"].source) == DEFAULT
        res = ConfigResource(TOPIC, "cl", incremental_configs=[
            ConfigEntry("retention.ms", "120000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND)])
        admin.incremental_alter_configs([res])[res].result(15)
        bad = ConfigResource(TOPIC, "cl", incremental_configs=[
            ConfigEntry("retention.ms", "abc", incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(Exception, match=r"retention\.ms"):
            admin.incremental_alter_configs([bad])[bad].result(15)
        broker_res = ConfigResource("broker", "0", incremental_configs=[
            ConfigEntry("log.retention.ms", "5", incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(Exception, match=r"log\.retention\.ms"):
            admin.incremental_alter_configs([broker_res])[broker_res].result(15)
    finally:
        srv.stop()
    srv = ServerProcess(tmp_path / "data").start()
    try:
        admin = _admin(srv)
        cfg = _describe(admin, TOPIC, "cl")
        assert (cfg["cleanup.policy"].value, int(cfg["cleanup.policy"].source)) == ("compact,delete", DYNAMIC_TOPIC)
        assert (cfg["retention.ms"].value, int(cfg["retention.ms"].source)) == ("120000", DYNAMIC_TOPIC)
        assert int(cfg["retention.bytes"].source) == DEFAULT
    finally:
        srv.stop()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_kafka_python_describe_and_alter_configs_survive_a_restart(tmp_path: Path) -> None:
    from kafka.admin import ConfigResource as KPResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KPNewTopic

    topic = KPResource(ConfigResourceType.TOPIC, "kp")
    srv = ServerProcess(tmp_path / "data").start()
    admin = KafkaAdminClient(bootstrap_servers=srv.bootstrap, request_timeout_ms=15000)
    try:
        admin.create_topics([KPNewTopic("kp", 1, 1, topic_configs={"segment.bytes": "4096"})])
        got = admin.describe_configs([topic])["topic"]["kp"]  # default filter: the modified keys only
        assert {k: (v["value"], v["config_source"]) for k, v in got.items()} == {
            "segment.bytes": ("4096", "DYNAMIC_TOPIC_CONFIG")}
        assert admin.alter_configs([KPResource(ConfigResourceType.TOPIC, "kp", configs={"retention.ms": "99000"})],
                                   incremental=True) == {"topic": {"kp": "OK"}}
        assert admin.alter_configs([KPResource(ConfigResourceType.TOPIC, "kp", configs={"cleanup.policy": "compact"})],
                                   incremental=False) == {"topic": {"kp": "OK"}}
        everything = admin.describe_configs([topic], config_filter="all")["topic"]["kp"]
        assert everything["retention.bytes"]["config_source"] == "DEFAULT_CONFIG"
        broker = admin.describe_configs([KPResource(ConfigResourceType.BROKER, "0")], config_filter="all")
        assert broker["broker"]["0"]["log.retention.ms"]["read_only"] is True
    finally:
        admin.close()
        srv.stop()
    srv = ServerProcess(tmp_path / "data").start()
    admin = KafkaAdminClient(bootstrap_servers=srv.bootstrap, request_timeout_ms=15000)
    try:
        got = admin.describe_configs([topic])["topic"]["kp"]
        assert {k: v["value"] for k, v in got.items()} == {"segment.bytes": "4096", "retention.ms": "99000",
                                                           "cleanup.policy": "compact"}
    finally:
        admin.close()
        srv.stop()


def _consume_all(bootstrap: str, topic: str, timeout: float = 30.0) -> list[tuple[int, bytes, bytes | None]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got: list[tuple[int, bytes, bytes | None]] = []
    try:
        c.subscribe([topic])
        _, high = None, None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                if got and high is not None and got[-1][0] >= high - 1:
                    break
                if got:
                    high = c.get_watermark_offsets(m.partition() if m else _tp(topic), cached=False)[1]
                continue
            if m.error():
                continue
            got.append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return got


def _tp(topic: str):  # type: ignore[no-untyped-def]
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, 0)


def _produce_updates(bootstrap: str, topic: str, keys: int, rounds: int, tombstone: bytes | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for r in range(rounds):
        for k in range(keys):
            p.produce(topic, key=b"key-%02d" % k, value=b"count-%d" % (r + 1))
        p.flush(15)
    if tombstone is not None:
        p.produce(topic, key=tombstone, value=None)
    for i in range(200):  # more traffic, to roll segments past the updates
        p.produce(topic, key=b"filler-%03d" % (i % 50), value=b"f")
    assert p.flush(15) == 0


def _wait(cond, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return bool(cond())


def test_a_compacted_topic_keeps_every_latest_value_and_drops_tombstones(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", "--log-cleaner-backoff-ms", "100").start()
    try:
        admin = _admin(srv)
        admin.create_topics([NewTopic("table", 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "10000"})])["table"].result(15)
        _produce_updates(srv.bootstrap, "table", 20, 50, tombstone=b"key-07")
        produced = 20 * 50 + 1 + 200
        assert _wait(lambda: "records removed" in srv.log(), 30)
        got = _consume_all(srv.bootstrap, "table")
        offsets = [o for o, _, _ in got]
        assert offsets == sorted(set(offsets)) and len(got) < produced // 3
        latest = {k: v for _, k, v in got}
        for k in range(20):
            if k != 7:
                assert latest[b"key-%02d" % k] == b"count-50"
        assert latest.get(b"key-07", b"gone") is None  # the tombstone is still there at first

        def tombstone_gone() -> bool:
            _produce_updates(srv.bootstrap, "table", 1, 1)  # keep the log dirty so passes keep running
            return all(k != b"key-07" for _, k, _ in _consume_all(srv.bootstrap, "table", 15))

        assert _wait(tombstone_gone, 40)
    finally:
        srv.stop()


def test_sigkill_while_cleaning_loses_no_latest_value(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", "--log-cleaner-backoff-ms", "50").start()
    try:
        admin = _admin(srv)
        admin.create_topics([NewTopic("t", 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": "8192", "min.cleanable.dirty.ratio": "0.99"})]
        )["t"].result(15)
        _produce_updates(srv.bootstrap, "t", 200, 30)
        res = ConfigResource(TOPIC, "t", incremental_configs=[
            ConfigEntry("min.cleanable.dirty.ratio", "0.01", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(15)
        time.sleep(0.3)  # the cleaner has started (switching the ratio makes the topic due)
    finally:
        srv.kill()
    srv = ServerProcess(tmp_path / "data").start()
    try:
        got = _consume_all(srv.bootstrap, "t")
        latest = {k: v for _, k, v in got}
        assert all(latest[b"key-%02d" % k] == b"count-30" for k in range(100))
        assert "truncating" not in srv.log()  # the log read cleanly
        assert [o for o, _, _ in got] == sorted({o for o, _, _ in got})
    finally:
        srv.stop()
