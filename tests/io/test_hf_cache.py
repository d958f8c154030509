"""Online hf:// reads and the shared Hugging Face cache: with huggingface_hub installed, a
whole-file read lands in ``HF_HUB_CACHE`` (the layout of ``hf_hub_download``) and later
reads, online and offline, are served from there; ranged reads stay ranged. Without it
(hidden), files are read directly and the cache is left alone.

The Hub is helpers/cloud_servers.py's HubServer on 127.0.0.1; huggingface_hub itself is
the oracle for what the cache holds (``try_to_load_from_cache``, ``hf_hub_download``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import huggingface_hub
import numpy as np
import pytest
from helpers import hf_fixtures
from helpers.cloud_servers import HubServer
from helpers.servers import free_port
from huggingface_hub import (  # bound now: tests hide the package
    file_download,
    try_to_load_from_cache,
)
from safetensors.numpy import load as safetensors_load
from safetensors.numpy import save as save_safetensors

import dataio
import dataio.io as dio
from dataio.exceptions import NotFoundError, TransportError
from dataio.io import hf
from dataio.io.ranged import RangedFile

mode = hf_fixtures.mode
no_telemetry = hf_fixtures.no_telemetry
loopback_only = hf_fixtures.loopback_only

CONFIG = b'{"model_type": "tiny"}'
WEIGHTS = bytes(range(256)) * 40  # over HubServer's LFS threshold: served by the CDN
TENSORS = {
    "small": np.arange(12, dtype=np.float32).reshape(3, 4),
    "big": np.arange(64 * 1024, dtype=np.int32),
}


@pytest.fixture
def model(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> HubServer:
    repo = hub.repo("models", "org/tiny")
    repo.put("config.json", CONFIG)
    repo.put("weights.bin", WEIGHTS)
    repo.put("model.safetensors", save_safetensors(TENSORS))
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    return hub


def _in_cache(filename: str, revision: str = "main") -> bytes | None:
    """What huggingface_hub finds in the shared cache for org/tiny's ``filename``."""
    with pytest.MonkeyPatch.context() as patch:  # present even where a test hides it
        patch.setitem(sys.modules, "huggingface_hub", huggingface_hub)
        found = try_to_load_from_cache(
            "org/tiny", filename, cache_dir=hf.cache_dir(), revision=revision
        )
    return Path(found).read_bytes() if isinstance(found, str) else None


def _gets(hub: HubServer) -> list[tuple[str, str, dict[str, str]]]:
    """The GETs the Hub's CDN answered: the bodies of weights.bin and model.safetensors
    (the Hub redirects them there)."""
    return [r for r in hub.cdn.requests if r[0] == "GET"]


def _config_gets(hub: HubServer) -> int:
    """The GETs of config.json (a small file, which the Hub serves itself)."""
    return sum(1 for m, p, _ in hub.requests if m == "GET" and p.endswith("/config.json"))


def test_whole_reads_go_through_the_shared_cache(
    model: HubServer, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = "hf://org/tiny/weights.bin"
    assert dio.read(uri) == WEIGHTS
    assert len(_gets(model)) == 1
    if mode == "fallback":  # read directly: the cache is left alone, each read fetches
        assert _in_cache("weights.bin") is None
        assert dio.read(uri) == WEIGHTS
        assert len(_gets(model)) == 2
        return
    assert _in_cache("weights.bin") == WEIGHTS  # where hf_hub_download puts it
    # later whole reads, in every form, are served by the cache: the Hub is asked
    # for the revision (a HEAD), the CDN for nothing
    assert dio.read(uri) == WEIGHTS
    buffer = bytearray(len(WEIGHTS))
    assert dio.fetch_into(uri, buffer) == len(WEIGHTS)
    assert bytes(buffer) == WEIGHTS
    assert dio.read("hf://org/tiny/config.json", format="json") == {"model_type": "tiny"}
    assert dio.read("hf://org/tiny/config.json") == CONFIG
    assert _in_cache("config.json") == CONFIG
    assert len(_gets(model)) == 1
    assert _config_gets(model) == 1
    # offline, the same files read from the cache with no request at all
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = len(model.requests) + len(model.cdn.requests)
    assert dio.read(uri) == WEIGHTS
    assert dio.read("hf://org/tiny/config.json") == CONFIG
    assert len(model.requests) + len(model.cdn.requests) == before


def test_a_new_revision_is_downloaded_again(model: HubServer, mode: str) -> None:
    uri = "hf://org/tiny/config.json"
    assert dio.read(uri) == CONFIG
    model.repo("models", "org/tiny").put("config.json", b'{"model_type": "v2"}')
    # main moved on: the cached copy of the old commit is not served
    assert dio.read(uri) == b'{"model_type": "v2"}'
    if mode == "huggingface_hub":
        assert _in_cache("config.json") == b'{"model_type": "v2"}'


@pytest.mark.usefixtures("mode")
def test_a_file_huggingface_hub_downloaded_is_not_fetched_again(model: HubServer) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "huggingface_hub", huggingface_hub)
        path = huggingface_hub.hf_hub_download(
            "org/tiny", "weights.bin", endpoint=model.url, cache_dir=hf.cache_dir(), token=False
        )
    fetched = len(_gets(model))
    hidden = sys.modules.get("huggingface_hub") is None
    assert dio.read("hf://org/tiny/weights.bin") == Path(path).read_bytes() == WEIGHTS
    assert len(_gets(model)) == fetched + (1 if hidden else 0)


def test_ranged_reads_stay_ranged(model: HubServer, mode: str) -> None:
    uri = "hf://org/tiny/model.safetensors"
    got = dataio.read_safetensors(uri, keys=["small"])
    np.testing.assert_array_equal(got["small"], TENSORS["small"])
    assert dio.read("hf://org/tiny/weights.bin", offset=1000, size=24) == WEIGHTS[1000:1024]
    # nothing was downloaded whole, nor cached
    gets = _gets(model)
    assert gets and all("range" in {k.lower() for k in h} for _, _, h in gets), gets
    fetched = sum(len(WEIGHTS) if "weights" in p else 0 for _, p, _ in gets)
    assert fetched < len(WEIGHTS)
    assert _in_cache("model.safetensors") is None
    assert _in_cache("weights.bin") is None


def test_a_missing_file_is_not_found_naming_the_uri(model: HubServer, mode: str) -> None:
    with pytest.raises(NotFoundError, match=re.escape("hf://org/tiny/nothing.bin")):
        dio.read("hf://org/tiny/nothing.bin")
    with pytest.raises(NotFoundError, match=re.escape("hf://org/tiny/nothing.bin")):
        dio.fetch_into("hf://org/tiny/nothing.bin", bytearray(8))


def test_the_hub_down_serves_the_cached_copy_where_there_is_one(
    model: HubServer, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert dio.read("hf://org/tiny/config.json") == CONFIG
    # the Hub becomes unreachable (nothing listens there)
    dead = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("HF_ENDPOINT", dead)
    if mode == "huggingface_hub":  # as if HF_ENDPOINT was set when it was imported
        constants = huggingface_hub.constants
        monkeypatch.setattr(constants, "ENDPOINT", dead)
        template = dead + "/{repo_id}/resolve/{revision}/{filename}"
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
        # hf_hub_download asks an unreachable Hub again for 20 s with backoff: not here
        monkeypatch.setattr(file_download, "_DEFAULT_RETRY_ON_EXCEPTIONS", ())
    if mode == "huggingface_hub":  # as hf_hub_download: the cached copy of the revision
        assert dio.read("hf://org/tiny/config.json") == CONFIG
    else:
        with pytest.raises(TransportError, match=re.escape("hf://org/tiny/config.json")):
            dio.read("hf://org/tiny/config.json")
    with pytest.raises(TransportError, match=re.escape("hf://org/tiny/weights.bin")):
        dio.read("hf://org/tiny/weights.bin")  # never cached


@pytest.mark.usefixtures("mode")
def test_a_cache_it_may_not_write_reads_directly(
    model: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> str:
        raise PermissionError(13, "Permission denied", hf.cache_dir())

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    assert dio.read("hf://org/tiny/weights.bin") == WEIGHTS
    assert _in_cache("weights.bin") is None


def test_ranged_reads_of_a_cached_file_read_the_cache(model: HubServer, mode: str) -> None:
    uri = "hf://org/tiny/model.safetensors"
    whole = dio.read(uri)  # into the shared cache, with huggingface_hub
    assert safetensors_load(whole).keys() == TENSORS.keys()
    before = len(_gets(model))
    got = dataio.read_safetensors(uri, keys=["small"])
    np.testing.assert_array_equal(got["small"], TENSORS["small"])
    since = len(model.requests)
    with RangedFile("hf://org/tiny/weights.bin") as f:  # never downloaded whole: ranges
        assert f.size == len(WEIGHTS)
        asked = [m for m, _, _ in model.requests[since:]]
        assert f.pread(100, 10) == WEIGHTS[100:110]
    # one HEAD to the Hub for the size (with huggingface_hub: its HEAD, which also told
    # the commit; without, obstore's, which follows the redirect to the CDN)
    assert asked.count("HEAD") == 1, asked
    ranged = [r for r in _gets(model)[before:] if "range" in {k.lower() for k in r[2]}]
    if mode == "huggingface_hub":  # the tensor came from the cached file
        assert len(ranged) == 1, ranged  # weights.bin's only
    else:
        assert len(ranged) >= 2, ranged  # the header, the tensor, weights.bin
    # a new commit of the file: the cached copy is not the current one, read the Hub
    model.repo("models", "org/tiny").put("model.safetensors", save_safetensors(TENSORS))
    before = len(_gets(model))
    got = dataio.read_safetensors(uri, keys=["small"])
    np.testing.assert_array_equal(got["small"], TENSORS["small"])
    assert len(_gets(model)) > before
