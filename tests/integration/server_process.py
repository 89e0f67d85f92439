"""Start the real `groupcoord serve` daemon as a subprocess on a free 127.0.0.1 port, and stop it by PID."""

from __future__ import annotations

import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# free_port(): a block of ports below the kernel's ephemeral range for each pytest-xdist worker (`make test`
# runs the suite on several), so that no other worker, no bind(0) and no outgoing connection can take a port
# between the check here and the bind of the process it is meant for.
PORT_BLOCK = 1000
PORT_BLOCKS_FROM = 10000
_ports_lock = threading.Lock()
_ports_given: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _port_block() -> range | None:
    """This process's block: one for a run without workers, one per worker gwN; None when the ephemeral
    range leaves no room below it (then free_port asks the kernel, as bind(0) does)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) + 1 if worker.startswith("gw") and worker[2:].isdigit() else 0
    blocks = (_ephemeral_low() - PORT_BLOCKS_FROM) // PORT_BLOCK
    if blocks < 1:
        return None
    low = PORT_BLOCKS_FROM + (index % blocks) * PORT_BLOCK
    return range(low, low + PORT_BLOCK)


def free_port() -> int:
    """A 127.0.0.1 TCP port nothing is bound to now, for a process (or a test's closed-port check) to use a
    moment later; never the same one twice in a process while its block has others left. Starts at a random
    place in the block, so two suites run side by side (same worker names) rarely meet either."""
    block = _port_block()
    if block is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    with _ports_lock:
        for _ in range(2):
            start = random.randrange(len(block))
            for i in range(len(block)):
                port = block[(start + i) % len(block)]
                if port in _ports_given:
                    continue
                with socket.socket() as s:
                    try:
                        s.bind(("127.0.0.1", port))
                    except OSError:
                        continue
                _ports_given.add(port)
                return port
            _ports_given.clear()  # every port of the block was given once: those from long ago are free again
    raise RuntimeError(f"no free 127.0.0.1 port in {block.start}-{block.stop - 1}")


# Every server started in this process since the running test began (tests/conftest.py empties it before each
# test and shows the end of these servers' logs in the report of a test that fails).
started: list[ServerProcess] = []


class ServerProcess:
    def __init__(self, data_dir: Path, *flags: str, env: dict[str, str] | None = None,
                 listeners: bool = False, repo: Path = REPO) -> None:
        self.repo = repo  # the source tree the server runs from (a benchmark's baseline: an older tree)
        self.data_dir = data_dir
        self.flags = list(flags)
        self.env = env
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.metrics_port: int | None = None
        self.output: list[str] = []
        self.listeners = listeners  # the config names its listeners: no --port flag
        self.ports: dict[str, int] = {}  # every listener after the first, by name (the first is ``port``)

    def start(self, timeout: float = 20.0) -> ServerProcess:
        # a test naming its listeners (in flags or a --config file) gives their ports itself
        port = [] if self.listeners else ["--port", "0"]
        args = [sys.executable, "-m", "coordinator.cli", "serve", *port, "--metrics-port", "0",
                "--data-dir", str(self.data_dir), *self.flags]
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(self.env or {}))
        if self not in started:
            started.append(self)
        self.proc = subprocess.Popen(args, cwd=self.repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env)
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("server exited during startup:\n" + "".join(self.output))
            self.output.append(line)
            if line.startswith("groupcoord listener "):  # "groupcoord listener NAME (PROTOCOL) on host:port"
                parts = line.split()
                self.ports[parts[2]] = int(parts[-1].rsplit(":", 1)[1])
            if line.startswith("groupcoord listening on"):
                addr = line.split()[3].rstrip(",")
                self.port = int(addr.rsplit(":", 1)[1])
                if "metrics on" in line:
                    self.metrics_port = int(line.rsplit(":", 1)[1].split("/")[0])
                threading.Thread(target=self._drain, daemon=True).start()
                return self
        raise RuntimeError("server did not start in time:\n" + "".join(self.output))

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait; returns the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def kill(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return "".join(self.output)

    def scrape(self) -> str:
        """The server's /metrics text."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            return r.read().decode()

    def metric(self, series: str) -> float:
        """The value of one series on /metrics (its name with labels, e.g. ``x_total{api="Heartbeat"}``);
        0.0 when the server does not show it (yet)."""
        prefix = series + " "
        for line in self.scrape().splitlines():
            if line.startswith(prefix):
                return float(line.split()[-1])
        return 0.0

    def wait_loaded(self, timeout: float = 20.0) -> ServerProcess:
        """Until the server logged that its offsets partitions are loaded (before, group requests get
        COORDINATOR_LOAD_IN_PROGRESS)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(" offsets partitions (" in line and "loaded " in line for line in self.output):
                return self
            if not self.alive():
                raise RuntimeError("server exited while loading:\n" + self.log())
            time.sleep(0.01)
        raise RuntimeError("offsets partitions not loaded in time:\n" + self.log())


def raw_exchange(port: int, frame: bytes, timeout: float = 5.0) -> bytes:
    """Send bytes, return the first response frame's payload, or b'' if the server closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(frame)
        return read_frame(s) or b""


def read_frame(sock: socket.socket) -> bytes | None:
    """The next response frame's payload, or None once the server closed (or reset) the connection."""
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    return _recv_exact(sock, struct.unpack(">i", head)[0])


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    out = b""
    while len(out) < n:
        try:
            chunk = sock.recv(n - len(out))
        except OSError:
            return None
        if not chunk:
            return None
        out += chunk
    return out


@contextmanager
def twin_servers(base: Path, flags: Sequence[str], twin_flags: Sequence[str]
                 ) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two servers on ``flags``, the second with ``twin_flags`` too (a feature on, then off: a test compares their
    answers), both loaded (group requests before the load answer COORDINATOR_LOAD_IN_PROGRESS); both stopped
    after."""
    first = ServerProcess(base / "first", *flags)
    second = ServerProcess(base / "second", *flags, *twin_flags)
    try:
        yield first.start().wait_loaded(), second.start().wait_loaded()
    finally:
        for srv in (first, second):
            if srv.proc is not None:
                srv.stop()
