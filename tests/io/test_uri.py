from __future__ import annotations

import pytest

from dataio.exceptions import DataioError
from dataio.io import hf
from dataio.io.uri import Location, parse
from dataio.io.verbs import _glob_regex


def test_schemes_split_into_authority_and_key(tmp_path) -> None:
    assert parse("s3://bucket/a/b.jpg") == Location("s3", "bucket", "a/b.jpg")
    assert parse("http://127.0.0.1:80/x/y") == Location("http", "127.0.0.1:80", "x/y")
    local = parse(tmp_path / "a.bin")
    assert local.scheme == "file" and local.path == str(tmp_path / "a.bin")
    assert str(local) == str(tmp_path / "a.bin")
    assert str(parse((tmp_path / "a b").as_uri())) == "file://" + str(tmp_path / "a b")


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("gs://bucket/a/b.bin", Location("gs", "bucket", "a/b.bin")),
        ("az://container/a/b.bin", Location("az", "container", "a/b.bin")),
        ("hf://org/model/w.bin", Location("hf", "org/model", "w.bin")),
        ("hf://datasets/org/set@v2/a/b.json", Location("hf", "datasets/org/set@v2", "a/b.json")),
        ("hf://spaces/org/app/app.py", Location("hf", "spaces/org/app", "app.py")),
        ("hf://org/m@refs/pr/12/x/y", Location("hf", "org/m@refs/pr/12", "x/y")),
        ("hf://org/m@refs/convert/parquet/x", Location("hf", "org/m@refs/convert/parquet", "x")),
        ("hf://org/m@feature%2Fx/f", Location("hf", "org/m@feature%2Fx", "f")),
        ("hf://datasets/org/set", Location("hf", "datasets/org/set", "")),
        # a repository without owner: alone, pinned by @, or before a pattern
        ("hf://gpt2", Location("hf", "gpt2", "")),
        ("hf://gpt2@v1/config.json", Location("hf", "gpt2@v1", "config.json")),
        ("hf://gpt2@refs/pr/1/onnx/m.onnx", Location("hf", "gpt2@refs/pr/1", "onnx/m.onnx")),
        ("hf://gpt2/*.json", Location("hf", "gpt2", "*.json")),
        ("hf://models/org/m/x", Location("hf", "org/m", "x")),
        ("hf://org/m/file@1.txt", Location("hf", "org/m", "file@1.txt")),
    ],
)
def test_cloud_and_hub_uris(uri: str, expected: Location) -> None:
    location = parse(uri)
    assert location == expected
    assert parse(str(location)) == location  # listings answer in a form that parses back


def test_hub_repositories_and_revisions() -> None:
    found = hf.repo(parse("hf://datasets/org/set@refs%2Fpr%2F3/x"))
    assert (found.kind, found.repo_id, found.revision) == ("datasets", "org/set", "refs/pr/3")
    found = hf.repo(parse("hf://org/model/x"))
    assert (found.kind, found.repo_id, found.revision) == ("models", "org/model", "main")
    assert hf.resolve_url("http://hub", parse("hf://spaces/o/n@refs/pr/1/x")) == (
        "http://hub/spaces/o/n/resolve/refs%2Fpr%2F1"
    )


@pytest.mark.parametrize(
    "uri", ["hf://", "hf://datasets", "hf://o/n@/x", "hf://o/n!/x", "hf://gpt2/../x"]
)
def test_malformed_hub_uris_say_what_to_write(uri: str) -> None:
    with pytest.raises(DataioError, match=r"\[owner/\]name\[@revision\]|empty revision"):
        parse(uri)


@pytest.mark.parametrize("uri", ["ftp://host/x", "s3:///key", "file://relative/path"])
def test_unsupported_or_malformed_uris_say_what_to_do(uri: str) -> None:
    with pytest.raises(DataioError, match=r"scheme|names no bucket|absolute"):
        parse(uri)


@pytest.mark.parametrize(
    ("pattern", "hits", "misses"),
    [
        ("**/*.jpg", ["a.jpg", "x/a.jpg", "x/y/a.jpg"], ["a.png", "x/a.jpgx"]),
        ("d/*.jpg", ["d/a.jpg"], ["d/x/a.jpg", "e/a.jpg"]),
        ("d/**/b?.bin", ["d/b1.bin", "d/x/y/b2.bin"], ["d/b12.bin"]),
        ("d/[ab]*", ["d/a", "d/bz"], ["d/c", "d/a/z"]),
        ("d/**", ["d/a", "d/x/y"], ["e/a"]),
    ],
)
def test_glob_patterns(pattern: str, hits: list[str], misses: list[str]) -> None:
    regex = _glob_regex(pattern)
    assert all(regex.match(k) for k in hits)
    assert not any(regex.match(k) for k in misses)
