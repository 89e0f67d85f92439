"""Example: count clicks per key in each micro-batch of ``clicks`` and write the counts to ``click-counts``.

    .venv/bin/python -m spark_bridge.examples.click_counts --bootstrap 127.0.0.1:9092 \\
        --checkpoint /tmp/click-counts-cp [--available-now] [--group click-counter]
    .venv/bin/groupcoord groups offsets -b 127.0.0.1:9092 click-counter   # lag 0 once caught up

Each output record: key = the click key, value = b"<count>", header ``batch`` = the micro-batch id. The
query's progress is mirrored into the consumer group (``kafka.group.id``), so ``groupcoord groups offsets``
shows it; the checkpoint directory is what Spark restarts from.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

IN_TOPIC, OUT_TOPIC = "clicks", "click-counts"


def start(spark: Any, bootstrap: str, checkpoint: str, group: str, *, available_now: bool = False,
          max_offsets_per_trigger: int = 10000) -> Any:
    """Start the streaming query on ``spark`` (the groupcoord source must be registered); returns it."""

    def write_counts(batch: Any, batch_id: int) -> None:
        counts = batch.groupBy("key").count().selectExpr(
            "key", "cast(cast(count as string) as binary) as value",
            f"array(named_struct('key', 'batch', 'value', cast('{batch_id}' as binary))) as headers")
        (counts.write.format("groupcoord").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", OUT_TOPIC).mode("append").save())

    stream = (spark.readStream.format("groupcoord").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", IN_TOPIC).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", max_offsets_per_trigger).option("kafka.group.id", group).load())
    writer = stream.writeStream.foreachBatch(write_counts).option("checkpointLocation", checkpoint)
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="5 seconds")
    return writer.start()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--group", default="click-counter")
    ap.add_argument("--available-now", action="store_true", help="read what is there, then stop")
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_bridge

    spark = (SparkSession.builder.master("local[2]").appName("click-counts")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark_bridge.register(spark)
    query = start(spark, args.bootstrap, args.checkpoint, args.group, available_now=args.available_now)
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
