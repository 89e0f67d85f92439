"""KIP-848 session expiry through the runtime: a consumer-protocol member whose process is SIGKILLed (no leave)
is fenced at group.consumer.session.timeout.ms and its partitions go to the member left, as Kafka's
consumerGroupFenceMember does. confluent-kafka consumers with group.protocol=consumer against a real server
whose consumer session timeout is lowered to 3 s (its bounds lowered with it); the victim runs in a child
process that prints its assignment. Every wait is bounded.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from server_process import ServerProcess  # type: ignore[import-not-found]

pytestmark = pytest.mark.serial  # the session clock: a busy CPU must not delay the survivor's heartbeats

TOPIC = "crash848"
GROUP = "crash848-group"
SESSION_MS = 3000

CHILD = textwrap.dedent("""
    import sys
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([sys.argv[3]])
    last = None
    while True:
        c.poll(0.2)
        now = sorted(tp.partition for tp in c.assignment())
        if now != last:
            print("ASSIGNED", ",".join(map(str, now)), flush=True)
            last = now
""")


def _partitions(consumer: Any) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def test_a_killed_member_is_fenced_at_its_session_timeout_and_its_partitions_move(tmp_path: Path) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic

    srv = ServerProcess(tmp_path / "data", "--group-consumer-min-session-timeout-ms", "1000",
                        "--group-consumer-session-timeout-ms", str(SESSION_MS),
                        "--group-consumer-min-heartbeat-interval-ms", "500",
                        "--group-consumer-heartbeat-interval-ms", "500").start().wait_loaded()
    child: subprocess.Popen[str] | None = None
    survivor = None
    try:
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 4, 1)])[TOPIC].result(10)
        child = subprocess.Popen([sys.executable, "-c", CHILD, srv.bootstrap, GROUP, TOPIC], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
        assert child.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the child holds all 4
            line = child.stdout.readline()
            if line.startswith("ASSIGNED 0,1,2,3"):
                break
        else:
            pytest.fail("the child consumer never held the 4 partitions")

        survivor = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        survivor.subscribe([TOPIC])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(_partitions(survivor)) != 2:
            survivor.poll(0.2)
        assert len(_partitions(survivor)) == 2, _partitions(survivor)

        child.kill()  # SIGKILL: no leave heartbeat
        child.wait(10)
        killed_at = time.monotonic()
        while time.monotonic() < killed_at + 30 and _partitions(survivor) != {0, 1, 2, 3}:
            survivor.poll(0.2)
        took = time.monotonic() - killed_at
        assert _partitions(survivor) == {0, 1, 2, 3}, _partitions(survivor)
        # fenced by its session, not before (the partitions it held moved only once it expired)
        assert took >= SESSION_MS / 1000 * 0.8, took
    finally:
        if survivor is not None:
            survivor.close()
        if child is not None and child.poll() is None:
            child.kill()
            child.wait(10)
        srv.stop()
