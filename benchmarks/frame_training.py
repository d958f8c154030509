"""Training from a frame: JPEGs in a parquet column vs the same files vs a DataLoader vs SQL.

Photo-like JPEGs (sides 400..500 px, about ImageNet's) are stored once as files and once
as a ``binary`` column (with an int64 label and a string key) in a parquet file written by
pyarrow in row groups of 256 rows. Every contender makes one pass ("epoch") over all of
them with the ImageNet evaluation chain (decode RGB, resize_short(256), center_crop
224x224, normalize("imagenet") -> float32 CHW), batch 64. Contenders alternate round by
round, so a noisy neighbour slows all of them alike; the table gives median images/s.
Run from the repository root::

    .venv/bin/python benchmarks/frame_training.py [--images N] [--rounds R] [--quick]
        [--no-profile]

Contenders (the same worker count, the usable cores, for all):

* ``dataio parquet frame``: ``pipe.bind(dataio.scan_parquet(path)).run("torch")``;
* ``dataio files``: the same pipeline over the same images as JPEG files (records
  ``{"jpeg": path, "label": n}``);
* ``DataLoader``: ``torch.utils.data.DataLoader(num_workers=cores, persistent_workers=True)``
  over a map-style Dataset holding the parquet read once with pyarrow; ``__getitem__``
  decodes with Pillow and resizes, crops and normalizes as a typical user would: with
  torchvision's transforms v2 when torchvision is installed, else Pillow + NumPy;
* ``expr with_columns``: the SQL/expression form, ``scan_parquet(path).with_columns(
  x=Expr("chain", col("jpeg"), ops))`` streamed through ``collect_arrow_reader()``
  (``collect_arrow()`` runs the same plan but would hold every tensor: 2,000 images are
  1.2 GB of float32); the column should be a ``fixed_shape_tensor``.

A contender this dataio refuses is reported as ``unsupported: <error>`` and left out.
Targets (issue #14): frame >= 0.95x files, frame >= 2.5x the DataLoader, expression form
>= 0.8x the frame loader. Then a cProfile of one pass of each dataio contender. Nothing
here asserts on timings.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from _common import (
    BENCH_DATA,
    Contender,
    interleave,
    load_average,
    machine_lines,
    median,
    mib,
    probe,
    profile_pass,
    target_line,
    usable_cores,
)
from _common import format_table as table_text
from PIL import Image

import dataio
from dataio.testing import make_jpegs

BATCH = 64
PREFETCH = 4
RESIZE = 256
CROP = 224
# torchvision's documented ImageNet statistics, typed in independently of dataio's preset.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
SIDES = (400, 500)
SEED = 14
CLASSES = 1000
ROW_GROUP = 256
VERIFY_IMAGES = 8
# issue #14's targets
TARGET_VS_FILES = 0.95
TARGET_VS_DATALOADER = 2.5
TARGET_EXPR_VS_FRAME = 0.8
FRAME = "dataio parquet frame"
FILES = "dataio files"
LOADER = "DataLoader"
EXPR = "expr with_columns"
PACKAGES = ("numpy", "pyarrow", "datafusion", "pillow", "simplejpeg", "torch", "torchvision")
RSS_NOTE = (
    "peak RSS: sampled every 20 ms during a pass, max over rounds; the DataLoader's sums its "
    "worker processes (shared pages count once per process). RSS growth: peak minus RSS at "
    "the pass start. Ratios compare medians."
)


# -- data ------------------------------------------------------------------------------


def make_files(count: int) -> list[Path]:
    """The first ``count`` JPEGs, generated once into the benchmark data folder."""
    low, high = SIDES
    root = BENCH_DATA / f"frame-training-{low}-{high}"
    return make_jpegs(root, count, min_side=low, max_side=high, seed=SEED)


def labels(count: int) -> list[int]:
    """The images' labels."""
    return [i % CLASSES for i in range(count)]


def write_parquet(paths: Sequence[Path], name: str) -> Path:
    """``key`` (string), ``jpeg`` (binary) and ``label`` (int64) of ``paths``, written once."""
    path = paths[0].parent / f"{name}-{len(paths)}-rg{ROW_GROUP}.parquet"
    if not path.exists():
        table = pa.table(
            {
                "key": pa.array([p.stem for p in paths], pa.string()),
                "jpeg": pa.array([p.read_bytes() for p in paths], pa.binary()),
                "label": pa.array(labels(len(paths)), pa.int64()),
            }
        )
        partial = path.with_suffix(".partial")
        pq.write_table(table, partial, row_group_size=ROW_GROUP)
        partial.replace(path)
    return path


# -- dataio ----------------------------------------------------------------------------


def pipeline(*, batch: int = BATCH) -> dataio.Pipeline:
    """The ImageNet evaluation chain on slot ``jpeg`` and the label passed through."""
    image = dataio.slot("jpeg").decode_image(mode="rgb").resize_short(RESIZE)
    image = image.center_crop(h=CROP, w=CROP).normalize("imagenet")
    return dataio.pipeline(
        image, dataio.slot("label").passthrough(), dataio.batch(batch, prefetch=PREFETCH)
    )


def file_records(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """The files as records for the same pipeline."""
    return [{"jpeg": str(p), "label": n} for p, n in zip(paths, labels(len(paths)), strict=True)]


def describe_tensor(tensor: Any) -> str:
    """``dtype (shape)`` of a batch tensor, dtype without the ``torch.`` prefix."""
    return f"{str(tensor.dtype).removeprefix('torch.')} {tuple(tensor.shape)}"


def run_loader(loader: Any, image: str = "jpeg") -> tuple[int, str]:
    """One pass (epoch) of a loader yielding batches of images; returns (images, output)."""
    count, output = 0, ""
    for batch in loader:
        images = batch[0] if isinstance(batch, list | tuple) else batch[image]
        count += images.shape[0]
        output = output or describe_tensor(images)
    return count, output


def chain_expr() -> Any:
    """The chain as a column expression, exactly the ops a slot chain holds."""
    from dataio import Expr

    ops = (
        dataio.decoders.image(),
        dataio.transforms.resize_short(RESIZE),
        dataio.transforms.center_crop(h=CROP, w=CROP),
        dataio.transforms.normalize("imagenet"),
    )
    return Expr("chain", dataio.col("jpeg"), ops)


def expr_batches(path: Path) -> Iterator[pa.RecordBatch]:
    """The expression form's record batches, streamed."""
    frame = dataio.scan_parquet(path).with_columns(x=chain_expr())
    reader = frame.collect_arrow_reader()
    yield from reader


def run_expr(path: Path) -> tuple[int, str]:
    """One pass of the expression form; returns (rows, the ``x`` column's type)."""
    count, output = 0, ""
    for batch in expr_batches(path):
        count += batch.num_rows
        output = output or str(batch.schema.field("x").type)
    return count, output


def tensor_values(column: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
    """A ``fixed_shape_tensor`` column as one NumPy array (rows first), else ``None``."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not hasattr(column, "to_numpy_ndarray"):
        return None
    return np.asarray(column.to_numpy_ndarray())


# -- the DataLoader reference ----------------------------------------------------------


def import_torchvision_v2() -> Any:
    """torchvision's transforms v2 module, or ``None`` when torchvision is not installed."""
    try:
        from torchvision.transforms import v2
    except Exception:  # an install broken in any way counts as missing
        return None
    return v2


def numpy_transform(image: Image.Image) -> np.ndarray:
    """Resize(256), CenterCrop(224), ToTensor, Normalize written with Pillow + NumPy."""
    width, height = image.size
    scale = RESIZE / min(width, height)
    size = (RESIZE, int(height * scale)) if width <= height else (int(width * scale), RESIZE)
    image = image.resize(size, Image.Resampling.BILINEAR)
    left, top = round((size[0] - CROP) / 2.0), round((size[1] - CROP) / 2.0)
    image = image.crop((left, top, left + CROP, top + CROP))
    pixels = np.asarray(image, np.float32) / 255.0
    pixels = (pixels - np.asarray(MEAN, np.float32)) / np.asarray(STD, np.float32)
    return np.ascontiguousarray(pixels.transpose(2, 0, 1))


class ParquetImages(torch.utils.data.Dataset):
    """A map-style Dataset over the parquet file, read once into a pyarrow table."""

    def __init__(self, path: Path) -> None:
        self.table = pq.read_table(path, columns=["jpeg", "label"])
        v2 = import_torchvision_v2()
        self.transform: Callable[[Image.Image], Any] = numpy_transform
        if v2 is not None:
            self.transform = v2.Compose(
                [
                    v2.ToImage(),
                    v2.Resize(RESIZE, antialias=True),
                    v2.CenterCrop(CROP),
                    v2.ToDtype(torch.float32, scale=True),
                    v2.Normalize(MEAN, STD),
                ]
            )

    def __len__(self) -> int:
        return self.table.num_rows

    def __getitem__(self, index: int) -> tuple[Any, int]:
        data = self.table["jpeg"][index].as_py()
        image = Image.open(io.BytesIO(data)).convert("RGB")
        return self.transform(image), self.table["label"][index].as_py()


def transform_name() -> str:
    """Which transform the DataLoader's Dataset uses."""
    return "torchvision v2" if import_torchvision_v2() else "Pillow + NumPy"


# -- measurement -------------------------------------------------------------------------


def contenders(
    paths: Sequence[Path], parquet: Path, workers: int, stack: contextlib.ExitStack
) -> list[Contender]:
    """The contenders the current dataio runs, the frame loader first."""
    n = len(paths)
    frame = stack.enter_context(pipeline().bind(dataio.scan_parquet(parquet)).run("torch"))
    files = stack.enter_context(pipeline().bind(file_records(paths)).run("torch"))
    loader = torch.utils.data.DataLoader(
        ParquetImages(parquet), batch_size=BATCH, num_workers=workers, persistent_workers=True
    )
    found = [
        Contender(FRAME, lambda: run_loader(frame), n),
        Contender(FILES, lambda: run_loader(files), n),
        Contender(f"{LOADER} ({transform_name()})", lambda: run_loader(loader), n, children=True),
    ]
    return found


def verify(paths: Sequence[Path], parquet: Path) -> bool:
    """Compare the contenders' images on a few files (printed); returns whether the
    expression form runs here."""
    n = len(paths)
    with pipeline(batch=n).bind(dataio.scan_parquet(parquet)).run("numpy") as it:
        ours = next(iter(it))
    with pipeline(batch=n).bind(file_records(paths)).run("numpy") as it:
        files = next(iter(it))
    same = np.array_equal(ours["jpeg"], files["jpeg"]) and list(ours["label"]) == labels(n)
    if not same or list(files["label"]) != labels(n):
        raise RuntimeError("the frame and the files delivered other images or labels")
    print(f"checked: frame and files deliver identical tensors and labels ({n} images)")
    dataset = ParquetImages(parquet)
    reference = np.stack([np.asarray(dataset[i][0], np.float32) for i in range(n)])
    print(f"{LOADER} ({transform_name()}) vs frame: " + closeness(ours["jpeg"], reference))
    got: list[pa.ChunkedArray] = []

    def expression() -> None:
        batches = list(expr_batches(parquet))
        got.append(pa.chunked_array([b.column("x") for b in batches]))

    failed = probe(EXPR, expression)
    if failed is None:
        values = tensor_values(got[0])
        if values is None:
            print(f"{EXPR}: the column is {got[0].type}, not a fixed_shape_tensor; not compared")
        else:
            values = values.reshape(ours["jpeg"].shape)
            print(f"{EXPR} vs frame: " + closeness(ours["jpeg"], values))
    return failed is None


def closeness(ours: np.ndarray, other: np.ndarray) -> str:
    """Max abs difference and PSNR (in [0, 1] pixel units) of two normalized batches."""
    std = np.asarray(STD, np.float64)[:, None, None]
    diff = ours.astype(np.float64) - other.astype(np.float64)
    psnrs = []
    for error in diff:
        mse = float(np.mean((error * std) ** 2))
        psnrs.append(math.inf if mse == 0 else 10 * math.log10(1.0 / mse))
    return (
        f"max abs diff {float(np.abs(diff).max()):.4f} (normalized units), PSNR min "
        f"{min(psnrs):.1f} dB, median {median(psnrs):.1f} dB"
    )


def result_table(found: Sequence[Contender]) -> str:
    """Images/s, spread, ratio to the frame loader, memory and output per contender."""
    base = found[0].rate()
    rows = []
    for c in found:
        rate = c.rate()
        rows.append(
            [
                c.name,
                f"{rate:.0f}",
                f"{c.expected / max(c.seconds):.0f}..{c.expected / min(c.seconds):.0f}",
                f"{rate / base:.2f}x",
                mib(max(c.peaks)),
                mib(max(c.growth)),
                c.output,
            ]
        )
    headers = ["contender", "img/s", "min..max", f"vs {FRAME}", "peak RSS", "RSS growth", "output"]
    return table_text(headers, rows)


def targets(found: Sequence[Contender]) -> list[str]:
    """Issue #14's targets, met or not."""
    by_name = {c.name.split(" (")[0]: c for c in found}
    frame, expr = by_name.get(FRAME), by_name.get(EXPR)
    return [
        target_line(frame, by_name.get(FILES), TARGET_VS_FILES, f"{FRAME} vs {FILES}"),
        target_line(frame, by_name.get(LOADER), TARGET_VS_DATALOADER, f"{FRAME} vs {LOADER}"),
        target_line(expr, frame, TARGET_EXPR_VS_FRAME, f"{EXPR} vs {FRAME}"),
    ]


def profile(found: Sequence[Contender]) -> None:
    """One cProfile pass of each dataio contender (the loader reused, as in the rounds)."""
    for c in found:
        if c.name.startswith(LOADER):
            continue
        profile_pass(c.name, c.run, batch=BATCH, top=16)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options; ``--quick`` shrinks the defaults for a smoke run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, help="images (default 2,000, quick 128)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 5, quick 1)")
    parser.add_argument("--quick", action="store_true", help="a smoke run in under a minute")
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile passes")
    args = parser.parse_args(argv)
    args.images = args.images or (128 if args.quick else 2000)
    args.rounds = args.rounds or (1 if args.quick else 5)
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Print the machine, the checks, the table, the targets and where the time goes."""
    args = parse_args(argv)
    workers = usable_cores()
    print("\n".join(machine_lines(PACKAGES)))
    print(
        f"images: {args.images}; rounds: {args.rounds}; batch {BATCH}; DataLoader "
        f"num_workers={workers} ({transform_name()}); dataio pool as above"
    )
    if args.quick:
        print("--quick: a smoke run; passes are short, so the numbers are not the result")
    start = time.perf_counter()
    paths = make_files(args.images)
    parquet = write_parquet(paths, "images")
    check = write_parquet(paths[: min(VERIFY_IMAGES, len(paths))], "verify")
    print(
        f"\n== {len(paths)} JPEGs, sides {SIDES[0]}..{SIDES[1]}, "
        f"{sum(p.stat().st_size for p in paths) / 1e6:.1f} MB as files; parquet "
        f"{parquet.stat().st_size / 1e6:.1f} MB, row groups of {ROW_GROUP} "
        f"(ready in {time.perf_counter() - start:.1f} s: {parquet}) ==",
        flush=True,
    )
    expr_runs = verify(paths[: min(VERIFY_IMAGES, len(paths))], check)
    with contextlib.ExitStack() as stack:
        found = contenders(paths, parquet, workers, stack)
        if expr_runs:
            found.append(Contender(EXPR, lambda: run_expr(parquet), len(paths)))
        interleave(found, args.rounds, unit="images")
        print(f"\nmedian of {args.rounds} rounds, batch {BATCH}, {workers} workers each:")
        print(result_table(found))
        print(RSS_NOTE)
        print("targets (issue #14), on the medians:")
        print("\n".join(targets(found)))
        print(f"load average after the rounds: {load_average()}", flush=True)
        if not args.no_profile:
            print("\n== where dataio's time goes ==")
            profile(found)
    print(f"\nload average at the end: {load_average()}")


if __name__ == "__main__":
    main()
