"""Pure planning rules (no Spark, no server): option parsing, range splitting, read-limit sharing."""

from __future__ import annotations

import pytest

from client.consumer_protocol import TopicPartition
from spark_bridge.options import OptionsError, parse_read, parse_write
from spark_bridge.planner import OffsetRange, limit_rows, plan_ranges

pytestmark = pytest.mark.spark

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_options_are_case_insensitive_and_typed() -> None:
    o = parse_read({"kafka.bootstrap.servers": "h:1", "SUBSCRIBE": "a, b", "maxoffsetspertrigger": "100",
                    "startingOffsets": '{"a":{"0":5,"1":-2}}', "failOnDataLoss": "FALSE",
                    "maxTriggerDelay": "30s"}, streaming=True)
    assert o.subscribe == ("a", "b")
    assert o.max_offsets_per_trigger == 100
    assert o.starting == {"a": {0: 5, 1: -2}}
    assert o.fail_on_data_loss is False
    assert o.max_trigger_delay_ms == 30000
    assert o.group_id_prefix == "spark-groupcoord" and o.commit_offsets_to_group is True


@pytest.mark.parametrize(("options", "streaming", "message"), [
    ({"subscribe": "a"}, False, "option kafka.bootstrap.servers is required"),
    ({"kafka.bootstrap.servers": "h:1", "assign": "[1]"}, False, "option assign must map topics to partition lists"),
    ({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "startingOffsets": "latest"}, False,
     "option startingOffsets=latest is not allowed here"),
    ({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "endingOffsets": "latest"}, True,
     "option endingOffsets is for batch reads only"),
    ({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "maxOffsetsPerTrigger": "0"}, True,
     "option maxOffsetsPerTrigger must be >= 1, got 0"),
    ({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "startingOffsets": '{"a":{"0":-3}}'}, True,
     "option startingOffsets: offset -3 of a-0 is invalid"),
    ({"kafka.bootstrap.servers": "h:1", "subscribePattern": "("}, True,
     "option subscribePattern is not a valid regular expression"),
])
def test_bad_read_options(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(OptionsError) as err:
        parse_read(options, streaming)
    assert message in str(err.value)


def test_sink_options_have_their_own_list() -> None:
    assert parse_write({"kafka.bootstrap.servers": "h:1", "topic": "t", "checkpointLocation": "/x"}).topic == "t"
    with pytest.raises(OptionsError) as err:
        parse_write({"kafka.bootstrap.servers": "h:1", "subscribe": "t"})
    assert "unknown option 'subscribe' for the groupcoord sink; valid options: kafka.bootstrap.servers, topic" \
        in str(err.value)


def test_plan_ranges_drops_empty_ranges_and_splits_for_min_partitions() -> None:
    start = {A0: 0, A1: 10, B0: 5}
    end = {A0: 90, A1: 10, B0: 35}
    assert plan_ranges(start, end, None) == [OffsetRange("a", 0, 0, 90), OffsetRange("b", 0, 5, 35)]
    split = plan_ranges(start, end, 4)
    assert split == [OffsetRange("a", 0, 0, 30), OffsetRange("a", 0, 30, 60), OffsetRange("a", 0, 60, 90),
                     OffsetRange("b", 0, 5, 35)]


def test_limit_rows_shares_the_limit_in_proportion_and_takes_exactly_it() -> None:
    start = {A0: 0, A1: 0, B0: 100}
    available = {A0: 300, A1: 100, B0: 100}  # b-0 has nothing new
    end = limit_rows(start, available, 100)
    assert end == {A0: 75, A1: 25, B0: 100}
    assert sum(end[tp] - start[tp] for tp in end) == 100
    odd = limit_rows({A0: 0, A1: 0}, {A0: 1, A1: 1}, 1)
    assert sum(odd.values()) == 1  # never more than the limit, never nothing while rows wait
    assert limit_rows(start, available, 10_000) == available
