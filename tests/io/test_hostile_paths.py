"""Hostile local paths and lying servers: FIFOs, devices, directories, NUL bytes and
unreadable files are refused by name; a ``Content-Length`` commits no memory ahead of
the bytes that actually arrive."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.servers import QuietHandler, ThreadedServer

import dataio
import dataio.io as dio
from dataio.exceptions import (
    DataioError,
    LimitError,
    NotFoundError,
    PermissionDeniedError,
    TransportError,
)

READERS = {
    "read_bytes": dio.read_bytes,
    "read": dio.read,
    "read_range": lambda p: dio.read(p, offset=0, size=10),
    "read_json": lambda p: dio.read(p, format="json"),
    "stream": lambda p: dio.stream(p).read_all(),
    "fetch_into": lambda p: dio.fetch_into(p, bytearray(64)),
    "reader": lambda p: dio.reader(p).gunzip().read_all(),
}


@pytest.fixture
def fifo(tmp_path: Path) -> str:
    path = tmp_path / "fifo"
    os.mkfifo(path)  # no writer ever opens it: a blocking open would hang the test
    return str(path)


@pytest.mark.parametrize("verb", sorted(READERS))
def test_fifo_is_refused_without_blocking(fifo: str, verb: str) -> None:
    with pytest.raises(DataioError, match=r"FIFO.*not a regular file") as info:
        READERS[verb](fifo)
    assert repr(fifo) in str(info.value)


@pytest.mark.parametrize("verb", sorted(READERS))
def test_character_device_is_refused_not_read_forever(verb: str) -> None:
    with pytest.raises(DataioError, match=r"'/dev/zero'.*character device"):
        READERS[verb]("/dev/zero")


@pytest.mark.parametrize("verb", sorted(READERS))
def test_directory_is_refused_by_name(tmp_path: Path, verb: str) -> None:
    with pytest.raises(DataioError, match="directory, not a regular file") as info:
        READERS[verb](str(tmp_path))
    assert not isinstance(info.value, IsADirectoryError | PermissionError)


@pytest.mark.parametrize("verb", sorted(READERS))
def test_nul_byte_in_path_is_not_found(tmp_path: Path, verb: str) -> None:
    path = f"{tmp_path}/a\0b.jpg"
    with pytest.raises(NotFoundError, match="NUL byte") as info:
        READERS[verb](path)
    assert repr(path) in str(info.value)


@pytest.mark.parametrize("verb", ["read_bytes", "read", "stream", "fetch_into"])
def test_permission_error_is_mapped(
    tmp_path: Path, verb: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # tests may run as root, where chmod 000 still reads: make the OS refuse instead
    path = tmp_path / "secret.bin"
    path.write_bytes(b"x")
    real_open = os.open

    def denied(name: object, *args: object, **kwargs: object) -> int:
        if os.fspath(name) == str(path):  # type: ignore[call-overload]
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(PermissionDeniedError, match="permission denied") as info:
        READERS[verb](str(path))
    assert str(path) in str(info.value)


def test_proc_files_still_read() -> None:
    # stat says 0 bytes for /proc files: they are regular and drained
    expected = Path("/proc/self/cmdline").read_bytes()
    assert expected
    assert dio.read_bytes("/proc/self/cmdline") == expected
    assert dio.read("/proc/self/cmdline") == expected
    assert dio.read("/proc/self/cmdline", offset=1, size=3) == expected[1:4]


def test_whole_reads_are_bounded_by_max_decoded_bytes(tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    path.write_bytes(bytes(4096))
    with dataio.limits.scoped(max_decoded_bytes=1000):
        for verb in ("read_bytes", "read"):
            with pytest.raises(LimitError, match="max_decoded_bytes") as info:
                READERS[verb](str(path))
            assert str(path) in str(info.value)
        # a range is not a whole read: it is cut to what was asked
        assert dio.read(str(path), offset=100, size=10) == bytes(10)


def test_range_larger_than_file_allocates_only_the_file(tmp_path: Path) -> None:
    path = tmp_path / "small.bin"
    path.write_bytes(b"0123456789")
    assert dio.read(str(path), offset=4, size=1 << 50) == b"456789"


def test_fifo_record_fails_the_row_not_the_loader(tmp_path: Path, fifo: str) -> None:
    from PIL import Image

    good = tmp_path / "good.png"
    Image.new("RGB", (4, 3), (10, 20, 30)).save(good)
    records = [
        {"key": "a", "image": str(good)},
        {"key": "pipe", "image": fifo},
        {"key": "zero", "image": "/dev/zero"},
        {"key": "b", "image": str(good)},
    ]
    pipe = dataio.pipeline(dataio.slot("image").decode_image(), dataio.batch(4))
    batch = next(iter(pipe.bind(records).run(on_failure="skip")))
    assert batch.indices == [0, 3]
    assert batch["image"][0].tolist() == [[[10, 20, 30]] * 4] * 3
    errors = {e.key: str(e) for e in batch.errors}
    assert "FIFO" in errors["pipe"] and fifo in errors["pipe"]
    assert "character device" in errors["zero"]


# -- a server that lies about Content-Length -----------------------------------------------

LIE = 3 << 30  # 3 GiB declared
BODY = b"x" * 1024  # 1 KiB sent


class _LyingHandler(QuietHandler):
    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(self._lie()))
        self.end_headers()

    def _lie(self) -> int:
        return 1 << 20 if self.path.startswith("/small") else LIE

    def do_GET(self) -> None:
        # a resumed read (Range: bytes=N-) gets the same lie and no bytes at all
        ranged = self.headers.get("Range", "").removeprefix("bytes=").split("-")[0]
        start = int(ranged) if ranged.isdigit() else 0
        lie = self._lie()
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(lie - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{lie - 1}/{lie}")
        self.send_header("ETag", '"abc"')
        self.end_headers()
        self.wfile.write(b"" if start else BODY)
        self.wfile.flush()
        self.close_connection = True


@pytest.fixture
def liar() -> Iterator[str]:
    server = ThreadedServer(_LyingHandler)
    try:
        yield server.url
    finally:
        server.stop()


def test_lying_content_length_commits_no_memory(liar: str) -> None:
    # under a 1 GiB address-space cap a 3 GiB buffer made ahead of data cannot exist:
    # the read must end in a TransportError (short body), not MemoryError
    script = textwrap.dedent(
        f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))
        import dataio
        import dataio.io as dio
        from dataio.exceptions import TransportError
        dataio.limits.set(max_decoded_bytes=4 << 30)  # the declared size passes this limit
        try:
            dio.read({liar + "/big.bin"!r})
        except TransportError as exc:
            print("TransportError", exc)
            sys.exit(0)
        except BaseException as exc:
            print("wrong", type(exc).__name__, exc)
            sys.exit(1)
        print("no error")
        sys.exit(1)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=50
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "big.bin" in done.stdout


@pytest.mark.parametrize("name", ["big.bin", "small.bin"])
def test_lying_content_length_short_body_is_transport_error(liar: str, name: str) -> None:
    url = f"{liar}/{name}"
    with dataio.limits.scoped(max_decoded_bytes=4 << 30):
        with pytest.raises(TransportError):
            dio.read(url)
        with pytest.raises(TransportError):
            dio.stream(url).read_all()
        with pytest.raises(TransportError):
            dio.reader(url).read_all()


def test_declared_size_over_max_decoded_bytes_is_refused(liar: str) -> None:
    with pytest.raises(LimitError, match="max_decoded_bytes"):
        dio.read(f"{liar}/big.bin")


# -- manifests -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["rows.jsonl", "rows.csv", "rows.parquet"])
def test_special_manifest_paths_are_refused(tmp_path: Path, name: str) -> None:
    fifo = tmp_path / name
    os.mkfifo(fifo)
    with pytest.raises(DataioError, match="FIFO"):
        list(dataio.manifest(fifo))
    with pytest.raises(DataioError, match="character device"):
        list(dataio.manifest("/dev/zero", format=name.split(".")[1]))
    with pytest.raises(NotFoundError, match="does not exist"):
        list(dataio.manifest(f"{tmp_path}/a\0{name}"))


@pytest.mark.parametrize(
    ("name", "data", "match"),
    [
        ("bad.csv", b"a,b\n\xff\xfe,1\n", "not a readable csv"),
        ("bad.parquet", b"PAR1 not really PAR1", "not a readable parquet"),
        ("deep.jsonl", b"[" * 100_000 + b"\n", "nests too deeply|not valid JSON"),
        ("bad.jsonl", b'{"a": 1}\n{"a": \n', "line 2 is not valid JSON"),
    ],
)
def test_malformed_manifests_are_format_errors(
    tmp_path: Path, name: str, data: bytes, match: str
) -> None:
    from dataio.exceptions import FormatError

    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(FormatError, match=match) as info:
        list(dataio.manifest(path))
    assert str(path) in str(info.value)
