"""Socket connections read through the poller (coordinator/runtime/poller.py), over real socket pairs.

- The in-flight cap holds per frame on a socket too: 40 requests in one write, at most 4 open at once; the
  poller stops reading the socket at the cap and the connection's task resumes it when answers free room;
  every answer comes back, in order.
- Several connections are served by the one poller, each its own answers.
- A client's EOF ends its connection (``connection_closed``) and takes its socket out of the poller.
- A bug while serving a read ends that connection only; the poller goes on serving the others.
- A client that sends but does not read its answers stops being read once an answer waits for the kernel.
"""

from __future__ import annotations

import trio
import trio.testing
from holding_broker import HoldingBroker

from coordinator.runtime.connection import Connection
from coordinator.runtime.poller import Poller
from protocol import codec


def requests(n: int, first: int = 0) -> bytes:
    return b"".join(codec.encode_request(18, 0, first + i, "t", {}) for i in range(n))


async def read_answers(sock: trio.socket.SocketType, n: int, broker: HoldingBroker | None = None,
                       cap: int | None = None) -> list[int]:
    """Correlation ids of ``n`` answers, answering what ``broker`` holds as it goes (never over ``cap``)."""
    got: list[int] = []
    buf = b""
    while len(got) < n:
        if broker is not None:
            await trio.testing.wait_all_tasks_blocked()
            if cap is not None:
                assert len(broker.held) <= cap
            broker.answer_all()
        with trio.move_on_after(0.5):
            buf += await sock.recv(65536)
        while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
            size = int.from_bytes(buf[:4], "big")
            got.append(codec.decode_response(18, 0, buf[4:4 + size])[0])
            buf = buf[4 + size:]
    return got


def pair() -> tuple[trio.socket.SocketType, trio.SocketStream]:
    ours, theirs = trio.socket.socketpair()
    return theirs, trio.SocketStream(ours)


async def test_the_cap_pauses_reading_a_socket_until_answers_free_room() -> None:
    client, stream = pair()
    broker = HoldingBroker(max_inflight=4)
    conn = Connection(stream, broker, "peer")  # type: ignore[arg-type]
    assert conn.fd is not None  # a socket: read through the poller
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.run)
            await client.send(requests(40))  # one write
            assert await read_answers(client, 40, broker, cap=4) == list(range(40))
            client.close()
    assert broker.most_open == 4


class Closing(HoldingBroker):
    def __init__(self) -> None:
        super().__init__()
        self.closed: list[Connection] = []

    def connection_closed(self, conn) -> None:  # type: ignore[no-untyped-def]
        self.closed.append(conn)


async def test_one_poller_serves_many_connections_and_forgets_a_closed_one() -> None:
    broker = Closing()
    clients, conns = [], []
    for i in range(5):
        client, stream = pair()
        clients.append(client)
        conns.append(Connection(stream, broker, f"peer-{i}"))  # type: ignore[arg-type]
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            for conn in conns:
                nursery.start_soon(conn.run)
            await trio.testing.wait_all_tasks_blocked()
            poller = Poller.current()
            assert sorted(poller._conns) == sorted(c.fd for c in conns)  # type: ignore[misc]
            for i, client in enumerate(clients):
                await client.send(requests(3, first=100 * i))
            for i, client in enumerate(clients):
                assert await read_answers(client, 3, broker) == [100 * i, 100 * i + 1, 100 * i + 2]
            clients[2].close()  # EOF
            with trio.fail_after(5):
                while conns[2] not in broker.closed:
                    await trio.sleep(0.01)
            assert conns[2].fd not in poller._conns  # type: ignore[misc]
            await clients[0].send(requests(1, first=7))
            assert await read_answers(clients[0], 1, broker) == [7]  # the others still served
            for client in clients:
                client.close()


async def test_a_bug_serving_one_connection_ends_it_and_not_the_poller() -> None:
    broker = Closing()
    (bad_client, bad_stream), (good_client, good_stream) = pair(), pair()

    def buggy(request, slot) -> None:  # type: ignore[no-untyped-def]
        raise RuntimeError("bug in a handler")

    bad = Connection(bad_stream, broker, "bad")  # type: ignore[arg-type]
    good = Connection(good_stream, broker, "good")  # type: ignore[arg-type]
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(bad.run)
            nursery.start_soon(good.run)
            await trio.testing.wait_all_tasks_blocked()
            broker.handle = buggy  # type: ignore[method-assign]
            await bad_client.send(requests(1))
            with trio.fail_after(5):
                while bad not in broker.closed:
                    await trio.sleep(0.01)
            assert await bad_client.recv(100) == b""  # its connection is closed
            broker.handle = HoldingBroker.handle.__get__(broker)  # type: ignore[method-assign]
            await good_client.send(requests(2, first=50))
            assert await read_answers(good_client, 2, broker) == [50, 51]
            bad_client.close()
            good_client.close()


async def test_a_client_that_does_not_read_its_answers_is_not_read_either() -> None:
    """Answers of 256 KiB (more than the socket buffers hold) to requests sent one at a time by a client that
    reads nothing at first: once an answer waits for the kernel, the server stops reading that socket, so
    the later requests are not even read (memory does not grow with what the client sends); then the
    client reads, and every answer comes, in order."""
    big = 256 * 1024
    served: list[int] = []

    def answer(payload: bytes) -> bytes:
        served.append(int.from_bytes(payload[4:8], "big"))
        return (big - 4).to_bytes(4, "big") + payload[4:8] + b"x" * (big - 8)

    client, stream = pair()
    broker = HoldingBroker(hot={18: answer})
    conn = Connection(stream, broker, "slow-reader")  # type: ignore[arg-type]
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.run)
            for i in range(10):
                await client.send(requests(1, first=i))
                await trio.sleep(0.02)  # separate reads on the server side, if it reads
            await trio.testing.wait_all_tasks_blocked()
            # an answer is stuck in the kernel (the first, or the second if the first fit): nothing more was read
            assert served in ([0], [0, 1]), served
            assert conn.fd not in Poller.current()._conns  # type: ignore[misc]
            got, buf = [], b""
            while len(got) < 10:
                buf += await client.recv(1 << 20)
                while len(buf) >= big:
                    got.append(int.from_bytes(buf[4:8], "big"))
                    buf = buf[big:]
            assert got == list(range(10)) and served == list(range(10))
            client.close()
