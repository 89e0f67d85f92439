"""Connection rules, over an in-memory stream: the in-flight cap holds per frame, a handler bug closes the
connection or is answered with UNKNOWN_SERVER_ERROR (never leaves a client waiting for an answer that will
not come)."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from holding_broker import HoldingBroker

from coordinator.config import Config
from coordinator.metrics import Metrics
from coordinator.runtime.broker import Broker
from coordinator.runtime.connection import Connection
from protocol import codec
from protocol.errors import ProtocolError


async def test_the_inflight_cap_holds_when_one_read_carries_many_requests() -> None:
    client, server = trio.testing.memory_stream_pair()
    broker = HoldingBroker(max_inflight=4)
    conn = Connection(server, broker, "127.0.0.1:1")  # type: ignore[arg-type]
    frames = b"".join(codec.encode_request(18, 0, i, "t", {}) for i in range(40))
    with trio.fail_after(20):
        await _serve_40(client, conn, broker, frames)
    assert broker.most_open == 4


async def _serve_40(client, conn, broker, frames) -> None:  # type: ignore[no-untyped-def]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        await client.send_all(frames)  # 40 requests in one write
        got = 0
        buf = b""
        while got < 40:
            await trio.testing.wait_all_tasks_blocked()
            assert len(broker.held) <= 4
            broker.answer_all()
            with trio.move_on_after(1):
                buf += await client.receive_some(65536)
            while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
                n = int.from_bytes(buf[:4], "big")
                assert codec.decode_response(18, 0, buf[4:4 + n])[0] == got  # in order
                buf = buf[4 + n:]
                got += 1
        await client.aclose()


class FakeSlot:
    done = False
    body: dict | None = None

    def complete(self, body) -> None:  # type: ignore[no-untyped-def]
        self.done, self.body = True, body


def broken_broker(api_key: int) -> Broker:
    broker = Broker(Config({}), Metrics())

    def broken(request, slot) -> None:  # type: ignore[no-untyped-def]
        raise KeyError("bug")

    broker.handlers[api_key] = broken
    return broker


def test_a_handler_bug_without_an_error_field_closes_the_connection() -> None:
    """Metadata's answer has no top-level error code: the connection is closed (a protocol error)."""
    slot = FakeSlot()
    request = codec.decode_request(codec.encode_request(3, 1, 1, "t", {"topics": []})[4:])
    with pytest.raises(ProtocolError, match="internal error"):
        broken_broker(3).handle(request, slot)  # type: ignore[arg-type]
    assert slot.done and slot.body is None


def test_a_handler_bug_is_answered_with_unknown_server_error_where_the_api_has_one() -> None:
    slot = FakeSlot()
    request = codec.decode_request(codec.encode_request(12, 4, 1, "t", {"group_id": "g", "generation_id": 1,
                                                                        "member_id": "m"})[4:])
    broken_broker(12).handle(request, slot)  # type: ignore[arg-type]
    assert slot.done and slot.body is not None and slot.body["error_code"] == -1
