"""Bad input gets a clear error before any work: each case asserts on the message users will read."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from server_process import free_port
from spark_support import make_topic

pytestmark = pytest.mark.spark


def read_error(spark: Any, options: dict[str, str]) -> str:
    reader = spark.read.format("groupcoord")
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception) as err:  # Spark wraps the Python error in its own exception types
        reader.load().collect()
    return str(err.value)


def closed_port() -> int:
    return free_port()  # nothing listens there (a port of this worker's block: no other worker takes it)


def test_unknown_option_lists_the_valid_ones(spark: Any, bootstrap: str) -> None:
    msg = read_error(spark, {"kafka.bootstrap.servers": bootstrap, "subscribe": "x", "startingOffset": "earliest"})
    assert "unknown option 'startingoffset'" in msg
    assert "valid options: kafka.bootstrap.servers, subscribe, subscribePattern" in msg


def test_two_subscriptions_or_none(spark: Any, bootstrap: str) -> None:
    msg = read_error(spark, {"kafka.bootstrap.servers": bootstrap, "subscribe": "x", "subscribePattern": "x.*"})
    assert "exactly one of the options subscribe, subscribePattern, assign must be given; got subscribe, " \
           "subscribePattern" in msg
    msg = read_error(spark, {"kafka.bootstrap.servers": bootstrap})
    assert "exactly one of the options subscribe, subscribePattern, assign must be given; got none" in msg


def test_malformed_starting_offsets_json(spark: Any, bootstrap: str) -> None:
    msg = read_error(spark, {"kafka.bootstrap.servers": bootstrap, "subscribe": "x",
                             "startingOffsets": '{"x": {"0": 1'})
    assert "option startingOffsets is not valid JSON" in msg
    msg = read_error(spark, {"kafka.bootstrap.servers": bootstrap, "subscribe": "x",
                             "startingOffsets": '{"x": {"0": "one"}}'})
    assert "option startingOffsets: offset of x-0 must be an integer, got 'one'" in msg


def test_missing_topic_is_named(spark: Any, bootstrap: str, topic: str) -> None:
    msg = read_error(spark, {"kafka.bootstrap.servers": bootstrap, "subscribe": f"{topic}-nope"})
    assert f"topic(s) {topic}-nope do not exist on {bootstrap}" in msg
    # and the read did not create it
    from client.admin import AdminClient

    with AdminClient(bootstrap) as admin:
        assert f"{topic}-nope" not in admin.list_topics()


def test_unreachable_bootstrap_server_is_named(spark: Any) -> None:
    addr = f"127.0.0.1:{closed_port()}"
    msg = read_error(spark, {"kafka.bootstrap.servers": addr, "subscribe": "x"})
    assert f"cannot reach the bootstrap server(s) {addr}" in msg
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception) as err:
        df.write.format("groupcoord").option("kafka.bootstrap.servers", addr).option("topic", "x").mode(
            "append").save()
    assert f"cannot reach the bootstrap server(s) {addr}" in str(err.value)


def test_value_column_of_the_wrong_type(spark: Any, bootstrap: str, topic: str) -> None:
    make_topic(bootstrap, topic, 1)
    df = spark.createDataFrame([(1,)], "value int")
    with pytest.raises(Exception) as err:
        df.write.format("groupcoord").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).mode(
            "append").save()
    assert "column 'value' must be binary or string, got int" in str(err.value)
    df = spark.createDataFrame([(b"k",)], "key binary")
    with pytest.raises(Exception) as err:
        df.write.format("groupcoord").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).mode(
            "append").save()
    assert "the groupcoord sink needs a 'value' column (binary or string)" in str(err.value)
