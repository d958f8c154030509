"""``make gpu-check``: set up, run the GPU tests and ``benchmarks/gpu.py``, print one table.

Runs with any Python >= 3.11 (standard library only) on a host with an NVIDIA GPU, from
the repository root::

    python3 benchmarks/gpu_check.py [--wheels DIR] [--python PY] [--out DIR]

Setup, in ``.venv-gpu`` (kept between runs):

* **torch with CUDA.** A Python whose torch was built with CUDA (a GPU image's) is
  reused: the venv sees its packages through a ``.pth`` file. One without (a CPU-only
  wheel, as ``make test``'s extras install from a local wheel cache) gets torch's CUDA
  build from PyPI instead, and says so.
* **What is missing** of dataio's needs (numpy, pyarrow, Pillow, simplejpeg), the tests'
  (pytest, safetensors, ml_dtypes, psutil) and the GPU libraries (``nvidia-dali-cuda120``;
  ``kvikio-cuNN`` for torch's CUDA major, with ``--no-deps``: its CuPy requirement would
  fight a CuPy already there) is installed, from ``--wheels DIR`` with ``--no-index``
  (a host without a network: ``make gpu-wheels`` fills ``.whl`` for one) or from PyPI.
  What cannot be installed is a row of the table, and its tests skip saying why.
* dataio's C extensions are built in place for that Python.

Then ``pytest -m gpu`` over the files holding GPU tests and ``benchmarks/gpu.py``, each
under a time limit (the whole run fits 8 minutes), and one table: every GPU test's
outcome (with the skip reason), every benchmark row. The exit status is 1 when a test
failed or a step did not finish.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-gpu"
#: test files holding ``gpu`` tests (a whole-suite run would collect files needing
#: packages a GPU image lacks: moto, datafusion, ...)
GPU_TESTS = (
    "tests/test_gds.py",
    "tests/test_gpu_kvikio.py",
    "tests/test_dlpack.py",
    "tests/formats/test_safetensors.py",
    "tests/test_torch_integration.py",
    "tests/engine/test_dali.py",
    "tests/rdma/test_serve_cuda.py",
    "tests/rdma/test_client.py",
)
#: import name -> distribution, what dataio, the GPU tests and the benchmark import
NEEDED = {
    "numpy": "numpy",
    "pyarrow": "pyarrow",
    "PIL": "pillow",
    "simplejpeg": "simplejpeg",
    "pytest": "pytest",
    "safetensors": "safetensors",
    "ml_dtypes": "ml_dtypes",
    "psutil": "psutil",
    "setuptools": "setuptools",
}
#: seconds: setup (each pip call, the build), tests, benchmark; and the whole run, which
#: the tests and the benchmark are cut to (8 minutes with the machine's start-up)
LIMITS = {"setup": 150, "tests": 140, "bench": 170, "total": 450}

#: pip options for installs from an index: a host without a network fails in seconds
FAST = ("-q", "--retries", "1", "--timeout", "15")

PROBE = r"""
import importlib.util, json, sys
out = {"python": sys.version.split()[0], "executable": sys.executable}
try:
    import torch
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    out["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
except Exception as exc:
    out["torch"], out["torch_error"] = None, f"{type(exc).__name__}: {exc}"
import site
out["site"] = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
def absent(name):
    try:
        return importlib.util.find_spec(name) is None
    except ImportError:  # a dotted name whose parent is missing
        return True
out["missing"] = [m for m in sys.argv[1:] if absent(m)]
print(json.dumps(out))
"""


def log(message: str) -> None:
    print(f"gpu-check: {message}", flush=True)


def probe(python: str, modules: list[str]) -> dict:
    done = subprocess.run(
        [python, "-c", PROBE, *modules], capture_output=True, text=True, timeout=120, env=ENV
    )
    if done.returncode != 0:
        raise SystemExit(f"gpu-check: {python} does not run: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def pip(python: str, *args: str, timeout: float | None = None) -> tuple[bool, str]:
    """One pip command under the setup limit: ``(succeeded, the end of its output)``."""
    limit = timeout or LIMITS["setup"]
    try:
        done = subprocess.run(
            [python, "-m", "pip", "--disable-pip-version-check", *args],
            capture_output=True,
            text=True,
            timeout=limit,
            env=ENV,
        )
    except subprocess.TimeoutExpired:
        return False, f"pip {' '.join(args[:3])} ... did not finish in {limit:.0f} s"
    return done.returncode == 0, (done.stdout + done.stderr).strip()[-600:]


def torch_requirement() -> str:
    """The torch the test extras pin (PyPI's Linux wheels of it are CUDA builds)."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [r for r in extras["optional-dependencies"]["test"] if r.startswith("torch")]
    return found[0] if found else "torch"


def make_venv(base: dict, *, share: bool) -> str:
    """``.venv-gpu`` from ``base``'s interpreter; ``share``: it sees base's packages.

    A shared venv is made without pip: pip and setuptools come from base through the
    ``.pth`` (a venv's own, bundled on Python <= 3.11, would shadow base's setuptools
    with one too old for pyproject's ext-modules), and pip installs into the venv.
    """
    python = str(VENV / "bin" / "python")
    marker = VENV / ".gpu-check-shared"
    if Path(python).exists() and marker.exists() != share:  # made the other way: remake
        shutil.rmtree(VENV)
    if not Path(python).exists():
        command = [
            base["executable"],
            "-m",
            "venv",
            *(["--without-pip"] if share else []),
            str(VENV),
        ]
        subprocess.run(command, check=True, timeout=120)
        if share:
            marker.touch()
    version = probe(python, [])["python"].rsplit(".", 1)[0]
    link = VENV / "lib" / f"python{version}" / "site-packages" / "_gpu_check_base.pth"
    if share:  # a venv made from a venv sees its base's packages only through this
        link.write_text("\n".join(base["site"]) + "\n")
    return python


def choose_python(requested: str | None) -> tuple[str, list[tuple[str, str]]]:
    """A Python with torch's CUDA build, made ready in ``.venv-gpu``; setup notes."""
    notes: list[tuple[str, str]] = []
    existing = VENV / "bin" / "python"
    base = probe(requested or "python3", [])
    if base.get("torch_cuda"):
        python = make_venv(base, share=True)
        notes.append(
            ("torch", f"{base['torch']} (CUDA {base['torch_cuda']}) of {base['executable']}")
        )
        return python, notes
    why = (
        f"torch {base['torch']} of {base['executable']} was built without CUDA (a CPU-only wheel)"
        if base.get("torch")
        else f"{base['executable']} has no torch"
    )
    if existing.exists() and probe(str(existing), []).get("torch_cuda"):
        notes.append(("torch", f"{why}; using .venv-gpu's CUDA build"))
        return str(existing), notes
    log(f"{why}: installing torch's CUDA build from PyPI into .venv-gpu")
    python = make_venv(base, share=False)
    pypi = ["--isolated", "install", *FAST, "--index-url", "https://pypi.org/simple"]
    # about 3 GB with CUDA's wheels: twice the time of another pip call
    ok, out = pip(python, *pypi, torch_requirement(), timeout=2 * LIMITS["setup"])
    if not ok:
        raise SystemExit(f"gpu-check: {why}, and torch's CUDA build did not install: {out}")
    pip(python, "install", *FAST, "setuptools>=74.1")  # pyproject's ext-modules need it
    found = probe(python, [])
    if not found.get("torch_cuda"):
        raise SystemExit(f"gpu-check: PyPI's torch {found.get('torch')} has no CUDA here")
    notes.append(("torch", f"{found['torch']} (CUDA {found['torch_cuda']}) from PyPI ({why})"))
    return python, notes


def install(python: str, wheels: Path | None, cuda_major: str) -> list[tuple[str, str]]:
    """Install what is missing; a note per package that is still missing after."""
    optional = {"nvidia.dali": "nvidia-dali-cuda120", "kvikio": f"kvikio-cu{cuda_major}"}
    missing = probe(python, [*NEEDED, *optional])["missing"]
    notes: list[tuple[str, str]] = []
    if wheels is not None:
        files = sorted(str(p) for p in wheels.glob("*.whl"))
        if files:
            ok, out = pip(python, "install", "-q", "--no-index", "--no-deps", *files)
            notes.append((f"wheels from {wheels}", f"{len(files)} installed" if ok else out))
    elif missing:
        plain = [NEEDED[m] for m in missing if m in NEEDED]
        if "nvidia.dali" in missing:
            plain.append(optional["nvidia.dali"])
        if plain:
            ok, out = pip(python, "install", *FAST, *plain)
            if not ok:
                notes.append(("pip install " + " ".join(plain), out))
        if "kvikio" in missing:  # its CuPy requirement would replace the CuPy already there
            kvikio = [optional["kvikio"], f"lib{optional['kvikio']}", "rapids-logger==0.3.*",
                      "cuda-pathfinder"]  # fmt: skip
            ok, out = pip(python, "install", *FAST, "--no-deps", *kvikio)
            if not ok:
                notes.append(("pip install --no-deps " + " ".join(kvikio), out))
            if not cufile_dirs(probe(python, [])["site"]):  # libkvikio loads libcufile.so.0
                ok, out = pip(python, "install", *FAST, f"cuda-toolkit[cufile]=={cuda_major}.*")
                if not ok:
                    notes.append((f"pip install cuda-toolkit[cufile]=={cuda_major}.*", out))
    still = probe(python, [*NEEDED, *optional])["missing"]
    for module in still:
        name = NEEDED.get(module) or optional[module]
        notes.append((name, "not installed: its tests and rows skip or fail saying so"))
    return notes


def cufile_dirs(site: list[str]) -> list[str]:
    """Folders holding a pip wheel's libcufile.so.0, for the loader path: kvikio's
    ``cuda.pathfinder`` searches only its own venv's site-packages, dataio's probe the
    loader path."""
    found = []
    for folder in site:
        for lib in Path(folder).glob("nvidia/*/lib/libcufile.so.0"):
            found.append(str(lib.parent))
    return found


def build(python: str) -> tuple[bool, str]:
    """dataio's C extensions for ``python``, checked by importing the two it needs (an
    older setuptools than pyproject's 74.1 would build none and say nothing)."""
    done = subprocess.run(
        [python, "-c", "from setuptools import setup; setup()", "build_ext", "--inplace", "-q"],
        cwd=ROOT, capture_output=True, text=True, timeout=LIMITS["setup"], env=ENV,
    )  # fmt: skip
    if done.returncode != 0:
        return False, (done.stdout + done.stderr).strip()[-600:]
    check = "import dataio.udfs._resample, dataio.io._bytes"
    done = subprocess.run([python, "-c", check], capture_output=True, text=True, cwd=ROOT,
                          env={**ENV, "PYTHONPATH": str(ROOT)}, timeout=60)  # fmt: skip
    return done.returncode == 0, done.stderr.strip()[-600:]


def rdma_ready(python: str) -> tuple[bool, str]:
    """Whether dataio.rdma's shim builds here (libfabric's headers and cffi)."""
    check = "from dataio.rdma._loader import shim_or_raise; shim_or_raise()"
    try:
        done = subprocess.run([python, "-c", check], capture_output=True, text=True,
                              timeout=120, cwd=ROOT, env=ENV)  # fmt: skip
    except subprocess.TimeoutExpired:
        return False, "building the libfabric shim took over 120 s"
    lines = done.stderr.strip().splitlines()
    return done.returncode == 0, (lines[-1] if lines else "")[:200]


def run_step(name: str, cmd: list[str], out: Path, left: float) -> tuple[str, float]:
    """Run one step under its limit (and the ``left`` seconds of the whole run), its
    output into ``out``; then its tail is printed."""
    start = time.monotonic()
    status = "ok"
    limit = max(10, int(min(LIMITS[name], left)))
    with out.open("w") as sink:
        try:
            done = subprocess.run(
                cmd, cwd=ROOT, env=ENV, stdout=sink, stderr=subprocess.STDOUT, timeout=limit
            )
            if done.returncode != 0:
                status = f"exit status {done.returncode}"
        except subprocess.TimeoutExpired:
            status = f"timed out after {limit} s"
    lines = out.read_text(errors="replace").splitlines()
    print("\n".join(lines[-30:]), flush=True)
    return status, time.monotonic() - start


def test_rows(junit: Path) -> list[tuple[str, str, str]]:
    if not junit.exists():
        return [("pytest", "no result", "no junit file: see the log above")]
    rows = []
    for case in ET.parse(junit).iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        outcome, detail = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = {"failure": "FAILED", "error": "ERROR", "skipped": "skipped"}[tag]
                detail = (found.get("message") or found.text or "").strip().splitlines()
                detail = detail[0] if detail else ""
                break
        rows.append((name, outcome, detail[:110]))
    return rows


def table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


ENV = dict(os.environ)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=Path, help="install from these wheels, no index")
    parser.add_argument("--python", help="the Python to start from (default python3)")
    parser.add_argument("--out", type=Path, help="also copy the logs and results here")
    parser.add_argument("--bench-args", default="", help="extra arguments for gpu.py")
    parser.add_argument("--work", type=Path, default=ROOT / ".gpu-check", help="logs here")
    parser.add_argument("--allow-no-gpu", action="store_true", help="go on without a GPU (tests)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    ENV["PYTHONUNBUFFERED"] = "1"
    setup: list[tuple[str, str]] = []
    python, notes = choose_python(args.python)
    setup += notes
    base = probe(python, [])
    major = (base.get("torch_cuda") or "12").split(".")[0]
    if args.wheels is not None and not args.wheels.is_dir():  # not carried: no index try
        setup.append(("wheels", f"{args.wheels} is no folder here: nothing installed"))
    else:
        setup += install(python, args.wheels, major)
    site = probe(python, [])["site"]
    libs = cufile_dirs(site)
    if libs:
        ENV["LD_LIBRARY_PATH"] = ":".join([*libs, ENV.get("LD_LIBRARY_PATH", "")]).rstrip(":")
    ok, out = build(python)
    setup.append(("C extensions", "built" if ok else f"build failed: {out}"))
    ENV["PYTHONPATH"] = str(ROOT)
    base = probe(python, [])
    setup.append(
        ("gpu", f"{base.get('gpu')} (torch {base.get('torch')}, CUDA {base.get('torch_cuda')})")
    )
    log(f"setup took {time.monotonic() - started:.0f} s")
    if base.get("gpu") is None and not args.allow_no_gpu:  # nothing below could say more
        why = base.get("torch_error") or "torch.cuda.is_available() is False: see nvidia-smi"
        head = [("part", "item", "result", "detail")]
        done = [("setup", name, "", detail[:110]) for name, detail in setup]
        print()
        print(table([*head, *done, ("setup", "torch.cuda", "no GPU", str(why))]))
        return 1
    files = list(GPU_TESTS)
    rdma, why = rdma_ready(python)
    if not rdma:  # tests/rdma's session fixture fails every test there without libfabric
        files = [f for f in files if not f.startswith("tests/rdma/")]
        setup.append(("GPUDirect RDMA tests", f"not run: {why}"))
    junit = work / "junit.xml"
    junit.unlink(missing_ok=True)
    tests, tests_s = run_step(
        "tests",
        [python, "-m", "pytest", "-m", "gpu", "-rA", "-p", "no:cacheprovider",
         "--continue-on-collection-errors", f"--junitxml={junit}", *files],
        work / "tests.log",
        left=LIMITS["total"] - (time.monotonic() - started) - 60,  # a minute for gpu.py
    )  # fmt: skip
    bench_json = work / "bench.json"
    bench_json.unlink(missing_ok=True)
    bench, bench_s = run_step(
        "bench",
        [python, "benchmarks/gpu.py", "--json", str(bench_json), *args.bench_args.split()],
        work / "bench.log",
        left=LIMITS["total"] - (time.monotonic() - started),
    )
    rows: list[tuple[str, ...]] = [("part", "item", "result", "detail")]
    rows += [("setup", name, "", detail[:110]) for name, detail in setup]
    found = test_rows(junit)
    rows += [("test", name, outcome, detail) for name, outcome, detail in found]
    rows.append(("tests", "pytest -m gpu", tests, f"{tests_s:.0f} s"))
    if bench_json.exists():
        for row in json.loads(bench_json.read_text())["rows"]:
            rows.append(("bench", row[0], f"{row[1]} {row[2]}", row[3][:110]))
    rows.append(("bench", "benchmarks/gpu.py", bench, f"{bench_s:.0f} s"))
    total = time.monotonic() - started
    rows.append(("total", "make gpu-check", "", f"{total:.0f} s"))
    print()
    print(table(rows), flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        for name in ("junit.xml", "bench.json", "tests.log", "bench.log"):
            if (work / name).exists():
                shutil.copy(work / name, args.out / name)
        (args.out / "table.txt").write_text(table(rows) + "\n")
    failed = any(outcome in ("FAILED", "ERROR") for _, outcome, _ in found)
    return 1 if failed or tests not in ("ok",) or bench != "ok" else 0


if __name__ == "__main__":
    sys.exit(main())
