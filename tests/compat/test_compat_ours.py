"""Our own Producer and Consumer tell the same story as the third-party clients: a group of three, one
SIGKILLed mid-way, every record consumed, committed offsets equal to the log end; and the same in one group
with kafka-python consumers (both sides use the "range" assignor, so the group shares one protocol)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from compat_support import PARTITIONS, Member, assert_scenario, keys, run_group_scenario
from server_process import ServerProcess  # type: ignore[import-not-found]

from client import AdminClient, Producer

WORKER = str(Path(__file__).with_name("compat_consumer_worker.py"))


def _create(bootstrap: str, topic: str) -> None:
    with AdminClient(bootstrap) as admin:
        assert admin.create_topics({topic: PARTITIONS})[0].error_code == 0


def _produce(bootstrap: str, topic: str, lo: int, hi: int) -> None:
    with Producer(bootstrap, acks="all", compression_type="gzip", linger_ms=5) as producer:
        futures = [producer.send(topic, f"value of {k}".encode(), key=k.encode()) for k in keys(lo, hi)]
        producer.flush(30)
        assert all(f.get(30).offset >= 0 for f in futures)


def _member(kind: str, i: int, bootstrap: str, topic: str, group: str) -> Member:
    return Member(f"{kind}-{i}", [sys.executable, WORKER, kind, bootstrap, topic, group])


@pytest.mark.compat
def test_our_client_group_survives_a_killed_member(server: ServerProcess) -> None:
    _create(server.bootstrap, "ours-topic")
    members = [_member("ours", i, server.bootstrap, "ours-topic", "ours-group") for i in range(3)]
    out = run_group_scenario(server.port, "ours-topic", "ours-group",
                             lambda lo, hi: _produce(server.bootstrap, "ours-topic", lo, hi), members, server.log)
    assert_scenario(out)


@pytest.mark.compat
def test_our_client_and_kafka_python_in_one_group(server: ServerProcess) -> None:
    _create(server.bootstrap, "mixed-topic")
    members = [_member("ours", 0, server.bootstrap, "mixed-topic", "mixed-group"),
               _member("kafka-python", 1, server.bootstrap, "mixed-topic", "mixed-group"),
               _member("ours", 2, server.bootstrap, "mixed-topic", "mixed-group")]
    out = run_group_scenario(server.port, "mixed-topic", "mixed-group",
                             lambda lo, hi: _produce(server.bootstrap, "mixed-topic", lo, hi), members, server.log)
    assert_scenario(out)
    assert len(members[1].records) >= 1, "the kafka-python member took part"
