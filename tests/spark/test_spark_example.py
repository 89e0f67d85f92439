"""The example pipelines (spark_bridge/examples/) end to end: click_counts (counts out, zero lag after) and
batch_write (appended rows read back)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from spark_support import group_offsets_cli, kafka_read, make_topic, produce

pytestmark = pytest.mark.spark


def test_click_counts_example_counts_per_key_and_its_group_has_zero_lag(spark: Any, bootstrap: str,
                                                                        tmp_path: Path) -> None:
    from spark_bridge.examples import click_counts

    make_topic(bootstrap, click_counts.IN_TOPIC, 2)
    make_topic(bootstrap, click_counts.OUT_TOPIC, 1)
    keys = [f"user{i % 5}".encode() for i in range(60)]
    produce(bootstrap, click_counts.IN_TOPIC, [(k, b"click", [], i % 2) for i, k in enumerate(keys)])
    q = click_counts.start(spark, bootstrap, str(tmp_path / "cp"), "click-counter", available_now=True,
                           max_offsets_per_trigger=25)
    assert q.awaitTermination(120)
    assert q.exception() is None
    from client.admin import AdminClient
    from client.admin_cli import list_offsets
    from client.consumer_protocol import TopicPartition

    with AdminClient(bootstrap) as admin:
        admin.cluster.refresh_metadata([click_counts.OUT_TOPIC])
        written = list_offsets(admin.cluster, [TopicPartition(click_counts.OUT_TOPIC, 0)], -1)
    out = kafka_read(bootstrap, click_counts.OUT_TOPIC, sum(written.values()))
    assert len(out) == sum(written.values())
    batches = {m.headers[0][1] for m in out}
    assert len(batches) >= 3  # 60 clicks, 25 per trigger
    totals: Counter[bytes] = Counter()
    for m in out:
        totals[m.key] += int(m.value)
    assert totals == Counter(keys)
    assert group_offsets_cli(bootstrap, "click-counter") == {
        (click_counts.IN_TOPIC, 0): (30, 30, 0), (click_counts.IN_TOPIC, 1): (30, 30, 0)}


def test_batch_write_example_appends_and_reads_back(spark: Any, bootstrap: str, topic: str) -> None:
    from spark_bridge.examples import batch_write

    make_topic(bootstrap, topic, 2)
    batch_write.write(spark, bootstrap, topic, 7)
    batch_write.write(spark, bootstrap, topic, 7)  # a second run appends
    rows = batch_write.read(spark, bootstrap, topic).collect()
    assert len(rows) == 14
    assert Counter((r.key, r.value) for r in rows) == Counter(
        {(f"k{i}", f"hello {i}"): 2 for i in range(7)})
    assert len({(r.partition, r.offset) for r in rows}) == 14
