"""Target assignments of KIP-848 groups computed off the event loop (a worker thread), so that a big group's
assignor run does not stall every other connection (issue #36: "assignment work never blocks the event loop").

Rules:
- The core makes the job (core/consumer_group/heartbeat.py ``target_job``: the assignor's inputs, immutable) on the
  loop; ``TargetJob.run`` runs on a worker thread (``trio.to_thread``), reading nothing but the job; its result
  (or its error: a Reject from a failing assignor, or a bug) is handed back on the loop to the caller's ``done``,
  which turns it into records (``target_records``). Python's GIL still serialises the work, but the loop gets the
  interpreter back every switch interval (5 ms) instead of waiting for the whole computation.
- Only jobs of weight >= ``min_weight`` (members plus subscribed partitions) go to a thread: below it the thread
  hop costs more than the assignor (``wants``). Only while ``run`` serves (the broker's background nursery);
  otherwise callers compute inline.
- The caller keeps the group's other operations queued until ``done`` (one computation per group at a time);
  jobs of different groups run concurrently, up to trio's default thread limit.
- ``done`` is called exactly once per job, on the loop; an exception it raises is logged, never lost in the
  nursery.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from coordinator.core.consumer_group.heartbeat import TargetJob

log = logging.getLogger("groupcoord.consumer_groups")

# about 1 ms of the uniform assignor here: ``assignors.uniform`` timed directly (best of 5), 1,000 members x 4,000
# partitions 1.4 ms, 2,500 x 2,500 3.6 ms
MIN_WEIGHT = 5000

Done = Callable[[Any, "Exception | None"], None]  # (targets, None) or (None, the error)


class AssignmentWorker:
    def __init__(self, min_weight: int = MIN_WEIGHT) -> None:
        self.min_weight = min_weight
        self.running = False
        self._send, self._receive = trio.open_memory_channel[tuple["TargetJob", Done]](math.inf)

    def wants(self, job: TargetJob) -> bool:
        """Whether ``job`` goes to a worker thread (else the caller runs it inline)."""
        return self.running and job.weight >= self.min_weight

    def submit(self, job: TargetJob, done: Done) -> None:
        self._send.send_nowait((job, done))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.running = True
        task_status.started()
        try:
            async with trio.open_nursery() as nursery:
                async for job, done in self._receive:
                    nursery.start_soon(self._one, job, done)
        finally:
            self.running = False

    async def _one(self, job: TargetJob, done: Done) -> None:
        try:
            targets = await trio.to_thread.run_sync(job.run)
        except Exception as e:  # the assignor's Reject, or a bug: the caller answers it
            self._call(done, None, e, job)
            return
        self._call(done, targets, None, job)

    @staticmethod
    def _call(done: Done, targets: Any, err: Exception | None, job: TargetJob) -> None:
        try:
            done(targets, err)
        except Exception:
            log.exception("consumer group %s: applying its target assignment failed", job.group_id)
