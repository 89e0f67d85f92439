"""Seed 000's first rebalance trigger: a topic gains partitions, the group leader sees it in its metadata,
rejoins, and the new partitions are assigned (CreatePartitions through kafka-python's admin client)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from client import AdminClient, Consumer


def test_new_partitions_reach_the_group_through_a_rebalance(broker: Any) -> None:
    from kafka.admin import KafkaAdminClient, NewPartitions

    topic, group = f"grow-{uuid.uuid4().hex[:6]}", "grow-group"
    with AdminClient(broker.bootstrap) as admin:
        assert admin.create_topics({topic: 2})[0].error_code == 0
    consumers = [Consumer(bootstrap_servers=broker.bootstrap, group_id=group, client_id=f"m{i}",
                          session_timeout_ms=3000, heartbeat_interval_ms=300, metadata_max_age_ms=500)
                 for i in range(2)]
    for c in consumers:
        c.subscribe([topic])
    stop = threading.Event()

    def poll(c: Consumer) -> None:
        while not stop.is_set():
            c.poll(100)

    threads = [threading.Thread(target=poll, args=(c,), daemon=True) for c in consumers]
    for t in threads:
        t.start()
    try:
        def owned() -> list[int]:
            return sorted(tp.partition for c in consumers for tp in c.assignment())

        deadline = time.monotonic() + 20
        while owned() != [0, 1] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert owned() == [0, 1]
        generation = consumers[0].generation().generation_id

        kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            kp.create_partitions({topic: NewPartitions(total_count=5)})
        finally:
            kp.close()
        deadline = time.monotonic() + 20
        while owned() != [0, 1, 2, 3, 4] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert owned() == [0, 1, 2, 3, 4], "every partition, old and new, has exactly one owner"
        assert consumers[0].generation().generation_id > generation, "the group rebalanced"
        with AdminClient(broker.bootstrap) as admin:
            assert admin.list_topics()[topic].partitions == 5
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        for c in consumers:
            c.close(timeout_ms=5000)
