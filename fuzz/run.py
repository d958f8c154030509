"""``make fuzz``: a time-boxed mutation campaign over every target, through the harness.

Runs each target's seeds (generated valid files, then ``fuzz/corpus/<target>/``) once,
then mutated inputs, round-robin over the targets until the time is up. Input number
``n`` of target ``t`` comes from ``random.Random(f"{seed}/{t}/{n}")``, so a seed gives
the same inputs whatever ``--jobs`` is. Prints a table of calls per outcome and target,
one line per new distinct finding, and saves bad inputs under ``--findings``.

    python fuzz/run.py --minutes 5 --targets jpeg,npy --seed 1 --jobs 1
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import OUTCOMES, GiB, Harness, Outcome, warm  # noqa: E402
from mutate import mutate  # noqa: E402
from seeds import GENERATORS, seeds  # noqa: E402
from targets import TARGETS  # noqa: E402


def make_seeds(targets: list[str], corpus: Path) -> dict[str, list[bytes]]:
    """Generate the seeds in a forked child, so writer threads never run in this process
    (a child forked later could inherit a lock such a thread held)."""
    folder = tempfile.mkdtemp(prefix="dataio-fuzz-seeds-")
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            code = 0
            try:
                for target in targets:
                    for i, data in enumerate(seeds(target, corpus)):
                        Path(folder, f"{target}.{i:05d}").write_bytes(data)
            except BaseException as exc:
                print(f"seed generation failed: {exc!r}", file=sys.stderr)
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit("seed generation failed")
        out: dict[str, list[bytes]] = {t: [] for t in targets}
        for path in sorted(Path(folder).iterdir()):
            target = path.name.rsplit(".", 1)[0]
            out[target].append(path.read_bytes())
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def inputs(
    targets: list[str], seed_files: dict[str, list[bytes]], seed: int
) -> Iterator[tuple[str, int, bytes]]:
    """Yield ``(target, n, data)`` forever: the seeds first, then mutations, round-robin."""
    n = 0
    while True:
        for target in targets:
            files = seed_files[target]
            if n < len(files):
                yield target, n, files[n]
            else:
                yield target, n, mutate(target, files, random.Random(f"{seed}/{target}/{n}"))
        n += 1


def table(counts: dict[str, Counter[str]], millis: Counter[str]) -> str:
    """The campaign's counts: one row per target, one column per outcome, mean time."""
    head = ["target", "calls", *OUTCOMES, "ms/call"]
    total = Counter[str]()
    for counter in counts.values():
        total.update(counter)
    rows = [head]
    for target, counter in [*counts.items(), ("total", total)]:
        calls = sum(counter.values())
        spent = sum(millis.values()) if target == "total" else millis[target]
        mean = f"{spent / calls:.0f}" if calls else "-"
        rows.append([target, str(calls), *(str(counter[k]) for k in OUTCOMES), mean])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [
        "  ".join(
            c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(len(lines) - 1, "-" * len(lines[0]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run a campaign; the exit status is 1 when anything bad was found."""
    parser = argparse.ArgumentParser(description="dataio fuzz campaign")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--targets", default="", help="comma-separated (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=15.0, help="seconds per input")
    parser.add_argument("--memory-gib", type=float, default=4.0, help="address-space cap")
    parser.add_argument("--findings", default=str(HERE / "findings"))
    parser.add_argument("--corpus", default=str(HERE / "corpus"))
    parser.add_argument(
        "--max-calls", type=int, default=0, help="stop after this many (0: time only)"
    )
    args = parser.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t] or list(TARGETS)
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown:
        parser.error(f"unknown targets {unknown}; choose from {sorted(TARGETS)}")
    assert set(GENERATORS) == set(TARGETS)

    seed_files = make_seeds(targets, Path(args.corpus))
    warm()
    findings = Path(args.findings)
    counts: dict[str, Counter[str]] = {t: Counter() for t in targets}
    millis = Counter[str]()
    seen: dict[str, Outcome] = {}
    deadline = time.monotonic() + args.minutes * 60
    calls = 0
    print(
        f"fuzzing {len(targets)} targets for {args.minutes:g} min, seed {args.seed}, "
        f"{args.jobs} job(s); findings in {findings}"
    )
    harness = Harness(
        TARGETS,
        timeout=args.timeout,
        memory=int(args.memory_gib * GiB),
        jobs=args.jobs,
        findings=findings,
    )
    try:
        feed = inputs(targets, seed_files, args.seed)
        while True:
            stop = time.monotonic() >= deadline or (args.max_calls and calls >= args.max_calls)
            while not stop and harness.in_flight < args.jobs:
                target, n, data = next(feed)
                harness.submit(target, data, (target, n))
                calls += 1
                stop = bool(args.max_calls and calls >= args.max_calls)
            if not harness.in_flight:
                break
            for (target, n), outcome in harness.wait():
                counts[target][outcome.kind] += 1
                millis[target] += round(outcome.seconds * 1000)
                key = f"{target}:{outcome.signature()}"
                if outcome.bad and key not in seen:
                    seen[key] = outcome
                    print(
                        f"NEW {key} (input {n}): {outcome.message[:200].splitlines()[:1]}",
                        flush=True,
                    )
    except KeyboardInterrupt:
        print("interrupted")
    finally:
        harness.close()
    print(table(counts, millis))
    findings.mkdir(parents=True, exist_ok=True)
    summary = {
        key: {"kind": o.kind, "stage": o.stage, "error": o.error_type, "message": o.message[:500]}
        for key, o in seen.items()
    }
    (findings / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{len(seen)} distinct findings (summary.json and inputs in {findings})")
    return 1 if seen else 0


if __name__ == "__main__":
    sys.exit(main())
