"""deploy/ as files, checked offline: the compose file against the Compose specification, the Dockerfile's
required lines (Debian has no hadolint package), prometheus.yml with promtool, the Grafana dashboard's
queries against the metric names the server declares, and the protocol-speaking healthcheck script.
The secured variant: the overlay docker-compose.secure.yml (alone and merged into docker-compose.yml) against
the Compose specification and its wiring; each node's TOML as the server loads it, with the environment its
entrypoint script (run here with sh, a stand-in for ``groupcoord``) hands over; deploy/certs.py's
certificates in TLS handshakes by host name; the TLS healthcheck against a real SASL_SSL listener.

Rules: no Docker engine is needed; tools are the venv's check-jsonschema and Debian's promtool.
"""

from __future__ import annotations

import json
import re
import ssl
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(DEPLOY))

import certs  # noqa: E402  (deploy/certs.py)
from server_process import ServerProcess  # noqa: E402

from client.security import SecurityConfig, parse_jaas  # noqa: E402
from coordinator import config  # noqa: E402

NODES = ("node1", "node2", "node3")
CHECK_JSONSCHEMA = Path(sys.executable).with_name("check-jsonschema")


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


def compose_secure() -> dict:
    return YAML(typ="safe").load((DEPLOY / "docker-compose.secure.yml").read_text())


def validate_compose(path: Path) -> None:
    r = subprocess.run([str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.compose-spec", str(path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def merge(base: Any, override: Any, key: str = "") -> Any:
    """Compose's merge of an override file, as far as these files need it: mappings merge key by key; volumes,
    ports and secrets are joined (unique by mount target / entry); any other value is replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        return {k: merge(base[k], override[k], k) if k in base and k in override else override.get(k, base.get(k))
                for k in {**base, **override}}
    if isinstance(base, list) and isinstance(override, list) and key in ("volumes", "ports", "secrets"):
        target = (lambda e: e.split(":")[1] if key == "volumes" else e)  # noqa: E731
        kept = [e for e in base if target(e) not in {target(o) for o in override}]
        return kept + override
    return override


def test_compose_file_validates_against_the_compose_spec() -> None:
    validate_compose(DEPLOY / "docker-compose.yml")


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
    assert "./alerts.yml:/etc/prometheus/alerts.yml:ro" in prom["volumes"]
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


def test_alert_rules_pass_promtool_and_name_exported_metrics() -> None:
    r = subprocess.run(["promtool", "check", "rules", str(DEPLOY / "alerts.yml")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "SUCCESS: 3 rules found" in r.stdout, r.stdout + r.stderr
    cfg = YAML(typ="safe").load((DEPLOY / "prometheus.yml").read_text())
    assert cfg["rule_files"] == ["alerts.yml"]
    rules = YAML(typ="safe").load((DEPLOY / "alerts.yml").read_text())["groups"][0]["rules"]
    assert {r["alert"] for r in rules} == {"GroupcoordConsumerLagSeconds", "GroupcoordGroupsStuck", "GroupcoordNodeDown"}
    lag = next(r for r in rules if r["alert"] == "GroupcoordConsumerLagSeconds")
    assert "groupcoord_group_lag_seconds" in lag["expr"] and "> 300" in lag["expr"]


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


# --- the secured variant --------------------------------------------------------------------------------------

def test_secure_overlay_validates_alone_and_merged(tmp_path: Path) -> None:
    validate_compose(DEPLOY / "docker-compose.secure.yml")
    merged = tmp_path / "docker-compose.merged.yml"
    with merged.open("w") as f:
        YAML(typ="safe").dump(merge(compose(), compose_secure()), f)
    validate_compose(merged)


def test_secure_overlay_wires_users_certificates_and_acls() -> None:
    base = compose()["services"]
    services = merge(compose(), compose_secure())["services"]
    assert set(services) == {*base, "secure-init", "acls-init"}
    init = services["secure-init"]
    assert init["depends_on"] == {"zookeeper": {"condition": "service_healthy"}}
    assert "./certs:/certs:ro" in init["volumes"] and "secure:/etc/groupcoord/secure" in init["volumes"]
    assert init["secrets"] == ["admin_password", "app_password"]
    script = init["entrypoint"][-1]
    for user in ("admin", "app"):
        assert user in script.split("for user in ", 1)[1].split(";", 1)[0]
    assert "groupcoord users add \"$$user\" --zookeeper zookeeper:2181/groupcoord" in script
    assert "--password-file \"/run/secrets/$${user}_password\"" in script
    assert "--mechanism SCRAM-SHA-512 --mechanism SCRAM-SHA-256" in script
    assert re.search(r"install -o 10001 -g 10001 -m 0400 \S*node\$\$n\.pem", script)
    assert "useradd --system --uid 10001" in (DEPLOY / "Dockerfile").read_text()  # the uid the files go to
    for name in NODES:
        svc, port = services[name], base[name]["environment"]["GROUPCOORD_PORT"]
        assert svc["depends_on"]["secure-init"] == {"condition": "service_completed_successfully"}
        assert svc["depends_on"]["zookeeper"] == {"condition": "service_healthy"}
        assert f"./secure/{name}.toml:/etc/groupcoord/node.toml:ro" in svc["volumes"]
        assert "secure:/etc/groupcoord/secure:ro" in svc["volumes"]
        assert f"{name}-data:/var/lib/groupcoord" in svc["volumes"]  # the data volume is kept
        assert svc["healthcheck"]["test"] == ["CMD", "python", "/usr/local/bin/groupcoord-healthcheck", name, port,
                                              "/etc/groupcoord/secure/ca.pem"]
        assert f"{port}:{port}" in svc["ports"]
        assert (DEPLOY / "secure" / f"{name}.toml").is_file()
    acls = services["acls-init"]
    assert {n: d["condition"] for n, d in acls["depends_on"].items()} == dict.fromkeys(NODES, "service_healthy")
    script = acls["entrypoint"][-1]
    assert script.count("--allow-principal User:app") == 2
    assert "--topic app- --resource-pattern-type prefixed" in script
    assert "--operation Read --operation Write --operation Describe --operation Create" in script
    assert "--group app- --resource-pattern-type prefixed" in script
    secrets = compose_secure()["secrets"]
    assert secrets == {"admin_password": {"file": "./secrets/admin.password"},
                       "app_password": {"file": "./secrets/app.password"}}
    assert "secure" in compose_secure()["volumes"]
    # what `make compose-secrets` makes is never committed
    ignored = (REPO / ".gitignore").read_text().splitlines()
    assert "deploy/certs/" in ignored and "deploy/secrets/" in ignored
    # no password in the file: each JAAS text takes it from the secret at run time
    text = (DEPLOY / "docker-compose.secure.yml").read_text()
    assert text.count('password=\\"$$') == 2 and not re.search(r'password=\\"(?!\$\$)', text)


def image_env() -> dict[str, str]:
    return dict(re.findall(r"(GROUPCOORD_[A-Z_]+)=(\S+)", (DEPLOY / "Dockerfile").read_text()))


def run_entrypoint(tmp_path: Path, service: str, password: str) -> tuple[dict[str, str], list[str]]:
    """The node's entrypoint script (compose's ``$$`` as ``$``) under sh, with the image's and the service's
    environment, /etc/groupcoord/secure in ``tmp_path``, and a ``groupcoord`` that reports what it was given."""
    secure = tmp_path / "secure"
    secure.mkdir(exist_ok=True)
    (secure / "admin.password").write_text(password + "\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "groupcoord"
    stub.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    "print(json.dumps({'env': dict(os.environ), 'argv': sys.argv[1:]}))\n")
    stub.chmod(0o755)
    svc = merge(compose(), compose_secure())["services"][service]
    assert svc["entrypoint"][:2] == ["sh", "-ec"]
    script = svc["entrypoint"][2].replace("$$", "$").replace("/etc/groupcoord/secure", str(secure))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", **image_env(), **svc["environment"]}
    r = subprocess.run(["sh", "-ec", script], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    return {k: v for k, v in out["env"].items() if k.startswith("GROUPCOORD_")}, out["argv"]


@pytest.mark.parametrize("node_id", [1, 2, 3])
def test_secure_node_config_loads_with_its_entrypoint(tmp_path: Path, node_id: int) -> None:
    """The server accepts the TOML with the environment the entrypoint execs it with; the inter-broker login
    carries admin's password from the secret; the plain listener's env vars are gone."""
    name = f"node{node_id}"
    env, argv = run_entrypoint(tmp_path, name, "pw-" + name)
    assert argv == ["serve", "--config", "/etc/groupcoord/node.toml"]
    assert not {"GROUPCOORD_HOST", "GROUPCOORD_PORT", "GROUPCOORD_ADVERTISED_HOST"} & set(env)
    assert parse_jaas(env["GROUPCOORD_SASL_JAAS_CONFIG"]) == ("admin", "pw-" + name)
    cfg = config.load(DEPLOY / "secure" / f"{name}.toml", env=env)
    port = 9090 + node_id
    assert cfg["node.id"] == node_id and cfg["zookeeper.connect"] == "zookeeper:2181/groupcoord"
    assert cfg["listeners"] == f"SASL_SSL://0.0.0.0:{port}"
    assert cfg["advertised.listeners"] == f"SASL_SSL://{name}:{port}"
    assert cfg["inter.broker.listener.name"] == "SASL_SSL"
    assert cfg["sasl.enabled.mechanisms"] == "SCRAM-SHA-512,SCRAM-SHA-256"
    assert cfg["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    assert cfg["ssl.keystore.location"] == f"/etc/groupcoord/secure/{name}.pem"
    assert cfg["ssl.truststore.location"] == "/etc/groupcoord/secure/ca.pem"
    assert cfg["ssl.endpoint.identification.algorithm"] == "https"
    assert cfg["authorizer.class.name"] == "kafka.security.authorizer.AclAuthorizer"
    assert cfg["super.users"] == "User:admin"
    assert cfg["metrics.host"] == "0.0.0.0" and cfg["metrics.port"] == 9404  # Prometheus scrapes nodeN:9404


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, hostname: str) -> None:
    """A TLS handshake in memory; raises ssl.SSLError when the client (or server) refuses."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(c_in, c_out, server_hostname=hostname)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(10):
        for side, obj in (("c", c), ("s", s)):
            if not done[side]:
                try:
                    obj.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            return
    raise AssertionError("handshake did not finish")


def test_certs_name_each_node_and_stay_private(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    r = subprocess.run([sys.executable, str(DEPLOY / "certs.py"), str(out)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "certificates made" in r.stdout, r.stdout + r.stderr
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert modes == {"ca.pem": 0o644, "node1.pem": 0o600, "node2.pem": 0o600, "node3.pem": 0o600,
                     "client.crt": 0o644, "client.key": 0o600}
    client = ssl.create_default_context(cafile=str(out / "ca.pem"))
    for i in (1, 2, 3):
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.load_cert_chain(str(out / f"node{i}.pem"))  # key + chain in one file, as the server reads it
        for name in ("127.0.0.1", "localhost", f"node{i}"):
            handshake(server, client, name)
        with pytest.raises(ssl.SSLCertVerificationError):
            handshake(server, client, f"node{i % 3 + 1}")
    # the client pair for mutual TLS: a server requiring client certificates accepts it
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(str(out / "node1.pem"))
    server.load_verify_locations(str(out / "ca.pem"))
    server.verify_mode = ssl.CERT_REQUIRED
    mtls = ssl.create_default_context(cafile=str(out / "ca.pem"))
    mtls.load_cert_chain(str(out / "client.crt"), str(out / "client.key"))
    handshake(server, mtls, "node1")
    # kept while good; made again (a whole new set) when a file is missing or asked to
    ca = (out / "ca.pem").read_bytes()
    assert "kept" in certs.ensure(out)
    (out / "node2.pem").unlink()
    assert "missing node2.pem" in certs.ensure(out) and (out / "ca.pem").read_bytes() != ca
    assert certs.problem(out) is None
    assert "--force" in certs.ensure(out, force=True)
    assert certs.problem(out, nodes=4) == "missing node4.pem"
    assert not list(out.glob(".*.tmp"))


def test_tls_healthcheck_speaks_apiversions_over_tls(tmp_path: Path) -> None:
    """deploy/healthcheck.py with a CA file (TLS) against a real server with deploy/certs.py's node1 certificate:
    healthy on the SASL_SSL listener under a name the certificate has; unhealthy under another name, and on a
    plaintext port."""
    out = tmp_path / "certs"
    certs.make(out)
    toml = tmp_path / "node.toml"
    keystore = out / "node1.pem"
    toml.write_text(f'"listeners" = "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"\n'
                    f'"ssl.keystore.location" = "{keystore}"\n')
    server = ServerProcess(tmp_path / "data", "--config", str(toml), listeners=True).start()
    hc = [sys.executable, str(DEPLOY / "healthcheck.py")]
    try:
        tls_port, ca = str(server.ports["SASL_SSL"]), str(out / "ca.pem")
        for host in ("127.0.0.1", "localhost"):
            ok = subprocess.run([*hc, host, tls_port, ca], capture_output=True, text=True, timeout=30)
            assert ok.returncode == 0, ok.stderr
        wrong_ca = tmp_path / "other"
        certs.make(wrong_ca)
        bad = subprocess.run([*hc, "127.0.0.1", tls_port, str(wrong_ca / "ca.pem")], capture_output=True,
                             text=True, timeout=30)
        assert bad.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in bad.stderr
        plain = subprocess.run([*hc, "127.0.0.1", str(server.port), ca], capture_output=True, text=True,
                               timeout=30)
        assert plain.returncode == 1 and "unhealthy" in plain.stderr
    finally:
        server.stop()


def test_secured_make_cluster_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The secured `make cluster`'s generated files, offline: node TOMLs the server loads (0600: they hold
    admin's password), properties files our --command-config reads, passwords made once and kept."""
    import local_cluster

    monkeypatch.setenv("CLUSTER_DIR", str(tmp_path / "cluster-data"))
    top = local_cluster.Topology(secure=True)
    top.dir.mkdir()
    first = local_cluster.prepare_secure(top)
    assert set(first) == {"admin", "app"} and first["admin"] != first["app"] and len(first["app"]) >= 24
    assert local_cluster.prepare_secure(top) == first  # kept per CLUSTER_DIR
    for name in ("secrets.json", "node1.toml", "node2.toml", "node3.toml", "admin.properties", "app.properties",
                 "app-kcat.conf"):
        assert stat.S_IMODE((top.dir / name).stat().st_mode) == 0o600, name
    for i in (1, 2, 3):
        cfg = config.load(top.dir / f"node{i}.toml", env={})
        assert cfg["listeners"] == cfg["advertised.listeners"] == f"SASL_SSL://127.0.0.1:{top.node_ports[i]}"
        assert cfg["ssl.keystore.location"] == str(top.certs / f"node{i}.pem")
        assert parse_jaas(cfg.get("listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config")) == (
            "admin", first["admin"])
    for name, user in (("admin.properties", "admin"), ("app.properties", "app"), ("app-kcat.conf", "app")):
        sec = SecurityConfig.from_properties(top.dir / name)
        assert (sec.security_protocol, sec.sasl_mechanism, sec.sasl_username, sec.sasl_password, sec.ssl_cafile) == (
            "SASL_SSL", "SCRAM-SHA-512", user, first[user], str(top.certs / "ca.pem"))
