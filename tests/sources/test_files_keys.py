"""``files()`` keys are paths relative to the glob's root, so equal names never collide."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

import dataio


def _jpeg(path: Path, value: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((8, 8, 3), value, np.uint8)).save(path, "JPEG", quality=95)


def test_same_file_name_in_two_folders_gets_two_keys(tmp_path: Path) -> None:
    _jpeg(tmp_path / "cat" / "001.jpg", 10)
    _jpeg(tmp_path / "dog" / "001.jpg", 240)
    rows = list(dataio.files(tmp_path / "**" / "*.jpg"))
    assert [r["key"] for r in rows] == ["cat/001", "dog/001"]
    assert [Path(r["path"]).relative_to(tmp_path).as_posix() for r in rows] == [
        "cat/001.jpg",
        "dog/001.jpg",
    ]
    plan = dataio.pipeline(
        dataio.slot("image", field="path").decode_image(),
        dataio.slot("key").passthrough(),
        dataio.batch(2),
    )
    (batch,) = list(plan.bind(dataio.files(f"{tmp_path}/*/*.jpg")).run())
    assert batch["key"] == ["cat/001", "dog/001"]
    # the decoded pixels belong to the file the key names (cat is dark, dog is light)
    assert batch["image"][0].mean() < 50 < 200 < batch["image"][1].mean()


def test_keys_are_relative_to_the_first_wildcard_and_posix(tmp_path: Path) -> None:
    _jpeg(tmp_path / "train" / "a" / "b" / "x.1.jpg", 0)
    _jpeg(tmp_path / "train" / "top.jpg", 0)
    keys = [r["key"] for r in dataio.files(tmp_path / "train" / "**" / "*.jpg")]
    assert keys == ["a/b/x", "top"]
    # a pattern without wildcards in its folders is rooted at its own folder
    only = list(dataio.files(tmp_path / "train" / "top.jpg"))
    assert [r["key"] for r in only] == ["top"]
    # wildcards in a folder: the key keeps the folders below the fixed prefix
    keys = [r["key"] for r in dataio.files(tmp_path / "tr*" / "a" / "b" / "*.jpg")]
    assert keys == ["train/a/b/x"]
