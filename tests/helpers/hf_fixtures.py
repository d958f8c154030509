"""Fixtures of the hf:// tests: huggingface_hub installed and hidden, no telemetry, and
no name lookup beyond the loopback. Import them into a test module to use them."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from typing import Any

import huggingface_hub
import pytest

from helpers.cloud_servers import HubServer

__all__ = ["loopback_only", "mode", "no_telemetry"]


@pytest.fixture(params=["huggingface_hub", "fallback"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, hub: HubServer) -> str:
    """Each test runs with huggingface_hub importable, and with it hidden."""
    if request.param == "fallback":
        monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import raises ImportError
    else:  # as if HF_ENDPOINT was set before it was imported
        constants = huggingface_hub.constants
        template = hub.url + "/{repo_id}/resolve/{revision}/{filename}"
        monkeypatch.setattr(constants, "ENDPOINT", hub.url)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    return str(request.param)


@pytest.fixture(autouse=True)
def no_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_DISABLE_TELEMETRY=1 for huggingface_hub, which read it at import: with
    telemetry on it fetches an agent registry from its endpoint for its user agent."""
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_TELEMETRY", True)


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Fail any Python-level name lookup of a host other than the loopback."""
    asked: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name not in ("127.0.0.1", "localhost", "::1"):
            asked.append(name)
            raise OSError(f"test: no network beyond 127.0.0.1 ({name!r})")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield asked
    assert not asked, f"something looked up {asked}"
