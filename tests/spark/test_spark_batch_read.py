"""Batch reads through the ``groupcoord`` source against the real server, checked against kafka-python writes."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from spark_support import make_topic, produce

pytestmark = pytest.mark.spark


def records_for(n: int, partitions: int) -> list[tuple[bytes | None, bytes, list[tuple[str, bytes]], int]]:
    out = []
    for i in range(n):
        key = None if i % 7 == 0 else f"k{i}".encode()
        headers = [("idx", str(i).encode()), ("bin", bytes([i % 256, 0, 255]))] if i % 3 else []
        out.append((key, f"value-{i}".encode() + bytes([i % 256]), headers, i % partitions))
    return out


def load(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("groupcoord").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_batch_read_returns_every_record_once_with_columns_and_headers(spark: Any, bootstrap: str,
                                                                      topic: str) -> None:
    make_topic(bootstrap, topic, 4)
    sent = records_for(400, 4)
    produce(bootstrap, topic, sent)
    df = load(spark, bootstrap, subscribe=topic, startingOffsets="earliest", includeHeaders="true")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
        ("timestamp", "timestamp"), ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>")]
    rows = df.collect()
    assert len(rows) == 400
    got = {(r.partition, r.offset): r for r in rows}
    assert len(got) == 400  # every (partition, offset) once
    # kafka-python sent record i to partition i % 4; its offset there is i // 4
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    for i, (key, value, headers, part) in enumerate(sent):
        r = got[(part, i // 4)]
        assert r.topic == topic
        assert (r.key, r.value) == (key, value)
        assert [(h.key, h.value) for h in r.headers] == headers
        assert r.timestampType == 0
        assert abs((now - r.timestamp).total_seconds()) < 3600  # the producer's create time, in UTC


def test_schema_has_no_headers_column_by_default(spark: Any, bootstrap: str, topic: str) -> None:
    make_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [(b"k", b"v", [("h", b"x")], 0)])
    df = load(spark, bootstrap, subscribe=topic)
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert [(r.key, r.value, r.offset) for r in df.collect()] == [(b"k", b"v", 0)]


def test_an_empty_topic_or_range_reads_as_no_rows(spark: Any, bootstrap: str, topic: str) -> None:
    make_topic(bootstrap, topic, 2)
    assert load(spark, bootstrap, subscribe=topic).collect() == []  # PySpark's placeholder partition
    produce(bootstrap, topic, records_for(4, 2))
    assert load(spark, bootstrap, subscribe=topic, startingOffsets=f'{{"{topic}":{{"0":2,"1":2}}}}').count() == 0


def test_ending_offsets_json_bounds_the_read(spark: Any, bootstrap: str, topic: str) -> None:
    make_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, records_for(100, 2))  # 50 per partition
    df = load(spark, bootstrap, subscribe=topic, startingOffsets=f'{{"{topic}":{{"0":5,"1":-2}}}}',
              endingOffsets=f'{{"{topic}":{{"0":20,"1":7}}}}')
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(5, 20)] + [(1, o) for o in range(0, 7)]


def test_subscribe_pattern_covers_matching_topics_only(spark: Any, bootstrap: str, topic: str) -> None:
    a, b, other = f"{topic}-pa", f"{topic}-pb", f"{topic}-zz"
    for name, n in ((a, 2), (b, 1), (other, 1)):
        make_topic(bootstrap, name, n)
        produce(bootstrap, name, [(None, f"{name}:{i}".encode(), [], i % n) for i in range(10)])
    df = load(spark, bootstrap, subscribePattern=f"{topic}-p.*")
    got = sorted(r.value.decode() for r in df.select("value").collect())
    assert got == sorted([f"{a}:{i}" for i in range(10)] + [f"{b}:{i}" for i in range(10)])


def test_min_partitions_splits_ranges_and_still_reads_each_record_once(spark: Any, bootstrap: str,
                                                                     topic: str) -> None:
    make_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, records_for(200, 2))
    df = load(spark, bootstrap, subscribe=topic, minPartitions="6")
    assert df.rdd.getNumPartitions() == 6
    offsets = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert offsets == [(p, o) for p in range(2) for o in range(100)]


def test_starting_timestamp_skips_older_records(spark: Any, bootstrap: str, topic: str) -> None:
    make_topic(bootstrap, topic, 1)
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for i, ts in enumerate((1_000_000, 2_000_000, 3_000_000, 4_000_000)):
            producer.send(topic, value=f"v{i}".encode(), partition=0, timestamp_ms=ts)
        producer.flush(10)
    finally:
        producer.close(10)
    df = load(spark, bootstrap, subscribe=topic, startingTimestamp="2500000")
    assert [(r.offset, r.value) for r in df.collect()] == [(2, b"v2"), (3, b"v3")]
    by_ts = load(spark, bootstrap, subscribe=topic, startingOffsetsByTimestamp=f'{{"{topic}":{{"0":1500000}}}}')
    assert [r.offset for r in by_ts.collect()] == [1, 2, 3]


def test_offsets_beyond_the_log_follow_fail_on_data_loss(spark: Any, bootstrap: str, topic: str) -> None:
    make_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, records_for(10, 1))
    beyond = f'{{"{topic}":{{"0":25}}}}'  # the log ends at 10: offsets 10-24 are not there
    with pytest.raises(Exception) as err:  # noqa: B017 (Spark wraps the task's error; the text is checked)
        load(spark, bootstrap, subscribe=topic, endingOffsets=beyond).collect()
    assert f"cannot read {topic}-0 offsets [10, 25)" in str(err.value)
    assert "Set the option failOnDataLoss to false" in str(err.value)
    rows = load(spark, bootstrap, subscribe=topic, endingOffsets=beyond, failOnDataLoss="false").collect()
    assert sorted(r.offset for r in rows) == list(range(10))
