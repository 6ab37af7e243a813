"""The conversational evaluation set and its benchmark: the WER normalisation (fillers on both sides), the committed
data against its manifests, the generator's reproducibility, and one fast run on jfk.flac with real Whisper base."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from bench.conversation_scoring import (ConversationWER, done_when, multilingual_metrics, normalise, span_language,
                                        words_missed)
from bench.make_conversation import CONDITIONS, DIALOGUES, HESITATION_S, pieces, reference_text

ROOT = Path(__file__).resolve().parents[1]
CONV = ROOT / "bench" / "data" / "conversation"
REAL = ROOT / "bench" / "data" / "real_speech"
JFK_TEXT = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


# -------------------------------------------------------------------------------------------- normalisation
def test_fillers_are_removed_from_both_sides():
    W = ConversationWER()
    said = "So, um, the early one leaves at six. Mm-hmm. I mean, we could— we should, uh, go."
    heard = "So the early one leaves at 6. I mean, we could, we should go."
    assert normalise(said) == normalise(heard) == "so the early one leaves at 6 i mean we could we should go"
    assert W.wer(said, heard) == 0.0  # fillers in the reference only
    assert W.wer("So the early one leaves at six.", "Uh, so the early one, um, leaves at six. Uh-huh. Hmm.") == 0.0
    assert W.wer("Yeah, OK.", "Yeah. Okay.") == 0.0  # "ok" and "okay" are one word
    assert W.wer("Mm-hmm.", "M-M-M.") is None  # nothing lexical was said: no WER
    # lexical backchannels and restarts are words: dropping them is an error
    assert normalise("Yeah. Okay.") == "yeah okay"
    assert W.wer("I mean, we could— we should go.", "I mean, we should go.") == pytest.approx(2 / 7, abs=1e-4)
    # words that merely contain a filler stay
    kept = "Uhuru took the umbrella, ahead of a hummingbird."
    assert normalise(kept) == "uhuru took the umbrella ahead of a hummingbird"
    d = W.detail("we could— we should go", "we should go now")
    assert (d["del"], d["ins"], d["ref_words"]) == (2, 1, 5)


def test_words_missed_is_order_free():
    ref = ["Menu, alright. Um, a little L C D display.", "Mm. Yeah."]
    r = words_missed(ref, "yeah a display menu little alright")
    assert r["ref_words"] == 9 and r["missed"] == 3  # l, c, d
    assert r["share"] == pytest.approx(3 / 9, abs=1e-4)


def test_multilingual_parts_and_language_per_utterance():
    spans = [[0.0, 30.0, "en"], [30.0, 60.0, "de"]]
    assert span_language(spans, 25.0, 34.0) == "en" and span_language(spans, 28.0, 40.0) == "de"
    off = {"parts": {"en": {"beam5": "permission is hereby granted", "greedy": "permission is hereby granted"},
                     "de": {"beam5": "die genehmigung wird erteilt", "greedy": "die genehmigung erteilt"}},
           "beam5": "permission is hereby granted die genehmigung wird erteilt",
           "greedy": "permission is hereby granted die genehmigung erteilt"}
    stream = {"text": "Permission is hereby granted. The permission is granted.",
              "utterance_detail": [
                  {"t_start": 0.5, "t_end": 4.0, "text": "Permission is hereby granted.", "language": "en"},
                  {"t_start": 31.0, "t_end": 35.0, "text": "The permission is granted.", "language": "en"}]}
    r = multilingual_metrics(off, spans, stream)
    assert r["parts"]["en"]["stream_wer_vs_beam5"] == 0.0
    assert r["parts"]["de"]["offline_greedy_wer_vs_beam5"] == 0.25  # "wird" missing
    assert r["parts"]["de"]["stream_wer_vs_beam5"] == 1.0  # German spoken, English written
    assert r["language_accuracy"] == 0.5 and [u["right"] for u in r["utterances"]] == [True, False]
    rep = {"multilingual": {"per_method": {"default": r}}}
    assert done_when(rep)["multilingual/default"]["ok"] is False


# ------------------------------------------------------------------------------------------- committed data
def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_conversation_files_match_their_manifest():
    import soundfile as sf

    m = json.loads((CONV / "manifest.json").read_text(encoding="utf-8"))
    refs = json.loads((CONV / "refs.json").read_text(encoding="utf-8"))
    assert set(m["files"]) == {f"{d.name}_{c}.flac" for d in DIALOGUES for c in CONDITIONS} == set(refs)
    total = 0.0
    for rel, e in m["files"].items():
        p = CONV / rel
        assert _sha(p) == e["sha256"], rel
        info = sf.info(str(p))
        assert (info.samplerate, info.channels, info.frames, info.subtype) == (16000, 1, e["samples"], "PCM_16")
        assert refs[rel] == e["reference"]
        dlg = next(d for d in DIALOGUES if d.name == e["dialogue"])
        assert e["reference"] == " ".join(reference_text(t) for _, _, t in dlg.turns)
        assert 2 <= len(e["voices"]) <= 4
        hes = [p["seconds"] for p in e["pauses"] if p["kind"] == "hesitation"]
        assert hes and all(HESITATION_S[0] <= s <= HESITATION_S[1] for s in hes)
        assert any(s["kind"] == "overlap" for s in e["segments"]) and any(s["kind"] == "backchannel"
                                                                          for s in e["segments"])
        total += e["duration_s"]
    assert 4 * 60 <= total <= 6.2 * 60
    # every dialogue under every condition, the same speech
    for d in DIALOGUES:
        assert len({m["files"][f"{d.name}_{c}.flac"]["samples"] for c in CONDITIONS}) == 1
    # language ID: ≥ 10 utterances of ≥ 2 s per language; German ones carry their Multi30k English reference
    lrefs = json.loads((CONV / "langid" / "refs.json").read_text(encoding="utf-8"))
    by_lang: dict[str, int] = {}
    for rel, e in m["langid"].items():
        assert _sha(CONV / rel) == e["sha256"] and lrefs[Path(rel).name] == e["text"]
        assert e["speech_s"] >= 2.0
        assert (e["reference_en"] is not None) == (e["language"] == "de")
        by_lang[e["language"]] = by_lang.get(e["language"], 0) + 1
    assert set(by_lang) == {"de", "fr", "es"} and min(by_lang.values()) >= 10
    size = sum(p.stat().st_size for d in (CONV, REAL) for p in d.rglob("*") if p.is_file())
    assert size < 15 * 2 ** 20


def test_real_recordings_match_their_manifest():
    from audio.io import load_audio

    m = json.loads((REAL / "manifest.json").read_text(encoding="utf-8"))
    assert {"jfk.flac", "faster_whisper_multilingual.mp3", "faster_whisper_stereo_two_speakers.wav",
            "pyannote_telephone_two_speakers.wav", "ami_meeting_four_speakers_60s.wav"} == set(m["files"])
    readme = (REAL / "README.md").read_text(encoding="utf-8")
    for name, e in m["files"].items():
        assert _sha(REAL / name) == e["sha256"] and e["licence"] and e["source"] and name in readme
        for side in e["sidecars"]:
            assert (REAL / side).is_file()
        assert abs(len(load_audio(REAL / name)) / 16000 - e["duration_s"]) < 0.02
    assert m["files"]["jfk.flac"]["reference"] == JFK_TEXT
    tel = m["files"]["pyannote_telephone_two_speakers.wav"]
    assert tel["reference"].startswith("Hello? Hello? Oh, hello.") and len(tel["segments"]) == 13
    assert "LCD" in m["files"]["ami_meeting_four_speakers_60s.wav"]["speaker_words"]["D"]
    assert [s[2] for s in m["files"]["faster_whisper_multilingual.mp3"]["language_spans"]] == ["en", "de"]


# ----------------------------------------------------------------------------------------------- generator
def test_script_marks():
    assert pieces("we could— we should | um | go.") == [("we could—", "restart"), ("we should", "hesitation"),
                                                         ("um", "hesitation"), ("go.", None)]
    assert reference_text("we could— we should | um | go.") == "we could— we should um go."


@needs_espeak
def test_generator_is_reproducible():
    import numpy as np

    from bench.make_conversation import build_dialogue, build_langid

    m = json.loads((CONV / "manifest.json").read_text(encoding="utf-8"))
    a, b = build_dialogue(0), build_dialogue(0)
    assert list(a) == [f"{DIALOGUES[0].name}_{c}.flac" for c in CONDITIONS]
    for rel in a:
        assert a[rel]["reference"] == b[rel]["reference"] == m["files"][rel]["reference"]
        assert a[rel]["segments"] == b[rel]["segments"] and a[rel]["pauses"] == b[rel]["pauses"]
        assert len(a[rel]["audio"]) == len(b[rel]["audio"])
        assert np.array_equal(a[rel]["audio"], b[rel]["audio"])
        # the committed file was made by this generator (ONNX Runtime may round differently on another CPU)
        assert len(a[rel]["audio"]) == pytest.approx(m["files"][rel]["samples"], rel=0.02)
    # the four conditions hold the same speech: the overlap is mixed in before the condition
    lens = {len(f["audio"]) for f in a.values()}
    assert len(lens) == 1
    la, lb = build_langid(), build_langid()
    assert {k: (v["text"], len(v["audio"])) for k, v in la.items()} == \
        {k: (v["text"], len(v["audio"])) for k, v in lb.items()} == \
        {k: (v["text"], v["samples"]) for k, v in m["langid"].items()}


# ------------------------------------------------------------------------------------------------ the bench
def test_bench_on_jfk_with_whisper_base(tmp_path):
    from bench.conversation_bench import main

    out = tmp_path / "conversation.json"
    assert main(["--corpus", "real", "--only", "jfk", "--fast", "--quiet", "--out", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["config"]["complete"] and not rep["config"]["realtime"]
    (f,) = rep["real"]["per_file"]
    assert f["ref"] == JFK_TEXT
    off = f["offline"]
    assert off["greedy_wer_vs_ref"] == 0.0 and off["beam5_wer_vs_ref"] == 0.0  # Whisper base hears jfk exactly
    W = ConversationWER()
    x = f["methods"]["default"]
    assert "fellow americans" in normalise(x["text"])
    assert x["wer_vs_ref"] == W.wer(JFK_TEXT, x["text"]) and x["wer_vs_ref"] <= 0.1
    assert x["wer_vs_beam5"] == W.wer(off["beam5"], x["text"])
    s = rep["real"]["per_method"]["default"]
    assert s["offline_greedy_wer_vs_ref"] == 0.0 and s["wer_vs_ref"] == x["wer_vs_ref"]
    assert s["final_latency_s"]["n"] >= 1 and s["compute_ratio"] > 0
    # the compute splits into the live path and the second pass (which re-decoded jfk at the end of the stream)
    assert s["second_pass_compute_ratio"] > 0 and s["live_compute_ratio"] > 0
    assert s["live_compute_ratio"] + s["second_pass_compute_ratio"] == pytest.approx(s["compute_ratio"], abs=2e-4)
    # one word wrong of 22 on the same real transcript
    wrong = off["greedy"].replace("country can", "county can")
    assert W.wer(JFK_TEXT, wrong) == pytest.approx(1 / 22, abs=1e-4)


def test_the_real_corpus_is_the_english_recordings_and_the_multilingual_corpus_the_others():
    from bench.conversation_bench import load_items

    real, multi = load_items(["real"]), load_items(["multilingual"])
    assert real and multi and {i.corpus for i in real} == {"real"} and {i.corpus for i in multi} == {"multilingual"}
    assert all(i.group == "en" for i in real) and all("," in i.group for i in multi)
    both = load_items(["real", "multilingual"])
    assert sorted(i.name for i in both) == sorted(i.name for i in real + multi)


def test_captions_into_refuses_a_result_of_other_settings_before_loading_a_model(tmp_path, capsys):
    """--captions-into adds captions only to a result measured with the same ASR settings, and leaves it untouched
    otherwise."""
    from bench.conversation_bench import main

    import dataclasses

    from engine.config import load_config

    res = tmp_path / "language.json"
    rep = json.loads((ROOT / "bench" / "results" / "language.json").read_text())  # the language job's result
    rep["config"]["settings"]["default"]["asr"] = json.loads(json.dumps(dataclasses.asdict(load_config().asr)))
    res.write_text(json.dumps(rep))  # a result measured with the settings as they are now
    before = res.read_bytes()
    assert main(["--corpus", "langid", "--captions-into", str(res), "--set", "asr.language_head=1.5"]) == 2
    err = capsys.readouterr().err
    assert "other ASR settings (language_head)" in err and "Traceback" not in err
    assert main(["--corpus", "real", "--captions-into", str(res)]) == 2
    assert "--corpus langid" in capsys.readouterr().err
    res.write_text(json.dumps({"config": {}}))
    assert main(["--corpus", "langid", "--captions-into", str(res)]) == 2
    assert "no language-ID result" in capsys.readouterr().err
    res.write_bytes(before)
    assert main(["--corpus", "langid", "--captions-into", str(tmp_path / "none.json")]) == 2
    assert res.read_bytes() == before


def test_offline_greedy_reference_repeats_on_the_real_telephone_call(runtime):
    """Greedy is temperature 0 alone: with faster-whisper's default fallback, windows of this call that fail its
    thresholds are re-decoded by sampling and the reference text changed from run to run."""
    from faster_whisper import WhisperModel

    from audio.io import load_audio
    from bench.conversation_bench import Offline

    off = Offline(WhisperModel(str(runtime.model("asr_target").path), device="cpu", compute_type="int8"))
    audio = load_audio(REAL / "pyannote_telephone_two_speakers.wav")
    texts = {off.transcribe(audio, 1)["text"] for _ in range(3)}
    assert len(texts) == 1 and len(next(iter(texts)).split()) > 20


def test_causal_final_keeps_each_word_of_a_decode_once(runtime, jfk_audio):
    """bench causal-final: with a look-ahead past the end of the file every decode hears all of it, so the pieces
    kept at the ends of speech are the whole-file decode's words, each once; without look-ahead the first piece is
    decoded from the audio before its end only (its text, then the rest of the sentence in the second piece)."""
    from faster_whisper import WhisperModel

    from bench.causal_final_bench import causal_words

    model = WhisperModel(str(runtime.model("asr_target").path), device="cpu", compute_type="int8")
    segs, _ = model.transcribe(jfk_audio, language="en", beam_size=1, temperature=0.0, word_timestamps=True,
                               vad_filter=False)
    whole = [w for s in segs for w in s.words]
    ends = [whole[7].end + 0.05, len(jfk_audio) / 16000]  # the first end of speech after the eighth word
    pieces = causal_words(model, jfk_audio, ends, beam_size=1, lookahead_s=30.0)
    assert len(pieces) == 2 and all(pieces)
    assert normalise(" ".join(pieces)) == normalise("".join(w.word for w in whole))
    assert normalise(pieces[0]) == normalise("".join(w.word for w in whole[:8]))
    causal = causal_words(model, jfk_audio, ends, beam_size=1, lookahead_s=0.0)
    assert len(causal) == 2 and "fellow americans" in normalise(causal[0])
    assert ConversationWER().wer(JFK_TEXT, " ".join(causal)) <= 0.15
