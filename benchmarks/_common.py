"""Shared benchmark helpers: cached data, machine description, peak-RSS sampling, tables."""

from __future__ import annotations

import contextlib
import cProfile
import gc
import importlib.metadata
import os
import platform
import pstats
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil

__all__ = [
    "BENCH_DATA",
    "Contender",
    "REPO_ROOT",
    "PeakRss",
    "ThreadsProfile",
    "compact",
    "format_table",
    "hot_functions",
    "interleave",
    "load_average",
    "machine_lines",
    "median",
    "mib",
    "probe",
    "profile_pass",
    "target_line",
    "usable_cores",
    "waited",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
# Git-ignored; generated files are kept between runs because generation is slow.
# DATAIO_BENCH_DATA moves it (the quick-mode tests point it at a temporary folder).
BENCH_DATA = Path(os.environ.get("DATAIO_BENCH_DATA") or REPO_ROOT / ".bench-data")


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _versions(packages: Sequence[str]) -> str:
    found = []
    for name in packages:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return ", ".join(found)


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, formatted."""
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def machine_lines(packages: Sequence[str]) -> list[str]:
    """Describe the host, the worker settings, package versions and the exact command."""
    from dataio.engine.pool import cpu_workers

    env = os.environ.get("DATAIO_CPU_WORKERS")
    load = load_average()
    memory = psutil.virtual_memory().total / 2**30
    return [
        f"machine:  {_cpu_model()}; {os.cpu_count()} cores, {usable_cores()} usable; "
        f"{memory:.1f} GiB RAM; load average {load}",
        f"workers:  DATAIO_CPU_WORKERS={env if env else '(unset)'} -> dataio pool of "
        f"{cpu_workers()} threads",
        f"python:   {platform.python_version()} ({platform.platform()})",
        f"packages: {_versions(packages)}",
        f"command:  {shlex.join([sys.executable, *sys.argv])}",
    ]


class PeakRss:
    """Sample resident memory in a background thread while the ``with`` block runs.

    With ``children=True`` the sample is the sum over the process and its descendants
    (a DataLoader's worker processes). Summed RSS counts pages shared between processes
    once per process, as ``top`` would.
    """

    def __init__(self, *, children: bool = False, interval: float = 0.02) -> None:
        self.children = children
        self.interval = interval
        self.start = 0
        self.peak = 0
        self._process = psutil.Process()
        self._kids: list[psutil.Process] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _refresh_children(self) -> None:
        if self.children:
            self._kids = self._process.children(recursive=True)

    def sample(self) -> int:
        """The current RSS in bytes of the process (and its children when asked)."""
        total = 0
        for process in (self._process, *self._kids):
            # A worker may exit between listing and sampling.
            with contextlib.suppress(psutil.Error):
                total += process.memory_info().rss
        return total

    def _loop(self) -> None:
        refreshed = time.monotonic()
        while not self._stop.wait(self.interval):
            if self.children and time.monotonic() - refreshed > 0.25:
                self._refresh_children()
                refreshed = time.monotonic()
            self.peak = max(self.peak, self.sample())

    def __enter__(self) -> PeakRss:
        self._refresh_children()
        self.start = self.peak = self.sample()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak = max(self.peak, self.sample())


def median(values: Sequence[float]) -> float:
    """The median of a non-empty sequence."""
    return statistics.median(values)


def mib(n: float) -> str:
    """Format a byte count in MiB."""
    return f"{n / 2**20:,.0f} MiB"


def compact(n: float) -> str:
    """Format a rate compactly: ``8.70M``, ``912k``, ``640``."""
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    if n >= 1e4:
        return f"{n / 1e3:.0f}k"
    return f"{n:.0f}"


@dataclass
class Contender:
    """One way of doing a benchmark's work, and what its measured passes took.

    ``run`` makes one pass and returns (items delivered, a short description of the
    output); a pass delivering other than ``expected`` items is an error.
    """

    name: str
    run: Callable[[], tuple[int, str]]
    expected: int
    children: bool = False
    seconds: list[float] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)
    growth: list[int] = field(default_factory=list)
    output: str = ""

    def measure(self, *, record: bool = True) -> None:
        """Run one pass, sampling RSS; record its time and memory unless warming up.

        Garbage left by the previous pass is collected first, outside the timing, so one
        contender's garbage is not charged to the next.
        """
        gc.collect()
        with PeakRss(children=self.children) as rss:
            start = time.perf_counter()
            count, self.output = self.run()
            elapsed = time.perf_counter() - start
        if count != self.expected:
            raise RuntimeError(f"{self.name} delivered {count} items, expected {self.expected}")
        if record:
            self.seconds.append(elapsed)
            self.peaks.append(rss.peak)
            self.growth.append(rss.peak - rss.start)

    def rate(self) -> float:
        """Median items/s over the recorded passes."""
        return self.expected / median(self.seconds)

    def spread(self) -> str:
        """The slowest and fastest recorded pass, as items/s."""
        slow, fast = self.expected / max(self.seconds), self.expected / min(self.seconds)
        return f"{compact(slow)}..{compact(fast)}"


def interleave(
    contenders: Sequence[Contender], rounds: int, *, unit: str = "items", warmup: int = 1
) -> None:
    """Warm every contender up (``warmup`` passes each, taking turns), then run ``rounds``
    rounds, rotating the order.

    Contenders alternate round by round, so load that comes and goes slows all alike.
    """
    for _ in range(warmup):
        for contender in contenders:
            contender.measure(record=False)
    for r in range(rounds):
        shift = r % len(contenders)
        for contender in [*contenders[shift:], *contenders[:shift]]:
            contender.measure()
        rates = ", ".join(f"{c.name} {compact(c.expected / c.seconds[-1])}" for c in contenders)
        print(f"  round {r + 1}/{rounds} ({unit}/s): {rates}", flush=True)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Render rows as an aligned text table; text columns (first, last) align left."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        parts = [
            str(c).ljust(w) if i in (0, len(widths) - 1) else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def probe(name: str, check: Callable[[], object], *, announce: bool = True) -> str | None:
    """Run ``check`` once; ``None`` when it works, else ``"unsupported: <error>"``.

    A contender whose API this version of dataio lacks or refuses is reported (printed
    unless ``announce`` is false) and left out of the run instead of ending the benchmark.
    """
    try:
        check()
    except Exception as exc:  # any failure means the contender cannot run here
        why = f"unsupported: {type(exc).__name__}: {exc}"
        if announce:
            print(f"  {name}: {why}", flush=True)
        return why
    return None


def round_ratios(ours: Contender, other: Contender) -> list[float]:
    """Per-round throughput ratios (the two ran in the same round, under the same load)."""
    return [
        (ours.expected / a) / (other.expected / b)
        for a, b in zip(ours.seconds, other.seconds, strict=True)
    ]


def target_line(ours: Contender | None, other: Contender | None, goal: float, label: str) -> str:
    """Whether ``ours`` reaches ``goal`` times ``other``, judged on the medians.

    The median and range of the per-round ratios are printed beside it: on a shared
    machine they are less sensitive to load that comes and goes between rounds.
    """
    if ours is None or other is None:
        missing = " and ".join(
            name for name, c in (("ours", ours), ("the baseline", other)) if c is None
        )
        return f"  target {label} >= {goal:.2f}x: not measured ({missing} unsupported)"
    value = ours.rate() / other.rate()
    per_round = round_ratios(ours, other)
    return (
        f"  target {label} >= {goal:.2f}x: {value:.2f}x -> "
        f"{'MET' if value >= goal else 'NOT MET'} (per-round ratios: median "
        f"{median(per_round):.2f}x, {min(per_round):.2f}..{max(per_round):.2f})"
    )


# -- where the time goes ------------------------------------------------------------------


class ThreadsProfile:
    """cProfile the calling thread and every thread of dataio's CPU pool while active.

    cProfile (Python 3.11) sees one thread per profiler, and dataio runs its batches on
    pool threads; one task per pool thread, held at a barrier so that each lands on a
    different thread, starts or stops that thread's own profiler.
    """

    def __init__(self) -> None:
        self.main = cProfile.Profile()
        self.pool: dict[int, cProfile.Profile] = {}

    def _on_every_pool_thread(self, action: Callable[[], None]) -> None:
        from dataio.engine.pool import cpu_pool, cpu_workers

        workers = cpu_workers()
        barrier = threading.Barrier(workers)

        def task() -> None:
            barrier.wait()
            action()

        for future in [cpu_pool().submit(task) for _ in range(workers)]:
            future.result()

    def _start(self) -> None:
        profile = self.pool.setdefault(threading.get_ident(), cProfile.Profile())
        profile.enable()

    def _stop(self) -> None:
        self.pool[threading.get_ident()].disable()

    def __enter__(self) -> ThreadsProfile:
        self._on_every_pool_thread(self._start)
        self.main.enable()
        return self

    def __exit__(self, *exc: object) -> None:
        self.main.disable()
        self._on_every_pool_thread(self._stop)

    def stats(self) -> pstats.Stats:
        """The merged statistics of all profiled threads."""
        merged = pstats.Stats(self.main)
        for profile in self.pool.values():
            merged.add(profile)
        return merged


def _where(filename: str, line: int, name: str) -> str:
    """A short place for a profiled function: repository, package or stdlib relative."""
    path = Path(filename)
    if not path.is_absolute():
        return f"{name} (built-in)"
    if "site-packages" in path.parts:
        inside = path.parts[path.parts.index("site-packages") + 1 :]
        return f"{Path(*inside)}:{line} {name}"
    for root, label in ((REPO_ROOT, ""), (Path(os.__file__).parent, "stdlib/")):
        if path.is_relative_to(root):
            return f"{label}{path.relative_to(root)}:{line} {name}"
    return f"{path.name}:{line} {name}"


# Where an idle thread sits: a pool thread waiting for a task, the consumer for a batch.
WAITS = {
    ("~", 0, "<method 'get' of '_queue.SimpleQueue' objects>"),
    ("~", 0, "<method 'acquire' of '_thread.lock' objects>"),
}


def waited(profile: cProfile.Profile) -> float:
    """Seconds one profiled thread spent blocked in :data:`WAITS`."""
    table: dict[Any, Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    return sum(table[key][2] for key in WAITS if key in table)


def hot_functions(stats: pstats.Stats, wall: float, top: int = 14, batches: int = 0) -> str:
    """The ``top`` functions by own time summed over threads, waits left out.

    With ``batches``, a column gives each function's own time per batch.
    """
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    busy = [item for item in table.items() if item[0] not in WAITS]
    rows = sorted(busy, key=lambda item: item[1][2], reverse=True)[:top]
    lines = []
    for (filename, line, name), (_, calls, own, cumulative, _) in rows:
        per_batch = [f"{1e6 * own / batches:,.0f}"] if batches else []
        lines.append(
            [
                _where(filename, line, name),
                f"{calls:,}",
                f"{own:.3f}",
                *per_batch,
                f"{100 * own / wall:.0f}%",
                f"{cumulative:.3f}",
            ]
        )
    headers = [
        "function (busy threads, own time summed)",
        "calls",
        "own s",
        *(["us/batch"] if batches else []),
        "of wall",
        "cum s",
    ]
    return format_table(headers, lines)


def profile_pass(
    label: str, run: Callable[[], tuple[int, str]], *, batch: int = 0, top: int = 14
) -> None:
    """Run one pass under :class:`ThreadsProfile` and print the hot functions.

    With ``batch`` (the batch size), the wall time and each function's own time are also
    given per batch.
    """
    with ThreadsProfile() as profile:
        start = time.perf_counter()
        items, _ = run()
        wall = time.perf_counter() - start
    idle = sum(waited(p) for p in profile.pool.values())
    batches = -(-items // batch) if batch else 0
    per_batch = f" ({1e6 * wall / batches:,.0f} us per batch of {batch})" if batches else ""
    print(
        f"\ncProfile, {label}: {items:,} items in {wall:.2f} s wall under the profiler"
        f"{per_batch}; the consumer waited {waited(profile.main):.2f} s for batches, the "
        f"{len(profile.pool)} pool threads were idle {idle:.2f} s in all:"
    )
    print(hot_functions(profile.stats(), wall, top, batches))
