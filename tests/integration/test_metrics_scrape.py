"""/metrics is valid Prometheus exposition text (promtool check metrics) and counts real requests."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request

from kafka.admin import KafkaAdminClient
from server_process import ServerProcess  # type: ignore[import-not-found]


def _scrape(srv: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10) as r:
        return r.read().decode()


def test_metrics_pass_promtool_and_count_requests(server: ServerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)
    admin.describe_cluster()
    admin.close()
    text = _scrape(server)
    promtool = shutil.which("promtool")
    assert promtool, "promtool must be installed (Debian package prometheus; make test installs it)"
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                           timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    lines = [ln for ln in text.splitlines() if ln.startswith('groupcoord_requests_total{api="Metadata"}')]
    assert lines and float(lines[0].split()[-1]) >= 1
    assert 'groupcoord_request_latency_seconds_bucket{api="ApiVersions"' in text
