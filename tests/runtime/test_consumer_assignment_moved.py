"""A batch whose target was computed on a worker thread (runtime/consumer_assignment.py) comes back after its shard
was unloaded or reloaded (ConsumerGroupService._assigned): nothing of it is written or reverted into the new state,
every operation of the batch is answered NOT_COORDINATOR, and the group's queue goes on. Also the worker itself:
each job's ``done`` is called once, on the loop, with the result or the error."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import trio

from coordinator.core.consumer_group.heartbeat import TargetJob
from coordinator.core.consumer_group.model import Err, Reject
from coordinator.core.shard import ShardStatus
from coordinator.runtime.consumer_assignment import AssignmentWorker
from coordinator.runtime.consumer_batch import Part
from coordinator.runtime.consumer_groups import ConsumerGroupService, append_error
from protocol.errors import ErrorCode


class FakeCore:
    def __init__(self, groups: object, status: ShardStatus) -> None:
        self.groups, self.status = groups, status

    def consumer_groups(self, shard: int) -> object:
        return self.groups

    def shard_status(self, shard: int) -> ShardStatus:
        return self.status


def _service(core: FakeCore) -> Any:
    service = object.__new__(ConsumerGroupService)
    service.core = core  # type: ignore[attr-defined]
    service._draining, service._inflight, service._queues = set(), {}, {}
    service.drained = []
    service._drain = lambda group_id, op: service.drained.append(group_id)
    return service


def _batch(groups: object, answers: list[Any]) -> Any:
    parts = [Part(None, answers.append), Part(None, answers.append)]
    restored: list[bool] = []
    return SimpleNamespace(group_id="g", shard=3, groups=groups, parts=parts, items=[],
                           restore=lambda: restored.append(True), restored=restored)


def test_a_batch_whose_shard_was_reloaded_is_answered_not_coordinator_and_changes_nothing() -> None:
    old, new = object(), object()
    answers: list[Any] = []
    service = _service(FakeCore(new, ShardStatus.ACTIVE))  # reloaded: other state objects
    service._queues["g"] = ["next"]
    batch = _batch(old, answers)
    service._inflight["g"] = batch
    service._assigned(batch, None, {"m": {}}, None)
    assert len(answers) == 2 and all(append_error(e) == ErrorCode.NOT_COORDINATOR for e in answers)
    assert all("moved while its target was computed" in str(e) for e in answers)
    assert all("moved while its target was computed" in str(e) for e in answers)
    assert batch.restored == [] and batch.items == []  # nothing written, nothing reverted into the new state
    assert "g" not in service._inflight and service.drained == ["g"]  # the queue goes on


def test_a_batch_whose_shard_is_no_longer_led_is_answered_not_coordinator() -> None:
    groups = object()
    answers: list[Any] = []
    service = _service(FakeCore(groups, ShardStatus.FOLLOWING))
    batch = _batch(groups, answers)
    service._assigned(batch, None, {"m": {}}, None)
    assert len(answers) == 2 and all(append_error(e) == ErrorCode.NOT_COORDINATOR for e in answers)
    assert all("moved while its target was computed" in str(e) for e in answers)


def test_the_worker_calls_done_once_with_the_result_or_the_error() -> None:
    calls: list[tuple[Any, Any]] = []

    def failing(specs: Any, partitions: Any) -> Any:
        raise Reject(Err.UNKNOWN_SERVER_ERROR, "boom")

    def job(assignor: Any) -> TargetJob:
        return TargetJob("g", 1, 0, {"m": {}}, set(), {"m": None}, {}, assignor, lambda fn: fn())  # type: ignore[dict-item]

    async def main() -> None:
        worker = AssignmentWorker(0)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            assert worker.running and worker.wants(job(lambda s, p: {}))
            worker.submit(job(lambda s, p: {"m": {"t": frozenset({0})}}), lambda t, e: calls.append((t, e)))
            worker.submit(job(failing), lambda t, e: calls.append((t, e)))
            with trio.fail_after(10):
                while len(calls) < 2:
                    await trio.sleep(0.01)
            await trio.sleep(0.05)  # a second call of either done would come by now
            nursery.cancel_scope.cancel()
        assert not worker.running

    trio.run(main)
    assert len(calls) == 2  # once per job
    results = sorted(calls, key=lambda c: c[1] is not None)
    assert results[0] == ({"m": {"t": frozenset({0})}}, None)
    assert results[1][0] is None and isinstance(results[1][1], Reject)
    assert not AssignmentWorker(5000).wants(TargetJob("g", 1, 0, {}, set(), {}, {}, None, None))  # type: ignore[arg-type]
