"""Every test that skips without a GPU carries the ``gpu`` marker (issue #18).

``make gpu-check`` selects tests with ``-m gpu``: a CUDA test without the marker is
deselected there, and skipped everywhere else, so it would never run at all. Three DLPack
tests were in that state. This reads the test sources and finds tests whose skip
condition or reason names CUDA or a GPU.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).parent
GPU_WORDS = re.compile(r"cuda|gpu|gpudirect", re.IGNORECASE)


def _is_gpu_mark(node: ast.expr) -> bool:
    return "pytest.mark.gpu" in ast.unparse(node)


def _needs_gpu(node: ast.expr, aliases: set[str]) -> bool:
    """A ``skipif``/``skip`` decorator (or an alias of one) that names CUDA or a GPU."""
    text = ast.unparse(node)
    if isinstance(node, ast.Name) and node.id in aliases:
        return True
    return "skip" in text and bool(GPU_WORDS.search(text))


def _skips_in_body(function: ast.FunctionDef) -> bool:
    """``if not <GPU check>: pytest.skip("... CUDA ...")`` (a skip *with* a GPU is not)."""
    for node in ast.walk(function):
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.UnaryOp)):
            continue
        if not isinstance(node.test.op, ast.Not):
            continue
        for inner in node.body:
            text = ast.unparse(inner)
            if text.startswith("pytest.skip(") and GPU_WORDS.search(text):
                return True
    return False


def unmarked_gpu_tests(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    aliases: set[str] = set()  # needs_cuda = pytest.mark.skipif(not CUDA, ...)
    module_marked = False
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                if target.id == "pytestmark" and _is_gpu_mark(node.value):
                    module_marked = True
                elif _needs_gpu(node.value, set()) and "mark.skipif" in ast.unparse(node.value):
                    aliases.add(target.id)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test"):
            continue
        marked = module_marked or any(_is_gpu_mark(d) for d in node.decorator_list)
        gated = any(_needs_gpu(d, aliases) for d in node.decorator_list) or _skips_in_body(node)
        if gated and not marked:
            where = path.relative_to(TESTS.parent) if path.is_relative_to(TESTS) else path.name
            found.append(f"{where}::{node.name}")
    return found


def test_every_gpu_gated_test_is_marked_gpu() -> None:
    found = [name for path in sorted(TESTS.rglob("test_*.py")) for name in unmarked_gpu_tests(path)]
    assert found == [], f"add @pytest.mark.gpu (make gpu-check selects -m gpu): {found}"


def test_the_check_sees_an_unmarked_cuda_test(tmp_path: Path) -> None:
    bad = tmp_path / "test_unmarked.py"
    source = (
        "import pytest, torch\n"
        "needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason='no CUDA')\n"
        "@needs_cuda\ndef test_a(): pass\n"
        "@pytest.mark.skipif(True, reason='needs a CUDA GPU')\ndef test_b(): pass\n"
        "def test_c():\n    if not torch.cuda.is_available():\n"
        "        pytest.skip('GPUDirect needs a CUDA device')\n"
        "def test_e():\n    if torch.cuda.is_available():\n        pytest.skip('has a GPU')\n"
        "@pytest.mark.gpu\n@needs_cuda\ndef test_d(): pass\n"
    )
    bad.write_text(source)
    assert [n.rsplit("::", 1)[1] for n in unmarked_gpu_tests(bad)] == ["test_a", "test_b", "test_c"]
