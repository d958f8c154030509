"""Remote Parquet scans: dataio's ranged reads vs a whole-object download vs DataFusion's
own HTTP object store, on a loopback range server shaped like an object store.

The server (``tests/helpers``' ``TLSRangeServer``, in a child process so it never
competes with the client for the GIL) waits ``--latency-ms`` before each response and
sends each body at ``--mbps`` MB/s, as one connection to S3, GCS or Azure roughly does;
requests are served in parallel. ``--files`` Parquet files of ``--mib`` MiB each
(``--groups`` row groups; columns ``id`` (sorted), ``score``, ``payload``) are scanned
three ways:

* ``selective``: ``id`` in one row group of each file (``filter`` + ``select``);
* ``one column``: ``score`` of every row group;
* ``all``: every column of every row group.

Contenders: ``ranged`` (dataio now: a pyarrow dataset whose reads are ranged GETs
through the verbs' stores), ``whole`` (each object downloaded through the verbs and
parsed by pyarrow: what ``gs://``, ``az://`` and ``http(s)://`` scans did before) and
``datafusion-http`` (DataFusion's ``object_store.Http``: its own client, ranged and
concurrent, but deaf to dataio's configuration). HTTPS throughout: datafusion-python
55's ``Http`` store takes no ``allow_http``; both clients trust the test CA through
``SSL_CERT_FILE``. The table gives the median time over ``--rounds``, and the body bytes
and GETs the server saw in the last round. Run from the repository root::

    .venv/bin/python benchmarks/remote_scan.py [--rounds R] [--files F] [--mib M]

``--s3`` instead compares dataio's ranged scan with DataFusion's ``AmazonS3`` store (the
path s3:// scans took before) on moto, without added latency.
"""

from __future__ import annotations

import argparse
import io
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import dataio
from dataio import col


def parquet_file(mib: int, groups: int, seed: int) -> tuple[bytes, int]:
    rows = mib * (1 << 20) // 48
    rng = np.random.default_rng(seed)
    payload = rng.integers(0, 256, size=(rows, 32), dtype=np.uint8)
    table = pa.table(
        {
            "id": pa.array(np.arange(rows), pa.int64()),
            "score": pa.array(rng.random(rows)),
            "payload": pa.array([r.tobytes() for r in payload], pa.binary()),
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=rows // groups, compression="none")
    return sink.getvalue(), rows


def serve(conn: Any, folder: str, objects: dict[str, bytes], stall: float, rate: float) -> None:
    """The child process: a TLS range server answering ``clear`` / ``log`` / ``stop``."""
    from helpers.tls_server import TLSRangeServer, make_ca

    server = TLSRangeServer(make_ca(Path(folder)))
    server.objects.update(objects)
    server.stall_secs, server.bytes_per_sec = stall, rate
    conn.send(server.url)
    while True:
        command = conn.recv()
        if command == "clear":
            server.requests.clear()
            conn.send(None)
        elif command == "log":
            conn.send(
                [
                    (c, {k.lower(): v for k, v in h.items()}.get("range"))
                    for c, _, h in server.requests
                ]
            )
        else:
            server.kill()
            conn.send(None)
            return


def body_bytes(log: list[tuple[str, str | None]], size: int) -> tuple[int, int]:
    """Body bytes and GETs in the server's log (``size``: one object's length)."""
    total = gets = 0
    for command, spec in log:
        if command != "GET":
            continue
        gets += 1
        if spec is None:
            total += size
            continue
        first, _, last = spec.removeprefix("bytes=").partition("-")
        if not first:
            total += min(int(last), size)
        else:
            total += (int(last) if last else size - 1) - int(first) + 1
    return total, gets


def dataio_query(name: str, low: int) -> Callable[[Any], Any]:
    if name == "selective":
        return lambda f: f.filter((col("id") >= low) & (col("id") < low + 100)).select(
            "id", "score"
        )
    if name == "one column":
        return lambda f: f.select("score")
    return lambda f: f


def run_dataio(uris: list[str], query: Callable[[Any], Any], *, ranged: bool) -> int:
    import dataio.engine.remote as remote

    real = remote.ranged
    if not ranged:
        remote.ranged = lambda fmt, path: False  # type: ignore[assignment]
    try:
        return int(query(dataio.scan_parquet(uris)).collect().num_rows)
    finally:
        remote.ranged = real  # type: ignore[assignment]


def run_datafusion(base: str, uris: list[str], name: str, low: int) -> int:
    from datafusion import SessionContext, lit, object_store
    from datafusion import col as dcol

    ctx = SessionContext()
    scheme, host = base.split("://", 1)
    ctx.register_object_store(f"{scheme}://", object_store.Http(base), host)
    rows = 0
    for uri in uris:
        df = ctx.read_parquet(uri)
        if name == "selective":
            df = df.filter((dcol("id") >= lit(low)) & (dcol("id") < lit(low + 100)))
            df = df.select(dcol("id"), dcol("score"))
        elif name == "one column":
            df = df.select(dcol("score"))
        rows += sum(b.num_rows for b in df.collect())
    return rows


def s3_comparison(args: argparse.Namespace) -> None:
    """``--s3``: dataio's ranged scan vs DataFusion's ``AmazonS3`` store (what s3:// scans
    used before) on moto, the same files, no latency added."""
    from datafusion import SessionContext, lit, object_store
    from datafusion import col as dcol
    from helpers.object_servers import MotoServer

    key, secret, bucket = "AKIABENCHREMOTESCAN1", "bench-secret", "remote-scan-bench"
    files = [parquet_file(args.mib, args.groups, seed)[0] for seed in range(args.files)]
    rows = parquet_file(args.mib, args.groups, 0)[1]
    low = rows // args.groups * (args.groups // 2) + 10
    server = MotoServer()
    try:
        server.create_bucket(bucket)
        dataio.configure_endpoint("s3", server.url, region="us-east-1")
        dataio.configure_credentials("s3", access_key_id=key, secret_access_key=secret)
        uris = [f"s3://{bucket}/p/part-{i}.parquet" for i in range(args.files)]
        for uri, data in zip(uris, files, strict=True):
            dataio.write(uri, data)

        def native(name: str) -> int:
            ctx = SessionContext()
            store = object_store.AmazonS3(
                bucket_name=bucket,
                region="us-east-1",
                access_key_id=key,
                secret_access_key=secret,
                endpoint=server.url,
                allow_http=True,
            )
            ctx.register_object_store("s3://", store, bucket)
            total = 0
            for uri in uris:
                df = ctx.read_parquet(uri)
                if name == "selective":
                    df = df.filter((dcol("id") >= lit(low)) & (dcol("id") < lit(low + 100)))
                    df = df.select(dcol("id"), dcol("score"))
                elif name == "one column":
                    df = df.select(dcol("score"))
                total += sum(b.num_rows for b in df.collect())
            return total

        print(f"s3 on moto: {args.files} files of {len(files[0]) / 2**20:.1f} MiB")
        for name in ("selective", "one column"):
            query = dataio_query(name, low)
            ours: list[float] = []
            theirs: list[float] = []
            for _ in range(args.rounds):
                started = time.perf_counter()
                a = run_dataio(uris, query, ranged=True)
                ours.append(time.perf_counter() - started)
                started = time.perf_counter()
                b = native(name)
                theirs.append(time.perf_counter() - started)
                if a != b:
                    raise SystemExit(f"{name}: dataio read {a} rows, DataFusion {b}")
            print(
                f"{name:<12} dataio ranged {statistics.median(ours):.3f} s, "
                f"DataFusion AmazonS3 {statistics.median(theirs):.3f} s"
            )
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--files", type=int, default=2)
    parser.add_argument("--mib", type=int, default=32)
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--mbps", type=float, default=200.0)
    parser.add_argument("--s3", action="store_true", help="dataio vs DataFusion's S3 store")
    args = parser.parse_args(argv)
    if args.s3:
        s3_comparison(args)
        return

    files = [parquet_file(args.mib, args.groups, seed) for seed in range(args.files)]
    rows = files[0][1]
    size = len(files[0][0])
    objects = {f"/bench/part-{i}.parquet": data for i, (data, _) in enumerate(files)}
    low = rows // args.groups * (args.groups // 2) + 10
    with tempfile.TemporaryDirectory() as folder:
        parent, child = multiprocessing.Pipe()
        process = multiprocessing.get_context("fork").Process(
            target=serve,
            args=(child, folder, objects, args.latency_ms / 1000, args.mbps * 1e6),
        )
        process.start()
        try:
            base = parent.recv()
            os.environ["SSL_CERT_FILE"] = str(Path(folder) / "ca.pem")
            uris = [f"{base}{key}" for key in objects]
            print(
                f"{args.files} files of {size / 2**20:.1f} MiB, {args.groups} row groups each; "
                f"server latency {args.latency_ms:g} ms, {args.mbps:g} MB/s per response"
            )
            print(f"{'query':<12} {'contender':<16} {'median s':>9} {'MiB sent':>9} {'GETs':>5}")
            for name in ("selective", "one column", "all"):
                query = dataio_query(name, low)
                contenders: dict[str, Callable[[], int]] = {
                    "ranged": lambda q=query: run_dataio(uris, q, ranged=True),
                    "whole": lambda q=query: run_dataio(uris, q, ranged=False),
                    "datafusion-http": lambda n=name: run_datafusion(base, uris, n, low),
                }
                times: dict[str, list[float]] = {k: [] for k in contenders}
                sent: dict[str, tuple[int, int]] = {}
                counts: set[int] = set()
                for _ in range(args.rounds):
                    for label, fn in contenders.items():  # interleaved: noise hits all alike
                        parent.send("clear")
                        parent.recv()
                        started = time.perf_counter()
                        counts.add(fn())
                        times[label].append(time.perf_counter() - started)
                        parent.send("log")
                        sent[label] = body_bytes(parent.recv(), size)
                if len(counts) != 1:
                    raise SystemExit(f"{name}: the contenders disagree on the rows: {counts}")
                for label in contenders:
                    nbytes, gets = sent[label]
                    print(
                        f"{name:<12} {label:<16} {statistics.median(times[label]):>9.3f} "
                        f"{nbytes / 2**20:>9.2f} {gets:>5}"
                    )
        finally:
            parent.send("stop")
            parent.recv()
            process.join(10)


if __name__ == "__main__":
    main()
