"""The docker-compose topology as local processes: one ZooKeeper, three groupcoord nodes, one Prometheus.

Usage: ``python deploy/local_cluster.py start [--secure]|stop|status|start-node N`` (``make cluster``,
``make cluster SECURE=1`` / ``make cluster-stop``; ``start-node N`` starts a node that was killed back into
the running cluster, in the mode the cluster was started in).

Rules:
- Everything listens on 127.0.0.1 only. Ports are fixed and documented, each overridable by an env var
  (tests pass free ports and a temp dir). The env vars are ``CLUSTER_*``, never ``GROUPCOORD_*`` (the
  server reads those as its own config and refuses unknown ones):

  ============================ ================= =============================================
  env var                      default           what
  ============================ ================= =============================================
  ``CLUSTER_DIR``              ``./cluster-data`` data, logs, generated configs, the PID file
  ``CLUSTER_ZK_PORT``          2181              ZooKeeper client port
  ``CLUSTER_NODE_PORTS``       9091,9092,9093    Kafka listeners of nodes 1, 2, 3
  ``CLUSTER_METRICS_PORTS``    9401,9402,9403    their /metrics ports
  ``CLUSTER_PROMETHEUS_PORT``  9090              Prometheus web UI and API
  ``CLUSTER_SCRAPE_INTERVAL``  5s                Prometheus scrape interval
  ============================ ================= =============================================

- Every process is started in its own session (it outlives ``make cluster``) with its output in a log
  file under ``CLUSTER_DIR``; its PID is recorded in ``CLUSTER_DIR/cluster.pids`` (JSON) as soon as it is
  started, so ``stop`` can clean up after a start that failed half way.
- ``stop`` ends only the recorded PIDs (and what is left in their own process groups, e.g. a node's fsync
  child), each only if ``/proc/PID/cmdline`` still shows the program we started (a PID may be reused):
  SIGTERM, a bounded wait, then SIGKILL.
- Every wait is bounded; a start that does not become ready stops what it started and exits non-zero.

Secured mode (``start --secure``; docs/cluster.md "Secured cluster", docs/security.md):
- Each node has one SASL_SSL listener (SCRAM-SHA-512 and -256) on its port, which is also the inter-broker
  listener: nodes replicate over TLS, check each other's host name, and log in as the super user ``admin``.
  The authorizer is on; ``admin`` may do everything, ``app`` (the sample application) gets Read, Write,
  Describe and Create on topics ``app-*`` and Read and Describe on groups ``app-*`` (PREFIXED ACLs).
- ``CLUSTER_DIR/certs/``: a CA and node certificates from deploy/certs.py, made when missing or expiring.
  ``CLUSTER_DIR/secrets.json``: the users' passwords, random, made once per CLUSTER_DIR and kept (0600).
  ``CLUSTER_DIR/nodeN.toml`` (the node's whole config, ``serve --config``), ``admin.properties`` and
  ``app.properties`` (Kafka client properties for ``--command-config``) and ``app-kcat.conf`` (librdkafka's
  names, ``kcat -F``) hold passwords: 0600.
- The users are written to ZooKeeper (``groupcoord users add --zookeeper``, the password on stdin) before
  any node starts; the ACLs are made through node 1 as ``admin`` once every node is up, and the start waits
  until every node lists them. Prometheus scrapes the plain-HTTP /metrics ports as in the plain mode.
- ``CLUSTER_DIR/cluster.mode`` says ``plain`` or ``secure``: ``start-node`` starts a node the same way.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_JAR = Path("/usr/share/java/slf4j-simple.jar")
NODE_IDS = (1, 2, 3)
CHROOT = "/groupcoord"
PID_FILE = "cluster.pids"
MODE_FILE = "cluster.mode"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0
CLI_TIMEOUT = 60.0
SECURE_LISTENER = "SASL_SSL"
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
USERS = ("admin", "app")
APP_PREFIX = "app-"
APP_ACLS = (("--topic", ("Read", "Write", "Describe", "Create")), ("--group", ("Read", "Describe")))
JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="{}" password="{}";'


def _ports(var: str, default: str) -> list[int]:
    ports = [int(p) for p in os.environ.get(var, default).split(",")]
    if len(ports) != len(NODE_IDS):
        raise SystemExit(f"{var} needs {len(NODE_IDS)} comma-separated ports, got {ports}")
    return ports


class Topology:
    """Where everything lives and listens, from the env vars above."""

    def __init__(self, secure: bool | None = None) -> None:
        self.dir = Path(os.environ.get("CLUSTER_DIR", "cluster-data")).resolve()
        if secure is None:  # the mode the cluster in CLUSTER_DIR was started in
            try:
                secure = (self.dir / MODE_FILE).read_text().strip() == "secure"
            except OSError:
                secure = False
        self.secure = secure
        self.zk_port = int(os.environ.get("CLUSTER_ZK_PORT", "2181"))
        self.node_ports = dict(zip(NODE_IDS, _ports("CLUSTER_NODE_PORTS", "9091,9092,9093")))
        self.metrics_ports = dict(zip(NODE_IDS, _ports("CLUSTER_METRICS_PORTS", "9401,9402,9403")))
        self.prometheus_port = int(os.environ.get("CLUSTER_PROMETHEUS_PORT", "9090"))
        self.scrape_interval = os.environ.get("CLUSTER_SCRAPE_INTERVAL", "5s")

    @property
    def pid_file(self) -> Path:
        return self.dir / PID_FILE

    @property
    def zk_connect(self) -> str:
        return f"127.0.0.1:{self.zk_port}{CHROOT}"

    @property
    def certs(self) -> Path:
        return self.dir / "certs"

    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.node_ports[i]}" for i in NODE_IDS)


# --- PID file ---------------------------------------------------------------------------------------------

def read_pids(top: Topology) -> dict[str, dict[str, object]]:
    try:
        return json.loads(top.pid_file.read_text())
    except FileNotFoundError:
        return {}


def _record(top: Topology, name: str, proc: subprocess.Popen[bytes], marker: str) -> None:
    pids = read_pids(top)
    pids[name] = {"pid": proc.pid, "marker": marker}
    tmp = top.pid_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(pids, indent=1))
    tmp.replace(top.pid_file)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def is_ours(pid: int, marker: str) -> bool:
    """The process ``pid`` exists, is not a zombie, and still runs the program we started."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and marker in _cmdline(pid)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


# --- start ------------------------------------------------------------------------------------------------

def _spawn(top: Topology, name: str, argv: list[str], marker: str, env: dict[str, str] | None = None,
           ) -> subprocess.Popen[bytes]:
    with open(top.dir / f"{name}.log", "ab") as out:
        proc = subprocess.Popen(argv, cwd=top.dir, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, env=env)
    _record(top, name, proc, marker)
    return proc


def _wait(what: str, probe, proc: subprocess.Popen[bytes], log: Path) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited at startup (status {proc.returncode}); see {log}:\n"
                               + _tail(log))
        try:
            if probe():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} not ready after {START_TIMEOUT:g} s; see {log}:\n" + _tail(log))


def _since(path: Path, offset: int) -> str:
    """What was written to ``path`` after its first ``offset`` bytes."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-3000:]
    except OSError:
        return ""


def _zk_ready(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"srvr")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    return b"Mode:" in data


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as r:
        return r.status == 200


def start_zookeeper(top: Topology) -> None:
    if not ZOOKEEPER_JAR.exists():
        raise RuntimeError(f"{ZOOKEEPER_JAR} is missing: `make cluster` installs Debian's zookeeper package")
    data = top.dir / "zookeeper"
    data.mkdir(exist_ok=True)
    cfg = top.dir / "zoo.cfg"
    cfg.write_text(f"tickTime=500\ndataDir={data}\nclientPort={top.zk_port}\nclientPortAddress=127.0.0.1\n"
                   "admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,mntr\nmaxClientCnxns=200\n")
    proc = _spawn(top, "zookeeper", ["java", "-Xms32m", "-Xmx256m", "-cp", f"{ZOOKEEPER_JAR}:{SLF4J_JAR}",
                                     "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)],
                  marker=str(cfg))
    _wait("ZooKeeper", lambda: _zk_ready(top.zk_port), proc, top.dir / "zookeeper.log")


def start_node(top: Topology, node_id: int) -> subprocess.Popen[bytes]:
    data = top.dir / f"node{node_id}"
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO))
    if top.secure:
        cfg = top.dir / f"node{node_id}.toml"
        return _spawn(top, f"node{node_id}", [sys.executable, "-m", "coordinator.cli", "serve", "--config", str(cfg)],
                      marker=f"--config {cfg} ", env=env)
    argv = [sys.executable, "-m", "coordinator.cli", "serve", "--node-id", str(node_id),
            "--host", "127.0.0.1", "--port", str(top.node_ports[node_id]),
            "--metrics-host", "127.0.0.1", "--metrics-port", str(top.metrics_ports[node_id]),
            "--data-dir", str(data), "--zookeeper-connect", top.zk_connect,
            "--zookeeper-session-timeout-ms", "6000"]
    return _spawn(top, f"node{node_id}", argv, marker=f"--data-dir {data} ", env=env)


ALERTS = Path(__file__).resolve().parent / "alerts.yml"


def write_prometheus_config(top: Topology) -> Path:
    """deploy/prometheus.yml's job and alert rules (deploy/alerts.yml), with the nodes' loopback metrics ports
    as targets."""
    targets = "\n".join(f"      - targets: ['127.0.0.1:{top.metrics_ports[i]}']\n        labels: {{node: 'node{i}'}}"
                        for i in NODE_IDS)
    path = top.dir / "prometheus.yml"
    path.write_text(f"# generated by deploy/local_cluster.py from deploy/prometheus.yml's job\n"
                    f"global:\n  scrape_interval: {top.scrape_interval}\n  evaluation_interval: "
                    f"{top.scrape_interval}\nrule_files:\n  - {ALERTS}\nscrape_configs:\n  - job_name: groupcoord\n"
                    f"    static_configs:\n{targets}\n")
    return path


def start_prometheus(top: Topology) -> None:
    cfg = write_prometheus_config(top)
    proc = _spawn(top, "prometheus", ["prometheus", f"--config.file={cfg}",
                                      f"--storage.tsdb.path={top.dir / 'prometheus'}",
                                      f"--web.listen-address=127.0.0.1:{top.prometheus_port}"],
                  marker=f"--config.file={cfg}")
    _wait("Prometheus", lambda: _http_ok(f"http://127.0.0.1:{top.prometheus_port}/-/ready"), proc,
          top.dir / "prometheus.log")


# --- secured mode -----------------------------------------------------------------------------------------

def _write_private(path: Path, text: str) -> None:
    """``text`` into ``path``, readable by its owner only from the moment it exists."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(text)
    tmp.replace(path)


def load_secrets(top: Topology) -> dict[str, str]:
    """The users' passwords: made at random the first time, then kept in ``CLUSTER_DIR/secrets.json``."""
    path = top.dir / "secrets.json"
    try:
        kept = json.loads(path.read_text())
    except FileNotFoundError:
        kept = {}
    if not all(isinstance(kept.get(u), str) and kept[u] for u in USERS):
        kept = {u: kept.get(u) or secrets.token_urlsafe(24) for u in USERS}
        _write_private(path, json.dumps(kept, indent=1) + "\n")
    return {u: kept[u] for u in USERS}


def _toml_value(v: object) -> str:
    """A TOML value: an integer, a literal string when that reads better (JAAS text is full of double quotes),
    else a basic string (JSON's string escapes are TOML's)."""
    if isinstance(v, int):
        return str(v)
    text = str(v)
    if '"' in text and "'" not in text and text.isprintable():
        return f"'{text}'"
    return json.dumps(text)


def _toml(values: dict[str, object]) -> str:
    """Flat TOML, every key quoted: dotted names stay one key (the loader would also accept nested tables)."""
    return "".join(f'"{k}" = {_toml_value(v)}\n' for k, v in values.items())


def node_config(top: Topology, node_id: int, admin_password: str) -> dict[str, object]:
    """Node ``node_id``'s whole secured config (the keys of docs/security.md)."""
    listener = f"{SECURE_LISTENER}://127.0.0.1:{top.node_ports[node_id]}"
    return {
        "node.id": node_id,
        "listeners": listener,
        "advertised.listeners": listener,
        "inter.broker.listener.name": SECURE_LISTENER,
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "sasl.mechanism.inter.broker.protocol": MECHANISMS[0],
        f"listener.name.{SECURE_LISTENER.lower()}.{MECHANISMS[0].lower()}.sasl.jaas.config":
            JAAS.format("admin", admin_password),
        "ssl.keystore.location": str(top.certs / f"node{node_id}.pem"),
        "ssl.truststore.location": str(top.certs / "ca.pem"),
        "ssl.endpoint.identification.algorithm": "https",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "data.dir": str(top.dir / f"node{node_id}"),
        "zookeeper.connect": top.zk_connect,
        "zookeeper.session.timeout.ms": 6000,
        "metrics.host": "127.0.0.1",
        "metrics.port": top.metrics_ports[node_id],
    }


def _properties(value: str) -> str:
    return value.replace("\\", "\\\\")


def client_properties(top: Topology, user: str, password: str) -> str:
    """Kafka's client properties (Java names) for ``user``: ``--command-config``, kafka-*.sh."""
    return (f"# User:{user} on the secured local cluster; bootstrap {top.bootstrap()}\n"
            f"security.protocol={SECURE_LISTENER}\nsasl.mechanism={MECHANISMS[0]}\n"
            f"sasl.jaas.config={_properties(JAAS.format(user, password))}\n"
            f"ssl.truststore.location={_properties(str(top.certs / 'ca.pem'))}\nssl.truststore.type=PEM\n")


def kcat_config(top: Topology, user: str, password: str) -> str:
    """librdkafka's names for the same settings (``kcat -F FILE``; also a ``--command-config`` file)."""
    return (f"# User:{user} on the secured local cluster (kcat -F this file -L)\n"
            f"bootstrap.servers={top.bootstrap()}\nsecurity.protocol={SECURE_LISTENER}\n"
            f"sasl.mechanisms={MECHANISMS[0]}\nsasl.username={user}\nsasl.password={_properties(password)}\n"
            f"ssl.ca.location={_properties(str(top.certs / 'ca.pem'))}\n")


def prepare_secure(top: Topology) -> dict[str, str]:
    """Certificates, passwords and every generated file of the secured mode; the passwords."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import certs  # deploy/certs.py

    print(certs.ensure(top.certs, len(NODE_IDS)))
    passwords = load_secrets(top)
    for i in NODE_IDS:
        _write_private(top.dir / f"node{i}.toml", "# generated by deploy/local_cluster.py (secured mode)\n"
                       + _toml(node_config(top, i, passwords["admin"])))
    for user in USERS:
        _write_private(top.dir / f"{user}.properties", client_properties(top, user, passwords[user]))
    _write_private(top.dir / "app-kcat.conf", kcat_config(top, "app", passwords["app"]))
    return passwords


def _cli(*args: str, stdin: str | None = None) -> str:
    """``groupcoord ARGS`` from this tree; RuntimeError with its output when it fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUPCOORD_")}
    env.update(PYTHONPATH=str(REPO))
    try:
        r = subprocess.run([sys.executable, "-m", "coordinator.cli", *args], cwd=REPO, env=env, input=stdin,
                           capture_output=True, text=True, timeout=CLI_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"groupcoord {' '.join(args)}: no answer within {CLI_TIMEOUT:g} s") from None
    if r.returncode != 0:
        raise RuntimeError(f"groupcoord {' '.join(args)} failed (status {r.returncode}):\n{r.stdout}{r.stderr}")
    return r.stdout


def create_users(top: Topology, passwords: dict[str, str]) -> None:
    """Every user's SCRAM credentials in ZooKeeper, before a node starts (the password goes on stdin)."""
    mechanisms = [a for m in MECHANISMS for a in ("--mechanism", m)]
    for user in USERS:
        _cli("users", "add", user, "--zookeeper", top.zk_connect, "--password-file", "/dev/stdin", *mechanisms,
             stdin=passwords[user] + "\n")


def create_acls(top: Topology) -> None:
    """The sample app's PREFIXED ACLs, made as admin through node 1; waits until every node lists them."""
    admin = ["--command-config", str(top.dir / "admin.properties")]
    for resource, operations in APP_ACLS:
        _cli("acls", "add", "-b", f"127.0.0.1:{top.node_ports[1]}", *admin, "--allow-principal", "User:app",
             resource, APP_PREFIX, "--resource-pattern-type", "prefixed",
             *(a for op in operations for a in ("--operation", op)))
    wanted = sum(len(ops) for _, ops in APP_ACLS)
    for i in NODE_IDS:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            out = _cli("acls", "list", "-b", f"127.0.0.1:{top.node_ports[i]}", *admin, "--principal", "User:app")
            if sum("User:app" in line for line in out.splitlines()) >= wanted:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {i} does not list User:app's {wanted} ACLs after {START_TIMEOUT:g} s:\n"
                                   + out)
            time.sleep(0.2)


def start(top: Topology) -> int:
    top.dir.mkdir(parents=True, exist_ok=True)
    running = {n: e for n, e in read_pids(top).items() if is_ours(int(e["pid"]), str(e["marker"]))}
    if running:
        print(f"already running from {top.dir}: {', '.join(running)}; `make cluster-stop` first",
              file=sys.stderr)
        return 1
    top.pid_file.unlink(missing_ok=True)
    (top.dir / MODE_FILE).write_text("secure\n" if top.secure else "plain\n")
    try:
        passwords = prepare_secure(top) if top.secure else {}
        start_zookeeper(top)
        if top.secure:
            create_users(top, passwords)
        logs = {i: top.dir / f"node{i}.log" for i in NODE_IDS}
        # the logs are appended to: only what this start writes counts (a restart finds the last run's lines)
        start_at = {i: log.stat().st_size if log.exists() else 0 for i, log in logs.items()}
        procs = {i: start_node(top, i) for i in NODE_IDS}
        for i, proc in procs.items():
            _wait(f"node {i}", lambda i=i: "groupcoord listening on" in _since(logs[i], start_at[i]), proc, logs[i])
        if top.secure:
            create_acls(top)
        start_prometheus(top)
    except (RuntimeError, OSError) as e:
        print(f"cluster start failed: {e}", file=sys.stderr)
        stop(top)
        return 1
    kind = f"secured: {SECURE_LISTENER}, {' and '.join(MECHANISMS)}, ACLs; " if top.secure else ""
    print(f"groupcoord cluster running ({kind}data and logs in {top.dir}):")
    print(f"  zookeeper   127.0.0.1:{top.zk_port}  (chroot {CHROOT})")
    for i in NODE_IDS:
        print(f"  node {i}      127.0.0.1:{top.node_ports[i]}  metrics http://127.0.0.1:{top.metrics_ports[i]}/metrics")
    print(f"  prometheus  http://127.0.0.1:{top.prometheus_port}/")
    print(f"bootstrap servers: {top.bootstrap()}" + (f"  ({SECURE_LISTENER}; CA {top.certs / 'ca.pem'})"
                                                     if top.secure else ""))
    if top.secure:
        print(f"client settings (--command-config): {top.dir / 'admin.properties'} (User:admin, super user), "
              f"{top.dir / 'app.properties'} (User:app: topics and groups {APP_PREFIX}*)")
        print(f"  kcat -F {top.dir / 'app-kcat.conf'} -L; passwords in {top.dir / 'secrets.json'}")
    print(f"stop with: make cluster-stop   (PIDs in {top.pid_file})")
    return 0


# --- stop -------------------------------------------------------------------------------------------------

def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # each was started as its own session: its process group id is its PID
    except ProcessLookupError:
        pass


def stop(top: Topology) -> int:
    """End the recorded processes (Prometheus and the nodes first, ZooKeeper last); 0 when none is left."""
    pids = read_pids(top)
    order = [n for n in ("prometheus", *(f"node{i}" for i in NODE_IDS), "zookeeper") if n in pids]
    for name in order:
        pid, marker = int(pids[name]["pid"]), str(pids[name]["marker"])
        if is_ours(pid, marker):
            os.kill(pid, signal.SIGTERM)
    left: list[str] = []
    deadline = time.monotonic() + STOP_TIMEOUT
    for name in order:
        pid, marker = int(pids[name]["pid"]), str(pids[name]["marker"])
        while is_ours(pid, marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        if is_ours(pid, marker):
            print(f"{name} (pid {pid}) ignored SIGTERM; killing its process group", file=sys.stderr)
            _signal_group(pid, signal.SIGKILL)
        elif group_members(pid):
            _signal_group(pid, signal.SIGKILL)  # e.g. a node's fsync child outliving its parent
        end = time.monotonic() + 5
        while (is_ours(pid, marker) or group_members(pid)) and time.monotonic() < end:
            time.sleep(0.05)
        if is_ours(pid, marker) or group_members(pid):
            left.append(f"{name} (pid {pid})")
    if left:
        print(f"still running: {', '.join(left)}", file=sys.stderr)
        return 1
    top.pid_file.unlink(missing_ok=True)
    print(f"stopped: {', '.join(order) or 'nothing was running'} (data kept in {top.dir})")
    return 0


def start_one_node(top: Topology, node_id: int) -> int:
    """Start node ``node_id`` again (after it was killed), into the running cluster."""
    entry = read_pids(top).get(f"node{node_id}")
    if entry and is_ours(int(entry["pid"]), str(entry["marker"])):
        print(f"node {node_id} is running (pid {entry['pid']})", file=sys.stderr)
        return 1
    log = top.dir / f"node{node_id}.log"
    start_at = log.stat().st_size if log.exists() else 0
    proc = start_node(top, node_id)
    try:
        _wait(f"node {node_id}", lambda: "groupcoord listening on" in _since(log, start_at), proc, log)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    print(f"node {node_id} running again on 127.0.0.1:{top.node_ports[node_id]} (pid {proc.pid})")
    return 0


def status(top: Topology) -> int:
    pids = read_pids(top)
    for name, e in pids.items():
        print(f"{name:<11} pid {e['pid']:<8} {'running' if is_ours(int(e['pid']), str(e['marker'])) else 'gone'}")
    return 0 if pids else 1


def main(argv: list[str]) -> int:
    commands = {"start": start, "stop": stop, "status": status}
    if len(argv) == 2 and argv[0] == "start-node" and argv[1].isdigit() and int(argv[1]) in NODE_IDS:
        return start_one_node(Topology(), int(argv[1]))
    if argv == ["start", "--secure"]:
        return start(Topology(secure=True))
    if len(argv) != 1 or argv[0] not in commands:
        print(f"usage: {Path(__file__).name} start [--secure]|stop|status|start-node N", file=sys.stderr)
        return 2
    return commands[argv[0]](Topology(secure=False) if argv[0] == "start" else Topology())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
