"""Startup problems are one clear line and exit status 2: a data dir in use, a port in use, a bad port."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from server_process import REPO, ServerProcess  # type: ignore[import-not-found]


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coordinator.cli", "serve", "--metrics-port", "-1", *args],
                          capture_output=True, text=True, timeout=60, cwd=REPO)


def test_a_second_server_on_the_same_data_dir_is_refused(server: ServerProcess) -> None:
    out = serve("--port", "0", "--data-dir", str(server.data_dir))
    assert out.returncode == 2
    assert "in use by another process" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert server.alive()


def test_a_port_in_use_is_a_startup_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = serve("--port", str(port), "--data-dir", str(tmp_path / "d"))
    assert out.returncode == 2
    assert out.stderr.startswith(f"groupcoord: cannot listen on 127.0.0.1:{port}")


def test_a_port_above_65535_is_a_config_error(tmp_path: Path) -> None:
    out = serve("--port", "99999", "--data-dir", str(tmp_path / "d"))
    assert out.returncode == 2 and "above the maximum 65535" in out.stderr
