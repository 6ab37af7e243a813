"""The desktop app shows the best transcript known and the language spoken: a ``RevisedTranscript`` (the engine's
second pass) replaces the shown lines of the utterances it revises and reaches the journal and ``specvoice export``;
a final in another language than the session's default is tagged, and the status line names the session's language.

The window runs offscreen on a real ``EngineController`` whose models are not loaded and whose sessions are not
started: the engine's transcript events are journaled by the session's own writer (``engine.journal.JournalWriter``)
and go through the controller's ``emit_transcript`` from a worker thread, so they reach the window as queued
signals, as in a session. The last test runs a real session (hesitation_en.flac as the microphone, real Whisper base
and the small LLM) to show that the session's ASR events take that path."""

import os
import re
import threading

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QCoreApplication, QSettings  # noqa: E402

from engine.journal import Journal, JournalWriter, read_journal  # noqa: E402
from engine.config import Config  # noqa: E402
from engine.core.events import AnswerDone, Caption, FinalTranscript, RevisedTranscript, Word  # noqa: E402

from .conftest import ROOT  # noqa: E402

HESITATION = ROOT / "tests" / "data" / "hesitation_en.flac"


def _window(qtbot, tmp_path, monkeypatch, overrides=None):
    from app.controller import EngineController
    from app.main_window import MainWindow

    cfg = Config().with_overrides({"audio": {"output_device": "none"}, **(overrides or {})})
    ctl = EngineController(cfg)
    writers = []

    def start(opts):  # a session starts by opening its journal session (engine.session.Session)
        writers.append(JournalWriter(Journal(ctl.journal_path).start("app")))
        return True

    monkeypatch.setattr(ctl, "load", lambda mode="assist": None)
    monkeypatch.setattr(ctl, "start", start)
    w = MainWindow(ctl, QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat),
                   history_path=tmp_path / "history.jsonl")
    w.journal_writers = writers
    qtbot.addWidget(w)
    w.output_pick.setCurrentIndex(w.output_pick.findData("none"))
    w.add_file_input(str(HESITATION))  # an input that exists on a machine without a microphone
    w.show()
    return w


@pytest.fixture()
def window(qtbot, tmp_path, monkeypatch):
    w = _window(qtbot, tmp_path, monkeypatch)
    yield w
    w.close()


@pytest.fixture()
def auto_window(qtbot, tmp_path, monkeypatch):
    w = _window(qtbot, tmp_path, monkeypatch, {"asr": {"language": "auto"}})
    yield w
    w.close()


def _from_asr_thread(qtbot, w, *events) -> None:
    """Report ``events`` as the session does — journaled by the session's writer, then through the controller from
    a worker thread — and deliver the signals it queued to the window (in the order they were emitted)."""

    def session():
        for ev in events:
            w.journal_writers[-1].note(ev)
            w.journal_writers[-1].write(ev)
            w.ctl.emit_transcript(ev)

    t = threading.Thread(target=session, name="asr-test")
    t.start()
    t.join()
    QCoreApplication.sendPostedEvents()


def _words(text: str, t0: float, step: float = 0.3) -> tuple[Word, ...]:
    return tuple(Word(t0 + i * step, t0 + (i + 1) * step, " " + w) for i, w in enumerate(text.split()))


def _final(utt: int, text: str, t0: float, t1: float, language: str = "en") -> FinalTranscript:
    return FinalTranscript(utt, text, _words(text, t0), t0, t1, language=language)


def _tooltips(w) -> list[str]:
    """Every tooltip in the conversation view's text (the revision marks', the language tags')."""
    out = []
    block = w.conversation.document().firstBlock()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            tip = it.fragment().charFormat().toolTip()
            if tip:
                out.append(tip)
            it += 1
        block = block.next()
    return out


def test_a_revision_replaces_the_shown_lines_and_the_exported_text(qtbot, window, tmp_path, capsys):
    from app import cli

    w = window
    w.handsfree.setChecked(True)
    # the VAD cut one sentence at a hesitation pause: two finals, each decoded without the other's audio
    _from_asr_thread(qtbot, w, _final(0, "I would like to.", 0.3, 1.6), _final(1, "A tower, please.", 2.4, 3.6))
    w.journal_writers[-1].write(AnswerDone(1, "Here is a towel."))  # answered before the revision came
    w.ctl.answer_done.emit(1, "Here is a towel.", False)
    assert w.shown_user_lines() == [(0, "I would like to."), (1, "A tower, please.")]

    revised = "I would like to order a towel, please."
    _from_asr_thread(qtbot, w, RevisedTranscript((0, 1), (revised, ""), _words(revised, 0.3), 0.3, 3.6, "en"))
    view = w.conversation.toPlainText()
    assert w.shown_user_lines() == [(0, revised)]  # utterance 1's words moved to utterance 0: its line is gone
    assert f"You: {revised} (revised)" in view
    assert "A tower, please." not in view and "I would like to.\n" not in view
    assert "Assistant: Here is a towel." in view  # the answer already given is not redone
    assert "before the revision: I would like to." in _tooltips(w)

    # journaled before it is shown, as the CLI journals it: the revision record follows the finals
    recs = read_journal(w.history.path)
    rev = [r for r in recs if r["type"] == "revision"]
    assert [(r["utterances"], r["texts"]) for r in rev] == [([0, 1], [revised, ""])]
    assert [r["type"] for r in recs if r["type"] in ("user", "revision")] == ["user", "user", "revision"]

    w.ctl.session_ended.emit()
    out = tmp_path / "app.txt"
    assert cli.main(["export", str(out), "--journal", str(w.history.path)]) == 0
    text = out.read_text(encoding="utf-8")
    assert f"You: {revised}" in text and "A tower, please." not in text, text
    assert "Assistant: Here is a towel." in text
    srt = tmp_path / "app.srt"
    assert cli.main(["export", str(srt), "--journal", str(w.history.path)]) == 0
    assert revised in srt.read_text(encoding="utf-8") and "A tower" not in srt.read_text(encoding="utf-8")


def test_a_later_revision_keeps_the_text_shown_before_the_first(qtbot, window):
    w = window
    w.handsfree.setChecked(True)
    _from_asr_thread(qtbot, w, _final(0, "Recalls and stuff.", 0.5, 1.8))
    _from_asr_thread(qtbot, w, RevisedTranscript((0,), ("Our goals and stuff.",), (), 0.5, 1.8, "en"))
    _from_asr_thread(qtbot, w, RevisedTranscript((0,), ("Change our goals and stuff.",), (), 0.0, 1.8, "en"))
    assert w.shown_user_lines() == [(0, "Change our goals and stuff.")]
    assert "before the revision: Recalls and stuff." in _tooltips(w)
    assert "You: Change our goals and stuff. (revised)" in w.conversation.toPlainText()


def test_a_revision_reaches_only_its_own_session(qtbot, window):
    """Utterance numbers start again at each session: a revision of the second session's utterance 0 leaves the
    first session's utterance 0 as it was."""
    w = window
    w.handsfree.setChecked(True)
    _from_asr_thread(qtbot, w, _final(0, "Good morning.", 0.2, 1.0))
    w.ctl.session_ended.emit()
    assert not w.handsfree.isChecked()
    w.handsfree.setChecked(True)
    _from_asr_thread(qtbot, w, _final(0, "What is the whether?", 0.2, 1.4), _final(1, "Today.", 2.0, 2.5))
    _from_asr_thread(qtbot, w, RevisedTranscript((0, 1), ("What is the weather today?", ""), (), 0.2, 2.5, "en"))
    view = w.conversation.toPlainText()
    assert "You: Good morning." in view and "Good morning. (revised)" not in view
    assert w.shown_user_lines() == [(0, "What is the weather today?")]
    assert "Today." not in view and "whether" not in view


def test_words_moved_into_an_utterance_whose_final_was_empty_are_shown_in_order(qtbot, window):
    w = window
    w.handsfree.setChecked(True)
    _from_asr_thread(qtbot, w, _final(0, "Yes.", 0.2, 0.6), _final(1, "", 1.2, 1.5), _final(2, "Tomorrow.", 2.0, 2.6))
    assert w.shown_user_lines() == [(0, "Yes."), (2, "Tomorrow.")]
    _from_asr_thread(qtbot, w, RevisedTranscript((0, 1), ("Yes,", "maybe."), (), 0.2, 1.5, "en"))
    assert w.shown_user_lines() == [(0, "Yes,"), (1, "maybe."), (2, "Tomorrow.")]
    assert "no text before the revision" in _tooltips(w)
    assert "[00:00:01.200] You: maybe." in w.history.to_txt()  # the exports show it too, at its own time
    srt = w.history.to_srt()
    assert srt.index("Yes,") < srt.index("maybe.") < srt.index("Tomorrow."), srt


def test_a_french_final_shows_its_language_and_the_session_language_follows(qtbot, auto_window):
    w = auto_window
    w.handsfree.setChecked(True)
    assert w.language_label.text() == "Spoken language: detecting…"  # asr.language = auto, nothing heard yet
    _from_asr_thread(qtbot, w, _final(0, "Tell me a story.", 0.3, 1.5, "en"))
    assert w.language_label.text() == "Spoken language: English (en)"
    _from_asr_thread(qtbot, w, _final(1, "Si vous ne dormez pas, ma sœur.", 2.5, 5.0, "fr"))
    view = w.conversation.toPlainText()
    assert "You: Tell me a story." in view  # English, the default: no tag
    assert "You: [fr] Si vous ne dormez pas, ma sœur." in view
    assert "[en]" not in view
    assert "French" in _tooltips(w)
    assert w.language_label.text() == "Spoken language: French (fr)" and w.session_language == "fr"
    assert w.language_label.isVisible()
    # the journal keeps each final's language
    users = [r for r in read_journal(w.history.path) if r["type"] == "user"]
    assert [(r["text"], r.get("language")) for r in users] == [("Tell me a story.", "en"),
                                                                ("Si vous ne dormez pas, ma sœur.", "fr")]
    # a revision keeps the tag of the language it was decoded in
    _from_asr_thread(qtbot, w, RevisedTranscript((1,), ("Si vous ne dormez pas, ma sœur, je vous prie.",), (),
                                                 2.5, 5.0, "fr"))
    assert "You: [fr] Si vous ne dormez pas, ma sœur, je vous prie. (revised)" in w.conversation.toPlainText()


def test_a_fixed_language_is_named_and_its_finals_are_not_tagged(qtbot, tmp_path, monkeypatch):
    w = _window(qtbot, tmp_path, monkeypatch, {"asr": {"language": "de"}})
    try:
        w.handsfree.setChecked(True)
        assert w.language_label.text() == "Spoken language: German (de)"
        _from_asr_thread(qtbot, w, _final(0, "Guten Morgen.", 0.3, 1.2, "de"))
        assert "You: Guten Morgen." in w.conversation.toPlainText() and "[de]" not in w.conversation.toPlainText()
    finally:
        w.close()


def test_caption_mode_journals_the_transcript_and_the_caption_and_shows_the_revision(qtbot, window):
    """A caption session journals what was said and its final caption (as ``specvoice caption`` does); the
    revision changes the shown line, and the caption of the final stays."""
    w = window
    w.mode_caption.setChecked(True)
    w.handsfree.setChecked(True)
    _from_asr_thread(qtbot, w, _final(0, "Ask not what.", 0.0, 1.0))
    caption = Caption(0, "Ask not what.", "Frage nicht, was.", "", True, 0.1)
    w.journal_writers[-1].write(caption)
    w.ctl.caption.emit(caption)
    _from_asr_thread(qtbot, w, RevisedTranscript((0,), ("Ask not what your country can do.",), (), 0.0, 2.0, "en"))
    assert w.shown_user_lines() == [(0, "Ask not what your country can do.")]
    assert "Caption: Ask not what. → Frage nicht, was." in re.sub(" +", " ", w.conversation.toPlainText())
    records = read_journal(w.history.path)
    assert [r["type"] for r in records] == ["session", "user", "caption", "revision"]
    assert records[2]["translation"] == "Frage nicht, was."


def test_emit_transcript_takes_only_transcript_events(window):
    with pytest.raises(TypeError, match="not a transcript event"):
        window.ctl.emit_transcript(Caption(0, "a", "b", "", True, 0.0))


def test_the_detected_language_moves_nothing(qtbot, auto_window):
    w = auto_window
    qtbot.waitExposed(w)

    def geometry():
        return [o.mapTo(w, o.rect().topLeft()).toTuple() + o.size().toTuple()
                for o in (w.status_label, w.language_label, w.conversation, w.talk)]

    before = geometry()
    w.handsfree.setChecked(True)
    _from_asr_thread(qtbot, w, _final(0, "Por favor, cuéntame un cuento.", 0.3, 2.5, "es"))
    _from_asr_thread(qtbot, w, _final(1, "Também quero ouvir português.", 3.0, 5.0, "pt"))
    qtbot.wait(20)
    assert w.language_label.text() == "Spoken language: Portuguese (pt)"
    assert geometry() == before


def test_a_real_session_forwards_the_engines_revisions(qtbot, tmp_path, small_gguf):
    """The real session path (hesitation_en.flac as the microphone, real Whisper base, the small LLM answering):
    every RevisedTranscript the transcriber emits reaches the window, the journal and the export, in order: the
    second pass's own revisions and one added after every final, so each utterance is revised at least once; the
    window, the journal and the export show each utterance's latest text."""
    from app.controller import EngineController
    from app.main_window import MainWindow

    cfg = Config().with_overrides({"models": {"llm_target": str(small_gguf)}, "llm": {"max_answer_tokens": 12},
                                   "audio": {"output_device": "none"}})
    ctl = EngineController(cfg)
    make = ctl.rt.transcriber
    added, emitted = [], []

    def transcriber(source, emit, use_vad=True, **turn):
        def on_event(ev):
            emit(ev)
            if isinstance(ev, RevisedTranscript):
                emitted.append(ev)  # the second pass's own
            if isinstance(ev, FinalTranscript) and ev.text:
                added.append(RevisedTranscript((ev.utterance,), (ev.text.rstrip(".") + ", revised.",), ev.words,
                                               ev.t_start, ev.t_end, ev.language))
                emitted.append(added[-1])
                emit(added[-1])

        return make(source, on_event, use_vad, **turn)

    ctl.rt.transcriber = transcriber
    w = MainWindow(ctl, QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat),
                   history_path=tmp_path / "history.jsonl")
    qtbot.addWidget(w)
    try:
        w.output_pick.setCurrentIndex(w.output_pick.findData("none"))
        w.add_file_input(str(HESITATION))
        revised = []
        ctl.revised.connect(revised.append)
        with qtbot.waitSignal(ctl.session_ended, timeout=240_000):
            w.handsfree.setChecked(True)
        qtbot.wait(50)
        assert added and [r.texts for r in revised] == [r.texts for r in emitted]
        latest = {}
        for r in emitted:
            latest.update(zip(r.utterances, r.texts))
        shown = [t for _, t in w.shown_user_lines()]
        assert shown == [latest[r.utterances[0]] for r in added]
        assert all(f"{t} (revised)" in w.conversation.toPlainText() for t in shown)
        txt = w.history.to_txt()
        assert all(f"You: {t}" in txt for t in shown), txt
    finally:
        w.close()
        ctl.wait_stopped(timeout=90)
