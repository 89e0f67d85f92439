"""The follower's connection to its leader (coordinator/runtime/replica_fetcher.py ``_Connection``) on a real
127.0.0.1 TCP connection, read and written on its socket directly: a replica fetch goes out in the
hand-written codec and its answer, arriving in pieces, is decoded whole; the leader closing the connection
and the leader resetting it are ``trio.BrokenResourceError``s, the reset one caused by the
``ConnectionResetError`` (fast failover reports it as a reset), as trio's stream says them."""

from __future__ import annotations

import socket
import struct
from typing import Any

import pytest
import trio

from coordinator.runtime.replica_fetcher import _Connection
from protocol import codec

BODY: dict[str, Any] = {
    "replica_id": 2, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
    "session_id": 0, "session_epoch": 0,
    "topics": [{"topic": "__consumer_offsets", "partitions": [
        {"partition": 3, "current_leader_epoch": 1, "fetch_offset": 42, "last_fetched_epoch": -1,
         "log_start_offset": 0, "partition_max_bytes": 1 << 20}]}],
    "forgotten_topics_data": [], "rack_id": "", "cluster_id": None}
ANSWER: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0, "session_id": 9, "responses": [
    {"topic": "__consumer_offsets", "partitions": [
        {"partition_index": 3, "error_code": 0, "high_watermark": 40, "last_stable_offset": 40,
         "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
         "records": b"r" * 5000}]}]}


async def read_frame(stream: trio.SocketStream) -> bytes:
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
        chunk = await stream.receive_some(65536)
        assert chunk, "the follower closed"
        buf += chunk
    return buf[4:]


async def connected() -> tuple[_Connection, trio.SocketStream]:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listeners[0].accept()
    await listeners[0].aclose()
    conn = _Connection(stream, "replica-2")
    assert conn._fd >= 0  # the socket itself, not the stream
    return conn, server


async def test_a_fetch_and_its_answer_in_pieces() -> None:
    conn, server = await connected()
    async with trio.open_nursery() as nursery:
        async def leader() -> None:
            req = codec.decode_request(await read_frame(server))
            assert (req.header.api_key, req.header.api_version, req.header.client_id) == (1, 12, "replica-2")
            assert req.body["topics"] == BODY["topics"] and req.body["replica_id"] == 2
            frame = codec.encode_response(1, 12, req.header.correlation_id, ANSWER)
            for i in range(0, len(frame), 1000):  # in pieces: the follower waits for the rest
                await server.send_all(frame[i:i + 1000])
                await trio.sleep(0.001)
        nursery.start_soon(leader)
        with trio.fail_after(10):
            answer = await conn.call(1, 12, BODY, 5.0, round_codec=True)
    assert answer["session_id"] == 9
    assert answer["responses"][0]["partitions"][0]["records"] == b"r" * 5000
    await server.aclose()
    await conn.stream.aclose()


async def test_the_leader_closing_the_connection_is_broken() -> None:
    conn, server = await connected()
    await server.aclose()
    with trio.fail_after(10), pytest.raises(trio.BrokenResourceError) as e:
        await conn.call(1, 12, BODY, 5.0, round_codec=True)
    assert e.value.__cause__ is None
    await conn.stream.aclose()


async def test_the_leader_resetting_the_connection_is_broken_by_a_reset() -> None:
    conn, server = await connected()
    async with trio.open_nursery() as nursery:
        async def leader() -> None:
            await read_frame(server)
            server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            server.socket.close()  # an RST, not a FIN
        nursery.start_soon(leader)
        with trio.fail_after(10), pytest.raises(trio.BrokenResourceError) as e:
            await conn.call(1, 12, BODY, 5.0, round_codec=True)
    assert isinstance(e.value.__cause__, ConnectionResetError)
    await conn.stream.aclose()
