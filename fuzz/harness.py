"""A fork-server harness: run one input per forked child and classify what happened.

The parent imports dataio and every heavy library once (:func:`warm`), so each child
starts warm and an input costs milliseconds. A child caps its address space
(``RLIMIT_AS``: 4 GiB beyond what the warm imports already map), runs the target on the
bytes, writes one JSON line to a pipe and leaves with ``os._exit`` (no atexit handlers,
no flushing of buffers copied from the parent).
The parent waits on the pipe with a deadline, then ``waitpid``; a child past the deadline
is killed with ``SIGKILL``.

Outcomes:

* ``ok``: the target returned.
* ``dataio_error``: a :class:`dataio.DataioError` (expected for bad input).
* ``builtin_exception``: any other exception escaped (a bug): type, message, traceback.
* ``crash``: the child died from a signal (SIGSEGV, SIGBUS, SIGABRT...) or exited
  without reporting.
* ``hang``: the child ran past the timeout.
* ``memory``: ``MemoryError`` (including pyarrow's and numpy's) under the cap.

``python fuzz/harness.py --serve`` is the fork server the replay test talks to: one JSON
request per line on stdin (``{"target": ..., "path": ...}``), one outcome per line on
stdout.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import resource
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

GiB = 1 << 30
DEFAULT_MEMORY = 4 * GiB
DEFAULT_TIMEOUT = 15.0
BAD = ("builtin_exception", "crash", "hang", "memory")
OUTCOMES = ("ok", "dataio_error", *BAD)

HEAVY = (
    "numpy",
    "pyarrow",
    "pyarrow.compute",
    "pyarrow.feather",
    "pyarrow.ipc",
    "pyarrow.parquet",
    "PIL.Image",
    "simplejpeg",
    "h5py",
    "soundfile",
    "safetensors",
    "safetensors.numpy",
    "torch",
    "datafusion",
    "dataio",
    "dataio.engine.run",
    "dataio.formats.hdf5",
    "dataio.formats.numpy",
    "dataio.formats.safetensors",
    "dataio.formats.tfrecord",
    "dataio.frame",
    "dataio.loader",
    "dataio.rdma._channel",
    "dataio.sources",
    "dataio.udfs.audio",
    "dataio.udfs.image",
    "dataio.udfs.text",
)


def warm() -> None:
    """Import every heavy module once, before forking, so children start warm."""
    import importlib

    for name in HEAVY:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


@dataclass
class Outcome:
    """What one input did to its child process."""

    kind: str
    error_type: str = ""
    message: str = ""
    traceback: str = ""
    stage: str = ""
    seconds: float = 0.0

    @property
    def bad(self) -> bool:
        """Whether the outcome is a bug (crash, hang, memory or builtin exception)."""
        return self.kind in BAD

    def signature(self) -> str:
        """A short key telling distinct findings apart (kind, stage, error type)."""
        head = self.message.splitlines()[0][:80] if self.message else ""
        if self.kind == "builtin_exception":
            return f"{self.kind}:{self.stage}:{self.error_type}"
        if self.kind == "crash":
            return f"{self.kind}:{self.stage}:{head}"
        return f"{self.kind}:{self.stage}"


# -- the child ------------------------------------------------------------------------------

_stage: list[str] = [""]
_report_fd: list[int] = [-1]


def set_stage(name: str) -> None:
    """Name the entry point the child is about to call (reported on failure)."""
    _stage[0] = name
    if _report_fd[0] >= 0:  # so a crash or hang still says where it happened
        with contextlib.suppress(OSError):
            os.write(_report_fd[0], json.dumps({"stage": name}).encode() + b"\n")


def mapped_bytes() -> int:
    """This process's address-space size (``VmSize``): the warm imports map ~3 GiB of
    libraries and reservations, which the cap on what an input may add does not count."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _classify(exc: BaseException) -> tuple[str, str]:
    from dataio.exceptions import DataioError

    if isinstance(exc, DataioError):
        return "dataio_error", type(exc).__name__
    if isinstance(exc, MemoryError):
        return "memory", f"{type(exc).__module__}.{type(exc).__qualname__}"
    return "builtin_exception", f"{type(exc).__module__}.{type(exc).__qualname__}"


def _child(
    fd: int, target: Callable[[bytes, str], Any], data: bytes, workdir: str, memory: int
) -> None:
    os.setpgid(0, 0)  # the parent kills the whole group: helpers a library forked die too
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory:
        cap = mapped_bytes() + memory
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.makedirs(workdir, exist_ok=True)
    os.chdir(workdir)
    _report_fd[0] = fd
    report: dict[str, Any]
    try:
        target(data, workdir)
        report = {"kind": "ok"}
    except BaseException as exc:
        kind, name = _classify(exc)
        try:
            text = "".join(traceback.format_exception(exc))[-6000:]
        except BaseException:  # formatting a deep recursion can fail again
            text = ""
        report = {"kind": kind, "error_type": name, "message": _safe_str(exc)[:2000]}
        report["traceback"] = text
    report["stage"] = _stage[0]
    with contextlib.suppress(BaseException):
        os.write(fd, json.dumps(report).encode() + b"\n")
    os._exit(0)


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except BaseException:
        return repr(type(exc))


# -- the parent -----------------------------------------------------------------------------


@dataclass
class _Running:
    pid: int
    fd: int
    started: float
    workdir: str
    target: str
    data: bytes
    tag: Any
    chunks: list[bytes] = field(default_factory=list)


class Harness:
    """Run targets on inputs in forked children, up to ``jobs`` at a time.

    Args:
        targets: target name to a function ``fn(data, workdir)``.
        timeout: seconds before a child counts as hung and is killed.
        memory: how many bytes of address space a child may add to what the warm parent
            maps (``RLIMIT_AS`` is set to the parent's size plus this; 0: no cap).
        jobs: children in flight at once.
        findings: a directory where bad inputs are saved, or ``None``.
        quiet: send the children's stdout and stderr to ``/dev/null``.
        keep: at most this many saved inputs per distinct finding (``Outcome.signature``).
    """

    def __init__(
        self,
        targets: dict[str, Callable[[bytes, str], Any]],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        memory: int = DEFAULT_MEMORY,
        jobs: int = 1,
        findings: str | os.PathLike[str] | None = None,
        quiet: bool = True,
        keep: int = 3,
    ) -> None:
        self.targets = targets
        self.timeout = timeout
        self.memory = memory
        self.jobs = max(1, jobs)
        self.findings = Path(findings) if findings is not None else None
        self.quiet = quiet
        self.keep = keep
        self.saved: dict[str, int] = {}
        self._scratch = tempfile.mkdtemp(prefix="dataio-fuzz-")
        self._running: dict[int, _Running] = {}
        self._count = 0

    def close(self) -> None:
        """Kill children still running and remove the scratch directory."""
        for job in list(self._running.values()):
            self._kill(job)
            self._reap(job, timed_out=True)
        shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, target: str, data: bytes) -> Outcome:
        """Run one input and wait for its outcome."""
        self.submit(target, data, None)
        results = []
        while self._running:
            results.extend(self.wait())
        return results[-1][1]

    def submit(self, target: str, data: bytes, tag: Any) -> None:
        """Start one input in a child (the caller keeps at most ``jobs`` in flight)."""
        fn = self.targets[target]
        self._count += 1
        workdir = os.path.join(self._scratch, str(self._count))
        read_fd, write_fd = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            try:
                os.close(read_fd)
                for other in self._running.values():
                    os.close(other.fd)
                if self.quiet:
                    null = os.open(os.devnull, os.O_WRONLY)
                    os.dup2(null, 1)
                    os.dup2(null, 2)
                _child(write_fd, fn, data, workdir, self.memory)
            finally:
                os._exit(70)
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        self._running[pid] = _Running(pid, read_fd, time.monotonic(), workdir, target, data, tag)

    @property
    def in_flight(self) -> int:
        """Children running now."""
        return len(self._running)

    def wait(self) -> list[tuple[Any, Outcome]]:
        """Wait until at least one child ends; return ``(tag, outcome)`` for those that did."""
        done: list[tuple[Any, Outcome]] = []
        while not done and self._running:
            now = time.monotonic()
            deadline = min(job.started + self.timeout for job in self._running.values())
            by_fd = {job.fd: job for job in self._running.values()}
            ready, _, _ = select.select(list(by_fd), [], [], max(0.0, deadline - now))
            for fd in ready:
                job = by_fd[fd]
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    job.chunks.append(chunk)
                    continue
                done.append((job.tag, self._reap(job, timed_out=False)))
            now = time.monotonic()
            for job in list(self._running.values()):
                if now >= job.started + self.timeout and job.pid in self._running:
                    self._kill(job)
                    done.append((job.tag, self._reap(job, timed_out=True)))
        return done

    def _kill(self, job: _Running) -> None:
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(job.pid, signal.SIGKILL)

    def _reap(self, job: _Running, *, timed_out: bool) -> Outcome:
        _, status = os.waitpid(job.pid, 0)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(job.pid, signal.SIGKILL)  # anything the child left behind
        seconds = time.monotonic() - job.started
        os.close(job.fd)
        del self._running[job.pid]
        shutil.rmtree(job.workdir, ignore_errors=True)
        outcome = _outcome(b"".join(job.chunks), status, timed_out, self.timeout)
        outcome.seconds = seconds
        key = f"{job.target}:{outcome.signature()}"
        if outcome.bad and self.findings is not None and self.saved.get(key, 0) < self.keep:
            self.saved[key] = self.saved.get(key, 0) + 1
            save_finding(self.findings, job.target, job.data, outcome)
        return outcome


def _outcome(raw: bytes, status: int, timed_out: bool, timeout: float) -> Outcome:
    report: dict[str, Any] = {}
    stage = ""
    for line in raw.splitlines():
        with contextlib.suppress(ValueError):
            message = json.loads(line)
            if "kind" in message:
                report = message
            stage = message.get("stage", stage)
    if timed_out:
        return Outcome("hang", message=f"no answer within {timeout:g} s; killed", stage=stage)
    if report:
        known = {k: v for k, v in report.items() if k in Outcome.__dataclass_fields__}
        return Outcome(**known)
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return Outcome("crash", error_type=name, message=f"killed by {name}", stage=stage)
    code = os.waitstatus_to_exitcode(status)
    message = f"exited with status {code} without reporting"
    return Outcome("crash", error_type="exit", message=message, stage=stage)


def save_finding(directory: Path, target: str, data: bytes, outcome: Outcome) -> Path:
    """Write a bad input and its outcome under ``directory/<target>/``."""
    digest = hashlib.sha1(data).hexdigest()[:12]
    folder = directory / target
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{outcome.kind}-{digest}"
    path.write_bytes(data)
    path.with_suffix(".json").write_text(json.dumps(asdict(outcome), indent=1) + "\n")
    return path


# -- the fork server over stdin/stdout -------------------------------------------------------


def serve(*, timeout: float, memory: int) -> None:
    """Answer ``{"target", "path"}`` lines on stdin with outcome lines on stdout."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from targets import SELF_TEST, TARGETS

    warm()
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    with Harness({**TARGETS, **SELF_TEST}, timeout=timeout, memory=memory) as harness:
        for line in sys.stdin:
            request = json.loads(line)
            data = Path(request["path"]).read_bytes()
            harness.timeout = float(request.get("timeout", timeout))
            outcome = harness.run(request["target"], data)
            out.write(json.dumps(asdict(outcome)) + "\n")
            out.flush()


def main(argv: list[str] | None = None) -> None:
    """``--serve`` starts the fork server; ``TARGET FILE...`` runs files once each."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    parser.add_argument("--memory-gib", type=float, default=DEFAULT_MEMORY / GiB)
    parser.add_argument("target", nargs="?")
    parser.add_argument("files", nargs="*")
    args = parser.parse_args(argv)
    memory = int(args.memory_gib * GiB)
    if args.serve:
        serve(timeout=args.timeout, memory=memory)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from targets import TARGETS

    warm()
    with Harness(TARGETS, timeout=args.timeout, memory=memory, quiet=False) as harness:
        for name in args.files:
            outcome = harness.run(args.target, Path(name).read_bytes())
            head = f"{name}: {outcome.kind} [{outcome.stage}] {outcome.error_type}"
            print(f"{head} {outcome.message[:300]}")
            if outcome.kind == "builtin_exception":
                print(outcome.traceback)


if __name__ == "__main__":
    # Run as the module ``harness`` (not ``__main__``), the one targets.py imports, so the
    # stage targets set is the one children report.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import harness

    harness.main()
