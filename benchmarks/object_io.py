"""Object-store reads on loopback S3 (moto): dataio vs raw obstore vs boto3.

Two cases, each one pass per round over the same objects of a moto server on 127.0.0.1:

* ``large``: one object (256 MiB by default) read whole into memory:
  ``dataio.read`` (default plan: ranged requests pinned to the ETag, unless the first
  chunk arrives at 400 MB/s or more, as it does on loopback), the same
  with ``readall_concurrency=1`` (one request), ``dataio.reader(uri).read_buffer()``
  (one request, the body's own buffer: no copy into Python ``bytes``),
  ``dataio.fetch_into`` a reused buffer (one request), raw
  ``obstore.get(store, key).bytes()`` (one request, a Rust buffer), and boto3
  ``get_object()["Body"].read()`` (``bytes``);
* ``small``: 2,000 small JPEGs (about 16-100 KiB, from ``dataio.testing.make_jpegs``)
  read through a dataio pipeline (``slot("data").decode_bytes()``, ``batch(64)``) bound to
  their ``s3://`` URIs, vs boto3 ``get_object`` on a ``ThreadPoolExecutor``.

A third case, ``tfrecord`` (``--tfrecord-mib``, 0 skips it; ``--tfrecord-only`` runs it
alone, without moto), reads a local TFRecord file of ``tf.train.Example`` records holding
one ~100 KiB ``bytes`` feature each through ``dataio.iter_tfrecord`` with
``verify=True`` (both masked CRC32C checked) and ``verify=False``, parsed and
``raw=True``. Target: verifying costs at most 20% (verify=True >= 0.8x verify=False) in
the default, parsed mode; the raw ratio is printed alongside.

Contenders alternate round by round, so a noisy neighbour slows all of them alike; the
table gives the median rate over the rounds. moto is a Python server on the same host,
so it shares the cores with the client: the numbers compare clients under that one
server, not S3's own throughput. moto also copies the whole object for every ranged GET
(~0.2 s for 256 MiB even for a 1 MiB range), which is why dataio's adaptive plan, which
reads on in one request when the first chunk arrives fast, matters here.

Targets: the no-copy read (``read_buffer``, one request: the same work as obstore's
``.bytes()``) within 10% of raw obstore; ``dataio.read`` (``bytes``, like boto3's
``read()``) and the pipeline ahead of boto3. Run from the repository root::

    .venv/bin/python benchmarks/object_io.py [--rounds R] [--large-mib M] [--objects N]

Nothing here asserts on timings; the targets are printed as met or not met.

``--safetensors-subset`` runs one more case instead (issue #16): a safetensors file of
1 GiB (``--safetensors-mib``) of 16 equal float32 tensors on moto, read one tensor at a
time with ``dataio.read_safetensors(uri, keys=[name])``. Bytes fetched are counted
through a hook on ``dataio.io.verbs.read`` (every ranged body the ranged file receives).
Compared with the raw verbs reading the same ranges (``head``, the 64 KiB header block,
the tensor: what the format layer costs on top of them) and with ``dataio.read`` of the
whole object (what reading the file whole would fetch). Targets: bytes fetched <= 1.1x
the tensor's size; the subset read within 10% of the raw verbs on the same bytes.

``--webdataset-remote`` also writes a shard index (``dataio.write_webdataset_index``,
timed) and gives each rank's first epoch with it (a fresh source: no header walk of the
other ranks' shards), the rank's samples read by the source alone (no pipeline), and,
at 3 ranks, rank 1 (whose run starts inside a shard) reaching its start by streaming the
shard vs walking its headers. ``vs read``: bytes fetched per second over
``dataio.read``'s whole-shard rate on the same store. ``--wds-no-walk`` leaves out the
header-walk rows (minutes on moto at 2,000 samples per shard). Its ``vs read`` column is
indicative only (read's rate comes from separate passes); ``--wds-vs-verbs`` compares
like with like: rank 0 of 2's shards through the source alone (with a shard index) and
through ``dataio.read`` (whole, and the same ranges), interleaved round by round, with
median and min..max wall time, this process's and moto's CPU seconds per pass, and the
load average (target: the source within 10% of the raw verbs on the same bytes).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _common import (
    BENCH_DATA,
    Contender,
    format_table,
    interleave,
    load_average,
    machine_lines,
    median,
    mib,
)

import dataio
from dataio.engine.pool import cpu_workers
from dataio.sources import archives
from dataio.sources.archives import expand_braces
from dataio.testing import make_jpegs

BUCKET = "object-io-bench"
ACCESS_KEY, SECRET_KEY = "AKIABENCHOBJECTIO", "bench-secret"
REGION = "us-east-1"
BATCH = 64
TARGET_VS_OBSTORE = 0.90  # dataio's large read within 10% of raw obstore
TARGET_VS_BOTO3 = 1.0  # ahead of boto3 on both cases
PACKAGES = ("obstore", "boto3", "botocore", "moto", "psutil")


# -- the server ------------------------------------------------------------------------


@contextmanager
def moto_server() -> Iterator[str]:
    """``moto_server`` on a free loopback port for the ``with`` block; yields its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    exe = Path(sys.executable).with_name("moto_server")
    process = subprocess.Popen(
        [str(exe), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        request = urllib.request.Request(f"{url}/{BUCKET}", data=b"", method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


# -- clients ---------------------------------------------------------------------------


def boto3_client(url: str, threads: int) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(max_pool_connections=threads),
    )


def obstore_store(url: str) -> Any:
    from obstore.store import S3Store

    return S3Store(
        BUCKET,
        config={
            "endpoint": url,
            "region": REGION,
            "access_key_id": ACCESS_KEY,
            "secret_access_key": SECRET_KEY,
        },
        client_options={"allow_http": True},
    )


def configure_dataio(url: str) -> None:
    dataio.configure_endpoint("s3", url, region=REGION)
    dataio.configure_credentials("s3", access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY)


# -- data ------------------------------------------------------------------------------


def small_files(count: int) -> list[Path]:
    """JPEGs of about 16-100 KiB, generated once into ``.bench-data/``."""
    return make_jpegs(BENCH_DATA / "object-io", count, min_side=300, max_side=760, seed=7)


def upload(store: Any, large_bytes: int, files: Sequence[Path]) -> tuple[str, list[str]]:
    """Put the large object and the small ones; return their keys."""
    import obstore

    large_key = f"large/{large_bytes}.bin"
    obstore.put(store, large_key, os.urandom(large_bytes))
    keys = [f"small/{p.name}" for p in files]
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda kp: obstore.put(store, kp[0], kp[1].read_bytes()),
                zip(keys, files, strict=True),
            )
        )
    return large_key, keys


# -- contenders ------------------------------------------------------------------------


def large_contenders(url: str, key: str, size: int, threads: int) -> list[Contender]:
    import obstore

    store = obstore_store(url)
    client = boto3_client(url, threads)
    uri = f"s3://{BUCKET}/{key}"

    def via_dataio() -> tuple[int, str]:
        return len(dataio.read(uri)), "bytes"

    def via_dataio_single() -> tuple[int, str]:
        # one request, as raw obstore makes: shows what the range split costs or gains
        dataio.configure_transport("s3", readall_concurrency=1)
        try:
            return len(dataio.read(uri)), "bytes"
        finally:
            dataio.configure_transport("s3")

    def via_read_buffer() -> tuple[int, str]:
        dataio.configure_transport("s3", readall_concurrency=1)
        try:
            return len(dataio.reader(uri).read_buffer()), "memoryview (no copy)"
        finally:
            dataio.configure_transport("s3")

    buffer = bytearray(size)

    def via_fetch_into() -> tuple[int, str]:
        # dataio's path for large eager reads: a caller-owned buffer, reused every pass
        dataio.configure_transport("s3", readall_concurrency=1)
        try:
            return dataio.fetch_into(uri, buffer), "bytearray (reused)"
        finally:
            dataio.configure_transport("s3")

    def via_obstore() -> tuple[int, str]:
        return len(obstore.get(store, key).bytes()), "obstore.Bytes"

    def via_boto3() -> tuple[int, str]:
        return len(client.get_object(Bucket=BUCKET, Key=key)["Body"].read()), "bytes"

    return [
        Contender("dataio.read", via_dataio, size),
        Contender("dataio.read unsplit", via_dataio_single, size),
        Contender("dataio.read_buffer unsplit", via_read_buffer, size),
        Contender("dataio.fetch_into unsplit", via_fetch_into, size),
        Contender("obstore get().bytes()", via_obstore, size),
        Contender("boto3 get_object", via_boto3, size),
    ]


def small_contenders(url: str, keys: Sequence[str], threads: int) -> list[Contender]:
    client = boto3_client(url, threads)
    records = [{"data": f"s3://{BUCKET}/{key}"} for key in keys]
    pipe = dataio.pipeline(dataio.slot("data").decode_bytes(), dataio.batch(BATCH))

    def via_dataio() -> tuple[int, str]:
        count = total = 0
        with pipe.bind(records).run("numpy") as loader:
            for batch in loader:
                values = batch["data"]
                count += len(values)
                total += sum(len(v) for v in values)
        return count, mib(total)

    def get(key: str) -> int:
        return len(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())

    def via_boto3() -> tuple[int, str]:
        with ThreadPoolExecutor(threads) as pool:
            sizes = list(pool.map(get, keys))
        return len(sizes), mib(sum(sizes))

    return [
        Contender("dataio pipeline", via_dataio, len(keys)),
        Contender(f"boto3 x{threads} threads", via_boto3, len(keys)),
    ]


# -- tfrecord: the cost of checksums ---------------------------------------------------

TARGET_VERIFY = 0.80  # iter_tfrecord verify=True >= 0.8x verify=False
TFRECORD_PAYLOAD = 100 << 10


def _proto_field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2)."""

    def varint(value: int) -> bytes:
        out = bytearray()
        while value > 0x7F:
            out.append(value & 0x7F | 0x80)
            value >>= 7
        out.append(value)
        return bytes(out)

    return varint(number << 3 | 2) + varint(len(payload)) + payload


def tfrecord_file(size: int) -> tuple[Path, int]:
    """A TFRecord file of about ``size`` bytes: Examples with one ``image`` bytes feature of
    TFRECORD_PAYLOAD random bytes; (its path, its record count). Framed with dataio's
    masked CRC32C, which the tests check against the ``crc32c`` package."""
    import struct

    from dataio.formats.tfrecord import masked_crc32c

    count = max(1, size // TFRECORD_PAYLOAD)
    path = BENCH_DATA / f"object_io_{count}x{TFRECORD_PAYLOAD >> 10}k.tfrecord"
    if path.exists():
        return path, count
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = os.urandom
    with open(path.with_suffix(".tmp"), "wb") as f:
        for _ in range(count):
            feature = _proto_field(1, _proto_field(1, rng(TFRECORD_PAYLOAD)))  # BytesList
            entry = _proto_field(1, b"image") + _proto_field(2, feature)
            data = _proto_field(1, _proto_field(1, entry))  # Example{Features{map entry}}
            length = struct.pack("<Q", len(data))
            f.write(length + struct.pack("<I", masked_crc32c(length)))
            f.write(data + struct.pack("<I", masked_crc32c(data)))
    path.with_suffix(".tmp").rename(path)
    return path, count


def tfrecord_contenders(path: Path, count: int) -> list[Contender]:
    size = path.stat().st_size

    def reading(*, verify: bool, raw: bool) -> Callable[[], tuple[int, str]]:
        def run() -> tuple[int, str]:
            seen = sum(1 for _ in dataio.iter_tfrecord(path, verify=verify, raw=raw))
            if seen != count:
                raise RuntimeError(f"read {seen} records of {count}")
            return size, "raw bytes" if raw else "Example dicts"

        return run

    return [
        Contender(
            f"iter_tfrecord verify={verify}{' raw' if raw else ''}",
            reading(verify=verify, raw=raw),
            size,
        )
        for raw in (False, True)
        for verify in (True, False)
    ]


def tfrecord_case(megabytes: int, rounds: int) -> list[tuple[str, float, float]]:
    """Measure the tfrecord case, print its table; the (label, ratio, target) checks."""
    from dataio.formats.tfrecord import crc32c_backend

    path, count = tfrecord_file(megabytes << 20)
    print(
        f"tfrecord: {count} Examples of {TFRECORD_PAYLOAD >> 10} KiB in {path} "
        f"({mib(path.stat().st_size)}); CRC32C through {crc32c_backend()!r}",
        flush=True,
    )
    contenders = tfrecord_contenders(path, count)
    interleave(contenders, rounds, unit="bytes")
    rows = [
        ["tfrecord", c.name, f"{c.rate() / 1e6:,.0f} MB/s", mib(max(c.growth)), c.output]
        for c in contenders
    ]
    print()
    print(format_table(["case", "contender", "median", "RSS growth", "output"], rows))
    by_name = {c.name: c.rate() for c in contenders}

    def ratio(mode: str) -> float:
        return (
            by_name[f"iter_tfrecord verify=True{mode}"]
            / by_name[f"iter_tfrecord verify=False{mode}"]
        )

    # raw=True has no parsing to hide the checksum behind: with the file in the page
    # cache it compares CRC32C (~26 GB/s) with a memory copy, so it is shown, not a target
    print(f"tfrecord raw=True: verify=True / verify=False = {ratio(' raw'):.2f}")
    return [("tfrecord: verify=True >= 0.80 x verify=False", ratio(""), TARGET_VERIFY)]


# -- remote safetensors subset (issue #16) ----------------------------------------------

SUBSET_TENSORS = 16
TARGET_SUBSET_BYTES = 1.1  # bytes fetched <= 1.1x the tensor read
TARGET_VS_VERBS = 0.90  # within 10% of the raw verbs on the same bytes


def safetensors_subset(url: str, total_bytes: int, rounds: int) -> None:
    """Read one tensor of a ``total_bytes`` safetensors object on moto; print the rows."""
    import numpy as np

    from dataio.io import verbs

    count = total_bytes // 4 // SUBSET_TENSORS
    names = [f"layer.{i:02d}.weight" for i in range(SUBSET_TENSORS)]
    uri = f"s3://{BUCKET}/safetensors/model.safetensors"
    state = {name: np.full(count, i, np.float32) for i, name in enumerate(names)}
    started = time.perf_counter()
    dataio.write_safetensors(uri, state)
    print(f"uploaded {mib(dataio.head(uri)['size'])} in {time.perf_counter() - started:.1f} s")
    del state
    size = dataio.head(uri)["size"]
    with dataio.open_safetensors(uri) as st:  # where the tensors lie, for the raw verbs
        entries = [st._entry(name)[1] for name in names]
    tensor = entries[0].nbytes
    header_block = min(64 << 10, size)
    fetched: list[int] = []
    real_read = verbs._download  # RangedFile's ranges (pinned) and read()'s come here

    def counting(loc: Any, target: Any, **kwargs: Any) -> Any:
        data = real_read(loc, target, **kwargs)
        fetched.append(len(data))
        return data

    totals: list[int] = []
    # each contender reads the tensors in turn, the same sequence
    turns = {"dataio": iter(range(1 << 30)), "verbs": iter(range(1 << 30))}

    def via_dataio() -> tuple[int, str]:
        name = names[next(turns["dataio"]) % SUBSET_TENSORS]
        fetched.clear()
        verbs._download = counting  # type: ignore[assignment]
        try:
            array = dataio.read_safetensors(uri, keys=[name])[name]
        finally:
            verbs._download = real_read  # type: ignore[assignment]
        got = sum(fetched)
        totals.append(got)
        return array.nbytes, f"{got:,} bytes fetched in {len(fetched)} ranges"

    def via_verbs() -> tuple[int, str]:
        # the same requests with no format layer: head, the header block, the tensor
        entry = entries[next(turns["verbs"]) % SUBSET_TENSORS]
        total = dataio.head(uri)["size"]
        first = dataio.read(uri, offset=0, size=min(header_block, total))
        data = dataio.read(uri, offset=entry.start, size=tensor)
        return len(data), f"{len(first) + len(data):,} bytes fetched in 2 ranges"

    def via_whole() -> tuple[int, str]:
        return len(dataio.read(uri)), f"{size:,} bytes (the whole object)"

    subset = Contender("read_safetensors(keys=[1])", via_dataio, tensor)
    verbs_same = Contender("raw verbs, same ranges", via_verbs, tensor)
    whole = Contender("dataio.read whole", via_whole, size)
    interleave([subset, verbs_same, whole], rounds, unit="bytes")
    rows = [
        [c.name, f"{c.rate() / 1e6:,.0f} MB/s", f"{median(c.seconds):.3f} s", c.output]
        for c in (subset, verbs_same, whole)
    ]
    print()
    print(f"object {mib(size)}, {SUBSET_TENSORS} tensors; tensor read {mib(tensor)}")
    print(format_table(["contender", "median rate", "median time", "fetched"], rows))
    per_read = max(totals)  # the most any pass fetched
    checks = [
        ("bytes fetched <= 1.1x the tensor", tensor * TARGET_SUBSET_BYTES / per_read, 1.0),
        (
            "subset read >= 0.90x the raw verbs on the same ranges",
            median(verbs_same.seconds) / median(subset.seconds),
            TARGET_VS_VERBS,
        ),
    ]
    print(
        f"bytes fetched / tensor: {per_read / tensor:.4f}; whole object / tensor: "
        f"{size / tensor:.1f}"
    )
    for label, ratio, target in checks:
        verdict = "met" if ratio >= target else "NOT met"
        print(f"target {label}: {ratio:.2f} -> {verdict}")


# -- report ----------------------------------------------------------------------------


def rows_for(
    case: str, contenders: Sequence[Contender], unit: Callable[[float], str]
) -> list[list[str]]:
    by_name = {c.name.split()[0].split(".")[0]: c for c in contenders}
    rows = []
    for c in contenders:
        versus = [
            f"{c.rate() / by_name[other].rate():.2f}" if other in by_name else "-"
            for other in ("obstore", "boto3")
        ]
        rows.append([case, c.name, unit(c.rate()), *versus, mib(max(c.growth)), c.output])
    return rows


# -- WebDataset shards (--webdataset-local, --webdataset-remote) -------------------------

WDS_SHARDS = 8


def wds_shards(root: Path, samples: int, *, seed: int = 11) -> list[Path]:
    """``WDS_SHARDS`` tar shards of ``samples`` samples each: a ``jpg`` of 4-40 KiB of
    random bytes and a ``cls``, as WebDataset writers lay them out (made once)."""
    import io
    import random
    import tarfile

    root.mkdir(parents=True, exist_ok=True)
    paths = [root / f"shard-{i:04d}.tar" for i in range(WDS_SHARDS)]
    if all(p.exists() for p in paths):
        return paths
    rng = random.Random(seed)
    for i, path in enumerate(paths):
        with tarfile.open(path, "w") as tar:
            for n in range(samples):
                key = f"{i:04d}{n:06d}"
                for field, data in (
                    ("jpg", rng.randbytes(rng.randint(4 << 10, 40 << 10))),
                    ("cls", str(n % 1000).encode()),
                ):
                    info = tarfile.TarInfo(f"{key}.{field}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return paths


def wds_local_contenders(paths: Sequence[Path], samples: int) -> list[Contender]:
    """A pass over the shards' samples (dicts of bytes): dataio, the webdataset package,
    and a plain tarfile loop."""
    import tarfile

    import webdataset as wds

    pattern = str(paths[0].parent / f"shard-{{0000..{len(paths) - 1:04d}}}.tar")

    def via_dataio() -> tuple[int, str]:
        n = total = 0
        for sample in dataio.webdataset(pattern):
            n += 1
            total += len(sample["jpg"])
        return n, mib(total)

    def via_package() -> tuple[int, str]:
        n = total = 0
        for sample in wds.WebDataset(pattern, shardshuffle=False, empty_check=False):
            n += 1
            total += len(sample["jpg"])
        return n, mib(total)

    def via_tarfile() -> tuple[int, str]:
        members = total = 0
        for path in paths:
            with tarfile.open(path) as tar:
                for member in tar:
                    handle = tar.extractfile(member)
                    if handle is not None:
                        data = handle.read()
                        members += 1
                        total += len(data) if member.name.endswith(".jpg") else 0
        return members // 2, mib(total)

    return [
        Contender("dataio.webdataset", via_dataio, samples),
        Contender("webdataset.WebDataset", via_package, samples),
        Contender("tarfile loop", via_tarfile, samples),
    ]


def run_wds_local(rounds: int, samples: int) -> None:
    paths = wds_shards(BENCH_DATA / f"object-io-wds-{samples}", samples)
    size = sum(p.stat().st_size for p in paths)
    print(f"webdataset, local: {len(paths)} shards, {samples * len(paths)} samples, {mib(size)}")
    contenders = wds_local_contenders(paths, samples * len(paths))
    interleave(contenders, rounds, unit="samples")
    base = {c.name: c.rate() for c in contenders}
    rows = [
        [
            "local",
            c.name,
            f"{c.rate():,.0f} samples/s",
            f"{size / median(c.seconds) / 1e6:,.0f} MB/s",
            f"{c.rate() / base['webdataset.WebDataset']:.2f}",
            f"{c.rate() / base['tarfile loop']:.2f}",
            mib(max(c.growth)),
        ]
        for c in contenders
    ]
    headers = ["case", "contender", "median", "bytes", "vs package", "vs tarfile", "RSS growth"]
    print(format_table(headers, rows))
    ratio = base["dataio.webdataset"] / base["webdataset.WebDataset"]
    print(
        f"target local WebDataset >= 2.00 x webdataset package: {ratio:.2f} -> "
        f"{'met' if ratio >= 2 else 'NOT met'}"
    )


class GetCounter:
    """Counts the bytes every ``obstore.get`` (ranged or whole) asks for, by patching it."""

    def __init__(self) -> None:
        import obstore

        self.bytes = 0
        self.requests = 0
        self._module = obstore
        self._get = obstore.get

    def __enter__(self) -> GetCounter:
        def counted(*args: Any, **kwargs: Any) -> Any:
            result = self._get(*args, **kwargs)
            start, end = result.range
            self.bytes += end - start
            self.requests += 1
            return result

        self._module.get = counted
        return self

    def __exit__(self, *exc: object) -> None:
        self._module.get = self._get


def run_wds_remote(rounds: int, samples: int, world: int = 2, *, walk: bool = True) -> None:
    """One epoch over ``WDS_SHARDS`` shards on moto at ``world`` ranks: the bytes each
    rank fetched (target ~1/world of the shards' bytes) and its time, vs reading the
    same number of bytes with ``dataio.read`` (whole objects)."""
    import obstore

    paths = wds_shards(BENCH_DATA / f"object-io-wds-{samples}", samples)
    size = sum(p.stat().st_size for p in paths)
    pipe = dataio.pipeline(
        dataio.slot("jpg").decode_bytes(), dataio.slot("cls").passthrough(), dataio.batch(BATCH)
    )
    with moto_server() as url:
        configure_dataio(url)
        store = obstore_store(url)
        for p in paths:
            obstore.put(store, f"wds/{p.name}", p.read_bytes())
        pattern = f"s3://{BUCKET}/wds/shard-{{0000..{len(paths) - 1:04d}}}.tar"
        uris = expand_braces(pattern)
        print(f"webdataset, remote (moto): {len(paths)} shards, {mib(size)}, {world} ranks")
        rows = []

        def epoch(source: Any, shard: Any, label: str) -> None:
            seconds, fetched, requests, delivered = [], 0, 0, 0
            for _ in range(rounds):
                with GetCounter() as counter:
                    started = time.perf_counter()
                    loader = pipe.bind(source).run(shard=shard)
                    delivered = sum(len(b["cls"]) for b in loader)
                    seconds.append(time.perf_counter() - started)
                fetched, requests = counter.bytes, counter.requests
            rows.append(
                [
                    label,
                    f"{delivered}",
                    mib(fetched),
                    f"{fetched / size:.3f}",
                    f"{requests}",
                    f"{median(seconds):.2f} s",
                    f"{fetched / median(seconds) / 1e6:,.0f} MB/s",
                ]
            )

        for rank in range(world if walk else 0):
            shard = {"id": rank, "of": world}
            # a fresh source walks every shard's headers first; the same source's later
            # epochs reuse that index and fetch their own byte ranges only
            fresh = [dataio.webdataset(pattern) for _ in range(rounds)]
            sources = iter(fresh)
            seconds_fresh: list[float] = []
            with GetCounter() as counter:
                for source in sources:
                    archives._KNOWN.clear()  # each rank's first epoch: as a new process
                    started = time.perf_counter()
                    delivered = sum(len(b["cls"]) for b in pipe.bind(source).run(shard=shard))
                    seconds_fresh.append(time.perf_counter() - started)
            fetched = counter.bytes // rounds
            rows.append(
                [
                    f"rank {rank}/{world}, first epoch (header walk)",
                    f"{delivered}",
                    mib(fetched),
                    f"{fetched / size:.3f}",
                    f"{counter.requests // rounds}",
                    f"{median(seconds_fresh):.2f} s",
                    f"{fetched / median(seconds_fresh) / 1e6:,.0f} MB/s",
                ]
            )
            epoch(fresh[0], shard, f"rank {rank}/{world}, later epochs")
        epoch(dataio.webdataset(pattern), None, "unsharded epoch (1 rank)")
        # the raw verbs on the same bytes: whole shards read with dataio.read
        share = uris[: len(uris) // world]
        raw = []
        for _ in range(rounds):
            started = time.perf_counter()
            got = sum(len(dataio.read(u)) for u in share)
            raw.append(time.perf_counter() - started)
        read_rate = got / median(raw)
        rows.append(
            [
                "dataio.read, 1/world of the shards",
                "-",
                mib(got),
                f"{got / size:.3f}",
                f"{len(share)}",
                f"{median(raw):.2f} s",
                f"{read_rate / 1e6:,.0f} MB/s",
            ]
        )
        rows += wds_indexed_rows(pattern, pipe, size, rounds, world, read_rate)
    headers = ["pass", "samples", "fetched", "share", "requests", "median", "rate", "vs read"]
    print(format_table(headers, [r + [""] * (len(headers) - len(r)) for r in rows]))
    print(
        f"samples per epoch {samples * len(paths)}; share = fetched / all shards' bytes "
        f"(target ~{1 / world:.2f}); medians over {rounds} rounds"
    )


def wds_indexed_rows(
    pattern: str, pipe: Any, size: int, rounds: int, world: int, read_rate: float
) -> list[list[str]]:
    """Rows for a shard index: writing it once, then each rank's first epoch reading it
    (a fresh source and process state: no header walk), with its rate against
    ``dataio.read``'s on the same store (``vs read``: fetched bytes per second / read's);
    and, at 3 ranks (rank 1's run starts inside a shard), the two ways to reach that
    start: streaming the shard from its start, or walking that shard's headers."""
    rows: list[list[str]] = []
    seconds: list[float] = []
    for _ in range(rounds):
        started = time.perf_counter()
        index = dataio.write_webdataset_index(pattern)
        seconds.append(time.perf_counter() - started)
    with GetCounter() as counter:
        dataio.write_webdataset_index(pattern)
    rows.append(
        [
            "write_webdataset_index (once)",
            "-",
            mib(counter.bytes),
            f"{counter.bytes / size:.3f}",
            f"{counter.requests}",
            f"{median(seconds):.2f} s",
            f"{counter.bytes / median(seconds) / 1e6:,.0f} MB/s",
        ]
    )

    def measured_row(label: str, delivered: int, counter: Any, times: list[float]) -> list[str]:
        """A table row of ``rounds`` passes: bytes and requests per pass, median time."""
        fetched = counter.bytes // rounds
        rate = fetched / median(times)
        return [
            label,
            f"{delivered}",
            mib(fetched),
            f"{fetched / size:.3f}",
            f"{counter.requests // rounds}",
            f"{median(times):.2f} s",
            f"{rate / 1e6:,.0f} MB/s",
            f"{rate / read_rate:.2f}",
        ]

    def first_epoch(rank: int, of: int, label: str) -> None:
        times: list[float] = []
        with GetCounter() as counter:
            for _ in range(rounds):
                archives._KNOWN.clear()  # as a new process
                source = dataio.webdataset(pattern, index=index)
                started = time.perf_counter()
                loader = pipe.bind(source).run(shard={"id": rank, "of": of})
                delivered = sum(len(b["cls"]) for b in loader)
                times.append(time.perf_counter() - started)
        rows.append(measured_row(label, delivered, counter, times))

    for rank in range(world):
        first_epoch(rank, world, f"rank {rank}/{world}, first epoch with index")
    for rank in range(world):  # the source alone: the remote-read path, without the pipeline
        times = []
        with GetCounter() as counter:
            for _ in range(rounds):
                source = dataio.webdataset(pattern, index=index)
                started = time.perf_counter()
                dealt = source.shard_records(rank, world, pad=True)
                assert dealt is not None
                delivered = sum(1 for _ in dealt)
                times.append(time.perf_counter() - started)
        label = f"rank {rank}/{world}, its samples read with index (no pipeline)"
        rows.append(measured_row(label, delivered, counter, times))
    for how in ("stream", "walk"):
        archives._SKIP_BY = how
        try:
            first_epoch(1, 3, f"rank 1/3, first epoch with index, start by {how}")
        finally:
            archives._SKIP_BY = "stream"
    return rows


# -- a rank's remote shards: the source vs the raw verbs on the same bytes (--wds-vs-verbs) --


def wds_vs_verbs(rounds: int, samples: int, world: int = 2) -> None:
    """Rank 0 of ``world``'s shards on moto, four ways, interleaved round by round:

    * ``dataio.read`` of each whole shard (the raw verb; one request each on loopback);
    * ``dataio.read(uri, offset=0, size=n)``: the raw verb with the source's own request
      pattern (one ranged GET per shard);
    * the source alone: ``webdataset(pattern, index=...).shard_records(rank, world)``, a
      fresh source each round (every sample parsed into a dict of bytes);
    * the same source with the C member scan turned off (``dataio.io.tar._tarscan``);
    * the same source with every span fanned out to windows (4 MiB, 8 at a time), as on
      a slow link: what the extra requests cost moto (it copies the whole object for each).

    Each row gives the median and min..max wall time over the rounds, and the median CPU
    seconds of this process and of moto (which runs on the same cores) per pass. ``vs
    read``: the median over rounds of read's time / the contender's (1.00 = as fast).
    """
    import resource

    import obstore
    import psutil

    from dataio.io import spans, tar

    paths = wds_shards(BENCH_DATA / f"object-io-wds-{samples}", samples)
    share = paths[: len(paths) // world]
    size = sum(p.stat().st_size for p in share)
    with moto_server() as url:
        configure_dataio(url)
        store = obstore_store(url)
        for p in paths:
            obstore.put(store, f"wds/{p.name}", p.read_bytes())
        pattern = f"s3://{BUCKET}/wds/shard-{{0000..{len(paths) - 1:04d}}}.tar"
        uris = expand_braces(pattern)[: len(share)]
        sizes = [p.stat().st_size for p in share]
        index = dataio.write_webdataset_index(pattern)
        moto = next(c for c in psutil.Process().children(recursive=True) if "moto" in c.name())
        print(
            f"webdataset vs verbs (moto): rank 0 of {world}, {len(share)} shards, "
            f"{len(share) * samples} samples, {mib(size)}; load before {load_average()}"
        )

        def whole() -> int:
            return sum(len(dataio.read(u)) for u in uris)

        def ranged() -> int:
            return sum(
                len(dataio.read(u, offset=0, size=n)) for u, n in zip(uris, sizes, strict=True)
            )

        def source() -> int:
            dealt = dataio.webdataset(pattern, index=index).shard_records(0, world, pad=True)
            assert dealt is not None
            return sum(1 for _ in dealt)

        def source_python() -> int:
            saved, tar._tarscan = tar._tarscan, None
            try:
                return source()
            finally:
                tar._tarscan = saved

        def source_windows() -> int:
            saved = spans._split_below, spans.WINDOW_BYTES
            spans._split_below = lambda: float("inf")
            spans.WINDOW_BYTES = 4 << 20  # shards of 23-46 MiB: 16 MiB would leave < 2 windows
            try:
                return source()
            finally:
                spans._split_below, spans.WINDOW_BYTES = saved

        contenders = {
            "dataio.read, whole shards": whole,
            "dataio.read, same ranges": ranged,
            "webdataset source, its samples": source,
            "  same, member scan in Python": source_python,
            "  same, fanned out to windows": source_windows,
        }
        wall: dict[str, list[float]] = {k: [] for k in contenders}
        cpu: dict[str, list[float]] = {k: [] for k in contenders}
        server: dict[str, list[float]] = {k: [] for k in contenders}
        with GetCounter() as counter:
            for name, run in contenders.items():  # warm-up, and the request counts
                before = counter.requests
                run()
                print(f"  {name}: {counter.requests - before} GETs per pass")
        for r in range(rounds):
            names = list(contenders)
            names = names[r % len(names) :] + names[: r % len(names)]
            for name in names:
                usage, served = resource.getrusage(resource.RUSAGE_SELF), moto.cpu_times()
                started = time.perf_counter()
                contenders[name]()
                wall[name].append(time.perf_counter() - started)
                after, done = resource.getrusage(resource.RUSAGE_SELF), moto.cpu_times()
                cpu[name].append(after.ru_utime - usage.ru_utime + after.ru_stime - usage.ru_stime)
                server[name].append(done.user - served.user + done.system - served.system)
        base = wall["dataio.read, whole shards"]
        rows = []
        for name in contenders:
            times = wall[name]
            paired = median([b / t for b, t in zip(base, times, strict=True)])
            rows.append(
                [
                    name,
                    f"{median(times):.3f} s",
                    f"{min(times):.3f}..{max(times):.3f}",
                    f"{size / median(times) / 1e6:,.0f} MB/s",
                    f"{median(cpu[name]):.3f} s",
                    f"{median(server[name]):.3f} s",
                    f"{paired:.2f}",
                ]
            )
        headers = ["contender", "median", "min..max", "rate", "our CPU", "moto CPU", "vs read"]
        print(format_table(headers, rows))
        ratio = median(
            [b / t for b, t in zip(base, wall["webdataset source, its samples"], strict=True)]
        )
        print(
            f"{rounds} rounds, interleaved; load after {load_average()}\n"
            f"target remote WebDataset source within 10% of the raw verbs on the same bytes: "
            f"{ratio:.2f} -> {'met' if ratio >= 0.9 else 'NOT met'}"
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--large-mib", type=int, default=256)
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=16, help="boto3 thread pool size")
    parser.add_argument(
        "--tfrecord-mib", type=int, default=256, help="TFRecord file size (0: skip the case)"
    )
    parser.add_argument("--tfrecord-only", action="store_true", help="run the tfrecord case alone")
    parser.add_argument(
        "--safetensors-subset",
        action="store_true",
        help="run only the remote safetensors one-tensor subset case",
    )
    parser.add_argument("--safetensors-mib", type=int, default=1024)
    parser.add_argument(
        "--webdataset-local",
        action="store_true",
        help="only: local WebDataset shards, dataio vs the webdataset package",
    )
    parser.add_argument(
        "--webdataset-remote",
        action="store_true",
        help="only: a remote WebDataset epoch over 8 shards at 2 ranks (bytes per rank)",
    )
    parser.add_argument("--wds-samples", type=int, default=2000, help="samples per shard")
    parser.add_argument(
        "--wds-vs-verbs",
        action="store_true",
        help="only: a rank's remote shards through the source vs the raw verbs (moto)",
    )
    parser.add_argument(
        "--wds-no-walk",
        action="store_true",
        help="--webdataset-remote without the header-walk rows (slow on moto at 2000 samples)",
    )
    args = parser.parse_args(argv)
    if args.wds_vs_verbs:
        for line in machine_lines(PACKAGES):
            print(line)
        wds_vs_verbs(args.rounds, args.wds_samples)
        return
    if args.webdataset_local or args.webdataset_remote:
        for line in machine_lines(("webdataset", *PACKAGES)):
            print(line)
        if args.webdataset_local:
            run_wds_local(args.rounds, args.wds_samples)
        if args.webdataset_remote:
            run_wds_remote(args.rounds, args.wds_samples, walk=not args.wds_no_walk)
        return
    large_bytes = args.large_mib << 20
    if args.tfrecord_only:
        for line in machine_lines(PACKAGES):
            print(line)
        report_checks(tfrecord_case(args.tfrecord_mib or 256, args.rounds))
        return

    for line in machine_lines(PACKAGES):
        print(line)
    if args.safetensors_subset:
        with moto_server() as url:
            configure_dataio(url)
            safetensors_subset(url, args.safetensors_mib << 20, args.rounds)
        return
    files = small_files(args.objects)
    sizes = [p.stat().st_size for p in files]
    print(
        f"data:     1 object of {mib(large_bytes)}; {len(files)} JPEGs of "
        f"{min(sizes) >> 10}-{max(sizes) >> 10} KiB (median {median(sizes) / 1024:.0f} KiB); "
        f"dataio pool {cpu_workers()} threads, boto3 pool {args.threads} threads"
    )
    with moto_server() as url:
        configure_dataio(url)
        large_key, keys = upload(obstore_store(url), large_bytes, files)
        print("large object:", flush=True)
        large = large_contenders(url, large_key, large_bytes, args.threads)
        interleave(large, args.rounds, unit="bytes")
        print("small objects:", flush=True)
        small = small_contenders(url, keys, args.threads)
        interleave(small, args.rounds, unit="objects")

    def mbps(rate: float) -> str:
        return f"{rate / 1e6:,.0f} MB/s"

    def ops(rate: float) -> str:
        return f"{rate:,.0f} obj/s"

    rows = rows_for("large", large, mbps) + rows_for("small", small, ops)
    headers = ["case", "contender", "median", "vs obstore", "vs boto3", "RSS growth", "output"]
    print()
    print(format_table(headers, rows))
    print(f"medians over {args.rounds} rounds; RSS growth: peak minus RSS at the pass start")
    print(f"load average after: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    by_name = {c.name: c for c in (*large, *small)}

    def ratio(ours: str, theirs: str) -> float:
        return by_name[ours].rate() / by_name[theirs].rate()

    obstore_name, boto3_name = "obstore get().bytes()", "boto3 get_object"
    checks = [
        (
            "large: dataio read_buffer >= 0.90 x obstore .bytes()",
            ratio("dataio.read_buffer unsplit", obstore_name),
            TARGET_VS_OBSTORE,
        ),
        ("large: dataio.read (default) > boto3", ratio("dataio.read", boto3_name), TARGET_VS_BOTO3),
        (
            "large: dataio.read unsplit > boto3",
            ratio("dataio.read unsplit", boto3_name),
            TARGET_VS_BOTO3,
        ),
        ("small: dataio > boto3", small[0].rate() / small[1].rate(), TARGET_VS_BOTO3),
    ]
    if args.tfrecord_mib > 0:
        checks += tfrecord_case(args.tfrecord_mib, args.rounds)
    report_checks(checks)


def report_checks(checks: Sequence[tuple[str, float, float]]) -> None:
    for label, ratio, target in checks:
        verdict = "met" if ratio >= target else "NOT met"
        print(f"target {label}: {ratio:.2f} -> {verdict}")


if __name__ == "__main__":
    main()
