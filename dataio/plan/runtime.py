"""Where plan values find the runtime that runs them.

Plans are values (:mod:`dataio.plan.pipeline`, :mod:`dataio.frame`, ...) and sit below the
runtime that executes them (:mod:`dataio.loader`, :mod:`dataio.engine`), which imports
them. So that imports point one way, a plan never imports the runtime: a terminal
(``BoundPipeline.run``, ``LazyFrame.collect``) asks this module for it. The package's
``__init__`` installs the entry points when ``dataio`` is imported, as functions that
import the runtime on first use (``import dataio`` loads neither the loader nor
DataFusion). Tests can install stand-ins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dataio.exceptions import DataioError

__all__ = ["apply_arrow", "engine", "install", "loader"]

_providers: dict[str, Callable[[], Any]] = {}


def install(**providers: Callable[[], Any]) -> None:
    """Install entry points: ``loader`` returns the Loader class, ``engine`` the frame
    engine's API (:mod:`dataio.engine.frames`), ``apply_arrow`` the Arrow batch entry
    point (:mod:`dataio.engine.apply`)."""
    _providers.update(providers)


def _get(name: str) -> Any:
    try:
        provider = _providers[name]
    except KeyError:  # pragma: no cover - dataio/__init__.py installs both
        raise DataioError(f"dataio's runtime entry {name!r} is not installed") from None
    return provider()


def apply_arrow() -> Any:
    """The batch entry point :func:`dataio.engine.apply.apply_arrow`."""
    return _get("apply_arrow")


def loader() -> Any:
    """The :class:`~dataio.loader.Loader` class."""
    return _get("loader")


def engine() -> Any:
    """The frame engine's API: :mod:`dataio.engine.frames`."""
    return _get("engine")
