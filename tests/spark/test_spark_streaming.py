"""Structured Streaming reads (availableNow): read limits, restarts from the checkpoint, the group mirror."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from spark_support import fast_produce, group_offsets_cli, make_topic

pytestmark = pytest.mark.spark


def run_available_now(spark: Any, bootstrap: str, checkpoint: Path, **options: str) -> list[list[tuple[int, int]]]:
    """One availableNow run; returns each micro-batch's (partition, offset) pairs."""
    batches: list[list[tuple[int, int]]] = []

    def collect(df: Any, batch_id: int) -> None:
        batches.append([(r.partition, r.offset) for r in df.select("partition", "offset").collect()])

    reader = spark.readStream.format("groupcoord").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    q = (reader.load().writeStream.foreachBatch(collect).trigger(availableNow=True)
         .option("checkpointLocation", str(checkpoint)).start())
    try:
        finished = q.awaitTermination(120)
    finally:
        if q.isActive:
            q.stop()
    assert finished, "the availableNow query did not finish in 120 s"
    if q.exception() is not None:
        raise AssertionError(str(q.exception()))
    return batches


def find_group(bootstrap: str, prefix: str) -> str:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        groups = admin.list_groups()
        names = [g["group_id"] if isinstance(g, dict) else g[0] for g in groups]
        names = [n for n in names if n.startswith(prefix + "-")]
    finally:
        admin.close()
    assert len(names) == 1, names
    return names[0]


def kafka_python_group_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[int, str]]:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        got = admin.list_group_offsets({group: None})[group]
    finally:
        admin.close()
    return {(tp.topic, tp.partition): (om.offset, om.metadata) for tp, om in got.items()}


def test_available_now_honours_max_offsets_and_mirrors_progress_to_a_group(spark: Any, bootstrap: str,
                                                                          topic: str, tmp_path: Path) -> None:
    make_topic(bootstrap, topic, 4)
    fast_produce(bootstrap, topic, [f"r{i}".encode() for i in range(1000)], 4)
    prefix = f"spark-test-{topic}"
    batches = run_available_now(spark, bootstrap, tmp_path / "cp", subscribe=topic, startingOffsets="earliest",
                                maxOffsetsPerTrigger="100", groupIdPrefix=prefix)
    assert len(batches) >= 10
    assert all(len(b) <= 100 for b in batches)
    seen = [pair for b in batches for pair in b]
    assert sorted(seen) == [(p, o) for p in range(4) for o in range(250)]  # every record exactly once

    group = find_group(bootstrap, prefix)
    ends = {(topic, p): 250 for p in range(4)}
    cli = group_offsets_cli(bootstrap, group)
    assert cli == {(topic, p): (250, 250, 0) for p in range(4)}
    committed = kafka_python_group_offsets(bootstrap, group)
    assert {tp: off for tp, (off, _) in committed.items()} == ends
    metadata = {json.loads(meta)["batchId"] for _, meta in committed.values()}
    assert metadata == {len(batches) - 1}  # the last batch's id, as Spark numbered it


def test_restart_from_checkpoint_reads_only_new_records(spark: Any, bootstrap: str, topic: str,
                                                        tmp_path: Path) -> None:
    make_topic(bootstrap, topic, 2)
    fast_produce(bootstrap, topic, [f"a{i}".encode() for i in range(60)], 2)
    group = f"g-{topic}"
    first = run_available_now(spark, bootstrap, tmp_path / "cp", subscribe=topic, startingOffsets="earliest",
                              **{"kafka.group.id": group})
    assert sorted(p for b in first for p in b) == [(p, o) for p in range(2) for o in range(30)]
    fast_produce(bootstrap, topic, [f"b{i}".encode() for i in range(40)], 2)
    second = run_available_now(spark, bootstrap, tmp_path / "cp", subscribe=topic, startingOffsets="earliest",
                               **{"kafka.group.id": group})
    assert sorted(p for b in second for p in b) == [(p, o) for p in range(2) for o in range(30, 50)]
    assert group_offsets_cli(bootstrap, group) == {(topic, p): (50, 50, 0) for p in range(2)}


def test_new_partitions_are_picked_up_and_a_deleted_topic_follows_fail_on_data_loss(
        spark: Any, bootstrap: str, topic: str, tmp_path: Path) -> None:
    from client.admin import AdminClient

    keep, gone = f"{topic}-keep", f"{topic}-gone"
    make_topic(bootstrap, keep, 1)
    make_topic(bootstrap, gone, 1)
    fast_produce(bootstrap, keep, [b"k0", b"k1"], 1)
    fast_produce(bootstrap, gone, [b"g0"], 1)
    opts = {"subscribe": f"{keep},{gone}", "startingOffsets": "earliest", "commitOffsetsToGroup": "false"}
    first = run_available_now(spark, bootstrap, tmp_path / "cp", **opts)
    assert sum(len(b) for b in first) == 3

    with AdminClient(bootstrap) as admin:
        assert admin.delete_topics([gone])[0].error_code == 0
        from client.admin import NewTopic  # noqa: F401  (the admin client's own types)
        body = {"topics": [{"name": keep, "count": 2, "assignments": None}], "timeout_ms": 10000,
                "validate_only": False}
        _, resp = admin._controller().send(37, body)  # CreatePartitions: keep grows to 2 partitions
        assert resp["results"][0]["error_code"] == 0, resp
    fast_produce(bootstrap, keep, [b"k2", b"k3"], 2)  # one record into each partition

    with pytest.raises(Exception) as failed:  # noqa: B017 (Spark wraps the error; the text is checked)
        run_available_now(spark, bootstrap, tmp_path / "cp", **opts)
    assert f"{gone}-0 no longer exists" in str(failed.value)
    assert "failOnDataLoss" in str(failed.value)

    second = run_available_now(spark, bootstrap, tmp_path / "cp", **opts, failOnDataLoss="false")
    assert sorted(p for b in second for p in b) == [(0, 2), (1, 0)]
