"""The baseline server of bench_coordinator: a raw trio framed-echo server.

Rules:
- One trio task per connection reads with ``receive_some(65536)``, splits Kafka frames with the same
  ``protocol.framing.FrameReader`` our server uses, and answers every frame with a fixed 16-byte frame shaped
  like a Heartbeat v4 response (size 12, the request's correlation id, empty tagged fields, throttle 0,
  error 0, empty tagged fields). All answers to one read go out in one ``send_all``.
- No decoding, no dispatch, no state: it is the floor of what any trio server costs per request.
- Durable mode (``serve --durable DIR``), the floor of the commit latency figure: one task per connection
  parks in ``wait_readable`` and reads its socket's fd (``os.read``; trio's stream API would cost a
  scheduler round trip per read), and nothing is answered before it is durable. Every frame of every
  connection is appended to one file in ``DIR``; one flusher task writes what gathered (one ``os.write``)
  and sends an fsync request to the same fsync child process our server uses, without waiting: as in our
  group commit, the next write's request goes out while the previous fsync is under way (at most
  ``MAX_IN_FLIGHT`` unanswered), the child fsyncs back to back, and a reader task answers the frames each
  answer covers (same fixed answer), straight to the socket (the connection's own task only when the kernel
  did not take it all). No linger. It is the least a trio server in the common shape (a task parked per
  connection, answers written by the server) pays for a durable acknowledgement on this machine's disk: no
  decoding, no records, no index, no journal entries, one file. Ours is not in that shape any more: it
  reads through one poller and its fsync child writes the commit answers, so ours can beat this floor.
- Durable mode counts its fsync rounds as our server's flush histogram does (an answer, timed from its
  oldest request) and prints ``floor fsync rounds: N OVER_5MS OVER_10MS SLOWEST_MS`` when it stops.
- Started as ``python -m tests.bench.bench_coordinator_echo serve [--durable DIR]``; prints ``echo listening
  on PORT`` once bound on 127.0.0.1 (port 0 = a free one) and runs until SIGTERM/SIGINT. Without ``serve``
  it does nothing (``make bench`` runs every ``bench_*.py`` module; this one is only a helper).
"""

from __future__ import annotations

import os
import signal
import struct
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable

import trio

from coordinator.runtime.group_commit import MAX_IN_FLIGHT
from coordinator.storage.fsync_process import FsyncProcess
from protocol.framing import FrameReader

_PREFIX = struct.pack(">i", 12)
_SUFFIX = b"\x00" + b"\x00\x00\x00\x00" + b"\x00\x00" + b"\x00"


def answer(payload: bytes) -> bytes:
    """The fixed answer to one request payload: its correlation id (payload bytes 4-8) in a 16-byte frame."""
    return _PREFIX + payload[4:8] + _SUFFIX


async def echo_connection(stream: trio.SocketStream) -> None:
    reader = FrameReader()
    try:
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            reader.feed(data)
            out = []
            while (payload := reader.next_frame()) is not None:
                out.append(answer(payload))
            if out:
                await stream.send_all(b"".join(out))
    except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
        return
    finally:
        with trio.move_on_after(1):
            await stream.aclose()


class Durable:
    """The durable floor's shared state: frames gathered since the last write, who to answer, and the fsync
    requests out at the child (the same ``FsyncProcess`` our server uses, pipelined the same way)."""

    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        self.fd = os.open(os.path.join(directory, "frames.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.frames: list[bytes] = []
        self.waiting: list[tuple[DurableConnection, list[bytes]]] = []  # answers released by the next fsync
        self.kick = trio.Event()
        self.child = FsyncProcess.start()
        # (token, answers, sent at) sent to the child, oldest first; at most MAX_IN_FLIGHT unanswered
        self.in_flight: deque[tuple[int, list[tuple[DurableConnection, list[bytes]]], float]] = deque()
        # fsync rounds as our server's flush histogram counts them (an answer, timed from its oldest request):
        # how many, how many over 5 and 10 ms, the slowest (ms); printed at exit
        self.rounds = [0, 0, 0, 0.0]

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.read_answers)
                while True:
                    await self.kick.wait()
                    self.kick = trio.Event()
                    if len(self.in_flight) >= MAX_IN_FLIGHT:
                        continue  # the reader kicks again when answers make room
                    frames, self.frames = self.frames, []
                    waiting, self.waiting = self.waiting, []
                    os.write(self.fd, b"".join(frames))
                    self.in_flight.append((self.child.submit([self.fd], key="frames"), waiting, time.perf_counter()))
        finally:
            n, over5, over10, slowest = self.rounds
            print(f"floor fsync rounds: {n} {over5} {over10} {slowest:.2f}", flush=True)
            self.child.close()

    async def read_answers(self) -> None:
        while True:
            await trio.lowlevel.wait_readable(self.child.fileno())
            now = time.perf_counter()
            for token, err in self.child.poll():
                if err:
                    raise OSError(err, os.strerror(err))
                if self.in_flight and self.in_flight[0][0] <= token:
                    took = (now - self.in_flight[0][2]) * 1000
                    r = self.rounds
                    r[0], r[1], r[2], r[3] = r[0] + 1, r[1] + (took > 5), r[2] + (took > 10), max(r[3], took)
                while self.in_flight and self.in_flight[0][0] <= token:
                    for conn, answers in self.in_flight.popleft()[1]:
                        conn.answer(b"".join(answers))
            if self.frames:
                self.kick.set()


class DurableConnection:
    def __init__(self, stream: trio.SocketStream, durable: Durable) -> None:
        self.stream = stream
        self.durable = durable
        self.fd = stream.socket.fileno()
        self.out: list[bytes] = []  # what the kernel did not take at once, for this connection's writer
        self.sending = False  # the writer is sending: anything new queues behind it, to keep the order
        self.wake = trio.Event()
        self.closed = False  # set before the socket closes: its fd number may then be reused

    def answer(self, data: bytes) -> None:
        if self.closed:
            return
        if not self.out and not self.sending:
            try:
                sent = os.write(self.fd, data)
            except OSError:  # EAGAIN or a dead peer: the writer meets it
                sent = 0
            if sent == len(data):
                return
            data = data[sent:]
        self.out.append(data)
        self.wake.set()

    async def write_loop(self) -> None:
        while True:
            await self.wake.wait()
            self.wake = trio.Event()
            out, self.out = self.out, []
            if out:
                self.sending = True
                try:
                    await self.stream.send_all(b"".join(out))
                finally:
                    self.sending = False
                if self.out:  # queued while this send was under way
                    self.wake.set()

    async def read_loop(self) -> None:
        reader = FrameReader()
        durable = self.durable
        fd = self.fd
        while True:
            await trio.lowlevel.wait_readable(fd)
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not data:
                return
            reader.feed(data)
            answers = []
            while (payload := reader.next_frame()) is not None:
                durable.frames.append(struct.pack(">i", len(payload)) + payload)
                answers.append(answer(payload))
            if answers:
                durable.waiting.append((self, answers))
                durable.kick.set()


def durable_handler(durable: Durable) -> Callable[[trio.SocketStream], Awaitable[None]]:
    async def handle(stream: trio.SocketStream) -> None:
        conn = DurableConnection(stream, durable)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(conn.write_loop)
                await conn.read_loop()
                nursery.cancel_scope.cancel()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            pass  # the peer went away
        finally:
            conn.closed = True
            with trio.move_on_after(1):
                await stream.aclose()
    return handle


async def serve(port: int, durable_dir: str | None = None) -> None:
    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1", backlog=4096)
    print(f"echo listening on {listeners[0].socket.getsockname()[1]}", flush=True)
    async with trio.open_nursery() as nursery:
        if durable_dir is None:
            nursery.start_soon(trio.serve_listeners, echo_connection, listeners)
        else:
            durable = Durable(durable_dir)
            nursery.start_soon(durable.run)
            nursery.start_soon(trio.serve_listeners, durable_handler(durable), listeners)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                break
        nursery.cancel_scope.cancel()


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "serve":
        print("helper of tests.bench.bench_coordinator (run that); `serve [PORT] [--durable DIR]` starts the echo"
              " server")
        return 0
    rest = argv[1:]
    durable = None
    if "--durable" in rest:
        i = rest.index("--durable")
        durable = rest[i + 1]
        del rest[i:i + 2]
    trio.run(serve, int(rest[0]) if rest else 0, durable)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
