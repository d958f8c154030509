"""Audio decoding side by side: dataio vs soundfile + scipy's resample_poly (and torchaudio).

Every contender makes one pass ("epoch") over the same WAV and FLAC clips, decoding each
to mono float32 at 16 kHz. Contenders alternate round by round, so a noisy neighbour slows
all of them alike; the table gives the median clips/s over the rounds. Run from the
repository root::

    .venv/bin/python benchmarks/audio.py [--clips N] [--rounds R] [--quick]

Contenders, all on thread pools of the same size (dataio's worker count):

* ``dataio sinc``: ``decode_audio(data, sample_rate=16000, mono=True, resampling="sinc")``
  on the file's bytes (anti-aliased polyphase windowed-sinc, written in NumPy);
* ``dataio linear``: the same with ``resampling="linear"`` (cheap, aliases);
* ``soundfile + resample_poly``: ``soundfile.read(path)``, channel mean, then
  ``scipy.signal.resample_poly`` (the same filter design as dataio's sinc, in Cython);
* ``torchaudio``: ``torchaudio.load`` + ``torchaudio.functional.resample``, only when
  torchaudio imports.

The clips (3..10 s, 44.1 or 48 kHz, mono or stereo, 16-bit, half WAV and half FLAC) are
generated once into ``.bench-data/``. Nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import soundfile
from _common import (
    BENCH_DATA,
    Contender,
    compact,
    format_table,
    interleave,
    load_average,
    machine_lines,
    median,
    mib,
)
from scipy.signal import resample_poly

import dataio
from dataio.engine.pool import cpu_workers
from dataio.udfs.audio import _downmix, decode_audio, resample_linear, resample_sinc

TARGET_RATE = 16000
SOURCE_RATES = (44100, 48000)
SECONDS = (3.0, 10.0)
SEED = 20240
# Bump when the generator changes, so stale caches are not reused.
DATA_VERSION = 1
VERIFY_CLIPS = 8
STAGE_CLIPS = 24
PACKAGES = ("numpy", "scipy", "soundfile", "torch", "torchaudio", "psutil")
BASELINE = "soundfile + resample_poly"


# -- data ------------------------------------------------------------------------------


def synth_clip(rng: np.random.Generator, rate: int, seconds: float, channels: int) -> np.ndarray:
    """Speech-band tones, one tone above 8 kHz (so resampling must filter) and noise."""
    frames = round(rate * seconds)
    t = np.arange(frames, dtype=np.float64) / rate
    out = np.empty((frames, channels), np.float64)
    for c in range(channels):
        freqs = [*rng.uniform(80, 3500, 3), rng.uniform(8500, 14000)]
        amps = [*rng.uniform(0.2, 0.5, 3), 0.1]
        signal = sum(
            a * np.sin(2 * np.pi * f * t + rng.uniform(0, 6.3))
            for a, f in zip(amps, freqs, strict=True)
        )
        envelope = 0.6 + 0.4 * np.sin(2 * np.pi * rng.uniform(0.2, 2.0) * t)
        out[:, c] = signal * envelope + 0.02 * rng.standard_normal(frames)
    return np.round(out / np.abs(out).max() * 0.8 * 32767).astype(np.int16)


def dataset(count: int) -> list[Path]:
    """The first ``count`` clips, generated once into ``.bench-data/audio-v{N}/``."""
    root = BENCH_DATA / f"audio-v{DATA_VERSION}"
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        rng = np.random.default_rng([SEED, i])
        rate = SOURCE_RATES[int(rng.integers(len(SOURCE_RATES)))]
        channels = int(rng.integers(1, 3))
        seconds = float(rng.uniform(*SECONDS))
        fmt = "wav" if i % 2 == 0 else "flac"
        path = root / f"{i:04d}-{rate}-{channels}ch.{fmt}"
        if not path.exists():
            partial = path.with_suffix(".partial")
            soundfile.write(
                partial, synth_clip(rng, rate, seconds, channels), rate, format=fmt.upper()
            )
            os.replace(partial, path)
        paths.append(path)
    return paths


# -- contenders ------------------------------------------------------------------------


def dataio_clip(path: Path, resampling: str) -> np.ndarray:
    """Read one file and decode it with dataio's kernel: mono float32 at 16 kHz."""
    samples, _ = decode_audio(
        path.read_bytes(),
        sample_rate=TARGET_RATE,
        mono=True,
        resampling=resampling,  # type: ignore[arg-type]
    )
    return samples


def baseline_clip(path: Path) -> np.ndarray:
    """What one writes without dataio: soundfile, channel mean, scipy's polyphase filter.

    The channel mean adds columns, as dataio does: ``mean(axis=1)`` is ~10x slower on
    ``[frames, channels]`` arrays, and a BLAS matrix-vector product starts BLAS threads
    that fight the pool's. The baseline is not handicapped.
    """
    samples, rate = soundfile.read(path, dtype="float32", always_2d=True)
    mono = samples[:, 0].copy()
    for channel in range(1, samples.shape[1]):
        mono += samples[:, channel]
    mono /= samples.shape[1]
    g = math.gcd(rate, TARGET_RATE)
    return resample_poly(mono, TARGET_RATE // g, rate // g).astype(np.float32, copy=False)


def torchaudio_clip(path: Path) -> np.ndarray:
    """torchaudio's loader and its (sinc-interpolation) resampler."""
    import torchaudio

    wave, rate = torchaudio.load(str(path))
    wave = torchaudio.functional.resample(wave.mean(dim=0), rate, TARGET_RATE)
    return wave.numpy()


def describe(outputs: Sequence[np.ndarray]) -> str:
    """Dtype, shape kind and mean duration of a pass's outputs."""
    seconds = sum(len(o) for o in outputs) / len(outputs) / TARGET_RATE
    return f"{outputs[0].dtype} [frames] mono 16 kHz, mean {seconds:.2f} s"


def run_pool(
    pool: ThreadPoolExecutor, paths: Sequence[Path], decode: Callable[[Path], np.ndarray]
) -> tuple[int, str]:
    """Decode every file on ``pool``; returns (clips, output description)."""
    outputs = list(pool.map(decode, paths))
    return len(outputs), describe(outputs)


def run_dataio(pool: ThreadPoolExecutor, paths: Sequence[Path], resampling: str) -> tuple[int, str]:
    """One pass of a dataio pipeline over ``paths`` (its own shared pool, same size);
    returns (clips, output description). ``pool`` is the baseline's, unused here."""
    pipe = dataio.pipeline(
        dataio.slot("audio").decode_audio(
            sample_rate=TARGET_RATE, mono=True, resampling=resampling
        ),
        dataio.batch(16, prefetch=4),
        dataio.batch_transforms.padding("audio"),  # clips differ in length
    )
    outputs: list[np.ndarray] = []
    with pipe.bind([{"audio": str(p)} for p in paths]).run("numpy") as loader:
        for batch in loader:
            lengths = batch["audio_mask"].sum(axis=1)
            outputs.extend(row[:n] for row, n in zip(batch["audio"], lengths, strict=True))
    return len(outputs), describe(outputs)


def torchaudio_available() -> str | None:
    """``None`` when torchaudio imports, else why not."""
    try:
        import torchaudio  # noqa: F401
    except Exception as exc:  # an ImportError, or a binary built for another torch
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


# CPU seconds (this process, all threads) of each recorded pass, by contender name.
CPU_SECONDS: dict[str, list[float]] = {}


def timed_cpu(name: str, run: Callable[[], tuple[int, str]]) -> Callable[[], tuple[int, str]]:
    """Wrap a pass so its process CPU time is recorded: steadier than wall time when
    other tenants load the machine (warm-up passes are recorded too, then dropped)."""

    def wrapped() -> tuple[int, str]:
        start = time.process_time()
        result = run()
        CPU_SECONDS.setdefault(name, []).append(time.process_time() - start)
        return result

    return wrapped


def build_contenders(
    paths: Sequence[Path], dataio_pool: ThreadPoolExecutor, other_pool: ThreadPoolExecutor
) -> list[Contender]:
    """The contenders over ``paths``, the baseline first."""
    runs: dict[str, Callable[[], tuple[int, str]]] = {
        BASELINE: lambda: run_pool(other_pool, paths, baseline_clip),
        "dataio sinc": lambda: run_dataio(dataio_pool, paths, "sinc"),
        "dataio linear": lambda: run_dataio(dataio_pool, paths, "linear"),
    }
    if torchaudio_available() is None:
        runs["torchaudio"] = lambda: run_pool(other_pool, paths, torchaudio_clip)
    return [Contender(name, timed_cpu(name, run), len(paths)) for name, run in runs.items()]


# -- checks and breakdowns -------------------------------------------------------------


def snr_db(signal: np.ndarray, error: np.ndarray) -> float:
    """Signal-to-error ratio in dB."""
    power = float(np.mean(np.square(error, dtype=np.float64)))
    signal_power = float(np.mean(np.square(signal, dtype=np.float64)))
    return math.inf if power == 0 else 10 * math.log10(signal_power / power)


def verify(paths: Sequence[Path]) -> list[str]:
    """Compare dataio's outputs with the baseline's on a few clips."""
    per_rate = VERIFY_CLIPS // len(SOURCE_RATES)
    subset = [p for r in SOURCE_RATES for p in [q for q in paths if f"-{r}-" in q.name][:per_rate]]
    worst, linear_snrs = 0.0, []
    for path in subset:
        reference = baseline_clip(path)
        sinc = dataio_clip(path, "sinc")
        linear = dataio_clip(path, "linear")
        if sinc.shape != reference.shape or linear.shape != reference.shape:
            raise RuntimeError(f"{path.name}: shapes differ {sinc.shape} vs {reference.shape}")
        worst = max(worst, float(np.abs(sinc - reference).max()))
        linear_snrs.append(snr_db(reference, linear - reference))
    return [
        f"dataio sinc vs resample_poly on {len(subset)} clips (44.1 and 48 kHz): max abs diff "
        f"{worst:.2e} (full scale 1.0)",
        f"dataio linear vs resample_poly: SNR median {median(linear_snrs):.1f} dB, worst "
        f"{min(linear_snrs):.1f} dB (the clips hold a tone above 8 kHz, which linear aliases)",
    ]


def stage_table(paths: Sequence[Path], workers: int) -> str:
    """Single-thread ms per clip for each step, split by format and source rate."""
    subset = list(paths[:STAGE_CLIPS])
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}

    def lap(stage: str, start: float) -> float:
        now = time.perf_counter()
        totals[stage] = totals.get(stage, 0.0) + now - start
        counts[stage] = counts.get(stage, 0) + 1
        return now

    for path in subset:
        t = time.perf_counter()
        data = path.read_bytes()
        t = lap("read file", t)
        samples, rate = decode_audio(data)
        t = lap(f"decode {path.suffix[1:]} (soundfile)", t)
        if samples.shape[1] > 1:
            samples.mean(axis=1)
            t = lap("stereo: numpy mean(axis=1)", t)
        mono = _downmix(samples)
        t = lap("stereo: dataio downmix" if samples.shape[1] > 1 else "mono: take channel", t)
        resample_linear(mono, rate, TARGET_RATE)
        t = lap(f"dataio linear {rate // 1000} kHz -> 16", t)
        resample_sinc(mono, rate, TARGET_RATE)
        t = lap(f"dataio sinc {rate // 1000} kHz -> 16", t)
        g = math.gcd(rate, TARGET_RATE)
        resample_poly(mono, TARGET_RATE // g, rate // g)
        lap(f"resample_poly {rate // 1000} kHz -> 16", t)
    rows = []
    for stage, total in sorted(totals.items()):
        ms = 1000 * total / counts[stage]
        rows.append([stage, str(counts[stage]), f"{ms:.2f}", f"{workers * 1000 / ms:,.0f}"])
    note = (
        f"single thread, {len(subset)} clips; 'ideal' = {workers} workers / (ms per clip), "
        "if that step were the only work"
    )
    return note + "\n" + format_table(["step", "clips", "ms/clip", "ideal clips/s"], rows)


# -- report ----------------------------------------------------------------------------


def result_table(contenders: Sequence[Contender], audio_seconds: float) -> str:
    """Clips/s, audio seconds per second, the ratio to the baseline, memory and output."""
    base = next(c for c in contenders if c.name == BASELINE)

    def cpu_ms(c: Contender) -> float:  # median CPU ms per clip over the recorded passes
        return 1000 * median(CPU_SECONDS[c.name][1:]) / c.expected

    rows = []
    for c in contenders:
        per_round = [b / a for a, b in zip(c.seconds, base.seconds, strict=True)]
        rows.append(
            [
                c.name,
                f"{c.rate():.1f}",
                c.spread(),
                f"{audio_seconds / median(c.seconds):,.0f}x",
                f"{c.rate() / base.rate():.2f}x",
                f"{median(per_round):.2f}x",
                f"{cpu_ms(c):.2f}",
                f"{cpu_ms(base) / cpu_ms(c):.2f}x",
                mib(max(c.peaks)),
                c.output,
            ]
        )
    headers = [
        "contender",
        "clips/s",
        "min..max",
        "realtime",
        "vs baseline",
        "per-round",
        "CPU ms/clip",
        "CPU vs baseline",
        "peak RSS",
        "output",
    ]
    return format_table(headers, rows)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options; ``--quick`` shrinks the defaults for a smoke run."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clips", type=int, help="clips (default 300, quick 24)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 5, quick 2)")
    parser.add_argument("--quick", action="store_true", help="a smoke run in under a minute")
    args = parser.parse_args(argv)
    args.clips = args.clips or (24 if args.quick else 300)
    args.rounds = args.rounds or (2 if args.quick else 5)
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Print the machine, the data, the checks and the table."""
    args = parse_args(argv)
    workers = cpu_workers()
    print("\n".join(machine_lines(PACKAGES)))
    start = time.perf_counter()
    paths = dataset(args.clips)
    infos: list[Any] = [soundfile.info(str(p)) for p in paths]
    audio_seconds = sum(i.duration for i in infos)
    megabytes = sum(p.stat().st_size for p in paths) / 1e6
    kinds = ", ".join(
        f"{sum(p.suffix == ext for p in paths)} {ext[1:].upper()}" for ext in (".wav", ".flac")
    )
    print(
        f"\n== {len(paths)} clips ({kinds}), {audio_seconds / 60:.1f} min of audio at "
        f"44.1/48 kHz, {megabytes:.0f} MB (ready in {time.perf_counter() - start:.1f} s) ==",
        flush=True,
    )
    print("\n".join(verify(paths)), flush=True)
    missing = torchaudio_available()
    if missing is not None:
        print(f"torchaudio: not importable here ({missing}); left out")
    with (
        ThreadPoolExecutor(workers, thread_name_prefix="dataio-audio") as dataio_pool,
        ThreadPoolExecutor(workers, thread_name_prefix="baseline-audio") as other_pool,
    ):
        contenders = build_contenders(paths, dataio_pool, other_pool)
        interleave(contenders, args.rounds, unit="clips")
    print(
        f"\nmedian of {args.rounds} rounds, {workers} threads each; every contender reads "
        "the files and delivers mono float32 at 16 kHz:"
    )
    print(result_table(contenders, audio_seconds))
    print(
        "realtime: seconds of audio decoded per second; per-round: the median of per-round "
        "ratios to the baseline (rounds share the same load); CPU ms/clip: this process's CPU "
        "time per clip, all threads (less sensitive to other tenants than wall time); peak "
        "RSS sampled every 20 ms."
    )
    print(f"rates: {', '.join(f'{c.name} {compact(c.rate())}/s' for c in contenders)}")
    print("\nwhere the time goes, " + stage_table(paths, workers))
    print(f"load average after the run: {load_average()}", flush=True)


if __name__ == "__main__":
    main()
