"""`make bench`: run every tests/bench/bench_*.py as its own process, in turn, and print their figures.

Benchmarks print figures and ratios against a baseline measured in the same run; they assert nothing about
wall-clock time (these machines are shared and noisy). `make bench ARGS="codec storage"` runs a subset.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent


def main(argv: list[str]) -> int:
    # bench_<name>.py are benchmarks; bench_<name>_<part>.py are their helper modules
    names = sorted(p.stem for p in HERE.glob("bench_*.py") if p.stem.count("_") == 1)
    if argv:
        names = [n for n in names if any(a in n for a in argv)]
    failed = []
    for name in names:
        print(f"\n===== {name}  (python -m tests.bench.{name})", flush=True)
        t0 = time.monotonic()
        rc = subprocess.call([sys.executable, "-m", f"tests.bench.{name}"], cwd=HERE.parent.parent)
        print(f"----- {name}: exit {rc} in {time.monotonic() - t0:.1f} s", flush=True)
        if rc:
            failed.append(name)
    if failed:
        print("failed:", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
