"""The C extensions under conditions their callers do not usually create: a view that
outlives its owner, extreme downscales, allocation failure. ``make asan`` runs these
with AddressSanitizer, which turns a use-after-free or double free into a failure."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import numpy as np
import pytest
from helpers.sanitizers import child_env
from PIL import Image

from dataio.io import _bytes
from dataio.udfs import _resample

ROOT = Path(__file__).resolve().parents[2]


def test_blank_view_keeps_its_bytes_alive() -> None:
    n = 1 << 16
    data, view = _bytes.blank(n)
    view[:] = b"\x01" * n
    del data
    gc.collect()
    # Without a reference from the view, the bytes were freed here and these new
    # objects of the same size could take their memory: the write below would land in them.
    others = [bytes(n) for _ in range(64)]
    view[:] = b"\xab" * n
    assert all(other == bytes(n) for other in others)
    assert bytes(view) == b"\xab" * n
    owner = view.obj
    view.release()
    del owner
    gc.collect()


def test_blank_bytes_hold_what_the_view_wrote() -> None:
    data, view = _bytes.blank(10)
    view[:] = b"0123456789"
    view.release()
    assert data == b"0123456789"
    with pytest.raises(ValueError):
        _bytes.blank(0)


@pytest.mark.parametrize("simd", [True, False])
def test_extreme_downscale_matches_pillow(simd: bool) -> None:
    # one row of 2**20 pixels to one pixel: Pillow's tap count (2 * 2**20 + 1) is more
    # than the row holds; the table is capped at the row, the result unchanged
    row = np.random.default_rng(7).integers(0, 256, (1, 1 << 20, 1), np.uint8)
    out = np.empty((1, 1, 1), np.uint8)
    previous = _resample.simd() == "avx2"
    _resample.set_simd(simd)
    try:
        _resample.resample_into(
            row, 1, 1 << 20, 1, (0.0, 0.0, float(1 << 20), 1.0), out, 1, 1,
            False, False, None, None, False, False,
        )  # fmt: skip
    finally:
        _resample.set_simd(previous)
    image = Image.fromarray(row[..., 0])
    expected = np.asarray(image.resize((1, 1), Image.Resampling.BILINEAR))
    assert abs(int(out[0, 0, 0]) - int(expected[0, 0])) <= 1


def test_failed_allocation_raises_memory_error_once() -> None:
    # The vertical table of a 1 x (2**28) output needs ~5 GiB; under a 2 GiB address
    # space it fails after the horizontal one succeeded. The tables used to be freed
    # by coeffs_init and again by its caller: a double free (glibc aborts).
    script = textwrap.dedent(
        """
        import os
        import resource
        import numpy as np
        from dataio.udfs import _resample
        src = np.zeros((2, 1, 1), np.uint8)
        out = np.empty((1 << 28, 1, 1), np.uint8)
        if "libasan" not in os.environ.get("LD_PRELOAD", ""):
            resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        try:
            _resample.resample_into(
                src, 2, 1, 1, (0.0, 0.0, 1.0, 2.0), out, 1 << 28, 1,
                False, False, None, None, False, False,
            )
        except MemoryError:
            print("MemoryError")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=child_env()
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "MemoryError"


def test_extensions_build_with_warnings_as_errors() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    modules = config["tool"]["setuptools"]["ext-modules"]
    assert {m["name"] for m in modules} == {
        "dataio.udfs._resample",
        "dataio.io._bytes",
        "dataio.udfs._jpeg",
        "dataio.engine._columns",
        "dataio.sources._permute",
        "dataio.io._tarscan",
    }
    for module in modules:
        assert {"-Wall", "-Wextra", "-Werror"} <= set(module["extra-compile-args"]), module
