"""The wake phrase (engine/answer/wake.py): the matcher on the ways Whisper spells a phrase, the armed/follow-up
state machine, a hands-free session on the real models that answers only what is addressed to it (and the LLM never
sees the phrase), and the two settings through the CLI and the settings dialog."""

import numpy as np
import pytest

from engine.answer.wake import CONVERSATION, LISTENING, WakeGate, WakeMatcher, phonetic_key

from .conftest import run_cli


@pytest.mark.parametrize("phrase, text, rest", [
    ("hey spec voice", "Hey, SpecVoice, what time is it?", "What time is it?"),
    ("hey spec voice", "hey spec voice what time is it", "What time is it"),
    ("hey spec voice", "Hey speck voice, what's the weather?", "What's the weather?"),
    ("hey spec voice", "Hey Spec Boys, set a timer.", "Set a timer."),
    ("hey spec voice", "Hey, spec-voice.", ""),
    ("hey spec voice", "Um, hey Spekvoice, how far is the moon?", "How far is the moon?"),
    ("hey spec voice", "A spec voice, how far is the moon?", "How far is the moon?"),
    ("okay computer", "OK, computer. Play some music.", "Play some music."),
    ("okay computer", "Okay computer, what is two plus two?", "What is two plus two?"),
    ("hello assistant", "Hello, Assistant. Who wrote Moby Dick?", "Who wrote Moby Dick?"),
    ("hello assistant", "Hello assistants, who wrote Moby Dick?", "Who wrote Moby Dick?"),
])
def test_the_phrase_is_found_however_whisper_spells_it_and_cut(phrase, text, rest):
    m = WakeMatcher(phrase).match(text, final=True)
    assert m.woken is True and m.rest == rest, m


@pytest.mark.parametrize("phrase, text", [
    ("hey spec voice", "Hey, are you coming to lunch with us today?"),
    ("hey spec voice", "Hey, so about the voice message you left yesterday."),
    ("hey spec voice", "The spec for the new feature is almost done."),
    ("hey spec voice", "So I looked at the trains for Saturday, and"),
    ("okay computer", "Okay, come with me, I'll show you the printer."),
    ("okay computer", "Okay, can you pass me the salt?"),
    ("hello assistant", "Hello, is anyone sitting here?"),
    ("hello assistant", "My assistant will send you the contract tomorrow."),
])
def test_speech_that_does_not_start_with_the_phrase_is_not_woken(phrase, text):
    assert WakeMatcher(phrase).match(text, final=True).woken is False


def test_a_transcript_that_writes_the_prompt_does_not_wake():
    """Whisper may copy its previous text: "<phrase> is the wake phrase." is the prompt, not the user."""
    m = WakeMatcher("okay computer")
    assert m.match("Okay computer is the wake phrase.", final=True).woken is False
    assert m.match("Okay computer is the").woken is None  # a partial: the next words decide
    assert m.match("Okay computer, is it raining?", final=True).rest == "Is it raining?"


def test_a_partial_is_decided_as_soon_as_its_words_allow():
    m = WakeMatcher("hey spec voice")
    assert m.match("Hey").woken is None  # the phrase may still come
    assert m.match("Hey spec").woken is None  # not woken on a part of the phrase
    assert m.match("Hey spec voice").woken is True  # at once, nothing after it needed
    assert m.match("Hey, are you coming").woken is False  # long enough: it cannot start with the phrase
    assert m.match("Hey", final=True).woken is False
    assert phonetic_key("speck") == phonetic_key("spec") and phonetic_key("SpecVoice".lower()) == "spekfois"
    with pytest.raises(ValueError, match="no word"):
        WakeMatcher(" ?! ")


def test_the_gate_answers_the_woken_utterance_and_follow_ups_until_the_window_ends():
    now = [0.0]
    changes = []
    gate = WakeGate("hey spec voice", follow_up_s=8.0, on_change=changes.append, clock=lambda: now[0])
    assert gate.prompt_hint() == "Hey spec voice is the wake phrase."  # listening: the phrase ends the new utterance's ASR prompt
    gate.speech_started(0)
    assert gate.partial(0, "I think the train") is None and gate.final(0, "I think the train is late.") is None
    assert gate.state == LISTENING and changes == []
    gate.speech_started(1)
    assert gate.partial(1, "Hey") is None  # undecided: no speculation yet
    assert gate.partial(1, "Hey spec voice, what") == "What"  # woken at the first partial holding the phrase
    assert changes == [CONVERSATION] and gate.prompt_hint() == ""  # in conversation: no phrase expected
    assert gate.final(1, "Hey spec voice, what is the time?") == "What is the time?"
    gate.tick(answering=True)  # the answer is generated and played
    now[0] = 20.0
    gate.tick(answering=True)
    now[0] = 21.0
    gate.tick(answering=False)  # it stopped at 21 s: the window runs to 29 s
    now[0] = 28.0
    gate.tick(answering=False)
    gate.speech_started(2)  # a follow-up: no phrase needed, and a phrase said anyway is still cut
    assert gate.partial(2, "And in") == "And in"
    assert gate.final(2, "Hey spec voice, and in Paris?") == "And in Paris?"
    now[0] = 29.0
    gate.tick(answering=True)
    now[0] = 30.0
    gate.tick(answering=False)
    now[0] = 37.9
    gate.tick(answering=False)
    assert gate.state == CONVERSATION
    now[0] = 38.0
    gate.tick(answering=False)
    assert gate.state == LISTENING and changes == [CONVERSATION, LISTENING]
    gate.speech_started(3)
    assert gate.final(3, "And what about Berlin?") is None
    gate.speech_started(4)
    assert gate.final(4, "Hey spec voice.") == ""  # the phrase alone: the next utterance is a follow-up
    now[0] = 40.0
    gate.tick(answering=False)
    gate.speech_started(5)
    assert gate.final(5, "What about Berlin?") == "What about Berlin?"


def _say(tts, text: str) -> np.ndarray:
    from audio.io import SAMPLE_RATE, resample

    return resample(np.asarray(tts.synthesize(text), np.float32), tts.sample_rate, SAMPLE_RATE)


def test_while_listening_the_asr_prompt_names_the_phrase_and_the_transcript_keeps_it(runtime):
    """Real Whisper on Piper saying the phrase and a question: decoded as a listening session decodes it (the gate's
    hint at the end of the prompt), the transcript opens with the phrase as typed and keeps the question after it
    (the prompt names the phrase without ending with it, so Whisper does not take it as already written)."""
    from audio.sources import ArraySource
    from engine.core.events import FinalTranscript

    gate = WakeGate("hey spec voice", follow_up_s=8.0)
    hints = []

    def hint():
        hints.append(gate.prompt_hint())
        return hints[-1]

    gap = np.zeros(12000, np.float32)
    audio = np.concatenate([gap, _say(runtime.tts(), "Hey spec voice, what time is it?"), gap, gap])
    evs = []
    runtime.transcriber(ArraySource(audio, 0.1, realtime=False, trailing_silence_s=1.0), evs.append,
                        prompt_hint=hint).run()
    finals = [e.text for e in evs if isinstance(e, FinalTranscript) and e.text]
    assert hints == ["Hey spec voice is the wake phrase."] and len(finals) == 1, (hints, finals)
    m = gate.matcher.match(finals[0], final=True)
    assert m.woken and m.distance == 0.0 and "time" in m.rest.lower(), finals


def test_an_armed_session_answers_only_the_phrased_utterance_and_its_follow_up(small_gguf, tmp_path):
    """Real Whisper, LLM and voice: a remark without the phrase is shown and journaled but not answered; the phrase
    and a question are answered, then a follow-up without the phrase; the LLM never sees the phrase."""
    from audio.sources import ArraySource
    from engine.config import Config
    from engine.core.events import FinalTranscript, WakeState
    from engine.journal import read_journal
    from engine.runtime import Runtime
    from engine.session import Session, SessionOptions

    cfg = Config().with_overrides({"asr": {"model_role": "asr_draft"}, "models": {"llm_target": str(small_gguf)},
                                   "llm": {"max_answer_tokens": 12},
                                   "duplex": {"wake_phrase": "hello assistant", "follow_up_s": 30.0}})
    rt = Runtime(cfg, progress=False)
    tts = rt.tts()
    gap = np.zeros(16000, np.float32)
    audio = np.concatenate([gap, _say(tts, "The train leaves at six tomorrow morning."), gap, gap,
                            _say(tts, "Hello assistant, what is the capital of France?"), gap, gap,
                            _say(tts, "And what is the capital of Germany?"), gap])
    seen = []
    journal = tmp_path / "journal.jsonl"
    result = Session(cfg, rt, SessionOptions(mode="assist", play=False), seen.append, journal=journal,
                     source=ArraySource(audio, cfg.audio.block_s, realtime=False)).run()
    finals = [ev.text.lower() for ev in seen if isinstance(ev, FinalTranscript) and ev.text]
    assert any("train" in f for f in finals), finals  # shown although not answered
    assert any("train" in r["text"].lower() for r in read_journal(journal) if r["type"] == "user")
    asked = " ".join(r["user"].lower() for r in result.answers)
    assert result.answers and "train" not in asked, result.answers  # the remark was not answered
    assert "france" in asked and "germany" in asked, result.answers  # the question and the follow-up were
    assert "hello" not in asked and "assistant" not in asked, result.answers  # the LLM never saw the phrase
    states = [ev.state for ev in seen if isinstance(ev, WakeState)]
    assert states[:2] == [LISTENING, CONVERSATION], states


def test_push_to_talk_and_captions_need_no_phrase():
    from audio.sources import ArraySource
    from engine.config import Config, ConfigError
    from engine.runtime import Runtime
    from engine.session import Session, SessionOptions

    cfg = Config().with_overrides({"duplex": {"wake_phrase": "hello assistant"}})
    rt = Runtime(cfg, progress=False)
    silence = [0.0] * 1600
    for opts in (SessionOptions(mode="assist", push_to_talk=True), SessionOptions(mode="caption"),
                 SessionOptions(mode="transcribe")):
        assert Session(cfg, rt, opts, print, source=ArraySource(silence, realtime=False))._wake is None
    bad = cfg.with_overrides({"duplex": {"wake_phrase": "?!"}})
    with pytest.raises(ConfigError, match="duplex.wake_phrase"):
        Session(bad, Runtime(bad, progress=False), SessionOptions(mode="assist"), print,
                source=ArraySource(silence, realtime=False))


def test_the_cli_takes_the_wake_settings_and_refuses_a_bad_window(tmp_path):
    r = run_cli(["assist", "--no-play", "--out", str(tmp_path), "--set", "duplex.follow_up_s=-1",
                 "--set", "duplex.wake_phrase=hey spec voice"])
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "duplex.follow_up_s" in r.stderr
    r = run_cli(["assist", "--no-play", "--out", str(tmp_path), "--set", "duplex.wake_phrase=?!"])
    assert r.returncode == 2 and r.stderr.startswith("specvoice: error: duplex.wake_phrase"), r.stderr


def test_the_settings_dialog_shows_and_validates_both_settings(qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from app.settings import SettingsDialog
    from engine.config import Config

    store = QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat)
    dlg = SettingsDialog(Config(), store)
    qtbot.addWidget(dlg)
    for key in ("duplex.wake_phrase", "duplex.follow_up_s"):
        assert key in dlg.widgets and dlg.widgets[key].toolTip(), key
    dlg.set_value("duplex.wake_phrase", "okay computer")
    dlg.widgets["duplex.follow_up_s"].setValue(500.0)  # out of range: the spin box refuses it
    assert dlg.current().duplex.follow_up_s <= 120.0
    dlg.set_value("duplex.follow_up_s", 5.0)
    assert dlg.apply()
    cfg = dlg.current()
    assert cfg.duplex.wake_phrase == "okay computer" and cfg.duplex.follow_up_s == 5.0


def test_the_window_names_the_phrase_and_shows_the_sessions_state(qtbot, tmp_path, small_gguf):
    from PySide6.QtCore import QSettings

    from app.controller import EngineController
    from app.main_window import MainWindow
    from engine.config import Config

    store = QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat)
    store.setValue("duplex.wake_phrase", "hello assistant")
    store.setValue("models.llm_target", str(small_gguf))
    ctl = EngineController(Config().with_overrides({"models": {"llm_target": str(small_gguf)},
                                                    "duplex": {"wake_phrase": "hello assistant"}}))
    w = MainWindow(ctl, store, history_path=tmp_path / "history.jsonl")
    qtbot.addWidget(w)
    assert "“hello assistant”" in w.wake_label.text() and "hello assistant" in w.handsfree.toolTip()
    ctl.wake_state.emit("conversation", "in conversation")
    qtbot.waitUntil(lambda: w.wake_label.text().startswith("In conversation"), timeout=5000)
    assert w.status_label.text().startswith("in conversation")  # (then a missing microphone, if any)
    ctl.wake_state.emit("listening", "listening for 'hello assistant'")
    qtbot.waitUntil(lambda: w.wake_label.text() == "Listening for “hello assistant”", timeout=5000)
    qtbot.waitUntil(lambda: ctl._loader is None or not ctl._loader.is_alive(), timeout=120_000)
    w.close()
