"""For every test: the librdkafka guard (see rdkafka_guard.py); the end of its servers' logs in the report of
a failing test; `make test`'s two phases (--phase, the `serial` mark) and its pytest-xdist scheduling (worker
count for -n auto, units of work handed out longest first)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import rdkafka_guard


@pytest.fixture(autouse=True)
def librdkafka_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Fails the test when any confluent-kafka client it made logged a protocol parse failure."""
    lines: list[str] = []
    try:
        rdkafka_guard.install(monkeypatch, lines)
    except ImportError:  # confluent-kafka is a test dependency; without it no test can make such a client
        yield lines
        return
    yield lines
    assert not lines, "librdkafka could not parse our answers:\n" + "\n".join(lines[:20])


# --- The servers' side of a failure ----------------------------------------------------------------------------
# A failing test's report ends with the last lines of the log of every `groupcoord serve` it started (through
# tests/integration/server_process.py), with its PID and exit status: what a server saw of a failure that
# shows only on a busy machine or under `make test`'s workers is then in the report itself.
SERVER_LOG_LINES = 40


def _started_servers() -> list[Any]:
    module = sys.modules.get("server_process")  # imported by the tests that start servers, by that name
    return getattr(module, "started", []) if module is not None else []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    _started_servers().clear()
    yield
    _started_servers().clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    for srv in _started_servers():
        proc = getattr(srv, "proc", None)
        if proc is None:
            continue
        status = proc.poll()
        lines = srv.log().splitlines()[-SERVER_LOG_LINES:]
        state = "running" if status is None else f"exit status {status}"
        report.sections.append((f"groupcoord server pid {proc.pid} ({state} at {call.when}), last {len(lines)} "
                                "log lines", "\n".join(lines)))


# --- Two phases (`make test`): the suite on pytest-xdist workers, then the tests marked `serial` alone ------------
# `serial` is for a test that needs the machine to itself to keep its clocks: it loads the CPU itself while it
# measures a deadline, or it gives another process a fixed time to act. Each mark says why, in one line.


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--phase", choices=("all", "parallel", "serial"), default="all",
                     help="all: every selected test (the default); parallel: those not marked serial; "
                          "serial: only those marked serial (make test runs parallel on workers, then serial)")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    phase = config.getoption("phase")
    if phase == "all":
        return
    keep, drop = [], []
    for item in items:
        (keep if (item.get_closest_marker("serial") is not None) == (phase == "serial") else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


# --- Parallel runs (`make test`: pytest-xdist, `-n N --dist loadgroup`) ----------------------------------------
# With --dist loadgroup this file's scheduler hands out the work. A unit of work is a folder named in GROUPS
# (tests/spark: one JVM and one server for all its tests, on one worker), else a file (so module-scoped
# fixtures, such as tests/security's secured server, are made once). xdist_group marks are not used: with
# pytest 9.2 xdist 3.8 no longer sees them (pytest-dev/pytest-xdist#1386); a mark's group would still be
# honoured here if xdist passes it on again. Units go out longest first, so that a long cluster test does not
# start last and keep one worker running alone at the end. The estimates are only an order: seconds as
# `make test` measured them for the slow units (UNIT_S), else seconds per test by folder; a file missing from
# UNIT_S (new, renamed) is just ordered by its folder.

WORKERS = 6  # -n auto (make test): at most this many workers, and no more than there are units of work
GROUPS = {"tests/spark/": "spark"}  # path prefix -> unit name
# seconds per unit, the median of five `make test` runs on 2 busy cores (6 workers)
UNIT_S = {
    "spark": 205,
    "tests/cluster/test_cluster_group_failover.py": 97,
    "tests/cluster/test_cluster_follower_replay.py": 86,
    "tests/cluster/test_cluster_replication.py": 84,
    "tests/cluster/test_cluster_preferred_leader.py": 79,
    "tests/cluster/test_cluster_security.py": 72,
    "tests/deploy/test_local_cluster.py": 70,
    "tests/compat/test_burrow.py": 69,
    "tests/cluster/test_cluster_topic_admin.py": 63,
    "tests/compat/test_compat_configs.py": 46,
    "tests/security/test_cli_security.py": 40,
    "tests/cluster/test_cluster_membership.py": 38,
    "tests/cluster/test_cluster_fencing.py": 36,
    "tests/cluster/test_cluster_kill_loop.py": 34,
    "tests/cluster/test_cluster_fast_failover.py": 40,
    "tests/security/test_acls_consumer_protocol.py": 42,
    "tests/integration/test_consumer_group_regex.py": 40,
    "tests/integration/test_cli_consumer_groups.py": 20,
    "tests/cluster/test_cluster_fast_failover_zk.py": 30,
    "tests/integration/test_topic_configs.py": 29,
    "tests/compat/test_compressed_produce.py": 29,
    "tests/compat/test_compat_kafkajs.py": 27,
    "tests/integration/test_offsets_bound.py": 25,
    "tests/client/test_member_live.py": 24,
    "tests/integration/test_fetch_produce.py": 24,
    "tests/cluster/test_cluster_security_zk.py": 23,
    "tests/integration/test_metadata_auto_create.py": 23,
    "tests/protocol/test_codec_roundtrip.py": 23,
    "tests/compat/test_compat_ours.py": 22,
    "tests/client/test_retry_live.py": 22,
    "tests/security/test_reauthentication.py": 21,
    "tests/integration/test_cli_admin.py": 20,
    "tests/deploy/test_deploy_files.py": 19,
    "tests/protocol/test_cross_encoding.py": 19,
    "tests/integration/test_transactions.py": 45,
    "tests/integration/test_cli_transactions.py": 20,
    "tests/compat/aiokafka_suite/test_transactional_producer.py": 20,
    "tests/compat/aiokafka_suite/test_transactional_consumer.py": 10,
    "tests/integration/test_transactions_crash.py": 45,
    "tests/compat/test_kip848_js_clients.py": 30,
    "tests/integration/test_offset_history.py": 25,
    "tests/integration/test_groups_history.py": 12,
}
PER_TEST_S = {"cluster": 2.0, "compat": 4.0, "deploy": 3.0, "integration": 1.5, "security": 1.2, "client": 0.4,
              "runtime": 0.1, "storage": 0.1, "core": 0.05, "protocol": 0.02}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """As many workers as the files named (folders counted by their test files), at most WORKERS (or
    PYTEST_XDIST_AUTO_NUM_WORKERS), and none for a single file: it runs in this process, without the start-up
    of workers (`make test ARGS=tests/core/test_group_rules.py`). With -k or -m the count is of the files."""
    most = int(os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or WORKERS)
    units: set[str] = set()
    for arg in config.args:
        path = Path(arg.split("::", 1)[0])
        if not path.is_absolute():
            path = config.invocation_params.dir / path
        files = sorted(path.rglob("test_*.py")) if path.is_dir() else [path]
        for f in files:
            try:
                units.add(work_unit(f.resolve().relative_to(config.rootpath).as_posix()))
            except ValueError:  # outside the repository
                units.add(str(f))
        if len(units) >= most:
            break
    return min(most, len(units)) if len(units) > 1 else 0


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: its group, else its file."""
    if nodeid.rfind("@") > nodeid.rfind("]"):  # "path::test[params]@group": an xdist_group mark, if passed on
        return nodeid.rsplit("@", 1)[1]
    path = nodeid.split("::", 1)[0]
    for prefix, group in GROUPS.items():
        if path.startswith(prefix):
            return group
    return path


def unit_estimate_s(unit: str, tests: int) -> float:
    if unit in UNIT_S:
        return UNIT_S[unit]
    parts = unit.split("/")
    return tests * PER_TEST_S.get(parts[1] if len(parts) > 2 else "", 0.1)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "loadgroup":
        return None  # --dist load, loadfile, ...: xdist's own scheduler
    from xdist.scheduler import LoadScopeScheduling

    class LongestFirstScheduling(LoadScopeScheduling):
        """xdist's loadscope with work_unit() as the scope and the longest unit first. A worker gets its next
        unit once it is down to the one test it holds (it needs that test's successor before it starts it),
        not earlier, so that no unit waits behind a long test while another worker is idle."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            longest = max(self.workqueue, key=lambda unit: unit_estimate_s(unit, len(self.workqueue[unit])))
            self.workqueue.move_to_end(longest, last=False)
            super()._assign_work_unit(node)

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) > 1:
                return
            self._assign_work_unit(node)

    return LongestFirstScheduling(config, log)
