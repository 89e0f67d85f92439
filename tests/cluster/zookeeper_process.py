"""A real ZooKeeper (Debian's package) for the cluster tests: the JVM started directly, stopped by PID.

As INFRA-NOTES.md measured: ``QuorumPeerMain`` with ``tickTime=500`` on a free 127.0.0.1 port in a temp
dir; ready when the ``srvr`` four-letter word prints a ``Mode:`` line. Session timeouts are clamped by the
server to 2x-20x tickTime (1 s to 10 s here).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from server_process import free_port  # noqa: E402  (this worker's own port block; re-exported for callers)

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_JAR = Path("/usr/share/java/slf4j-simple.jar")


def terminate(proc: subprocess.Popen[Any] | None) -> None:
    """Stop a process we started: SIGTERM, then SIGKILL if it is still there after 10 s (bounded)."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def four_letter(port: int, word: str, timeout: float = 2.0) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while True:
            data = s.recv(4096)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperProcess:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0, same_port: bool = False) -> ZooKeeperProcess:
        """Start (again, on the port it had and with its data, when ``same_port``)."""
        if not ZOOKEEPER_JAR.exists():
            raise RuntimeError(f"{ZOOKEEPER_JAR} is missing: `make test` installs Debian's zookeeper package "
                               "(apt-get install zookeeper)")
        if not (same_port and self.port):
            self.port = free_port()
        data = self.dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "zoo.cfg"
        cfg.write_text(f"tickTime=500\ndataDir={data}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
                       "admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,mntr\n"
                       "maxClientCnxns=200\n")
        classpath = f"{ZOOKEEPER_JAR}:{SLF4J_JAR}"
        self.log_path = self.dir / "zookeeper.log"
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                ["java", "-Xms32m", "-Xmx256m", "-cp", classpath,
                 "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)],
                cwd=self.dir, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("ZooKeeper exited at startup:\n" + self.log())
            try:
                if "Mode:" in four_letter(self.port, "srvr"):
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("ZooKeeper did not become ready in time:\n" + self.log())

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL (a crash: no clean close of its sessions; they are restored when it starts again)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        terminate(self.proc)
