"""User topics' znodes against a real ZooKeeper: assignment and config created together (Kafka's layout),
an existing topic never overwritten, deletion requested under /admin/delete_topics and carried out by the
controller in one transaction fenced by the controller epoch."""

from __future__ import annotations

import json

import pytest
import trio
from kazoo.client import KazooClient

from coordinator.cluster.state import (
    PartitionState,
    decode_topic_config,
    encode_topic_config,
)
from coordinator.cluster.zk import ZkStore

OP_TIMEOUT_S = 10.0


def test_topic_config_codec_is_kafkas_config_entity_znode() -> None:
    data = encode_topic_config({"retention.ms": "1000", "cleanup.policy": "compact"})
    assert json.loads(data) == {"version": 1, "config": {"cleanup.policy": "compact", "retention.ms": "1000"}}
    assert decode_topic_config("t", data) == {"cleanup.policy": "compact", "retention.ms": "1000"}
    for bad in (b"[]", b'{"config": {"a": 1}}', b'{"version": 1}', b"\xff"):
        with pytest.raises(ValueError):
            decode_topic_config("t", bad)


async def test_create_then_fenced_delete(zk_connect: str) -> None:
    a = ZkStore(zk_connect, 3000, OP_TIMEOUT_S)
    await a.connect(15.0, lambda _state: None)
    try:
        won = await a.elect_controller(1)
        assert won is not None
        epoch, version = won
        assert await a.create_user_topic("t", {0: (1, 2), 1: (2, 1)}, {"retention.ms": "5"})
        assert not await a.create_user_topic("t", {0: (2,)}, {})  # exists: untouched
        assert await a.topic_config("t") == {"retention.ms": "5"}
        snap = await a.read_snapshot()
        assert snap.view.assignments == {"t": {0: (1, 2), 1: (2, 1)}} and snap.deleting == set()
        written, _ = await a.write_states({("t", 0): PartitionState(1, 0, (1, 2), epoch)}, snap.state_versions,
                                          version)
        assert written == 1

        await a.mark_for_deletion("t")
        await a.mark_for_deletion("t")  # twice: fine
        assert (await a.read_snapshot()).deleting == {"t"}
        # a stale controller epoch version deletes nothing and reports the fencing
        assert await a.delete_topic("t", version - 1) == (False, True)
        assert "t" in (await a.read_snapshot()).view.assignments
        assert await a.delete_topic("t", version) == (True, False)
        snap = await a.read_snapshot()
        assert snap.view.assignments == {} and snap.deleting == set() and await a.topic_config("t") == {}
        hosts, chroot = zk_connect.split("/", 1)
        kz = KazooClient(hosts=hosts, timeout=10)
        await trio.to_thread.run_sync(kz.start, 10)
        try:
            assert not kz.exists(f"/{chroot}/brokers/topics/t") and not kz.exists(f"/{chroot}/config/topics/t")
        finally:
            kz.stop()
            kz.close()
        assert await a.create_user_topic("t", {0: (1,)}, {})  # the name is free again
    finally:
        with trio.CancelScope(shield=True):
            await a.close()
