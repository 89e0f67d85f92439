"""Docker healthcheck of a secured node: ApiVersions (v0) over TLS to its SASL_SSL listener; exit 0 if answered.

Usage: ``python healthcheck_tls.py HOST PORT [CAFILE]`` (CAFILE default ``/etc/groupcoord/secure/ca.pem``).

Rules: standard library only (it runs in the image's bare interpreter); deploy/healthcheck.py's check over
TLS: the node's certificate must chain to CAFILE and name HOST (as a client checks it), then one ApiVersions
request, which a SASL listener answers before authentication; healthy means a well-formed answer with our
correlation id and error code 0. One attempt, bounded by a timeout.
"""

from __future__ import annotations

import socket
import ssl
import struct
import sys

API_VERSIONS, CORRELATION_ID, CLIENT_ID = 18, 0x6863, b"healthcheck"
DEFAULT_CAFILE = "/etc/groupcoord/secure/ca.pem"


def check(host: str, port: int, cafile: str, timeout: float = 3.0) -> str | None:
    """None when healthy, else why not."""
    body = struct.pack(">hhih", API_VERSIONS, 0, CORRELATION_ID, len(CLIENT_ID)) + CLIENT_ID
    try:
        context = ssl.create_default_context(cafile=cafile)
        with socket.create_connection((host, port), timeout=timeout) as raw, \
                context.wrap_socket(raw, server_hostname=host) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack(">i", len(body)) + body)
            data = b""
            while len(data) < 10:  # size, correlation id, error code
                chunk = s.recv(4096)
                if not chunk:
                    return "connection closed before an answer"
                data += chunk
    except (OSError, ssl.SSLError) as e:
        return f"{host}:{port}: {e}"
    size, correlation_id, error_code = struct.unpack(">iih", data[:10])
    if correlation_id != CORRELATION_ID or size < 6:
        return f"malformed ApiVersions answer (size {size}, correlation id {correlation_id})"
    return None if error_code == 0 else f"ApiVersions error code {error_code}"


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or not argv[1].isdigit():
        print("usage: healthcheck_tls.py HOST PORT [CAFILE]", file=sys.stderr)
        return 2
    problem = check(argv[0], int(argv[1]), argv[2] if len(argv) == 3 else DEFAULT_CAFILE)
    if problem:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
