"""The verbs over ``http://`` against a real WebDAV server (wsgidav): obstore lists
through PROPFIND, writes with PUT (creating parent collections), deletes with DELETE."""

from __future__ import annotations

import os

import pytest
from helpers.proxy_server import ProxyServer
from helpers.webdav_server import WebDAVServer

import dataio.io as dio
from dataio.io import config


def test_write_read_head_exists_delete(webdav: str) -> None:
    uri = f"{webdav}/deep/er/a.bin"
    assert not dio.exists(uri)
    etag = dio.write(uri, b"payload")
    assert etag
    assert dio.read(uri) == b"payload"
    assert dio.read(uri, offset=3, size=2) == b"lo"
    assert dio.head(uri)["size"] == 7
    assert dio.exists(uri)
    dio.delete(uri)
    assert not dio.exists(uri)
    dio.delete(uri)  # deleting again is not an error


def test_ls_lists_objects_and_sub_prefixes(webdav: str) -> None:
    for key in ("a.txt", "b.bin", "sub/c.txt", "sub/deeper/d.bin", "other/e.txt"):
        dio.write(f"{webdav}/{key}", key.encode())
    assert dio.ls(f"{webdav}/") == [
        f"{webdav}/a.txt",
        f"{webdav}/b.bin",
        f"{webdav}/other/",
        f"{webdav}/sub/",
    ]
    assert dio.ls(f"{webdav}/sub") == [f"{webdav}/sub/c.txt", f"{webdav}/sub/deeper/"]
    assert dio.ls(f"{webdav}/missing/") == []


def test_glob_matches_within_and_across_segments(webdav: str) -> None:
    for key in ("a.txt", "b.bin", "sub/c.txt", "sub/deeper/d.bin", "sub/deeper/e.txt"):
        dio.write(f"{webdav}/{key}", b"x")
    assert dio.glob(f"{webdav}/*.txt") == [f"{webdav}/a.txt"]
    assert dio.glob(f"{webdav}/**/*.bin") == [f"{webdav}/b.bin", f"{webdav}/sub/deeper/d.bin"]
    assert dio.glob(f"{webdav}/sub/**") == [
        f"{webdav}/sub/c.txt",
        f"{webdav}/sub/deeper/d.bin",
        f"{webdav}/sub/deeper/e.txt",
    ]
    assert dio.glob(f"{webdav}/sub/deeper/[d-e].?in") == [f"{webdav}/sub/deeper/d.bin"]
    assert dio.glob(f"{webdav}/sub/c.txt") == [f"{webdav}/sub/c.txt"]
    assert dio.glob(f"{webdav}/sub/none.txt") == []


def test_the_listing_is_the_servers_view(webdav: str, webdav_server: WebDAVServer) -> None:
    folder = webdav_server.root / webdav.rsplit("/", 1)[1] / "made on disk"
    folder.mkdir()
    (folder / "ü n.txt").write_bytes(b"local")
    assert dio.ls(f"{webdav}/made on disk/") == [f"{webdav}/made on disk/ü n.txt"]
    assert dio.glob(f"{webdav}/**/*.txt") == [f"{webdav}/made on disk/ü n.txt"]
    assert dio.read(f"{webdav}/made on disk/ü n.txt") == b"local"


def test_deleted_objects_leave_the_listing(webdav: str) -> None:
    dio.write(f"{webdav}/d/a.bin", b"a")
    dio.write(f"{webdav}/d/b.bin", b"b")
    dio.delete(f"{webdav}/d/a.bin")
    assert dio.glob(f"{webdav}/**") == [f"{webdav}/d/b.bin"]
    assert dio.ls(f"{webdav}/d/") == [f"{webdav}/d/b.bin"]


@pytest.mark.usefixtures("always_split")
def test_large_reads_split_into_ranges(webdav: str) -> None:
    dio.configure_transport("http", readall_chunk_mib=1, readall_concurrency=4)
    data = os.urandom(3 << 20)
    dio.write(f"{webdav}/big.bin", data)
    assert dio.read(f"{webdav}/big.bin") == data
    buffer = bytearray(len(data))
    assert dio.fetch_into(f"{webdav}/big.bin", buffer) == len(data) and buffer == data


def test_listing_through_a_proxy(
    webdav: str, network_env: pytest.MonkeyPatch, proxy: ProxyServer
) -> None:
    network_env.setenv("HTTP_PROXY", proxy.url)
    config.reset()
    dio.write(f"{webdav}/p/a.bin", b"a")
    assert dio.ls(f"{webdav}/p/") == [f"{webdav}/p/a.bin"]
    assert dio.glob(f"{webdav}/**/*.bin") == [f"{webdav}/p/a.bin"]
    assert "PROPFIND" in {s.method for s in proxy.seen}
    assert all(s.target.startswith(webdav.rsplit("/", 1)[0]) for s in proxy.seen)
