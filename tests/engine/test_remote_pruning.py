"""Remote Parquet scans read by ranges through the verbs' stores: a selective filter
fetches the footer and one row group's chunks, not the object (s3 on moto, r2 on moto
at an endpoint, gs on the GCS emulator, az on Azurite), and the proxy and TLS settings
of the verbs apply to scans.

Bytes are counted at the wire: every request goes through a loopback HTTP proxy (set
with ``HTTP_PROXY``, as a user behind one would), which records each request's
``Range`` header and the body bytes it forwarded.
"""

from __future__ import annotations

import gc
import io
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from helpers.cloud_servers import AZURITE_ACCOUNT, AZURITE_KEY, Azurite, GcsEmulator
from helpers.object_servers import MotoServer
from helpers.proxy_server import ProxyServer
from helpers.tls_server import Authority, TLSRangeServer, make_ca

import dataio
from dataio import col
from dataio.frame import scan_parquet
from dataio.io import config

KEY, SECRET = "AKIAREMOTEPRUNING001", "remote-pruning-secret"
BUCKET = "pruning"
ROWS, GROUP = 20_000, 1_000  # 20 row groups
NETWORK_ENV = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "SSL_CERT_FILE")


def table() -> pa.Table:
    """Sorted ids (tight row-group statistics) and an incompressible payload that makes
    each row group ~40 KB."""
    rng = np.random.default_rng(16)
    payload = rng.integers(0, 256, size=(ROWS, 32), dtype=np.uint8)
    return pa.table(
        {
            "id": pa.array(np.arange(ROWS), pa.int64()),
            "score": pa.array(rng.random(ROWS)),
            "payload": pa.array([row.tobytes() for row in payload], pa.binary()),
        }
    )


def parquet_bytes() -> bytes:
    sink = io.BytesIO()
    pq.write_table(table(), sink, row_group_size=GROUP, compression="none")
    return sink.getvalue()


DATA = parquet_bytes()
LOW, HIGH = 7_250, 7_500  # inside row group 7


def chunk_bytes(group: int) -> int:
    """The bytes of one row group's column chunks, from the file's own metadata."""
    meta = pq.ParquetFile(pa.BufferReader(DATA)).metadata.row_group(group)
    return sum(meta.column(i).total_compressed_size for i in range(meta.num_columns))


def ranges(seen: list[object]) -> list[str]:
    return [s.range for s in seen if s.method == "GET" and s.range]  # type: ignore[attr-defined]


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[ProxyServer]:
    """A proxy that every request of the test goes through (``HTTP_PROXY``)."""
    for name in NETWORK_ENV:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    server = ProxyServer()
    monkeypatch.setenv("HTTP_PROXY", server.url)
    config.reset()  # stores are built with the environment's proxy
    try:
        yield server
    finally:
        server.stop()
        config.reset()


def _moto() -> tuple[Callable[[], None], Callable[[], str]]:
    server = MotoServer()
    server.create_bucket(BUCKET)

    def configure() -> str:
        dataio.configure_endpoint("s3", server.url, region="us-east-1")
        dataio.configure_credentials("s3", access_key_id=KEY, secret_access_key=SECRET)
        return f"s3://{BUCKET}/rg/t.parquet"

    return server.stop, configure


def _r2() -> tuple[Callable[[], None], Callable[[], str]]:
    """moto standing in for R2: an S3 API at a configured endpoint, region ``auto``."""
    server = MotoServer()
    server.create_bucket(BUCKET)

    def configure() -> str:
        dataio.configure_endpoint("r2", server.url)
        dataio.configure_credentials("r2", access_key_id=KEY, secret_access_key=SECRET)
        return f"r2://{BUCKET}/rg/t.parquet"

    return server.stop, configure


def _gcs() -> tuple[Callable[[], None], Callable[[], str]]:
    server = GcsEmulator()
    server.create_bucket(BUCKET)

    def configure() -> str:
        dataio.configure_endpoint("gs", server.url)
        dataio.configure_credentials("gs", service_account_key=server.service_account())
        return f"gs://{BUCKET}/rg/t.parquet"

    return server.stop, configure


def _azurite() -> tuple[Callable[[], None], Callable[[], str]]:
    server = Azurite()
    server.create_container(BUCKET)

    def configure() -> str:
        dataio.configure_endpoint("az", server.url)
        dataio.configure_credentials("az", account_name=AZURITE_ACCOUNT, account_key=AZURITE_KEY)
        return f"az://{BUCKET}/rg/t.parquet"

    return server.stop, configure


@pytest.fixture(scope="module", params=["s3", "r2", "gs", "az"])
def backend(request: pytest.FixtureRequest) -> Iterator[Callable[[], str]]:
    """A started server and a function that configures dataio for it (endpoint and
    credentials) and returns the URI of the test file, written through the verbs."""
    stop, configure = {"s3": _moto, "r2": _r2, "gs": _gcs, "az": _azurite}[request.param]()
    try:
        config.reset()
        dataio.write(configure(), DATA)
        config.reset()
        yield configure
    finally:
        stop()
        config.reset()


@pytest.fixture
def local(tmp_path: Path) -> str:
    path = tmp_path / "t.parquet"
    path.write_bytes(DATA)
    return str(path)


def test_a_selective_filter_fetches_one_row_group(
    backend: Callable[[], str], proxy: ProxyServer, local: str
) -> None:
    uri = backend()
    frame = scan_parquet(uri).filter((col("id") >= LOW) & (col("id") < HIGH))
    got = frame.collect()
    whole = table()
    mask = pc.and_(pc.greater_equal(whole["id"], LOW), pc.less(whole["id"], HIGH))
    assert got.equals(whole.filter(mask))  # the oracle: pyarrow's filter
    assert got.equals(scan_parquet(local).filter((col("id") >= LOW) & (col("id") < HIGH)).collect())
    # the footer (one suffix request, shared by the schema read and the scan) and the
    # chunks of row group 7: about 1/20 of the file, and no whole-object GET
    gets = [s for s in proxy.seen if s.method == "GET"]
    assert gets and all(s.range for s in gets), [s.range for s in gets]
    assert proxy.body_bytes <= 2 * (64 << 10) + chunk_bytes(7) + 4096
    assert proxy.body_bytes < len(DATA) / 5
    assert all(uri.split("/")[2] in s.target for s in proxy.seen)  # all through the proxy


def test_a_scan_of_many_objects_prunes_each(backend: Callable[[], str], proxy: ProxyServer) -> None:
    uri = backend()
    prefix = uri.rsplit("/", 1)[0] + "/many/"
    for i in range(4):
        dataio.write(f"{prefix}part-{i}.parquet", DATA)
    proxy.seen.clear()
    proxy.bodies.clear()
    got = scan_parquet(prefix).filter(col("id") == 7300).select("id", "score").collect()
    whole = table()
    one = whole.filter(pc.equal(whole["id"], 7300)).select(["id", "score"])
    assert got.equals(pa.concat_tables([one] * 4))
    assert proxy.body_bytes < 4 * len(DATA) / 5


def test_a_projection_fetches_only_its_columns(
    backend: Callable[[], str], proxy: ProxyServer
) -> None:
    uri = backend()
    got = scan_parquet(uri).select("id").collect()
    assert got.equals(table().select(["id"]))
    payload = sum(
        pq.ParquetFile(pa.BufferReader(DATA)).metadata.row_group(g).column(2).total_compressed_size
        for g in range(ROWS // GROUP)
    )
    assert proxy.body_bytes < len(DATA) - payload  # no payload chunk came over


def test_without_a_filter_every_row_group_comes_over(
    backend: Callable[[], str], proxy: ProxyServer
) -> None:
    # the counterpart of the test above: the count does see a full read
    uri = backend()
    assert scan_parquet(uri).collect().equals(table())
    assert proxy.body_bytes >= sum(chunk_bytes(g) for g in range(ROWS // GROUP))


def test_sql_over_a_remote_table_prunes(backend: Callable[[], str], proxy: ProxyServer) -> None:
    uri = backend()
    got = dataio.sql("SELECT id, score FROM t WHERE id = 7300", t=scan_parquet(uri)).collect()
    whole = table()
    assert got.equals(whole.filter(pc.equal(whole["id"], 7300)).select(["id", "score"]))
    assert proxy.body_bytes < len(DATA) / 5


def test_with_the_byte_cache_a_scan_reads_the_cached_object(
    backend: Callable[[], str],
    proxy: ProxyServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATAIO_CACHE_DIR", str(tmp_path / "cache"))
    uri = backend()
    whole = table()
    expected = whole.filter(pc.equal(whole["id"], 7300))
    assert scan_parquet(uri).filter(col("id") == 7300).collect().equals(expected)
    assert proxy.body_bytes >= len(DATA)  # a miss: the whole object, then cached
    proxy.seen.clear()
    assert scan_parquet(uri).filter(col("id") == 7300).collect().equals(expected)
    assert not [s for s in proxy.seen if s.method == "GET"]  # a hit: no object read


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return make_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def https_server(authority: Authority, monkeypatch: pytest.MonkeyPatch) -> Iterator[TLSRangeServer]:
    for name in NETWORK_ENV:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    server = TLSRangeServer(authority)
    server.objects["/d/t.parquet"] = DATA
    config.reset()
    try:
        yield server
    finally:
        server.kill()
        config.reset()


def test_scans_trust_the_tls_roots_the_verbs_trust(
    https_server: TLSRangeServer, authority: Authority, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"{https_server.url}/d/t.parquet"
    with pytest.raises(dataio.TransportError, match="certificate"):
        scan_parquet(uri).filter(col("id") == 5).collect()
    monkeypatch.setenv("SSL_CERT_FILE", str(authority.ca_pem))
    config.reset()  # stores are built with the environment's TLS roots
    whole = table()
    got = scan_parquet(uri).filter(col("id") == 5).collect()
    assert got.equals(whole.filter(pc.equal(whole["id"], 5)))
    gets = [{k.lower() for k in h} for c, _, h in https_server.requests if c == "GET"]
    assert gets and all("range" in h for h in gets)  # ranged over https too


def test_a_server_dying_mid_scan_is_a_transport_error_naming_the_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from helpers.object_servers import RangeServer

    server = RangeServer()
    server.objects["/d/t.parquet"] = DATA
    try:
        frame = scan_parquet(f"{server.url}/d/t.parquet")  # footer read while it was up
        server.fail_next = 100  # every later request: 503
        with pytest.raises(dataio.TransportError, match=r"t\.parquet"):
            frame.collect()
    finally:
        server.kill()
        config.reset()


def test_a_damaged_page_is_a_format_error_as_it_is_locally(tmp_path: Path) -> None:
    from helpers.object_servers import RangeServer

    data = bytearray(DATA)
    chunk = pq.ParquetFile(pa.BufferReader(DATA)).metadata.row_group(3).column(0)
    start = chunk.data_page_offset
    for at in range(start, start + 16):  # the page header: thrift that cannot be parsed
        data[at] ^= 0x5A
    local = tmp_path / "bad.parquet"
    local.write_bytes(bytes(data))
    with pytest.raises(dataio.FormatError, match=r"bad\.parquet"):
        scan_parquet(str(local)).collect()
    server = RangeServer()
    server.objects["/d/bad.parquet"] = bytes(data)
    try:
        uri = f"{server.url}/d/bad.parquet"
        frame = scan_parquet(uri)  # the footer is intact
        with pytest.raises(dataio.FormatError, match=re.escape(repr(uri))):
            frame.collect()
        # pruned away, the damaged row group is never read
        got = frame.filter(col("id") >= 15_000).collect()
        whole = table()
        assert got.equals(whole.filter(pc.greater_equal(whole["id"], 15_000)))
    finally:
        server.kill()
        config.reset()


def test_hf_parquet_is_read_by_ranges_through_the_redirect(monkeypatch: pytest.MonkeyPatch) -> None:
    from helpers.cloud_servers import HubServer

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", *NETWORK_ENV):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    hub = HubServer(token="hf_dataioPruningTokenNeverShown")
    try:
        hub.repo("datasets", "org/name", private=True).put("data/t.parquet", DATA)
        config.reset()
        dataio.configure_endpoint("hf", hub.url)
        dataio.configure_credentials("hf", bearer_token="hf_dataioPruningTokenNeverShown")
        got = scan_parquet("hf://datasets/org/name/data/t.parquet").filter(col("id") == 9)
        whole = table()
        assert got.collect().equals(whole.filter(pc.equal(whole["id"], 9)))
        cdn = [{k.lower(): v for k, v in h.items()} for c, _, h in hub.cdn.requests if c == "GET"]
        assert cdn and all("range" in h for h in cdn)  # the large file, by ranges
    finally:
        hub.stop()
        config.reset()


def test_the_chunks_a_scan_reads_are_fetched_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    from helpers.object_servers import RangeServer

    from dataio.engine import remote_files

    state = {"now": 0, "most": 0, "bytes": 0}
    lock = threading.Lock()
    real = remote_files.get_range

    def counting(uri: str, start: int, end: int, **kwargs: object) -> object:
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
            state["bytes"] += end - start
        time.sleep(0.05)  # a slow link: requests in flight together overlap here
        try:
            return real(uri, start, end, **kwargs)
        finally:
            with lock:
                state["now"] -= 1

    monkeypatch.setattr(remote_files, "get_range", counting)
    gc.collect()
    held = remote_files._budget.used  # what earlier tests' plans still hold, if any
    server = RangeServer()
    server.objects["/d/t.parquet"] = DATA
    try:
        got = scan_parquet(f"{server.url}/d/t.parquet").select("score").collect()
        assert got.equals(table().select(["score"]))
        # one request per row group's score chunk, several in flight at once
        ranged = [c for c, _, h in server.requests if "range" in {k.lower() for k in h}]
        assert len(ranged) >= ROWS // GROUP
        assert state["most"] > 1
        # what was fetched ahead is let go once read, or with the plan (a query that
        # stops early reads less than was fetched)
        assert remote_files._budget.used <= held
        # small windows and parts: a range split in parts side by side, read whole
        monkeypatch.setattr(remote_files, "AHEAD_WINDOW", 64 << 10)
        monkeypatch.setattr(remote_files, "AHEAD_PART", 5_000)
        state["bytes"] = 0
        assert scan_parquet(f"{server.url}/d/t.parquet").collect().equals(table())
        # reads that overtake the window are fetched on their own: a little twice at most
        assert len(DATA) - (64 << 10) <= state["bytes"] <= len(DATA) + (64 << 10)
        assert scan_parquet(f"{server.url}/d/t.parquet").head(3).collect().num_rows == 3
        # a query that stops early: pyarrow's reads still running finish in the
        # background, and the plan's buffers go with it
        deadline = time.monotonic() + 10
        while remote_files._budget.used > held and time.monotonic() < deadline:
            gc.collect()
            time.sleep(0.05)
        assert remote_files._budget.used <= held
    finally:
        server.kill()
        config.reset()


def test_nested_and_dotted_columns_read_like_pyarrow() -> None:
    from helpers.object_servers import RangeServer

    nested = pa.table(
        {
            "id": pa.array(range(3000), pa.int64()),
            "a.b": pa.array([float(i) for i in range(3000)]),
            "point": pa.array([{"x": i, "y": -i} for i in range(3000)]),
            "tags": pa.array([[i, i + 1] for i in range(3000)]),
        }
    )
    sink = io.BytesIO()
    pq.write_table(nested, sink, row_group_size=500)
    server = RangeServer()
    server.objects["/d/n.parquet"] = sink.getvalue()
    try:
        frame = scan_parquet(f"{server.url}/d/n.parquet")
        got = frame.filter(col("id") >= 2900).select("point", "tags", "a.b").collect()
        expected = nested.filter(pc.greater_equal(nested["id"], 2900)).select(
            ["point", "tags", "a.b"]
        )
        assert got.equals(expected)
    finally:
        server.kill()
        config.reset()
