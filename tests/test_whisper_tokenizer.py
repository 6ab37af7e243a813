"""Whisper's BPE tokenizer as loaded from the packaged models: a merge lost from tokenizer.json is restored, so text
is encoded into the tokens the model itself generates (prompts and drafts depend on it)."""

import json
from pathlib import Path

import pytest

from engine.asr.tokenizer import load_hf_tokenizer, repair_bpe_merges


def _dir(runtime, role) -> Path:
    p = Path(runtime.model(role).path)
    return p if p.is_dir() else p.parent


def test_packaged_tokenizers_encode_common_words_as_one_token(runtime):
    for role in ("asr_target", "asr_draft"):
        tok = load_hf_tokenizer(_dir(runtime, role))
        for w in (" the", " to", " think", " than", " that"):
            assert len(tok.encode(w, add_special_tokens=False).ids) == 1, (role, w)


@pytest.mark.parametrize("drop", [0, 1, 57, 4000])
def test_a_dropped_merge_is_restored_exactly(runtime, drop):
    data = json.loads((_dir(runtime, "asr_draft") / "tokenizer.json").read_text())
    original = list(data["model"]["merges"])
    del data["model"]["merges"][drop]
    restored = repair_bpe_merges(data)
    assert restored == [original[drop]]
    assert data["model"]["merges"] == original
    assert repair_bpe_merges(data) == []  # nothing more to do


def test_the_model_reads_back_its_own_transcript(runtime):
    """Greedy tokens of recorded speech, decoded to text and encoded again, are the same tokens (they were not
    before the repair: " than"/" the"/" to" came back as two tokens each)."""
    from audio.io import load_audio

    audio = load_audio(Path(__file__).parents[1] / "bench/data/stream_speech/dialogue_1.flac")[: 16000 * 12]
    m = runtime.whisper_ssd()
    segs, _ = m.fw.transcribe(audio, beam_size=1, language="en", without_timestamps=True)
    segs = list(segs)
    toks = [t for s in segs for t in s.tokens if t < m.tok.eot]
    text = m.tok.decode(toks)
    assert any(f" {w}" in text for w in ("than", "the", "that", "to", "times"))
    assert m.tok.encode(text) == toks


def test_a_tokenizer_not_in_rank_order_is_left_alone():
    data = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 7, "ba": 3},
                      "merges": ["b a", "a b"]}}
    assert repair_bpe_merges(data) == []
    assert data["model"]["merges"] == ["b a", "a b"]


def test_the_repair_is_silent_at_the_default_log_level(runtime, caplog):
    """Loading the packaged tokenizers in a fresh process prints nothing on stderr (the repair is routine, not a
    warning for the user); the repair itself is still logged, at debug level."""
    import logging
    import subprocess
    import sys

    import engine.asr.tokenizer as tokmod

    dirs = [str(_dir(runtime, role)) for role in ("asr_target", "asr_draft")]
    code = ("import sys\nfrom engine.asr.tokenizer import load_hf_tokenizer\n"
            "for d in sys.argv[1:]:\n"
            "    print(len(load_hf_tokenizer(d).encode(' the', add_special_tokens=False).ids))\n")
    r = subprocess.run([sys.executable, "-c", code, *dirs], cwd=Path(__file__).parents[1], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.split() == ["1", "1"], r.stdout + r.stderr
    assert r.stderr == ""
    tokmod._warned.clear()
    with caplog.at_level(logging.DEBUG, logger=tokmod.__name__):
        load_hf_tokenizer(dirs[0])
    (rec,) = [r for r in caplog.records if "BPE merge" in r.getMessage()]
    assert rec.levelno == logging.DEBUG and "Ġ t" in rec.getMessage()
