"""coordinator.core: the sans-IO consumer-group coordinator (Kafka classic group protocol and offsets).

Entry point: ``Coordinator`` (see coordinator.py for the runtime contract). No I/O, no clock: every call
takes ``now_ms``; durable state changes only through the records in ``Outcome.records``.
"""

from .config import GroupConfig
from .coordinator import SUPPORTED_APIS, Coordinator, GroupView, SeededIds
from .errors import Err
from .outcome import Outcome
from .shard import ShardStatus
from .sharding import java_string_hash, partition_for

__all__ = ["SUPPORTED_APIS", "Coordinator", "Err", "GroupConfig", "GroupView", "Outcome", "SeededIds", "ShardStatus",
           "java_string_hash", "partition_for"]
