"""Hot-path answers on a connection, over an in-memory stream: they leave in request order (behind a
request still pending ahead of them, straight out otherwise), and the metrics count each hot request
under its own API, however the APIs mix within one read."""

from __future__ import annotations

import struct

import trio
import trio.testing
from holding_broker import HoldingBroker

from coordinator.runtime.connection import Connection
from protocol import codec

HEARTBEAT, LIST_GROUPS, API_VERSIONS = 12, 16, 18


def hot_answer(payload: bytes) -> bytes:
    """A hot handler's whole frame: size 4, the request's correlation id (enough to check the order)."""
    return struct.pack(">i", 4) + payload[4:8]


def hot_broker() -> HoldingBroker:
    """Heartbeat and ListGroups answered hot; anything else (ApiVersions) held until ``answer_all``."""
    return HoldingBroker(hot={HEARTBEAT: hot_answer, LIST_GROUPS: hot_answer})


def request(api_key: int, correlation_id: int) -> bytes:
    if api_key == HEARTBEAT:
        return codec.encode_request(HEARTBEAT, 4, correlation_id, "t", {
            "group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None})
    if api_key == LIST_GROUPS:
        return codec.encode_request(LIST_GROUPS, 4, correlation_id, "t", {"states_filter": []})
    return codec.encode_request(API_VERSIONS, 0, correlation_id, "t", {})


async def read_correlation_ids(stream, count: int) -> list[int]:  # type: ignore[no-untyped-def]
    """The correlation ids of the next ``count`` response frames (every frame starts with one)."""
    buf, ids = b"", []
    while len(ids) < count:
        while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
            buf += await stream.receive_some(65536)
        n = int.from_bytes(buf[:4], "big")
        ids.append(int.from_bytes(buf[4:8], "big"))
        buf = buf[4 + n:]
    return ids


async def test_mixed_hot_apis_in_one_read_answer_in_order_and_count_per_api() -> None:
    client, server = trio.testing.memory_stream_pair()
    broker = hot_broker()
    conn = Connection(server, broker, "127.0.0.1:1")  # type: ignore[arg-type]
    keys = [HEARTBEAT, HEARTBEAT, LIST_GROUPS, HEARTBEAT, LIST_GROUPS]
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.run)
            await client.send_all(b"".join(request(k, i) for i, k in enumerate(keys)))  # one read
            assert await read_correlation_ids(client, 5) == [0, 1, 2, 3, 4]
            await client.aclose()
    assert broker.metrics.requests.started == {HEARTBEAT: 3, LIST_GROUPS: 2}
    latency = broker.metrics.requests.latency
    assert sum(latency[HEARTBEAT][:-1]) == 3 and sum(latency[LIST_GROUPS][:-1]) == 2  # one observation each


async def test_hot_answers_wait_behind_a_pending_request_and_leave_with_it() -> None:
    client, server = trio.testing.memory_stream_pair()
    broker = hot_broker()
    conn = Connection(server, broker, "127.0.0.1:1")  # type: ignore[arg-type]
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.run)
            # a hot answer, then ApiVersions (held by the broker), then two more hot ones
            await client.send_all(request(HEARTBEAT, 1) + request(API_VERSIONS, 2) + request(HEARTBEAT, 3)
                                  + request(LIST_GROUPS, 4))
            assert await read_correlation_ids(client, 1) == [1]  # nothing pending ahead of it: sent at once
            await trio.testing.wait_all_tasks_blocked()
            assert len(broker.held) == 1 and len(conn.slots) == 3  # 3 and 4 wait behind 2, answered
            with trio.move_on_after(0.05):
                assert await client.receive_some(65536) == b"", "nothing may overtake the pending request"
            broker.answer_all()
            assert await read_correlation_ids(client, 3) == [2, 3, 4]
            await client.aclose()
    # the connection counts its hot answers; a generic request is counted by Broker.handle (faked here)
    assert broker.metrics.requests.started == {HEARTBEAT: 2, LIST_GROUPS: 1}
