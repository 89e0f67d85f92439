"""Example: write a batch DataFrame to ``greetings`` with ``.mode("append")``, then read the topic back.

    .venv/bin/python -m spark_bridge.examples.batch_write --bootstrap 127.0.0.1:9092 [--topic greetings] \\
        [--count 10]

Each run appends ``--count`` records (key ``k<i>``, value ``hello <i>``) and prints every record of the topic
(a batch read from earliest to latest), so a second run shows both runs' records.

Batch writes need ``.mode("append")``: PySpark's Python data sources take only append and overwrite, so
Spark refuses its own default save mode (ErrorIfExists) with UNSUPPORTED_DATA_SOURCE_SAVE_MODE before the
sink runs; the sink refuses overwrite (a topic is only appended to).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

TOPIC = "greetings"


def write(spark: Any, bootstrap: str, topic: str, count: int) -> None:
    """Append ``count`` records to ``topic`` (the groupcoord source must be registered on ``spark``)."""
    df = spark.createDataFrame([(f"k{i}", f"hello {i}") for i in range(count)], "key string, value string")
    (df.write.format("groupcoord").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
     .mode("append").save())


def read(spark: Any, bootstrap: str, topic: str) -> Any:
    """Every record of ``topic`` as a DataFrame of key, value (strings), partition, offset."""
    return (spark.read.format("groupcoord").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").load()
            .selectExpr("cast(key as string) as key", "cast(value as string) as value", "partition", "offset"))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic", default=TOPIC)
    ap.add_argument("--count", type=int, default=10)
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_bridge

    spark = (SparkSession.builder.master("local[2]").appName("batch-write")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    try:
        spark_bridge.register(spark)
        write(spark, args.bootstrap, args.topic, args.count)
        read(spark, args.bootstrap, args.topic).orderBy("partition", "offset").show(truncate=False)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
