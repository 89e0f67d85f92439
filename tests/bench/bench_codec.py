"""Codec benchmark: our compiled construct codec beside hand-written ``struct`` code for the same messages.

Run from the repository root:  .venv/bin/python -m tests.bench.bench_codec [--quick]
Prints encode and decode microseconds per message (timeit, best of 5) for
- JoinGroup request v5 (classic) and v7 (flexible), 3 protocols;
- OffsetCommit request v7 (classic) and v8 (flexible), 4 topics x 25 partitions;
- Fetch response v11 (classic) and v12 (flexible), 2 topics x 50 partitions, ~1 KB of records each.
"Ours" is the public API (``codec.decode_body`` / ``codec.encode_body``); "hand" is straight
``struct.unpack_from`` / ``pack`` code (tests/bench/hand_codecs.py) for exactly that message and version.
Before timing, the bench asserts that both decoders produce equal dicts and both encoders equal bytes, so
the comparison is honest. The hand-written decoders check lengths as ours do (a string, bytes or array that
claims more than the bytes left is an error), but know the message shape at write time. The target is our
decode within 4x of hand-written; the last line says whether it holds. Asserts nothing about time.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from collections.abc import Callable
from typing import Any

from protocol import codec
from tests.bench.hand_codecs import (
    commit_body,
    commit_decode_v7,
    commit_decode_v8,
    commit_encode_v7,
    commit_encode_v8,
    fetch_body,
    fetch_decode_v11,
    fetch_decode_v12,
    fetch_encode_v11,
    fetch_encode_v12,
    join_body,
    join_decode_v5,
    join_decode_v7,
    join_encode_v5,
    join_encode_v7,
)

# ====================================================================== the run
Codec = tuple[Callable[[bytes], dict[str, Any]], Callable[[dict[str, Any]], bytes]]
CASES: list[tuple[str, int, int, bool, dict[str, Any], Codec]] = [
    ("JoinGroup request", 11, 5, True, join_body(), (join_decode_v5, join_encode_v5)),
    ("JoinGroup request", 11, 7, True, join_body(), (join_decode_v7, join_encode_v7)),
    ("OffsetCommit request", 8, 7, True, commit_body(), (commit_decode_v7, commit_encode_v7)),
    ("OffsetCommit request", 8, 8, True, commit_body(), (commit_decode_v8, commit_encode_v8)),
    ("Fetch response", 1, 11, False, fetch_body(False), (fetch_decode_v11, fetch_encode_v11)),
    ("Fetch response", 1, 12, False, fetch_body(True), (fetch_decode_v12, fetch_encode_v12)),
]


def best_us_pair(ours: Callable[[], object], hand: Callable[[], object], budget_s: float) -> tuple[float, float]:
    """Microseconds per call for both: timeit, best of 5 repeats each, the repeats of the two interleaved
    (ours, hand, ours, hand, ...) so that load from other processes hits both alike."""
    timers = [timeit.Timer(ours), timeit.Timer(hand)]
    numbers = []
    for timer in timers:
        n, t = timer.autorange()
        numbers.append(max(1, int(n * (budget_s / 10) / max(t, 1e-9))))
    best = [float("inf"), float("inf")]
    for _ in range(5):
        for k, timer in enumerate(timers):
            best[k] = min(best[k], timer.timeit(numbers[k]) / numbers[k])
    return best[0] * 1e6, best[1] * 1e6


def check_agreement(key: int, version: int, is_request: bool, body: dict[str, Any], hand: Codec) -> bytes:
    """Both encoders write the same bytes and both decoders return the same dict (== the body)."""
    wire = codec.encode_body(key, version, is_request, body)
    hand_decode, hand_encode = hand
    assert hand_encode(body) == wire, f"api {key} v{version}: hand-written encoder disagrees"
    ours = codec.decode_body(key, version, is_request, wire)
    assert ours == hand_decode(wire) == body, f"api {key} v{version}: decoders disagree"
    return wire


def timed_calls(key: int, version: int, is_request: bool, body: dict[str, Any], wire: bytes,
                hand: Codec) -> list[tuple[str, Callable[[], object], Callable[[], object]]]:
    hand_decode, hand_encode = hand
    return [
        ("decode", lambda: codec.decode_body(key, version, is_request, wire), lambda: hand_decode(wire)),
        ("encode", lambda: codec.encode_body(key, version, is_request, body), lambda: hand_encode(body)),
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timing runs (noisier figures)")
    args = parser.parse_args(argv)
    budget = 0.25 if args.quick else 1.0
    print(f"command: {sys.executable} -m tests.bench.bench_codec {' '.join(argv)}".rstrip())
    print("timeit, best of 5 (ours and hand interleaved); µs per message; 'hand' = hand-written struct code in tests/bench/hand_codecs.py")
    head = f"{'message':<28} {'bytes':>6} | {'op':<6} {'ours µs':>9} {'hand µs':>9} {'ratio':>6}"
    print(head)
    print("-" * len(head))
    worst_decode = 0.0
    for label, key, version, is_request, body, hand in CASES:
        wire = check_agreement(key, version, is_request, body, hand)
        ops = timed_calls(key, version, is_request, body, wire, hand)
        for op, ours_fn, hand_fn in ops:
            ours_us, hand_us = best_us_pair(ours_fn, hand_fn, budget)
            ratio = ours_us / hand_us
            if op == "decode":
                worst_decode = max(worst_decode, ratio)
            name = f"{label} v{version}"
            print(f"{name:<28} {len(wire):>6} | {op:<6} {ours_us:>9.1f} {hand_us:>9.1f} {ratio:>5.2f}x")
    verdict = "within" if worst_decode <= 4 else "OVER"
    print(f"worst decode ratio {worst_decode:.2f}x ({verdict} the 4x target)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
