"""Shared benchmark helpers: cached data, machine description, peak-RSS sampling, tables."""

from __future__ import annotations

import contextlib
import gc
import importlib.metadata
import os
import platform
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import psutil

__all__ = [
    "BENCH_DATA",
    "Contender",
    "REPO_ROOT",
    "PeakRss",
    "compact",
    "format_table",
    "interleave",
    "load_average",
    "machine_lines",
    "median",
    "mib",
    "usable_cores",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
# Git-ignored; generated files are kept between runs because generation is slow.
BENCH_DATA = REPO_ROOT / ".bench-data"


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
