"""Shrink a finding while it keeps failing the same way (same ``Outcome.signature``).

Removes chunks (halving their size down to one byte), then zeroes bytes, keeping each
change that preserves the signature. Hangs are slow to minimize (each try waits for the
timeout), so pass a short ``--timeout``.

    python fuzz/minimize.py feather fuzz/findings/feather/crash-700e378f73df -o small
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Harness, warm
from targets import TARGETS


def minimize(harness: Harness, target: str, data: bytes, *, budget: int = 2000) -> bytes:
    """The smallest variant of ``data`` found that fails like ``data`` does."""
    want = harness.run(target, data).signature()
    tries = 0

    def same(candidate: bytes) -> bool:
        nonlocal tries
        tries += 1
        return harness.run(target, candidate).signature() == want

    chunk = max(1, len(data) // 2)
    while chunk >= 1 and tries < budget:
        at = 0
        while at < len(data) and tries < budget:
            candidate = data[:at] + data[at + chunk :]
            if candidate and same(candidate):
                data = candidate
            else:
                at += chunk
        chunk //= 2
    for at in range(len(data)):
        if tries >= budget:
            break
        if data[at] and same(data[:at] + b"\0" + data[at + 1 :]):
            data = data[:at] + b"\0" + data[at + 1 :]
    return data


def main() -> None:
    """Minimize one file and write the result."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("target", choices=sorted(TARGETS))
    parser.add_argument("file")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--timeout", type=float, default=15.0)
    parser.add_argument("--budget", type=int, default=2000, help="most runs to spend")
    args = parser.parse_args()
    warm()
    data = Path(args.file).read_bytes()
    with Harness(TARGETS, timeout=args.timeout) as harness:
        small = minimize(harness, args.target, data, budget=args.budget)
        outcome = harness.run(args.target, small)
    Path(args.output).write_bytes(small)
    print(f"{len(data)} -> {len(small)} bytes: {outcome.signature()} {outcome.message[:200]}")


if __name__ == "__main__":
    main()
