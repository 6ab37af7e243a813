"""Length-scaled encoding, decode guards and long audio, on Whisper base and real speech."""

import re

import numpy as np
import pytest

from engine.asr.window import DecodeGuard, WindowPolicy, compression_ratio, log_mel, loop_start, split_point

from .conftest import JFK_TEXT, ROOT


def _norm(s: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]", " ", s.lower()).split())


def _text(res) -> str:
    return "".join(w.text for w in res.words).strip()


def test_window_policy_lengths():
    p = WindowPolicy(margin_s=4.0, min_s=6.0)
    assert p.n_frames(16000) == 600  # 1 s + 4 s margin < 6 s minimum
    assert p.n_frames(int(10.2 * 16000)) == 1450  # 14.2 s, rounded up to 0.5 s
    assert p.n_frames(30 * 16000) == 3000
    assert all(p.n_frames(n) % 2 == 0 for n in range(0, 480000, 7919))
    assert WindowPolicy(margin_s=0.0, min_s=1.0, bucket_s=0.1).n_frames(int(1.55 * 16000)) == 200  # ≥ 2 s
    assert WindowPolicy("padded").n_frames(16000) == 3000
    with pytest.raises(ValueError):
        p.n_frames(30 * 16000 + 1)
    with pytest.raises(ValueError):
        WindowPolicy("short")


def test_scaled_features_equal_the_padded_window_where_the_audio_is(runtime, jfk_audio):
    fe = runtime.whisper_ssd().fw.feature_extractor
    short = log_mel(fe, jfk_audio, 1500)
    padded = log_mel(fe, jfk_audio, 3000)
    assert short.shape == (80, 1500) and padded.shape == (80, 3000)
    np.testing.assert_allclose(short, padded[:, :1500], atol=1e-5)


def test_loop_detection_and_cut():
    assert loop_start("no , no , no".split()) is None  # speech, not a loop
    toks = [5, 6, 7] + [8, 9] * 6
    i = loop_start(toks)
    assert i == 5 and toks[:i] == [5, 6, 7, 8, 9]
    assert loop_start([1] * 12) == 1
    assert loop_start(list(range(40))) is None
    g = DecodeGuard()
    assert g.check([1, 2, 3], "And so my fellow Americans.", 3.0).ok
    assert g.check(toks, "x", 10.0).reason == "loop"
    assert g.check(list(range(60)), "a", 2.0).reason == "cap"  # cap = 6 * 2 + 24 = 36
    looped = "Yeah. " * 20
    assert compression_ratio(looped) > 2.4 and g.check(list(range(30)), looped, 20.0).reason in ("loop", "compression")
    assert g.check([1, 2], "hm", 1.0, avg_logprob=-1.5, no_speech_prob=0.9).reason == "no_speech"
    assert g.check([1, 2], "hm", 1.0, avg_logprob=-1.5, no_speech_prob=0.1).reason == "logprob"
    assert g.cut(toks, 10.0) == [5, 6, 7, 8, 9]
    phrase = [11, 12, 13, 14, 15]
    assert g.check([1] + phrase + phrase, "x", 5.0).reason == "loop"  # the last phrase said twice
    assert g.cut([1] + phrase + phrase, 5.0) == [1] + phrase
    assert g.check([1, 2, 3, 2, 3], "x", 5.0).ok  # a short repeat is speech


def test_split_point_finds_the_pause():
    rng = np.random.default_rng(0)
    a = rng.normal(0, 0.1, 16000 * 40).astype(np.float32)
    a[int(21.0 * 16000): int(21.4 * 16000)] = 0.0
    cut = split_point(a, 28.0)
    assert 21.0 * 16000 <= cut <= 21.4 * 16000


@pytest.mark.parametrize("method", ["ar", "ssd"])
def test_short_context_gives_the_padded_text_on_jfk(runtime, jfk_audio, method):
    """jfk.flac (11 s) in a 15 s window gives the same words as the 30 s padded window, at a fraction of the
    encoder cost."""
    from engine.asr.ctc_self_speculative import SSDCT2Backend
    from engine.asr.whisper_ar import WhisperARBackend

    ws = runtime.whisper_ssd()
    backend = SSDCT2Backend if method == "ssd" else WhisperARBackend
    scaled = backend(ws, window=WindowPolicy())
    padded = backend(ws, window=WindowPolicy("padded"))
    a, b = scaled.transcribe(jfk_audio), padded.transcribe(jfk_audio)
    assert a.stats["window_s"] == 15.0 and b.stats["window_s"] == 30.0
    assert a.stats["fallback"] == 0 and a.stats["guard"] == ""
    assert _norm(_text(a)) == _norm(_text(b)) == _norm(JFK_TEXT)


def test_torch_port_encodes_a_short_window(runtime, jfk_audio):
    tw = runtime.torch_whisper("asr_target")
    enc = tw.encode(jfk_audio, 1500)
    assert tuple(enc.shape) == (1, 750, 512)
    assert _norm(tw.greedy(enc, tw.prompt()).text) == _norm(JFK_TEXT)
    with pytest.raises(ValueError):
        tw.encode(jfk_audio, 1501)


def test_guard_stops_an_induced_repetition(runtime, jfk_audio):
    """SSD accepting every draft token (τ_SLM = 0) of a looping previous hypothesis would emit the loop; the guard
    catches it and the padded-window re-decode gives the speech."""
    from engine.asr.ctc_self_speculative import SSDCT2Backend

    be = SSDCT2Backend(runtime.whisper_ssd(), tau_ctc=0.0, tau_slm=0.0)
    loop = "And so my fellow Americans, ask not" + " what your country can do for you," * 12
    be._prev = (jfk_audio[:1600].tobytes(), len(jfk_audio), loop)
    res = be.transcribe(jfk_audio)
    assert res.stats["guard"] in ("loop", "cap", "compression") and res.stats["fallback"] == 1
    text = _norm(_text(res))
    assert text == _norm(JFK_TEXT)
    assert loop_start(text.split(), min_span=6) is None


@pytest.mark.parametrize("method", ["ar", "ssd", "specasr", "ar_torch"])
def test_every_decode_path_has_a_token_cap(runtime, jfk_audio, method):
    """With a cap of 0.5 tokens/s + 4, no method emits more than the cap on 11 s of speech (9 tokens)."""
    from engine.runtime import Runtime

    cfg = runtime.cfg.with_overrides({"asr": {"method": method, "guard_tokens_per_s": 0.5, "guard_tokens_base": 4}})
    rt = Runtime(cfg, progress=False)
    rt.resolved = runtime.resolved  # same model files
    be = rt.asr_backend()
    res = be.transcribe(jfk_audio)
    cap = DecodeGuard(0.5, 4).token_cap(len(jfk_audio) / 16000)
    assert cap == 9
    assert res.stats["tokens"] <= cap or len(_text(res).split()) <= cap
    assert res.stats["guard"] == "cap"
    assert len(_text(res).split()) >= 3  # what fits under the cap is kept


def _monologue():
    import json

    from audio.io import load_audio

    d = ROOT / "bench" / "data" / "stream_speech"  # committed (python -m bench.make_speech wrote it)
    return load_audio(d / "monologue_70s.flac"), json.loads((d / "refs.json").read_text())["monologue_70s.flac"]


def test_audio_longer_than_a_window_is_decoded_in_pieces(runtime):
    """70 s of continuous speech handed to the backend at once: cut at quiet moments into windows of ≤ 28 s,
    every piece decoded, nothing truncated at 30 s."""
    import jiwer
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    from engine.asr.whisper_ar import WhisperARBackend

    audio, ref = _monologue()
    res = WhisperARBackend(runtime.whisper_ssd()).transcribe(audio)
    assert res.stats["pieces"] >= 3
    n = EnglishTextNormalizer({})
    assert jiwer.wer(n(ref), n(_text(res))) < 0.15
    assert res.words[-1].end > len(audio) / 16000 - 3.0
    assert all(b.start >= a.start - 0.5 for a, b in zip(res.words, res.words[1:]))


def test_monologue_of_70_s_without_pauses_loses_no_words(runtime):
    """The streaming path (VAD → LocalAgreement-2 → length-scaled SSD) on 70 s of continuous speech (no pause
    over 0.3 s, so the VAD never ends the utterance and the buffer must be trimmed or split): the final text
    matches the offline transcript of the same audio."""
    import jiwer

    from audio.sources import ArraySource
    from engine.asr.faster_whisper_backend import FasterWhisperBackend

    audio, _ = _monologue()
    assert len(audio) / 16000 > 60
    events = []
    st = runtime.transcriber(ArraySource(audio, 0.1, realtime=False), events.append)
    stats = st.run()
    streamed = " ".join(st.transcript)
    offline = FasterWhisperBackend(runtime.model("asr_target").path, beam_size=1).transcribe_text(audio)
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    n = EnglishTextNormalizer({})
    wer = jiwer.wer(n(offline), n(streamed))
    assert wer < 0.12, (wer, streamed)
    assert len(n(streamed).split()) >= 0.9 * len(n(offline).split())
    assert stats.audio_s > 60


def test_skipped_speech_is_found():
    """A stretch of loud audio with no word, or one word stretched over it, is found; silence is not."""
    from engine.core.events import Word
    from engine.asr.window import skipped_regions

    rng = np.random.default_rng(1)
    a = np.zeros(16000 * 10, np.float32)
    a[16000 * 1: 16000 * 3] = rng.normal(0, 0.2, 32000)  # words 1–3 s
    a[16000 * 4: 16000 * 6] = rng.normal(0, 0.2, 32000)  # skipped speech 4–6 s
    a[16000 * 7: 16000 * 8] = rng.normal(0, 0.2, 16000)  # words 7–8 s
    words = [Word(1.0, 2.0, " a"), Word(2.0, 3.0, " b"), Word(7.0, 8.0, " c")]
    assert skipped_regions(a, words) == [(3.0, 7.0, None)]
    stretched = [Word(1.0, 2.0, " a"), Word(2.0, 3.0, " b"), Word(3.2, 7.4, " c"), Word(7.4, 8.0, " d")]
    assert skipped_regions(a, stretched) == [(3.2, 7.4, 2)]
    quiet = a.copy()
    quiet[16000 * 4: 16000 * 6] = rng.normal(0, 0.002, 32000)  # a pause: not speech
    assert skipped_regions(quiet, words) == []


def test_a_gap_decode_that_repeats_its_prompt_is_an_echo():
    """A skipped stretch is decoded prompted with the words before it; under babble Whisper can answer with those
    words again ("So I looked at the trains for Saturday." twice). Such a decode is the prompt's echo and is not put
    in; a decode with its own words, or sharing one common word with the prompt, is."""
    from engine.asr.whisper_ar import echoes_prompt
    from engine.core.events import Word

    def words(text):
        return [Word(i * 0.3, i * 0.3 + 0.3, " " + t) for i, t in enumerate(text.split())]

    prompt = "So I looked at the trains for Saturday."
    assert echoes_prompt(words("So I looked at the trains for Saturday."), prompt)
    assert echoes_prompt(words("looked at the trains, for"), "We said so. " + prompt)
    assert not echoes_prompt(words("The early one leaves at six."), prompt)
    assert not echoes_prompt(words("the nine o'clock gets in just before lunch"), prompt)
    assert not echoes_prompt(words("Saturday."), prompt)  # one word: too little to call an echo
    assert not echoes_prompt(words("For Saturday we should take the early one and then a bus."), prompt)


def test_ssd_with_greedy_acceptance_is_lossless(runtime, jfk_audio):
    """τ_SLM = 0.5 (a token with p > 0.5 is the argmax) and Eq. 3 off: SSD's tokens are greedy AR's, on every
    prefix of a growing buffer (the previous hypothesis as the draft) and on held-out speech."""
    from audio.io import load_audio
    from engine.asr.ctc_self_speculative import SSDCT2Backend
    from engine.asr.whisper_ar import WhisperARBackend

    ws = runtime.whisper_ssd()
    ssd = SSDCT2Backend(ws, tau_ctc=0.0, tau_slm=0.5)
    ar = WhisperARBackend(ws)
    held = sorted((ROOT / "bench" / "data" / "heldout_speech").glob("*.flac"))[:4]
    clips = [jfk_audio[: int(s * 16000)] for s in (3.0, 5.5, 8.0, 11.0)] + [load_audio(p) for p in held]
    accepted = 0
    for i, a in enumerate(clips):
        prompt = "Thanks for coming today." if i % 2 else ""
        x, y = ssd.transcribe(a, prompt), ar.transcribe(a, prompt)
        assert [w.text for w in x.words] == [w.text for w in y.words]
        accepted += x.stats["accepted"]
    assert accepted > 10  # the drafts were used, not just regenerated


def test_a_collapsed_decode_is_retried_without_its_prompt(runtime, jfk_audio):
    """A decode that fails a guard is redone on the padded window; one that collapsed (next to nothing over seconds
    of audio, below the log-prob floor: Whisper under its prompt can say a lone "." over 10 s of speech) is redone
    once more without the prompt, and the best decode is kept. Induced with a log-prob floor no decode passes."""
    from engine.asr.whisper_ar import WhisperARBackend

    be = WhisperARBackend(runtime.whisper_ssd(), guard=DecodeGuard(logprob=-1e-4))
    sparse = np.concatenate([jfk_audio[: int(2.6 * 16000)], np.zeros(int(17.4 * 16000), np.float32)])
    res = be.transcribe(sparse, "Thank you for watching.")  # a few tokens over 20 s: the collapse signature
    assert res.stats["guard"] == "logprob" and res.stats["guard_after_fallback"] == "logprob"
    assert res.stats["fallback"] == 2 and res.stats["prompt_reset"] == 1
    assert "fellow americans" in _norm(_text(res))
    assert be._bad_prompt == ""  # nothing passed without the prompt either: no prompt is marked
    res = be.transcribe(jfk_audio, "Thank you for watching.")  # dense text below the floor: no collapse
    assert res.stats["fallback"] == 1 and res.stats.get("prompt_reset", 0) == 0
    assert _norm(_text(res)) == _norm(JFK_TEXT)


def test_a_decode_that_echoes_its_prompt_is_retried_without_it(runtime, jfk_audio):
    """Whisper, unsure of the audio, can answer with its prompt's text again (seen on espeak-ng French under the
    previous utterance's text as the prompt). A decode below the log-prob floor that echoes the prompt is redone
    without the prompt, as a collapsed one is; the decode without it wins when it scores better. The first two
    decodes are scripted echoes; the third is real Whisper on jfk without the prompt."""
    from engine.asr.whisper_ar import WhisperARBackend, _WindowDecode

    prompt = "Il y en a une affaire du pont, du format du marché."
    be = WhisperARBackend(runtime.whisper_ssd())
    real = be._decode_window
    calls, echoes = [], [2]

    def scripted(audio, p, n_frames, speculate, *a, **kw):
        calls.append((p, n_frames))
        if echoes[0] > 0:  # the scaled decode and its padded redo: the prompt's text, below the floor
            echoes[0] -= 1
            r = real(audio, p, n_frames, speculate, *a, **kw)
            toks = be.m.tok.encode(" " + prompt)
            return _WindowDecode(toks, prompt, None, r.sv, r.stats, -1.4, 0.1)
        return real(audio, p, n_frames, speculate, *a, **kw)

    be._decode_window = scripted
    scaled = be.window.n_frames(len(jfk_audio))
    res = be.transcribe(jfk_audio, prompt)
    assert scaled < 3000 and calls == [(prompt, scaled), (prompt, 3000), ("", 3000)]
    assert res.stats["prompt_reset"] == 1 and _norm(_text(res)) == _norm(JFK_TEXT)
    # without the padded retry (a partial's decode, or a final text's with asr.final_retry off) the reset stays on
    # the scaled window
    calls.clear()
    be._bad_prompt, echoes[0] = "", 1
    res = be.transcribe_final(jfk_audio, prompt, padded_retry=False)
    assert calls == [(prompt, scaled), ("", scaled)]
    assert res.stats["prompt_reset"] == 1 and _norm(_text(res)) == _norm(JFK_TEXT)
    calls.clear()
    be._bad_prompt = ""
    res = be.transcribe(jfk_audio, "Thank you for watching.")  # no echo, no collapse: the prompt is kept
    assert all(p for p, _ in calls) and res.stats.get("prompt_reset", 0) == 0 and _norm(_text(res)) == _norm(JFK_TEXT)


def test_a_prompt_that_made_a_decode_collapse_is_not_used_again(runtime, jfk_audio):
    """When only the decode without the prompt passes, later decodes with that same prompt (the next updates of the
    same buffer) skip it at once instead of failing three times."""
    from engine.asr.whisper_ar import WhisperARBackend

    be = WhisperARBackend(runtime.whisper_ssd())
    first = be.transcribe(jfk_audio, "Thank you for watching.")
    assert first.stats["guard"] == ""  # a sound prompt is used as it is
    be._bad_prompt = "Thank you for watching."  # as if decodes under it had collapsed
    again = be.transcribe(jfk_audio, "Thank you for watching.")
    assert again.stats["fallback"] == 0 and _norm(_text(again)) == _norm(JFK_TEXT)
    assert _text(again) == _text(be.transcribe(jfk_audio, ""))  # decoded exactly as without a prompt


def test_pre_roll_reaches_before_the_vad_start_but_not_into_the_previous_utterance(runtime):
    """The ASR buffer of an utterance starts ``asr.pre_roll_s`` before the VAD's start, never before the end of
    the previous utterance; the previous utterance's audio is acoustic context only when ``context_gap_s`` allows."""
    import dataclasses

    from audio.sources import ArraySource, AudioBlock
    from engine.asr.transcriber import UtteranceRecord

    ring = [AudioBlock(np.zeros(1600, np.float32), 0.1 * i, 0.0) for i in range(100)]  # 0–10 s
    tr = runtime.transcriber(ArraySource(np.zeros(16000, np.float32), realtime=False), lambda ev: None)
    assert tr.asr.pre_roll_s == runtime.cfg.asr.pre_roll_s > 0
    tr.asr = dataclasses.replace(tr.asr, context_gap_s=0.0)  # the pre-roll alone
    _, proc, _ = tr._start(0, 5.0, ring)
    assert proc.buffer_time_offset == pytest.approx(5.0 - tr.asr.pre_roll_s)
    assert len(proc.audio) == pytest.approx((10.0 - proc.buffer_time_offset) * 16000, abs=2)
    tr.stats.utterances[-1].t_end = 5.9
    _, proc, _ = tr._start(1, 6.0, ring)  # 0.1 s after the previous utterance: the pre-roll stops at its end
    assert proc.buffer_time_offset == pytest.approx(5.9)
    tr.asr = dataclasses.replace(tr.asr, context_gap_s=3.0)
    tr.stats.utterances.append(UtteranceRecord(index=2, t_start=7.0, t_end=8.0))
    _, proc, _ = tr._start(3, 9.0, ring)  # acoustic context: the buffer starts at the previous utterance
    assert proc.buffer_time_offset == pytest.approx(7.0)
