"""Transactions in the offsets partitions' runtime: offsets_reader's transactional events (decode_chunks), their
way through the decoding process (parallel_load) and the follower hook (follower_replay), and GroupService's
transactional write, markers (write_marker) and load (load_all) on a real log."""

from __future__ import annotations

import pickle

import trio

from coordinator.config import Config
from coordinator.core.config import GroupConfig
from coordinator.core.coordinator import Coordinator
from coordinator.core.records import OffsetCommitValue, encode_offset_key, encode_offset_value
from coordinator.metrics import Metrics
from coordinator.runtime import parallel_load
from coordinator.runtime.follower_replay import FollowerReplay
from coordinator.runtime.group_commit import GroupCommit
from coordinator.runtime.groups import OFFSETS_TOPIC, GroupService, MarkerRefused
from coordinator.runtime.offsets_reader import OffsetRecords, TxnBatch, TxnMarker, decode_chunks, read_chunks
from coordinator.storage.manager import LogManager
from protocol.codec import Request
from protocol.control_batch import MARKER_ATTRIBUTES, build_marker_batch
from protocol.headers import RequestHeader
from protocol.record_batch import (
    _seal,
    build_batch,
    build_kv_batch,
    decode_batch,
    decode_batch_key_values,
    encode_record,
    parse_header,
    split_batches,
    with_base_offset,
)


def kv(group: str, partition: int, offset: int) -> tuple[bytes, bytes]:
    return (encode_offset_key(group, "t", partition),
            encode_offset_value(OffsetCommitValue(offset, -1, "", 5, None)))


def txn_batch(pid: int, *records: tuple[bytes, bytes]) -> bytes:
    return build_batch([(k, v, (), 5) for k, v in records], producer_id=pid, producer_epoch=2, base_sequence=0,
                       transactional=True)


def control_batch(pid: int, type_id: int, count: int = 1) -> bytes:
    """A control batch with a record of any control type (or none: compaction can empty one)."""
    record = encode_record(0, 0, (0).to_bytes(2, "big") + type_id.to_bytes(2, "big"), b"\x00\x00\x00\x00\x00\x07")
    return _seal(record if count else b"", 0, -1, MARKER_ATTRIBUTES, 0, 5, 5, pid, 2, -1, count)


def concat(*batches: bytes, base: int = 0) -> bytes:
    out = []
    for batch in batches:
        out.append(with_base_offset(batch, base))
        base = parse_header(out[-1]).next_offset
    return b"".join(out)


def test_transactional_and_control_batches_become_events_in_log_order() -> None:
    plain1, plain2 = build_kv_batch([kv("g", 0, 1), kv("g", 1, 1)], 5), build_kv_batch([kv("g", 0, 3)], 5)
    data = concat(plain1, txn_batch(7, kv("g", 0, 2), kv("g", 2, 2)), control_batch(7, 1), plain2,
                  txn_batch(8, kv("h", 0, 9)), control_batch(8, 0), control_batch(9, 1, count=0),
                  control_batch(9, 3), build_marker_batch(10, 0, True, 4, 6))
    problems: list[str] = []
    records, reached = decode_chunks([(0, data)], 0, problems)
    assert problems == [] and reached == 11
    assert type(records) is OffsetRecords
    assert list(records) == [kv("g", 0, 1), kv("g", 1, 1), kv("g", 0, 3)]  # only the plain ones
    assert records.txn == [(2, TxnBatch(7, [kv("g", 0, 2), kv("g", 2, 2)])), (2, TxnMarker(7, True)),
                           (3, TxnBatch(8, [kv("h", 0, 9)])), (3, TxnMarker(8, False)), (3, TxnMarker(10, True))]


def test_plain_batches_decode_as_before() -> None:
    batches = [build_kv_batch([kv(f"g{i}", p, i * 10 + p) for p in range(i % 4 + 1)], 5) for i in range(30)]
    data = concat(*batches)
    records, reached = decode_chunks([(0, data)], 0)
    want = [pair for batch, _ in zip(split_batches(data)[0], range(30)) for pair in decode_batch_key_values(batch)[1]]
    assert list(records) == want and records.txn == []
    assert reached == parse_header(split_batches(data)[0][-1]).next_offset


def test_damaged_transactional_batches_are_skipped_with_a_problem_line() -> None:
    good = txn_batch(3, kv("g", 0, 1))
    bad_txn = bytearray(txn_batch(4, kv("g", 1, 1)))
    bad_txn[-1] ^= 0xFF
    bad_marker = bytearray(control_batch(4, 1))
    bad_marker[-2] ^= 0xFF
    data = concat(good, bytes(bad_txn), bytes(bad_marker), control_batch(3, 1))
    problems: list[str] = []
    records, reached = decode_chunks([(0, data)], 0, problems)
    assert reached == 4 and len(problems) == 2 and all("skipped" in p for p in problems)
    assert records.txn == [(0, TxnBatch(3, [kv("g", 0, 1)])), (0, TxnMarker(3, True))]


def test_a_read_that_starts_inside_or_past_transactional_batches() -> None:
    data = concat(txn_batch(3, kv("g", 0, 1), kv("g", 1, 1)), control_batch(3, 1), build_kv_batch([kv("g", 2, 2)], 5))
    records, reached = decode_chunks([(1, data)], 1)  # the batch holding offset 1 contributes from 1 on
    assert records.txn == [(0, TxnBatch(3, [kv("g", 1, 1)])), (0, TxnMarker(3, True))] and reached == 4
    records, _ = decode_chunks([(3, data)], 3)  # past the marker: nothing of the transaction
    assert records.txn == [] and list(records) == [kv("g", 2, 2)]


def test_events_survive_the_decoding_process_pickle() -> None:
    data = concat(build_kv_batch([kv("g", 0, 1)], 5), txn_batch(3, kv("g", 0, 2)), control_batch(3, 0))
    records, problems = parallel_load._decode([(0, data)], 0)
    again = pickle.loads(pickle.dumps(records))
    assert problems == [] and again == records and again.txn == records.txn == [
        (1, TxnBatch(3, [kv("g", 0, 2)])), (1, TxnMarker(3, False))]


class _Log:
    name = f"{OFFSETS_TOPIC}-0"


def test_the_follower_hook_replays_transactions_in_log_order() -> None:
    core = Coordinator(GroupConfig(offsets_topic_num_partitions=1))
    core.begin_following(0)
    plog = _Log()
    replay = FollowerReplay(core, OFFSETS_TOPIC, {0: plog}, lambda s: plog, lambda: None)  # type: ignore[arg-type]
    replay.replayed[0] = 0
    data = concat(txn_batch(3, kv("g", 0, 2), kv("g", 1, 2)), build_kv_batch([kv("g", 1, 5)], 5), control_batch(3, 1),
                  txn_batch(4, kv("g", 2, 9)))
    replay.on_append(plog, split_batches(data)[0])  # type: ignore[arg-type]
    assert replay.replayed[0] == 5
    core.finish_loading(0, 0)
    # t-1: the plain commit came after the transaction's record, so it stays; t-2: producer 4 still pending
    assert {tp: v.offset for tp, v in core.committed_offsets("g").items()} == {("t", 0): 2, ("t", 1): 5}
    assert core.pending_txn_producers(0) == {4}


# ---------------------------------------------------------------- GroupService on a real log

class _Broker:
    def __init__(self) -> None:
        self.config = Config({"offsets.topic.num.partitions": 1})
        self.metrics = Metrics()
        self.cluster = None
        self.topic_service = None


class _Slot:
    api_key = 28

    def __init__(self) -> None:
        self.answer: dict | None = None
        self.conn = None

    def complete(self, response: dict) -> None:
        assert self.answer is None
        self.answer = response


def _txn_request(pid: int, partition: int, offset: int) -> dict:
    return {"transactional_id": "tx", "group_id": "g", "producer_id": pid, "producer_epoch": 2, "generation_id": -1,
            "member_id": "", "group_instance_id": None, "topics": [{"name": "t", "partitions": [
                {"partition_index": partition, "committed_offset": offset, "committed_leader_epoch": -1,
                 "committed_metadata": None}]}]}


async def _wait(predicate, what: str) -> None:
    for _ in range(500):
        if predicate():
            return
        await trio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_group_service_writes_markers_and_loads_them_back(tmp_path) -> None:
    logs = LogManager(str(tmp_path))
    commit = GroupCommit(0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(commit.run)
        service = GroupService(_Broker(), logs, commit)  # type: ignore[arg-type]
        await service.load_all()
        answers = []
        for pid, partition, offset in ((11, 0, 100), (12, 1, 200), (13, 2, 300)):
            slot = _Slot()
            service.apply(service.core.handle(28, 3, _txn_request(pid, partition, offset), slot, 1))
            await _wait(lambda s=slot: s.answer is not None, "the TxnOffsetCommit answer")  # type: ignore[misc]
            answers.append(slot.answer)
        assert all(a["topics"][0]["partitions"][0]["error_code"] == 0 for a in answers)
        assert service.core.committed_offsets("g") == {}
        done: list = []
        service.write_marker(0, 11, 2, True, 5, done.append)
        service.write_marker(0, 12, 2, False, 5, done.append)
        await _wait(lambda: len(done) == 2, "the markers")
        assert done == [None, None]
        assert {tp: v.offset for tp, v in service.core.committed_offsets("g").items()} == {("t", 0): 100}
        assert service.core.pending_txn_producers(0) == {13}
        refused: list = []
        service.core.unload(0, 2)
        service.write_marker(0, 13, 2, True, 5, refused.append)
        assert isinstance(refused[0], MarkerRefused) and refused[0].error_code == 16
        nursery.cancel_scope.cancel()
    plog = logs.get(OFFSETS_TOPIC, 0)
    batches = [decode_batch(b)[0] for b in split_batches(read_chunks(plog, 0)[0][1])[0]]
    assert [(h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional, h.is_control) for h in batches] \
        == [(11, 2, 0, True, False), (12, 2, 0, True, False), (13, 2, 0, True, False), (11, 2, -1, True, True),
            (12, 2, -1, True, True)]
    logs.close()
    again = GroupService(_Broker(), LogManager(str(tmp_path)), GroupCommit(0))  # type: ignore[arg-type]
    await again.load_all()
    assert {tp: v.offset for tp, v in again.core.committed_offsets("g").items()} == {("t", 0): 100}
    assert again.core.pending_txn_producers(0) == {13}


class _Topics:
    def topics(self) -> dict[str, int]:
        return {"t": 2}


class _Conn:
    host = "/127.0.0.1"


async def test_txn_offset_commit_through_handle_checks_the_transaction_and_the_topics(tmp_path) -> None:
    broker = _Broker()
    broker.topic_service = _Topics()  # type: ignore[assignment]
    commit = GroupCommit(0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(commit.run)
        service = GroupService(broker, LogManager(str(tmp_path)), commit)  # type: ignore[arg-type]
        await service.load_all()
        asked: list[tuple] = []

        def verify(txn_id: str, pid: int, epoch: int, topic: str, partition: int) -> int:
            asked.append((txn_id, pid, epoch, topic, partition))
            return 0 if pid == 11 else 120  # TRANSACTION_ABORTABLE

        service.verify_txn = verify

        async def send(version: int, pid: int, partition: int) -> int:
            slot = _Slot()
            slot.conn = _Conn()  # type: ignore[assignment]
            request = Request(RequestHeader(28, version, 1, "c"), _txn_request(pid, partition, 5))
            service.handle(request, slot)  # type: ignore[arg-type]
            await _wait(lambda: slot.answer is not None, "the answer")
            assert slot.answer is not None
            return slot.answer["topics"][0]["partitions"][0]["error_code"]

        assert await send(4, 12, 0) == 120
        assert await send(3, 12, 0) == 48  # INVALID_TXN_STATE below v4
        assert asked[0] == ("tx", 12, 2, OFFSETS_TOPIC, 0)
        assert await send(3, 11, 5) == 3  # a partition the topic does not have: UNKNOWN_TOPIC_OR_PARTITION
        assert await send(3, 11, 1) == 0
        assert service.core.pending_txn_producers(0) == {11}
        nursery.cancel_scope.cancel()
