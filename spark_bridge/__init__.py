"""spark_bridge: PySpark reads and writes groupcoord topics, and streaming queries show up as consumer groups.

    import spark_bridge; spark_bridge.register(spark)
    df = spark.read.format("groupcoord").option("kafka.bootstrap.servers", "127.0.0.1:9092") \\
        .option("subscribe", "clicks").load()

Layering: spark_bridge uses client/ (and protocol/ codecs through it), never coordinator/. PySpark and
pyarrow are imported here, so this package needs the ``spark`` extra; nothing else in the project imports it.
"""

from __future__ import annotations

from typing import Any

from spark_bridge.source import GroupcoordDataSource

__all__ = ["GroupcoordDataSource", "register"]


def register(spark: Any) -> None:
    """Register the ``groupcoord`` data source with a SparkSession (idempotent)."""
    spark.dataSource.register(GroupcoordDataSource)
