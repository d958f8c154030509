"""TFRecord's CRC32C through each implementation dataio can pick (the ``crc32c`` package,
``google-crc32c``, its own table), each checked against the ``crc32c`` package as the
oracle, and the choice made by what is installed."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import crc32c as oracle
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataio.formats import tfrecord
from dataio.formats.tfrecord import crc32c, crc32c_backend, masked_crc32c


@pytest.fixture
def fresh_choice(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Forget the cached implementation before and after, so a test can choose anew."""
    monkeypatch.setattr(tfrecord, "_CRC32C", None)
    yield monkeypatch
    tfrecord._CRC32C = None


def chosen(monkeypatch: pytest.MonkeyPatch, hidden: tuple[str, ...]) -> str:
    """The implementation picked when the packages in ``hidden`` cannot be imported."""
    for name in hidden:
        monkeypatch.setitem(sys.modules, name, None)  # None: "import name" raises
    monkeypatch.setattr(tfrecord, "_CRC32C", None)
    return crc32c_backend()


def _masked(data: bytes) -> int:
    crc = oracle.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# every implementation, selected as crc32c() would select it when it is the one installed
BACKENDS: dict[str, tuple[str, ...]] = {
    "crc32c": ("google_crc32c",),
    "google-crc32c": ("crc32c",),
    "table": ("crc32c", "google_crc32c"),
}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, fresh_choice: pytest.MonkeyPatch) -> str:
    name = str(request.param)
    got = chosen(fresh_choice, BACKENDS[name])
    if name == "crc32c" and not oracle.hardware_based:
        assert got in ("crc32c", "google-crc32c")  # software crc32c ranks after google's C
        return got
    assert got == name
    return name


def as_kinds(data: bytes) -> list[Any]:
    """``data`` as each kind of buffer callers pass: bytes, bytearray, memoryview slices."""
    padded = b"x" + data + b"y"
    return [data, bytearray(data), memoryview(data), memoryview(padded)[1:-1]]


# the fixture picks the implementation once; every example runs under that choice
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=5000))
def test_each_backend_equals_the_oracle(backend: str, data: bytes) -> None:
    for kind in as_kinds(data):
        assert crc32c(kind) == oracle.crc32c(data), type(kind)
    assert masked_crc32c(data) == _masked(data)


@pytest.mark.parametrize("size", [0, 1, 8, 2047, 2048, 2049, 300_001, 1 << 20])
def test_each_backend_equals_the_oracle_at_block_edges(backend: str, size: int) -> None:
    data = np.random.default_rng(size).integers(0, 256, size, np.uint8).tobytes()
    for kind in as_kinds(data):
        assert crc32c(kind) == oracle.crc32c(data)
    assert crc32c(b"123456789") == 0xE3069283  # the check value of the CRC-32C spec


def test_the_table_is_the_fallback_when_no_package_is_installed(
    fresh_choice: pytest.MonkeyPatch,
) -> None:
    assert chosen(fresh_choice, ("crc32c", "google_crc32c")) == "table"
    data = bytes(range(256)) * 40
    assert crc32c(data) == oracle.crc32c(data)
    assert tfrecord._crc32c_impl()[1] is tfrecord._table_crc32c


def test_an_installed_package_is_used_ahead_of_the_table(fresh_choice: pytest.MonkeyPatch) -> None:
    assert chosen(fresh_choice, ()) in ("crc32c", "google-crc32c")
    calls: list[int] = []
    real: Callable[[Any], int] = oracle.crc32c
    expected = _masked(b"abc")

    def counting(data: Any) -> int:
        calls.append(len(data))
        return real(data)

    fresh_choice.setattr(oracle, "crc32c", counting)
    fresh_choice.setattr(oracle, "hardware_based", True)
    assert chosen(fresh_choice, ()) == "crc32c"
    assert masked_crc32c(b"abc") == expected and calls == [3]


def test_google_crc32c_in_pure_python_mode_is_passed_over(
    fresh_choice: pytest.MonkeyPatch,
) -> None:
    import google_crc32c

    fresh_choice.setattr(google_crc32c, "implementation", "python")
    # slower than the table: dataio keeps its own then
    assert chosen(fresh_choice, ("crc32c",)) == "table"
