"""TxnOffsetCommit (28) and pending transactional offsets in the core (Kafka 3.9's handleTxnCommitOffsets,
validateOffsetCommit(isTransactional=true), prepare/complete/failPendingTxnOffsetCommit, getOffsets(requireStable)).

The harness appends every write and replays it as the runtime does (``on_appended``); a marker is applied with
``Coordinator.complete_txn`` as the runtime does once the marker is durable."""

from __future__ import annotations

import uuid

from core_harness import DELETE, Harness, Token

from coordinator.core.consumer_group import TopicInfo
from coordinator.core.consumer_group import records as R
from coordinator.core.coordinator import SUPPORTED_APIS, Coordinator
from coordinator.core.errors import Err
from coordinator.core.records import decode_offset_key

TXN = 28
OFFSET_DELETE = 47


def txn_commit(h: Harness, group: str, pid: int, offsets: dict, *, version: int = 3, generation: int = -1,
               member: str = "", instance: str | None = None, epoch: int = 0, metadata: str | None = "",
               leader_epoch: int = 7, unknown: frozenset = frozenset()) -> Token:
    topics: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                             "committed_leader_epoch": leader_epoch, "committed_metadata": metadata})
    req = {"transactional_id": f"tx-{pid}", "group_id": group, "producer_id": pid, "producer_epoch": epoch,
           "generation_id": generation, "member_id": member, "group_instance_id": instance,
           "topics": [{"name": t, "partitions": p} for t, p in topics.items()]}
    if unknown:
        req["unknown_partitions"] = unknown
    return h.send(TXN, version, req, f"txn {pid}")


def errors(h: Harness, token: Token) -> dict[tuple[str, int], int]:
    return {(t["name"], p["partition_index"]): p["error_code"] for t in h[token]["topics"] for p in t["partitions"]}


def marker(h: Harness, group: str, pid: int, commit: bool) -> None:
    h.apply(h.coord.complete_txn(h.coord.shard_for(group), pid, commit, h.now))


def stable_fetch(h: Harness, group: str, partitions: dict) -> dict[tuple[str, int], tuple[int, int]]:
    """OffsetFetch v7 with require_stable: (error, offset) per partition."""
    token = h.send(9, 7, {"group_id": group, "require_stable": True,
                          "topics": [{"name": t, "partition_indexes": ps} for t, ps in partitions.items()]})
    return {(t["name"], p["partition_index"]): (p["error_code"], p["committed_offset"])
            for t in h[token]["topics"] for p in t["partitions"]}


def offset(h: Harness, group: str, topic: str, partition: int) -> int:
    return h.fetch(group, {topic: [partition]})[(topic, partition)]["committed_offset"]


def test_served_versions() -> None:
    assert SUPPORTED_APIS[TXN] == ("TxnOffsetCommit", 0, 4)


def test_invisible_until_commit_marker_and_require_stable_says_unstable_meanwhile(h: Harness) -> None:
    t = txn_commit(h, "g", 100, {("t", 0): 5, ("t", 1): 6})
    assert errors(h, t) == {("t", 0): 0, ("t", 1): 0}
    assert offset(h, "g", "t", 0) == -1 and offset(h, "g", "t", 1) == -1  # pending: not visible
    assert stable_fetch(h, "g", {"t": [0, 1, 2]}) == {("t", 0): (88, -1), ("t", 1): (88, -1), ("t", 2): (0, -1)}
    assert h.coord.pending_txn_producers(h.coord.shard_for("g")) == {100}
    marker(h, "g", 100, commit=True)
    assert stable_fetch(h, "g", {"t": [0, 1]}) == {("t", 0): (0, 5), ("t", 1): (0, 6)}
    fetched = h.fetch("g", {"t": [0]})[("t", 0)]
    assert fetched["committed_leader_epoch"] == 7 and fetched["metadata"] == ""
    assert h.coord.pending_txn_producers(h.coord.shard_for("g")) == set()


def test_the_write_is_one_transactional_batch_of_the_producer() -> None:
    core = Coordinator()
    for shard in range(core.config.offsets_topic_num_partitions):
        core.begin_loading(shard)
        core.finish_loading(shard, 0)
    req = {"transactional_id": "tx", "group_id": "g", "producer_id": 42, "producer_epoch": 3, "generation_id": -1,
           "member_id": "", "group_instance_id": None, "topics": [
               {"name": "a", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                             "committed_leader_epoch": -1, "committed_metadata": None}]},
               {"name": "b", "partitions": [{"partition_index": 3, "committed_offset": 9,
                                             "committed_leader_epoch": -1, "committed_metadata": "m"}]}]}
    out = core.handle(TXN, 3, req, "tok", 10)
    assert out.producer == (42, 3)
    assert {r[0] for r in out.records} == {core.shard_for("g")}
    assert [decode_offset_key(k) for _, k, _ in out.records] == [("g", ("a", 0)), ("g", ("b", 3))]
    assert out.completions == [] or out.completions[0][0] == "tok"
    # no answer before durable; a plain OffsetCommit's outcome carries no producer
    plain = core.handle(8, 7, {"group_id": "h", "generation_id_or_member_epoch": -1, "member_id": "",
                               "group_instance_id": None, "topics": [{"name": "a", "partitions": [
                                   {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                                    "committed_metadata": ""}]}]}, "tok2", 10)
    assert plain.producer is None and plain.records
    after = core.on_appended(out.write_id, 11)
    assert not after.records
    assert core.pending_txn_producers(core.shard_for("g")) == {42}


def test_no_due_timer_is_fired_into_a_transactional_outcome() -> None:
    h = Harness(offsets_retention_minutes=1, offsets_retention_check_interval_ms=1000)
    h.commit("old", -1, "", {("t", 0): 1})
    h.now += 120_000  # the retention timer is due: a plain request would fire it and expire "old"
    out = h.coord.handle(TXN, 3, {"transactional_id": "tx", "group_id": "g", "producer_id": 1, "producer_epoch": 0,
                                  "topics": [{"name": "t", "partitions": [{"partition_index": 0,
                                                                          "committed_offset": 3}]}]}, "tok", h.now)
    assert out.producer == (1, 0) and len(out.records) == 1
    assert decode_offset_key(out.records[0][1]) == ("g", ("t", 0)) and out.records[0][2] is not None
    h.apply(out)
    h.sleep(0)  # the timer fires on its own call
    assert h.fetch("old", {"t": [0]})[("t", 0)]["committed_offset"] == -1


def test_abort_discards_and_forgets_the_producer(h: Harness) -> None:
    h.commit("g", -1, "", {("t", 0): 3})
    txn_commit(h, "g", 7, {("t", 0): 50, ("t", 1): 51})
    marker(h, "g", 7, commit=False)
    assert stable_fetch(h, "g", {"t": [0, 1]}) == {("t", 0): (0, 3), ("t", 1): (0, -1)}
    marker(h, "g", 7, commit=True)  # a later marker of a forgotten producer changes nothing
    assert offset(h, "g", "t", 0) == 3 and offset(h, "g", "t", 1) == -1


def test_a_later_plain_commit_wins_over_the_pending_offset(h: Harness) -> None:
    txn_commit(h, "g", 1, {("t", 0): 10, ("t", 1): 11})
    h.commit("g", -1, "", {("t", 0): 20})  # after the txn record in the log
    marker(h, "g", 1, commit=True)
    assert offset(h, "g", "t", 0) == 20  # the plain commit is later: it stays
    assert offset(h, "g", "t", 1) == 11


def test_an_earlier_plain_commit_loses_to_the_committed_transaction(h: Harness) -> None:
    h.commit("g", -1, "", {("t", 0): 20})
    txn_commit(h, "g", 1, {("t", 0): 10})
    assert offset(h, "g", "t", 0) == 20
    marker(h, "g", 1, commit=True)
    assert offset(h, "g", "t", 0) == 10


def test_the_hot_path_commit_supersedes_a_pending_offset_too(h: Harness) -> None:
    txn_commit(h, "g", 1, {("t", 0): 10})
    pending = h.coord.commit_offset(h.now, 7, "g", -1, "", None, "t", 0, 30, -1, "", None)
    assert type(pending).__name__ == "PendingCommit"
    h.coord.commit_settled(pending, durable=True)
    marker(h, "g", 1, commit=True)
    assert offset(h, "g", "t", 0) == 30


def test_two_producers_the_one_written_later_wins_whatever_the_marker_order(h: Harness) -> None:
    txn_commit(h, "g", 1, {("t", 0): 10})
    txn_commit(h, "g", 2, {("t", 0): 20})
    marker(h, "g", 2, commit=True)
    marker(h, "g", 1, commit=True)  # its offset was written before producer 2's: it does not replace it
    assert offset(h, "g", "t", 0) == 20
    txn_commit(h, "g", 3, {("t", 1): 30})
    txn_commit(h, "g", 4, {("t", 1): 40})
    marker(h, "g", 3, commit=True)
    assert offset(h, "g", "t", 1) == 30
    assert stable_fetch(h, "g", {"t": [1]}) == {("t", 1): (88, -1)}  # producer 4 still pending
    marker(h, "g", 4, commit=True)
    assert offset(h, "g", "t", 1) == 40


def test_a_second_commit_of_the_same_transaction_replaces_the_first(h: Harness) -> None:
    txn_commit(h, "g", 1, {("t", 0): 10})
    h.commit("g", -1, "", {("t", 0): 15})
    txn_commit(h, "g", 1, {("t", 0): 12})  # the same transaction again, after the plain commit
    marker(h, "g", 1, commit=True)
    assert offset(h, "g", "t", 0) == 12


def test_unknown_group_is_created_empty(h: Harness) -> None:
    t = txn_commit(h, "fresh", 5, {("t", 0): 1}, version=0)
    assert errors(h, t) == {("t", 0): 0}
    assert h.state("fresh") == "Empty"
    listed = h.send(16, 4, {"states_filter": []})
    assert "fresh" in [g["group_id"] for g in h[listed]["groups"]]
    # a refused commit leaves no group behind
    t = txn_commit(h, "ghost", 5, {("t", 0): 1}, generation=3, member="m")
    assert errors(h, t) == {("t", 0): Err.UNKNOWN_MEMBER_ID}
    assert h.state("ghost") is None
    # nor does it remove a bare group that holds pending transactional offsets
    t = txn_commit(h, "fresh", 6, {("t", 0): 1}, generation=3, member="m")
    assert errors(h, t) == {("t", 0): Err.UNKNOWN_MEMBER_ID}
    assert h.state("fresh") == "Empty"


def test_v3_member_checks_on_a_stable_group(h: Harness) -> None:
    generation, (leader, other) = h.stable_group("g", 2)
    ok = txn_commit(h, "g", 1, {("t", 0): 1}, generation=generation, member=leader)
    assert errors(h, ok) == {("t", 0): 0}
    assert errors(h, txn_commit(h, "g", 1, {("t", 0): 1}, generation=generation + 1, member=leader)) \
        == {("t", 0): Err.ILLEGAL_GENERATION}
    assert errors(h, txn_commit(h, "g", 1, {("t", 0): 1}, generation=generation, member="stranger")) \
        == {("t", 0): Err.UNKNOWN_MEMBER_ID}
    assert errors(h, txn_commit(h, "g", 1, {("t", 0): 1}, generation=-1, member=other)) \
        == {("t", 0): Err.ILLEGAL_GENERATION}  # a member id makes the generation count
    assert errors(h, txn_commit(h, "g", 1, {("t", 0): 1}, generation=generation, member=other,
                                instance="nobody")) == {("t", 0): Err.UNKNOWN_MEMBER_ID}
    # v0-2 carry no member data: the v3 fields are not read
    assert errors(h, txn_commit(h, "g", 1, {("t", 0): 1}, version=2, generation=generation + 5, member="x")) \
        == {("t", 0): 0}


def test_static_member_fencing(h: Harness) -> None:
    first = h.join("s", instance="i-1")  # a static member joins at once (no MEMBER_ID_REQUIRED)
    h.settle(first)
    generation, member = h[first]["generation_id"], h[first]["member_id"]
    h.sync("s", generation, member, {member: b"a"}, instance="i-1")
    ok = txn_commit(h, "s", 1, {("t", 0): 1}, generation=generation, member=member, instance="i-1")
    assert errors(h, ok) == {("t", 0): 0}
    fenced = txn_commit(h, "s", 1, {("t", 0): 1}, generation=generation, member="old-id", instance="i-1")
    assert errors(h, fenced) == {("t", 0): Err.FENCED_INSTANCE_ID}


def test_v0_without_member_data_is_accepted_by_a_non_empty_group(h: Harness) -> None:
    h.stable_group("g", 1)
    plain = h.commit("g", -1, "", {("t", 0): 1})
    assert h[plain]["topics"][0]["partitions"][0]["error_code"] == Err.UNKNOWN_MEMBER_ID  # plain: refused
    t = txn_commit(h, "g", 9, {("t", 0): 4}, version=0)
    assert errors(h, t) == {("t", 0): 0}
    marker(h, "g", 9, commit=True)
    assert offset(h, "g", "t", 0) == 4


def test_no_rebalance_in_progress_for_transactional_commits(h: Harness) -> None:
    join, member = h.join_new("g")
    h.settle(join)
    generation = h[join]["generation_id"]
    assert h.state("g") == "CompletingRebalance"
    t = txn_commit(h, "g", 1, {("t", 0): 1}, generation=generation, member=member)
    assert errors(h, t) == {("t", 0): 0}


def test_group_status_errors_and_the_old_version_mapping() -> None:
    h = Harness()
    shard = h.coord.shard_for("g")
    h.coord.unload(shard, 0)
    h.coord.begin_loading(shard)
    for version, want in ((0, Err.COORDINATOR_NOT_AVAILABLE), (1, Err.COORDINATOR_NOT_AVAILABLE),
                          (2, Err.COORDINATOR_LOAD_IN_PROGRESS), (4, Err.COORDINATOR_LOAD_IN_PROGRESS)):
        assert errors(h, txn_commit(h, "g", 1, {("t", 0): 1}, version=version)) == {("t", 0): want}
    h.coord.unload(shard, 0)
    assert errors(h, txn_commit(h, "g", 1, {("t", 0): 1})) == {("t", 0): Err.NOT_COORDINATOR}
    assert errors(h, txn_commit(h, "", 1, {("t", 0): 1})) == {("t", 0): Err.INVALID_GROUP_ID}


def test_per_partition_errors(h: Harness) -> None:
    big = "x" * (h.cfg.offset_metadata_max_bytes + 1)
    t = txn_commit(h, "g", 1, {("t", 0): 1}, metadata=big)
    assert errors(h, t) == {("t", 0): Err.OFFSET_METADATA_TOO_LARGE}
    assert not h.coord.pending_txn_producers(h.coord.shard_for("g"))
    t = txn_commit(h, "g", 1, {("t", 0): 1, ("t", 1): 2, ("u", 0): 3}, unknown=frozenset({("u", 0), ("t", 1)}))
    unknown = Err.UNKNOWN_TOPIC_OR_PARTITION
    assert errors(h, t) == {("t", 0): 0, ("t", 1): unknown, ("u", 0): unknown}
    marker(h, "g", 1, commit=True)
    assert offset(h, "g", "t", 0) == 1 and offset(h, "g", "t", 1) == -1


def test_leader_epoch_is_read_from_v2() -> None:
    h = Harness()
    txn_commit(h, "g", 1, {("t", 0): 1}, version=1, leader_epoch=9)
    txn_commit(h, "g", 2, {("t", 1): 1}, version=2, leader_epoch=9)
    marker(h, "g", 1, commit=True)
    marker(h, "g", 2, commit=True)
    got = h.fetch("g", {"t": [0, 1]})
    assert got[("t", 0)]["committed_leader_epoch"] == -1 and got[("t", 1)]["committed_leader_epoch"] == 9


def test_in_flight_write_is_pending_and_a_failed_write_leaves_nothing(h: Harness) -> None:
    h.hold_writes = True
    t = txn_commit(h, "g", 1, {("t", 0): 1})
    assert not h.answered(t)
    assert stable_fetch(h, "g", {"t": [0]}) == {("t", 0): (88, -1)}  # Kafka's prepareTxnOffsetCommit
    h.hold_writes = False
    held, h.held = h.held, []
    h.fail_next_write = Err.NOT_COORDINATOR
    h.apply(held[0])
    assert errors(h, t) == {("t", 0): Err.NOT_COORDINATOR}
    assert stable_fetch(h, "g", {"t": [0]}) == {("t", 0): (0, -1)}
    assert h.coord.pending_txn_producers(h.coord.shard_for("g")) == set()


def test_expiry_keeps_pending_offsets_and_their_group() -> None:
    h = Harness(offsets_retention_minutes=1, offsets_retention_check_interval_ms=1000)
    h.commit("g", -1, "", {("t", 0): 1, ("t", 1): 2})
    txn_commit(h, "g", 1, {("t", 0): 10})
    txn_commit(h, "only-pending", 2, {("t", 0): 10})
    h.sleep(120_000)
    assert offset(h, "g", "t", 1) == -1  # expired by commit time
    assert stable_fetch(h, "g", {"t": [0]}) == {("t", 0): (88, -1)}
    assert h.state("g") == "Empty" and h.state("only-pending") == "Empty"
    marker(h, "g", 1, commit=True)
    assert offset(h, "g", "t", 0) == 10  # the committed (non-expired) value before it, then the txn's
    marker(h, "only-pending", 2, commit=False)
    h.sleep(2_000)
    assert h.state("only-pending") is None  # nothing pending, no offsets: removed at the next check


def test_delete_groups_drops_pending_offsets(h: Harness) -> None:
    txn_commit(h, "g", 1, {("t", 0): 10})
    h.commit("g", -1, "", {("t", 1): 1})
    deleted = h.send(DELETE, 2, {"groups_names": ["g"]})
    assert h[deleted]["results"][0]["error_code"] == 0
    assert h.coord.pending_txn_producers(h.coord.shard_for("g")) == set()
    marker(h, "g", 1, commit=True)
    assert h.state("g") is None and offset(h, "g", "t", 0) == -1


def test_offset_delete_drops_the_partition_pending_offset(h: Harness) -> None:
    txn_commit(h, "g", 1, {("t", 0): 10, ("t", 1): 11})
    out = h.send(OFFSET_DELETE, 0, {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]})
    assert h[out]["error_code"] == 0
    assert stable_fetch(h, "g", {"t": [0, 1]}) == {("t", 0): (0, -1), ("t", 1): (88, -1)}
    marker(h, "g", 1, commit=True)
    assert offset(h, "g", "t", 0) == -1 and offset(h, "g", "t", 1) == 11


def _consumer_group(core: Coordinator, group: str) -> tuple[str, int]:
    shard = core.shard_for(group)
    outcome = core.consumer_groups(shard).heartbeat(
        {"group_id": group, "member_id": "m1", "member_epoch": 0, "rebalance_timeout_ms": 30000,
         "subscribed_topic_names": ["t"], "topic_partitions": []}, 1, 0, {"t": TopicInfo(uuid.uuid4(), 2)})
    assert outcome.response is not None and outcome.response["error_code"] == 0
    for record in outcome.records:
        core.replay(shard, *R.encode_record(record))
    return "m1", outcome.response["member_epoch"]


def test_kip_848_consumer_group_member_epoch_checks(h: Harness) -> None:
    member, epoch = _consumer_group(h.coord, "cg")
    assert errors(h, txn_commit(h, "cg", 1, {("t", 0): 1}, generation=epoch + 1, member=member)) \
        == {("t", 0): Err.ILLEGAL_GENERATION}
    assert errors(h, txn_commit(h, "cg", 1, {("t", 0): 1}, generation=epoch, member="nobody")) \
        == {("t", 0): Err.UNKNOWN_MEMBER_ID}
    assert errors(h, txn_commit(h, "cg", 1, {("t", 0): 1}, version=0)) \
        == {("t", 0): Err.UNKNOWN_MEMBER_ID}  # members: an anonymous commit names no member
    assert errors(h, txn_commit(h, "cg", 1, {("t", 0): 5}, generation=epoch, member=member)) == {("t", 0): 0}
    marker(h, "cg", 1, commit=True)
    assert h.coord.committed_offsets("cg")[("t", 0)].offset == 5
