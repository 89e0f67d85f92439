"""The accept loop ends quietly when shutdown closes its listener before the loop sees its cancellation.

Seen in `make test` (test_cluster_preferred_leader, SIGTERM): ``serve`` cancels the accept scope and then
closes the listeners at once; an accept task that was runnable at that moment met the closed socket first
and its ClosedResourceError took the server down with exit status 1 instead of a clean stop."""

from __future__ import annotations

from typing import Any

import trio

from coordinator.runtime.server import _accept_loop


async def test_a_listener_closed_under_a_pending_accept_ends_the_loop_without_an_error() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    broker: Any = object()  # never reached: no connection arrives
    async with trio.open_nursery() as nursery:
        ended = trio.Event()

        async def loop() -> None:
            await _accept_loop(listeners[0], broker, nursery, None, "PLAINTEXT")
            ended.set()

        nursery.start_soon(loop)
        await trio.sleep(0.05)  # the loop waits in accept()
        await listeners[0].aclose()
        with trio.fail_after(5):
            await ended.wait()
    assert ended.is_set()
