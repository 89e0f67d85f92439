"""The poller: one task per trio run reads every client socket that has data, instead of one parked task per
connection.

Why: a connection task parked in ``trio.lowlevel.wait_readable`` costs, per request, an epoll registration
change on the way in and out and a scheduler round trip to wake it; with many connections each sending a
request now and then (offset commits, heartbeats), that was the largest share of the event loop's time.

Rules:
- One ``select.epoll`` holds the sockets of the connections that are reading (level-triggered ``EPOLLIN``);
  the poller task parks in ``wait_readable`` on that epoll's descriptor, so trio wakes it once for every
  batch of ready sockets. It then calls ``on_readable()`` of each ready connection, once per wake-up (one
  read of at most 64 KiB each, what it left in the kernel is reported again at the next wake-up), and
  parks again, which lets the other tasks run.
- Fair serving: one turn serves at most ``TURN_REQUESTS`` frames of a connection. A connection whose turn
  left whole frames in its reader is ``defer``red: it leaves the epoll (nothing more is read from it) and
  joins the backlog (deferred by another task while the poller waits, it wakes the wait through an
  eventfd in the epoll: nothing per round); each round of the poller
  gives every backlogged connection one more turn
  (``on_turn``), after a checkpoint that lets every other task and ready socket run first. So a client
  that pipelines thousands of requests slows itself, not its neighbours.
- ``on_readable`` never awaits: it reads, serves the frames and sends what is ready; whatever must wait
  (a full socket, the in-flight cap, the end of the connection) is handed to the connection's own tasks.
- A connection is in the epoll from ``add`` to ``remove``, and is removed before its socket is closed: the
  epoll keys on the open file, which a copy of the descriptor (the fsync child's) can keep alive.
- A connection whose ``on_readable`` raises is ended with that error (logged by its task); the poller goes on.
- One poller per trio run (``Poller.current()``), started as a system task on first use and closed with the
  run.
- The poller knows a connection only as ``Polled`` (its descriptor, its flags, its three callbacks); it
  never imports connection.py, which imports it.
"""

from __future__ import annotations

import os
import select
from collections import deque
from typing import Protocol

import trio

MAX_EVENTS = 1024
_CURRENT: trio.lowlevel.RunVar[Poller] = trio.lowlevel.RunVar("poller")


class Polled(Protocol):
    """What the poller uses of a connection (connection.Connection)."""

    deferred: bool  # in the backlog: whole frames wait in its reader for a turn (set and cleared here)
    closed: bool

    @property
    def fd(self) -> int | None: ...

    @property
    def ended(self) -> bool: ...

    def on_readable(self) -> None: ...  # read once, serve a turn, send what is ready; never awaits

    def on_turn(self) -> None: ...  # serve one more turn of the frames already read

    def fail(self, error: Exception) -> None: ...  # serving raised: end the connection with that error


class Poller:
    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._conns: dict[int, Polled] = {}
        self._backlog: deque[Polled] = deque()
        # another task's defer wakes the idle wait through this eventfd (registered in the epoll)
        self._kick = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._epoll.register(self._kick, select.EPOLLIN)
        self._kicked = False
        self._polling = False  # the poller is serving what it polled (a defer then needs no wake-up)

    @staticmethod
    def current() -> Poller:
        """This trio run's poller (started on first use)."""
        try:
            return _CURRENT.get()
        except LookupError:
            poller = Poller()
            _CURRENT.set(poller)
            trio.lowlevel.spawn_system_task(poller._run, name="groupcoord.poller")
            return poller

    def add(self, conn: Polled) -> None:
        fd = conn.fd
        assert fd is not None
        if self._conns.get(fd) is conn:
            return
        self._conns[fd] = conn
        self._epoll.register(fd, select.EPOLLIN)

    def defer(self, conn: Polled) -> None:
        """``conn`` has whole frames left after its turn: out of the epoll, into the backlog."""
        self.remove(conn)
        if not conn.deferred:
            conn.deferred = True
            self._backlog.append(conn)
            if not self._polling and not self._kicked:  # deferred from another task (a TLS handshake's last
                self._kicked = True  # bytes): the poller may be waiting on the epoll: wake it
                os.eventfd_write(self._kick, 1)

    def remove(self, conn: Polled) -> None:
        fd = conn.fd
        if fd is None or self._conns.get(fd) is not conn:
            return
        del self._conns[fd]
        try:
            self._epoll.unregister(fd)
        except OSError:  # already closed
            pass

    async def _run(self) -> None:
        epoll = self._epoll
        conns = self._conns
        backlog = self._backlog
        kick = self._kick
        try:
            while True:
                self._polling = False
                if backlog:
                    await trio.lowlevel.checkpoint()  # the others' turn first
                else:
                    await trio.lowlevel.wait_readable(epoll.fileno())
                self._polling = True
                for fd, _ in epoll.poll(0, MAX_EVENTS):
                    conn = conns.get(fd)
                    if conn is None:
                        if fd == kick:
                            os.eventfd_read(kick)
                            self._kicked = False
                        continue
                    try:
                        conn.on_readable()
                    except Exception as e:  # a bug serving one connection ends that connection only
                        conn.fail(e)
                for _ in range(len(backlog)):
                    conn = backlog.popleft()
                    conn.deferred = False
                    if conn.closed or conn.ended:
                        continue
                    try:
                        conn.on_turn()
                    except Exception as e:
                        conn.fail(e)
        finally:
            epoll.close()
            os.close(kick)
