"""The streaming VAD's clear-sound fallback (audio/vad.py): telephone-band speech that Silero is unsure of is heard,
noise alone (white noise, mains hum, babble) opens no more utterances than Silero's threshold alone does, and the
noise floor follows a steady noise but not speech. Its near-talker gate: a talker over babble 10 dB down is heard
and the babble between the turns is not, while clean, reverberant, telephone and quiet speech keep every boundary.
Real Silero v6, real audio from the repository."""

import functools
import json
from pathlib import Path

import numpy as np
import pytest

from audio.io import load_audio
from audio.vad import CHUNK, StreamingVAD

ROOT = Path(__file__).resolve().parents[1]
CONV = ROOT / "bench" / "data" / "conversation"
SR = 16000


@pytest.fixture(scope="module")
def vad_path(runtime):
    return runtime.model("vad").path


@pytest.fixture(scope="module")
def fallback_kw(cfg) -> dict:
    """The default configuration's fallback settings (vad.fallback_threshold, as the runtime passes them)."""
    v = cfg.vad
    return {"fallback_threshold": v.fallback_threshold, "fallback_snr_db": v.fallback_snr_db,
            "noise_rise_db_s": v.noise_rise_db_s}


@pytest.fixture(scope="module")
def gate_kw(fallback_kw, cfg) -> dict:
    """The default configuration's VAD settings with its near-talker gate (vad.near_snr_db, as the runtime passes)."""
    assert cfg.vad.near_snr_db > 0
    return {**fallback_kw, "near_snr_db": cfg.vad.near_snr_db}


def utterances(vad: StreamingVAD, audio: np.ndarray, block: int = 1600) -> list[tuple[float, float]]:
    """(start, end) seconds of each utterance the VAD finds in ``audio`` fed in ``block``-sample blocks."""
    events = []
    for i in range(0, len(audio), block):
        events += vad(audio[i: i + block])
    events += vad.flush()
    starts = [e.t for e in events if e.kind == "start"]
    ends = [e.t for e in events if e.kind == "end"]
    assert len(starts) == len(ends)
    return list(zip(starts, ends))


def speech_covered(spans: list[tuple[float, float]], segments: list[dict], n: int) -> float:
    """Share of the 32 ms chunks inside the reference ``segments`` that the utterance ``spans`` cover."""
    from bench.vad_gate import chunk_mask

    speech = chunk_mask(segments, n)
    return float((speech & chunk_mask(spans, n)).sum() / speech.sum())


def test_telephone_band_speech_is_heard(vad_path, fallback_kw):
    """On a telephone-band dialogue (300–3400 Hz, 8 kHz μ-law) Silero's p stays under its 0.5 threshold over much of
    the speech: the threshold alone misses whole turns; the fallback (clear energy, p ≥ 0.3) hears nearly all."""
    name = "d1_two_voices_telephone.flac"
    segments = json.loads((CONV / "manifest.json").read_text(encoding="utf-8"))["files"][name]["segments"]
    audio = load_audio(CONV / name)
    plain = speech_covered(utterances(StreamingVAD(vad_path), audio), segments, len(audio))
    fallback = speech_covered(utterances(StreamingVAD(vad_path, **fallback_kw), audio), segments, len(audio))
    assert plain < 0.8
    assert fallback >= 0.9 and fallback > plain + 0.1


def test_clean_speech_keeps_its_utterances(vad_path, fallback_kw, jfk_audio):
    """Where Silero is sure (jfk, four phrases), the fallback changes no boundary by more than a chunk or two."""
    plain = utterances(StreamingVAD(vad_path), jfk_audio)
    fallback = utterances(StreamingVAD(vad_path, **fallback_kw), jfk_audio)
    assert len(plain) == len(fallback) == 4
    assert np.abs(np.array(plain) - np.array(fallback)).max() <= 0.1


def test_silence_inside_speech_is_reported_until_the_end(vad_path, fallback_kw, jfk_audio):
    """StreamingVAD.silence_since: None while jfk speaks and outside an utterance; inside an utterance the audio time
    its silence began, which has lasted the pause length when the "pause" event comes (the pause's t is that time
    plus the pad) and is None again at the "end" event (what the transcriber's hold_at_silence reads)."""
    vad = StreamingVAD(vad_path, **fallback_kw)
    assert vad.silence_since is None
    at_pause, at_end, inside = [], [], 0
    block = CHUNK * 2
    for i in range(0, len(jfk_audio), block):
        before = vad.silence_since
        events = vad(jfk_audio[i: i + block])
        for e in events:
            if e.kind == "pause":
                at_pause.append((e.t, vad.silence_since))
            if e.kind == "end":
                at_end.append((e.t, before, vad.silence_since))
        if vad.silence_since is not None:
            inside += 1
            assert vad.in_speech and vad.silence_since <= (i + block) / SR
    assert at_pause and at_end and inside  # jfk pauses between its phrases
    for t, since in at_pause:
        assert since is not None and t == pytest.approx(since + vad.pad / SR, abs=1e-6)
    for t, before, after in at_end:
        assert after is None and before is not None and t == pytest.approx(before + vad.pad / SR, abs=1e-6)


@functools.lru_cache(maxsize=1)
def _langid_clips() -> list[np.ndarray]:
    return [load_audio(p) for p in sorted((CONV / "langid").glob("*.flac"))]


def _babble(n: int, rng: np.random.Generator, talkers: int = 8, dense: bool = False) -> np.ndarray:
    """``talkers`` espeak-ng voices of the language-ID set (bench/data/conversation/langid) summed at equal RMS,
    each from a random offset: unit-RMS babble, float32 (n,). ``dense``: each clip without its 0.4 s of silence
    before and 0.8 s after (as the conversation corpus's babble talkers, who pause 0.1–0.4 s between sentences)."""
    clips = _langid_clips()
    if dense:
        clips = [c[int(0.35 * SR): -int(0.75 * SR)] for c in clips]
    out = np.zeros(n, np.float32)
    for _ in range(talkers):
        x = np.concatenate([clips[i] for i in rng.permutation(len(clips))])
        s = int(rng.integers(0, len(x) - n))
        x = x[s: s + n]
        out += x / np.sqrt(np.mean(x ** 2))
    return out / np.sqrt(np.mean(out ** 2))


@pytest.mark.parametrize("kind,level_db", [("white", -50), ("white", -35), ("hum", -30), ("babble", -35),
                                           ("babble", -25)])
def test_noise_alone_opens_no_more_utterances(vad_path, fallback_kw, kind, level_db):
    """Noise alone at the levels of the conversational corpora: steady noise and hum open nothing (the noise floor
    follows them, so their energy is never clear), and babble — speech to Silero — opens no more utterances with
    the fallback than without it."""
    rng = np.random.default_rng(7)
    n = 20 * SR
    t = np.arange(n) / SR
    x = {"white": lambda: rng.standard_normal(n),
         "hum": lambda: np.sin(2 * np.pi * 50 * t) + 0.3 * np.sin(2 * np.pi * 150 * t),
         "babble": lambda: _babble(n, rng)}[kind]()
    x = (x / np.sqrt(np.mean(x ** 2)) * 10 ** (level_db / 20)).astype(np.float32)
    plain = utterances(StreamingVAD(vad_path), x)
    fallback = utterances(StreamingVAD(vad_path, **fallback_kw), x)
    assert len(fallback) <= len(plain)
    if kind != "babble":
        assert fallback == []


def test_noise_floor_follows_steady_noise_not_speech(vad_path, fallback_kw, jfk_audio):
    """The floor tracks a steady noise within seconds (rise ≤ 3 dB/s) and, under speech, stays near the quiet
    chunks between words: far below the speech's own energy."""
    rng = np.random.default_rng(3)
    quiet = (rng.standard_normal(2 * SR) * 10 ** (-70 / 20)).astype(np.float32)
    loud = (rng.standard_normal(12 * SR) * 10 ** (-40 / 20)).astype(np.float32)
    vad = StreamingVAD(vad_path, **fallback_kw)
    vad(quiet)
    assert vad.noise_floor_db == pytest.approx(-70, abs=6)
    vad(loud[: 4 * SR])
    assert vad.noise_floor_db < -70 + 3 * 4 + 3  # it may not rise faster than 3 dB/s
    vad(loud[4 * SR:])
    assert vad.noise_floor_db == pytest.approx(-40, abs=2)  # ... but it reaches a steady noise (30 dB in 10 s)
    vad = StreamingVAD(vad_path, **fallback_kw)
    vad(np.concatenate([quiet, jfk_audio]))
    speech_db = 10 * np.log10(np.mean(jfk_audio ** 2))
    assert vad.noise_floor_db < speech_db - 20


def _covered(spans: list[tuple[float, float]], regions: list[tuple[float, float]], n: int) -> float:
    """Share of the 32 ms chunks inside ``regions`` (start, end seconds) that the utterance ``spans`` cover."""
    return speech_covered(spans, [{"start": a, "end": b} for a, b in regions], n)


def test_near_talker_is_heard_over_babble(vad_path, fallback_kw, gate_kw, jfk_audio):
    """jfk twice, 5 s apart, over eight-talker babble 10 dB below his speech (the conversation corpus's babble
    condition). Without the gate the babble is speech to Silero: one utterance over everything. With it the gate
    turns on, every chunk of jfk's speech (his utterances in quiet, less their pads) is inside an utterance, and
    most of the babble-only time (after the first 3 s, past each hangover) is not."""
    pad = 0.2  # the default speech_pad_s, which the quiet utterances include
    quiet = utterances(StreamingVAD(vad_path, **gate_kw), jfk_audio)
    assert len(quiet) == 4
    jfk_s = len(jfk_audio) / SR
    near = np.concatenate([np.zeros(5 * SR), jfk_audio, np.zeros(5 * SR), jfk_audio, np.zeros(3 * SR)])
    frames = jfk_audio[: len(jfk_audio) // CHUNK * CHUNK].reshape(-1, CHUNK).astype(np.float64) ** 2
    energy_db = 10 * np.log10(frames.mean(1) + 1e-12)
    speech_power = frames[energy_db > energy_db.max() - 30].mean()  # jfk's speech, not his pauses
    babble = _babble(len(near), np.random.default_rng(7), dense=True) * np.sqrt(speech_power / 10 ** (10 / 10))
    x = (near + babble).astype(np.float32)
    second = 5 + jfk_s + 5
    speech = [(a + pad + o, b - pad + o) for o in (5, second) for a, b in quiet]
    babble_only = [(3.0, 5 - pad), (5 + jfk_s + 0.8, second - pad), (second + jfk_s + 0.8, len(x) / SR)]

    plain = utterances(StreamingVAD(vad_path, **fallback_kw), x)
    assert _covered(plain, babble_only, len(x)) > 0.9

    vad = StreamingVAD(vad_path, **gate_kw)
    gated = utterances(vad, x)
    assert vad.near_gate and vad.background_db is not None
    assert _covered(gated, speech, len(x)) == 1.0
    assert _covered(gated, babble_only, len(x)) < 0.5
    assert len(gated) >= 4


@pytest.mark.parametrize("name", ["jfk", "quiet jfk", "hesitation_en.flac", "d1_two_voices_clean.flac",
                                  "d1_two_voices_reverb.flac", "d1_two_voices_telephone.flac",
                                  "d2_three_voices_telephone.flac"])
def test_gate_stays_off_without_background_speech(vad_path, fallback_kw, gate_kw, jfk_audio, name):
    """Where the background is silence, room noise or a line's hiss (clean, reverberant and telephone dialogues, a
    hesitant espeak-ng sentence, jfk and jfk 40 dB quieter over faint noise: a quiet talker in a quiet room), the
    gate stays off and every utterance boundary is the one without it."""
    if name == "jfk":
        x = jfk_audio
    elif name == "quiet jfk":
        noise = np.random.default_rng(5).standard_normal(len(jfk_audio)) * 10 ** (-85 / 20)
        x = (jfk_audio * 10 ** (-40 / 20) + noise).astype(np.float32)
    else:
        x = load_audio((CONV if name.startswith("d") else ROOT / "tests" / "data") / name)
    plain = utterances(StreamingVAD(vad_path, **fallback_kw), x)
    vad = StreamingVAD(vad_path, **gate_kw)
    assert utterances(vad, x) == plain
    assert len(plain) >= 1 and not vad.near_gate


def test_babble_alone_is_mostly_not_speech_with_the_gate(vad_path, fallback_kw, gate_kw):
    """Babble alone (20 s, the corpus-like dense babble): Silero's rule holds one utterance over it; with the gate
    on (from the first seconds) most of it is outside utterances (a babble's louder moments still open short ones)."""
    x = (_babble(20 * SR, np.random.default_rng(11), dense=True) * 10 ** (-25 / 20)).astype(np.float32)
    plain = utterances(StreamingVAD(vad_path, **fallback_kw), x)
    vad = StreamingVAD(vad_path, **gate_kw)
    gated = utterances(vad, x)
    assert _covered(plain, [(3.0, 20.0)], len(x)) > 0.9
    assert vad.near_gate
    assert _covered(gated, [(3.0, 20.0)], len(x)) < 0.5
