"""hf:// follows the Hub's conventions (those of huggingface_hub), with huggingface_hub
installed and hidden: repositories with and without owner, kind prefixes, revisions,
the login token file, HF_TOKEN, HF_ENDPOINT and HF_HUB_OFFLINE over the shared cache.

The Hub is helpers/cloud_servers.py's HubServer on 127.0.0.1; huggingface_hub itself is
the oracle for URLs (``hf_hub_url``) and writes the shared cache (``hf_hub_download``).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import huggingface_hub
import pytest
from helpers import hf_fixtures
from helpers.cloud_servers import HubServer
from huggingface_hub import hf_hub_url  # bound now: tests hide the package from dataio

import dataio.io as dio
from dataio.exceptions import AuthenticationError, DataioError, NotFoundError
from dataio.io import hf
from dataio.io.uri import parse

TOKEN = "hf_dataioTestTokenNeverShown"  # HubServer's token in conftest's ``hub``
CONFIG = b'{"model_type": "gpt2"}'
WEIGHTS = bytes(range(256)) * 20  # over HubServer's LFS threshold: served by the CDN

# the fixtures "mode" (huggingface_hub installed and hidden), "no_telemetry" and
# "loopback_only" (both autouse), shared with test_hf_cache.py
mode = hf_fixtures.mode
no_telemetry = hf_fixtures.no_telemetry
loopback_only = hf_fixtures.loopback_only


@pytest.fixture
def hub_env(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> HubServer:
    """Legacy and owned repositories; the Hub named by HF_ENDPOINT."""
    gpt2 = hub.repo("models", "gpt2")
    gpt2.put("config.json", CONFIG)
    gpt2.put("onnx/model.onnx", WEIGHTS)
    gpt2.put("onnx/README.md", b"onnx export")
    gpt2.put("config.json", b'{"pr": 1}', revision="refs/pr/1")
    owned = hub.repo("models", "openai-community/gpt2")
    owned.put("config.json", b'{"owned": true}')
    owned.put("onnx/model.onnx", WEIGHTS[::-1])
    hub.repo("datasets", "squad").put("plain_text/train.json", b'[{"q": 1}]')
    dataset = hub.repo("datasets", "org/set")
    dataset.put("data/train.json", b"[]")
    dataset.put("default/train/0.parquet", b"PAR1", revision="refs/convert/parquet")
    hub.repo("spaces", "org/demo").put("app.py", b"print('hi')")
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    return hub


def _paths(hub: HubServer, since: int = 0) -> list[str]:
    return [path for _, path, _ in hub.requests[since:]]


def _resolves(hub: HubServer, since: int = 0) -> list[str]:
    return [p for p in _paths(hub, since) if "/resolve/" in p]


def _hub_url(hub: HubServer, repo_id: str, filename: str, **kwargs: Any) -> str:
    """The resolve URL's path as huggingface_hub builds it (the oracle)."""
    url = hf_hub_url(repo_id, filename, endpoint=hub.url, **kwargs)
    return urlsplit(url).path


@pytest.mark.usefixtures("mode")
@pytest.mark.parametrize(
    ("uri", "repo_id", "filename", "kwargs", "expected"),
    [
        ("hf://gpt2/config.json", "gpt2", "config.json", {}, CONFIG),
        ("hf://gpt2/onnx/README.md", "gpt2", "onnx/README.md", {}, b"onnx export"),
        ("hf://gpt2@main/config.json", "gpt2", "config.json", {}, CONFIG),
        (
            "hf://gpt2@refs/pr/1/config.json",
            "gpt2",
            "config.json",
            {"revision": "refs/pr/1"},
            b'{"pr": 1}',
        ),
        (
            "hf://gpt2@refs%2Fpr%2F1/config.json",
            "gpt2",
            "config.json",
            {"revision": "refs/pr/1"},
            b'{"pr": 1}',
        ),
        (
            "hf://openai-community/gpt2/config.json",
            "openai-community/gpt2",
            "config.json",
            {},
            None,
        ),
        (
            "hf://models/openai-community/gpt2/config.json",
            "openai-community/gpt2",
            "config.json",
            {},
            None,
        ),
        (
            "hf://datasets/squad/plain_text/train.json",
            "squad",
            "plain_text/train.json",
            {"repo_type": "dataset"},
            b'[{"q": 1}]',
        ),
        (
            "hf://datasets/org/set/data/train.json",
            "org/set",
            "data/train.json",
            {"repo_type": "dataset"},
            b"[]",
        ),
        (
            "hf://spaces/org/demo/app.py",
            "org/demo",
            "app.py",
            {"repo_type": "space"},
            b"print('hi')",
        ),
        (
            "hf://datasets/org/set@refs/convert/parquet/default/train/0.parquet",
            "org/set",
            "default/train/0.parquet",
            {"repo_type": "dataset", "revision": "refs/convert/parquet"},
            b"PAR1",
        ),
    ],
)
def test_uris_resolve_to_the_hubs_urls(
    hub_env: HubServer,
    uri: str,
    repo_id: str,
    filename: str,
    kwargs: dict[str, str],
    expected: bytes | None,
) -> None:
    assert dio.read(uri) == (expected if expected is not None else b'{"owned": true}')
    # one GET (with huggingface_hub: its HEAD, then the GET into the shared cache)
    assert set(_resolves(hub_env)) == {_hub_url(hub_env, repo_id, filename, **kwargs)}


def test_gpt2_config_resolves_under_the_repository(hub_env: HubServer, mode: str) -> None:
    # the case: not {endpoint}/gpt2/config.json/resolve/main
    assert dio.read("hf://gpt2/config.json") == CONFIG
    assert dio.head("hf://gpt2/config.json")["size"] == len(CONFIG)
    assert set(_resolves(hub_env)) == {"/gpt2/resolve/main/config.json"}
    # the Hub was asked which repository exists, once: gpt2/config.json (no), gpt2 (yes)
    api = [(p, h) for _, p, h in hub_env.requests if p.startswith("/api/")]
    assert [p for p, _ in api] == [
        "/api/models/gpt2/config.json/revision/main",
        "/api/models/gpt2/revision/main",
    ]
    agent = api[0][1].get("User-Agent") or api[0][1].get("user-agent") or ""
    # with huggingface_hub the question goes through its HfApi, else through urllib
    assert ("hf_hub/" in agent) == (mode == "huggingface_hub"), agent
    assert ("dataio" in agent) == (mode == "huggingface_hub"), agent


@pytest.mark.usefixtures("mode")
def test_files_of_repositories_without_owner_read_list_and_glob(hub_env: HubServer) -> None:
    assert dio.read("hf://gpt2/onnx/model.onnx") == WEIGHTS  # through the CDN redirect
    assert dio.read("hf://gpt2/onnx/model.onnx", offset=300, size=50) == WEIGHTS[300:350]
    assert dio.exists("hf://gpt2/onnx/README.md")
    assert not dio.exists("hf://gpt2/onnx/missing.bin")
    assert dio.ls("hf://gpt2/") == ["hf://gpt2/config.json", "hf://gpt2/onnx/"]
    assert dio.ls("hf://gpt2/onnx/") == ["hf://gpt2/onnx/README.md", "hf://gpt2/onnx/model.onnx"]
    assert dio.glob("hf://gpt2/**/*.onnx") == ["hf://gpt2/onnx/model.onnx"]
    assert dio.glob("hf://gpt2/onnx/*.md") == ["hf://gpt2/onnx/README.md"]
    # what the listings answer reads back
    assert [dio.read(u) for u in dio.glob("hf://gpt2/*.json")] == [CONFIG]
    # a top-level file is the whole location (its key is ""): ranges and streams too
    hub_env.repo("models", "gpt2").put("model.bin", WEIGHTS)
    assert dio.read("hf://gpt2/model.bin", offset=1000, size=24) == WEIGHTS[1000:1024]
    buffer = bytearray(len(WEIGHTS))
    assert dio.fetch_into("hf://gpt2/model.bin", buffer) == len(WEIGHTS)
    assert bytes(buffer) == WEIGHTS
    assert dio.stream("hf://gpt2/model.bin").read_all() == WEIGHTS
    assert dio.reader("hf://gpt2/model.bin").read_all() == WEIGHTS
    # the owned repository of the same name is another one
    assert dio.read("hf://openai-community/gpt2/onnx/model.onnx") == WEIGHTS[::-1]
    assert dio.ls("hf://openai-community/gpt2/") == [
        "hf://openai-community/gpt2/config.json",
        "hf://openai-community/gpt2/onnx/",
    ]


@pytest.mark.usefixtures("mode")
def test_a_missing_repository_or_file_is_an_error_naming_the_uri(hub_env: HubServer) -> None:
    with pytest.raises(NotFoundError, match=re.escape("hf://gpt2/nope.json")):
        dio.read("hf://gpt2/nope.json")
    with pytest.raises(NotFoundError, match="no-such-branch"):
        dio.read("hf://gpt2@no-such-branch/config.json")
    # the Hub answers 401 for a repository it does not show (missing or private)
    with pytest.raises(AuthenticationError, match=re.escape("hf://nobody/nothing/x.bin")):
        dio.read("hf://nobody/nothing/x.bin")


def test_hf_endpoint_and_configured_endpoint(
    hub_env: HubServer, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = HubServer(token=TOKEN)
    dead_url = dead.url
    dead.stop()
    monkeypatch.setenv("HF_ENDPOINT", dead_url)
    dio.configure_endpoint("hf", hub_env.url)  # wins over HF_ENDPOINT
    assert dio.read("hf://gpt2/config.json") == CONFIG
    dio.configure_endpoint("hf", dead_url)
    with pytest.raises(DataioError):
        dio.read("hf://gpt2@main/config.json")


# -- tokens --------------------------------------------------------------------------


def _private(hub: HubServer) -> str:
    hub.repo("models", "org/secret", private=True).put("w.txt", b"secret")
    hub.repo("models", "legacy", private=True).put("w.txt", b"legacy secret")
    return "hf://org/secret/w.txt"


def _authorizations(hub: HubServer) -> set[str]:
    return {
        {k.lower(): v for k, v in h.items()}.get("authorization", "")
        for _, p, h in hub.requests
        if "/resolve/" in p or p.startswith("/api/")
    }


@pytest.mark.usefixtures("mode")
@pytest.mark.parametrize("where", ["HF_TOKEN_PATH", "HF_HOME", "home", "XDG_CACHE_HOME"])
def test_the_login_token_file_is_read(
    hub_env: HubServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str
) -> None:
    uri = _private(hub_env)
    with pytest.raises(AuthenticationError):
        dio.read(uri)  # no token anywhere
    if where == "HF_TOKEN_PATH":
        path = tmp_path / "elsewhere" / "my-token"
        monkeypatch.setenv("HF_TOKEN_PATH", str(path))
    elif where == "HF_HOME":
        path = Path(os.environ["HF_HOME"]) / "token"
    else:
        monkeypatch.delenv("HF_HOME")
        base = tmp_path / "home" / ".cache" if where == "home" else tmp_path / "xdg"
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        if where == "XDG_CACHE_HOME":
            monkeypatch.setenv("XDG_CACHE_HOME", str(base))
        path = base / "huggingface" / "token"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(TOKEN + "\n")  # as huggingface-cli login writes it
    assert hf.token_path() == str(path)
    dio.configure_credentials("hf")  # a fresh store reads the file
    assert dio.read(uri) == b"secret"
    assert dio.read("hf://legacy/w.txt") == b"legacy secret"  # asked with the token too
    assert f"Bearer {TOKEN}" in _authorizations(hub_env)


def test_hf_token_wins_over_the_file_and_anonymous_over_both(
    hub_env: HubServer, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = _private(hub_env)
    token_file = Path(os.environ["HF_HOME"]) / "token"
    token_file.parent.mkdir(parents=True)
    token_file.write_text("hf_staleTokenFromTheFile")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert dio.read(uri) == b"secret"
    assert "Bearer hf_staleTokenFromTheFile" not in _authorizations(hub_env)
    dio.configure_credentials("hf", method="anonymous")
    with pytest.raises(AuthenticationError) as caught:
        dio.read(uri, offset=0, size=3)  # ranged reads ask the Hub
    assert TOKEN not in str(caught.value)
    if mode == "fallback":
        with pytest.raises(AuthenticationError):
            dio.read(uri)
        return
    # the whole file came through the shared cache, which hf_hub_download serves when
    # the Hub refuses the request (the oracle, asked anonymously too)
    cached = huggingface_hub.hf_hub_download(
        "org/secret", "w.txt", endpoint=hub_env.url, cache_dir=hf.cache_dir(), token=False
    )
    assert dio.read(uri) == Path(cached).read_bytes() == b"secret"


# -- offline: the shared cache -------------------------------------------------------


@pytest.fixture
def cached(hub_env: HubServer) -> dict[str, str]:
    """Files downloaded into the shared cache by huggingface_hub itself; returns the
    commit of gpt2's main."""
    cache = os.path.join(os.environ["HF_HOME"], "hub")
    downloads = [
        ("gpt2", "config.json", "main", "model"),
        ("gpt2", "onnx/model.onnx", "main", "model"),
        ("gpt2", "config.json", "refs/pr/1", "model"),
        ("openai-community/gpt2", "config.json", "main", "model"),
        ("org/set", "data/train.json", "main", "dataset"),
    ]
    with pytest.MonkeyPatch.context() as patch:
        # the download needs huggingface_hub even where a test hides it from dataio
        patch.setitem(sys.modules, "huggingface_hub", huggingface_hub)
        for repo_id, name, revision, kind in downloads:
            huggingface_hub.hf_hub_download(
                repo_id,
                name,
                revision=revision,
                repo_type=kind,
                endpoint=hub_env.url,
                cache_dir=cache,
                token=False,
            )
    return {"cache": cache, "commit": hub_env.repos[("models", "gpt2")].commit("main")}


@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"])
def test_offline_reads_come_from_the_shared_cache(
    cached: dict[str, str],
    hub_env: HubServer,
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
) -> None:
    monkeypatch.setenv(variable, "1")
    before = len(hub_env.requests)
    assert dio.read("hf://gpt2/config.json") == CONFIG
    assert dio.read("hf://gpt2/onnx/model.onnx", offset=10, size=5) == WEIGHTS[10:15]
    assert dio.head("hf://gpt2/onnx/model.onnx")["size"] == len(WEIGHTS)
    assert dio.read("hf://gpt2@refs/pr/1/config.json") == b'{"pr": 1}'
    assert dio.read(f"hf://gpt2@{cached['commit']}/config.json") == CONFIG
    assert dio.read("hf://openai-community/gpt2/config.json") == b'{"owned": true}'
    assert dio.read("hf://datasets/org/set/data/train.json") == b"[]"
    assert dio.ls("hf://gpt2/") == ["hf://gpt2/config.json", "hf://gpt2/onnx/"]
    assert dio.glob("hf://gpt2/**/*.onnx") == ["hf://gpt2/onnx/model.onnx"]
    assert dio.reader("hf://gpt2/config.json").read_all() == CONFIG
    assert dio.stream("hf://gpt2/config.json").read_all() == CONFIG
    assert len(hub_env.requests) == before, "offline reads must not reach the Hub"
    assert hub_env.cdn.requests == [] or len(hub_env.cdn.requests) == 1  # the download's


@pytest.mark.usefixtures("mode")
def test_offline_misses_say_offline(
    cached: dict[str, str], hub_env: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = len(hub_env.requests)
    # a file the cached snapshot lacks (the Hub has it)
    with pytest.raises(NotFoundError, match="HF_HUB_OFFLINE") as caught:
        dio.read("hf://gpt2/onnx/README.md")
    assert "hf://gpt2/onnx/README.md" in str(caught.value)
    # a repository, and a revision, that were never downloaded
    with pytest.raises(NotFoundError, match=r"HF_HUB_OFFLINE.*space 'org/demo'"):
        dio.read("hf://spaces/org/demo/app.py")
    with pytest.raises(NotFoundError, match=r"HF_HUB_OFFLINE.*'gpt3/config.json'"):
        dio.read("hf://gpt3/config.json")  # neither gpt3/config.json nor gpt3 is cached
    with pytest.raises(NotFoundError, match=r"hf://gpt2/no-folder/x.bin.*HF_HUB_OFFLINE"):
        dio.read("hf://gpt2/no-folder/x.bin")
    with pytest.raises(NotFoundError, match="HF_HUB_OFFLINE"):
        dio.read("hf://gpt2@v2/config.json")
    with pytest.raises(NotFoundError, match="HF_HUB_OFFLINE"):
        dio.ls("hf://datasets/squad/")
    assert dio.ls("hf://gpt2/no-such-folder/") == []
    # a revision is a ref of the cache, and a ref a commit: nothing else is followed
    Path(cached["cache"], "outside").write_text(cached["commit"])  # a ref, were it one
    with pytest.raises(NotFoundError, match="HF_HUB_OFFLINE"):
        dio.read("hf://gpt2@..%2F..%2Foutside/config.json")
    refs = Path(cached["cache"], "models--gpt2", "refs")
    (refs / "damaged").write_text("../../../../../tmp")
    with pytest.raises(NotFoundError, match="HF_HUB_OFFLINE"):
        dio.read("hf://gpt2@damaged/config.json")
    # nothing outside the snapshot is reachable
    assert dio.ls("hf://gpt2@main/../../") == []
    with pytest.raises(DataioError):
        dio.read("hf://gpt2@main/../../refs/main")
    assert len(hub_env.requests) == before


def test_offline_without_a_cache_says_offline(
    hub: HubServer, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    hub.repo("models", "org/model").put("w.bin", b"x")
    with pytest.raises(NotFoundError, match="HF_HUB_OFFLINE") as caught:
        dio.read("hf://org/model/w.bin")
    assert os.environ["HF_HOME"] in str(caught.value)  # names the cache it looked in
    assert hub.requests == []


def test_resolve_names_the_repository_and_its_folder(hub_env: HubServer, mode: str) -> None:
    found = hf.resolve(parse("hf://gpt2/onnx/model.onnx"))
    assert (found.kind, found.repo_id, found.revision, found.subfolder) == (
        "models",
        "gpt2",
        "main",
        "onnx",
    )
    found = hf.resolve(parse("hf://openai-community/gpt2/onnx/model.onnx"))
    assert (found.repo_id, found.subfolder) == ("openai-community/gpt2", "")
    assert hf.resolve_url(hub_env.url, parse("hf://gpt2/onnx/model.onnx")) == (
        f"{hub_env.url}/gpt2/resolve/main/onnx"
    )


@pytest.mark.usefixtures("mode")
def test_offline_top_level_files_without_owner_are_bounded(
    cached: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf, "_MEMORY_FILE_BYTES", len(CONFIG) - 1)
    # hf://gpt2/config.json is held in memory offline; past the bound, the error says
    # how to read it in place
    with pytest.raises(DataioError, match=re.escape("hf://gpt2@main/config.json")):
        dio.read("hf://gpt2/config.json")
    assert dio.read("hf://gpt2@main/config.json") == CONFIG


@pytest.mark.usefixtures("mode")
def test_hf_hub_offline_zero_wins_over_transformers_offline(
    hub_env: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")  # huggingface_hub reads the first set
    assert not hf.offline()
    assert dio.read("hf://gpt2/config.json") == CONFIG  # from the Hub: nothing is cached


@pytest.mark.usefixtures("mode")
def test_a_renamed_repository_without_owner_follows_the_hubs_redirect(
    hub_env: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # canonical repositories moved under organisations; their old ids redirect
    bert = hub_env.repo("models", "bert-base-uncased", private=True)
    bert.put("config.json", b'{"bert": true}')
    bert.put("model.bin", WEIGHTS)
    hub_env.rename("models", "bert-base-uncased", "google-bert/bert-base-uncased")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert dio.read("hf://bert-base-uncased/config.json") == b'{"bert": true}'
    assert dio.read("hf://bert-base-uncased/model.bin", offset=5, size=5) == WEIGHTS[5:10]
    assert dio.ls("hf://bert-base-uncased/") == [
        "hf://bert-base-uncased/config.json",
        "hf://bert-base-uncased/model.bin",
    ]
    assert dio.ls("hf://google-bert/bert-base-uncased/") == [
        "hf://google-bert/bert-base-uncased/config.json",
        "hf://google-bert/bert-base-uncased/model.bin",
    ]
    moved = [p for p in _resolves(hub_env) if p.startswith("/google-bert/")]
    assert moved, "the reads must have followed the redirect"
    # the token went along the same-origin redirect (the repository is private)
    assert f"Bearer {TOKEN}" in _authorizations(hub_env)


def test_huggingface_hub_is_asked_only_about_its_own_endpoint(
    hub_env: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # huggingface_hub set up for another Hub (its side requests would go there)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "https://hub.invalid")
    assert dio.read("hf://gpt2/config.json") == CONFIG
    agents = {
        {k.lower(): v for k, v in h.items()}.get("user-agent", "")
        for _, p, h in hub_env.requests
        if p.startswith("/api/")
    }
    assert agents and not any("hf_hub/" in a for a in agents), agents
