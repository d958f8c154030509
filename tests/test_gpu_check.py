"""``make gpu-check`` (benchmarks/gpu_check.py) on the CPU, its host setup stubbed.

Its setup needs a GPU host (torch's CUDA build, the wheels); what runs after is checked
here: the GPU tests run through pytest and come back as table rows with their skip
reasons, the benchmark's rows come through ``gpu.py --json``, and the exit status says
whether anything failed.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def check(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    module = load()
    monkeypatch.setattr(module, "choose_python", lambda _: (sys.executable, [("torch", "stub")]))
    monkeypatch.setattr(module, "install", lambda *_: [("wheels", "stub")])
    monkeypatch.setattr(module, "build", lambda _: (True, ""))
    monkeypatch.setenv("DATAIO_BENCH_DATA", str(tmp_path / "data"))
    return module


def test_a_run_prints_one_table_of_tests_and_rows(
    check: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    probe = tmp_path / "test_probe_gpu.py"
    probe.write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.mark.gpu
            def test_runs():
                pass

            @pytest.mark.gpu
            def test_skips():
                pytest.skip("needs a CUDA GPU (probe)")

            def test_not_selected():
                pass
            """
        )
    )
    monkeypatch.setattr(check, "GPU_TESTS", (str(probe),))
    out = tmp_path / "out"
    quick = ["--allow-no-gpu", "--bench-args", "--quick --images 24"]
    status = check.main(["--work", str(tmp_path / "work"), "--out", str(out), *quick])
    printed = capsys.readouterr().out
    table = printed[printed.rindex("part ") :]
    lines = table.splitlines()
    assert lines[0].split() == ["part", "item", "result", "detail"]
    assert any(
        line.startswith("test ") and "::test_runs" in line and "passed" in line for line in lines
    )
    assert any("::test_skips" in line and "skipped" in line and "(probe)" in line for line in lines)
    assert not any("test_not_selected" in line for line in lines)  # -m gpu only
    assert any(line.startswith("bench ") and "pinned bounce -> cpu" in line for line in lines)
    assert any(
        line.startswith("bench ") and "benchmarks/gpu.py" in line and " ok " in line
        for line in lines
    )
    assert status == 0
    assert (out / "table.txt").read_text().strip() == table.strip()
    assert (out / "junit.xml").exists() and (out / "bench.json").exists()


def test_a_failed_gpu_test_fails_the_run(
    check: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    probe = tmp_path / "test_probe_fail.py"
    probe.write_text("import pytest\n\n@pytest.mark.gpu\ndef test_breaks():\n    assert 1 == 2\n")
    monkeypatch.setattr(check, "GPU_TESTS", (str(probe),))
    monkeypatch.setitem(check.LIMITS, "bench", 60)
    status = check.main(
        ["--work", str(tmp_path / "work"), "--allow-no-gpu", "--bench-args", "--quick --images 12"]
    )
    table = capsys.readouterr().out.rsplit("part ", 1)[1]
    assert status == 1
    assert "::test_breaks" in table and "FAILED" in table and "exit status 1" in table


def test_without_a_gpu_it_stops_after_setup_and_says_why(
    check: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check.main(["--work", str(tmp_path / "work")]) == 1
    table = capsys.readouterr().out.rsplit("part ", 1)[1]
    assert "torch.cuda" in table and "no GPU" in table
    assert not (tmp_path / "work" / "junit.xml").exists()  # no tests ran


def test_a_venv_made_from_a_cuda_python_sees_its_packages(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A GPU image's torch lives in a venv: a venv made from it sees only the base
    interpreter's packages, so gpu-check links the image's site-packages in a .pth."""
    check = load()
    monkeypatch.setattr(check, "VENV", tmp_path / "venv")
    base = check.probe(sys.executable, [])
    python = check.make_venv(base, share=True)
    seen = check.probe(python, ["ml_dtypes", "torch", "no_such_module_here"])
    assert seen["torch"] == base["torch"] and seen["missing"] == ["no_such_module_here"]
    assert set(base["site"]) <= set(seen["site"])
    python = check.make_venv(base, share=False)  # a CPU-only torch: the venv stands alone
    assert check.probe(python, ["ml_dtypes"])["missing"] == ["ml_dtypes"]  # a test extra


def test_a_wheels_libcufile_goes_on_the_loader_path(tmp_path: Path) -> None:
    """kvikio's cuda.pathfinder searches only the running venv's site-packages."""
    check = load()
    cu12 = tmp_path / "base" / "nvidia" / "cufile" / "lib"
    cu13 = tmp_path / "venv" / "nvidia" / "cu13" / "lib"
    for folder in (cu12, cu13):
        folder.mkdir(parents=True)
        (folder / "libcufile.so.0").write_bytes(b"")
    (tmp_path / "other" / "nvidia" / "cublas" / "lib").mkdir(parents=True)
    site = [str(tmp_path / name) for name in ("venv", "base", "other")]
    assert check.cufile_dirs(site) == [str(cu13), str(cu12)]
