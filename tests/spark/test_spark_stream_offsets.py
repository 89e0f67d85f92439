"""The stream reader's driver-side offset rules, called directly against the real server (no query)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

sys.path.insert(0, str(Path(__file__).parent))

from spark_support import fast_produce, make_topic

from spark_bridge.options import parse_read
from spark_bridge.stream import StreamReader

pytestmark = pytest.mark.spark


def reader(bootstrap: str, topic: str, **options: str) -> StreamReader:
    return StreamReader(parse_read({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                                    "startingOffsets": "earliest", "commitOffsetsToGroup": "false", **options},
                                   streaming=True))


def test_min_offsets_per_trigger_holds_a_batch_back_until_enough_rows_wait(bootstrap: str, topic: str) -> None:
    make_topic(bootstrap, topic, 2)
    fast_produce(bootstrap, topic, [b"x"] * 10, 2)
    r = reader(bootstrap, topic, minOffsetsPerTrigger="50", maxTriggerDelay="1h")
    start = r.initialOffset()
    assert start["offsets"] == {topic: {"0": 0, "1": 0}} and start["batch"] == -1
    assert r.latestOffset(start, ReadAllAvailable()) is start  # 10 < 50 and the delay has not passed
    fast_produce(bootstrap, topic, [b"y"] * 40, 2)
    end = r.latestOffset(start, ReadAllAvailable())
    assert end["offsets"] == {topic: {"0": 25, "1": 25}} and end["batch"] == 0
    assert end["query"] == start["query"]
    r.stop()

    eager = reader(bootstrap, topic, minOffsetsPerTrigger="1000", maxTriggerDelay="0ms")
    s = eager.initialOffset()
    assert eager.latestOffset(s, ReadAllAvailable())["offsets"] == {topic: {"0": 25, "1": 25}}
    eager.stop()


def test_max_rows_limit_and_available_now_target(bootstrap: str, topic: str) -> None:
    make_topic(bootstrap, topic, 2)
    fast_produce(bootstrap, topic, [b"x"] * 40, 2)
    r = reader(bootstrap, topic, maxOffsetsPerTrigger="10")
    assert r.getDefaultReadLimit() == ReadMaxRows(10)
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    fast_produce(bootstrap, topic, [b"late"] * 20, 2)  # after the target: never read in this run
    offsets = start
    batches = 0
    for _ in range(20):
        nxt = r.latestOffset(offsets, ReadMaxRows(10))
        if nxt is offsets:
            break
        batches += 1
        offsets = nxt
    assert batches == 4
    assert offsets["offsets"] == {topic: {"0": 20, "1": 20}} and offsets["batch"] == 3
    assert len(r.partitions(start, offsets)) == 2
    r.stop()
