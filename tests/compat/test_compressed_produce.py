"""Validation keeps every real client's valid batches (issue #23): confluent-kafka and kafka-python produce with
each codec they have; every batch is accepted and stored as sent (its codec kept, its records intact), as
the server now opens each compressed batch once to check its records. kcat and our Producer are covered by
tests/client/test_codecs_live.py."""

from __future__ import annotations

import pytest
from compat_support import call
from server_process import ServerProcess  # type: ignore[import-not-found]

from protocol.record_batch import decode_batch, split_batches

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def stored(port: int, topic: str) -> tuple[set[int], list[bytes]]:
    req = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 24, "isolation_level": 1,
           "session_id": 0, "session_epoch": -1,
           "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                      "partition_max_bytes": 1 << 24}]}]}
    part = call(port, 1, 11, req)["responses"][0]["partitions"][0]
    assert part["error_code"] == 0, part
    batches, _ = split_batches(part["records"])
    codecs, values = set(), []
    for b in batches:
        header, records = decode_batch(b)
        codecs.add(header.compression)
        values += [r.value for r in records]
    return codecs, values


@pytest.mark.compat
@pytest.mark.parametrize("codec", list(CODECS))
def test_confluent_batches_of_every_codec_are_accepted(server: ServerProcess, codec: str) -> None:
    from confluent_kafka import Producer

    topic = f"ck-{codec}"
    p = Producer({"bootstrap.servers": server.bootstrap, "compression.type": codec, "linger.ms": 20,
                  "acks": "all", "enable.idempotence": True})
    errors: list[str] = []
    for i in range(200):
        p.produce(topic, value=b"value %d " % i * 20, partition=0,
                  on_delivery=lambda err, msg: errors.append(str(err)) if err else None)
    assert p.flush(20) == 0
    assert errors == []
    codecs, values = stored(server.port, topic)
    assert CODECS[codec] in codecs and codecs <= {0, CODECS[codec]}, codecs
    assert values == [b"value %d " % i * 20 for i in range(200)]


@pytest.mark.compat
@pytest.mark.parametrize("codec", list(CODECS))
def test_kafka_python_batches_of_every_codec_are_accepted(server: ServerProcess, codec: str) -> None:
    from kafka import KafkaProducer

    topic = f"kp-{codec}"
    p = KafkaProducer(bootstrap_servers=server.bootstrap, compression_type=None if codec == "none" else codec,
                      linger_ms=20, acks="all")
    futures = [p.send(topic, b"value %d " % i * 20, partition=0) for i in range(200)]
    p.flush(20)
    assert [f.get(10).offset for f in futures] == list(range(200))
    p.close()
    codecs, values = stored(server.port, topic)
    assert codecs == {CODECS[codec]}, codecs
    assert values == [b"value %d " % i * 20 for i in range(200)]
