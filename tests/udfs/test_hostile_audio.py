"""Hostile audio: header sample rates and lengths that ask for unbounded memory or time.

WAV files are built here (soundfile, or a hand-written header where libsndfile will not
write the rate), so each test shows which header field is hostile. Rates, ratios and
sample counts are checked against ``dataio.limits`` before a sample is read or a filter
designed; the sinc resampler's cost follows outputs x taps, not the rates' gcd.
"""

from __future__ import annotations

import io
import math
import time

import numpy as np
import pytest
import soundfile
from scipy.signal import resample_poly

import dataio
from dataio.exceptions import LimitError
from dataio.udfs import audio as audio_module
from dataio.udfs.audio import decode_audio, resample_linear, resample_sinc


def wav(samples: np.ndarray, rate: int) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def with_rate(data: bytes, rate: int) -> bytes:
    """A WAV with its fmt chunk's sample rate (and byte rate) replaced."""
    at = data.index(b"fmt ") + 8
    out = bytearray(data)
    block_align = int.from_bytes(out[at + 12 : at + 14], "little")
    out[at + 4 : at + 8] = rate.to_bytes(4, "little")
    out[at + 8 : at + 12] = (rate * block_align % 2**32).to_bytes(4, "little")
    return bytes(out)


def tone(frames: int, rate: int, hz: float = 440.0) -> np.ndarray:
    return (0.5 * np.sin(2 * np.pi * hz * np.arange(frames) / rate)).astype(np.float32)


def max_rate_wav() -> bytes:
    """A 1 KB WAV whose header says 2**31 - 1 Hz: sinc to 16 kHz would design a bank
    of 320 GiB."""
    return with_rate(wav(tone(480, 16000), 16000), 2**31 - 1)


def prime_rate_wav() -> bytes:
    """A 1 KB WAV at 999,983 Hz (a prime): its phase bank against 16 kHz took 10 s."""
    return wav(tone(480, 999_983, 1000.0), 999_983)


@pytest.mark.parametrize("resampling", ["linear", "sinc"])
def test_header_sample_rate_over_the_limit_is_refused(resampling: str) -> None:
    data = max_rate_wav()
    assert len(data) < 1100
    assert soundfile.info(io.BytesIO(data)).samplerate == 2**31 - 1  # libsndfile reads it
    with pytest.raises(LimitError, match="max_sample_rate") as info:
        decode_audio(data, sample_rate=16000, resampling=resampling)  # type: ignore[arg-type]
    assert info.value.value == 2**31 - 1
    with pytest.raises(LimitError, match="max_sample_rate"):
        decode_audio(data)  # decoding alone would hand the rate on


def test_target_rate_and_ratio_limits() -> None:
    data = wav(tone(1000, 8000), 8000)
    with pytest.raises(LimitError, match="max_sample_rate"):
        decode_audio(data, sample_rate=1_000_000)
    with pytest.raises(LimitError, match="max_resample_ratio") as info:
        decode_audio(data, sample_rate=8000 * 65)
    assert info.value.value == 65
    with pytest.raises(LimitError, match="max_resample_ratio"):
        resample_sinc(tone(100, 8000), 8000 * 96, 8000)
    with dataio.limits.scoped(max_resample_ratio=65):
        out, rate = decode_audio(data, sample_rate=8000 * 65)
    assert rate == 8000 and out.shape == (65000, 1)


def test_sample_counts_are_checked_before_and_after_resampling() -> None:
    data = wav(np.stack([tone(1000, 8000)] * 2, axis=1), 8000)
    with dataio.limits.scoped(max_audio_samples=1999), pytest.raises(LimitError) as info:
        decode_audio(data)
    assert info.value.value == 2000 and info.value.name == "max_audio_samples"
    with dataio.limits.scoped(max_audio_samples=2000):
        assert decode_audio(data)[0].shape == (1000, 2)
        # mono before resampling: 1000 frames at 8 kHz -> 2000 at 16 kHz fit
        assert decode_audio(data, sample_rate=16000, mono=True)[0].shape == (2000,)
        with pytest.raises(LimitError, match="resampled"):
            decode_audio(data, sample_rate=16000)  # 2 channels x 2000 frames
        with pytest.raises(LimitError):
            resample_linear(np.zeros((1000, 2), np.float32), 8000, 16000)


def test_prime_rate_resamples_in_time_and_correctly() -> None:
    data = prime_rate_wav()
    assert len(data) < 1100
    with pytest.raises(LimitError, match="max_sample_rate"):
        decode_audio(data, sample_rate=16000, resampling="sinc")
    with dataio.limits.scoped(max_sample_rate=1_000_000):
        started = time.perf_counter()
        out, rate = decode_audio(data, sample_rate=16000, resampling="sinc")
        elapsed = time.perf_counter() - started
    assert rate == 999_983 and out.shape == (math.ceil(480 * 16000 / 999_983), 1)
    assert elapsed < 2.0, elapsed  # 10 s before: the bank of a 20M-tap prototype
    # a long clip checks the filter itself: the interior is the 1 kHz tone at 16 kHz
    with dataio.limits.scoped(max_sample_rate=1_000_000):
        long = resample_sinc(tone(300_000, 999_983, 1000.0), 999_983, 16000)
    expected = tone(long.shape[0], 16000, 1000.0)
    np.testing.assert_allclose(long[50:-50], expected[50:-50], atol=2e-3)


@pytest.mark.parametrize(("from_rate", "to_rate"), [(44100, 16000), (22050, 44100)])
def test_direct_sinc_agrees_with_resample_poly(
    from_rate: int, to_rate: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the per-output path, forced for rates whose bank is small, against scipy
    monkeypatch.setattr(audio_module, "_MAX_BANK_TAPS", 0)
    x = np.random.default_rng(6).uniform(-1, 1, (6000, 2)).astype(np.float32)
    g = math.gcd(from_rate, to_rate)
    expected = resample_poly(x.astype(np.float64), to_rate // g, from_rate // g, axis=0)
    out = resample_sinc(x, from_rate, to_rate)
    assert out.shape == expected.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, expected, atol=2e-3)


def test_limit_errors_are_not_reported_as_corrupt_audio() -> None:
    # LimitError is a ValueError: the decoder's ValueError mapping must let it through
    with dataio.limits.scoped(max_audio_samples=10), pytest.raises(LimitError):
        decode_audio(wav(tone(100, 8000), 8000))
