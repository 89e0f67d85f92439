"""Regex subscriptions (ConsumerGroupHeartbeat v1 SubscribedTopicRegex; research kip848.md section 2.7):
RE2 full-match resolution on the coordinator, record 16 (ConsumerGroupRegularExpression) with Kafka's bytes,
the 10 s refresh against the topic snapshot, tombstones when the last member leaves a regex, DESCRIBE
filtering, and replay (core, Shard bytes routing and the bulk load path) giving the same state."""

from __future__ import annotations

from typing import Any

import pytest
from cg_harness import Driver, assigned

from coordinator.core.bulk_replay import replay_records
from coordinator.core.consumer_group import records as R
from coordinator.core.consumer_group.model import Err, GroupState
from coordinator.core.consumer_group.regex import REGEX_REFRESH_MS, resolve
from coordinator.core.shard import Shard, ShardStatus


class AclDriver(Driver):
    """The harness, with a DESCRIBE predicate passed to every heartbeat."""

    def __init__(self, may_describe: Any) -> None:
        super().__init__()
        self.may_describe = may_describe

    def send(self, version: int = 1, client_id: str = "client", client_host: str = "/127.0.0.1",
             **request: Any) -> dict[str, Any]:
        body = {"group_id": "g", "member_id": "", "member_epoch": 0, "instance_id": None, "rack_id": None,
                "rebalance_timeout_ms": -1, "subscribed_topic_names": None, "subscribed_topic_regex": None,
                "server_assignor": None, "topic_partitions": None, **request}
        out = self.apply(self.cg.heartbeat(body, version, self.now, self.topics, client_id, client_host,
                                           may_describe=self.may_describe))
        assert out.response is not None
        return out.response


def regex_join(d: Driver, member_id: str, regex: str, names: list[str] | None = None) -> dict[str, Any]:
    return d.send(member_id=member_id, member_epoch=0, rebalance_timeout_ms=30000,
                  subscribed_topic_names=names, subscribed_topic_regex=regex, topic_partitions=[])


def regex_records(d: Driver) -> list[R.Record]:
    return [r for r in d.log if isinstance(r.key, R.RegexKey)]


def orders(d: Driver) -> None:
    d.topic("orders-a", 2)
    d.topic("orders-b", 1)
    d.topic("payments", 1)
    d.topic("__orders-internal", 1)


# ---------------------------------------------------------------- record 16 bytes

def test_regex_record_has_kafkas_bytes() -> None:
    record = R.Record(R.RegexKey("g", "^a.*"), R.RegexValue(("ab", "ac"), 7, 1000))
    key = bytes.fromhex("0010" "0001" "67" "0004" "5e612e2a")  # type 16, GroupId, RegularExpression
    value = bytes.fromhex("0000"  # value version 0, then flexible
                          "03" "03" "6162" "03" "6163"  # Topics: compact array of compact strings
                          "0000000000000007"  # Version int64
                          "00000000000003e8"  # Timestamp int64
                          "00")  # tagged fields
    assert R.encode_record(record) == (key, value)
    assert R.decode_record(key, value) == record
    assert R.decode_record(key, None) == R.Record(record.key, None)
    # an unknown tagged field is skipped
    tagged = value[:-1] + bytes.fromhex("01" "05" "02" "abcd")
    assert R.decode_record(key, tagged) == record


# ---------------------------------------------------------------- validation

def test_invalid_regex_is_invalid_regular_expression() -> None:
    d = Driver()
    orders(d)
    r = regex_join(d, "a", "orders-(")
    assert r["error_code"] == Err.INVALID_REGULAR_EXPRESSION == 128
    assert r["error_message"].startswith("SubscribedTopicRegex `orders-(` is not a valid regular expression: ")
    assert d.log == [] and "g" not in d.cg.groups
    # also for a member changing to a bad one: refused, nothing written, the member keeps its regex
    ok = regex_join(d, "a", "orders-.*")
    written = len(d.log)
    r = d.beat("a", ok["member_epoch"], None, subscribed_topic_regex="[z-a]")
    assert r["error_code"] == 128 and len(d.log) == written
    assert d.member("a").subscribed_topic_regex == "orders-.*"


def test_full_match_semantics_and_internal_topics() -> None:
    names = ["orders-a", "orders", "xorders-a", "topic-1", "__orders-x"]
    assert resolve("orders-.*", names) == ("orders-a",)
    assert resolve("^orders-.*", names) == ("orders-a",)
    assert resolve("orders", names) == ("orders",)  # not a substring search
    assert resolve("^topic*", names) == ()  # RE2J: "topi" then "c"*, never "topic-1" (librdkafka#5251)
    assert resolve(".*orders.*", names) == ("orders", "orders-a", "xorders-a")  # never an internal topic


# ---------------------------------------------------------------- resolution

def test_regex_is_resolved_and_unioned_with_names() -> None:
    d = Driver()
    orders(d)
    r = regex_join(d, "a", "orders-.*", names=["payments"])
    assert r["error_code"] == 0
    assert d.member("a").assigned == assigned(**{"orders-a": [0, 1], "orders-b": [0], "payments": [0]})
    [rec] = regex_records(d)
    assert rec.key == R.RegexKey("g", "orders-.*")
    assert isinstance(rec.value, R.RegexValue) and rec.value.topics == ("orders-a", "orders-b")
    assert rec.value.timestamp == d.now
    assert set(d.group().subscribed_topic_names) == {"orders-a", "orders-b", "payments"}
    # the records of the batch, in order: the member, its regex, then the metadata and the epoch
    kinds = [type(x.key).__name__ for x in d.log]
    assert kinds.index("MemberMetadataKey") < kinds.index("RegexKey") < kinds.index("PartitionMetadataKey")

    # a second member with the same regex: no new resolution, the partitions are shared
    d.advance(1000)
    regex_join(d, "b", "orders-.*")
    assert len(regex_records(d)) == 1
    for _ in range(3):
        d.settle("a")
        d.settle("b")
    got = [d.member(m).assigned for m in ("a", "b")]
    assert d.group().state is GroupState.STABLE
    assert sum(len(ps) for a in got for ps in a.values()) == 4  # 3 regex partitions + payments-0


def test_topic_created_later_is_picked_up_after_the_refresh_interval() -> None:
    d = Driver()
    orders(d)
    first = regex_join(d, "a", "orders-.*")
    d.settle("a")
    epoch = d.group().group_epoch
    d.topic("orders-late", 3)
    d.advance(REGEX_REFRESH_MS // 2)  # not yet: at most one refresh per interval
    d.settle("a")
    assert d.group().group_epoch == epoch and len(regex_records(d)) == 1
    d.advance(REGEX_REFRESH_MS // 2)
    d.settle("a")
    assert d.group().group_epoch == epoch + 1
    latest = regex_records(d)[-1].value
    assert isinstance(latest, R.RegexValue) and latest.topics == ("orders-a", "orders-b", "orders-late")
    for _ in range(2):
        d.settle("a")
    assert d.member("a").assigned == assigned(**{"orders-a": [0, 1], "orders-b": [0], "orders-late": [0, 1, 2]})
    assert first["member_epoch"] < d.member("a").member_epoch


def test_unrelated_topic_rewrites_the_version_without_a_bump() -> None:
    d = Driver()
    orders(d)
    regex_join(d, "a", "orders-.*")
    d.settle("a")
    epoch = d.group().group_epoch
    d.advance(REGEX_REFRESH_MS)
    d.settle("a")  # nothing changed: no record at all
    assert len(regex_records(d)) == 1
    d.topic("billing", 1)
    d.advance(REGEX_REFRESH_MS)
    d.settle("a")
    assert len(regex_records(d)) == 2 and d.group().group_epoch == epoch
    old, new = (x.value for x in regex_records(d))
    assert isinstance(old, R.RegexValue) and isinstance(new, R.RegexValue)
    assert old.topics == new.topics and old.version != new.version and new.timestamp == d.now


def test_deleted_topic_bumps_the_epoch() -> None:
    d = Driver()
    orders(d)
    regex_join(d, "a", "orders-.*")
    d.settle("a")
    epoch = d.group().group_epoch
    del d.topics["orders-b"]
    d.advance(REGEX_REFRESH_MS)
    d.settle("a")
    assert d.group().group_epoch > epoch
    assert d.group().resolved_regexes["orders-.*"].topics == ("orders-a",)
    d.settle("a")
    assert d.member("a").assigned == assigned(**{"orders-a": [0, 1]})


def test_last_member_leaving_a_regex_tombstones_it() -> None:
    d = Driver()
    orders(d)
    a = regex_join(d, "a", "orders-.*")
    regex_join(d, "b", "orders-.*")
    d.send(member_id="a", member_epoch=-1)
    assert R.Record(R.RegexKey("g", "orders-.*"), None) not in d.log
    assert "orders-.*" in d.group().resolved_regexes
    d.advance(60000)  # b's session expires: it is fenced, the regex loses its last member
    assert "b" not in d.group().members
    assert d.log[-1].key == R.MetadataKey("g")
    tombstone = R.Record(R.RegexKey("g", "orders-.*"), None)
    assert tombstone in d.log
    assert d.log.index(tombstone) > d.log.index(R.Record(R.MemberMetadataKey("g", "b"), None))
    assert d.group().resolved_regexes == {} and d.group().regex_members == {}
    assert d.group().subscribed_topic_names == {}
    assert a["error_code"] == 0


def test_changing_the_regex_tombstones_the_old_one() -> None:
    d = Driver()
    orders(d)
    r = regex_join(d, "a", "orders-.*")
    epoch = d.group().group_epoch
    d.beat("a", r["member_epoch"], None, subscribed_topic_regex="pay.*")
    assert d.group().group_epoch == epoch + 1
    assert set(d.group().resolved_regexes) == {"pay.*"}
    assert R.Record(R.RegexKey("g", "orders-.*"), None) in d.log
    d.settle("a")
    d.settle("a")
    assert d.member("a").assigned == assigned(payments=[0])
    # an empty regex clears it (v1): no regex left at all
    d.beat("a", d.member("a").member_epoch, None, subscribed_topic_regex="")
    assert d.group().resolved_regexes == {} and d.member("a").subscribed_topic_regex is None


def test_describe_acl_filters_resolved_topics() -> None:
    d = AclDriver(may_describe=lambda topic: topic != "orders-b")
    orders(d)
    regex_join(d, "a", "orders-.*")
    assert d.group().resolved_regexes["orders-.*"].topics == ("orders-a",)
    assert d.member("a").assigned == assigned(**{"orders-a": [0, 1]})


# ---------------------------------------------------------------- persistence

def _story() -> Driver:
    d = Driver()
    orders(d)
    regex_join(d, "a", "orders-.*", names=["payments"])
    regex_join(d, "b", "pay.*")
    d.settle("a")
    d.topic("orders-late", 2)
    d.advance(REGEX_REFRESH_MS)
    d.settle("b")
    d.settle("a")
    return d


def test_replay_round_trip_with_regex_records() -> None:
    d = _story()
    assert {r.key.regular_expression for r in regex_records(d)} == {"orders-.*", "pay.*"}  # type: ignore[union-attr]
    expected = d.group().snapshot()
    assert d.replayed_fresh().groups["g"].snapshot() == expected

    # as bytes, through the shard's routing (record 16 included) and the bulk load path
    encoded = [R.encode_record(r) for r in d.log]
    one = Shard(0)
    one.reset(ShardStatus.LOADING)
    for key, value in encoded:
        one.replay(key, value)
    bulk = Shard(0)
    bulk.reset(ShardStatus.LOADING)
    skipped: list[Any] = []
    replay_records(bulk, encoded, lambda k, e: skipped.append(e))
    assert skipped == []
    for shard in (one, bulk):
        assert shard.consumer.groups["g"].snapshot() == expected
        assert shard.groups == {}  # nothing taken for a classic group


def test_delete_records_put_regex_tombstones_before_the_metadata() -> None:
    d = _story()
    tombstones = d.cg.delete_records("g")
    kinds = [type(r.key).__name__ for r in tombstones]
    last_member = max(i for i, k in enumerate(kinds) if k == "MemberMetadataKey")
    regexes = [i for i, k in enumerate(kinds) if k == "RegexKey"]
    assert len(regexes) == 2 and last_member < min(regexes)
    assert max(regexes) < kinds.index("PartitionMetadataKey") < kinds.index("MetadataKey") == len(kinds) - 1
    for r in tombstones:
        d.cg.replay(r)
    assert "g" not in d.cg.groups


@pytest.mark.parametrize("regex", ["orders-.*", "(?i)ORDERS-A"])
def test_member_without_names_and_with_regex_is_heterogeneous_safe(regex: str) -> None:
    """A regex member beside a names member: each gets only its own topics."""
    d = Driver()
    orders(d)
    regex_join(d, "a", regex)
    d.join("b", ["payments"])
    for _ in range(3):
        d.settle("a")
        d.settle("b")
    assert set(d.member("b").assigned) == set(assigned(payments=[0]))
    assert set(d.member("a").assigned) <= set(assigned(**{"orders-a": [0], "orders-b": [0]}))
    assert d.member("a").assigned
