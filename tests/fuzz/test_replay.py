"""Replay every fuzz regression input through the fork-server harness.

Each file under ``fuzz/corpus/<target>/`` runs in a forked child of one warm server
process (``fuzz/harness.py --serve``), under a 4 GiB address-space cap and a timeout.
Hostile input may succeed or raise a ``DataioError``; a crash, a hang, a memory blow-up
or a builtin exception fails the test, which names the file and the entry point.

The harness itself is checked with targets that segfault, hang, over-allocate and raise
builtins on purpose.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "fuzz" / "corpus"
FILES = sorted(p for p in CORPUS.glob("*/*") if p.is_file())
TIMEOUT_S = 10.0


class ForkServer:
    """The harness's ``--serve`` mode in a child process: one JSON line each way."""

    def __init__(self) -> None:
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
        )
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "fuzz" / "harness.py"),
                "--serve",
                "--timeout",
                str(TIMEOUT_S),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env=env,
            text=True,
        )
        assert json.loads(self._line()) == {"ready": True}

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the fork server exited ({self.process.wait()})")
        return line

    def run(self, target: str, path: Path, **options: Any) -> dict[str, Any]:
        """Run one file through ``target``; the outcome as a dict (``kind``, ``stage``...)."""
        assert self.process.stdin is not None
        self.process.stdin.write(
            json.dumps({"target": target, "path": str(path), **options}) + "\n"
        )
        self.process.stdin.flush()
        return json.loads(self._line())

    def close(self) -> None:
        """End the server (it leaves once stdin closes)."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)
        assert self.process.stdout is not None
        self.process.stdout.close()


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    forks = ForkServer()
    yield forks
    forks.close()


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.name}" for p in FILES])
def test_corpus_input_is_handled(server: ForkServer, path: Path) -> None:
    outcome = server.run(path.parent.name, path)
    assert outcome["kind"] in ("ok", "dataio_error"), (
        f"{path.relative_to(ROOT)}: {outcome['kind']} in {outcome['stage']!r}: "
        f"{outcome['error_type']}: {outcome['message'][:500]}\n{outcome['traceback']}"
    )


def test_corpus_is_not_empty_and_targets_are_known() -> None:
    saved = list(sys.path)
    sys.path.insert(0, str(ROOT / "fuzz"))
    try:
        from targets import TARGETS
    finally:
        sys.path[:] = saved
    assert FILES
    assert {p.parent.name for p in FILES} <= set(TARGETS)
    assert all(p.stat().st_size < 256 << 10 for p in FILES)


@pytest.mark.parametrize(
    ("target", "kind", "error_type", "options"),
    [
        ("_ok", "ok", "", {}),
        ("_dataio_error", "dataio_error", "DecodeError", {}),
        ("_builtin", "builtin_exception", "builtins.KeyError", {}),
        ("_segfault", "crash", "SIGSEGV", {}),
        ("_hang", "hang", "", {"timeout": 0.5}),
        ("_allocate", "memory", "builtins.MemoryError", {}),
    ],
)
def test_harness_classifies_outcomes(
    server: ForkServer,
    tmp_path: Path,
    target: str,
    kind: str,
    error_type: str,
    options: dict[str, Any],
) -> None:
    path = tmp_path / "input"
    path.write_bytes(b"anything")
    outcome = server.run(target, path, **options)
    assert (outcome["kind"], outcome["error_type"]) == (kind, error_type)
    if kind == "builtin_exception":
        assert outcome["stage"] == "self-test"
        assert "raise KeyError" in outcome["traceback"]
    if kind == "hang":
        assert 0.5 <= outcome["seconds"] < 5


def test_server_keeps_serving_after_a_crash(server: ForkServer, tmp_path: Path) -> None:
    path = tmp_path / "input"
    path.write_bytes(b"x")
    assert server.run("_segfault", path)["kind"] == "crash"
    assert server.run("_ok", path)["kind"] == "ok"


def test_campaign_inputs_are_reproducible_from_the_seed() -> None:
    saved = list(sys.path)
    sys.path.insert(0, str(ROOT / "fuzz"))
    try:
        import run
        from seeds import GENERATORS
    finally:
        sys.path[:] = saved
    targets = ["npy", "tar", "tfrecord", "safetensors", "jpeg", "audio"]
    seed_files = {t: GENERATORS[t]() for t in targets}
    again = {t: GENERATORS[t]() for t in targets}
    assert seed_files == again  # generated seeds carry no timestamps

    def first(seed: int, count: int = 120) -> list[tuple[str, int, bytes]]:
        feed = run.inputs(targets, seed_files, seed)
        return [next(feed) for _ in range(count)]

    assert first(7) == first(7)
    assert first(7) != first(8)
    mutated = [data for target, n, data in first(7) if n >= len(seed_files[target])]
    assert len(set(mutated)) > len(mutated) // 2  # mutations differ from each other
