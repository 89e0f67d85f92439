"""The fixtures aiokafka's vendored transactional tests use, given from a real groupcoord server instead of
upstream's Kafka-in-docker (aiokafka v0.14.0 tests/conftest.py).

Rules:
- The test files and _testutil.py stay unmodified; everything they need comes from here, under upstream's
  names: ``loop`` (a class's own asyncio loop) and ``setup_test_class`` (sets ``loop``, ``kafka_host``,
  ``kafka_port``, ``hosts`` and ``kafka_version`` on the test class), plus ``kafka_server``.
- One server for the session, as upstream has one Kafka container for the session (the tests share its
  state: every test uses transactional id "sobaka_producer"). It is configured as upstream's broker:
  Kafka 2.8.1's config/server.properties as aiokafka's docker/scripts/start-kafka.sh overrides it
  (num.partitions=2, auto topic creation, group.initial.rebalance.delay.ms=0).
- ``kafka_version`` is that of upstream's default image (Makefile: aiolibs/kafka:2.13_2.8.1); every test
  here asks only for >=0.11.0.
- Upstream's SSL, SASL, Kerberos, ACL and kafka-configs fixtures are not given: no test in these files uses them.
- Every test collected from this folder is marked ``compat``. Only a test needing what the server cannot
  give in principle may be deselected, listed in DESELECTED with its reason; none is.
- Each test registers the server in server_process.started, so that a failing test's report ends with the
  server's log (tests/conftest.py). Every wait is bounded: _testutil's run_until_complete (120 s a test,
  30 s a cleanup) and ServerProcess's start/stop timeouts.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parents[1] / "integration"))

import server_process
from server_process import ServerProcess

KAFKA_VERSION = "2.8.1"
# server.properties of Kafka 2.8.1 with start-kafka.sh's overrides, in our flags (the others are our defaults)
SERVER_FLAGS = ("--num-partitions", "2", "--auto-create-topics-enable", "true",
                "--group-initial-rebalance-delay-ms", "0")
# test node id (relative to this folder) -> why the server cannot run it in principle
DESELECTED: dict[str, str] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep, drop = [], []
    for item in items:
        if HERE not in Path(str(item.path)).parents:
            keep.append(item)
            continue
        item.add_marker(pytest.mark.compat)
        (drop if item.nodeid.split("aiokafka_suite/", 1)[-1] in DESELECTED else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def kafka_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("aiokafka-suite") / "data", *SERVER_FLAGS).start()
    try:
        srv.wait_loaded()
        yield srv
    finally:
        alive = srv.alive()
        status = srv.stop()
        print(f"--- server (alive at teardown: {alive}, exit status {status}) ---\n{srv.log()[-200000:]}")


@pytest.fixture(autouse=True)
def _report_server_log(request: pytest.FixtureRequest) -> None:
    """A test using the server gets its log in its failure report (tests/conftest.py reads ``started``)."""
    if "kafka_server" in request.fixturenames:
        srv = request.getfixturevalue("kafka_server")
        if srv not in server_process.started:
            server_process.started.append(srv)


@pytest.fixture(scope="class")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """As upstream: one new asyncio loop per test class, closed after it."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    if not loop.is_closed():
        loop.call_soon(loop.stop)
        loop.run_forever()
        loop.close()
    gc.collect()
    asyncio.set_event_loop(None)


@pytest.fixture(scope="class")
def setup_test_class(request: pytest.FixtureRequest, loop: asyncio.AbstractEventLoop,
                     kafka_server: ServerProcess) -> None:
    cls = request.cls
    cls.loop = loop
    cls.kafka_host = "127.0.0.1"
    cls.kafka_port = kafka_server.port
    cls.hosts = [kafka_server.bootstrap]
    cls.kafka_version = KAFKA_VERSION
