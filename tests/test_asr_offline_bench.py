"""``specvoice bench asr-offline``: offline Whisper transcripts of shifted audio against the unshifted beam-5 one."""

import json
from pathlib import Path

import numpy as np

from bench import asr_offline_bench as B

ROOT = Path(__file__).resolve().parents[1]


def test_a_shift_puts_exact_silence_before_the_unchanged_audio():
    a = np.random.default_rng(0).standard_normal(1600).astype(np.float32)
    z = B.shifted(a, 0.05)
    assert z.dtype == np.float32 and len(z) == 1600 + 800
    assert not z[:800].any() and np.array_equal(z[800:], a)


def test_non_speech_files_count_with_their_corpus():
    d = ROOT / "bench" / "data" / "stream_speech"
    assert B.corpus_of(d / "nonspeech" / "tones_10s.flac") == B.corpus_of(d / "dialogue_1.flac")
    assert B.corpus_of(ROOT / "bench" / "data" / "stream_speech_heldout" / "dialogue_1.flac") != B.corpus_of(
        d / "dialogue_1.flac")


def test_jfk_offline_transcripts_at_a_shift_on_real_whisper_base(jfk_path, tmp_path):
    out = tmp_path / "off.json"
    assert B.main([str(jfk_path), "--shifts", "0.1", "--out", str(out), "--quiet"]) == 0
    d = json.loads(out.read_text())
    (row,) = d["per_file"]
    for dec in ("greedy", "beam5"):
        assert set(row["text"][dec]) == {"0", "0.1"}
        assert "ask not what your country can do for you" in row["text"][dec]["0.1"].lower()
    (corpus,) = d["per_corpus"].values()
    assert corpus["speech_files"] == 1 and corpus["ref_words"] == 22
    # jfk.flac is clean speech: both decoders read it right, shifted or not
    assert corpus["greedy"]["wer_vs_ref"] == 0.0
    assert corpus["beam5"]["shifted"]["0.1"]["wer_vs_beam5"] == 0.0


def test_a_shift_out_of_range_is_refused(jfk_path, tmp_path):
    assert B.main([str(jfk_path), "--shifts", "0", "--out", str(tmp_path / "x.json"), "--quiet"]) == 2
