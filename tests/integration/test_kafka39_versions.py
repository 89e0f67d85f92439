"""Every API we serve covers Kafka 3.9's version range; ApiVersions advertises exactly what we serve (#27).

The story:
- ``KAFKA_39`` is each API's ``validVersions`` in Kafka 3.9's ``clients/src/main/resources/common/message``
  JSON (tag 3.9.0, transcribed). For every API we serve, our range (``protocol.messages``) covers it, except
  Produce and Fetch v0-3, which need the pre-2017 message formats (magic 0/1) that we never serve.
- ApiVersions, sent and parsed with kafka-python's own classes, lists exactly our schemas' ranges: every API
  of Kafka 3.9's we serve, none we have no schema for, each with our schema's minimum and maximum.
- The versions this issue added are each sent as a valid request built with kafka-python's classes
  (``kafka.protocol``; it has every one of them) and parsed with its response class, over TCP to the real
  server: Produce v11 appends; Fetch v13-17 read the topic by its id (from Metadata v12) and get the
  records, also ``__consumer_offsets`` by its id, and v15+ carry ``replica_state``; an id no topic has gets
  UNKNOWN_TOPIC_ID (100); ListOffsets v8 and v9 answer latest/earliest as before, -4 (earliest local) with
  the log start and -5 (latest tiered) with offset -1 and leader epoch -1, as Kafka does without tiered
  storage; InitProducerId v5 hands out a producer id.
"""

from __future__ import annotations

import itertools
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse
from kafka.record.memory_records import MemoryRecordsBuilder
from server_process import ServerProcess, read_frame  # type: ignore[import-not-found]

from protocol.messages import ALL

# validVersions of Kafka 3.9.0's request JSON files, for the APIs we serve
KAFKA_39 = {
    0: "0-11", 1: "0-17", 2: "0-9", 3: "0-12", 8: "0-9", 9: "0-9", 10: "0-6", 11: "0-9", 12: "0-4", 13: "0-5",
    14: "0-5", 15: "0-5", 16: "0-5", 18: "0-4", 19: "0-7", 20: "0-6", 22: "0-5", 32: "0-4", 33: "0-2",
    37: "0-3", 42: "0-2", 44: "0-1", 47: "0",
}
# Kafka 3.9 serves these versions with the pre-2017 message formats only: we never serve them
OLD_FORMATS = {1: range(0, 4)}  # Produce v0-2 are advertised (kcat needs v0 listed) and refused per partition

TOPIC = "v39-t"
_corr = itertools.count(1)


def _range(spec: str) -> range:
    lo, _, hi = spec.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def kp(port: int, request: Any, response_cls: type, version: int) -> Any:
    """One request built by kafka-python's class, answered by the server, parsed by kafka-python's class."""
    corr = next(_corr)
    request.with_header(correlation_id=corr, client_id="v39")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request.encode(version=version, header=True, framed=True))
        payload = read_frame(s)
    assert payload is not None, f"connection closed on {type(request).__name__} v{version}"
    assert struct.unpack_from(">i", payload)[0] == corr
    return response_cls[version].decode(payload, header=True)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp_path_factory.mktemp("v39") / "data", "--group-initial-rebalance-delay-ms", "0",
                      "--num-partitions", "1").start()
    try:
        yield s
    finally:
        s.stop()


def test_our_ranges_cover_kafka_39() -> None:
    for key, spec in KAFKA_39.items():
        assert key in ALL, f"api {key} is not served"
        ours = range(ALL[key].min_version, ALL[key].max_version + 1)
        missing = [v for v in _range(spec) if v not in ours and v not in OLD_FORMATS.get(key, ())]
        assert not missing, f"{ALL[key].name}: Kafka 3.9 serves {spec}, we lack {missing}"


def test_api_versions_advertises_exactly_what_we_serve(srv: ServerProcess) -> None:
    for version in range(0, 5):
        resp = kp(srv.port, ApiVersionsRequest[version](client_software_name="v39", client_software_version="1"),
                  ApiVersionsResponse, version)
        assert resp.error_code == 0
        advertised = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert set(KAFKA_39) <= set(advertised) <= set(ALL)  # (ALL may hold an API whose handler is not in yet)
        assert advertised == {key: (ALL[key].min_version, ALL[key].max_version) for key in advertised}


def _records(*values: bytes) -> bytes:
    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for v in values:
        b.append(timestamp=int(time.time() * 1000), key=None, value=v, headers=[])
    b.close()
    return bytes(b.buffer())


def _metadata(port: int, names: list[str]) -> Any:
    return kp(port, MetadataRequest[12](topics=[MetadataRequest[12].MetadataRequestTopic(name=n) for n in names],
                                        allow_auto_topic_creation=True), MetadataResponse, 12)


def _topic_ids(port: int, names: list[str]) -> dict[str, uuid.UUID]:
    resp = _metadata(port, names)
    out = {t.name: t.topic_id for t in resp.topics if t.error_code == 0}
    assert set(out) == set(names), resp
    return out


def test_new_versions_round_trip(srv: ServerProcess) -> None:
    port = srv.port
    created = _metadata(port, [TOPIC])  # auto-creates it: LEADER_NOT_AVAILABLE, listed from the next Metadata on
    assert [(t.name, t.error_code, t.partitions) for t in created.topics] == [(TOPIC, 5, [])], created
    _topic_ids(port, [TOPIC])
    # Produce v11
    P = ProduceRequest[11]
    resp = kp(port, P(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name=TOPIC, partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=_records(b"a", b"b"))])]),
        ProduceResponse, 11)
    part = resp.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset) == (0, 0)
    ids = _topic_ids(port, [TOPIC, "__consumer_offsets"])

    # Fetch v13-17, by topic id
    for version in range(13, 18):
        F = FetchRequest[version]
        extra = {"replica_state": F.ReplicaState(replica_id=-1, replica_epoch=-1)} if version >= 15 else {}
        req = F(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                topics=[F.FetchTopic(topic_id=tid, partitions=[F.FetchTopic.FetchPartition(
                    partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])
                    for tid in (ids[TOPIC], ids["__consumer_offsets"], uuid.UUID(int=7))],
                forgotten_topics_data=[], rack_id="", **extra)
        resp = kp(port, req, FetchResponse, version)
        assert resp.error_code == 0
        by_id = {t.topic_id: t.partitions[0] for t in resp.responses}
        assert by_id[ids[TOPIC]].error_code == 0 and by_id[ids[TOPIC]].high_watermark == 2, (version, resp)
        assert b"a" in bytes(by_id[ids[TOPIC]].records) and b"b" in bytes(by_id[ids[TOPIC]].records)
        assert by_id[ids["__consumer_offsets"]].error_code == 0  # internal, readable
        assert by_id[uuid.UUID(int=7)].error_code == 100, version  # UNKNOWN_TOPIC_ID

    # ListOffsets v8, v9
    for version in (8, 9):
        L = ListOffsetsRequest[version]
        asked = [-1, -2, -4] + ([-5] if version >= 9 else [])
        req = L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name=TOPIC, partitions=[
            L.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=ts)
            for ts in asked])])
        resp = kp(port, req, ListOffsetsResponse, version)
        got = [(p.error_code, p.offset, p.leader_epoch) for p in resp.topics[0].partitions]
        want = [(0, 2, 0), (0, 0, 0), (0, 0, 0)] + ([(0, -1, -1)] if version >= 9 else [])
        assert got == want, (version, resp)

    # InitProducerId v5
    resp = kp(port, InitProducerIdRequest[5](transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                                             producer_epoch=-1), InitProducerIdResponse, 5)
    assert resp.error_code == 0 and resp.producer_id >= 0
