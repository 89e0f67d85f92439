"""The custom assignor shown in the package docstring runs and honours the assignor contract."""

from __future__ import annotations

import textwrap

import client.assignors as assignors_pkg
from client.assignors import PartitionAssignor
from client.consumer_protocol import Subscription


def documented_example_source() -> str:
    doc = assignors_pkg.__doc__ or ""
    start = doc.index("    import zlib")
    end = doc.index("\nRegister it", start)
    return textwrap.dedent(doc[start:end])


def load_hash_assignor() -> type:
    namespace: dict = {}
    code = compile(documented_example_source(), "client/assignors/__init__.py (docstring)", "exec")
    exec(code, namespace)  # noqa: S102 - runs our own documentation example
    return namespace["HashAssignor"]


def test_documented_custom_assignor_assigns_every_partition_once_to_a_subscriber() -> None:
    hash_assignor = load_hash_assignor()()
    assert isinstance(hash_assignor, PartitionAssignor)
    assert (hash_assignor.name, hash_assignor.rebalance_protocol) == ("hash", "eager")
    subs = {"C0": Subscription(("t0",)), "C1": Subscription(("t0", "t1")), "C2": Subscription(("t1", "gone"))}
    result = hash_assignor.assign({"t0": 5, "t1": 7}, subs)
    assigned = [tp for a in result.values() for tp in a.assigned_partitions]
    assert sorted(assigned) == [("t0", p) for p in range(5)] + [("t1", p) for p in range(7)]
    for member, assignment in result.items():
        assert all(t in subs[member].topics for t, _ in assignment.assigned_partitions)
    # deterministic: the same inputs give the same answer (no randomness, unlike the seed's RandomAssignor)
    assert hash_assignor.assign({"t0": 5, "t1": 7}, subs) == result


def test_builtin_assignors_satisfy_the_interface() -> None:
    for name, cls in assignors_pkg.BUILTIN_ASSIGNORS.items():
        instance = cls()
        assert isinstance(instance, PartitionAssignor)
        assert instance.name == name
    assert assignors_pkg.BUILTIN_ASSIGNORS["cooperative-sticky"].rebalance_protocol == "cooperative"
