"""Kafka transactions, coordinator side (KIP-98, KIP-447, KIP-890 part 1; Kafka 3.9 TV0/TV1): a sans-IO
state machine over ``__transaction_state`` (coordinator.py), its records (records.py), states (state.py),
per-id metadata and transitions (metadata.py), and the error rewrites per request version (errors.py).
"""

from .config import TxnConfig
from .coordinator import PidAllocationError, TxnCoordinator, TxnView
from .outcome import MarkerTask, TxnOutcome, TxnWrite
from .records import RecordError, TxnLogValue
from .state import TxnState

__all__ = ["MarkerTask", "PidAllocationError", "RecordError", "TxnConfig", "TxnCoordinator", "TxnLogValue",
           "TxnOutcome", "TxnState", "TxnView", "TxnWrite"]
