"""A secured groupcoord for the security tests: a throwaway certificate authority (trustme), server and
client certificates on disk, SCRAM users made with the real CLI before the server starts, and a server
with four listeners (PLAINTEXT, SSL with required client certificates, SASL_PLAINTEXT, SASL_SSL) written
as a TOML config file, as an operator would."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "integration"))

from server_process import REPO, ServerProcess  # noqa: E402

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL")


@dataclass
class Pki:
    ca: Path  # the CA bundle clients trust
    server: Path  # key + chain of the server
    client_cert: Path  # alice's client certificate (CN=alice,OU=apps)
    client_key: Path
    authority: trustme.CA


def make_pki(root: Path) -> Pki:
    root.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("alice@example", common_name="alice", organization_unit_name="apps")
    pki = Pki(root / "ca.pem", root / "server.pem", root / "alice.crt", root / "alice.key", ca)
    ca.cert_pem.write_to_path(str(pki.ca))
    server.private_key_and_cert_chain_pem.write_to_path(str(pki.server))
    for blob in client.cert_chain_pems:
        blob.write_to_path(str(pki.client_cert), append=True)
    client.private_key_pem.write_to_path(str(pki.client_key))
    return pki


def add_users(data_dir: Path, users: dict[str, str] = USERS) -> None:
    """``groupcoord users add NAME --password P --data-dir DIR`` for each user (the real CLI, server stopped)."""
    for name, password in users.items():
        subprocess.run([sys.executable, "-m", "coordinator.cli", "users", "add", name, "--password", password,
                        "--iterations", "4096", "--data-dir", str(data_dir)], cwd=REPO, check=True,
                       capture_output=True, timeout=60)


def write_config(path: Path, pki: Pki, extra: dict[str, Any] | None = None,
                 listeners: tuple[str, ...] = LISTENERS) -> Path:
    values: dict[str, Any] = {
        "listeners": ",".join(f"{name}://127.0.0.1:0" for name in listeners),
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
        "ssl.keystore.location": str(pki.server),
        "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "group.min.session.timeout.ms": 1000,
        "group.initial.rebalance.delay.ms": 0,
        "num.partitions": 3,
        **(extra or {}),
    }
    lines = []
    for key, value in values.items():  # TOML: JSON's string escapes are TOML's basic-string escapes
        rendered = str(value).lower() if isinstance(value, bool) else json.dumps(value)
        lines.append(f'"{key}" = {rendered}')
    path.write_text("\n".join(lines) + "\n")
    return path


def start_secured(root: Path, extra: dict[str, Any] | None = None, users: dict[str, str] = USERS,
                  listeners: tuple[str, ...] = LISTENERS) -> tuple[ServerProcess, Pki]:
    pki = make_pki(root / "pki")
    data = root / "data"
    add_users(data, users)
    config = write_config(root / "groupcoord.toml", pki, extra, listeners)
    server = ServerProcess(data, "--config", str(config), listeners=True).start()
    return server, pki


def port(server: ServerProcess, listener: str) -> int:
    return server.port if listener == LISTENERS[0] else server.ports[listener]


def bootstrap(server: ServerProcess, listener: str) -> str:
    return f"127.0.0.1:{port(server, listener)}"
