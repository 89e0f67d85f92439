"""Docker HEALTHCHECK: ask the local node for ApiVersions (v0) over the Kafka protocol; exit 0 if it answers.

Usage: ``groupcoord-healthcheck [HOST [PORT [CAFILE]]]``.

Rules: standard library only (it runs in the image's bare interpreter); one request, bounded by a timeout;
healthy means a well-formed answer with our correlation id and error code 0, not merely an open port.
The port is ``GROUPCOORD_PORT`` (the server's own config env var), default 9092. With a CAFILE the check
speaks TLS (a secured node's SASL_SSL listener, which answers ApiVersions before authentication): the
node's certificate must chain to CAFILE and name HOST, as a client checks it.
"""

from __future__ import annotations

import os
import socket
import ssl
import struct
import sys

API_VERSIONS, CORRELATION_ID, CLIENT_ID = 18, 0x6863, b"healthcheck"


def check(host: str, port: int, timeout: float = 3.0, cafile: str | None = None) -> str | None:
    """None when healthy, else why not."""
    body = struct.pack(">hhih", API_VERSIONS, 0, CORRELATION_ID, len(CLIENT_ID)) + CLIENT_ID
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, (
                ssl.create_default_context(cafile=cafile).wrap_socket(raw, server_hostname=host) if cafile
                else raw) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack(">i", len(body)) + body)
            data = b""
            while len(data) < 10:  # size, correlation id, error code
                chunk = s.recv(4096)
                if not chunk:
                    return "connection closed before an answer"
                data += chunk
    except OSError as e:
        return f"{host}:{port}: {e}"
    size, correlation_id, error_code = struct.unpack(">iih", data[:10])
    if correlation_id != CORRELATION_ID or size < 6:
        return f"malformed ApiVersions answer (size {size}, correlation id {correlation_id})"
    return None if error_code == 0 else f"ApiVersions error code {error_code}"


def main() -> int:
    host = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1"
    port = int(sys.argv[2]) if len(sys.argv) > 2 else int(os.environ.get("GROUPCOORD_PORT", "9092"))
    problem = check(host, port, cafile=sys.argv[3] if len(sys.argv) > 3 else None)
    if problem:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
