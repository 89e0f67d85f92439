"""tests/core/transactions: make the fake runtime (txn_harness.py) importable."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
