"""pad() with values or sizes NumPy cannot take: dataio errors, not builtins (issue #20)."""

from __future__ import annotations

import numpy as np
import pytest

from dataio import limits
from dataio.exceptions import LimitError, TransformError
from dataio.udfs.arrays import pad


@pytest.mark.parametrize("value", ["red", [1, [2, 3]], 10**400])
def test_pad_values_that_are_not_numbers_are_transform_errors(value: object) -> None:
    with pytest.raises((TypeError, ValueError, OverflowError)):  # the oracle refuses them
        np.asarray(value, dtype=np.float64)
    with pytest.raises(TransformError, match="pad value must be"):
        pad(np.zeros((2, 2, 3), np.uint8), top=1, bottom=0, left=0, right=0, value=value)  # type: ignore[arg-type]


def test_pad_to_a_huge_size_is_refused_before_allocating() -> None:
    image = np.zeros((2, 2, 3), np.float32)
    with pytest.raises(LimitError, match="pad of a 2x2 image to 1099511627778x2"):
        pad(image, top=2**40, bottom=0, left=0, right=0)
    with limits.scoped(max_decoded_bytes=4 * 4 * 3 * 4):  # exactly 4x4x3 float32
        assert pad(image, top=1, bottom=1, left=1, right=1).shape == (4, 4, 3)
        with pytest.raises(LimitError):
            pad(image, top=2, bottom=1, left=1, right=1)
