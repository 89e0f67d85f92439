"""The baseline server of bench_coordinator: a raw trio framed-echo server.

Rules:
- One trio task per connection reads with ``receive_some(65536)``, splits Kafka frames with the same
  ``protocol.framing.FrameReader`` our server uses, and answers every frame with a fixed 16-byte frame shaped
  like a Heartbeat v4 response (size 12, the request's correlation id, empty tagged fields, throttle 0,
  error 0, empty tagged fields). All answers to one read go out in one ``send_all``.
- No decoding, no dispatch, no state: it is the floor of what any trio server costs per request.
- Started as ``python -m tests.bench.bench_coordinator_echo serve``; prints ``echo listening on PORT`` once
  bound on 127.0.0.1 (port 0 = a free one) and runs until SIGTERM/SIGINT. Without ``serve`` it does nothing
  (``make bench`` runs every ``bench_*.py`` module; this one is only a helper).
"""

from __future__ import annotations

import signal
import struct
import sys

import trio

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


async def serve(port: int) -> None:
    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1", backlog=4096)
    print(f"echo listening on {listeners[0].socket.getsockname()[1]}", flush=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, echo_connection, listeners)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                break
        nursery.cancel_scope.cancel()


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "serve":
        print("helper of tests.bench.bench_coordinator (run that); `serve [PORT]` starts the echo server")
        return 0
    trio.run(serve, int(argv[1]) if len(argv) > 1 else 0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
