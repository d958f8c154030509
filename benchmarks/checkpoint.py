"""Checkpoint load and write: dataio vs the safetensors library vs torch.load / torch.save.

The checkpoint is ``--tensors`` tensors of ``--tensor-mib`` MiB each (default 200 x 10 MiB,
about 2 GiB): half float32, half bfloat16 for torch; half float32, half float16 for
NumPy (NumPy has no bfloat16, and the safetensors NumPy loader refuses it). Every
measurement runs in a fresh child process, so its peak RSS is its own; contenders
alternate round by round so background load slows all of them alike. Run from the
repository root::

    .venv/bin/python benchmarks/checkpoint.py [--rounds R] [--quick]

Columns:

* ``open``: the call that returns the dict of tensors (a mapping read returns before any
  data is read);
* ``open+touch``: that plus reading one byte of every 4 KiB page of every tensor, the
  least work that makes every byte resident, so lazy and eager loaders compare fairly;
* ``peak RSS``: the child's peak resident memory (``VmHWM``, reset just before the call)
  minus its resident memory before the call; file pages of a mapping count once touched;
* ``anon``: anonymous (private, copied) memory added by the call, after touching: what
  the load really costs, since mapped file pages are shared with the page cache.

Files are read warm (re-read into the page cache before each load, as right after a
download or a save), and all load rounds run before the write rounds; writes go
to the page cache without fsync, as both libraries' save functions do, each starting
after an ``os.sync()`` so none pays for an earlier one's writeback. Nothing here
asserts on timings; the target (load at least as fast as safetensors, no more RSS) is
printed as met or not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import BENCH_DATA, format_table, machine_lines, median

PAGE = 4096

LOADERS = {
    # name -> (framework, file kind)
    "dataio torch": ("torch", "torch"),
    "safetensors torch": ("torch", "torch"),
    "torch.load": ("torch", "pt"),
    "torch.load mmap": ("torch", "pt"),
    "dataio numpy": ("numpy", "numpy"),
    "safetensors numpy": ("numpy", "numpy"),
    # copy=True: read into memory, safe from truncation (decision 012)
    "dataio torch copy": ("torch", "torch"),
    "dataio numpy copy": ("numpy", "numpy"),
}
WRITERS = {
    # name -> framework of the state dict written
    "dataio torch": "torch",
    "safetensors torch": "torch",
    "torch.save": "torch",
    "dataio numpy": "numpy",
    "safetensors numpy": "numpy",
}
PAIRS = [("dataio torch", "safetensors torch"), ("dataio numpy", "safetensors numpy")]


# -- the state dicts -------------------------------------------------------------------


def state_dict(framework: str, tensors: int, tensor_mib: int) -> dict[str, Any]:
    """Deterministic tensors, cheap to make: a ramp per tensor, no random generator."""
    import numpy as np

    nbytes = tensor_mib << 20
    out: dict[str, Any] = {}
    for i in range(tensors):
        name = f"model.layers.{i // 2}.{'mlp' if i % 2 else 'attn'}.weight"
        if i % 2 == 0:
            values = np.linspace(-1, 1, nbytes // 4, dtype=np.float32) + i
            out[name] = values.reshape(-1, 1024)
        elif framework == "numpy":
            out[name] = np.linspace(-1, 1, nbytes // 2, dtype=np.float16).reshape(-1, 1024)
        else:
            import torch

            half = torch.linspace(-1, 1, nbytes // 2, dtype=torch.float32).to(torch.bfloat16)
            out[name] = half.reshape(-1, 1024)
    if framework == "torch":
        import torch

        out = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in out.items()}
    return out


def prepare(folder: Path, tensors: int, tensor_mib: int) -> dict[str, Path]:
    """Write the checkpoints once (kept between runs) with the reference writers."""
    folder.mkdir(parents=True, exist_ok=True)
    tag = f"{tensors}x{tensor_mib}MiB"
    files = {
        "torch": folder / f"torch-{tag}.safetensors",
        "numpy": folder / f"numpy-{tag}.safetensors",
        "pt": folder / f"torch-{tag}.pt",
    }
    for kind, path in files.items():
        if path.exists():
            continue
        print(f"  writing {path.name} ...", flush=True)
        temp = path.with_suffix(".tmp")
        if kind == "pt":
            import torch

            torch.save(state_dict("torch", tensors, tensor_mib), temp)
        elif kind == "torch":
            import safetensors.torch

            safetensors.torch.save_file(state_dict("torch", tensors, tensor_mib), str(temp))
        else:
            import safetensors.numpy

            safetensors.numpy.save_file(state_dict("numpy", tensors, tensor_mib), str(temp))
        temp.rename(path)
    return files


# -- child processes: one measurement each ---------------------------------------------


def _anon() -> int:
    return _status("RssAnon")


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _status(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    """Reset the kernel's high-water mark of resident memory (VmHWM) to the current RSS."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def _peak() -> int:
    return _status("VmHWM")


def _touch(tensors: dict[str, Any]) -> int:
    total = 0
    for value in tensors.values():
        if hasattr(value, "numpy") and not hasattr(value, "ctypes"):
            import torch

            total += int(value.reshape(-1).view(torch.uint8)[::PAGE].sum())
        else:
            import numpy as np

            total += int(value.reshape(-1).view(np.uint8)[::PAGE].sum())
    return total


def _load(name: str, path: str) -> dict[str, Any]:
    if name.startswith("dataio"):
        import dataio.formats.safetensors as st

        framework = LOADERS[name][0]
        copy = name.endswith("copy")
        return st.read_safetensors(path, framework=framework, copy=copy)  # type: ignore[arg-type]
    if name == "safetensors torch":
        import safetensors.torch

        return safetensors.torch.load_file(path)
    if name == "safetensors numpy":
        import safetensors.numpy

        return safetensors.numpy.load_file(path)
    import torch

    return torch.load(path, mmap=name.endswith("mmap"), weights_only=True)


def _write(name: str, state: dict[str, Any], path: str) -> None:
    if name.startswith("dataio"):
        import dataio.formats.safetensors as st

        st.write_safetensors(path, state)
    elif name == "safetensors torch":
        import safetensors.torch

        safetensors.torch.save_file(state, path)
    elif name == "safetensors numpy":
        import safetensors.numpy

        safetensors.numpy.save_file(state, path)
    else:
        import torch

        torch.save(state, path)


def child(args: argparse.Namespace) -> None:
    """Run one measurement and print it as JSON."""
    import numpy  # noqa: F401 - imports are not part of any measurement
    import torch  # noqa: F401

    import dataio.formats.safetensors  # noqa: F401

    if args.child == "load":
        _reset_peak()
        rss, anon = _rss(), _anon()
        start = time.perf_counter()
        tensors = _load(args.name, args.path)
        opened = time.perf_counter() - start
        _touch(tensors)
        touched = time.perf_counter() - start
        result = {"open": opened, "touch": touched, "peak": _peak() - rss, "anon": _anon() - anon}
        assert len(tensors) == args.tensors, (len(tensors), args.tensors)
    else:
        state = state_dict(WRITERS[args.name], args.tensors, args.tensor_mib)
        _reset_peak()
        rss, anon = _rss(), _anon()
        start = time.perf_counter()
        _write(args.name, state, args.path)
        elapsed = time.perf_counter() - start
        result = {"write": elapsed, "peak": _peak() - rss, "anon": _anon() - anon}
        size = os.path.getsize(args.path)
        os.unlink(args.path)
        assert size >= args.tensors * (args.tensor_mib << 20), size
    print(json.dumps(result))


def measure(kind: str, name: str, path: Path, args: argparse.Namespace) -> dict[str, float]:
    # Start every measurement with no dirty pages, so no write pays for an earlier one.
    os.sync()
    command = [
        sys.executable,
        __file__,
        "--child",
        kind,
        "--name",
        name,
        "--path",
        str(path),
        "--tensors",
        str(args.tensors),
        "--tensor-mib",
        str(args.tensor_mib),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{kind} {name} failed:\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- the report --------------------------------------------------------------------------


def warm(path: Path) -> None:
    """Read a file through the page cache so the next reader finds it resident."""
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tensors", type=int, default=200)
    parser.add_argument("--tensor-mib", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="20 x 10 MiB, one round")
    parser.add_argument("--data", type=Path, default=BENCH_DATA / "checkpoint")
    parser.add_argument("--child", choices=["load", "write"], help=argparse.SUPPRESS)
    parser.add_argument("--name", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.quick:
        args.rounds, args.tensors = 1, 20
    total = args.tensors * args.tensor_mib
    print(f"checkpoint: {args.tensors} tensors x {args.tensor_mib} MiB = {total:,} MiB")
    for line in machine_lines(["numpy", "torch", "safetensors", "ml_dtypes"]):
        print(line)
    files = prepare(args.data, args.tensors, args.tensor_mib)
    out_dir = args.data / "written"
    out_dir.mkdir(exist_ok=True)
    loads: dict[str, list[dict[str, float]]] = {name: [] for name in LOADERS}
    writes: dict[str, list[dict[str, float]]] = {name: [] for name in WRITERS}
    # Loads first, then writes: writing 2 GiB files between loads would evict or split
    # the page cache of the files being read and charge that to whoever reads next.
    for r in range(args.rounds):
        order = list(LOADERS)
        shift = r % len(order)
        for name in order[shift:] + order[:shift]:
            warm(files[LOADERS[name][1]])
            loads[name].append(measure("load", name, files[LOADERS[name][1]], args))
        summary = ", ".join(f"{n} {v[-1]['touch']:.3f}s" for n, v in loads.items())
        print(f"  load round {r + 1}/{args.rounds} (open+touch): {summary}", flush=True)
    for r in range(args.rounds):
        order = list(WRITERS)
        shift = r % len(order)
        for name in order[shift:] + order[:shift]:
            suffix = ".pt" if name == "torch.save" else ".safetensors"
            writes[name].append(measure("write", name, out_dir / f"out{suffix}", args))
        summary = ", ".join(f"{n} {v[-1]['write']:.2f}s" for n, v in writes.items())
        print(f"  write round {r + 1}/{args.rounds}: {summary}", flush=True)
    report(loads, writes, args)


def report(
    loads: dict[str, list[dict[str, float]]],
    writes: dict[str, list[dict[str, float]]],
    args: argparse.Namespace,
) -> None:
    gib = args.tensors * args.tensor_mib / 1024

    def med(rows: list[dict[str, float]], key: str) -> float:
        return median([row[key] for row in rows])

    print(f"\nload ({args.rounds} rounds, medians; peak RSS and anon in MiB)")
    rows = []
    for name, results in loads.items():
        touch = med(results, "touch")
        rows.append(
            [
                name,
                f"{med(results, 'open') * 1000:,.1f} ms",
                f"{touch:.3f} s",
                f"{gib / touch:.2f} GiB/s",
                mib(med(results, "peak")),
                mib(med(results, "anon")),
            ]
        )
    print(format_table(["loader", "open", "open+touch", "rate", "peak RSS", "anon"], rows))
    print(f"\nwrite ({args.rounds} rounds, medians; peak RSS and anon beyond the state dict)")
    rows = []
    for name, results in writes.items():
        seconds = med(results, "write")
        rows.append(
            [
                name,
                f"{seconds:.3f} s",
                f"{gib / seconds:.2f} GiB/s",
                mib(med(results, "peak")),
                mib(med(results, "anon")),
            ]
        )
    print(format_table(["writer", "write", "rate", "peak RSS", "anon"], rows))
    print("\nratios (dataio / safetensors; time < 1 is faster, RSS <= 1 is no more memory)")
    for ours, theirs in PAIRS:
        t_ratio = med(loads[ours], "touch") / med(loads[theirs], "touch")
        o_ratio = med(loads[ours], "open") / med(loads[theirs], "open")
        ours_rss, theirs_rss = med(loads[ours], "peak"), med(loads[theirs], "peak")
        w_ratio = med(writes[ours], "write") / med(writes[theirs], "write")
        met = t_ratio <= 1.05 and ours_rss <= theirs_rss * 1.02 + (8 << 20)
        print(
            f"  {ours:<13} open {o_ratio:5.2f}x  open+touch {t_ratio:5.2f}x  "
            f"peak RSS {mib(ours_rss)} vs {mib(theirs_rss)} MiB  write {w_ratio:5.2f}x  "
            f"target {'met' if met else 'NOT met'}"
        )
    for name in ("torch.load", "torch.load mmap"):
        ratio = med(loads["dataio torch"], "touch") / med(loads[name], "touch")
        print(f"  dataio torch vs {name:<16} open+touch {ratio:5.2f}x")
    ratio = med(writes["dataio torch"], "write") / med(writes["torch.save"], "write")
    print(f"  dataio torch vs torch.save        write {ratio:5.2f}x")


if __name__ == "__main__":
    main()
