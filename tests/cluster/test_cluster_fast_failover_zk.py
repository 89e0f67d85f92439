"""Fast failover's ZooKeeper write (ZkStore.remove_broker) against a real ZooKeeper: a peer's registration, and
/controller when the same session holds it, are deleted only while the session seen still owns them, so a
node registered again (a restart: another session) or already gone is never touched."""

from __future__ import annotations

import trio

from coordinator.cluster.state import BrokerInfo
from coordinator.cluster.zk import ZkStore

OP_TIMEOUT_S = 10.0


async def open_store(connect: str) -> ZkStore:
    zk = ZkStore(connect, 3000, OP_TIMEOUT_S)
    await zk.connect(15.0, lambda _state: None)
    return zk


async def test_remove_broker_deletes_only_the_session_it_saw(zk_connect: str) -> None:
    crashed, peer = await open_store(zk_connect), await open_store(zk_connect)
    restarted = None
    try:
        await crashed.register_broker(BrokerInfo(1, "127.0.0.1", 1))
        await peer.register_broker(BrokerInfo(2, "127.0.0.1", 2))
        assert await crashed.elect_controller(1) is not None
        snap = await peer.read_snapshot()
        seen = snap.broker_owners[1]
        assert seen == crashed.session_id() and snap.controller_owner == seen

        assert await peer.remove_broker(1, seen + 1) is None  # another session's: untouched
        assert await peer.remove_broker(1, seen) is True  # its registration and /controller, at once
        snap = await peer.read_snapshot()
        assert 1 not in snap.view.brokers and snap.view.controller_id == -1
        assert await peer.remove_broker(1, seen) is None  # gone already (another node was first)

        # node 1 restarted (a new session) and registered again: evidence about the old session removes nothing
        restarted = await open_store(zk_connect)
        await restarted.register_broker(BrokerInfo(1, "127.0.0.1", 3))
        assert await peer.remove_broker(1, seen) is None
        snap = await peer.read_snapshot()
        assert snap.broker_owners[1] == restarted.session_id()
        # the controller is another node's: only the registration goes
        assert await peer.elect_controller(2) is not None
        assert await peer.remove_broker(1, restarted.session_id()) is False
        snap = await peer.read_snapshot()
        assert 1 not in snap.view.brokers and snap.view.controller_id == 2
        # the old session is alive (a false positive): it can register again
        await crashed.register_broker(BrokerInfo(1, "127.0.0.1", 1))
        assert (await peer.read_snapshot()).broker_owners[1] == seen
    finally:
        with trio.CancelScope(shield=True):
            for zk in (crashed, peer, restarted):
                if zk is not None:
                    await zk.close()
