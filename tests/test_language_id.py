"""asr.language = "auto": language identification per utterance from the decode's encoder output, with hysteresis;
the language on every transcript event; captions translated from it; the assistant asked to answer in it. Real
Whisper base on real and generated speech (tests/data/make_speech.py)."""

import dataclasses
import threading

import numpy as np
import pytest

from engine.asr.streaming import SessionLanguage
from engine.core.events import FinalTranscript, PartialTranscript

from .conftest import ROOT

MIXED = ROOT / "tests" / "data" / "lang_en_fr_okay_de.flac"  # en, fr, a short "Okay.", de


# -- the hysteresis rule -------------------------------------------------------------------------------------------
def test_a_short_or_unsure_identification_does_not_switch_a_long_sure_one_does():
    s = SessionLanguage(switch_p=0.8, switch_min_s=1.5, language="fr")
    assert s.choose([("en", 0.99), ("fr", 0.001)], 0.9) == "fr"  # "Okay." in a French session: too short
    assert s.choose([("de", 0.7), ("fr", 0.2)], 4.0) == "fr"  # unsure, and French is plausible
    assert s.choose([("de", 0.85), ("fr", 0.1)], 4.0) == "de"  # sure and long enough
    assert s.choose([("de", 0.79), ("en", 0.11), ("fr", 0.01)], 4.0) == "de"  # French is not plausible at all
    assert s.choose([("de", 0.85)], 4.0, current="de") == "de"  # the utterance already switched: it stays
    assert SessionLanguage().choose([("es", 0.4), ("en", 0.3)], 0.5) == "es"  # no session language yet


def test_the_session_takes_an_utterances_language_or_two_that_agree():
    s = SessionLanguage(agree_p=0.6, language="en")
    s.end_utterance("en", [("nn", 0.65), ("en", 0.3)])  # decoded in English, leaning to Nynorsk
    assert s.language == "en"
    s.end_utterance("en", [("de", 0.7), ("en", 0.2)])  # another language: no agreement
    assert s.language == "en"
    s.end_utterance("en", [("de", 0.65), ("en", 0.3)])  # two consecutive utterances agree
    assert s.language == "de"
    s.end_utterance("fr", [("fr", 0.95)])  # an utterance that switched
    assert s.language == "fr"


# -- real Whisper base ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rt():
    from engine.config import Config
    from engine.runtime import Runtime

    cfg = Config()
    return Runtime(dataclasses.replace(cfg, asr=dataclasses.replace(cfg.asr, language="auto")), progress=False)


def _stream(rt, path, **asr):
    from audio.sources import FileSource

    saved = rt.cfg
    if asr:
        rt.cfg = dataclasses.replace(rt.cfg, asr=dataclasses.replace(rt.cfg.asr, **asr))
    try:
        evs = []
        st = rt.transcriber(FileSource(path, realtime=False), evs.append)
        st.run()
        return st, evs
    finally:
        rt.cfg = saved


@pytest.fixture(scope="module")
def mixed(rt):
    if not MIXED.exists():
        pytest.skip(f"{MIXED} not available")
    return _stream(rt, MIXED)


def _finals(evs):
    return [e for e in evs if isinstance(e, FinalTranscript) and e.text]


def _words(text):
    return {w.strip(".,!?'").lower() for w in text.split()}


def test_french_and_german_are_transcribed_in_their_language_under_auto(mixed):
    st, evs = mixed
    finals = _finals(evs)
    assert [e.language for e in finals] == ["en", "fr", "fr", "de"], [(e.language, e.text) for e in finals]
    en, fr, _, de = (e.text for e in finals)
    assert {"morning", "table", "tonight"} & _words(en), en
    assert len({"bonjour", "table", "pour", "deux", "personnes", "fenêtre", "plaît"} & _words(fr)) >= 4, fr
    assert len({"guten", "morgen", "ich", "möchte", "gerne", "wissen", "zug", "nach", "berlin"} & _words(de)) >= 4, de
    # a partial carries the language it was decoded in (a file read as fast as it is consumed has few partials)
    assert all(p.language in ("en", "fr", "de") for p in evs if isinstance(p, PartialTranscript))
    assert [u.language for u in st.stats.utterances if u.text] == ["en", "fr", "fr", "de"]


def test_a_short_okay_does_not_flip_the_session(mixed):
    """The English "Okay." after the French sentence is shorter than asr.language_switch_min_s: it is decoded in
    the session's French (Whisper writes it the same), and the session stays French until the German sentence."""
    _, evs = mixed
    finals = _finals(evs)
    okay = finals[2]
    assert okay.t_end - okay.t_start < 1.5
    assert okay.language == "fr" and "ok" in okay.text.lower(), okay.text


def test_english_jfk_is_unchanged_under_auto(rt, jfk_path):
    _, auto = _stream(rt, jfk_path)
    _, en = _stream(rt, jfk_path, language="en")
    assert [e.text for e in _finals(auto)] == [e.text for e in _finals(en)]
    assert {e.language for e in _finals(auto)} == {"en"} == {e.language for e in _finals(en)}


def test_language_identification_reads_the_encoder_output_the_decode_already_has(rt):
    from audio.io import load_audio
    from engine.asr.whisper_ct2 import detect_language
    from engine.asr.window import log_mel

    m = rt.whisper_ssd()
    audio = load_audio(MIXED)[int(5.8 * 16000): int(11.9 * 16000)]  # the French sentence
    sv = m.fw.encode(log_mel(m.fw.feature_extractor, audio, m.window.n_frames(len(audio))))
    probs = detect_language(m.fw.model, sv)
    assert probs[0][0] == "fr" and probs[0][1] > 0.8
    assert sum(p for _, p in probs) == pytest.approx(1.0, abs=0.02)
    res = rt.asr_backend().transcribe(audio, "", language=lambda probs, audio_s: probs[0][0])
    assert res.stats["language"] == "fr" and res.stats["language_probs"][0][0] == "fr"


def test_the_english_only_draft_model_is_not_used_for_a_french_utterance(rt):
    """SpecASR drafts with Whisper tiny.en: a window identified as French is decoded by the target alone."""
    from audio.io import load_audio

    saved = rt.cfg
    rt.cfg = dataclasses.replace(rt.cfg, asr=dataclasses.replace(rt.cfg.asr, method="specasr"))
    try:
        backend = rt.asr_backend()
    finally:
        rt.cfg = saved

    def no_draft(*a, **k):
        raise AssertionError("the English-only draft model decoded a French window")

    backend.spec.decode = no_draft
    audio = load_audio(MIXED)[int(5.8 * 16000): int(11.9 * 16000)]
    res = backend.transcribe(audio, "", language=SessionLanguage(language="en").choose)
    assert res.stats["language"] == "fr" and res.stats["target_only"]
    assert {"table", "personnes"} <= _words("".join(w.text for w in res.words))


# -- the consumers -------------------------------------------------------------------------------------------------
class FakeTranslator:
    """Records the source language each translation was asked in (the caption loop's translator protocol)."""

    target = "German"

    def __init__(self):
        self.source_language = "English"
        self.asked = []

    def reset(self):
        pass

    def translate_ssbd(self, source, final=False, cancel=None, pause=None):
        from engine.translate.caption_loop import untranslated

        self.asked.append((source, self.source_language))
        return untranslated(f"[{self.source_language}→{self.target}] {source}", final)


def test_captions_translate_from_the_detected_language_and_keep_speech_already_in_the_target():
    from engine.translate.caption_loop import CaptionLoop, set_source_language
    from engine.translate.fidelity import GuardedTranslator

    inner = FakeTranslator()
    captions = []
    loop = CaptionLoop(inner, lambda cap, u: captions.append(cap), yield_to_asr=False)
    for i, (text, lang) in enumerate([("Good morning.", "en"), ("Bonjour.", "fr"), ("Guten Morgen.", "de")]):
        loop.on_event(FinalTranscript(i, text, (), float(i), i + 0.5, language=lang))
    loop.close(timeout=10)
    assert inner.asked == [("Good morning.", "English"), ("Bonjour.", "French")]
    assert [c.translation for c in captions] == ["[English→German] Good morning.", "[French→German] Bonjour.",
                                                 "Guten Morgen."]  # German speech captioned into German: as said
    wrapped = GuardedTranslator(inner)  # what build_translator returns: the source language reaches the inner one
    set_source_language(wrapped, "es")
    assert inner.source_language == "Spanish"


def test_the_assistant_is_asked_to_answer_in_the_language_the_user_spoke():
    from engine.answer.assistant import Conversation, in_language

    assert in_language("What time is it?", "en") == "What time is it?"  # English prompts are unchanged
    assert in_language("What time is it?", "") == "What time is it?"
    asked = in_language("Quelle heure est-il ?", "fr")
    assert asked.startswith("Quelle heure est-il ?") and "answer in French" in asked

    class Recorder:
        emit = staticmethod(lambda ev: None)

        def __init__(self):
            self.got, self.done = [], threading.Event()

        def answer(self, utterance, text, cancel):
            self.got.append(text)
            self.done.set()
            return text, None

    a = Recorder()
    conv = Conversation(a)
    conv.on_final(0, "Wie spät ist es?", "de")
    assert a.done.wait(10)
    conv.close()
    assert a.got == ["Wie spät ist es?\n(The user spoke German: answer in German.)"]


def test_session_language_is_silent_on_silence(rt):
    """A stream of silence gives no transcript and leaves the session without a language."""
    from audio.sources import ArraySource

    evs = []
    st = rt.transcriber(ArraySource(np.zeros(3 * 16000, np.float32), realtime=False), evs.append)
    st.run()
    assert not _finals(evs) and st.session_language.language is None
