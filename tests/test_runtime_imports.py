"""The import graph of ``coordinator/``, ``protocol/``, ``client/`` and ``spark_bridge/`` has no cycle (the
last one, ``client/admin_cli.py`` <-> ``client/retry_cli.py``, went with issue #35), and only the composition
roots import the broker.

Rules checked (issue #20, item 8: data flows one way, connection -> dispatch -> services -> storage/replication):
- Every import counts: at module level, under ``if TYPE_CHECKING:`` (a type a module names is a dependency of
  its design) and inside functions (a deferred import is still one). ``from X import Y`` is an edge to the
  module ``X.Y`` when that is a module, else to ``X``. Only modules of these two packages are nodes.
- The graph is acyclic; a failure prints one cycle found, module by module.
- In ``coordinator/runtime`` only ``broker.py`` and ``server.py`` (the composition roots) import
  ``coordinator.runtime.broker``: a connection is given a request handler (dispatch.py), a service the
  server's context (services.py), never the broker itself.
- Besides the composition roots, only ``connection_limits.py`` (limits on connections as a whole) names
  ``connection.py``; the services see a connection through ``dispatch.Slot`` alone, and the poller through
  its own ``Polled`` protocol.
- The interfaces that stand between the parts (``dispatch``, ``services``, ``poller.Polled``) stay true: every
  member they name exists on what is given in their place (no type checker runs in ``make test``).
The graph is read from the source with ``ast`` (nothing is imported), so a test run sees the files as they are.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("coordinator", "protocol", "client", "spark_bridge")
BROKER = "coordinator.runtime.broker"
CONNECTION = "coordinator.runtime.connection"
COMPOSITION_ROOTS = {"coordinator.runtime.broker", "coordinator.runtime.server"}


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (source file, whether it is a package's ``__init__``)."""
    found: dict[str, tuple[Path, bool]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            found[".".join(parts)] = (path, is_package)
    return found


def _imports(name: str, path: Path, is_package: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that the module ``name`` imports anywhere in its source."""
    package = name if is_package else name.rpartition(".")[0]
    deps: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            deps.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import x, from ..y import z
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                if f"{source}.{alias.name}" in known:
                    deps.add(f"{source}.{alias.name}")
                elif source in known:
                    deps.add(source)
    deps.discard(name)
    return deps


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, is_package, known) for name, (path, is_package) in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path whose first and last module are the same, or None (iterative DFS)."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    for start in sorted(graph):
        if colour[start] != WHITE:
            continue
        colour[start] = GREY
        path = [start]
        stack = [iter(sorted(graph[start]))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = BLACK
                stack.pop()
                continue
            state = colour.get(nxt, BLACK)  # a module outside the graph cannot close a cycle
            if state == GREY:
                return path[path.index(nxt):] + [nxt]
            if state == WHITE:
                colour[nxt] = GREY
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_the_cycle_finder_finds_a_cycle_and_accepts_a_dag() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_every_kind_of_import() -> None:
    """The parser is not blind: a module-level, a TYPE_CHECKING-only and a function-level import each give an
    edge (otherwise an acyclic answer would prove nothing)."""
    graph = import_graph()
    assert len(graph) > 50, sorted(graph)
    assert BROKER in graph["coordinator.runtime.server"]  # module level
    assert "coordinator.runtime.topics" in graph["coordinator.runtime.topic_cleaner"]  # TYPE_CHECKING only
    assert "coordinator.cluster.metadata" in graph[BROKER]  # only inside _cluster_metadata()
    assert "protocol.messages.fetch" in graph["protocol.messages"]  # from package import submodule


def test_the_import_graph_has_no_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_only_the_composition_roots_import_the_broker() -> None:
    graph = import_graph()
    importers = {name for name, deps in graph.items() if name.startswith("coordinator.runtime.") and BROKER in deps}
    assert importers <= COMPOSITION_ROOTS, f"import {BROKER} outside the composition roots: " \
                                           f"{sorted(importers - COMPOSITION_ROOTS)}"


def test_only_the_roots_and_the_connection_limits_import_the_connection() -> None:
    graph = import_graph()
    allowed = COMPOSITION_ROOTS | {"coordinator.runtime.connection_limits"}
    importers = {name for name, deps in graph.items() if CONNECTION in deps}
    assert importers <= allowed, f"import {CONNECTION} beyond {sorted(allowed)}: {sorted(importers - allowed)}"


def _protocol_members(protocol: type) -> set[str]:
    """The members a Protocol class names: its annotated attributes, its methods and properties."""
    names = set(getattr(protocol, "__annotations__", {}))
    names |= {n for n, v in vars(protocol).items() if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    return names


def _class_members(cls: type) -> set[str]:
    """What an instance of ``cls`` has: the class's attributes plus every ``self.x`` its methods assign or annotate."""
    names = set(dir(cls))
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    names.add(t.attr)
    return names


def _interface_pairs() -> list[tuple[type, type]]:
    from coordinator.runtime import dispatch, poller, services
    from coordinator.runtime.broker import Broker
    from coordinator.runtime.cluster_topics import ClusterTopics
    from coordinator.runtime.connection import Connection
    from coordinator.runtime.replication import Replication
    from coordinator.runtime.security.peer_login import PeerLogin
    from coordinator.runtime.topics import TopicService

    return [(dispatch.RequestHandler, Broker), (dispatch.ClientConnection, Connection), (poller.Polled, Connection),
            (services.ServerContext, Broker), (services.HostedTopics, TopicService),
            (services.ReplicatedTopics, ClusterTopics), (services.FollowerReplication, Replication),
            (services.PeerConnector, PeerLogin)]


@pytest.mark.parametrize("protocol, given", _interface_pairs(), ids=lambda c: c.__name__)
def test_what_is_given_has_every_member_its_interface_names(protocol: type, given: type) -> None:
    named = _protocol_members(protocol)
    assert named, f"{protocol.__name__} names nothing"
    missing = named - _class_members(given)
    assert not missing, f"{given.__name__} lacks {sorted(missing)} named by {protocol.__name__}"


def test_the_member_check_sees_a_missing_member() -> None:
    from coordinator.runtime.dispatch import ClientConnection

    class Incomplete:
        def __init__(self) -> None:
            self.host = "h"

        def wake(self) -> None:
            pass

    assert {"host", "wake"} <= _class_members(Incomplete)
    assert {"abort", "fd", "key", "closed"} <= _protocol_members(ClientConnection) - _class_members(Incomplete)
