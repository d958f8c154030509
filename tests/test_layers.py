"""Imports point one way: plan values below the runtime, no cycles, no import-time effects."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_import_linter_contracts_hold() -> None:
    pytest.importorskip("importlinter")  # a test dependency: missing only outside `make`
    out = _python(
        "import sys\n"
        "from importlinter.cli import lint_imports\n"
        "sys.exit(lint_imports(no_cache=True))\n"
    )
    assert "0 broken" in out and "BROKEN" not in out, out


def test_importing_dataio_changes_no_environment_variable() -> None:
    out = _python(
        "import json, os\n"
        "before = dict(os.environ)\n"
        "import dataio, dataio.frame, dataio.plan.pipeline\n"
        "print(json.dumps([before, dict(os.environ)]))\n"
    )
    before, after = json.loads(out)
    assert after == before


def test_plans_are_built_without_loading_the_runtime() -> None:
    out = _python(
        "import sys\n"
        "import dataio\n"
        "pipe = dataio.pipeline(dataio.slot('x').passthrough(), dataio.batch(2))\n"
        "bound = pipe.bind([{'x': 1}, {'x': 2}])\n"
        "print(sorted(m for m in sys.modules if m == 'dataio.loader'"
        " or m.startswith('dataio.engine')))\n"
        "with bound.run() as loader:\n"
        "    print([[int(v) for v in b['x']] for b in loader])\n"
        "print('dataio.loader' in sys.modules)\n"
    )
    assert out.splitlines() == ["[]", "[[1, 2]]", "True"]
