"""The ``groupcoord`` sink: DataFrames written with keys, headers and partitions read back with kafka-python."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from spark_support import kafka_read, make_topic

pytestmark = pytest.mark.spark

SCHEMA = "key binary, value binary, partition int, headers array<struct<key: string, value: binary>>"


def test_batch_write_round_trips_keys_values_headers_and_partitions(spark: Any, bootstrap: str,
                                                                    topic: str) -> None:
    make_topic(bootstrap, topic, 3)
    rows = [(None if i % 5 == 0 else f"key-{i}".encode(), bytes([i % 256]) * (i % 17) + b"v", i % 3,
             [("n", str(i).encode()), ("z", b"\x00\xff")] if i % 2 else [])
            for i in range(300)]
    df = spark.createDataFrame(rows, SCHEMA)
    (df.write.format("groupcoord").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
     .mode("append").save())
    got = kafka_read(bootstrap, topic, len(rows))
    assert len(got) == len(rows)
    written = sorted(((r[2], r[0], r[1], tuple(r[3])) for r in rows), key=repr)
    read = sorted(((m.partition, m.key, m.value, tuple((k, v) for k, v in m.headers)) for m in got), key=repr)
    assert read == written
    # each partition's records keep the DataFrame's order within the task that wrote them
    assert len({(m.partition, m.offset) for m in got}) == len(rows)


def test_topic_column_routes_rows_and_strings_are_utf8(spark: Any, bootstrap: str, topic: str) -> None:
    a, b = f"{topic}-a", f"{topic}-b"
    make_topic(bootstrap, a, 1)
    make_topic(bootstrap, b, 1)
    df = spark.createDataFrame([("k1", "héllo", a), ("k2", "wörld", b), (None, "x", a)],
                               "key string, value string, topic string")
    df.write.format("groupcoord").option("kafka.bootstrap.servers", bootstrap).mode("append").save()
    got_a = sorted(((m.key, m.value) for m in kafka_read(bootstrap, a, 2)), key=repr)
    assert got_a == sorted([(b"k1", "héllo".encode()), (None, b"x")], key=repr)
    assert [(m.key, m.value) for m in kafka_read(bootstrap, b, 1)] == [(b"k2", "wörld".encode())]


def test_streaming_write_copies_a_topic(spark: Any, bootstrap: str, topic: str, tmp_path: Path) -> None:
    from spark_support import fast_produce

    src, dst = f"{topic}-src", f"{topic}-dst"
    make_topic(bootstrap, src, 2)
    make_topic(bootstrap, dst, 1)
    fast_produce(bootstrap, src, [f"m{i}".encode() for i in range(50)], 2)
    q = (spark.readStream.format("groupcoord").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", src).option("startingOffsets", "earliest").load()
         .selectExpr("key", "value").writeStream.format("groupcoord")
         .option("kafka.bootstrap.servers", bootstrap).option("topic", dst)
         .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert q.awaitTermination(120)
    assert q.exception() is None
    got = kafka_read(bootstrap, dst, 50)
    assert sorted(m.value for m in got) == sorted(f"m{i}".encode() for i in range(50))
