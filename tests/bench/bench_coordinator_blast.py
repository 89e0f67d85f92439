"""Pipelined request load over plain non-blocking sockets and one epoll loop (runs in the load-generator
process of bench_coordinator, never in a server process).

Rules:
- The engine never decodes bodies: it splits response frames by their int32 size prefix and reads the one
  int16 error code it is told about (``err_from_end``: its distance from the frame's end; 3 for a Heartbeat
  v4 response, 5 for a single-partition OffsetCommit v8 response). Every response is checked, none sampled.
- ``closed_loop`` keeps ``inflight`` requests outstanding per connection: each response received is
  replaced by a new request at once. Throughput = responses received inside the measurement window (after
  a warm-up) / window length. After the window no new request is sent and outstanding ones are drained.
- ``open_loop`` offers a fixed total rate spread round-robin over the connections, on schedule whatever
  the responses (no coordinated omission); latency is measured per request from its actual send time and,
  separately, from its scheduled time (which also counts load-generator lag). Only requests scheduled
  inside the measurement window are counted.
- ``make(n)`` of a connection returns the bytes of its next ``n`` request frames.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

_SIZE = struct.Struct(">i")
_IN = select.EPOLLIN | select.EPOLLERR | select.EPOLLHUP
_OUT = select.EPOLLOUT

Maker = Callable[[int], bytes]


class BlastError(RuntimeError):
    pass


@dataclass(slots=True)
class _Conn:
    sock: socket.socket
    make: Maker
    ep: select.epoll
    rbuf: bytearray = field(default_factory=bytearray)
    out: bytearray = field(default_factory=bytearray)
    outstanding: int = 0
    sent_at: deque = field(default_factory=deque)

    def send(self, data: bytes) -> None:
        if self.out:
            self.out += data
            return
        try:
            n = self.sock.send(data)
        except BlockingIOError:
            n = 0
        if n < len(data):
            self.out += data[n:]
            self.ep.modify(self.sock.fileno(), _IN | _OUT)

    def flush(self) -> None:
        try:
            n = self.sock.send(self.out)
        except BlockingIOError:
            return
        del self.out[:n]
        if not self.out:
            self.ep.modify(self.sock.fileno(), _IN)

    def take(self, data: bytes, err_from_end: int, first_error: list[int]) -> tuple[int, int]:
        """Feed received bytes; returns (complete frames, frames with a non-zero error code)."""
        buf = self.rbuf
        buf += data
        pos, n, errors, total = 0, 0, 0, len(buf)
        unpack = _SIZE.unpack_from
        while total - pos >= 4:
            end = pos + 4 + unpack(buf, pos)[0]
            if end > total:
                break
            e = end - err_from_end
            if buf[e] or buf[e + 1]:
                errors += 1
                if not first_error:
                    first_error.append(int.from_bytes(buf[e:e + 2], "big", signed=True))
            n += 1
            pos = end
        del buf[:pos]
        return n, errors


@dataclass(frozen=True, slots=True)
class ClosedResult:
    requests_per_s: float
    counted: int
    window_s: float
    errors: int
    first_error: int | None
    per_second: list[int]
    cpu: dict[str, float]  # share of one core each probed process used during the window


@dataclass(frozen=True, slots=True)
class OpenResult:
    offered_per_s: float
    achieved_per_s: float
    counted: int
    errors: int
    first_error: int | None
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    p50_sched_ms: float
    p99_sched_ms: float


def _register(socks: Sequence[socket.socket], makers: Sequence[Maker]) -> tuple[select.epoll, dict[int, _Conn]]:
    ep = select.epoll()
    conns: dict[int, _Conn] = {}
    for s, make in zip(socks, makers, strict=True):
        s.setblocking(False)
        conns[s.fileno()] = _Conn(s, make, ep)
        ep.register(s.fileno(), _IN)
    return ep, conns


def _recv(c: _Conn) -> bytes:
    try:
        data = c.sock.recv(262144)
    except BlockingIOError:
        return b""
    if not data:
        raise BlastError("the server closed a connection")
    return data


def _stat_fields(pid: int | str) -> list[str]:
    """The fields of /proc/PID/stat after the command name (state first: utime and stime are 11 and 12, the
    parent pid is 1)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def process_cpu(pid: int | None = None) -> Callable[[], float]:
    """A probe: CPU seconds (user + system) used so far by ``pid`` (this process when None)."""
    if pid is None:
        return time.process_time
    tick = os.sysconf("SC_CLK_TCK")

    def probe() -> float:
        fields = _stat_fields(pid)
        return (int(fields[11]) + int(fields[12])) / tick

    return probe


def children_cpu(pid: int) -> Callable[[], float]:
    """A probe: CPU seconds used so far by ``pid``'s direct children (e.g. a server's fsync child), found
    by their parent pid in /proc at each reading."""
    tick = os.sysconf("SC_CLK_TCK")

    def probe() -> float:
        total = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                fields = _stat_fields(entry)
            except OSError:  # gone meanwhile
                continue
            if int(fields[1]) == pid:
                total += int(fields[11]) + int(fields[12])
        return total / tick

    return probe


def machine_ticks() -> tuple[int, int]:
    """(ticks the hypervisor stole from this machine's CPUs, all ticks) so far, summed over every CPU: the
    difference between two readings tells how much of the machine its host took meanwhile."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice: already in user and nice]
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def closed_loop(socks: Sequence[socket.socket], makers: Sequence[Maker], *, inflight: int, warmup_s: float,
                measure_s: float, err_from_end: int, drain_s: float = 10.0,
                probes: dict[str, Callable[[], float]] | None = None) -> ClosedResult:
    probes = probes or {}
    cpu_start: dict[str, float] = {}
    cpu: dict[str, float] = {}
    ep, conns = _register(socks, makers)
    first_error: list[int] = []
    start = time.perf_counter()
    t_measure, t_end = start + warmup_s, start + warmup_s + measure_s
    for c in conns.values():
        c.send(c.make(inflight))
        c.outstanding = inflight
    outstanding = inflight * len(conns)
    counted = errors = 0
    per_second = [0] * max(1, int(measure_s + 0.999))
    sending = True
    try:
        while True:
            now = time.perf_counter()
            if not cpu_start and now >= t_measure:
                cpu_start = {k: p() for k, p in probes.items()} or {"": 0.0}
                t_cpu = now
            if sending and now >= t_end:
                sending = False
                cpu = {k: (p() - cpu_start[k]) / (now - t_cpu) for k, p in probes.items()}
            if not sending and (outstanding == 0 or now > t_end + drain_s):
                break
            for fd, ev in ep.poll(0.05):
                c = conns[fd]
                if ev & _OUT:
                    c.flush()
                if not ev & _IN:
                    continue
                n, e = c.take(_recv(c), err_from_end, first_error)
                if not n:
                    continue
                now = time.perf_counter()
                errors += e
                if t_measure <= now < t_end:
                    counted += n
                    per_second[min(int(now - t_measure), len(per_second) - 1)] += n
                if sending:
                    c.send(c.make(n))
                else:
                    c.outstanding -= n
                    outstanding -= n
    finally:
        ep.close()
    if outstanding:
        raise BlastError(f"{outstanding} requests still unanswered {drain_s} s after the run")
    return ClosedResult(counted / measure_s, counted, measure_s, errors, first_error[0] if first_error else None,
                        per_second, cpu)


def percentiles(ms: list[float]) -> dict[str, float]:
    """p50 / p99 / p99.9 / max of latencies in ms (e.g. several open-loop runs pooled with ``keep``)."""
    ms = sorted(ms)
    return {"count": len(ms), "p50_ms": _pct(ms, 0.50), "p99_ms": _pct(ms, 0.99), "p999_ms": _pct(ms, 0.999),
            "max_ms": ms[-1] if ms else float("nan")}


def _pct(sorted_ms: list[float], q: float) -> float:
    if not sorted_ms:
        return float("nan")
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))]


def open_loop(socks: Sequence[socket.socket], makers: Sequence[Maker], *, rate: float, warmup_s: float,
              measure_s: float, err_from_end: int, drain_s: float = 10.0, keep: list[float] | None = None,
              keep_sched: list[float] | None = None) -> OpenResult:
    ep, conns = _register(socks, makers)
    order = list(conns.values())
    first_error: list[int] = []
    interval = 1.0 / rate
    start = time.perf_counter() + 0.005
    t_measure, t_end = start + warmup_s, start + warmup_s + measure_s
    i = 0
    outstanding = errors = 0
    lat: list[float] = []
    lat_sched: list[float] = []
    sending = True
    try:
        while True:
            now = time.perf_counter()
            while sending:
                due = start + i * interval
                if due > now:
                    break
                if due >= t_end:
                    sending = False
                    break
                c = order[i % len(order)]
                sent = time.perf_counter()
                c.send(c.make(1))
                c.sent_at.append((due, sent))
                outstanding += 1
                i += 1
            if not sending and (outstanding == 0 or now > t_end + drain_s):
                break
            timeout = max(0.0, start + i * interval - time.perf_counter()) if sending else 0.05
            for fd, ev in ep.poll(timeout):
                c = conns[fd]
                if ev & _OUT:
                    c.flush()
                if not ev & _IN:
                    continue
                n, e = c.take(_recv(c), err_from_end, first_error)
                if not n:
                    continue
                got = time.perf_counter()
                errors += e
                outstanding -= n
                for _ in range(n):
                    due, sent = c.sent_at.popleft()
                    if t_measure <= due < t_end:
                        lat.append(got - sent)
                        lat_sched.append(got - due)
    finally:
        ep.close()
    if outstanding:
        raise BlastError(f"{outstanding} requests still unanswered {drain_s} s after the run")
    lat.sort()
    lat_sched.sort()
    ms = [x * 1000 for x in lat]
    ms_sched = [x * 1000 for x in lat_sched]
    if keep is not None:  # the caller pools several runs' latencies (ms, from each request's send)
        keep.extend(ms)
    if keep_sched is not None:  # the same from each request's scheduled time
        keep_sched.extend(ms_sched)
    return OpenResult(rate, len(lat) / measure_s, len(lat), errors, first_error[0] if first_error else None,
                      _pct(ms, 0.50), _pct(ms, 0.99), _pct(ms, 0.999), ms[-1] if ms else float("nan"),
                      _pct(ms_sched, 0.50), _pct(ms_sched, 0.99))


def connect_all(port: int, count: int) -> list[socket.socket]:
    """``count`` blocking TCP connections to 127.0.0.1:port with TCP_NODELAY."""
    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)
    return socks


if __name__ == "__main__":
    print("helper of tests.bench.bench_coordinator (run that); nothing to run on its own")
