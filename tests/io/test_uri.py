from __future__ import annotations

import pytest

from dataio.exceptions import DataioError
from dataio.io.uri import Location, parse
from dataio.io.verbs import _glob_regex


def test_schemes_split_into_authority_and_key(tmp_path) -> None:
    assert parse("s3://bucket/a/b.jpg") == Location("s3", "bucket", "a/b.jpg")
    assert parse("http://127.0.0.1:80/x/y") == Location("http", "127.0.0.1:80", "x/y")
    local = parse(tmp_path / "a.bin")
    assert local.scheme == "file" and local.path == str(tmp_path / "a.bin")
    assert str(local) == str(tmp_path / "a.bin")
    assert str(parse((tmp_path / "a b").as_uri())) == "file://" + str(tmp_path / "a b")


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
