"""The language-ID head's training data (engine.training.lid_head): the babble and telephone augmentations, and the
per-language claims that let several workers make the data at once; the models' atomic join (engine.models)."""

import os
import random

import numpy as np
import pytest

from engine.training import lid_head as L


def _tone(seconds: float, f: float = 220.0, sr: int = 16000) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    return (0.3 * np.sin(2 * np.pi * f * t)).astype(np.float32)


@pytest.mark.parametrize("n", [8000, 40000])  # utterance shorter and longer than the pool's
def test_babble_is_mixed_in_at_5_to_20_db_snr(n):
    rng = random.Random(0)
    pool = [np.random.default_rng(i).standard_normal(20000).astype(np.float32) for i in range(6)]
    a = _tone(n / 16000)
    for _ in range(20):
        b = L._babble(a, pool, rng) - a
        snr = 10 * np.log10(np.mean(a ** 2) / np.mean(b ** 2))
        assert 5.0 - 1e-3 <= snr <= 20.0 + 1e-3
        assert b.shape == a.shape and b.dtype == np.float32


def test_telephone_band_removes_what_a_phone_line_cannot_carry():
    sr = 16000
    a = _tone(1.0, 100.0) + _tone(1.0, 1000.0) + _tone(1.0, 6000.0)
    for mu_law in (False, True):
        b = L._telephone(a, mu_law=mu_law)
        spec = np.abs(np.fft.rfft(b[sr // 4: 3 * sr // 4]))
        f = np.fft.rfftfreq(sr // 2, 1 / sr)
        at = {hz: spec[np.argmin(np.abs(f - hz))] for hz in (100, 1000, 6000)}
        assert at[1000] > 20 * at[100] and at[1000] > 20 * at[6000]
    # 8-bit μ-law coding is not transparent: the coded signal differs from the band-limited one
    assert not np.allclose(L._telephone(a, mu_law=True), L._telephone(a))


def test_a_language_is_claimed_by_one_worker_only(tmp_path):
    path = tmp_path / "fr.npz"
    assert L._claim(path)
    assert not L._claim(path)  # another worker holds the lock
    path.write_bytes(b"done")
    assert not L._claim(path)  # made already
    os.remove(str(path) + ".lock")
    assert not L._claim(path) and not os.path.exists(str(path) + ".lock")


def test_parts_are_joined_under_a_name_of_the_process_own(tmp_path):
    from engine.models import join_parts

    parts = []
    for i in range(3):
        p = tmp_path / f"model.bin.part{i}"
        p.write_bytes(bytes([i]) * 1000)
        parts.append(p)
    other = tmp_path / "model.bin.partial"  # another process's join in progress is left alone
    other.write_bytes(b"x")
    join_parts(parts, tmp_path / "model.bin", progress=False)
    assert (tmp_path / "model.bin").read_bytes() == b"".join(p.read_bytes() for p in parts)
    assert other.read_bytes() == b"x"
    assert not list(tmp_path.glob(f"model.bin.{os.getpid()}.partial"))
