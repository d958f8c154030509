"""The issue #14 benchmark scripts run end to end in their quick mode (a few seconds each).

Small sizes, one round, data generated into a temporary folder (``DATAIO_BENCH_DATA``):
this checks that the scripts run against the current API and print their tables and
targets, not the figures, which mean nothing at this size.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPTS = {
    "sources.py": (
        ["--quick", "--records", "3000", "--rounds", "1", "--shard-samples", "40"],
        [
            "dataio list ",
            "dataio parquet frame",
            "target dataio list vs DataLoader nw=0",
            "CPU per pass",
        ],
    ),
    "frame_training.py": (
        ["--quick", "--images", "12", "--rounds", "1"],
        [
            "checked: frame and files deliver identical tensors and labels",
            "dataio parquet frame ",
            "dataio files ",
            "target dataio parquet frame vs DataLoader >= 2.50x",
            "cProfile, dataio parquet frame",
        ],
    ),
}


def run_script(name: str, args: list[str], data: Path) -> str:
    env = {**os.environ, "DATAIO_BENCH_DATA": str(data), "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / name), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_benchmark_quick_mode_runs(name: str, tmp_path: Path) -> None:
    args, expected = SCRIPTS[name]
    out = run_script(name, args, tmp_path)
    for text in expected:
        assert text in out, f"{name} did not print {text!r}:\n{out[-3000:]}"
    # a contender this dataio refuses is named as unsupported, never silently dropped
    arrow = "dataio arrow table" if name == "sources.py" else "expr with_columns"
    assert f"{arrow}: unsupported: " in out or f"\n{arrow} " in out, out[-3000:]
    assert list(tmp_path.iterdir()), "the benchmark data did not go to DATAIO_BENCH_DATA"


def test_gpu_benchmark_quick_mode_runs_its_cpu_rows(tmp_path: Path) -> None:
    out = run_script("gpu.py", ["--quick", "--images", "48"], tmp_path)
    for text in (
        "mode:     quick: CPU rows only",
        "checked: routes pinned",  # the routes read what the safetensors package reads
        "dataio CPU kernels -> cpu ",
        "DataLoader (2 workers) -> cpu ",
        "pinned bounce -> cpu ",
        "plain read + copy -> cpu ",
        "GPU rows: not run",
    ):
        assert text in out, f"gpu.py did not print {text!r}:\n{out[-3000:]}"
    # DALI and the kvikio routes either ran or say why not: never silently dropped
    for row in ("DALI CPU backend", "GDS (cuFile) -> cpu", "kvikio compat (POSIX) -> cpu"):
        assert f"{row}: unsupported: " in out or f"\n{row} " in out, out[-3000:]
    assert list(tmp_path.iterdir()), "the benchmark data did not go to DATAIO_BENCH_DATA"


def test_gpu_benchmark_without_a_gpu_says_so_and_exits_0(tmp_path: Path) -> None:
    env = {**os.environ, "DATAIO_BENCH_DATA": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU for torch, on any host
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu.py")],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    assert "benchmarks/gpu.py needs a CUDA GPU" in result.stdout
    assert "(cuda: " in result.stdout and "--quick" in result.stdout
    assert not list(tmp_path.iterdir()), "it generated data it cannot use"
