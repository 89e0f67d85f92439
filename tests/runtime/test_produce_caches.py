"""The produce path caches a topic's rules and effective configs for existing topics only: Produce requests
naming topics a client made up are answered UNKNOWN_TOPIC_OR_PARTITION and leave no cache entry behind
(memory must not grow with what a client claims)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coordinator.config import Config
from coordinator.metrics import Metrics
from coordinator.runtime.broker import Broker
from protocol import codec
from protocol.errors import ErrorCode
from protocol.record_batch import build_batch


class FakeSlot:
    done = False
    body: dict[str, Any] | None = None

    def complete(self, body: dict[str, Any] | None) -> None:
        self.done, self.body = True, body


async def test_made_up_topic_names_leave_no_cache_entries(tmp_path: Path) -> None:
    broker = Broker(Config({"data.dir": str(tmp_path), "log.journal.fsync.process": False}), Metrics())
    await broker.start()
    try:
        ts = broker.topic_service
        assert ts is not None
        ts.create("real", 1)
        batch = build_batch([(b"k", b"v", (), 1)])
        names = [f"made-up-{i}" for i in range(500)] + ["real"]
        body = {"transactional_id": None, "acks": 0, "timeout_ms": 1000, "topic_data": [
            {"name": n, "partition_data": [{"index": 0, "records": batch}]} for n in names]}
        request = codec.decode_request(codec.encode_request(0, 9, 1, "t", body)[4:])
        slot = FakeSlot()
        ts.handle_produce(request, slot)  # type: ignore[arg-type]
        assert slot.done
        assert {key[0] for key in ts._rules} == {"real"}
        assert set(ts._effective) == {"real"}
        # the answers themselves (acks=1)
        request = codec.decode_request(codec.encode_request(0, 9, 2, "t", {**body, "acks": 1, "topic_data":
                                                                         body["topic_data"][:2]})[4:])
        answered = FakeSlot()
        ts.handle_produce(request, answered)  # type: ignore[arg-type]
        assert answered.done and answered.body is not None
        codes = [p["error_code"] for t in answered.body["responses"] for p in t["partition_responses"]]
        assert codes == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2
        assert set(ts._effective) == {"real"}
    finally:
        await broker.stop()
