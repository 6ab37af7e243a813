"""Captions translate, never answer: questions and a command into German on the real Qwen 0.5B; the fidelity
guard rejects answers and falls back to an AR re-translation (counted); the caption thread's job policy; config."""

import threading
import time

import pytest

from engine.translate.caption_loop import CaptionLoop
from engine.translate.fidelity import FidelityGuard, GuardedTranslator, guarded
from engine.translate.translator import Translator, build_messages
from engine.translate.languages import language_code, language_scores
from engine.translate.biased_retranslation import SSBDTranslator
from engine.translate.stream_metrics import SSBDUpdate

QUESTION = "Can you tell me what time it is?"
COMMAND = "Set a timer for ten minutes."


def _german(text: str) -> bool:
    sc = language_scores(text)
    return sc["de"] > sc["en"]


def test_question_is_translated_not_answered(qwen_small):
    r = Translator(qwen_small, "de").translate(QUESTION)
    low = r.text.lower()
    assert _german(r.text), r.text
    assert "?" in r.text and "sagen" in low, r.text  # still the question "can you tell me …", not a time
    assert not any(c.isdigit() for c in r.text), r.text
    assert FidelityGuard("de").verdict(QUESTION, r.text).ok, r.text
    q = "What is the weather like in Berlin tomorrow?"
    r = Translator(qwen_small, "de").translate(q)
    assert "wetter" in r.text.lower() and "berlin" in r.text.lower() and r.text.rstrip().endswith("?"), r.text


def test_command_is_translated_not_carried_out(qwen_small):
    r = Translator(qwen_small, "German").translate(COMMAND)
    low = r.text.lower()
    assert _german(r.text), r.text
    assert "minute" in low and ("zehn" in low or "10" in low), r.text
    assert FidelityGuard("de").verdict(COMMAND, r.text).ok, r.text


def test_ssbd_final_caption_of_a_question_is_a_translation(qwen_small):
    tr = guarded(SSBDTranslator(qwen_small, "de", beta=0.2, mask_k=3))
    for src in ("Can you tell", "Can you tell me what", QUESTION):
        u = tr.translate_ssbd(src, final=src == QUESTION)
    assert _german(u.text) and "?" in u.text, u.text
    assert tr.guard_stats.checked == 1


def test_guard_falls_back_to_ar_on_an_answer(qwen_small, monkeypatch):
    inner = SSBDTranslator(qwen_small, "de", beta=0.2, mask_k=3)
    answer = "Sure! It is three o'clock in the afternoon right now."
    real = inner.translate_ssbd

    def answering(source, final=False, cancel=None):
        u = real(source, final=final, cancel=cancel)
        fake = SSBDUpdate(source, qwen_small.tokenize(answer), answer, answer, "", u.draft, u.accepted,
                          u.output, u.forward_passes, u.compute_s, final)
        inner.stream.updates[-1] = fake
        return fake

    monkeypatch.setattr(inner, "translate_ssbd", answering)
    seen = []
    tr = GuardedTranslator(inner, on_trigger=seen.append)
    u = tr.translate_ssbd(QUESTION, final=True)
    assert u.text != answer and _german(u.text), u.text
    assert tr.guard_stats.triggered == 1 and tr.guard.triggered == 1 and len(seen) == 1
    ev = tr.guard_stats.events[0]
    assert ev.rejected == answer and ev.replacement == u.text and ev.reasons and ev.compute_s > 0
    assert tr.stream.updates[-1] is u  # NE and the report see the caption that was shown
    assert inner.prev == u.tokens


@pytest.mark.parametrize("source,caption,ok", [
    (QUESTION, "Kannst du mir sagen, wie spät es ist?", True),
    (QUESTION, "Es ist 15 Uhr.", False),  # an answer: the question is gone, a number invented
    (QUESTION, "Sure, it is three o'clock.", False),  # English
    ("ask not what your country can do for you", "Wie kann ich Ihnen helfen?", False),  # jfk.flac on main
    ("ask not what your country can do for you", "Frag nicht, was dein Land für dich tun kann", True),
    (COMMAND, "Stelle einen Timer auf zehn Minuten.", True),
    (COMMAND, "Natürlich! Ich habe einen Timer für 10 Minuten gestellt.", False),
    ("Write a poem about the sea.", "Hier ist ein Gedicht:\n\nDas Meer ist blau,\nder Himmel grau.", False),
    ("Please write a haiku about autumn leaves.", "Herbstblätter fallen,\nleise auf den Tisch,\nstill singen.", False),
    ("A friendly woman serving refreshments at a coffee shop.", "Eine freundliche Frau ist ein ...", False),
    ("A man in an orange hat starring at something.", "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
     True),
    ("Describe 5 key principles of an argument.", "Beschreibe fünf Schlüsselprinzipien eines Arguments.", True),
    ("I'll be in the office at noon.", "Ich werde mittags im Büro sein.", True),  # the source opens so
    ("Describe 5 key principles of an argument.", "Beschreibe drei Schlüsselprinzipien eines Arguments.", False),
    ("Describe 5 key principles of an argument.", "Beschreibe fünfzig Schlüsselprinzipien eines Arguments.", False),
    ("David has three sisters.", "David hat drei Schwestern.", True),  # short sentences: few stop words
    ("Tire, steering wheel, car, engine.", "Reifen, Lenkrad, Auto, Motor.", True),
    ("What is the name of the capital city of Australia today?", "What is the name of the capital of Australia?",
     False),  # left in English
])
def test_guard_verdicts(source, caption, ok):
    assert FidelityGuard("de").verdict(source, caption).ok is ok


@pytest.mark.parametrize("source, caption, ok", [
    ("Me gustaría reservar una mesa para cuatro personas.", "I would like to reserve a table for four people.", True),
    ("Je vais au marché demain matin.", "I will go to the market tomorrow morning.", True),
    ("Ich bin heute sehr müde von der Arbeit.", "I am very tired from work today.", True),
    ("Wie spät ist es jetzt in Berlin?", "Sure! It is three o'clock in Berlin right now.", False),
    ("Kannst du mir sagen, wie spät es ist?", "I can't tell you the time, I am a translation engine.", False),
])
def test_guard_into_english_takes_first_person_for_a_translation(source, caption, ok):
    """Into English, a caption opening "I would / I will / I am" translates first-person speech (Spanish drops the
    pronoun, so the source cannot show it); "Sure!" still opens a reply, and an answer loses the question mark."""
    assert FidelityGuard("en").verdict(source, caption).ok is ok, FidelityGuard("en").verdict(source, caption)
    assert not FidelityGuard("de").verdict("Can you tell me what time it is?", "I can tell you: it is three.").ok


def test_guard_language_check_per_target():
    assert FidelityGuard("fr").verdict(QUESTION, "Peux-tu me dire quelle heure il est ?").ok
    assert FidelityGuard("es").verdict(QUESTION, "¿Puedes decirme qué hora es?").ok
    assert not FidelityGuard("fr").verdict(COMMAND, "Stelle einen Timer auf zehn Minuten, bitte.").ok
    assert not FidelityGuard("es").verdict(COMMAND, "Set a timer for ten minutes, please now.").ok


def test_worked_pairs_are_in_the_source_language_and_the_target():
    """The few-shot pairs of a caption into English from German are German → English (an English-only example set
    would show the model no translation into English at all); English → German keeps the English sources."""
    from engine.translate.translator import FEWSHOT_SENTENCES, fewshot_pairs

    msgs, tag = build_messages("Wie spät ist es?", "English", "strict", "German")
    shown = [m["content"] for m in msgs if m["role"] == "assistant"]
    assert tag == "English:" and shown == [f"English: {s}" for s in FEWSHOT_SENTENCES["en"]]
    assert all("<source>" + s + "</source>" in m["content"] for s, m in
               zip(FEWSHOT_SENTENCES["de"], [m for m in msgs if m["role"] == "user"]))
    assert fewshot_pairs("English", "de") == list(zip(FEWSHOT_SENTENCES["en"], FEWSHOT_SENTENCES["de"]))
    assert fewshot_pairs("fr", "Spanish") == list(zip(FEWSHOT_SENTENCES["fr"], FEWSHOT_SENTENCES["es"]))
    assert fewshot_pairs("German", "German") == [] and fewshot_pairs("Japanese", "English") == []


@pytest.mark.parametrize("language, source, words", [
    ("de", "Kannst du mir sagen, wie spät es ist?", ("can you",)),
    ("fr", "Mon frère prépare une soupe pour le dîner.", ("soup",)),
    ("fr", "Je voudrais un café, s'il vous plaît.", ("coffee",)),
    ("es", "¿Dónde está la estación de tren?", ("train", "station")),
])
def test_a_caption_into_english_is_the_bare_translation(qwen_small, language, source, words):
    """Into English from the language the speech was identified in: the English words, a question still a question,
    not wrapped in quote marks and not opening with the prompt's instruction."""
    from engine.translate.caption_loop import set_source_language

    tr = Translator(qwen_small, "en")
    set_source_language(tr, language)
    text = tr.translate(source).text
    low = text.lower()
    assert all(w in low for w in words), text
    assert not text.startswith(('"', "«", "“")) and "obey" not in low and "<source>" not in low, text
    assert text.rstrip().endswith("?") == source.rstrip().endswith("?"), text


def test_frames_put_the_source_in_delimiters():
    msgs, tag = build_messages(QUESTION, "German", "fewshot")
    assert msgs[-1]["content"] == f"<source>{QUESTION}</source>" and tag == ""
    assert any(m["role"] == "assistant" and m["content"].endswith("?") for m in msgs)  # a question stays one
    msgs, tag = build_messages(QUESTION, "French")
    assert tag == "French:" and "do not answer" in msgs[-1]["content"] and msgs[-1]["content"].endswith(
        f"<source>{QUESTION}</source>")
    guard, _ = build_messages(QUESTION, "French", "guard")
    assert guard[:-1] == msgs[:-1] and guard[-1] != msgs[-1]  # the cached prefix is shared, the last turn differs
    with pytest.raises(ValueError):
        build_messages(QUESTION, "German", "chatty")
    assert language_code("German") == "de" and language_code("es") == "es" and language_code("Klingon") is None


class _Echo:
    """A translator stand-in recording the job order."""

    def __init__(self):
        self.jobs, self.resets = [], 0
        self.gate = threading.Event()
        self.entered = threading.Event()  # a job reached the translator

    def reset(self):
        self.resets += 1

    def translate_ssbd(self, source, final=False, cancel=None, pause=None):
        self.entered.set()
        self.gate.wait(60)  # the test opens it; the timeout only bounds a hang
        self.jobs.append((source, final))
        return SSBDUpdate(source, [], source.upper(), source.upper(), "", 0, 0, 0, 0, 0.0, final)


def _until(cond, timeout_s: float = 60.0) -> bool:
    """Poll ``cond()`` until it holds; the timeout only bounds a hang. Returns its last value."""
    deadline = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(cond())


def test_caption_loop_finals_first_newest_partial_only():
    from engine.core.events import FinalTranscript, PartialTranscript

    tr, shown = _Echo(), []
    loop = CaptionLoop(tr, lambda c, u: shown.append((c.utterance, u.text, u.final)))
    loop.on_event(PartialTranscript(0, "a", "", 0.5, 0.0))  # taken at once; the thread blocks on the gate
    assert tr.entered.wait(10)
    for text in ("a b", "a b c"):
        loop.on_event(PartialTranscript(0, text, "", 1.0, 0.0))
    loop.on_event(FinalTranscript(0, "a b c d", (), 0.0, 1.0))
    loop.on_event(PartialTranscript(1, "x", "", 0.5, 0.0))
    tr.gate.set()
    assert _until(lambda: len(tr.jobs) >= 3), tr.jobs
    loop.close(timeout=10)
    # partials of an utterance whose final is queued are stale; the final goes before the next partial
    assert tr.jobs == [("a", False), ("a b c d", True), ("x", False)], tr.jobs
    assert tr.resets == 2 and loop.error is None


def test_caption_loop_translates_the_source_it_is_told():
    """source="hypothesis" (the default setting): a partial update translates the ASR's hypothesis of the final
    transcript; "partial": the partial transcript as shown; a partial without a hypothesis falls back to its text."""
    from engine.config import Config
    from engine.core.events import PartialTranscript

    assert Config().caption.source == "hypothesis"
    for source, want in (("hypothesis", ["a man with a", "amen with"]), ("partial", ["amen with a", "amen with"])):
        tr, shown = _Echo(), []
        tr.gate.set()
        loop = CaptionLoop(tr, lambda c, u: shown.append(u.text), source=source)
        loop.on_event(PartialTranscript(0, "amen ", "with a", 1.0, 0.0, hypothesis="a man with a"))
        assert _until(lambda: len(tr.jobs) >= 1)
        loop.on_event(PartialTranscript(0, "amen ", "with", 1.5, 0.0))
        assert _until(lambda: len(tr.jobs) >= 2), tr.jobs
        loop.close(timeout=10)
        assert [j[0] for j in tr.jobs] == want, (source, tr.jobs)
    with pytest.raises(ValueError, match="source"):
        CaptionLoop(_Echo(), lambda c, u: None, source="committed")


def test_config_target_language():
    from engine.config import Config, ConfigError, validate

    for lang in ("de", "fr", "es", "German", "french", "Spanish", "en", "English"):
        validate(Config().with_overrides({"caption": {"target_language": lang}}))
    for bad in ("Klingon", "xx", ""):
        with pytest.raises(ConfigError, match="target_language"):
            validate(Config().with_overrides({"caption": {"target_language": bad}}))


class _Slow(_Echo):
    """A partial translation that runs until it is cancelled."""

    def translate_ssbd(self, source, final=False, cancel=None, pause=None):
        if not final:
            self.gate.set()
            self.cancel_seen = cancel is not None and cancel.wait(60)  # False: it ran to the end uncancelled
        self.jobs.append((source, final))
        return SSBDUpdate(source, [], source, source, "", 0, 0, 0, 0, 0.0, final)


def test_caption_loop_final_cancels_the_partial_in_flight():
    from engine.core.events import FinalTranscript, PartialTranscript

    tr, shown = _Slow(), []
    loop = CaptionLoop(tr, lambda c, u: shown.append((u.text, u.final)))
    loop.on_event(PartialTranscript(0, "a b", "", 0.5, 0.0))
    assert tr.gate.wait(5)  # the partial is being translated
    loop.on_event(FinalTranscript(0, "a b c", (), 0.0, 1.0))
    loop.close(timeout=90)
    assert tr.cancel_seen and loop.cancelled == 1 and loop.error is None  # stopped by the final, not run out
    assert shown == [("a b c", True)]


class _Finite(_Echo):
    """A partial translation that finishes on its own (after the gate)."""

    def translate_ssbd(self, source, final=False, cancel=None, pause=None):
        if not final:
            self.entered.set()
            self.gate.wait(60)
        self.jobs.append((source, final, bool(cancel is not None and cancel.is_set())))
        return SSBDUpdate(source, [], source, source, "", 0, 0, 0, 0, 0.0, final)


def test_caption_loop_lets_the_partial_of_the_final_text_finish():
    from engine.core.events import FinalTranscript, PartialTranscript

    tr, shown = _Finite(), []
    loop = CaptionLoop(tr, lambda c, u: shown.append((u.text, u.final)))
    loop.on_event(PartialTranscript(0, "a b ", "c", 0.5, 0.0))
    assert tr.entered.wait(10)  # the partial is being translated
    loop.on_event(FinalTranscript(0, "a  b c", (), 0.0, 1.0))  # the same words: the partial is not cancelled
    tr.gate.set()
    loop.close(timeout=10)
    assert tr.jobs == [("a b c", False, False), ("a  b c", True, False)] and loop.cancelled == 0
    assert shown == [("a b c", False), ("a  b c", True)]


@pytest.mark.parametrize("method", ["ssbd", "ar"])
def test_final_of_an_already_translated_source_reuses_it(qwen_small, method):
    from engine.translate.biased_retranslation import ARRetranslator, SSBDTranslator

    tr = SSBDTranslator(qwen_small, "German", max_tokens=48) if method == "ssbd" else ARRetranslator(
        qwen_small, "German", max_tokens=48)
    src = "The children are playing in the park."
    first = tr.translate_ssbd(src)
    n = tr.session.n_eval
    fin = tr.translate_ssbd(" " + src, final=True)
    assert tr.session.n_eval == n and fin.forward_passes == 0 and fin.final  # no LM work
    assert fin.tokens == first.tokens and fin.stable_text == first.text and fin.tail_text == ""
    # the same as translating it afresh (greedy is deterministic)
    tr.reset()
    assert tr.translate_ssbd(src, final=True).text == fin.text
    # a different source, or a cut-off previous update, is translated for real
    tr.reset()
    tr.translate_ssbd("The children are playing")
    n = tr.session.n_eval
    assert tr.translate_ssbd(src, final=True).forward_passes > 0 and tr.session.n_eval > n


def test_caption_loop_end_of_speech_starts_the_last_partial():
    """At the end of speech an older partial in flight is cancelled for the newest one (usually the final's
    text), which then runs without waiting for ASR decodes; while speaking, partials get ``pause``."""
    from engine.core.events import FinalTranscript, PartialTranscript, SpeechEnded

    class Rec(_Echo):
        def translate_ssbd(self, source, final=False, cancel=None, pause=None):
            self.jobs.append((source, final, pause is not None))
            if source == "a":
                self.gate.set()
                self.cancel_seen = cancel is not None and cancel.wait(60)  # False: it ran to the end uncancelled
            return SSBDUpdate(source, [], source, source, "", 0, 0, 0, 0, 0.0, final)

    tr, shown = Rec(), []
    loop = CaptionLoop(tr, lambda c, u: shown.append((u.text, u.final)))
    loop.on_event(PartialTranscript(0, "a", "", 0.5, 0.0))
    assert tr.gate.wait(5)
    loop.on_event(PartialTranscript(0, "a b c", "", 1.0, 0.0))
    loop.on_event(SpeechEnded(0, 1.0, 1.0))
    assert _until(lambda: len(tr.jobs) >= 2), tr.jobs  # the newest partial started
    loop.on_event(FinalTranscript(0, "a b c", (), 0.0, 1.0))
    loop.close(timeout=90)
    assert tr.cancel_seen and loop.cancelled == 1 and loop.error is None
    assert tr.jobs == [("a", False, True), ("a b c", False, False), ("a b c", True, False)], tr.jobs
    assert shown == [("a b c", False), ("a b c", True)]


def test_split_sentences():
    from engine.translate.sentence_translator import split_sentences

    assert split_sentences("Hello there.  How are you?") == ["Hello there.", "How are you?"]
    assert split_sentences('Mr. Smith said "hi." Then he left') == ['Mr. Smith said "hi."', "Then he left"]
    assert split_sentences("It costs 3.5 dollars, e.g. a coffee. OK") == ["It costs 3.5 dollars, e.g. a coffee.", "OK"]
    assert split_sentences("   ") == [] and split_sentences("no end yet") == ["no end yet"]


def test_sentence_translator_keeps_closed_sentences_and_translates_only_the_open_one(qwen_small):
    """caption.segment = sentence: a sentence followed by another is translated once (a final, guarded caption) and
    reused while the ASR's text of it stays; the final update translates only the last sentence; a revised
    closed sentence is translated again. The closed sentence's caption equals translating it alone."""
    from engine.translate.sentence_translator import SentenceTranslator

    first, second = "The children are playing in the park.", "Where is my red bicycle?"
    tr = SentenceTranslator(guarded(SSBDTranslator(qwen_small, "de", max_tokens=48, beta=0.2, mask_k=3)))
    tr.translate_ssbd("The children are playing")
    u = tr.translate_ssbd(f"{first} Where is")
    assert tr.closed_translated == 1 and len(tr.done) == 1
    alone = guarded(SSBDTranslator(qwen_small, "de", max_tokens=48)).translate_ssbd(first, final=True).text
    assert tr.done[0][2] == alone and u.stable_text.startswith(alone)
    n = tr.inner.session.n_eval
    fin = tr.translate_ssbd(f"{first}  {second}", final=True)
    assert tr.closed_translated == 1 and tr.closed_reused >= 1  # the first sentence was not translated again
    assert fin.final and fin.text.startswith(alone + " ") and fin.text.rstrip().endswith("?"), fin.text
    assert _german(fin.text[len(alone):]), fin.text
    assert tr.inner.guard_stats.checked == 2  # each sentence's final caption passed the guard
    assert fin.forward_passes == tr.inner.session.n_eval - n  # only the open sentence's work
    # the ASR revised the first sentence: it is translated again
    tr.translate_ssbd(f"The children are praying in the park. {second}", final=False)
    assert tr.closed_translated == 2 and tr.done[0][0].startswith("The children are praying")
    tr.reset()
    assert tr.done == [] and tr.stream.updates == []


def test_caption_segment_config():
    from engine.config import Config, ConfigError, validate

    validate(Config().with_overrides({"caption": {"segment": "utterance"}}))
    with pytest.raises(ConfigError, match="segment"):
        validate(Config().with_overrides({"caption": {"segment": "word"}}))
