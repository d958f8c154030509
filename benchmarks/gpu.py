"""The GPU paths side by side (``make gpu-check``): JPEG batches and checkpoint reads on cuda:0.

Run from the repository root on a host with a CUDA GPU::

    .venv/bin/python benchmarks/gpu.py [--images N] [--rounds R] [--checkpoint-gib G] [--quick]

Images (ImageNet-like JPEGs, one epoch, resize_short(256), center_crop(224), normalize,
delivered as float32 CHW batches of 64 on ``cuda:0``), images/s, medians over rounds
that alternate the contenders:

* ``DALI nvJPEG``: ``run("torch", backend="dali", device="cuda:0")``: nvJPEG decodes
  (``device="mixed"``), the rest runs on the GPU;
* ``dataio CPU kernels``: ``run("torch", device="cuda:0")``: decode and resample on the
  CPU, ``uint8`` over the bus, normalize on the GPU;
* ``DataLoader``: torch's DataLoader, Pillow in worker processes (torchvision's
  transforms written out, as in ``benchmarks/image_pipeline.py``), then ``.cuda()``.

A safetensors checkpoint (2 GiB by default) read whole into ``cuda:0``, GiB/s:

* ``GDS (cuFile)``: ``gds_open(..., mode="gds")``: storage DMA into VRAM (needs kvikio,
  the nvidia-fs driver and a supported filesystem);
* ``kvikio compat``: kvikio's POSIX compatibility mode (needs kvikio);
* ``pinned bounce``: dataio's two alternating pinned buffers, no kvikio;
* ``plain read``: ``read_safetensors(copy=True)`` into pageable memory, then ``.to("cuda")``.

The file was just written, so the page cache holds it: the non-GDS rows measure the
cache and the bus, GDS (O_DIRECT) the storage. A row this host cannot run says why.

Without a GPU the script says it needs one and exits 0. ``--quick`` runs only the CPU
rows (a few seconds, small sizes: the same contenders delivering on the CPU, DALI's CPU
backend, and the reads with the host as the target), which the test suite exercises.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import BENCH_DATA, Contender, format_table, interleave, machine_lines, probe
from image_pipeline import BATCH, PREFETCH, dataio_pipeline, dataset, make_dataloader

import dataio
from dataio.formats import gds

PACKAGES = (
    "numpy", "torch", "nvidia-dali-cuda120", "kvikio-cu12", "kvikio-cu13", "pillow", "simplejpeg"
)  # fmt: skip
HEADERS = ("row", "rate", "unit", "output / why not")


def gpu_why() -> str | None:
    """``None`` where torch sees a CUDA device, else the capability report's reason."""
    if torch.cuda.is_available():
        return None
    from dataio.formats._devices import cuda_why

    return cuda_why(torch)


# -- images ------------------------------------------------------------------------------


def image_loader(paths: Sequence[Path], device: str | None, backend: str) -> dataio.Loader:
    records = [{"image": str(p)} for p in paths]
    bound = dataio_pipeline(normalize=True).bind(records)
    if backend == "native":
        return bound.run("torch", device=device)
    return bound.run("torch", device=device, backend=backend)  # type: ignore[call-arg]


def epoch(loader: Any, device: str | None) -> Callable[[], tuple[int, str]]:
    """One pass over ``loader``, waiting for the device; returns (images, output)."""

    def run() -> tuple[int, str]:
        count, output = 0, ""
        for batch in loader:
            images = batch["image"] if isinstance(batch, dict | dataio.Batch) else batch
            if device is not None and images.device.type != "cuda":
                images = images.to(device, non_blocking=True)
            count += images.shape[0]
            output = output or f"{str(images.dtype).removeprefix('torch.')} on {images.device}"
        if device is not None:
            torch.cuda.synchronize()
        return count, output

    return run


def image_rows(
    paths: Sequence[Path], device: str | None, rounds: int, workers: int
) -> list[tuple[str, ...]]:
    """The three image contenders on ``device`` (``None``: the CPU), interleaved."""
    where = device or "cpu"
    dali_name = "DALI nvJPEG (mixed)" if device else "DALI CPU backend"
    makers: list[tuple[str, Callable[[], Any]]] = [
        (dali_name, lambda: image_loader(paths, device, "dali")),
        (f"dataio CPU kernels -> {where}", lambda: image_loader(paths, device, "native")),
        (f"DataLoader ({workers} workers) -> {where}", lambda: make_dataloader(paths, workers)),
    ]
    rows: list[tuple[str, ...]] = []
    contenders: list[Contender] = []
    for name, make in makers:
        made: list[Any] = []

        def first(make: Callable[[], Any] = make, made: list[Any] = made) -> None:
            made.append(make())
            next(iter(made[0]))  # a contender this host or version refuses says so here

        why = probe(name, first)
        if why is not None:
            rows.append((name, "-", "images/s", why[:160]))
            continue
        contenders.append(Contender(name, epoch(made[0], device), len(paths)))
    if contenders:
        interleave(contenders, rounds, unit="images")
    rows[:0] = [(c.name, f"{c.rate():,.0f}", "images/s", c.output) for c in contenders]
    return rows


# -- checkpoint reads ----------------------------------------------------------------------


def checkpoint(size: int) -> Path:
    """A safetensors file of ``size`` bytes of bf16/f32 tensors, written once."""
    path = BENCH_DATA / "gpu" / f"checkpoint-{size >> 20}MiB.safetensors"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    state, left, i = {}, size, 0
    while left > 0:
        n = min(left, 64 << 20) // 4  # 64 MiB tensors, like a large layer
        state[f"layer.{i}.weight"] = rng.standard_normal(max(n, 1), dtype=np.float32)
        left -= max(n, 1) * 4
        i += 1
    dataio.write_safetensors(path, state)
    return path


def read_route(path: Path, route: str, target: Any) -> Callable[[], tuple[int, str]]:
    """One whole-file read into ``target`` by ``route`` ("plain": read, then copy)."""

    def run() -> tuple[int, str]:
        if route == "plain":
            state = dataio.read_safetensors(path, framework="torch", copy=True)
            out = {k: v.to(target) for k, v in state.items()}
        else:
            with dataio.open_safetensors(path) as st:
                found = [(name, *st._entry(name)) for name in st]
                items = [(n, o.path, o.tensor(e), e.start) for n, o, e in found]
                out = gds.read_to_device(items, target, mode=route)  # type: ignore[arg-type]
        if target.type == "cuda":
            torch.cuda.synchronize()
        nbytes = sum(t.numel() * t.element_size() for t in out.values())
        return 1, f"{nbytes / 2**30:.2f} GiB on {target}"

    return run


def read_rows(path: Path, target: Any, rounds: int) -> list[tuple[str, ...]]:
    names = {
        "gds": "GDS (cuFile)",
        "compat": "kvikio compat (POSIX)",
        "pinned": "pinned bounce",
        "plain": "plain read + copy",
    }
    rows: list[tuple[str, ...]] = []
    contenders: list[Contender] = []
    for route, name in names.items():
        name = f"{name} -> {target}"
        if route in ("gds", "compat"):
            why = probe(name, lambda route=route: kvikio_route(route, target))
            if why is not None:
                rows.append((name, "-", "GiB/s", why[:160]))
                continue
        contenders.append(Contender(name, read_route(path, route, target), 1))
    interleave(contenders, rounds, unit="reads")
    size = path.stat().st_size / 2**30
    measured = [(c.name, f"{size * c.rate():.2f}", "GiB/s", c.output) for c in contenders]
    return measured + rows


def check_reads(path: Path, target: Any) -> str:
    """Every route offered here delivers the bytes the safetensors package reads."""
    from safetensors.numpy import load_file

    want = load_file(str(path))
    routes = ["pinned", *(r for r in ("compat", "gds") if _offered(r, target))]
    for route in routes:
        with dataio.open_safetensors(path) as st:
            found = [(n, *st._entry(n)) for n in st]
            items = [(n, o.path, o.tensor(e), e.start) for n, o, e in found]
            out = gds.read_to_device(items, target, mode=route)  # type: ignore[arg-type]
        for name, array in want.items():
            if not np.array_equal(out[name].cpu().numpy(), array):
                raise SystemExit(f"the {route} route read {name!r} wrong")
    return f"checked: routes {', '.join(routes)} read the bytes the safetensors package reads"


def kvikio_route(route: str, target: Any) -> None:
    """Refuse a kvikio route this run cannot take (a ``DeviceError`` saying why)."""
    if target.type != "cuda":  # seen: kvikio 26.10 reads need libcuda.so.1 even into host memory
        raise dataio.DeviceError(
            f"route {route!r} reads through kvikio into CUDA memory; this run's target is the CPU"
        )
    gds.choose_route(route)  # type: ignore[arg-type]


def _offered(route: str, target: Any) -> bool:
    try:
        kvikio_route(route, target)
    except dataio.DeviceError:
        return False
    return True


# -- main ----------------------------------------------------------------------------------


def save(path: Path | None, rows: list[tuple[str, ...]]) -> None:
    """The rows as JSON for ``make gpu-check``'s table (``--json``)."""
    if path is not None:
        path.write_text(json.dumps({"headers": HEADERS, "rows": rows}, indent=1))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--checkpoint-gib", type=float, default=2.0)
    parser.add_argument("--quick", action="store_true", help="CPU rows only, small sizes")
    parser.add_argument("--json", type=Path, help="also write the rows here (make gpu-check)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    why = gpu_why()
    if why is not None and not args.quick:
        print(
            f"benchmarks/gpu.py needs a CUDA GPU, and this host has none usable by torch "
            f"{torch.__version__} ({why}).\nRun it on a GPU host (make gpu-check), or with "
            "--quick for its CPU-only rows."
        )
        return
    if args.quick:
        args.images, args.rounds, args.checkpoint_gib = min(args.images, 96), 1, 1 / 64
    device = None if args.quick else "cuda:0"
    target = torch.device("cpu") if args.quick else torch.device("cuda", 0)
    workers = min(2 if args.quick else 8, os.cpu_count() or 1)
    for line in machine_lines(PACKAGES):
        print(line)
    info = dataio.gds_info()
    print(f"gds:      route {info['route']} ({info['route_why'] or 'GPUDirect Storage'})")
    if torch.cuda.is_available():
        print(f"gpu:      {torch.cuda.get_device_name(0)}")
    print(f"mode:     {'quick: CPU rows only' if args.quick else 'GPU'}", flush=True)
    start = time.perf_counter()
    paths = dataset("imagenet-like", args.images)
    rows = image_rows(paths, device, args.rounds, workers)
    save(args.json, rows)  # what is measured so far, should a time limit stop the rest
    path = checkpoint(int(args.checkpoint_gib * 2**30))
    print(check_reads(path, target), flush=True)
    rows += read_rows(path, target, args.rounds)
    print()
    print(f"{len(paths)} JPEGs, batches of {BATCH} (prefetch {PREFETCH}); checkpoint "
          f"{path.stat().st_size / 2**30:.2f} GiB, {args.rounds} round(s); medians")  # fmt: skip
    print(format_table(HEADERS, rows))
    save(args.json, rows)
    if args.quick:
        print(f"GPU rows: not run ({why or 'quick mode'})")
    print(f"took {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
