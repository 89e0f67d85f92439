"""Batch writes and save modes: ``.mode("append")`` as docs/pyspark.md shows round-trips; other modes are refused.

- docs/pyspark.md's batch write (``df.selectExpr("key", "value").write.format("groupcoord")...mode("append")
  .save()``) of a batch-read DataFrame is read back with ``spark.read.format("groupcoord")``: same count,
  same (key, value) pairs; a second append adds the rows again.
- Spark's default save mode (ErrorIfExists) and Ignore are refused by Spark itself with the condition
  UNSUPPORTED_DATA_SOURCE_SAVE_MODE (a Python data source takes only append and overwrite); overwrite is
  refused by the sink with a message of ours. None of them writes a record.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from spark_support import make_topic, produce

pytestmark = pytest.mark.spark


def read_back(spark: Any, bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes]]:
    rows = (spark.read.format("groupcoord").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").load()
            .select("key", "value").collect())
    return [(None if r.key is None else bytes(r.key), bytes(r.value)) for r in rows]


def test_batch_write_with_mode_append_as_readme_shows_reads_back(spark: Any, bootstrap: str, topic: str) -> None:
    src, dst = f"{topic}-src", f"{topic}-dst"
    make_topic(bootstrap, src, 2)
    make_topic(bootstrap, dst, 2)
    sent = [(None if i % 4 == 0 else f"k{i}".encode(), f"click-{i}".encode(), [], i % 2) for i in range(40)]
    produce(bootstrap, src, sent)
    df = (spark.read.format("groupcoord").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", src).option("startingOffsets", "earliest").load())   # batch, as docs/pyspark.md
    (df.selectExpr("key", "value").write.format("groupcoord")
     .option("kafka.bootstrap.servers", bootstrap).option("topic", dst)
     .mode("append").save())
    expected = Counter((k, v) for k, v, _, _ in sent)
    got = read_back(spark, bootstrap, dst)
    assert len(got) == len(sent)
    assert Counter(got) == expected
    # append means append: the same write again doubles the topic
    (df.selectExpr("key", "value").write.format("groupcoord")
     .option("kafka.bootstrap.servers", bootstrap).option("topic", dst)
     .mode("append").save())
    got = read_back(spark, bootstrap, dst)
    assert len(got) == 2 * len(sent)
    assert Counter(got) == Counter({kv: 2 * n for kv, n in expected.items()})


def test_default_and_ignore_save_modes_are_refused_by_spark(spark: Any, bootstrap: str, topic: str) -> None:
    from pyspark.errors import AnalysisException

    make_topic(bootstrap, topic, 1)
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    writer = df.write.format("groupcoord").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
    for mode in (None, "error", "ignore"):
        w = writer if mode is None else writer.mode(mode)
        with pytest.raises(AnalysisException) as err:
            w.save()
        assert err.value.getCondition() == "UNSUPPORTED_DATA_SOURCE_SAVE_MODE", (mode, str(err.value))
        assert '"Append" or "Overwrite"' in str(err.value)
    assert read_back(spark, bootstrap, topic) == []


def test_overwrite_is_refused_by_the_sink(spark: Any, bootstrap: str, topic: str) -> None:
    make_topic(bootstrap, topic, 1)
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    with pytest.raises(Exception) as err:  # Spark wraps the Python error in its own exception types
        (df.write.format("groupcoord").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
         .mode("overwrite").save())
    assert 'the groupcoord sink cannot write in the "Overwrite" save mode' in str(err.value)
    assert 'use .mode("append")' in str(err.value)
    assert read_back(spark, bootstrap, topic) == []
