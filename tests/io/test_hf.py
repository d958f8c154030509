"""hf:// against a local Hub (helpers/cloud_servers.py): resolve URLs with redirects
to a CDN on another origin, private repositories, revisions and the tree API."""

from __future__ import annotations

import os

import pytest
from helpers.cloud_servers import HubServer

import dataio.io as dio
from dataio.exceptions import (
    AuthenticationError,
    DataioError,
    NotFoundError,
    OutOfRangeError,
)
from dataio.io import config, hf
from dataio.io.uri import parse, require_writable

TOKEN = "hf_dataioTestTokenNeverShown"  # HubServer's token in conftest's ``hub``


def _headers(entry: tuple[str, str, dict[str, str]]) -> dict[str, str]:
    return {k.lower(): v for k, v in entry[2].items()}


@pytest.fixture
def repo(hub: HubServer) -> HubServer:
    """A private dataset with a small file (served by the Hub) and a large one (on the
    CDN), and the token and endpoint configured."""
    data = hub.repo("datasets", "org/name", private=True)
    data.put("README.md", b"# tiny card")
    data.put("data/train.bin", bytes(range(256)) * 40)
    dio.configure_endpoint("hf", hub.url)
    dio.configure_credentials("hf", bearer_token=TOKEN)
    return hub


def test_reads_small_files_from_the_hub(repo: HubServer) -> None:
    uri = "hf://datasets/org/name/README.md"
    assert dio.read(uri) == b"# tiny card"
    assert dio.read(uri, offset=2, size=4) == b"tiny"
    assert dio.head(uri)["size"] == len(b"# tiny card")
    assert dio.exists(uri)
    assert not dio.exists("hf://datasets/org/name/missing.md")
    paths = [p for _, p, _ in repo.requests]
    assert "/datasets/org/name/resolve/main/README.md" in paths


def test_large_files_follow_the_redirect_without_the_token(repo: HubServer) -> None:
    data = bytes(range(256)) * 40
    uri = "hf://datasets/org/name/data/train.bin"
    assert dio.read(uri) == data
    assert dio.read(uri, offset=1000, size=300) == data[1000:1300]
    assert dio.head(uri)["size"] == len(data)
    buffer = bytearray(len(data))
    assert dio.fetch_into(uri, buffer) == len(data)
    assert bytes(buffer) == data
    assert dio.reader(uri).read_all() == data
    assert dio.stream(uri).read_all() == data
    with pytest.raises(OutOfRangeError):
        dio.read(uri, offset=len(data) + 10, size=1)

    hub_requests = [_headers(r) for r in repo.requests if "/resolve/" in r[1]]
    assert hub_requests and all(h["authorization"] == f"Bearer {TOKEN}" for h in hub_requests)
    cdn = repo.cdn.requests
    assert cdn, "the large file must have come from the CDN"
    assert all("authorization" not in _headers(r) for r in cdn)
    assert any(_headers(r).get("range") == "bytes=1000-1299" for r in cdn)


@pytest.mark.usefixtures("always_split")
def test_large_reads_split_into_ranges_through_the_redirect(hub: HubServer) -> None:
    data = os.urandom(3 << 20)
    hub.repo("models", "org/model").put("weights.bin", data)
    dio.configure_endpoint("hf", hub.url)
    dio.configure_transport("hf", readall_chunk_mib=1, readall_concurrency=3)
    assert dio.read("hf://org/model/weights.bin") == data
    ranges = [_headers(r).get("range") for r in hub.cdn.requests]
    assert sum(1 for r in ranges if r) >= 2


@pytest.mark.parametrize(
    ("uri", "revision_path"),
    [
        ("hf://org/model@v1.0/f.txt", "v1.0"),
        ("hf://org/model@refs/pr/1/f.txt", "refs%2Fpr%2F1"),
        ("hf://org/model@refs%2Fpr%2F1/f.txt", "refs%2Fpr%2F1"),
        ("hf://org/model@feature%2Fx/f.txt", "feature%2Fx"),
    ],
)
def test_revisions_are_url_encoded(hub: HubServer, uri: str, revision_path: str) -> None:
    model = hub.repo("models", "org/model")
    model.put("f.txt", b"on main")
    for revision in ("v1.0", "refs/pr/1", "feature/x"):
        model.put("f.txt", revision.encode(), revision=revision)
    dio.configure_endpoint("hf", hub.url)
    # the server decodes the revision segment: each revision holds its own name
    assert dio.read(uri) == revision_path.replace("%2F", "/").encode()
    assert hub.requests[-1][1] == f"/org/model/resolve/{revision_path}/f.txt"
    assert dio.read("hf://org/model/f.txt") == b"on main"


def test_spaces_and_the_hf_endpoint_variable(
    hub: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.repo("spaces", "org/demo").put("app.py", b"print('hi')")
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    assert dio.read("hf://spaces/org/demo/app.py") == b"print('hi')"


def test_private_repos_need_the_token_which_is_never_shown(
    repo: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = "hf://datasets/org/name/README.md"
    dio.configure_credentials("hf", method="anonymous")
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # anonymous ignores it
    with pytest.raises(AuthenticationError, match="HF_TOKEN"):
        dio.read(uri)

    dio.configure_credentials("hf")  # default: HF_TOKEN
    assert dio.read(uri) == b"# tiny card"

    wrong = "hf_wrongTokenAlsoNeverShown"
    dio.configure_credentials("hf", bearer_token=wrong)
    with pytest.raises(AuthenticationError) as caught:
        dio.read(uri)
    assert wrong not in str(caught.value) and TOKEN not in str(caught.value)
    assert config.redact(f"Authorization: Bearer {wrong}") == "Authorization: Bearer ***"


def test_missing_files_are_not_found(repo: HubServer) -> None:
    with pytest.raises(NotFoundError) as caught:
        dio.read("hf://datasets/org/name/nope.bin")
    assert isinstance(caught.value, FileNotFoundError)
    with pytest.raises(NotFoundError):
        dio.head("hf://datasets/org/name@no-such-branch/README.md")


def test_tree_listing_pages_through_the_api(repo: HubServer) -> None:
    data = repo.repo("datasets", "org/name")
    for name in ("data/a.bin", "data/b.bin", "data/sub/c.bin", "data/sub/deep/d.bin", "e.txt"):
        data.put(name, name.encode())
    base = "hf://datasets/org/name/"

    assert hf.ls(parse(base + "data/")) == [
        base + "data/a.bin",
        base + "data/b.bin",
        base + "data/sub/",
        base + "data/train.bin",
    ]
    assert hf.ls(parse(base)) == [base + "README.md", base + "data/", base + "e.txt"]
    every = hf.keys(parse(base), None)
    assert sorted(every) == sorted(data.revisions["main"])
    assert len(every) > repo.page_size  # the listing went past the first page
    assert sorted(hf.keys(parse(base), "data/sub")) == ["data/sub/c.bin", "data/sub/deep/d.bin"]
    assert hf.ls(parse(base + "no-folder/")) == []
    tree = [_headers(r) for r in repo.requests if r[1].startswith("/api/")]
    assert all(h["authorization"] == f"Bearer {TOKEN}" for h in tree)


def test_tree_listing_errors(repo: HubServer) -> None:
    with pytest.raises(NotFoundError, match="revision"):
        hf.ls(parse("hf://datasets/org/name@nope/"))
    dio.configure_credentials("hf", method="anonymous")
    with pytest.raises(AuthenticationError, match="HF_TOKEN"):
        hf.keys(parse("hf://datasets/org/name/"), None)


def test_the_hub_is_read_only() -> None:
    for verb in ("write", "delete"):
        with pytest.raises(DataioError, match=r"hf:// is read-only"):
            require_writable(parse("hf://org/model/w.bin"), verb)
    require_writable(parse("s3://bucket/k"), "write")


def test_hf_credentials_take_only_a_token() -> None:
    with pytest.raises(DataioError, match="hf:// takes no account_key"):
        dio.configure_credentials("hf", account_key="k")


def test_ls_and_glob_verbs_list_the_hub(repo: HubServer) -> None:
    data = repo.repo("datasets", "org/name")
    for name in ("data/a.safetensors", "data/sub/b.safetensors", "data/sub/c.txt"):
        data.put(name, name.encode())
    base = "hf://datasets/org/name/"
    assert dio.ls(base + "data/sub/") == [base + "data/sub/b.safetensors", base + "data/sub/c.txt"]
    assert dio.glob(base + "**/*.safetensors") == [
        base + "data/a.safetensors",
        base + "data/sub/b.safetensors",
    ]
    assert dio.glob(base + "data/*.bin") == [base + "data/train.bin"]


def test_writes_to_the_hub_are_refused_before_any_request(repo: HubServer) -> None:
    repo.requests.clear()
    uri = "hf://datasets/org/name/new.bin"
    with pytest.raises(DataioError, match=r"hf:// is read-only"):
        dio.write(uri, b"x")
    with pytest.raises(DataioError, match=r"hf:// is read-only"):
        dio.delete(uri)
    with pytest.raises(DataioError, match=r"hf:// is read-only"), dio.writer(uri) as w:
        w.write(b"x")
    assert repo.requests == []
