"""``groupcoord audit``: the audit trail of a server's data dir (admin changes and authorization denials).

Rules:
- Reads ``<data dir>/audit`` directly, read-only, also while the server runs (append-only segments; a batch
  still being written is skipped). Events oldest first.
- ``--since`` takes an ISO time (``2026-11-24T14:00:00``, UTC unless it carries an offset) or a duration
  back from now (``90s``, ``15m``, ``2h``, ``7d``); ``--json`` prints one JSON object a line (the stored
  event), otherwise a table: TIME (UTC), PRINCIPAL, HOST, CLIENT, API, OPERATION, RESOURCE, OUTCOME.
- A bad ``--since`` is exit 2 with one line; no audit log yet prints nothing (exit 0).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from datetime import UTC, datetime
from typing import Any

_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("audit", help="the audit trail: admin changes and authorization denials")
    p.add_argument("--data-dir", default="./data", help="the server's data dir (default ./data)")
    p.add_argument("--since", help="ISO time or a duration back from now (15m, 2h, 7d)")
    p.add_argument("--json", action="store_true", help="one JSON object a line")


def parse_since(text: str, now_s: float) -> int:
    m = _DURATION.match(text)
    if m:
        return int((now_s - int(m.group(1)) * _UNIT_S[m.group(2)]) * 1000)
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def run(args: argparse.Namespace) -> int:
    from coordinator.runtime.security.audit import read_events

    try:
        since = parse_since(args.since, time.time()) if args.since else 0
    except ValueError:
        print(f"groupcoord audit: --since {args.since!r} is neither an ISO time nor a duration like 15m",
              file=sys.stderr)
        return 2
    events = list(read_events(args.data_dir, since))
    if args.json:
        for e in events:
            print(json.dumps(e, separators=(",", ":")))
        return 0
    from client.admin_cli import table

    headers = ("TIME", "PRINCIPAL", "HOST", "CLIENT", "API", "OPERATION", "RESOURCE", "OUTCOME")
    rows = [(datetime.fromtimestamp(e.get("time", 0) / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3],
             str(e.get("principal")), str(e.get("host")), str(e.get("client_id")), str(e.get("api")),
             str(e.get("operation")), str(e.get("resource")), str(e.get("outcome"))) for e in events]
    table(headers, rows)
    return 0
