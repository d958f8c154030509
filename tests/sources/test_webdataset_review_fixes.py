"""WebDataset/tar defects found in review: each test builds the damaged or hostile shard
it needs and checks the sharded pass against the unsharded one (the oracle: what
:mod:`tarfile` wrote, read in order).
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from dataio.exceptions import FormatError
from dataio.sources.archives import _Archive, _walk_index, webdataset


def tar_bytes(keys: list[str], *, ext: str = "cls") -> bytes:
    """A ustar archive of one one-byte member per key."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for k in keys:
            info = tarfile.TarInfo(f"{k}.{ext}")
            info.size = 1
            t.addfile(info, io.BytesIO(b"1"))
    return buf.getvalue()


def key(sample: object) -> str:
    try:
        return sample["__key__"]  # type: ignore[index]
    except FormatError:
        return "<error>"


def rank_keys(pattern: str, rank: int, world: int, **options: object) -> list[tuple[int, str]]:
    records = webdataset(pattern, **options).shard_records(rank, world, pad=False)  # type: ignore[arg-type]
    assert records is not None
    return [(at, key(r)) for at, r in records]


# -- 1: a cut inside a member's padding ----------------------------------------------------


def test_a_cut_in_the_last_members_padding_is_a_truncated_shard(tmp_path: Path) -> None:
    raw = tar_bytes(["a", "b", "c", "d"])
    # d.cls: header at 3072, its one byte at 3584, padding to 4096: cut after 100 bytes
    cut = raw[: 3 * 1024 + 512 + 100]
    assert cut[3584:] == b"1" + bytes(99) and len(raw) > 4096  # d's byte kept, padding cut
    path = tmp_path / "s-0.tar"
    path.write_bytes(cut)
    index = _walk_index(_Archive(str(path)))
    assert isinstance(index.error, FormatError) and "cut short" in str(index.error)
    unsharded = [key(r) for r in webdataset(str(path), index=False).iterate()]
    assert unsharded[:2] == ["a", "b"] and unsharded[2].endswith(":<unreadable>")
    dealt = sorted(p for rank in range(2) for p in rank_keys(str(path), rank, 2, index=False))
    assert dealt == [(0, "a"), (1, "b")]  # 3 // 2 each, as a round robin of the stream
