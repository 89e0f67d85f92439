"""ZkStore against a real ZooKeeper: the controller epoch is bumped by a version-checked transaction, only one
node holds /controller, and a deposed controller's partition-state writes are refused (fenced)."""

from __future__ import annotations

import trio

from coordinator.cluster.state import BrokerInfo, PartitionState
from coordinator.cluster.zk import ZkStore

OP_TIMEOUT_S = 10.0


async def open_store(connect: str) -> ZkStore:
    zk = ZkStore(connect, 3000, OP_TIMEOUT_S)
    await zk.connect(15.0, lambda _state: None)
    return zk


async def test_epoch_bumps_and_a_deposed_controller_is_fenced(zk_connect: str) -> None:
    a, b = await open_store(zk_connect), await open_store(zk_connect)
    try:
        await a.register_broker(BrokerInfo(1, "127.0.0.1", 1))
        await b.register_broker(BrokerInfo(2, "127.0.0.1", 2))
        won_a = await a.elect_controller(1)
        assert won_a is not None
        epoch_a, version_a = won_a
        assert await b.elect_controller(2) is None  # /controller is held
        assert await a.create_topic("t", {0: (1, 2)})
        assert not await a.create_topic("t", {0: (2, 1)})  # already there: not overwritten
        snap = await a.read_snapshot()
        assert snap.view.controller_id == 1 and snap.view.controller_epoch == epoch_a
        assert sorted(snap.view.brokers) == [1, 2] and snap.view.assignments == {"t": {0: (1, 2)}}
        written, fenced = await a.write_states({("t", 0): PartitionState(1, 0, (1, 2), epoch_a)},
                                               snap.state_versions, version_a)
        assert (written, fenced) == (1, False)

        await a.close()  # a's session ends: /controller and /brokers/ids/1 go at once
        won_b = await b.elect_controller(2)
        assert won_b is not None
        epoch_b, version_b = won_b
        assert epoch_b == epoch_a + 1

        # a new session for node 1 still believes in its old term: its write is refused on the epoch check
        stale = await open_store(zk_connect)
        try:
            snap = await stale.read_snapshot()
            written, fenced = await stale.write_states({("t", 0): PartitionState(2, 1, (2,), epoch_a)},
                                                       snap.state_versions, version_a)
            assert (written, fenced) == (0, True)
        finally:
            await stale.close()
        snap = await b.read_snapshot()
        assert snap.view.states[("t", 0)] == PartitionState(1, 0, (1, 2), epoch_a)  # unchanged
        assert snap.view.controller_id == 2 and snap.view.brokers.keys() == {2}
        written, fenced = await b.write_states({("t", 0): PartitionState(2, 1, (2,), epoch_b)},
                                               snap.state_versions, version_b)
        assert (written, fenced) == (1, False)
        # and an update at a stale state version is refused without fencing the controller
        written, fenced = await b.write_states({("t", 0): PartitionState(2, 2, (2,), epoch_b)},
                                               snap.state_versions, version_b)
        assert (written, fenced) == (0, False)
    finally:
        with trio.CancelScope(shield=True):
            await a.close()
            await b.close()
