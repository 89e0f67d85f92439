"""/metrics is valid Prometheus exposition text (promtool check metrics) and counts real requests."""

from __future__ import annotations

import shutil
import subprocess

from kafka.admin import KafkaAdminClient
from server_process import ServerProcess  # type: ignore[import-not-found]


def test_metrics_pass_promtool_and_count_requests(server: ServerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)
    admin.describe_cluster()
    admin.close()
    text = server.scrape()
    promtool = shutil.which("promtool")
    assert promtool, "promtool must be installed (Debian package prometheus; make test installs it)"
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                           timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    assert server.metric('groupcoord_requests_total{api="Metadata"}') >= 1
    assert 'groupcoord_request_latency_seconds_bucket{api="ApiVersions"' in text
