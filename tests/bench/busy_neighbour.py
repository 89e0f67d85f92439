"""A busy neighbour for the commit-latency runs: a bounded, repeatable stand-in for the host's noise.

Run as ``python -m tests.bench.busy_neighbour DUTY SECONDS``: spin DUTY (0 < DUTY <= 1) of every 10 ms and
sleep the rest, for at most SECONDS, then exit. ``start_neighbours`` starts one per core; the caller ends
them with ``stop_neighbours`` (by their PIDs, which it holds), and each ends by itself at SECONDS anyway.

Why: the commit p99 target is decided by the machine's CPU and disk noise, which comes and goes between
runs. A neighbour taking a known share of every core makes "how does the server behave when CPU is
scarce" a figure that can be compared run to run, for ours and the durable floor alike.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

PERIOD_S = 0.010
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def spin(duty: float, seconds: float) -> None:
    end = time.perf_counter() + seconds
    while (now := time.perf_counter()) < end:
        busy_until = now + PERIOD_S * duty
        while time.perf_counter() < busy_until:
            pass
        time.sleep(PERIOD_S * (1 - duty))


def start_neighbours(duty: float, seconds: float, count: int | None = None) -> list[subprocess.Popen[bytes]]:
    """One neighbour per core (or ``count``), each spinning ``duty`` of its time for at most ``seconds``."""
    if not 0 < duty <= 1:
        raise ValueError(f"duty must be in (0, 1], not {duty}")
    n = count if count is not None else (os.cpu_count() or 1)
    return [subprocess.Popen([sys.executable, "-m", "tests.bench.busy_neighbour", str(duty), str(seconds)], cwd=REPO)
            for _ in range(n)]


def stop_neighbours(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tests.bench.busy_neighbour DUTY SECONDS", file=sys.stderr)
        return 2
    spin(float(argv[0]), float(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
