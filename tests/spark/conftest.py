"""Fixtures for the Spark suite: one SparkSession (local[2]) and one real groupcoord server for the run.

- ``spark``: session-scoped, ``local[2]``, Python workers on this interpreter, the ``groupcoord`` source
  registered. Starting it costs 5-10 s, so every Spark test shares it (and `make test` runs them all on one
  of its pytest-xdist workers: tests/conftest.py's GROUPS).
- ``server``: `groupcoord serve` on a free 127.0.0.1 port (tests/integration/server_process.py), stopped by
  PID at the end of the run. Each test uses its own topics (``topic`` fixture names them uniquely).
- Helpers for the tests live in ``spark_support.py`` (this folder is put on sys.path).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(Path(__file__).parent))

from server_process import ServerProcess

SERVER_FLAGS = ("--group-min-session-timeout-ms", "1000", "--group-initial-rebalance-delay-ms", "0",
                "--num-partitions", "1")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path_factory.mktemp("spark-server") / "data", *SERVER_FLAGS).start()
    try:
        srv.wait_loaded()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def bootstrap(server: ServerProcess) -> str:
    return server.bootstrap


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # the JVM and its Python workers talk over loopback only
    from pyspark.sql import SparkSession

    import spark_bridge

    session = (SparkSession.builder.master("local[2]").appName("groupcoord-spark-tests")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.streaming.stopTimeout", "10s")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    spark_bridge.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
