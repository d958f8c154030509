"""The reference's runtime knobs: ``DATAIO_IO_WORKERS`` sizes obstore's IO runtime,
``DATAIO_OBJECT_SHARDS`` the ranged-read fan-out, ``DATAIO_S3_HTTP_VERSION`` picks HTTP/1.1
or HTTP/2 on the wire, and ``DATAIO_TCP_QUICKACK``, which cannot apply under obstore, is
accepted and logged once."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers.object_servers import RangeServer

import dataio.io as dio
from dataio.exceptions import DataioError
from dataio.io import config, knobs
from dataio.io.uri import parse

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def knob_state() -> Iterator[None]:
    """prepare_runtime() runs once per process: let this test's call run it again."""
    knobs._forget()
    yield
    knobs._forget()


# -- DATAIO_IO_WORKERS ---------------------------------------------------------------------

_COUNT_RUNTIME = """
import json, os, time
from dataio.io import config
from dataio.io.uri import parse

def tokio_threads():
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return sum(name.startswith("tokio") for name in names)

def settled():
    # a new thread names itself once it runs: wait for the names to stop changing
    count, deadline = -1, time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = tokio_threads()
        if now == count and now:
            return now
        count = now
    return count

before = tokio_threads()
config.configure_endpoint("s3", "http://127.0.0.1:9", region="us-east-1")
config.store_for(parse("s3://bucket/key"))  # dataio's first store: the runtime starts
import obstore
from obstore.store import MemoryStore
try:
    obstore.head(MemoryStore(), "key")  # a request: starts the runtime if nothing did
except FileNotFoundError:
    pass
print(json.dumps([before, settled(), os.environ.get("TOKIO_WORKER_THREADS")]))
"""


def runtime_threads(workers: str | None) -> tuple[int, int, str | None]:
    """(tokio threads before, after dataio's first store, TOKIO_WORKER_THREADS after) in
    a fresh interpreter: obstore's runtime is built once per process."""
    env = {k: v for k, v in os.environ.items() if k != "TOKIO_WORKER_THREADS"}
    env.pop(knobs.IO_WORKERS, None)
    if workers is not None:
        env[knobs.IO_WORKERS] = workers
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-c", _COUNT_RUNTIME],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    before, after, leftover = json.loads(out.stdout)
    return before, after, leftover


@pytest.mark.parametrize("workers", [3, 5])
def test_io_workers_sizes_obstores_runtime(workers: int) -> None:
    before, after, leftover = runtime_threads(str(workers))
    assert before == 0 and after == workers
    assert leftover is None  # put back: DataFusion's runtime keeps its own default


def test_without_io_workers_the_runtime_keeps_its_default() -> None:
    _, after, _ = runtime_threads(None)
    _, five, _ = runtime_threads("5")
    assert after >= 1 and five == 5
    assert after != 5 or len(os.sched_getaffinity(0)) == 5


def test_a_malformed_io_workers_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, knob_state: None
) -> None:
    monkeypatch.setenv(knobs.IO_WORKERS, "many")
    with pytest.raises(DataioError, match="DATAIO_IO_WORKERS='many' must be a positive"):
        config.store_for(parse("s3://bucket/key"))


# -- DATAIO_OBJECT_SHARDS ------------------------------------------------------------------


def slow_big_read(http: str, server: RangeServer) -> bytes:
    """Read a 5 MiB object whose server sends 4 MB/s per response (far below the speed
    at which one connection reads on), in 1 MiB chunks; the data read."""
    data = np.random.default_rng(7).integers(0, 256, 5 << 20, dtype=np.uint8).tobytes()
    dio.write(f"{http}/big.bin", data)
    server.requests.clear()
    server.bytes_per_sec = 4e6
    got = dio.read(f"{http}/big.bin")
    assert got == data
    return got


def ranged_gets(server: RangeServer) -> int:
    return sum(1 for c, _, h in server.requests if c == "GET" and {"Range", "range"} & set(h))


@pytest.mark.parametrize("shards", [2, 3])
def test_object_shards_is_the_ranged_read_fan_out(
    http: str, http_server: RangeServer, monkeypatch: pytest.MonkeyPatch, shards: int
) -> None:
    monkeypatch.setenv("DATAIO_READALL_CHUNK_MIB", "1")
    monkeypatch.setenv(knobs.OBJECT_SHARDS, str(shards))
    assert config.transport_for("http").readall_concurrency == shards
    slow_big_read(http, http_server)
    assert ranged_gets(http_server) == 4  # the first response reads chunk 0
    assert http_server.most_ranged_at_once() == shards


def test_one_object_shard_reads_in_one_request(
    http: str, http_server: RangeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATAIO_READALL_CHUNK_MIB", "1")
    monkeypatch.setenv(knobs.OBJECT_SHARDS, "1")
    slow_big_read(http, http_server)
    assert ranged_gets(http_server) == 0


def test_readall_concurrency_wins_over_object_shards(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(knobs.OBJECT_SHARDS, "6")
    monkeypatch.setenv("DATAIO_READALL_CONCURRENCY", "2")
    assert config.transport_for("s3").readall_concurrency == 2
    monkeypatch.delenv("DATAIO_READALL_CONCURRENCY")
    assert config.transport_for("s3").readall_concurrency == 6
    monkeypatch.delenv(knobs.OBJECT_SHARDS)
    assert config.transport_for("s3").readall_concurrency == 8
    monkeypatch.setenv(knobs.OBJECT_SHARDS, "0")
    with pytest.raises(DataioError, match="DATAIO_OBJECT_SHARDS='0' must be a positive"):
        config.transport_for("s3")


# -- DATAIO_S3_HTTP_VERSION ----------------------------------------------------------------

_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class Listener:
    """Accepts connections on 127.0.0.1, keeps the first bytes each client sends, and
    hangs up: what a client says first tells its HTTP version."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.first: list[bytes] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                got = b""
                try:
                    while len(got) < len(_H2_PREFACE) and (more := conn.recv(64)):
                        got += more
                except OSError:
                    pass
                self.first.append(got)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    try:
        dio.configure_endpoint("s3", server.url, region="us-east-1")
        dio.configure_credentials("s3", method="anonymous")
        dio.configure_transport("s3", timeout_secs=2)
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("version", "first"),
    [
        ("h2", _H2_PREFACE),
        ("h1", b"GET /bucket/key HTTP/1.1\r\n"),
        (None, b"GET /bucket/key HTTP/1.1\r\n"),
    ],
)
@pytest.mark.parametrize("verb", ["read", "stream"])
def test_s3_http_version_picks_the_protocol_on_the_wire(
    listener: Listener,
    monkeypatch: pytest.MonkeyPatch,
    version: str | None,
    first: bytes,
    verb: str,
) -> None:
    if version is None:
        monkeypatch.delenv(knobs.S3_HTTP_VERSION, raising=False)
    else:
        monkeypatch.setenv(knobs.S3_HTTP_VERSION, version)
    with pytest.raises(DataioError):  # the listener hangs up without an answer
        dio.read("s3://bucket/key") if verb == "read" else dio.stream("s3://bucket/key")
    assert listener.first and all(got.startswith(first) for got in listener.first)
    options = config.store_for(parse("s3://bucket/key")).client_options  # type: ignore[union-attr]
    expected = {"h1": "http1_only", "h2": "http2_only"}.get(version or "")
    assert {k for k in ("http1_only", "http2_only") if k in options} == (
        {expected} if expected else set()
    )


def test_a_malformed_s3_http_version_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(knobs.S3_HTTP_VERSION, "h3")
    with pytest.raises(DataioError, match="DATAIO_S3_HTTP_VERSION='h3' must be 'h1' or 'h2'"):
        config.store_for(parse("s3://bucket/key"))
    monkeypatch.setenv(knobs.S3_HTTP_VERSION, "HTTP/2")
    assert knobs.s3_client_options() == {"http2_only": True}


# -- DATAIO_TCP_QUICKACK -------------------------------------------------------------------


def quickack_notes(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if knobs.TCP_QUICKACK in r.getMessage()]


@pytest.mark.parametrize("value", ["1", "0"])
def test_tcp_quickack_is_accepted_and_logged_once_at_debug(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    knob_state: None,
    value: str,
) -> None:
    monkeypatch.setenv(knobs.TCP_QUICKACK, value)
    caplog.set_level(logging.DEBUG, logger="dataio.io")
    config.store_for(parse("s3://bucket-one/key"))
    config.store_for(parse("s3://bucket-two/key"))  # a second store: no second note
    config.store_for(parse("gs://bucket/key"))
    notes = quickack_notes(caplog)
    assert len(notes) == 1 and f"{knobs.TCP_QUICKACK}={value}" in notes[0]
    assert "no effect" in notes[0]
    assert all(r.levelno == logging.DEBUG for r in caplog.records if r.getMessage() in notes)
    assert knobs.tcp_quickack() is (value == "1")


def test_tcp_quickack_unset_says_nothing_and_bad_values_fail(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, knob_state: None
) -> None:
    monkeypatch.delenv(knobs.TCP_QUICKACK, raising=False)
    caplog.set_level(logging.DEBUG, logger="dataio.io")
    config.store_for(parse("s3://bucket/key"))
    assert quickack_notes(caplog) == [] and knobs.tcp_quickack() is True
    knobs._forget()
    config.reset()
    monkeypatch.setenv(knobs.TCP_QUICKACK, "yes")
    with pytest.raises(DataioError, match="DATAIO_TCP_QUICKACK='yes' must be 0 or 1"):
        config.store_for(parse("s3://bucket/key"))
