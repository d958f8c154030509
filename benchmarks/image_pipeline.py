"""Image loading side by side: dataio vs a torch DataLoader vs the decode-only ceilings.

Every contender makes one pass ("epoch") over the same photo-like JPEGs. Contenders
alternate round by round, so a noisy neighbour slows all of them alike; the table gives
the median images/s over the rounds. Run from the repository root::

    .venv/bin/python benchmarks/image_pipeline.py [--images N] [--rounds R] [--quick]

Contenders, all with the same worker count (the usable cores):

* ``dataio float32``: decode, resize_short(256), center_crop(224), normalize("imagenet");
* ``dataio uint8 CHW``: the same chain without normalize, delivered as uint8 CHW;
* ``DataLoader``: torch's DataLoader with worker processes over a Pillow Dataset doing
  what torchvision's Resize(256), CenterCrop(224), ToTensor, Normalize do (written
  out by hand: torchvision is not installed here), persistent workers;
* ``decode full``: simplejpeg full-size decode of each file on a thread pool, no transforms;
* ``decode draft``: simplejpeg decode at the DCT scale dataio's kernel picks (gap 2);
* ``dataio float32 stats off``: ``dataio float32`` run with ``stats=False`` (and
  ``progress=False`` where ``run()`` has that option): the cost of the loader's stage
  clocks and lineage (and progress bar) is the ratio of the two, printed per round
  (target >= 0.98x). After the rounds, each dataio loader's ``bottleneck()`` line is
  printed. ``--stats-cost`` runs only these two, alternating. A shared machine's load
  swings a pass by far more than 2%, so the clocks' own cost is also measured where load
  cannot hide it: the same row tasks on one thread, clocks on and off, best of 30
  (``clock_cost``), set against the chain's time per image.

The ceilings decode with simplejpeg's defaults (accurate IDCT, smooth upsampling); where a
resample follows, dataio uses the fast IDCT, and fast upsampling where it shrinks 2x or
more (``ImageSpec.exact`` turns both off), as its stage table shows.

Nothing here asserts on timings; the targets are printed as met or not met.
"""

from __future__ import annotations

import argparse
import inspect
import math
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import BENCH_DATA, PeakRss, format_table, machine_lines, median, mib, usable_cores
from PIL import Image

import dataio
from dataio.engine.executor import BatchJob, Executor
from dataio.engine.lower import image_spec as lower_image_spec
from dataio.engine.lower import lower
from dataio.engine.stats import PassStats
from dataio.testing import make_jpegs
from dataio.udfs._resample import resample_into
from dataio.udfs.image import (
    FAST_UPSAMPLE_SHRINK,
    ImageSpec,
    _dct_scale,
    _decode_jpeg_region,
    _decode_jpeg_scaled,
    _decode_region,
    _jpeg_header,
    _shrink,
    plan_geometry,
    region_decoder,
    run_chain,
)

REGION_DECODER = "libjpeg-turbo" if region_decoder() else "simplejpeg, whole image"
BATCH = 64
PREFETCH = 4
RESIZE = 256
CROP = 224
# torchvision's documented ImageNet statistics, typed in independently of dataio's preset.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
# name -> (min side, max side, seed); ImageNet's typical image is about 500x375.
PROFILES = {"imagenet-like": (300, 640, 1), "photo": (800, 2400, 2)}
TARGET_VS_DATALOADER = 2.5
TARGET_VS_CEILING = 0.85
TARGET_STATS_ON_VS_OFF = 0.98
# progress bars exist where run() has the option (issue #17); measured with stats when so
HAS_PROGRESS = "progress" in inspect.signature(dataio.BoundPipeline.run).parameters
VERIFY_IMAGES = 8
STAGE_IMAGES = 48
PACKAGES = ("numpy", "pillow", "simplejpeg", "torch", "psutil")
RSS_NOTE = (
    "peak RSS: sampled every 20 ms during a pass, max over rounds; the DataLoader's sums its "
    "worker processes (shared pages count once per process). RSS growth: peak minus RSS at "
    "the pass start. Ratios compare medians."
)


# -- data ------------------------------------------------------------------------------


def dataset(profile: str, count: int) -> list[Path]:
    """The first ``count`` JPEGs of a profile, generated once into ``.bench-data/``."""
    low, high, seed = PROFILES[profile]
    return make_jpegs(BENCH_DATA / profile, count, min_side=low, max_side=high, seed=seed)


# -- dataio ----------------------------------------------------------------------------


def dataio_pipeline(*, normalize: bool, batch: int = BATCH) -> dataio.Pipeline:
    """The benchmarked chain: float32 normalized CHW, or uint8 CHW without normalize."""
    chain = dataio.slot("image").decode_image(mode="rgb").resize_short(RESIZE)
    chain = chain.center_crop(h=CROP, w=CROP)
    chain = chain.normalize("imagenet") if normalize else chain.output(layout="CHW")
    return dataio.pipeline(chain, dataio.batch(batch, prefetch=PREFETCH))


def image_spec(*, normalize: bool) -> ImageSpec:
    """The lowered kernel spec dataio runs for the benchmarked chain."""
    return lower_image_spec(dataio_pipeline(normalize=normalize).slots[0])


def describe_tensor(tensor: Any) -> str:
    """``dtype (shape)`` of a batch tensor, dtype without the ``torch.`` prefix."""
    return f"{str(tensor.dtype).removeprefix('torch.')} {tuple(tensor.shape)}"


def make_dataio(
    paths: Sequence[Path], *, normalize: bool, stats: bool = True, progress: bool = False
) -> dataio.Loader:
    """One loader kept for every pass (an epoch loop), as the DataLoader keeps its workers.

    ``stats`` turns the loader's stage clocks and lineage on or off; ``progress`` its
    progress bar (only where ``run()`` has the option), off unless asked so that a run
    in a terminal measures the same thing as a redirected one.
    """
    records = [{"image": str(p)} for p in paths]
    options: dict[str, Any] = {"stats": stats}
    if HAS_PROGRESS:
        options["progress"] = progress
    return dataio_pipeline(normalize=normalize).bind(records).run("torch", **options)


def run_dataio(loader: dataio.Loader) -> tuple[int, str]:
    """One pass (epoch) of a dataio loader with torch output; returns (images, output)."""
    count, output = 0, ""
    for batch in loader:
        images = batch["image"]
        count += images.shape[0]
        output = output or describe_tensor(images)
    return count, output


# -- the DataLoader reference ----------------------------------------------------------


def resize_short(image: Image.Image, size: int) -> Image.Image:
    """torchvision ``Resize(size)`` on a PIL image: short side to ``size``, long truncated."""
    width, height = image.size
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = size, int(size * long / short)
    new_size = (new_short, new_long) if width <= height else (new_long, new_short)
    return image.resize(new_size, Image.Resampling.BILINEAR)


def center_crop(image: Image.Image, size: int) -> Image.Image:
    """torchvision ``CenterCrop(size)`` on a PIL image."""
    width, height = image.size
    top = round((height - size) / 2.0)
    left = round((width - size) / 2.0)
    return image.crop((left, top, left + size, top + size))


def to_tensor(image: Image.Image) -> torch.Tensor:
    """torchvision ``ToTensor`` for an RGB PIL image: float32 CHW in [0, 1]."""
    pixels = torch.from_numpy(np.array(image, np.uint8, copy=True))
    pixels = pixels.view(image.size[1], image.size[0], 3).permute(2, 0, 1).contiguous()
    return pixels.to(dtype=torch.float32).div(255)


def normalize(tensor: torch.Tensor) -> torch.Tensor:
    """torchvision ``Normalize(MEAN, STD)`` (not in place)."""
    mean = torch.as_tensor(MEAN, dtype=tensor.dtype)[:, None, None]
    std = torch.as_tensor(STD, dtype=tensor.dtype)[:, None, None]
    return tensor.clone().sub_(mean).div_(std)


def load_rgb(path: Path) -> Image.Image:
    """torchvision's ``pil_loader``: open the file and convert to RGB."""
    with open(path, "rb") as f:
        return Image.open(f).convert("RGB")


class PillowImageNet(torch.utils.data.Dataset):
    """The classic torchvision ImageNet evaluation transform over a list of files."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths = list(paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        image = center_crop(resize_short(load_rgb(self.paths[index]), RESIZE), CROP)
        return normalize(to_tensor(image))


def make_dataloader(paths: Sequence[Path], workers: int) -> torch.utils.data.DataLoader:
    """A DataLoader with one worker process per usable core, kept alive across passes."""
    return torch.utils.data.DataLoader(
        PillowImageNet(paths), batch_size=BATCH, num_workers=workers, persistent_workers=True
    )


def run_dataloader(loader: torch.utils.data.DataLoader) -> tuple[int, str]:
    """One pass of the DataLoader; returns (images, output)."""
    count, output = 0, ""
    for images in loader:
        count += images.shape[0]
        output = output or describe_tensor(images)
    return count, output


# -- decode-only ceilings --------------------------------------------------------------


def decode_full(path: Path) -> tuple[int, ...]:
    """Read and decode one JPEG at full size with simplejpeg; returns the pixel shape."""
    import simplejpeg

    return simplejpeg.decode_jpeg(path.read_bytes(), colorspace="RGB").shape


def dct_scale(data: bytes, spec: ImageSpec) -> tuple[int, int, int, Any]:
    """Replicate dataio's decode choice: (width, height, DCT scale, geometry)."""
    width, height = _jpeg_header(data)
    geo = plan_geometry(spec.steps, width, height)
    return width, height, _dct_scale(geo), geo


def decode_drafted(path: Path, spec: ImageSpec) -> tuple[int, ...]:
    """Read and decode one JPEG at dataio's DCT scale, no transforms; returns the shape."""
    data = path.read_bytes()
    width, height, scale, _ = dct_scale(data, spec)
    return _decode_jpeg_scaled(data, "rgb", width, height, scale).shape


def run_decode(
    pool: ThreadPoolExecutor, paths: Sequence[Path], decode: Callable[[Path], tuple[int, ...]]
) -> tuple[int, str]:
    """Decode every file on ``pool``; returns (images, mean decoded size)."""
    shapes = list(pool.map(decode, paths))
    megapixels = sum(s[0] * s[1] for s in shapes) / len(shapes) / 1e6
    return len(shapes), f"uint8 HWC, mean {megapixels:.2f} MP"


# -- measurement -----------------------------------------------------------------------


@dataclass
class Contender:
    """One way of loading the files, and what its passes measured."""

    name: str
    run: Callable[[], tuple[int, str]]
    children: bool = False
    seconds: list[float] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)
    growth: list[int] = field(default_factory=list)
    output: str = ""

    def measure(self, expected: int, *, record: bool = True) -> None:
        """Run one pass, sampling RSS; record its time and memory unless warming up."""
        with PeakRss(children=self.children) as rss:
            start = time.perf_counter()
            count, self.output = self.run()
            elapsed = time.perf_counter() - start
        if count != expected:
            raise RuntimeError(f"{self.name} delivered {count} images, expected {expected}")
        if record:
            self.seconds.append(elapsed)
            self.peaks.append(rss.peak)
            self.growth.append(rss.peak - rss.start)

    def rate(self, images: int) -> float:
        """Median images/s over the recorded passes."""
        return images / median(self.seconds)


def interleave(contenders: Sequence[Contender], images: int, rounds: int) -> None:
    """Warm every contender up once, then run ``rounds`` rounds, rotating the order."""
    for contender in contenders:
        contender.measure(images, record=False)
    for r in range(rounds):
        shift = r % len(contenders)
        for contender in [*contenders[shift:], *contenders[:shift]]:
            contender.measure(images)
        rates = ", ".join(f"{c.name} {images / c.seconds[-1]:.0f}" for c in contenders)
        print(f"  round {r + 1}/{rounds}: {rates} images/s", flush=True)


def build_contenders(
    paths: Sequence[Path], pool: ThreadPoolExecutor, loader: Any
) -> tuple[list[Contender], dict[str, dataio.Loader]]:
    """The contenders over ``paths``, the DataLoader first, and the dataio loaders."""
    spec = image_spec(normalize=True)
    f32, u8 = make_dataio(paths, normalize=True), make_dataio(paths, normalize=False)
    float32, *quiet = _stats_contenders(paths, f32, make_dataio(paths, normalize=True, stats=False))
    contenders = [
        Contender("DataLoader (Pillow)", lambda: run_dataloader(loader), children=True),
        float32,
        Contender("dataio uint8 CHW", lambda: run_dataio(u8)),
        Contender("decode full (simplejpeg)", lambda: run_decode(pool, paths, decode_full)),
        Contender(
            "decode draft (dataio scale)",
            lambda: run_decode(pool, paths, lambda p: decode_drafted(p, spec)),
        ),
        *quiet,
    ]
    return contenders, {"dataio float32": f32, "dataio uint8 CHW": u8}


STATS_OFF = "dataio float32 stats off"
WITH_PROGRESS = "dataio float32 stats+progress"


def _stats_contenders(
    paths: Sequence[Path], on: dataio.Loader, off: dataio.Loader
) -> list[Contender]:
    """dataio float32 (stats on, progress off), with both off, and with both on."""
    contenders = [
        Contender("dataio float32", lambda: run_dataio(on)),
        Contender(STATS_OFF, lambda: run_dataio(off)),
    ]
    if HAS_PROGRESS:
        both = make_dataio(paths, normalize=True, progress=True)
        contenders.append(Contender(WITH_PROGRESS, lambda: run_dataio(both)))
    return contenders


def stats_lines(contenders: Sequence[Contender], loaders: dict[str, dataio.Loader]) -> list[str]:
    """Each dataio loader's bottleneck line (its last pass), then stats (and progress) on
    vs both off, judged on the medians, with the per-round ratios beside."""
    lines = [f"  {name}: {loader.bottleneck()}" for name, loader in loaders.items()]
    by_name = {c.name: c for c in contenders}
    off = by_name[STATS_OFF]
    checks = [("stats", by_name["dataio float32"])]
    if WITH_PROGRESS in by_name:
        checks.append(("stats + progress", by_name[WITH_PROGRESS]))
    else:
        checks[0] = ("stats (run() has no progress option yet)", checks[0][1])
    for what, on in checks:
        per_round = round_ratios(on, off)  # the two ran in the same round, under the same load
        value = median(off.seconds) / median(on.seconds)
        lines.append(
            f"  target dataio float32 {what} on vs off >= {TARGET_STATS_ON_VS_OFF:.2f}x: "
            f"{value:.3f}x -> {'MET' if value >= TARGET_STATS_ON_VS_OFF else 'NOT MET'} "
            f"(per-round ratios: median {median(per_round):.3f}x, "
            f"{min(per_round):.3f}..{max(per_round):.3f})"
        )
    return lines


def verify(paths: Sequence[Path]) -> str:
    """Compare dataio's float32 output with the DataLoader transform on a few images."""
    subset = list(paths[:VERIFY_IMAGES])
    records = [{"image": str(p)} for p in subset]
    with dataio_pipeline(normalize=True, batch=len(subset)).bind(records).run("numpy") as it:
        ours = next(iter(it))["image"]
    reference = PillowImageNet(subset)
    std = np.asarray(STD, np.float64)[:, None, None]
    worst_diff, psnrs = 0.0, []
    for i in range(len(subset)):
        ref = reference[i].numpy().astype(np.float64)
        got = ours[i].astype(np.float64)
        worst_diff = max(worst_diff, float(np.abs(got - ref).max()))
        error = (got - ref) * std  # back to [0, 1] pixel units
        mse = float(np.mean(error**2))
        psnrs.append(math.inf if mse == 0 else 10 * math.log10(1.0 / mse))
    max_levels = worst_diff * max(STD) * 255
    return (
        f"dataio float32 vs DataLoader transform on {len(subset)} images: max abs diff "
        f"{worst_diff:.4f} (normalized units, <= {max_levels:.1f} of 255 levels), "
        f"PSNR min {min(psnrs):.1f} dB, median {median(psnrs):.1f} dB"
    )


class Stopwatch:
    """Accumulate wall time per named stage."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self._last = time.perf_counter()

    def reset(self) -> None:
        """Start timing the next stage from now."""
        self._last = time.perf_counter()

    def lap(self, stage: str) -> None:
        """Charge the time since the last lap to ``stage``."""
        now = time.perf_counter()
        self.totals[stage] = self.totals.get(stage, 0.0) + now - self._last
        self._last = now


def dataio_stages(data: bytes, clock: Stopwatch, f32: ImageSpec, u8: ImageSpec) -> None:
    """Time dataio's kernel step by step (as ``_native_chain`` does)."""
    width, height, scale, geo = dct_scale(data, f32)
    clock.lap("dataio: header + plan")
    fast = not f32.exact
    upsample = fast and _shrink(geo) / scale >= FAST_UPSAMPLE_SHRINK
    pixels, (x, y) = _decode_jpeg_region(
        data,
        "rgb",
        (width, height),
        scale,
        _decode_region(geo, scale),
        fast=fast,
        fast_upsample=upsample,
    )
    clock.lap(f"dataio: decode the crop's region at DCT scale, fast modes ({REGION_DECODER})")
    left, top, right, bottom = (v / scale for v in geo.box)
    box = (
        max(left - x, 0.0),
        max(top - y, 0.0),
        min(right - x, pixels.shape[1]),
        min(bottom - y, pixels.shape[0]),
    )
    out = np.empty((3, CROP, CROP), np.float32)
    resample_into(
        pixels, pixels.shape[0], pixels.shape[1], 3, box, out, CROP, CROP, True, True,
        f32.scale.tolist(), f32.bias.tolist(), False, False,
    )  # fmt: skip
    clock.lap("dataio: C resample + normalize -> float32 CHW")
    out8 = np.empty((3, CROP, CROP), np.uint8)
    resample_into(
        pixels, pixels.shape[0], pixels.shape[1], 3, box, out8, CROP, CROP, True, False,
        None, None, False, False,
    )  # fmt: skip
    clock.lap("dataio: (uint8 variant) C resample -> uint8 CHW")
    run_chain(data, f32, None, np.empty((3, CROP, CROP), np.float32))
    clock.lap("dataio: run_chain float32, whole kernel")


def dataloader_stages(path: Path, clock: Stopwatch) -> None:
    """Time the DataLoader item transform step by step."""
    image = load_rgb(path)
    clock.lap("DataLoader: open + full decode")
    image = resize_short(image, RESIZE)
    clock.lap("DataLoader: resize short side 256")
    image = center_crop(image, CROP)
    clock.lap("DataLoader: center crop")
    tensor = to_tensor(image)
    clock.lap("DataLoader: to tensor")
    normalize(tensor)
    clock.lap("DataLoader: normalize")
    decode_full(path)
    clock.lap("(simplejpeg full decode, for scale)")


def time_one(path: Path, clock: Stopwatch, f32: ImageSpec, u8: ImageSpec) -> None:
    """Time every stage of both pipelines on one file."""
    clock.reset()
    data = path.read_bytes()
    clock.lap("dataio: read file")
    dataio_stages(data, clock, f32, u8)
    clock.reset()
    dataloader_stages(path, clock)


def stage_table(paths: Sequence[Path], workers: int) -> str:
    """Single-thread ms per image for each stage of both pipelines."""
    subset = list(paths[:STAGE_IMAGES])
    f32, u8 = image_spec(normalize=True), image_spec(normalize=False)
    clock = Stopwatch()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a DataLoader worker
    try:
        for path in subset:
            time_one(path, clock, f32, u8)
    finally:
        torch.set_num_threads(threads)
    rows = []
    for stage, total in clock.totals.items():
        ms = 1000 * total / len(subset)
        rows.append([stage, f"{ms:.2f}", f"{workers * 1000 / ms:,.0f}"])
    note = (
        f"single thread, {len(subset)} images; 'ideal' = {workers} workers / (ms per image), "
        "if that stage were the only work"
    )
    return note + "\n" + format_table(["stage", "ms/image", "ideal img/s"], rows)


# -- report ----------------------------------------------------------------------------


def ratio(a: float, b: float) -> str:
    """``a / b`` formatted as a multiple."""
    return f"{a / b:.2f}x"


def result_table(contenders: Sequence[Contender], images: int) -> str:
    """Images/s, ratios to the DataLoader and to both ceilings, memory and output."""
    by_name = {c.name: c for c in contenders}
    base = by_name["DataLoader (Pillow)"].rate(images)
    full = by_name["decode full (simplejpeg)"].rate(images)
    draft = by_name["decode draft (dataio scale)"].rate(images)
    rows = []
    for c in contenders:
        rate = c.rate(images)
        spread = f"{images / max(c.seconds):.0f}..{images / min(c.seconds):.0f}"
        rows.append(
            [
                c.name,
                f"{rate:.0f}",
                spread,
                ratio(rate, base),
                ratio(rate, full),
                ratio(rate, draft),
                mib(max(c.peaks)),
                mib(max(c.growth)),
                c.output,
            ]
        )
    headers = [
        "contender",
        "img/s",
        "min..max",
        "vs DataLoader",
        "vs decode full",
        "vs decode draft",
        "peak RSS",
        "RSS growth",
        "output",
    ]
    return format_table(headers, rows)


def round_ratios(ours: Contender, other: Contender) -> list[float]:
    """Per-round throughput ratios (the two ran in the same round, under the same load)."""
    return [b / a for a, b in zip(ours.seconds, other.seconds, strict=True)]


def target_lines(contenders: Sequence[Contender], images: int) -> list[str]:
    """State whether dataio float32 meets the project's targets, judged on the medians.

    The median of per-round ratios is printed beside it: on a shared machine it is less
    sensitive to load that comes and goes between rounds.
    """
    by_name = {c.name: c for c in contenders}
    ours = by_name["dataio float32"]
    checks = [
        ("vs DataLoader", "DataLoader (Pillow)", TARGET_VS_DATALOADER),
        ("vs decode draft ceiling", "decode draft (dataio scale)", TARGET_VS_CEILING),
        ("vs decode full ceiling", "decode full (simplejpeg)", TARGET_VS_CEILING),
    ]
    lines = []
    for label, name, goal in checks:
        value = ours.rate(images) / by_name[name].rate(images)
        per_round = round_ratios(ours, by_name[name])
        lines.append(
            f"  target dataio float32 {label} >= {goal:.2f}x: {value:.2f}x -> "
            f"{'MET' if value >= goal else 'NOT MET'} (per-round ratios: median "
            f"{median(per_round):.2f}x, {min(per_round):.2f}..{max(per_round):.2f})"
        )
    return lines


def run_profile(profile: str, count: int, rounds: int, workers: int) -> None:
    """Generate (or reuse) a profile's files, measure all contenders and print the table."""
    low, high, _ = PROFILES[profile]
    start = time.perf_counter()
    paths = dataset(profile, count)
    total_mb = sum(p.stat().st_size for p in paths) / 1e6
    print(
        f"\n== profile {profile!r}: {len(paths)} JPEGs, sides {low}..{high}, "
        f"{total_mb:.1f} MB (ready in {time.perf_counter() - start:.1f} s) ==",
        flush=True,
    )
    print(verify(paths), flush=True)
    loader = make_dataloader(paths, workers)
    with ThreadPoolExecutor(workers, thread_name_prefix="decode-ceiling") as pool:
        contenders, loaders = build_contenders(paths, pool, loader)
        interleave(contenders, len(paths), rounds)
    print(f"\nmedian of {rounds} rounds, batch {BATCH}, {workers} workers each:")
    print(result_table(contenders, len(paths)))
    print(RSS_NOTE)
    print("\n".join(target_lines(contenders, len(paths))))
    print("loader stats (the last pass of each):")
    print("\n".join(stats_lines(contenders, loaders)))
    print("\n".join(clock_cost(paths)))
    print("\nwhere the time goes, " + stage_table(paths, workers))
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"load average after the profile: {load}", flush=True)


def task_ns_per_row(
    pipe: dataio.Pipeline, records: list[dict[str, Any]], stats: bool, rows_per_task: int
) -> int:
    """Nanoseconds per row of one batch's row tasks run on this thread (no pool)."""
    kernels = lower(pipe)
    clocks = PassStats(0, 0, ["x"], ["op"], 1) if stats else None
    executor = Executor(
        iter(()), kernels, (), prefetch=1, concurrency=len(records), ordered=True, seed=0,
        epoch=0, stats=clocks,
    )  # fmt: skip
    n = len(records)
    job = BatchJob(range(n), records, kernels, n)
    job.allocate(None)
    start = time.perf_counter_ns()
    for row in range(0, n, rows_per_task):
        executor._run_rows(job, range(row, min(row + rows_per_task, n)))
    return (time.perf_counter_ns() - start) // n


def clock_cost(paths: Sequence[Path], trials: int = 30) -> list[str]:
    """What the stage clocks cost per row, measured where load cannot hide it.

    The same row tasks run on this thread with the clocks on and off, alternating, best of
    ``trials``: a near-free kernel (``decode_bytes`` of 64-byte files, read from paths
    as the image records are) shows the clocks' own cost per one-row task; the float32
    image chain's cost per image puts it in proportion.
    """
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        files = [Path(tmp) / f"{i}.bin" for i in range(64)]
        for file in files:
            file.write_bytes(bytes(64))
        cheap = dataio.pipeline(dataio.slot("x").decode_bytes(), dataio.batch(64))
        records = [{"x": str(f)} for f in files]
        best = {
            on: min(task_ns_per_row(cheap, records, on, 1) for _ in range(trials))
            for on in (False, True)
        }
    per_row = best[True] - best[False]
    chain = dataio_pipeline(normalize=True).slots[0].ops
    image = dataio.pipeline(dataio.slot("x").then(*chain), dataio.batch(16))
    records = [{"x": str(p)} for p in paths[:16]]
    image_ns = min(task_ns_per_row(image, records, False, 1) for _ in range(max(3, trials // 6)))
    lines.append(
        f"  stage clocks: {per_row:+d} ns per one-row task (decode_bytes of a path: "
        f"{best[False]} ns off, {best[True]} ns on, best of {trials}); the float32 chain "
        f"takes {image_ns / 1e6:.2f} ms per image on one thread: clocks cost "
        f"{per_row / image_ns:.3%} of it -> expected stats on vs off "
        f"{image_ns / (image_ns + max(per_row, 0)):.4f}x"
    )
    return lines


def run_stats_cost(profile: str, count: int, rounds: int) -> None:
    """Only ``dataio float32`` with stats on and off, alternating round by round."""
    paths = dataset(profile, count)
    on = make_dataio(paths, normalize=True)
    off = make_dataio(paths, normalize=True, stats=False)
    contenders = _stats_contenders(paths, on, off)
    print(f"\n== stats cost, profile {profile!r}: {len(paths)} JPEGs, {rounds} rounds ==")
    interleave(contenders, len(paths), rounds)
    for c in contenders:
        rate, best = c.rate(len(paths)), len(paths) / min(c.seconds)
        print(f"  {c.name}: median {rate:.1f} img/s, best {best:.1f} img/s")
    print("\n".join(stats_lines(contenders, {"dataio float32": on})))
    best_ratio = min(contenders[1].seconds) / min(contenders[0].seconds)
    print(f"  best pass with stats vs best pass with both off: {best_ratio:.3f}x")
    print("\n".join(clock_cost(paths)))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options; ``--quick`` shrinks the defaults for a smoke run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, help="images per profile (default 400, quick 24)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 5, quick 2)")
    parser.add_argument("--quick", action="store_true", help="a smoke run in under a minute")
    parser.add_argument(
        "--profile", choices=sorted(PROFILES), action="append", help="run only this profile"
    )
    parser.add_argument(
        "--stats-cost", action="store_true", help="only dataio with loader stats on vs off"
    )
    args = parser.parse_args(argv)
    args.images = args.images or (24 if args.quick else 400)
    args.rounds = args.rounds or (2 if args.quick else 5)
    args.profile = args.profile or list(PROFILES)
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Print the machine, then one table per profile."""
    args = parse_args(argv)
    workers = usable_cores()
    print("\n".join(machine_lines(PACKAGES)))
    print(
        f"images per profile: {args.images}; rounds: {args.rounds}; batch {BATCH}; "
        f"DataLoader num_workers={workers}; decode pools of {workers} threads"
    )
    if args.quick:
        print("--quick: a smoke run; with so few images a pass is one partial batch, so the")
        print("numbers below mostly measure start-up and are not the benchmark's result")
    for profile in args.profile:
        if args.stats_cost:
            run_stats_cost(profile, args.images, args.rounds)
        else:
            run_profile(profile, args.images, args.rounds, workers)


if __name__ == "__main__":
    main()
