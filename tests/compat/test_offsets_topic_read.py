"""``__consumer_offsets`` read by real clients, and decoded with Kafka's own record schemas (issue #27).

The story: topic ``otr-a`` (2 partitions) holds records. Group ``otr-live`` joins with a kafka-python
consumer and commits a sequence of offsets (each with its own metadata), then leaves. Group ``otr-gone``
joins, commits, leaves and is deleted (DeleteGroups). Group ``otr-expire`` commits with OffsetCommit v2
and an explicit 1 s retention, so its offset expires (``offsets.retention.check.interval.ms`` 300). Then:

- a kafka-python consumer assigned every ``__consumer_offsets`` partition, from the beginning, reads every
  record up to the end offsets ListOffsets gives, and each one decodes with the decoder below: key and value
  layouts transcribed from Kafka 3.9's ``group-coordinator/src/main/resources/common/message/
  {OffsetCommitKey,OffsetCommitValue,GroupMetadataKey,GroupMetadataValue}.json`` (not from our records.py:
  decoding with our own code would prove nothing). Every byte is consumed; versions are the ones #27 asks
  for (OffsetCommitKey v1, OffsetCommitValue v3, or v1 with an expire timestamp; GroupMetadataKey v2,
  GroupMetadataValue v3). The test's commits are found in commit order, each with its offset and metadata;
  ``otr-gone`` has a GroupMetadataKey tombstone and an OffsetCommitKey tombstone per committed partition
  after its commits; ``otr-expire`` has a v1 value then an OffsetCommitKey tombstone.
- confluent-kafka (librdkafka, Fetch v16 with topic ids) reads the same records, the librdkafka guard
  failing the test on any protocol parse error; kcat reads the same offsets.
- Producing to it is refused with INVALID_TOPIC_EXCEPTION, as Kafka does.
- ListOffsets on it: earliest, latest, by time (kafka-python's ``offsets_for_times``) and max timestamp (-3)
  find the commits' records, which are durable in the journal but not yet in the log's own fsynced part.
- A fetch caught up with an offsets partition, long-polling, is answered by the next commit there.
"""

from __future__ import annotations

import itertools
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata
from server_process import ServerProcess, read_frame  # type: ignore[import-not-found]

from protocol import codec

OFFSETS = "__consumer_offsets"
PARTS = 50
TOPIC = "otr-a"
_corr = itertools.count(1)


# ---------------------------------------------------------------- Kafka's schemas, transcribed
# (name, type, versions) in declaration order; versions as in the JSON ("0+", "3+", "1", "0-1", "2").
OFFSET_COMMIT_KEY = [("group", "string", "0-1"), ("topic", "string", "0-1"), ("partition", "int32", "0-1")]
GROUP_METADATA_KEY = [("group", "string", "2")]
OFFSET_COMMIT_VALUE = [("offset", "int64", "0+"), ("leaderEpoch", "int32", "3+"), ("metadata", "string", "0+"),
                       ("commitTimestamp", "int64", "0+"), ("expireTimestamp", "int64", "1")]
MEMBER_METADATA = [("memberId", "string", "0+"), ("groupInstanceId", "nullable_string", "3+"),
                   ("clientId", "string", "0+"), ("clientHost", "string", "0+"),
                   ("rebalanceTimeout", "int32", "1+"), ("sessionTimeout", "int32", "0+"),
                   ("subscription", "bytes", "0+"), ("assignment", "bytes", "0+")]
GROUP_METADATA_VALUE = [("protocolType", "string", "0+"), ("generation", "int32", "0+"),
                        ("protocol", "nullable_string", "0+"), ("leader", "nullable_string", "0+"),
                        ("currentStateTimestamp", "int64", "2+"), ("members", MEMBER_METADATA, "0+")]
# the versions before the first flexible one (4): plain int16/int32 lengths, no tagged fields
VALUE_VERSIONS = {"offset": range(0, 4), "group": range(0, 4)}


def _in(version: int, spec: str) -> bool:
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    lo, _, hi = spec.partition("-")
    return int(lo) <= version <= int(hi or lo)


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        assert n >= 0 and self.pos + n <= len(self.data), f"truncated at {self.pos} of {self.data!r}"
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def read(self, typ: Any) -> Any:
        if isinstance(typ, list):
            return [self.struct(typ, self.version) for _ in range(self.read("int32"))]
        if typ in ("int16", "int32", "int64"):
            fmt = {"int16": ">h", "int32": ">i", "int64": ">q"}[typ]
            return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
        if typ in ("string", "nullable_string"):
            n = self.read("int16")
            if n == -1:
                assert typ == "nullable_string", "null in a non-nullable string"
                return None
            return self.take(n).decode()
        if typ == "bytes":
            return self.take(self.read("int32"))
        raise AssertionError(typ)

    def struct(self, fields: list, version: int) -> dict[str, Any]:
        self.version = version
        return {name: self.read(typ) for name, typ, spec in fields if _in(version, spec)}

    def done(self) -> None:
        assert self.pos == len(self.data), f"{len(self.data) - self.pos} trailing bytes"


HISTORY_KEY_VERSION = 1000  # coordinator/core/rebalance_history.py (ours)
OFFSET_HISTORY_KEY_VERSION = 1002  # coordinator/core/offset_history.py (ours)
ONE_RECORD_PER_COMMIT = frozenset(("test_list_offsets_on_offsets_topic",
                                   "test_a_waiting_fetch_wakes_when_a_commit_is_durable"))


def decode(key: bytes, value: bytes | None) -> tuple[str, int, dict, int | None, dict | None]:
    """(kind, key version, key fields, value version, value fields); value None for a tombstone."""
    r = Reader(key)
    kv = r.read("int16")
    assert kv in (0, 1, 2), f"unknown key version {kv}"
    kind, key_fields = ("offset", OFFSET_COMMIT_KEY) if kv in (0, 1) else ("group", GROUP_METADATA_KEY)
    k = r.struct(key_fields, kv)
    r.done()
    if value is None:
        return kind, kv, k, None, None
    r = Reader(value)
    vv = r.read("int16")
    assert vv in VALUE_VERSIONS[kind], f"{kind} value version {vv}"
    v = r.struct(OFFSET_COMMIT_VALUE if kind == "offset" else GROUP_METADATA_VALUE, vv)
    r.done()
    return kind, kv, k, vv, v


# ---------------------------------------------------------------- the story

@pytest.fixture
def srv(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    # tests that count one commit's records run without our offset history records (key version 1002)
    plain = ("--offsets-history-size", "0") if request.node.name in ONE_RECORD_PER_COMMIT else ()
    s = ServerProcess(tmp_path / "data", "--group-min-session-timeout-ms", "1000",
                      "--group-initial-rebalance-delay-ms", "0", "--offsets-retention-check-interval-ms", "300",
                      *plain).start()
    try:
        yield s
    finally:
        s.stop()
        print(s.log()[-20000:])


def _join(bootstrap: str, group: str) -> tuple[KafkaConsumer, list[TopicPartition]]:
    c = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                      session_timeout_ms=6000, heartbeat_interval_ms=500, auto_offset_reset="earliest")
    for _ in range(60):  # bounded: ~30 s
        c.poll(500)
        if len(c.assignment()) == 2:
            return c, sorted(c.assignment(), key=lambda tp: tp.partition)
    c.close()
    raise AssertionError(f"{group} was never assigned both partitions")


def _commit_v2_with_retention(port: int, group: str, offset: int, retention_ms: int) -> None:
    """OffsetCommit v2 (generation -1, no member: a simple group) with an explicit retention, our codec."""
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "retention_time_ms": retention_ms,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                      "committed_metadata": "exp"}]}]}
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(codec.encode_request(8, 2, next(_corr), "otr", body))
        payload = read_frame(s)
    assert payload is not None
    _, resp = codec.decode_response(8, 2, payload)
    assert resp["topics"][0]["partitions"][0]["error_code"] == 0, resp


def _read_all(bootstrap: str, until: Any = None, seconds: float = 30.0) -> list[tuple[int, int, bytes, bytes | None]]:
    """Every record of every offsets partition, from the beginning to the end offsets (and, with ``until``,
    on until ``until(records)`` holds), read by kafka-python: (partition, offset, key, value)."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tps = [TopicPartition(OFFSETS, p) for p in range(PARTS)]
        c.assign(tps)
        c.seek_to_beginning()
        ends = c.end_offsets(tps)
        out: list[tuple[int, int, bytes, bytes | None]] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for tp, recs in c.poll(200).items():
                out.extend((tp.partition, m.offset, m.key, m.value) for m in recs)
            if all(c.position(tp) >= ends[tp] for tp in tps) and (until is None or until(out)):
                return out
        raise AssertionError(f"not read in {seconds} s: {len(out)} records; ends {ends}")
    finally:
        c.close()


@pytest.mark.compat
def test_offsets_topic_is_readable_in_kafkas_layout(srv: ServerProcess) -> None:
    bs = srv.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bs)
    admin.create_topics([NewTopic(TOPIC, 2, 1)])
    producer = KafkaProducer(bootstrap_servers=bs)
    for i in range(20):
        producer.send(TOPIC, b"r%d" % i, partition=i % 2)
    producer.flush()
    producer.close()

    live, (p0, p1) = _join(bs, "otr-live")
    made = [(p0, 1, "c1"), (p0, 2, "c2"), (p1, 3, "c3"), (p0, 5, "c4"), (p1, 7, "c5")]
    for tp, off, meta in made:
        live.commit({tp: OffsetAndMetadata(off, meta, -1)})
    live.close()

    gone, (g0, g1) = _join(bs, "otr-gone")
    gone.commit({g0: OffsetAndMetadata(4, "g", -1), g1: OffsetAndMetadata(6, "g", -1)})
    gone.close()
    assert admin.delete_groups(["otr-gone"]) == {"otr-gone": "OK"}
    admin.close()

    _commit_v2_with_retention(srv.port, "otr-expire", 9, 1000)

    def kafkas(records: list) -> list:
        """The records of Kafka's types: our rebalance history records (key version 1000, ``group.history.size``)
        and offset history records (1002, ``offsets.history.size``) are left out, as Kafka's readers skip key
        versions they do not know."""
        return [r for r in records
                if int.from_bytes(r[2][:2], "big", signed=True) not in (HISTORY_KEY_VERSION, OFFSET_HISTORY_KEY_VERSION)]

    def expired(records: list) -> bool:
        return any(v is None and decode(k, v)[2].get("group") == "otr-expire" for _, _, k, v in kafkas(records))

    everything = _read_all(bs, until=expired)
    records = kafkas(everything)
    assert len(records) < len(everything)  # the live group's rebalances were recorded (and skipped here)
    decoded = [(p, o, *decode(k, v)) for p, o, k, v in records]  # every record decodes with Kafka's schemas

    def of(group: str) -> list[tuple]:
        return [d for d in decoded if d[4]["group"] == group]

    # each group's records live on one partition, in offset order = commit order
    for group in ("otr-live", "otr-gone", "otr-expire"):
        rows = of(group)
        assert len({r[0] for r in rows}) == 1, (group, rows)
        assert [r[1] for r in rows] == sorted(r[1] for r in rows)

    commits = [(r[4]["topic"], r[4]["partition"], r[6]["offset"], r[6]["metadata"])
               for r in of("otr-live") if r[2] == "offset" and r[6] is not None]
    assert commits == [(TOPIC, tp.partition, off, meta) for tp, off, meta in made]
    assert {r[3] for r in of("otr-live") if r[2] == "offset"} == {1}  # OffsetCommitKey v1
    assert {r[5] for r in of("otr-live") if r[2] == "offset"} == {3}  # OffsetCommitValue v3
    groups = [r for r in of("otr-live") if r[2] == "group"]
    assert groups and {(r[3], r[5]) for r in groups} == {(2, 3)}  # GroupMetadataKey v2, GroupMetadataValue v3
    stable = [r[6] for r in groups if r[6]["members"]]
    assert stable and stable[0]["protocolType"] == "consumer" and stable[0]["generation"] >= 1
    assert groups[-1][6]["members"] == []  # the last record: it left, Empty

    gone_rows = of("otr-gone")
    last_commit = max(i for i, r in enumerate(gone_rows) if r[2] == "offset" and r[6] is not None)
    tombstones = [(r[2], r[4].get("topic"), r[4].get("partition")) for r in gone_rows[last_commit + 1:]
                  if r[6] is None]
    assert sorted(tombstones, key=str) == sorted([("group", None, None), ("offset", TOPIC, 0),
                                                  ("offset", TOPIC, 1)], key=str)

    exp = of("otr-expire")
    assert exp[0][2] == "offset" and exp[0][5] == 1  # an explicit retention: OffsetCommitValue v1
    assert exp[0][6]["expireTimestamp"] == exp[0][6]["commitTimestamp"] + 1000
    assert exp[-1][2] == "offset" and exp[-1][6] is None  # then its expiry's tombstone

    # confluent-kafka (Fetch v16, topic ids) reads the very same records, without a protocol error
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP

    c = Consumer({"bootstrap.servers": bs, "group.id": "otr-reader", "enable.auto.commit": False})
    try:
        c.assign([CTP(OFFSETS, p, -2) for p in range(PARTS)])
        seen: list[tuple[int, int, bytes, bytes | None]] = []
        deadline = time.monotonic() + 30
        while len(seen) < len(everything) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                seen.append((m.partition(), m.offset(), m.key(), m.value()))
    finally:
        c.close()
    assert sorted(seen, key=lambda r: r[:2]) == sorted(everything, key=lambda r: r[:2])

    # kcat: the same partitions and offsets
    out = subprocess.run(["kcat", "-b", bs, "-C", "-t", OFFSETS, "-e", "-q", "-f", "%p %o\n"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    got = sorted(tuple(int(x) for x in line.split()) for line in out.stdout.splitlines() if line.strip())
    assert got == sorted((p, o) for p, o, _, _ in everything)


@pytest.mark.compat
def test_producing_to_offsets_topic_is_refused(srv: ServerProcess) -> None:
    """Kafka: INVALID_TOPIC_EXCEPTION ("Cannot append to internal topic"), nothing appended."""
    batch_client = KafkaConsumer(bootstrap_servers=srv.bootstrap, group_id=None)
    tp = TopicPartition(OFFSETS, 0)
    before = batch_client.end_offsets([tp])[tp]
    from kafka.record.memory_records import MemoryRecordsBuilder

    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    b.append(timestamp=int(time.time() * 1000), key=b"k", value=b"v", headers=[])
    b.close()
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": OFFSETS, "partition_data": [{"index": 0, "records": b.buffer()}]}]}
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(codec.encode_request(0, 9, next(_corr), "otr", body))
        payload = read_frame(s)
    assert payload is not None
    _, resp = codec.decode_response(0, 9, payload)
    part = resp["responses"][0]["partition_responses"][0]
    assert part["error_code"] == 17, part  # INVALID_TOPIC_EXCEPTION
    assert batch_client.end_offsets([tp])[tp] == before
    batch_client.close()


@pytest.mark.compat
def test_list_offsets_on_offsets_topic(srv: ServerProcess) -> None:
    """Earliest, latest, by time and max timestamp (-3) on an offsets partition, as kafka-python asks them
    (ListOffsets v9 here). The commits are durable (acknowledged) but still ahead of the log's own fsync
    (the journal holds them: recovery point < high watermark), which the by-time lookups must see."""
    bs = srv.bootstrap
    c = KafkaConsumer(bootstrap_servers=bs, group_id="otr-times", enable_auto_commit=False)
    tp = TopicPartition(TOPIC, 0)
    stamps = []
    for off in (1, 2, 3):
        stamps.append(int(time.time() * 1000))
        c.commit({tp: OffsetAndMetadata(off, "", -1)})
        time.sleep(0.02)
    c.close()
    records = _read_all(bs)
    mine = [(p, o) for p, o, k, _ in records if decode(k, None)[2].get("group") == "otr-times"]
    assert len(mine) == 3
    part = mine[0][0]
    otp = TopicPartition(OFFSETS, part)
    r = KafkaConsumer(bootstrap_servers=bs, group_id=None)
    try:
        assert r.beginning_offsets([otp])[otp] == 0
        assert r.end_offsets([otp])[otp] == mine[-1][1] + 1
        for stamp, (_, offset) in zip(stamps, mine, strict=True):
            found = r.offsets_for_times({otp: stamp})[otp]
            assert found is not None and found.offset == offset, (stamp, found, mine)
        assert r.offsets_for_times({otp: int(time.time() * 1000) + 60_000})[otp] is None  # none that late
    finally:
        r.close()
    body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": OFFSETS, "partitions": [
        {"partition_index": part, "current_leader_epoch": -1, "timestamp": -3}]}]}
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(codec.encode_request(2, 7, next(_corr), "otr", body))
        payload = read_frame(s)
    assert payload is not None
    answer = codec.decode_response(2, 7, payload)[1]["topics"][0]["partitions"][0]
    assert (answer["error_code"], answer["offset"]) == (0, mine[-1][1])  # the newest commit's record


@pytest.mark.compat
def test_a_waiting_fetch_wakes_when_a_commit_is_durable(srv: ServerProcess) -> None:
    """A consumer caught up with an offsets partition long-polls (max_wait 60 s); a commit to that partition
    answers it with the commit's record, long before max_wait: the socket's 30 s timeout would fail the test
    if only max_wait ended the wait (group commit does not wake fetchers; internal_topics' watcher does)."""
    from coordinator.core.sharding import partition_for

    group = "otr-wake"
    part = partition_for(group, PARTS)
    for _ in range(100):  # the offsets partitions' logs exist once they are loaded (bounded: 10 s)
        if "loaded 50 offsets partitions" in srv.log():
            break
        time.sleep(0.1)
    body = {"replica_id": -1, "max_wait_ms": 60_000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": OFFSETS, "partitions": [{"partition": part, "fetch_offset": 0,
                                                          "partition_max_bytes": 1 << 20}]}]}
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
        s.sendall(codec.encode_request(1, 12, next(_corr), "otr", body))
        time.sleep(0.5)  # lets the fetch start waiting first (an earlier commit would only make this trivial)
        c = KafkaConsumer(bootstrap_servers=srv.bootstrap, group_id=group, enable_auto_commit=False)
        c.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(42, "woken", -1)})
        c.close()
        payload = read_frame(s)
    assert payload is not None
    answer = codec.decode_response(1, 12, payload)[1]["responses"][0]["partitions"][0]
    assert answer["error_code"] == 0 and answer["high_watermark"] == 1
    assert b"woken" in bytes(answer["records"])
