"""Direct IO on any URI: verbs, a streamed body, explicit materialization, archives.

Runs on ``file://`` URIs in a temporary folder so it needs no server; the same calls take
``s3://``, ``gs://``, ``az://``, ``http(s)://`` and ``hf://`` URIs once the scheme is
configured (``dataio.configure_credentials`` / ``configure_endpoint``).
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import tempfile
from pathlib import Path

import numpy as np

import dataio


def tar_gz(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return gzip.compress(buffer.getvalue())


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder).as_uri()

        # whole objects in, ETags out; ranges; listings
        lines = [json.dumps({"step": i, "loss": 1.0 / (i + 1)}) for i in range(5)]
        etag = dataio.write(f"{base}/logs/events.jsonl", "\n".join(lines).encode() + b"\n")
        print("wrote events.jsonl, etag", etag)
        print("head:", dataio.head(f"{base}/logs/events.jsonl")["size"], "bytes")
        print("first 12 bytes:", dataio.read(f"{base}/logs/events.jsonl", offset=0, size=12))

        # a body read on demand, one cursor for bytes and lines
        with dataio.stream(f"{base}/logs/events.jsonl") as body:
            first = body.read(1)
            rest = list(body.iter_lines())
        print("streamed:", len(rest), "lines after", first)
        assert json.loads(first.decode() + rest[0])["step"] == 0

        # explicit materialization into values
        np.save(buf := io.BytesIO(), np.arange(12, dtype=np.float32).reshape(3, 4))
        dataio.write(f"{base}/arrays/x.npy", buf.getvalue())
        array = dataio.read(f"{base}/arrays/x.npy", format="npy")
        events = dataio.read(f"{base}/logs/events.jsonl", format="jsonl")
        print("npy:", array.shape, array.dtype, "| jsonl:", len(events), "records")

        # one member of a compressed archive, decompressed as the body streams in
        dataio.write(f"{base}/shards/0000.tar.gz", tar_gz({"0001.txt": b"hello", "2.txt": b"x"}))
        member = dataio.reader(f"{base}/shards/0000.tar.gz").gunzip().tar_entry("0001.txt")
        print("tar entry:", member.read_all())

        # a caller-owned buffer for large eager reads
        buffer = bytearray(dataio.head(f"{base}/arrays/x.npy")["size"])
        n = dataio.fetch_into(f"{base}/arrays/x.npy", buffer)
        print("fetch_into:", n, "bytes")

        print("ls:", [uri.removeprefix(base) for uri in dataio.ls(f"{base}/")])
        print("glob:", [uri.removeprefix(base) for uri in dataio.glob(f"{base}/**/*.np?")])
        dataio.delete(f"{base}/logs/events.jsonl")
        print("exists after delete:", dataio.exists(f"{base}/logs/events.jsonl"))


if __name__ == "__main__":
    main()
