"""Ray starts only inside a network namespace whose one interface is ``lo``.

Ray cannot be held to loopback by its settings (it moves its node address to another
interface and probes cloud metadata addresses at start), so these tests run as
``unshare -n -- sh -c 'ip link set lo up && RAY_USAGE_STATS_ENABLED=0 python -m pytest
tests/ray'`` (``make test`` does). The guard below refuses to start Ray anywhere else:
every test here then fails at its fixture, saying so. The main ``pytest`` run does not
collect this folder (``norecursedirs``).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

#: small enough for 2 cores and a few hundred MB of memory
RAY_INIT = {
    "address": "local",
    "num_cpus": 2,
    "include_dashboard": False,
    "object_store_memory": 200 * 2**20,
}


def pytest_configure(config: pytest.Config) -> None:
    # Ray's own deprecation notices (its DataContext warns about its own defaults)
    config.addinivalue_line("filterwarnings", r"ignore::DeprecationWarning:ray\..*")


def only_loopback() -> str | None:
    """Why Ray may not start here, or ``None`` when only ``lo`` is up in this namespace."""
    names = [name for _, name in socket.if_nameindex()]
    if names != ["lo"]:
        return (
            f"Ray starts only in a network namespace with nothing but lo; this one has "
            f"{names}: run unshare -n -- sh -c 'ip link set lo up && "
            "RAY_USAGE_STATS_ENABLED=0 python -m pytest tests/ray' (make test does)"
        )
    if os.environ.get("RAY_USAGE_STATS_ENABLED") != "0":
        return "set RAY_USAGE_STATS_ENABLED=0 for the Ray tests"
    return None


def ready_to_start() -> Any:
    """Check the namespace, point workers at this checkout, return the ``ray`` module."""
    reason = only_loopback()
    if reason is not None:
        pytest.fail(reason, pytrace=False)
    # workers import dataio from the checkout
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    old = os.environ.get("PYTHONPATH")
    if root not in (old or "").split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *([old] if old else [])])
    import ray
    import ray.data

    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    return ray


@pytest.fixture(scope="module")
def ray_ready() -> Any:
    """The ``ray`` module, once the namespace is checked (for fixtures starting their own)."""
    return ready_to_start()


@pytest.fixture(scope="module")
def ray_session() -> Iterator[Any]:
    """One local Ray per test module (Ray takes seconds to start; the node-loss module
    starts its own test cluster instead)."""
    ray = ready_to_start()
    ray.init(**RAY_INIT, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
