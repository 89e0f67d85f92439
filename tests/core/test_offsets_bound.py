"""offsets.max.committed in the core: new groups are refused past the bound, existing groups keep committing.

Rules checked (coordinator/core/offsets.py ``_Room``):
- A commit that would add an offset is refused with POLICY_VIOLATION once every shard together holds the
  bound; replacing an offset is never refused; a group that has offsets may add up to 10% past the bound.
- A refused commit leaves no group object behind.
- Both paths (the generic handler and the one-partition ``commit_offset``) refuse the same way, and each
  refused partition counts in ``offsets_refused``; deleting groups makes room again.
"""

from __future__ import annotations

from core_harness import DELETE, Harness

from coordinator.core.errors import Err
from coordinator.core.offsets import PendingCommit

POLICY_VIOLATION = 44


def errors(h: Harness, token) -> list[int]:
    return [p["error_code"] for t in h[token]["topics"] for p in t["partitions"]]


def test_new_groups_are_refused_past_the_bound_and_existing_ones_keep_committing() -> None:
    h = Harness(offsets_max_committed=20)
    assert errors(h, h.commit("a", -1, "", {("t", p): 1 for p in range(12)})) == [0] * 12
    assert errors(h, h.commit("b", -1, "", {("t", p): 1 for p in range(8)})) == [0] * 8
    assert h.coord.offsets_held() == 20 and h.coord.offsets_refused == 0

    assert errors(h, h.commit("c", -1, "", {("t", 0): 5, ("u", 1): 5})) == [POLICY_VIOLATION] * 2
    assert h.coord.committed_offsets("c") == {} and h.coord.offsets_refused == 2
    assert h.coord.group("c") is None  # a refused commit leaves no group behind (no memory per refusal)
    # existing groups: replacing is never refused; new partitions up to 10% past the bound (22)
    assert errors(h, h.commit("a", -1, "", {("t", p): 2 for p in range(12)})) == [0] * 12
    assert errors(h, h.commit("a", -1, "", {("t", 12): 3, ("t", 13): 3, ("t", 14): 3, ("t", 0): 4})) == \
        [0, 0, POLICY_VIOLATION, 0]
    assert h.coord.offsets_held() == 22 and h.coord.committed_offsets("a")[("t", 0)].offset == 4
    assert h.coord.offsets_refused == 3

    token = h.send(DELETE, 2, {"groups_names": ["b"]})
    assert h[token]["results"][0]["error_code"] == 0 and h.coord.offsets_held() == 14
    assert errors(h, h.commit("c", -1, "", {("t", 0): 5, ("u", 1): 5})) == [0, 0]
    assert h.coord.committed_offsets("c")[("u", 1)].offset == 5


def test_the_one_partition_path_refuses_the_same_way() -> None:
    h = Harness(offsets_max_committed=3)
    for group in ("a", "b", "c"):
        result = h.coord.commit_offset(h.now, 8, group, -1, "", None, "t", 0, 7, -1, "", -1)
        assert isinstance(result, PendingCommit)
        h.coord.commit_settled(result, True)
    assert h.coord.commit_offset(h.now, 8, "d", -1, "", None, "t", 0, 7, -1, "", -1) == Err.POLICY_VIOLATION
    assert h.coord.offsets_refused == 1 and h.coord.committed_offsets("d") == {} and h.coord.group("d") is None
    again = h.coord.commit_offset(h.now, 8, "a", -1, "", None, "t", 0, 8, -1, "", -1)
    assert isinstance(again, PendingCommit)  # replacing
    h.coord.commit_settled(again, True)
    assert h.coord.committed_offsets("a")[("t", 0)].offset == 8
