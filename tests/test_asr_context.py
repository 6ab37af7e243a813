"""The second pass: finished utterances re-decoded together (their text revised, RevisedTranscript), on scripted
decodes (the bookkeeping) and with real Whisper base on real and generated audio."""

import dataclasses
from pathlib import Path

import jiwer
import numpy as np
import pytest

from engine.asr.backend import BackendResult
from engine.asr.second_pass import SecondPass, SpokenUtterance, assign_words
from engine.config import Config
from engine.core.events import FinalTranscript, RevisedTranscript, Word

from .conftest import JFK_TEXT, ROOT

HESITATION = ROOT / "tests" / "data" / "hesitation_en.flac"  # tests/data/make_speech.py
ASR = Config().asr  # the product's settings: the second passes here are built from them


def W(text, t0, step=0.4):
    return [Word(t0 + i * step, t0 + i * step + 0.3, " " + w) for i, w in enumerate(text.split())]


def U(index, text, t0, step=0.4, language="en"):
    words = W(text, t0, step)
    return SpokenUtterance(index, t0, words[-1].end if words else t0, words, language)


class ScriptedDecoder:
    """Returns a fixed decode (times relative to the window) and records what it was asked."""

    name = "scripted"
    supports_draft = True  # its transcribe_final takes the draft and the language
    supports_language = True

    def __init__(self, words, doubtful=False, language="en"):
        self.words, self.doubtful, self.language = words, doubtful, language
        self.calls = []

    def transcribe_final(self, audio, prompt="", draft="", language=None):
        self.calls.append({"seconds": len(audio) / 16000, "prompt": prompt, "draft": draft, "language": language})
        return BackendResult(list(self.words), [], {"doubtful": self.doubtful, "language": self.language})


def _norm(s):
    return " ".join(s.split())


def test_a_chain_is_decoded_once_when_the_pause_after_it_completes_it_and_each_utterance_gets_its_words():
    dec = ScriptedDecoder(W("i think we should move the meeting to next thursday afternoon", 0.3))
    sp = SecondPass(dec, ASR, context="Hello there.")
    sp.add(U(3, "i think we should move the meeting too", 0.3))  # ends at 3.1
    sp.add(U(4, "next thursday afternoon", 3.5))  # a 0.4 s pause: the same chain; ends at 4.6
    assert not sp.due(5.2)  # 0.6 s after its end: the next utterance could still join
    assert sp.due(6.7)  # 2 s of silence completed it
    a, b = sp.window
    assert a == pytest.approx(0.0) and b == pytest.approx(4.6 + 0.3)
    rev = sp.run(np.zeros(6 * 16000, np.float32), 0.0)
    assert len(dec.calls) == 1
    call = dec.calls[0]
    assert call["prompt"] == "Hello there."
    assert call["draft"] == "i think we should move the meeting too next thursday afternoon"
    assert call["language"] == "en"  # the chain's language, not a new identification
    assert [(i, t) for i, t, _ in rev.changed] == [(3, "i think we should move the meeting to")]
    assert not sp.due(None)  # settled: nothing left to decode
    assert sp.context.endswith("meeting to next thursday afternoon")


def test_a_lone_utterance_decoded_whole_is_not_decoded_again_but_a_trimmed_one_is():
    dec = ScriptedDecoder(W("a long utterance", 0.0))
    sp = SecondPass(dec, ASR)
    sp.add(U(0, "a long utterance", 0.0))
    assert not sp.due(None)
    sp.add(U(1, "a long utterance", 10.0), whole=False)  # its buffer was trimmed while it was spoken
    assert sp.due(None)


def test_a_long_pause_or_another_language_starts_a_new_chain():
    sp = SecondPass(ScriptedDecoder([]), ASR)
    sp.add(U(0, "one two", 0.0))
    sp.add(U(1, "three four", 5.0))  # 4 s after: not decoded together
    assert sp.ready is None and [u.index for u in sp.chain] == [1]
    sp.add(U(2, "cinq six", 6.2, language="fr"))
    assert sp.ready is None and [u.index for u in sp.chain] == [2]


def test_the_length_limit_closes_a_chain_and_lends_its_last_words_as_context_never_revised():
    dec = ScriptedDecoder([])
    # a 10 s window, so the fourth utterance closes the chain, and 1 s of context: the last word or two of it
    sp = SecondPass(dec, dataclasses.replace(ASR, revise_max_s=10.0, revise_context_s=1.0))
    chain = [U(0, "zero zero zero", 0.0, 0.5), U(1, "one two three four five", 2.0, 0.5),
             U(2, "six seven eight nine", 5.0, 0.5)]  # 0.0–6.8, pauses of 0.7 s
    for u in chain:
        sp.add(u)
    sp.add(U(3, "ten eleven twelve thirteen", 8.0, 0.5))  # would make the chain 10.4 s long: it closes
    assert sp.ready is not None and [u.index for u in sp.ready[0]] == [0, 1, 2]
    assert sp.window == (0.0, pytest.approx(7.1))
    dec.words = [w for u in chain for w in u.words]  # the window starts at 0: the same times
    assert sp.run(np.zeros(12 * 16000, np.float32), 0.0) is None  # nothing changed
    assert sp.due(None)  # the new chain has acoustic context to be decoded with
    a, _ = sp.window
    assert a == pytest.approx(6.0 - 0.05)  # the first word of utterance 2 within 1 s of its end ("eight")
    dec.words = [Word(0.05, 0.35, " eight"), Word(0.55, 0.85, " nine")] + \
        [Word(w.start - a, w.end - a, w.text) for w in W("ten eleven twelve thirty", 8.0, 0.5)]
    rev = sp.run(np.zeros(12 * 16000, np.float32), 0.0)
    assert dec.calls[-1]["prompt"].endswith("six seven")  # the prompt stops where the window's audio starts
    assert dec.calls[-1]["draft"] == "eight nine ten eleven twelve thirteen"
    assert [(i, t) for i, t, _ in rev.changed] == [(3, "ten eleven twelve thirty")]  # the context is not revised
    assert [w.start for w in rev.changed[0][2]] == [pytest.approx(t) for t in (8.0, 8.5, 9.0, 9.5)]


def test_a_doubtful_or_shrunken_decode_revises_nothing():
    for dec in (ScriptedDecoder(W("one two changed", 0.0), doubtful=True), ScriptedDecoder(W("one", 0.0))):
        sp = SecondPass(dec, ASR)
        sp.add(U(0, "one two", 0.0))
        sp.add(U(1, "three four", 1.5))
        assert sp.due(None)
        assert sp.run(np.zeros(4 * 16000, np.float32), 0.0) is None
        assert not sp.due(None) and sp.context == "one two three four"  # settled as the finals said


def test_words_keep_the_utterance_of_the_unchanged_words_around_them():
    old = [W("we could probably skip", 0.0), W("totally the removing part", 2.5)]
    # the decode's times put "skip" after the pause's middle (2.35); the words around it did not change
    new = W("we could probably", 0.0) + [Word(2.3, 2.45, " skip"), Word(2.6, 2.8, " totally")] + \
        W("the removal part", 3.0)
    assert assign_words(old, new, [2.35]) == [0, 0, 0, 0, 1, 1, 1, 1]


# -- real Whisper base ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rt():
    from engine.config import Config
    from engine.runtime import Runtime

    return Runtime(Config(), progress=False)


def _stream(rt, path, **asr):
    from audio.sources import FileSource

    if asr:
        rt.cfg = dataclasses.replace(rt.cfg, asr=dataclasses.replace(rt.cfg.asr, **asr))
    evs = []
    st = rt.transcriber(FileSource(path, realtime=False), evs.append)
    st.run()
    return st, evs


def _wer(ref, hyp):
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    n = EnglishTextNormalizer({})
    return jiwer.wer(n(ref), n(hyp))


@pytest.fixture(scope="module")
def hesitation(rt):
    if not HESITATION.exists():
        pytest.skip(f"{HESITATION} not available")
    return _stream(rt, HESITATION)


def test_a_sentence_cut_by_a_hesitation_pause_is_revised_to_no_worse_than_the_offline_decode(rt, hesitation):
    """One sentence with a 0.8 s pause mid-way: the VAD cuts it in two finals, each decoded without the other's
    audio; the second pass decodes them together, and the revised transcript is at least as close to the offline
    decode of the whole recording (greedy, 30 s window: the revision's decoder) as the finals are."""
    from audio.io import load_audio

    st, evs = hesitation
    finals = [e for e in evs if isinstance(e, FinalTranscript) and e.text]
    assert len(finals) >= 2, [e.text for e in finals]  # the pause cut the sentence
    offline = "".join(w.text for w in rt.revise_backend().transcribe(load_audio(HESITATION), "").words)
    final_text = " ".join(e.text for e in finals)
    revised_text = " ".join(t for t in st.texts.values() if t)
    assert st.second.runs >= 1
    assert _wer(offline, revised_text) <= _wer(offline, final_text)
    assert _wer(offline, revised_text) <= 0.1, (offline, revised_text)


def test_revision_events_carry_the_ids_and_times_of_the_utterances_they_revise(hesitation):
    st, evs = hesitation
    finals = {e.utterance: e for e in evs if isinstance(e, FinalTranscript)}
    for ev in (e for e in evs if isinstance(e, RevisedTranscript)):
        assert len(ev.utterances) == len(ev.texts) >= 1
        assert set(ev.utterances) <= set(finals)
        for i, t in zip(ev.utterances, ev.texts):
            assert evs.index(finals[i]) < evs.index(ev)  # a revision follows the finals it revises
            assert st.texts[i] == t or any(i in later.utterances for later in evs[evs.index(ev) + 1:]
                                           if isinstance(later, RevisedTranscript))
        assert all(ev.t_start - 1e-6 <= w.start and w.end <= ev.t_end + 0.5 for w in ev.words)
        assert ev.language == "en"
    assert st.stats.revisions == sum(isinstance(e, RevisedTranscript) for e in evs)
    assert st.stats.revise_compute_s > 0


def test_jfk_is_not_made_worse_by_the_second_pass(rt, jfk_path):
    st, evs = _stream(rt, jfk_path)
    revised = " ".join(t for t in st.texts.values() if t)
    final = " ".join(e.text for e in evs if isinstance(e, FinalTranscript) and e.text)
    assert _wer(JFK_TEXT, revised) <= _wer(JFK_TEXT, final)
    assert _wer(JFK_TEXT, revised) == 0.0, revised


@pytest.mark.parametrize("timestamps", [True, False])
def test_the_second_pass_decodes_as_offline_whisper_by_default(rt, jfk_audio, timestamps):
    """``asr.revise_timestamps`` (default on; ``asr.revise_mode = "offline"`` always): the second pass's decoder is
    faster-whisper's own timestamped decode (what an offline transcript runs); off with ``chains``, the live decoder
    without timestamp tokens. Both give jfk's text, in the
    language asked for, and judge a decode of noise doubtful or silent (it revises nothing)."""
    from engine.asr.faster_whisper_backend import FasterWhisperBackend
    from engine.asr.whisper_ar import WhisperARBackend

    cfg = rt.cfg
    assert cfg.asr.revise_timestamps
    rt.cfg = dataclasses.replace(cfg, asr=dataclasses.replace(cfg.asr, revise_timestamps=timestamps,
                                                              revise_mode="offline" if timestamps else "chains"))
    try:
        be = rt.revise_backend()
    finally:
        rt.cfg = cfg
    assert isinstance(be, FasterWhisperBackend if timestamps else WhisperARBackend)
    res = be.transcribe_final(jfk_audio, "", language="en") if not timestamps else be.transcribe(jfk_audio, "",
                                                                                                 language="en")
    assert _wer(JFK_TEXT, "".join(w.text for w in res.words)) == 0.0
    assert not res.stats["doubtful"] and res.stats["language"] == "en"
    assert all(a.start <= b.start for a, b in zip(res.words, res.words[1:]))  # in order, in seconds
    assert res.words[-1].end <= len(jfk_audio) / 16000 + 0.5
    noise = np.random.default_rng(0).normal(0, 0.1, 5 * 16000).astype(np.float32)
    res = be.transcribe(noise, "")
    assert res.stats["doubtful"] or not res.words, res.words


def test_second_pass_off_emits_no_revision(rt, jfk_path):
    st, evs = _stream(rt, jfk_path, revise_max_s=0.0)
    assert st.second is None and not any(isinstance(e, RevisedTranscript) for e in evs)
    rt.cfg = dataclasses.replace(rt.cfg, asr=dataclasses.replace(rt.cfg.asr, revise_max_s=24.0))


def test_the_journal_and_the_exports_show_the_revised_text(tmp_path: Path):
    from app.export import History, to_srt, to_txt
    from engine.journal import Journal

    j = Journal(tmp_path / "journal.jsonl")
    s = j.start("transcribe", "hesitation.flac")
    s.user(0, "I think we should move the meeting too.", 0.2, 2.7, 0.4, language="en")
    s.user(1, "Next Thursday afternoon.", 3.4, 8.1, 0.3, language="en")
    s.user(2, "Yes.", 9.0, 9.5)
    s.revision([0, 1], ["I think we should move the meeting to", "next Thursday afternoon."], 0.0, 8.4, "en")
    s.end(10.0)
    txt = to_txt(j.records())
    assert "meeting to\n" in txt and "too" not in txt and "Yes." in txt
    assert "next Thursday afternoon." in to_srt(j.records())
    with pytest.raises(ValueError):
        s.revision([0, 1], ["only one text"])
    h = History(tmp_path / "gui.jsonl")
    s = Journal(h.path).start("app")
    s.user(0, "the first half", 0.0, 1.0)
    s.user(1, "second half", 1.5, 2.0)
    s.revision([0, 1], ["the first half second half", ""], 0.0, 2.0)
    assert [it.text for it in h.items] == ["the first half second half"]  # a line left without words is gone


class _Recording:
    """Passes every decode to ``inner`` and notes (the utterance being decoded, seconds of audio decoded, the forced
    prefix)."""

    def __init__(self, inner, log, current):
        self.inner, self.log, self.current = inner, log, current

    def __getattr__(self, name):
        import functools

        v = getattr(self.inner, name)
        if name not in ("transcribe", "transcribe_final"):
            return v

        @functools.wraps(v)
        def decode(audio, *a, **k):
            self.log.append((self.current[0], len(audio) / 16000, k.get("prefix", "")))
            return v(audio, *a, **k)

        return decode


@pytest.mark.parametrize("context_prefix", [False, True])
def test_an_utterance_after_a_hesitation_is_decoded_after_the_previous_ones_audio_and_emits_only_its_own_words(
        rt, context_prefix):
    """By default (``asr.context_gap_s``) the utterance after a short pause keeps the previous utterance's audio at
    the head of its buffer: Whisper hears the sentence's first half while it decodes the second (as an offline
    decode does), and only the new words are emitted: the context's words are dropped by time, or, with
    ``asr.context_prefix``, never decoded again (the context's text is the decodes' forced prefix)."""
    from audio.io import load_audio
    from audio.sources import FileSource
    from engine.core.events import SpeechStarted

    if not HESITATION.exists():
        pytest.skip(f"{HESITATION} not available")
    cfg = rt.cfg
    assert cfg.asr.context_gap_s > 0  # the default
    evs, log, current = [], [], [None]

    def emit(ev):
        if isinstance(ev, SpeechStarted):
            current[0] = ev.utterance
        evs.append(ev)

    rt.cfg = dataclasses.replace(cfg, asr=dataclasses.replace(cfg.asr, revise_max_s=0.0,  # the finals only
                                                              context_prefix=context_prefix))
    try:
        st = rt.transcriber(FileSource(HESITATION, realtime=False), emit)
    finally:
        rt.cfg = cfg
    st.backend = _Recording(st.backend, log, current)
    st.run()
    finals = [e for e in evs if isinstance(e, FinalTranscript) and e.text]
    assert len(finals) == 2, [e.text for e in finals]  # the pause cut the sentence
    first, second = finals
    assert 0 < second.t_start - first.t_end < rt.cfg.asr.context_gap_s
    # the second utterance's decodes hear the first's audio too (the buffer starts where the first did)
    heard = max(s for u, s, _ in log if u == second.utterance)
    assert heard >= second.t_end - first.t_start - 0.3, (heard, first.t_start, second.t_end)
    # ... after the first's text, forced as their prefix (Whisper goes on after those words), or without a prefix
    assert {_norm(p) for u, s, p in log if u == second.utterance and s > second.t_end - second.t_start + 0.3} \
        == {_norm(first.text) if context_prefix else ""}
    # ... and it emits only its own words, timed after the pause
    assert all(w.start >= first.t_end - 0.3 for w in second.words), second.words
    offline = "".join(w.text for w in rt.revise_backend().transcribe(load_audio(HESITATION), "").words)
    assert _wer(offline, first.text + " " + second.text) <= 0.1, (offline, first.text, second.text)


def test_a_forced_prefix_decode_returns_only_the_words_after_it_timed_after_it(rt, jfk_audio):
    """The backend's ``prefix``: the text of the words the audio begins with is forced as the decoder's first
    tokens; the decode gives the rest of the sentence, timed where it is spoken, and not the prefix's words."""
    be = rt.asr_backend()
    whole = be.transcribe(jfk_audio, "").words
    k = next(i for i, w in enumerate(whole) if "Americans" in w.text) + 1  # "And so my fellow Americans,"
    prefix = "".join(w.text for w in whole[:k]).strip()
    rest = be.transcribe(jfk_audio, "", prefix=prefix)
    assert not rest.stats["doubtful"]
    assert _wer("".join(w.text for w in whole[k:]), "".join(w.text for w in rest.words)) <= 0.1, rest.words
    assert rest.words[0].start >= whole[k - 1].end - 0.3, (rest.words[0], whole[k - 1])
    assert "Americans" not in "".join(w.text for w in rest.words)


def test_no_acoustic_context_under_language_auto_so_each_utterance_is_identified_on_its_own_audio(rt):
    """A switch of language after a short pause: with the previous utterance's audio at the head of the buffer the
    window's language would be the previous one's, so under ``asr.language = "auto"`` each utterance's buffer starts
    at its own pre-roll."""
    from audio.sources import ArraySource, AudioBlock
    from engine.asr.language_id import SessionLanguage
    from engine.asr.transcriber import UtteranceRecord

    ring = [AudioBlock(np.zeros(1600, np.float32), 0.1 * i, 0.0) for i in range(100)]  # 0–10 s
    for session_language, buffer_start in ((None, 4.0), (SessionLanguage(rt.cfg.asr), 6.0 - rt.cfg.asr.pre_roll_s)):
        tr = rt.transcriber(ArraySource(np.zeros(16000, np.float32), realtime=False), lambda ev: None)
        tr.session_language = session_language
        assert tr.asr.context_gap_s == rt.cfg.asr.context_gap_s > 0.5
        tr.stats.utterances.append(UtteranceRecord(index=0, t_start=4.0, t_end=5.5))
        _, proc, _ = tr._start(1, 6.0, ring)  # 0.5 s after the previous utterance
        assert proc.buffer_time_offset == pytest.approx(buffer_start)
