"""Audio kernels (``dataio/udfs/audio.py``).

Oracles: soundfile writes the clips (integer PCM, so the expected floats are exact),
``scipy.signal.resample_poly`` for sinc resampling, ``np.interp`` for linear, and the
spectrum of pure tones for what each resampler does to frequencies.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable

import numpy as np
import pytest
import soundfile
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.signal import resample_poly

from dataio.exceptions import DecodeError, PlanError, TransformError
from dataio.udfs.audio import decode_audio, fix_length, gain, resample_linear, resample_sinc

RATE = 44100
Resampler = Callable[[np.ndarray, int, int], np.ndarray]


def tone(freq: float, rate: int, seconds: float, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(round(rate * seconds)) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def encode(samples: np.ndarray, rate: int, fmt: str, subtype: str | None = None) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


def peak_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1 / rate)[np.argmax(spectrum)])


def level_db(x: np.ndarray, reference: np.ndarray) -> float:
    rms = np.sqrt(np.mean(np.square(x, dtype=np.float64)))
    return 20 * math.log10(rms / np.sqrt(np.mean(np.square(reference, dtype=np.float64))))


@pytest.fixture(scope="module")
def pcm() -> np.ndarray:
    """Half a second of stereo int16: 440 Hz left, 660 Hz right."""
    left, right = tone(440, RATE, 0.5, 0.6), tone(660, RATE, 0.5, 0.3)
    return np.round(np.stack([left, right], axis=1) * 32767).astype(np.int16)


@pytest.fixture(scope="module")
def clips(pcm: np.ndarray) -> dict[str, bytes]:
    return {
        "wav": encode(pcm, RATE, "WAV", "PCM_16"),
        "flac": encode(pcm, RATE, "FLAC", "PCM_16"),
        "ogg": encode(pcm.astype(np.float32) / 32768, RATE, "OGG", "VORBIS"),
    }


# -- decode -----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_decode_lossless_is_exact(clips: dict[str, bytes], pcm: np.ndarray, fmt: str) -> None:
    samples, rate = decode_audio(clips[fmt])
    assert rate == RATE
    assert samples.dtype == np.float32 and samples.shape == pcm.shape
    np.testing.assert_array_equal(samples, pcm.astype(np.float32) / 32768)


def test_decode_ogg_keeps_the_tones(clips: dict[str, bytes], pcm: np.ndarray) -> None:
    samples, rate = decode_audio(clips["ogg"])
    assert rate == RATE and samples.shape == pcm.shape and samples.dtype == np.float32
    assert peak_hz(samples[:, 0], rate) == pytest.approx(440, abs=2)
    assert peak_hz(samples[:, 1], rate) == pytest.approx(660, abs=2)


@pytest.mark.parametrize("fmt", ["wav", "flac", "ogg"])
def test_mono_averages_channels(clips: dict[str, bytes], fmt: str) -> None:
    stereo, _ = decode_audio(clips[fmt])
    mono, rate = decode_audio(clips[fmt], mono=True)
    assert rate == RATE and mono.shape == (stereo.shape[0],)
    np.testing.assert_allclose(mono, (stereo[:, 0] + stereo[:, 1]) / 2, atol=1e-7)


def test_mono_of_a_mono_file_is_one_dimensional(pcm: np.ndarray) -> None:
    mono, _ = decode_audio(encode(pcm[:, 0], RATE, "WAV", "PCM_16"), mono=True)
    np.testing.assert_array_equal(mono, pcm[:, 0].astype(np.float32) / 32768)
    kept, _ = decode_audio(encode(pcm[:, 0], RATE, "WAV", "PCM_16"))
    assert kept.shape == (pcm.shape[0], 1)


@pytest.mark.parametrize("fmt", ["wav", "flac", "ogg"])
def test_decode_resamples_with_sinc_like_resample_poly(clips: dict[str, bytes], fmt: str) -> None:
    native, _ = decode_audio(clips[fmt])
    samples, rate = decode_audio(clips[fmt], sample_rate=16000, resampling="sinc")
    assert rate == RATE  # the file's rate, not the output's
    expected = resample_poly(native.astype(np.float64), 160, 441, axis=0)
    assert samples.shape == expected.shape == (8000, 2)
    np.testing.assert_allclose(samples, expected, atol=2e-6)


def test_decode_resamples_linearly(clips: dict[str, bytes]) -> None:
    native, _ = decode_audio(clips["wav"], mono=True)
    samples, _ = decode_audio(clips["wav"], mono=True, sample_rate=16000)
    positions = np.arange(8000) * RATE / 16000
    np.testing.assert_allclose(
        samples, np.interp(positions, np.arange(len(native)), native), atol=1e-6
    )


def test_decode_at_the_file_rate_does_not_resample(clips: dict[str, bytes]) -> None:
    native, _ = decode_audio(clips["flac"])
    same, _ = decode_audio(clips["flac"], sample_rate=RATE, resampling="sinc")
    np.testing.assert_array_equal(same, native)


def _corrupt_flac(blob: bytes) -> bytes:
    middle = len(blob) // 2
    return blob[:middle] + bytes(64) + blob[middle + 64 :]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda c: b"", "empty"),
        (lambda c: b"this is not audio at all", r"not a recognised audio format.*b'this is "),
        (lambda c: b"\x89PNG\r\n\x1a\n" + bytes(64), "not a recognised audio format"),
        (lambda c: c["wav"][:1000], r"WAV audio is truncated: 1000 of the \d+ bytes"),
        (lambda c: c["wav"][:30], "WAV audio is truncated"),
        (lambda c: c["flac"][: len(c["flac"]) // 2], "FLAC audio is corrupt or truncated"),
        (lambda c: _corrupt_flac(c["flac"]), "FLAC audio is corrupt or truncated"),
        (lambda c: c["flac"][:20], "FLAC audio is corrupt or truncated"),
        (lambda c: c["ogg"][: len(c["ogg"]) // 2], "OGG audio is corrupt or truncated"),
        (lambda c: c["ogg"][:-1], "OGG audio has no readable frames"),
    ],
    ids=[
        "empty",
        "text",
        "png",
        "wav-cut",
        "wav-header-cut",
        "flac-cut",
        "flac-zeroed",
        "flac-header",
        "ogg-cut",
        "ogg-last-byte",
    ],
)
def test_bad_audio_is_a_decode_error(
    clips: dict[str, bytes], make: Callable[[dict[str, bytes]], bytes], message: str
) -> None:
    with pytest.raises(DecodeError, match=message) as info:
        decode_audio(make(clips), sample_rate=16000)
    assert isinstance(info.value, ValueError)
    assert "BytesIO" not in str(info.value)


def test_decode_accepts_a_memoryview(clips: dict[str, bytes]) -> None:
    samples, _ = decode_audio(memoryview(clips["wav"]))
    np.testing.assert_array_equal(samples, decode_audio(clips["wav"])[0])


def test_unknown_resampling_is_a_plan_error(clips: dict[str, bytes]) -> None:
    with pytest.raises(PlanError, match=r"resampling must be one of \['linear', 'sinc'\]"):
        decode_audio(clips["wav"], sample_rate=16000, resampling="cubic")  # type: ignore[arg-type]


@pytest.mark.parametrize("rates", [(0, 16000), (44100, -1), (44100, 1.5)])
def test_bad_rates_are_plan_errors(rates: tuple[int, int]) -> None:
    with pytest.raises(PlanError, match="positive integer sample rate"):
        resample_sinc(np.zeros(10, np.float32), *rates)


# -- resampling -------------------------------------------------------------------------

# Both kernel paths: 44.1 -> 16 and 44.1 -> 48 kHz step past whole filter windows;
# 48 -> 16, 48 -> 32 and 22.05 -> 44.1 kHz overlap them (the blocked products).
RATE_PAIRS = [
    (44100, 16000),
    (48000, 16000),
    (16000, 44100),
    (22050, 16000),
    (44100, 48000),
    (48000, 32000),
    (22050, 44100),
]


@pytest.mark.parametrize(("from_rate", "to_rate"), RATE_PAIRS)
@pytest.mark.parametrize("frames", [1, 7, 300, 4999, 30000])
@pytest.mark.parametrize("channels", [None, 2])
def test_sinc_matches_resample_poly(
    from_rate: int, to_rate: int, frames: int, channels: int | None
) -> None:
    rng = np.random.default_rng(frames)
    shape = (frames,) if channels is None else (frames, channels)
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    g = math.gcd(from_rate, to_rate)
    expected = resample_poly(x.astype(np.float64), to_rate // g, from_rate // g, axis=0)
    out = resample_sinc(x, from_rate, to_rate)
    assert out.dtype == np.float32 and out.shape == expected.shape
    np.testing.assert_allclose(out, expected, atol=3e-6)


@pytest.mark.parametrize(("from_rate", "to_rate"), RATE_PAIRS)
def test_linear_matches_np_interp(from_rate: int, to_rate: int) -> None:
    x = np.random.default_rng(1).standard_normal((5000, 2)).astype(np.float32)
    out = resample_linear(x, from_rate, to_rate)
    frames = -(-5000 * to_rate // from_rate)
    positions = np.arange(frames) * from_rate / to_rate
    assert out.dtype == np.float32 and out.shape == (frames, 2)
    for c in range(2):
        np.testing.assert_allclose(
            out[:, c], np.interp(positions, np.arange(5000), x[:, c]), atol=1e-6
        )


@pytest.mark.parametrize("resampler", [resample_linear, resample_sinc])
def test_empty_and_same_rate(resampler: Resampler) -> None:
    assert resampler(np.zeros((0, 2), np.float32), 44100, 16000).shape == (0, 2)
    x = np.arange(6, dtype=np.float64)
    same = resampler(x, 16000, 16000)
    assert same.dtype == np.float32 and same is not x
    np.testing.assert_array_equal(same, x)


@pytest.mark.parametrize("resampler", [resample_linear, resample_sinc])
@pytest.mark.parametrize(("from_rate", "to_rate"), [(44100, 16000), (16000, 44100)])
def test_a_tone_keeps_its_frequency(resampler: Resampler, from_rate: int, to_rate: int) -> None:
    out = resampler(tone(440, from_rate, 1.0), from_rate, to_rate)
    assert len(out) == to_rate
    assert peak_hz(out, to_rate) == pytest.approx(440, abs=1)


def test_sinc_passes_the_passband_at_full_level() -> None:
    x = tone(3000, RATE, 1.0)
    out = resample_sinc(x, RATE, 16000)
    assert abs(level_db(out[1000:-1000], x)) < 0.05


def test_sinc_attenuates_content_above_the_new_nyquist() -> None:
    x = tone(10000, RATE, 1.0)  # above 8 kHz, the Nyquist frequency at 16 kHz
    sinc = resample_sinc(x, RATE, 16000)[1600:-1600]  # away from the clip's edges
    linear = resample_linear(x, RATE, 16000)[1600:-1600]
    assert level_db(sinc, x) <= -40
    # linear interpolation folds the tone back to 16 - 10 = 6 kHz, barely attenuated
    assert level_db(linear, x) > -6
    assert peak_hz(linear, 16000) == pytest.approx(6000, abs=2)


# -- crop, pad and gain -----------------------------------------------------------------


def test_fix_length_center_crop_and_pad() -> None:
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    np.testing.assert_array_equal(fix_length(x, 3), x[1:4])
    np.testing.assert_array_equal(fix_length(x, 2), x[1:3])  # odd excess: the earlier frame
    padded = fix_length(x, 7, pad_value=-1.0)
    assert padded.dtype == np.float32
    np.testing.assert_array_equal(padded, np.concatenate([x, np.full((2, 2), -1.0)]))
    assert fix_length(x, 5) is x


def test_fix_length_random_crop_draws_the_offset_from_rng() -> None:
    x = np.arange(100, dtype=np.float32)
    offsets = set()
    for seed in range(20):
        out = fix_length(x, 10, rng=np.random.default_rng(seed), random_crop=True)
        start = int(np.random.default_rng(seed).integers(0, 91))
        np.testing.assert_array_equal(out, x[start : start + 10])
        offsets.add(start)
    assert len(offsets) > 5


def test_fix_length_random_crop_needs_rng() -> None:
    with pytest.raises(TransformError, match="pass rng"):
        fix_length(np.zeros(10), 5, random_crop=True)
    with pytest.raises(PlanError, match="non-negative integer"):
        fix_length(np.zeros(10), -1)


@settings(max_examples=60, deadline=None)
@given(
    frames=st.integers(0, 40),
    length=st.integers(0, 40),
    random_crop=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_fix_length_property(frames: int, length: int, random_crop: bool, seed: int) -> None:
    x = np.arange(frames * 2, dtype=np.int16).reshape(frames, 2)
    out = fix_length(x, length, rng=np.random.default_rng(seed), random_crop=random_crop)
    assert out.shape == (length, 2) and out.dtype == np.int16
    kept = min(frames, length)
    start = int(out[0, 0]) // 2 if kept else 0
    np.testing.assert_array_equal(out[:kept], x[start : start + kept])  # one contiguous run
    assert (out[kept:] == 0).all()


def test_gain() -> None:
    x = np.array([0.25, -0.5], np.float32)
    np.testing.assert_allclose(gain(x, 20 * math.log10(2)), [0.5, -1.0], rtol=1e-6)
    np.testing.assert_allclose(gain(x, -20.0), [0.025, -0.05], rtol=1e-6)
    assert gain(x, 3.0).dtype == np.float32
    assert gain(np.array([1.0]), 0.0).dtype == np.float64
    assert gain(np.array([2], np.int16), 0.0).dtype == np.float32
