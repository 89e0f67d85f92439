"""deploy/ as files, checked offline: the compose file against the Compose specification, the Dockerfile's
required lines (Debian has no hadolint package), prometheus.yml with promtool, the Grafana dashboard's
queries against the metric names the server declares, and the protocol-speaking healthcheck script.

Rules: no Docker engine is needed; tools are the venv's check-jsonschema and Debian's promtool.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
sys.path.insert(0, str(REPO / "tests" / "integration"))

from server_process import ServerProcess  # noqa: E402

NODES = ("node1", "node2", "node3")


def dashboard_exprs() -> list[str]:
    dash = json.loads((DEPLOY / "grafana" / "groupcoord.json").read_text())
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (ours are all ``groupcoord_*``; plus Prometheus' ``up``)."""
    names = set(re.findall(r"\bgroupcoord_[a-z_]+", expr))
    if re.search(r"\bup\{", expr):
        names.add("up")
    return names


def compose() -> dict:
    return YAML(typ="safe").load((DEPLOY / "docker-compose.yml").read_text())


def test_compose_file_validates_against_the_compose_spec() -> None:
    tool = Path(sys.executable).with_name("check-jsonschema")
    r = subprocess.run([str(tool), "--builtin-schema", "vendor.compose-spec", str(DEPLOY / "docker-compose.yml")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_compose_names_the_services_and_wires_them() -> None:
    services = compose()["services"]
    assert set(services) == {"zookeeper", *NODES, "prometheus", "grafana"}
    assert "healthcheck" in services["zookeeper"]
    node_ids, host_ports = set(), set()
    for name in NODES:
        svc = services[name]
        env = svc["environment"]
        assert svc["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
        assert svc["depends_on"]["zookeeper"]["condition"] == "service_healthy"
        node_ids.add(env["GROUPCOORD_NODE_ID"])
        # one listener that works inside the network (compose DNS name) and from the host (same port published)
        assert env["GROUPCOORD_ADVERTISED_HOST"] == name
        assert f"{env['GROUPCOORD_PORT']}:{env['GROUPCOORD_PORT']}" in svc["ports"]
        assert env["GROUPCOORD_ZOOKEEPER_CONNECT"].startswith("zookeeper:2181")
        assert svc["volumes"] == [f"{name}-data:/var/lib/groupcoord"]
        host_ports.add(env["GROUPCOORD_PORT"])
    assert node_ids == {"1", "2", "3"} and len(host_ports) == 3
    prom = services["prometheus"]
    assert "./prometheus.yml:/etc/prometheus/prometheus.yml:ro" in prom["volumes"]
    assert {n: d["condition"] for n, d in prom["depends_on"].items()} == dict.fromkeys(NODES, "service_healthy")
    graf = services["grafana"]
    assert "./grafana/groupcoord.json:/var/lib/grafana/dashboards/groupcoord.json:ro" in graf["volumes"]
    assert "./grafana/provisioning:/etc/grafana/provisioning:ro" in graf["volumes"]
    for vol in ("zookeeper-data", "node1-data", "node2-data", "node3-data"):
        assert vol in compose()["volumes"]


def test_prometheus_config_scrapes_the_three_nodes() -> None:
    r = subprocess.run(["promtool", "check", "config", str(DEPLOY / "prometheus.yml")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    cfg = YAML(typ="safe").load((DEPLOY / "prometheus.yml").read_text())
    (job,) = cfg["scrape_configs"]
    assert [t for sc in job["static_configs"] for t in sc["targets"]] == [f"{n}:9404" for n in NODES]


def test_dockerfile_has_the_required_lines() -> None:
    """hadolint is not packaged by Debian (apt-cache policy hadolint: nothing), so the lines are checked."""
    text = (DEPLOY / "Dockerfile").read_text()
    lines = [ln.strip() for ln in re.sub(r"\\\n\s*", " ", text).splitlines() if ln.strip()
             and not ln.lstrip().startswith("#")]
    instructions = [ln.split()[0] for ln in lines]
    assert re.match(r"FROM python:3\.11-slim$", lines[0])
    assert instructions.count("FROM") == 1 and instructions.count("ENTRYPOINT") == 1
    run = next(ln for ln in lines if ln.startswith("RUN pip install"))
    assert "'.[cluster]'" in run and "--no-cache-dir" in run and "-e " not in run
    assert "useradd --system" in run
    user = [ln for ln in lines if ln.startswith("USER ")]
    assert user and not user[-1].split()[1].startswith(("root", "0")), "must run as a non-root user"
    assert instructions.index("USER") > instructions.index("RUN")
    assert 'VOLUME ["/var/lib/groupcoord"]' in lines
    assert "GROUPCOORD_DATA_DIR=/var/lib/groupcoord" in text
    health = next(ln for ln in lines if ln.startswith("HEALTHCHECK"))
    assert "groupcoord-healthcheck" in health, "the healthcheck speaks ApiVersions, not a TCP poke"
    assert "COPY deploy/healthcheck.py /usr/local/bin/groupcoord-healthcheck" in lines
    assert lines[-1] == 'ENTRYPOINT ["groupcoord", "serve"]'
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    assert ignore[ignore.index("**") + 1:].count("!coordinator/") == 1 and ".venv" not in ignore


def test_dashboard_names_only_declared_metrics() -> None:
    """Every metric a panel queries is declared in coordinator/metrics.py (the live check is in
    test_local_cluster.py); the panels for what is not exported yet are left out."""
    source = (REPO / "coordinator" / "metrics.py").read_text()
    declared = set(re.findall(r'"(groupcoord_[a-z_]+)"', source))
    exported = declared | {f"{n}_total" for n in declared} | {f"{n}_bucket" for n in declared} | {"up"}
    exprs = dashboard_exprs()
    assert len(exprs) >= 10
    for expr in exprs:
        assert metric_names(expr) and metric_names(expr) <= exported, expr
    text = (DEPLOY / "grafana" / "groupcoord.json").read_text()
    for wanted in ("groupcoord_groups", "groupcoord_rebalances_total", "groupcoord_rebalance_duration_seconds",
                   "groupcoord_offset_commits_total", "OffsetCommit", "groupcoord_log_flush_latency_seconds",
                   "groupcoord_under_replicated_partitions", "groupcoord_offline_partitions",
                   "groupcoord_isr_shrinks_total", "groupcoord_replication_lag_messages"):
        assert wanted in text


def test_healthcheck_speaks_apiversions(tmp_path: Path) -> None:
    hc = [sys.executable, str(DEPLOY / "healthcheck.py"), "127.0.0.1"]
    server = ServerProcess(tmp_path / "data").start()
    try:
        ok = subprocess.run([*hc, str(server.port)], capture_output=True, text=True, timeout=30)
        assert ok.returncode == 0, ok.stderr
        # an open port that does not speak Kafka (the HTTP metrics listener) is not healthy
        http = subprocess.run([*hc, str(server.metrics_port)], capture_output=True, text=True, timeout=30)
        assert http.returncode == 1 and "unhealthy" in http.stderr
    finally:
        server.stop()
    down = subprocess.run([*hc, str(server.port)], capture_output=True, text=True, timeout=30)
    assert down.returncode == 1 and "unhealthy" in down.stderr
