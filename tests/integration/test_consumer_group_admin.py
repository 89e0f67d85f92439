"""KIP-848 groups through confluent-kafka's AdminClient (librdkafka 2.16) on the real server: list_consumer_groups
shows the group with type CONSUMER and state STABLE (ListGroups v5), describe_consumer_groups describes it
(librdkafka takes ConsumerGroupDescribe for it: type CONSUMER, its member and the member's two partitions), and
after the member leaves the group is EMPTY and DeleteGroups deletes it. Every wait is bounded."""

from __future__ import annotations

import time
from pathlib import Path

from server_process import ServerProcess  # type: ignore[import-not-found]

TOPIC, GROUP = "admin848", "admin848-group"


def test_confluent_admin_lists_describes_and_deletes_a_consumer_protocol_group(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType
    from confluent_kafka.admin import AdminClient, NewTopic

    srv = ServerProcess(tmp_path / "data").start().wait_loaded()
    try:
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(10)
        c = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                      "auto.offset.reset": "earliest"})
        try:
            c.subscribe([TOPIC])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and len(c.assignment()) < 2:
                c.poll(0.2)
            assert len(c.assignment()) == 2

            listed = {g.group_id: g for g in admin.list_consumer_groups().result(20).valid}
            assert listed[GROUP].type == ConsumerGroupType.CONSUMER
            assert listed[GROUP].state == ConsumerGroupState.STABLE
            d = admin.describe_consumer_groups([GROUP])[GROUP].result(20)
            assert d.type == ConsumerGroupType.CONSUMER and d.state == ConsumerGroupState.STABLE
            (member,) = d.members
            assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1]
        finally:
            c.close()  # leaves the group (member epoch -1)

        deadline = time.monotonic() + 20
        state = None
        while time.monotonic() < deadline:
            state = admin.describe_consumer_groups([GROUP])[GROUP].result(20).state
            if state == ConsumerGroupState.EMPTY:
                break
            time.sleep(0.2)
        assert state == ConsumerGroupState.EMPTY
        assert admin.delete_consumer_groups([GROUP])[GROUP].result(20) is None
        assert GROUP not in {g.group_id for g in admin.list_consumer_groups().result(20).valid}
    finally:
        srv.stop()
