"""dataio.limits: one place for the bounds hostile sizes are checked against."""

from __future__ import annotations

import subprocess
import sys

import pytest

import dataio
from dataio import limits


def test_defaults_scoped_and_set_restore() -> None:
    assert limits.get() == limits.Limits()
    with limits.scoped(max_jpeg_scans=7) as inside:
        assert inside.max_jpeg_scans == 7 and limits.get().max_jpeg_scans == 7
    assert limits.get().max_jpeg_scans == limits.Limits().max_jpeg_scans
    previous = limits.set(max_image_pixels=10)
    try:
        assert limits.get().max_image_pixels == 10
    finally:
        limits.set(max_image_pixels=previous.max_image_pixels)
    assert limits.get() == limits.Limits()


def test_check_names_the_limit_and_how_to_raise_it() -> None:
    limits.check("max_image_pixels", limits.get().max_image_pixels, what="at the limit")
    with pytest.raises(dataio.LimitError) as info:
        limits.check("max_image_pixels", 65500 * 65500, what="JPEG 'a.jpg' of 65500x65500")
    error = info.value
    assert isinstance(error, dataio.DataioError) and isinstance(error, ValueError)
    assert (error.name, error.value, error.limit) == ("max_image_pixels", 65500 * 65500, 1 << 28)
    assert "a.jpg" in str(error) and "dataio.limits.set(max_image_pixels=" in str(error)


@pytest.mark.parametrize(
    "changes",
    [
        {"max_image_pixels": 0},
        {"max_jpeg_scans": -1},
        {"max_jpeg_scans": True},
        {"no_such_limit": 3},
    ],
)
def test_bad_values_are_plan_errors(changes: dict[str, int]) -> None:
    with pytest.raises(dataio.PlanError):
        limits.set(**changes)
    assert limits.get() == limits.Limits()


def test_environment_sets_limits_at_first_use() -> None:
    code = "import dataio; l = dataio.limits.get(); print(l.max_jpeg_scans, l.max_image_pixels)"
    env = {"DATAIO_LIMITS": "max_jpeg_scans=500, max_image_pixels=1024", "PATH": ""}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["500", "1024"], out.stderr
    env["DATAIO_LIMITS"] = "max_jpeg_scans"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode != 0 and "DATAIO_LIMITS" in out.stderr
