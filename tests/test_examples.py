"""Every example script and the README's Python blocks run as part of the suite."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# offline_ray_job.py starts Ray, which runs only inside a network namespace with nothing
# but lo: tests/ray/test_offline_example.py runs it there (make ray-tests), never here
NOT_HERE = {"demo.py", "offline_ray_job.py"}
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if p.name not in NOT_HERE)


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), f"{script.name} printed nothing"


def test_demo_runs_on_a_small_set(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "demo.py"),
            "--images",
            "24",
            "--data",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "24 images ->" in result.stdout and "images/s" in result.stdout
    assert "Batch(rows=24, image: float32[24, 3, 224, 224], label: int64[24])" in result.stdout


def test_readme_python_blocks_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
