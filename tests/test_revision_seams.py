"""Where the second pass could add or repeat words, and why it no longer does.

* The end of the stream (``OfflineWindowPass``, ``asr.revise_mode = "offline"``): the rest of the stream used to be
  decoded in ONE call and judged by the guard of one 30 s window; a rest longer than a window (a meeting the VAD never
  cut: no window could run while an utterance was open) outgrew the token cap, was rejected whole, and every utterance
  in it kept its final text next to revised neighbours. The rest is now decoded window by window, each judged alone,
  each starting where the words the previous one settled end (no audio decoded twice).
* The short last window of a recording (a fraction of a second of audio, the rest padding): Whisper, conditioned on
  the text before it, writes a sentence from that text and its alignment squeezes it into the last frames.
  :func:`engine.asr.faster_whisper_backend.unheard_segments` (Whisper's own hallucination rule, with the window's
  end where its audio ends) leaves it out; a rest under 0.3 s is not decoded at all.
* A window that loops on its prompt is decoded once more without it.
* The chains mode (``SecondPass``): the acoustic context before a chain is decoded a second time; its words are the
  context's up to the middle of the pause after them, not only up to the chain's padding.

Scripted decoders for the bookkeeping; real Whisper base on real recordings (jfk, the telephone call) for the rest.
"""

import dataclasses
import hashlib
import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest

from audio.io import SAMPLE_RATE as SR
from engine.asr.backend import BackendResult
from engine.asr.faster_whisper_backend import segment_anomalous, unheard_segments
from engine.asr.offline_window_pass import OfflineWindowPass
from engine.asr.second_pass import SecondPass, SpokenUtterance
from engine.asr.window import DecodeGuard
from engine.config import Config
from engine.core.events import Word

from .conftest import ROOT, normalized_wer
from .test_asr_context import ScriptedDecoder, U, W
from .test_offline_window_pass import ScriptedWindows

TELEPHONE = ROOT / "bench" / "data" / "real_speech" / "pyannote_telephone_two_speakers.wav"


def _repeats(text: str) -> dict:
    from bench.conversation_scoring import repeated_ngrams

    return dict(repeated_ngrams(text))


def _beyond(text: str, offline: str) -> dict:
    """Back-to-back repeated n-grams (1–4 words) of ``text`` that ``offline`` does not repeat as often."""
    mine, theirs = _repeats(text), _repeats(offline)
    return {g: n - theirs.get(g, 0) for g, n in mine.items() if n > theirs.get(g, 0)}


# -- scripted: a word every 0.25 s, the guard of the audio each decode hears -------------------------------------------
STEP = 0.25


def _word(k: int) -> str:
    return " " + hashlib.md5(str(k).encode()).hexdigest()[:6]  # distinct, incompressible words (no loop, no gzip)


class DenseSpeech:
    """A window decoder of a stream where word ``k`` (:func:`_word`) is spoken at ``k · STEP`` s for 0.2 s. The audio
    it is given is a ramp (each sample holds its own audio time), so a decode knows where it starts. A window gives the
    words its first 30 s hold (every word when ``last``), the seek position where the last of them ends, as
    faster-whisper's word-timestamped decode does, and the guard's verdict on them for the seconds it decoded."""

    def __init__(self):
        self.guard = DecodeGuard()
        self.calls = []

    def transcribe_window(self, audio, prompt_tokens=(), language=None, last=False):
        t0 = float(audio[0])
        span = len(audio) / SR if last else min(30.0, len(audio) / SR)
        ks = [k for k in range(math.ceil(t0 / STEP - 1e-6), int((t0 + span) / STEP) + 1)
              if k * STEP + 0.2 <= t0 + span + 1e-6]
        words = [Word(k * STEP - t0, k * STEP + 0.2 - t0, _word(k)) for k in ks]
        verdict = self.guard.check(ks, "".join(w.text for w in words), span)
        self.calls.append({"start": t0, "seconds": span, "last": last, "prompt": list(prompt_tokens),
                           "guard": verdict.reason})
        seek = span if last or not words else words[-1].end
        return BackendResult(words, [], {"seek_s": seek, "prompt_tokens": ks, "language": "en",
                                         "guard": verdict.reason, "doubtful": not verdict.ok})


def _ramp(seconds: float) -> np.ndarray:
    return (np.arange(round(seconds * SR)) / SR).astype(np.float32)


def _final(t0: float, t1: float) -> list[Word]:
    """The live final of speech from ``t0`` to ``t1`` s: every fourth word misheard (so a revision changes it)."""
    ks = range(math.ceil(t0 / STEP), int(t1 / STEP) + 1)
    return [Word(k * STEP, k * STEP + 0.2, " misheard" if k % 4 == 0 else _word(k)) for k in ks
            if k * STEP + 0.2 <= t1]


def _drain(sp: OfflineWindowPass, audio: np.ndarray):
    """Every window due at the end of the stream, decoded and applied (as the transcriber's loop runs them)."""
    revs = []
    while sp.due(None):
        job = sp.take()
        rev = sp.apply(job, sp.decode(job, audio, 0.0))
        if rev is not None:
            revs.append(rev)
    return revs


def test_the_rest_of_a_long_stream_is_decoded_window_by_window_each_judged_alone():
    """A 70 s utterance (no pause the VAD would cut) is all there is at the end of the stream: 280 words, more than
    the token cap of one window (204), fewer than that in each 30 s. Decoded window by window, every word comes back
    once: none twice at a seam, none lost."""
    audio = _ramp(70.5)
    dec = DenseSpeech()
    sp = OfflineWindowPass(dec)
    sp.add(SpokenUtterance(0, 0.0, 70.2, _final(0.0, 70.2)))
    revs = _drain(sp, audio)
    assert len(dec.calls) == 3 and all(c["seconds"] <= 30.0 for c in dec.calls)
    assert [c["guard"] for c in dec.calls] == ["", "", ""] and sp.dropped == 0
    assert [c["last"] for c in dec.calls] == [False, False, True]
    assert dec.calls[1]["start"] == pytest.approx(dec.calls[0]["start"] + 29.95, abs=1e-3)  # the last word's end
    revised = [w.text for w in revs[-1].changed[0][2]]
    assert revised == [_word(k) for k in range(282)]  # each word once, in order (the last ends at 70.45 s)
    assert not sp.pending and not sp.due(None)


def test_the_last_fraction_of_a_second_is_not_decoded_and_the_utterance_keeps_its_windows_words():
    """The stream ends 0.15 s after the seek position the first window settled: a window of nearly all padding,
    where Whisper writes text the audio does not hold. It is not decoded; the utterance is revised with the words
    the first window gave it (not sent back to its final text)."""
    audio = _ramp(30.1)
    dec = DenseSpeech()
    sp = OfflineWindowPass(dec)
    sp.add(SpokenUtterance(0, 0.0, 30.1, _final(0.0, 30.1)))
    revs = _drain(sp, audio)
    assert len(dec.calls) == 1 and sp.runs == 1 and sp.dropped == 0
    assert [w.text for w in revs[-1].changed[0][2]] == [_word(k) for k in range(120)]


def test_a_window_that_loops_on_its_prompt_is_decoded_again_without_it():
    w1 = W("we could probably skip it", 1.0)
    dec = ScriptedWindows([
        (0.0, w1, 27.0, ""),
        (27.0, W("skip it skip it skip it skip it", 28.0), 57.0, "loop"),  # conditioned on the text before it
        (27.0, W("then what", 28.0), 57.0, ""),  # the same window without the prompt
        (57.0, W("okay", 60.0), 90.0, ""),
    ])
    sp = OfflineWindowPass(dec)
    for u in (U(0, "we could probably skip it", 1.0), U(1, "then want", 28.0), U(2, "okay", 60.0)):
        sp.add(u)
    audio = np.zeros(90 * SR, np.float32)
    revs = []
    for now in (31.5, 58.5, None):
        assert sp.due(now)
        job = sp.take()
        revs.append(sp.apply(job, sp.decode(job, audio, 0.0)))
    assert [c["prompt"] != [] for c in dec.calls] == [False, True, False, True]
    assert dec.calls[3]["prompt"] == [hash(w.text) % 1000 for w in W("then what", 28.0)]  # the prompt restarted
    assert [(i, t) for i, t, _ in revs[1].changed] == [(1, "then what")] and sp.dropped == 0


def test_the_chains_acoustic_context_decoded_again_is_not_given_to_the_chain():
    """A chain closed by the length limit lends its last words to the next chain as acoustic context; decoded again,
    the context's last word comes out differently ("nein" for "nine") and its time falls inside the chain's padding.
    It stays context (up to the middle of the 0.2 s pause after it), not a word of the next utterance."""
    dec = ScriptedDecoder([])
    sp = SecondPass(dec, dataclasses.replace(Config().asr, revise_max_s=10.0, revise_context_s=1.0))
    chain = [U(0, "zero zero zero", 0.0, 0.5), U(1, "one two three four five", 2.0, 0.5),
             U(2, "six seven eight nine", 5.0, 0.5)]  # 0.0–6.8
    for u in chain:
        sp.add(u)
    sp.add(U(3, "ten eleven twelve thirteen fourteen fifteen", 7.0, 0.5))  # 0.2 s after "nine": closes the chain
    dec.words = [w for u in chain for w in u.words]
    sp.run(np.zeros(12 * SR, np.float32), 0.0)
    assert sp.due(None)
    a, _ = sp.window
    dec.words = [Word(6.0 - a, 6.3 - a, " eight"), Word(6.5 - a, 6.95 - a, " nein")] + \
        [Word(w.start - a, w.end - a, w.text) for w in W("ten eleven twelve thirteen fourteen fifty", 7.0, 0.5)]
    rev = sp.run(np.zeros(12 * SR, np.float32), 0.0)
    assert [(i, t) for i, t, _ in rev.changed] == [(3, "ten eleven twelve thirteen fourteen fifty")]


def test_whisper_s_hallucination_rule_with_the_window_ending_where_its_audio_ends():
    def seg(seek, words):  # words: (text, start, end, probability)
        ws = [SimpleNamespace(word=" " + t, start=a, end=b, probability=p) for t, a, b, p in words]
        return SimpleNamespace(seek=int(seek * 100), start=ws[0].start, end=ws[-1].end, words=ws)

    speech = seg(0.0, [("oh", 28.0, 28.2, 0.5), ("I", 28.4, 28.5, 1.0), ("don't", 28.5, 28.7, 1.0),
                       ("hear", 28.7, 28.9, 1.0), ("that", 28.9, 29.1, 1.0), ("now", 29.6, 29.8, 0.9)])
    squeezed = seg(29.8, [("I'm", 29.80, 29.92, 0.15), ("in", 29.92, 29.94, 0.02), ("New", 29.94, 29.94, 0.0),
                          ("Jersey", 29.94, 29.94, 0.04), ("now.", 29.94, 29.94, 0.04)])
    assert not segment_anomalous(speech.words) and segment_anomalous(squeezed.words)
    # the last window holds 0.2 s of audio (29.8–30.0 s): its end is there, not 30 s after its start
    assert unheard_segments([speech, squeezed], 100.0, 30.0) == [False, True]
    # the same words with speech after them (the recording goes on for 10 s) are kept: not surrounded by silence
    follow = seg(29.8, [("and", 30.5, 30.7, 0.9), ("then", 30.7, 30.9, 0.9), ("more", 30.9, 31.2, 0.9)])
    assert unheard_segments([speech, squeezed, follow], 100.0, 40.0) == [False, False, False]


# -- real Whisper base on real recordings ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rt():
    from engine.runtime import Runtime

    return Runtime(Config(), progress=False)


def _offline_greedy(rt, audio) -> str:
    """Offline faster-whisper greedy of the whole recording, as ``specvoice bench conversation`` runs it."""
    model = rt.revise_backend().model
    segs, _ = model.transcribe(audio, language="en", beam_size=1, temperature=0.0, vad_filter=False)
    return " ".join(s.text.strip() for s in segs)


def _revise_whole(rt, audio, t_end=None):
    """The second pass over ``audio`` heard as ONE utterance at the end of the stream (speech the VAD never cut).
    Returns (the pass, the utterance as revised, [(window, its words in audio time)] per decode)."""
    sp = OfflineWindowPass(rt.revise_backend())
    u = SpokenUtterance(0, 0.0, t_end or len(audio) / SR, [])
    sp.add(u)
    windows = []
    while sp.due(None):
        job = sp.take()
        res = sp.decode(job, audio, 0.0)
        windows.append((job.window, [Word(w.start + job.window[0], w.end + job.window[0], w.text)
                                     for w in (res.words if res is not None else [])]))
        sp.apply(job, res)
    return sp, u, windows


def test_a_stream_longer_than_a_window_is_revised_window_by_window_without_a_word_twice_at_a_seam(rt, jfk_audio):
    """jfk, then the telephone call (41 s of speech, one utterance): the rest at the end of the stream is decoded in
    30 s windows (two decodes or more, each of at most 30 s; the seam falls inside the call), each starting where
    the words of the one before end, and the revised text repeats no n-gram back to back that offline greedy does
    not, and is offline greedy's text."""
    from audio.io import load_audio

    audio = np.concatenate([jfk_audio, load_audio(TELEPHONE)]).astype(np.float32)
    sp, u, windows = _revise_whole(rt, audio)
    assert sp.runs >= 2 and sp.dropped == 0 and not sp.pending
    assert all(b - a <= 30.0 + 1e-6 for (a, b), _ in windows)
    for (_, before), ((a, _), after) in itertools.pairwise(windows):  # a seam: no audio decoded twice
        if before and after:
            assert a >= before[-1].end - 0.02 and after[0].start >= before[-1].end - 0.02
    offline = _offline_greedy(rt, audio)
    assert not _beyond(u.text, offline), (u.text, offline)
    assert normalized_wer(offline, u.text) <= 0.02, (offline, u.text)


def test_the_short_last_window_of_the_telephone_call_adds_no_sentence(rt):
    """The telephone call (30 s, a human transcript) ends 0.2 s after its last decoded word: Whisper's last window
    there is nearly all padding. The revised transcript adds nothing squeezed into that last window, repeats no
    n-gram offline greedy does not, and is no further from the human transcript than offline greedy's (+0.01)."""
    import json

    from audio.io import load_audio

    audio = load_audio(TELEPHONE)
    end = len(audio) / SR
    human = json.loads((TELEPHONE.parent / "manifest.json").read_text())["files"][TELEPHONE.name]["reference"]
    segs, _ = rt.revise_backend().model.transcribe(audio, language="en", beam_size=1, temperature=0.0,
                                                   vad_filter=False, word_timestamps=True)
    segs = list(segs)
    flags = unheard_segments(segs, 100.0, end)
    # only a segment in the last 2 s of the recording may be left out; the speech before it is all kept
    assert all(s.end > end - 2.0 for s, bad in zip(segs, flags) if bad)
    assert sum(len(s.words) for s, bad in zip(segs, flags) if not bad) >= 60
    sp, u, _ = _revise_whole(rt, audio, t_end=end + 0.2)
    assert sp.dropped == 0
    offline = _offline_greedy(rt, audio)
    assert not _beyond(u.text, offline), (u.text, offline)
    assert normalized_wer(human, u.text) <= normalized_wer(human, offline) + 0.01, (u.text, offline)
    squeezed = [w for w in u.words if w.start >= end - 0.25]
    assert len(squeezed) <= 1, squeezed  # no sentence squeezed into the recording's last frames


def test_the_benchmark_counts_repeats_the_offline_transcripts_do_not_have():
    """``bench conversation`` per file: n-grams (1–4 normalised words) said twice back to back, and those neither
    offline transcript repeats as often; the meeting's order-free error counts extra words as well as missed ones."""
    from bench.conversation_scoring import repeats, words_missed

    offline = {"greedy": "Then I'll tell you. I'll send it out.", "beam5": "then I'll tell you, I'll send it out"}
    r = repeats("then I'll. I'll tell you. I'll send it out", offline)
    assert r["ngrams"] == {"i will": 1} and r["beyond_offline"] == 1 and r["beyond_offline_ngrams"] == {"i will": 1}
    assert repeats("Hello? Hello? Oh, hello.", {"greedy": "Hello. Hello. Oh, hello."})["beyond_offline"] == 0
    assert repeats("no no no", {"greedy": "no no"})["beyond_greedy"] == 1  # "no no" twice (overlapping) vs once
    w = words_missed(["so we could think of menus"], "so so we could think of of menus")
    assert (w["missed"], w["extra"], w["error"]) == (0, 2, pytest.approx(2 / 6, abs=1e-4))
