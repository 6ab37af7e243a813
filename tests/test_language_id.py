"""asr.language = "auto": language identification per utterance from the decode's encoder output, with hysteresis;
the language on every transcript event; captions translated from it; the assistant asked to answer in it. Real
Whisper base on real and generated speech (tests/data/make_speech.py)."""

import dataclasses
import threading

import numpy as np
import pytest

from engine.asr.language_id import LanguageChoice, SessionLanguage, pool_identifications
from engine.config import Config
from engine.core.events import FinalTranscript, PartialTranscript

from .conftest import ROOT

ASR = Config().asr  # the product's settings: every session language here is built from them


def session(language=None, **settings):
    """A :class:`SessionLanguage` starting in ``language``, of the product's ``asr`` settings with ``settings``
    overridden (each test that overrides one says why)."""
    return SessionLanguage(dataclasses.replace(ASR, **settings), language)

MIXED = ROOT / "tests" / "data" / "lang_en_fr_okay_de.flac"  # en, fr, a short "Okay.", de


# -- the hysteresis rule -------------------------------------------------------------------------------------------
def test_a_short_or_unsure_identification_does_not_switch_a_long_sure_one_does():
    s = session("fr", language_switch_p=0.8, language_switch_min_s=1.5)  # the thresholds the cases probe
    assert s.choose([("en", 0.99), ("fr", 0.001)], 0.9) == "fr"  # "Okay." in a French session: too short
    assert s.choose([("de", 0.7), ("fr", 0.2)], 4.0) == "fr"  # unsure, and French is plausible
    assert s.choose([("de", 0.85), ("fr", 0.1)], 4.0) == "de"  # sure and long enough
    assert s.choose([("de", 0.79), ("en", 0.11), ("fr", 0.01)], 4.0) == "de"  # French is not plausible at all
    assert s.choose([("de", 0.85)], 4.0, current="de") == "de"  # the utterance already switched: it stays
    assert session().choose([("es", 0.4), ("en", 0.3)], 0.5) == "es"  # no session language yet


def test_an_unsure_window_is_read_with_what_the_session_said():
    """Whisper base on synthetic speech (identifications as it gives them on bench/data/conversation/langid): the
    session's evidence from earlier utterances settles an unsure window, corrects a session that started in the
    wrong language, and lets a new speaker's language take over; a short "okay" still flips nothing."""
    first = session()  # the session's first utterance: each longer window decides anew
    assert first.choose([("ja", 0.4), ("fr", 0.3)], 1.0) == "ja"  # its first second
    assert first.choose([("fr", 0.5), ("ja", 0.2)], 3.0, current="ja") == "fr"
    s = session("it")  # a Spanish speaker's first utterance was decoded in Italian: a tie
    s.end_utterance("it", [("it", 0.43), ("es", 0.43), ("la", 0.05)])
    assert s.choose([("es", 0.39), ("en", 0.12), ("th", 0.09)], 3.0) == "es"  # the plain rule would keep Italian
    assert session("it").choose([("es", 0.39), ("en", 0.12), ("th", 0.09)], 3.0) == "it"
    s = session()
    for probs in ([("fr", 0.47), ("nn", 0.07), ("es", 0.05)], [("fr", 0.63), ("pl", 0.06), ("nn", 0.04)]):
        s.end_utterance(s.choose(probs, 3.0), probs)
    assert s.language == "fr"
    assert s.choose([("ja", 0.3), ("fr", 0.2), ("ro", 0.07)], 3.0) == "fr"  # French heard as Japanese
    assert s.choose([("en", 0.99), ("fr", 0.001)], 0.9) == "fr"  # "Okay.": too short to weigh
    for probs in ([("de", 0.64), ("en", 0.15), ("la", 0.08)], [("de", 0.57), ("en", 0.1), ("la", 0.07)]):
        s.end_utterance(s.choose(probs, 3.0), probs)  # a German speaker: sure enough at once
    assert s.language == "de"
    assert s.choose([("fr", 0.44), ("en", 0.11), ("es", 0.06)], 3.0) == "fr"  # French again, unsure but unlike German
    assert session("de").choose([("fr", 0.44), ("en", 0.11), ("es", 0.06)], 3.0) == "de"
    off = session("it", language_memory=0.0)  # no memory: the plain rule
    off.end_utterance("it", [("it", 0.43), ("es", 0.43), ("la", 0.05)])
    assert off.choose([("es", 0.39), ("en", 0.12), ("th", 0.09)], 3.0) == "it"


def test_a_language_whisper_itself_ranks_below_the_current_one_is_never_switched_to():
    """Telephone-band English (identifications as Whisper base and the language-ID head give them on the
    conversation set's four-voice telephone dialogue): the head is sure of German, Whisper itself still hears English
    first; the utterance and the session stay English. Where Whisper also prefers the new language it switches."""
    fused = [("de", 0.994), ("en", 0.004), ("nl", 0.001)]
    own = [("en", 0.47), ("th", 0.29), ("de", 0.05)]
    s = session("en")
    assert s.choose(fused, 3.0) == "de"  # without Whisper's own identification: the plain rule
    assert s.choose(fused, 3.0, whisper_probs=own) == "en"
    assert s.choose(fused, 3.0, whisper_probs=[("de", 0.4), ("en", 0.3)]) == "de"
    assert s.choose(fused, 3.0, whisper_probs=[("th", 0.4), ("de", 0.3), ("en", 0.2)]) == "de"  # de above en
    # the evidence rule is vetoed the same way: a French session, a window unsure between Japanese and French
    ev = session("it")
    ev.end_utterance("it", [("it", 0.43), ("es", 0.43), ("la", 0.05)])
    window = [("es", 0.39), ("en", 0.12), ("th", 0.09)]
    assert ev.choose(window, 3.0, whisper_probs=[("es", 0.3), ("it", 0.2)]) == "es"
    assert ev.choose(window, 3.0, whisper_probs=[("it", 0.3), ("es", 0.2)]) == "it"
    # two utterances that agree on a language Whisper ranks below the session's do not move the session
    agree = session("en")
    for _ in range(3):
        agree.end_utterance("en", fused, own)
    assert agree.language == "en"
    for _ in range(2):
        agree.end_utterance("en", fused, [("de", 0.5), ("en", 0.4)])
    assert agree.language == "de"


def test_an_utterances_windows_are_pooled_by_a_weighted_geometric_mean():
    pooled = pool_identifications([(1.0, [("fr", 0.6), ("ja", 0.3), ("es", 0.1)]),
                                   (3.0, [("ja", 0.45), ("fr", 0.4), ("es", 0.15)])])
    q = {"fr": 0.6 ** 0.25 * 0.4 ** 0.75, "ja": 0.3 ** 0.25 * 0.45 ** 0.75, "es": 0.1 ** 0.25 * 0.15 ** 0.75}
    z = sum(q.values())
    assert pooled == [(c, pytest.approx(q[c] / z)) for c in ("fr", "ja", "es")]
    # one window is itself; a language a window does not list counts with half its least listed probability
    assert pool_identifications([(2.0, [("de", 0.7), ("en", 0.3)])]) == [("de", pytest.approx(0.7)),
                                                                        ("en", pytest.approx(0.3))]
    two = dict(pool_identifications([(1.0, [("de", 0.5), ("en", 0.5)]), (1.0, [("de", 0.8), ("nl", 0.2)])]))
    assert two["en"] / two["nl"] == pytest.approx(((0.5 * 0.1) ** 0.5) / ((0.25 * 0.2) ** 0.5))
    with pytest.raises(ValueError):
        pool_identifications([])


def test_each_decode_is_given_its_utterances_identification_so_far():
    """Whisper's identification moves between the windows of a short utterance: with asr.language_pool the final
    window's unsure Japanese is outvoted by the earlier windows' French; without it the last window decides; a
    window decoded again replaces its earlier identification."""
    import types

    first, again, last = [("fr", 0.7), ("ja", 0.3)], [("fr", 0.6), ("ja", 0.4)], [("ja", 0.55), ("fr", 0.45)]
    for pool, expected in ((True, "fr"), (False, "ja")):
        proc = types.SimpleNamespace(session_language=session(language_pool=pool), language="")
        choice = LanguageChoice(proc)
        for probs, audio_s in ((first, 1.6), (again, 2.9), (last, 3.4)):
            proc.language = choice(probs, audio_s)
        assert proc.language == expected
        assert (choice.pooled is not None) == pool
    proc = types.SimpleNamespace(session_language=session(), language="")
    choice = LanguageChoice(proc)
    choice(first, 1.6)
    choice(last, 1.6)  # the same audio decoded again
    assert choice.pooled == [(c, pytest.approx(p)) for c, p in last]
    # Whisper's own identification is pooled beside the fused one, and vetoes a switch it does not back
    proc = types.SimpleNamespace(session_language=session("en"), language="en")
    choice = LanguageChoice(proc)
    sure_de = [("de", 0.95), ("en", 0.05)]
    assert choice(sure_de, 2.0, whisper_probs=[("en", 0.6), ("de", 0.4)]) == "en"
    assert choice(sure_de, 3.0, whisper_probs=[("de", 0.9), ("en", 0.1)]) == "de"
    q = (0.4 ** 2 * 0.9 ** 3) ** 0.2, (0.6 ** 2 * 0.1 ** 3) ** 0.2
    assert choice.pooled_whisper == [("de", pytest.approx(q[0] / sum(q))), ("en", pytest.approx(q[1] / sum(q)))]


def test_named_languages_restrict_every_identification():
    """asr.languages: an identification is restricted to the languages spoken and renormalised; one naming none of
    them gives the first; without named languages nothing changes."""
    s = session(languages="en,fr")
    kept = s.restrict([("ja", 0.5), ("fr", 0.3), ("en", 0.1)])
    assert [c for c, _ in kept] == ["fr", "en"] and [p for _, p in kept] == pytest.approx([0.75, 0.25])
    assert s.choose([("ja", 0.5), ("fr", 0.3), ("en", 0.1)], 3.0) == "fr"  # heard as Japanese: French is spoken
    assert s.restrict([("ja", 1.0)]) == [("en", 1.0)]
    s.language = "fr"
    s.end_utterance("fr", [("th", 0.7), ("en", 0.2), ("fr", 0.1)])  # a sure Thai is an unsure English here
    assert s.language == "fr" and session().restrict([("ja", 0.5)]) == [("ja", 0.5)]


def test_the_session_takes_an_utterances_language_or_two_that_agree():
    s = session("en", language_agree_p=0.6)
    s.end_utterance("en", [("nn", 0.65), ("en", 0.3)])  # decoded in English, leaning to Nynorsk
    assert s.language == "en"
    s.end_utterance("en", [("de", 0.7), ("en", 0.2)])  # another language: no agreement
    assert s.language == "en"
    s.end_utterance("en", [("de", 0.65), ("en", 0.3)])  # two consecutive utterances agree
    assert s.language == "de"
    s.end_utterance("fr", [("fr", 0.95)])  # an utterance that switched
    assert s.language == "fr"


def test_a_prompt_holds_the_text_of_the_sessions_language_only():
    s = session("en")
    s.note_text("Please tell me when the next train leaves.", "en")
    assert s.prompt_text("Please tell me when the next train leaves. ") == "Please tell me when the next train leaves. "
    s.note_text("Guten Morgen.", "de")
    s.end_utterance("de")
    ctx = "Please tell me when the next train leaves. Guten Morgen. "
    assert s.prompt_text(ctx) == "Guten Morgen. "
    s.note_text("Der Zug fährt um acht.", "de")
    assert s.prompt_text(ctx + "Der Zug fährt um acht. ") == "Guten Morgen. Der Zug fährt um acht. "
    # a revised text a little longer than noted: the cut still starts at a word
    assert s.prompt_text("the next train leaves. Guten Morgen! Der Zug fährt um acht Uhr. ") == \
        "Morgen! Der Zug fährt um acht Uhr. "
    s.end_utterance("fr", [("fr", 0.9)])  # switched: nothing said in French yet
    assert s.prompt_text(ctx) == ""
    assert session("de").prompt_text(ctx) == ctx  # nothing noted: nothing known to cut


def test_the_second_pass_prompt_holds_the_settled_text_in_the_chains_language():
    from engine.asr.second_pass import SecondPass, SpokenUtterance
    from engine.core.events import Word

    sp = SecondPass(None, ASR)
    sp.add(SpokenUtterance(0, 0.0, 3.0, [Word(0.1, 2.9, " Please tell me.")], "en"))
    sp.add(SpokenUtterance(1, 5.5, 7.0, [Word(5.6, 6.9, " Guten Morgen.")], "de"))
    sp.add(SpokenUtterance(2, 7.5, 9.0, [Word(7.6, 8.9, " Der Zug.")], "de"))
    assert sp.context_in("de") == "" and sp.context_in("en") == "Please tell me."
    job = sp.take() if sp.due(None) else None
    assert job is not None and job.language == "de" and job.prompt == ""
    sp.apply(job, None)  # no decode: the chain settles as it is
    assert sp.context_in("de") == "Guten Morgen. Der Zug." and sp.context == "Please tell me. Guten Morgen. Der Zug."
    sp.add(SpokenUtterance(3, 20.0, 22.0, [Word(20.1, 21.9, " Wann?")], "de"))
    sp.add(SpokenUtterance(4, 22.5, 24.0, [Word(22.6, 23.9, " Um acht.")], "de"))
    job = sp.take() if sp.due(None) else None
    assert job is not None and job.prompt == "Guten Morgen. Der Zug."  # not the English before it


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
    return {w.strip(".,!?'\"“”„").lower() for w in text.split()}


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
    _, en = _stream(rt, jfk_path, language="en", context_gap_s=0.0)  # auto decodes without acoustic context
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
    res = rt.asr_backend().transcribe(audio, "", language=lambda probs, audio_s, whisper_probs=None: probs[0][0])
    assert res.stats["language"] == "fr" and res.stats["language_probs"][0][0] == "fr"


GERMAN = ROOT / "tests" / "data" / "de_mit_licence.flac"  # "Jeden, der diese Software und die dazugehörigen …"
ENGLISH_BEFORE = ("to permit persons to whom the software is furnished to do so, subject to the following conditions, "
                  "the above copyright notice and this permission notice. So be included in all copies or substantial "
                  "portions of the software. ")
GERMAN_WORDS = {"jeden", "der", "diese", "software", "und", "die", "dazugehörigen", "erhält"}


class _NoLanguageArgument:
    """A backend wrapper whose ``transcribe`` takes no ``language`` (a recorder, a proxy): the backend picks the
    language itself."""

    name = "wrapped"

    def __init__(self, inner):
        self.inner = inner

    def transcribe(self, audio, prompt=""):
        return self.inner.transcribe(audio, prompt)


@pytest.mark.parametrize("how", ["two utterances agreed", "backend picks the language"])
def test_german_after_english_is_transcribed_in_german_not_translated(rt, how):
    """Prompted with English text, Whisper decoding German speech in German writes an English translation ("Each of
    these software and the available documentation data…"): the prompt must hold the decode's language only — when
    the session switched to German by two utterances agreeing (its context is all English) and when a backend that
    takes no ``language`` identified German itself."""
    from audio.io import load_audio
    from engine.asr.online_processor import OnlineASRProcessor

    audio = load_audio(GERMAN)
    lang = session("en")
    lang.note_text(ENGLISH_BEFORE, "en")
    backend = rt.asr_backend()
    if how == "two utterances agreed":
        lang.end_utterance("en", [("de", 0.7), ("en", 0.2)])
        lang.end_utterance("en", [("de", 0.7), ("en", 0.2)])
        assert lang.language == "de"
    else:
        backend = _NoLanguageArgument(backend)
    proc = OnlineASRProcessor(backend, ASR, context=ENGLISH_BEFORE, session_language=lang)
    proc.insert_audio_chunk(audio)
    proc.finish()
    assert proc.language == "de"
    assert len(GERMAN_WORDS & _words(proc.text)) >= 6, proc.text
    assert not {"each", "everyone", "documentation", "the"} & _words(proc.text), proc.text
    lang.end_utterance(proc.language, proc.language_probs)
    assert lang.prompt_text(ENGLISH_BEFORE + proc.text + " ") == proc.text + " "  # the next prompt: German only


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
    res = backend.transcribe(audio, "", language=session("en").choose)
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


def test_a_german_sentence_is_captioned_into_english_and_english_speech_is_its_own_caption(qwen_small):
    """caption.target_language = en: the caption loop tells the (real, guarded SSBD) translator the detected
    language, German speech comes out in English words, and English speech is shown as said."""
    from engine.config import Config, validate
    from engine.translate.biased_retranslation import SSBDTranslator
    from engine.translate.caption_loop import CaptionLoop
    from engine.translate.fidelity import FidelityGuard, guarded
    from engine.translate.languages import language_scores

    validate(Config().with_overrides({"caption": {"target_language": "en"}}))
    src = "Guten Morgen, ich möchte gerne wissen, wann der nächste Zug nach Berlin abfährt."
    tr = guarded(SSBDTranslator(qwen_small, "en", max_tokens=48, beta=0.2, mask_k=3))
    captions = []
    loop = CaptionLoop(tr, lambda cap, u: captions.append(cap), yield_to_asr=False)
    loop.on_event(FinalTranscript(0, "Please tell me when the next train leaves.", (), 0.0, 2.5, language="en"))
    loop.on_event(FinalTranscript(1, src, (), 3.0, 7.0, language="de"))
    loop.close(timeout=120)
    assert loop.error is None, loop.error
    finals = [c for c in captions if c.final]
    assert [c.utterance for c in finals] == [0, 1]
    assert finals[0].translation == "Please tell me when the next train leaves."  # already in the target
    en = finals[1].translation
    sc = language_scores(en)
    assert sc["en"] > sc["de"], en
    # the test's 0.5B model may leave a noun in German ("the next Zug to Berlin"): most words must be English
    assert "berlin" in _words(en) and len({"morning", "know", "when", "next", "train"} & _words(en)) >= 3, en
    assert tr.source_language == "German" and tr.guard_stats.checked == 1
    guard = FidelityGuard("en")
    assert guard.verdict(src, en).ok, en
    assert guard.verdict(src, src).reasons == ["not_en"]  # left in German


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


def test_the_language_id_corpus_as_speakers_taking_turns():
    """bench conversation's language-ID corpus: its clips as one stream, each voice a speaker saying its sentences
    in a row, speakers round-robin over the languages; every clip once, back to back; and the summary counts an
    utterance with an empty final text (a language was still decoded)."""
    from audio.io import load_audio
    from bench.conversation_bench import langid_conversation, load_items
    from bench.conversation_scoring import langid_summary, spoken_at

    items = load_items(["langid"])
    audio = {it.name: load_audio(it.path) for it in items}
    stream, spans = langid_conversation(items, audio)
    assert sorted(s["file"] for s in spans) == sorted(audio) and len(stream) == sum(map(len, audio.values()))
    assert all(a["end"] == pytest.approx(b["start"], abs=1e-3) for a, b in zip(spans, spans[1:]))
    turns = [(s["language"], s["voice"]) for s in spans]
    speakers = [t for i, t in enumerate(turns) if i == 0 or t != turns[i - 1]]
    assert len(speakers) == len(set(speakers))  # a speaker says all its sentences in one turn
    assert all(a[0] != b[0] for a, b in zip(speakers, speakers[1:]))  # the next speaker speaks another language
    assert spoken_at(spans, spans[5]["start"] + 1.0) == spans[5]["language"] and spoken_at(spans, 1e6) is None
    rows = [{"language": "fr", "methods": {"m": {"utterance_detail": [
        {"language": "fr", "text": "Il fait beau.", "t_start": 0.2, "t_end": 3.0},
        {"language": "ja", "text": "", "t_start": 4.0, "t_end": 6.5},
        {"language": "fr", "text": "Oui.", "t_start": 7.0, "t_end": 7.8}]}}}]
    s = langid_summary(rows, "m")
    assert s["utterance_accuracy"] == 1.0 and s["utterances"] == 2  # with a final text only
    assert s["all_utterances"] == {"accuracy": 0.6667, "utterances": 3}
    assert s["utterances_2s"] == {"accuracy": 0.5, "utterances": 2}
