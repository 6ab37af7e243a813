"""The desktop app, offscreen (QT_QPA_PLATFORM=offscreen): a WAV file as the microphone through the real engine,
settings, the caption window's masking, exports, and screenshots."""

import os
import re
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QSettings  # noqa: E402

from app.caption_window import CaptionWindow  # noqa: E402
from app.export import History  # noqa: E402
from engine.config import Config  # noqa: E402
from engine.core.events import Caption, SpokenAnswerMetrics, TurnMetrics  # noqa: E402
from engine.journal import Journal  # noqa: E402

from .conftest import QUESTION, ROOT  # noqa: E402

ENGINE_THREADS = {"session", "capture", "asr", "revise", "answer", "caption", "tts", "speakers",
                  "answer-delivery"}  # the engine's threads
SHOTS = Path(os.environ.get("SPECVOICE_SCREENSHOTS", "")) if os.environ.get("SPECVOICE_SCREENSHOTS") else None


@pytest.fixture()
def store(tmp_path):
    return QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat)


@pytest.fixture()
def window(qtbot, tmp_path, store, small_gguf):
    from app.controller import EngineController
    from app.main_window import MainWindow

    cfg = Config().with_overrides({"models": {"llm_target": str(small_gguf)}, "llm": {"max_answer_tokens": 40},
                                   "audio": {"output_device": "none"}})
    store.setValue("models.llm_target", str(small_gguf))
    store.setValue("llm.max_answer_tokens", 40)
    ctl = EngineController(cfg)
    w = MainWindow(ctl, store, history_path=tmp_path / "history.jsonl")
    qtbot.addWidget(w)
    w.output_pick.setCurrentIndex(w.output_pick.findData("none"))
    w.show()
    yield w
    w.close()
    # no engine thread of this test may outlive its window (it would signal into the next test's objects)
    import threading
    import time

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and any(
            t.is_alive() and t.name in ENGINE_THREADS for t in threading.enumerate()):
        qtbot.wait(50)


def _run_question(qtbot, w, timeout_ms=240_000):
    answers, audio = [], []
    w.ctl.answer_done.connect(lambda u, t, i: answers.append(t))
    w.ctl.answer_audio.connect(lambda u, s, sr: audio.append((len(s), sr)))
    w.add_file_input(str(QUESTION))
    with qtbot.waitSignal(w.ctl.session_ended, timeout=timeout_ms):
        w.handsfree.setChecked(True)
    return answers, audio


def test_wav_as_microphone_gives_transcript_answer_and_audio(qtbot, window):
    answers, audio = _run_question(qtbot, window)
    view = window.conversation.toPlainText()
    assert "You:" in view and "focused" in view.lower()
    assert answers and len(answers[0].split()) >= 3 and "Assistant" in view
    assert audio and audio[0][0] > 10_000 and audio[0][1] == 22050
    kinds = [it.kind for it in History(window.history.path).items]  # written to disk as it happened
    assert kinds[:2] == ["user", "assistant"]
    # the session thread ends (session_ended is emitted from inside it, just before it returns)
    qtbot.waitUntil(lambda: not window.ctl.running(), timeout=10_000)


def test_changing_a_setting_changes_the_engine(qtbot, window):
    dlg = window.open_settings()
    qtbot.addWidget(dlg)
    dlg.set_value("llm.answer_method", "cascade")
    dlg.set_value("llm.max_answer_tokens", 8)
    assert dlg.apply()
    assert window.ctl.cfg.llm.answer_method == "cascade" and window.ctl.cfg.llm.max_answer_tokens == 8
    metrics = []
    window.ctl.metrics.connect(lambda m: metrics.append(m) if isinstance(m, SpokenAnswerMetrics) else None)
    answers, _ = _run_question(qtbot, window)
    assert answers and metrics
    assert metrics[0].nfetfs is None  # the cascade ran, not PredGen
    assert len(window.ctl.rt.llm().tokenize(answers[0])) <= 9  # the 8-token cap took effect
    # persisted: a new dialog reads the stored values; reset restores defaults
    from app.settings import load_settings

    assert load_settings(window.store).llm.max_answer_tokens == 8
    dlg.reset()
    assert dlg.current().llm.max_answer_tokens == Config().llm.max_answer_tokens


def test_settings_cover_every_threshold_with_tooltips(qtbot, store):
    from app.settings import SettingsDialog

    dlg = SettingsDialog(Config(), store)
    qtbot.addWidget(dlg)
    for key in ("vad.threshold", "vad.min_silence_s", "asr.method", "asr.tau_ctc", "asr.tau_slm",
                "asr.specasr_threshold", "asr.specasr_max_draft", "asr.specasr_tree", "llm.predgen_verifier",
                "llm.predgen_top_k", "llm.predgen_tokens_per_update", "caption.beta", "caption.mask_k",
                "caption.display_only_mask", "tts.engine", "tts.theta", "tts.lookahead", "models.llm_target",
                "caption.target_language", "audio.input_device", "audio.output_device"):
        assert key in dlg.widgets and dlg.widgets[key].toolTip(), key
    assert "Eq. 5" in dlg.widgets["caption.beta"].toolTip()
    dlg.widgets["caption.beta"].setValue(7.0)  # out of range: the spin box refuses it
    assert dlg.current().caption.beta <= 1.0
    dlg.widgets["models.vad"].setText("")  # a bad value is rejected with a message, nothing changes
    from engine.config import ConfigError

    dlg.cfg = dlg.cfg.with_overrides({"caption": {"beta": 0.2}})
    bad = dlg.cfg.with_overrides({"asr": {"method": "nope"}})
    with pytest.raises(ConfigError):
        from engine.config import validate

        validate(bad)


def test_caption_window_masks_the_tail_without_flicker(qtbot):
    w = CaptionWindow()
    qtbot.addWidget(w)
    stream = [Caption(0, "A man in", "Ein Mann", " in", False, 0.1, source_stable="A man"),
              Caption(0, "A man in an orange hat", "Ein Mann mit", " einem orangen Hut", False, 0.1,
                      source_stable="A man in an"),
              Caption(0, "A man in an orange hat", "Ein Mann mit", " einem orangen Hut", False, 0.1,
                      source_stable="A man in an"),
              Caption(0, "A man in an orange hat.", "Ein Mann mit einem orangefarbenen Hut.", "", True, 0.1)]
    seen = []
    for cap in stream:
        w.show_caption(cap)
        seen.append((w.visible_translation(), w.repaints))
    assert seen[0][0] == "Ein Mann" and seen[1][0] == "Ein Mann mit"  # tails hidden
    assert seen[2][1] == seen[1][1]  # same caption again: no repaint
    assert seen[3][0] == "Ein Mann mit einem orangefarbenen Hut."  # final: everything shown
    w.fade.setChecked(True)
    w.show_caption(stream[1])
    assert w.visible_translation() == "Ein Mann mit einem orangen Hut"
    assert "color:gray" in w.translation.text()


def test_exports_parse_and_history_survives_a_crash(tmp_path):
    h = History(tmp_path / "h.jsonl")
    s = Journal(h.path).start("app")  # what a session journals (engine.session), read back by the window's history
    s.user(0, "Hello there", 0.5, 1.7)
    s.answer(0, "Hi! How can I help?", t_start=1.7, t_end=1.7)
    s.caption(1, "And so my fellow Americans", "Und so, meine Mitbürger", 3.0, 5.25)
    with open(h.path, "a") as f:
        f.write('{"kind": "user", "te')  # a torn line, as after a crash
    h2 = History(h.path)
    assert [i.kind for i in h2.items] == ["user", "assistant", "caption"]
    srt = h2.export(tmp_path / "x.srt").read_text()
    cues = re.findall(r"(\d+)\n(\d\d:\d\d:\d\d,\d{3}) --> (\d\d:\d\d:\d\d,\d{3})\n(.+?)\n", srt)
    # the answer too, labelled (a session with answers), and the caption in place of its utterance's transcript
    assert [c[0] for c in cues] == ["1", "2", "3"] and cues[2][1:3] == ("00:00:03,000", "00:00:05,250")
    assert [c[3] for c in cues] == ["You: Hello there", "Assistant: Hi! How can I help?", "And so my fellow Americans"]
    vtt = h2.export(tmp_path / "x.vtt").read_text()
    assert vtt.startswith("WEBVTT") and "00:00:00.500 --> 00:00:01.700" in vtt and "Mitbürger" in vtt
    txt = h2.export(tmp_path / "x.txt").read_text()
    assert "You: Hello there" in txt and "Assistant: Hi! How can I help?" in txt
    with pytest.raises(ValueError):
        h2.export(tmp_path / "x.doc")


def test_no_microphone_app_starts_and_says_so(qtbot, tmp_path, store, monkeypatch):
    from app import controller as ctl_mod
    from app.controller import EngineController
    from app.main_window import MainWindow

    monkeypatch.setattr(ctl_mod, "input_devices", lambda: [])
    w = MainWindow(EngineController(Config()), store, history_path=tmp_path / "h.jsonl")
    qtbot.addWidget(w)
    assert "No microphone" in w.status_label.text() or w.input_pick.count() == 1
    assert w.input_pick.itemData(w.input_pick.count() - 1) == "choose-file"
    w.ctl.stop()


def test_caption_mode_and_screenshots(qtbot, window, tmp_path, jfk_path):
    """A real assistant turn and a real live-caption run of jfk.flac, then PNGs of the three windows."""
    out = SHOTS or tmp_path
    out.mkdir(parents=True, exist_ok=True)
    w = window
    answers, _ = _run_question(qtbot, w)
    assert answers
    assert w.m_ttfs.text() != "–" and w.m_rtf.text() != "–"  # the metrics panel was fed live
    assert w.grab().save(str(out / "main.png"))
    caps = []
    w.ctl.caption.connect(caps.append)
    w.mode_caption.setChecked(True)
    w.add_file_input(str(jfk_path))
    with qtbot.waitSignal(w.ctl.session_ended, timeout=300_000):
        w.handsfree.setChecked(True)
    assert caps and any(c.final for c in caps)
    final = [c for c in caps if c.final][-1]
    cw = w.caption_window
    cw.show()
    assert cw.visible_translation() == final.translation_stable and final.translation
    assert "Caption:" in w.conversation.toPlainText() and w.m_ne.text() != "–"
    assert cw.grab().save(str(out / "caption.png"))
    dlg = w.open_settings()
    qtbot.addWidget(dlg)
    assert dlg.grab().save(str(out / "settings.png"))
    for name in ("main.png", "caption.png", "settings.png"):
        assert (out / name).stat().st_size > 5000


def test_push_to_talk_and_clean_shutdown(qtbot, window):

    from PySide6.QtCore import QEvent, Qt
    from PySide6.QtGui import QKeyEvent

    w = window
    w.ctl.apply_config(w.ctl.cfg.with_overrides({"llm": {"answer_method": "cascade", "max_answer_tokens": 8}}))
    finals, errors = [], []
    w.ctl.final.connect(lambda u, t, a, b: finals.append(t))
    w.ctl.error.connect(errors.append)
    w.add_file_input(str(QUESTION))
    w.setFocus()
    # Count the audio that passed the push-to-talk gate in the capture thread itself (a direct connection), so
    # the release point is a position in the file, not a wall-clock time that a loaded CI machine stretches.
    blocks = [0]
    w.ctl.level.connect(lambda _lvl: blocks.__setitem__(0, blocks[0] + 1), Qt.DirectConnection)
    qtbot.waitUntil(lambda: w.ctl.loaded, timeout=120_000)
    with qtbot.waitSignal(w.ctl.session_ended, timeout=240_000):
        w.keyPressEvent(QKeyEvent(QEvent.KeyPress, Qt.Key_Space, Qt.NoModifier))  # Space down: talk
        # "speak" 3.6 s of the file ("I work from home" ends at 1.1 s, "focused" starts at 4.72 s)
        qtbot.waitUntil(lambda: blocks[0] * w.ctl.cfg.audio.block_s >= 3.6, timeout=60_000)
        w.keyReleaseEvent(QKeyEvent(QEvent.KeyRelease, Qt.Key_Space, Qt.NoModifier))  # Space up
    assert finals and "work from home" in finals[0].lower(), (finals, errors)
    assert "focused" not in finals[0].lower()  # released before the end of the question
    w.close()
    # the session thread returns right after it said it ended: no engine thread is left behind
    qtbot.waitUntil(lambda: not _engine_threads(), timeout=10_000)


def _engine_threads() -> set[str]:
    import threading

    return {t.name for t in threading.enumerate() if t.is_alive()} & ENGINE_THREADS


def test_stop_returns_at_once_and_the_session_ends_in_the_background(qtbot, window, jfk_path, monkeypatch):
    """stop() on the GUI thread never waits on a worker: with the caption translation held inside the translator
    (by this test, until stop() has returned), stop() returns while it is still held, and the session then ends on
    its own. A stop() that joined the worker would return only once the hold gave up (``released`` False)."""
    import threading

    import engine.runtime

    entered, gate, released = threading.Event(), threading.Event(), []
    build = engine.runtime.build_translator

    def held_translator(cfg, rt, target, **kw):
        tr = build(cfg, rt, target, **kw)
        translate = tr.translate_ssbd

        def translate_ssbd(*a, **k):
            if not entered.is_set():
                entered.set()
                released.append(gate.wait(120))  # True: released by this test; False: the hold gave up
            return translate(*a, **k)

        tr.translate_ssbd = translate_ssbd
        return tr

    monkeypatch.setattr(engine.runtime, "build_translator", held_translator)
    w = window
    w.mode_caption.setChecked(True)  # a translation in flight as well as the ASR
    w.add_file_input(str(jfk_path))
    w.handsfree.setChecked(True)
    qtbot.waitUntil(entered.is_set, timeout=240_000)  # the session is live and a translation is held
    with qtbot.waitSignal(w.ctl.session_ended, timeout=180_000):
        w.handsfree.setChecked(False)  # the GUI thread calls stop()
        held = (not released, w.ctl.stopping())  # it returned with the worker still held: nothing was joined
        gate.set()
    assert held == (True, True) and released == [True]
    qtbot.waitUntil(lambda: not w.ctl.running() and not _engine_threads(), timeout=60_000)


def test_closing_the_window_mid_answer_leaves_no_thread(qtbot, tmp_path, store, small_gguf):
    """Closing the window while an answer is being generated and spoken returns without waiting on the answer's
    worker (held by this test in its first sentence's signal until close() has returned), and every engine thread
    ends after it."""
    import threading

    from PySide6.QtCore import Qt

    from app.controller import EngineController
    from app.main_window import MainWindow

    cfg = Config().with_overrides({"models": {"llm_target": str(small_gguf)}, "llm": {"max_answer_tokens": 200},
                                   "audio": {"output_device": "none"}, "asr": {"model_role": "asr_draft"}})
    w = MainWindow(EngineController(cfg), store, history_path=tmp_path / "history.jsonl")
    qtbot.addWidget(w)
    w.output_pick.setCurrentIndex(w.output_pick.findData("none"))
    w.show()
    entered, gate, released = threading.Event(), threading.Event(), []

    def hold(*_):  # runs on the worker that emitted the sentence (a direct connection)
        if not entered.is_set():
            entered.set()
            released.append(gate.wait(120))  # True: released by this test; False: the hold gave up

    w.ctl.answer_sentence.connect(hold, Qt.DirectConnection)
    w.add_file_input(str(QUESTION))
    w.handsfree.setChecked(True)
    qtbot.waitUntil(entered.is_set, timeout=240_000)  # the answer is being generated and spoken
    w.close()
    held = (not released, w.ctl.running())  # close() returned with the answer's worker still held
    gate.set()
    qtbot.waitUntil(lambda: bool(released), timeout=60_000)
    assert held == (True, True) and released == [True]
    qtbot.waitUntil(lambda: not w.ctl.running() and not _engine_threads(), timeout=60_000)
    kinds = [it.kind for it in History(tmp_path / "history.jsonl").items]
    assert kinds[:1] == ["user"]  # what was shown before the close is in the journal


def test_a_failing_translator_ends_the_caption_worker_with_an_error(qtbot, monkeypatch, jfk_path):
    import engine.runtime
    from app.controller import EngineController
    from engine.session import SessionOptions

    class Broken:
        def reset(self):
            pass

        def translate_ssbd(self, text, final=False, cancel=None, pause=None):
            raise RuntimeError("translator exploded")

    monkeypatch.setattr(engine.runtime, "build_translator", lambda cfg, rt, target, **kw: Broken())
    ctl = EngineController(Config().with_overrides({"asr": {"model_role": "asr_draft"}}))
    errors = []
    ctl.error.connect(errors.append)
    with qtbot.waitSignal(ctl.session_ended, timeout=120_000):
        assert ctl.start(SessionOptions(source="file:" + str(jfk_path), mode="caption", realtime=False))
    assert any("translator exploded" in e for e in errors), errors
    qtbot.waitUntil(lambda: not ctl.running() and not _engine_threads(), timeout=30_000)


def test_the_app_process_exits_when_closed_with_work_in_flight(tmp_path, small_gguf):
    """A real process: the window closes while the session runs; the process must exit by itself."""
    import subprocess
    import sys

    script = f"""
import sys
from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QApplication
from app.controller import EngineController
from app.main_window import MainWindow
from engine.config import Config

app = QApplication([])
cfg = Config().with_overrides({{"models": {{"llm_target": {str(small_gguf)!r}}}, "audio": {{"output_device": "none"}},
                               "asr": {{"model_role": "asr_draft"}}}})
w = MainWindow(EngineController(cfg), QSettings({str(tmp_path / 's.ini')!r}, QSettings.IniFormat),
               history_path={str(tmp_path / 'h.jsonl')!r})
w.output_pick.setCurrentIndex(w.output_pick.findData("none"))
w.add_file_input({str(QUESTION)!r})
w.ctl.final.connect(lambda *a: QTimer.singleShot(0, w.close))  # close with the answer in flight
w.closed.connect(app.quit)
w.show()
w.handsfree.setChecked(True)
sys.exit(app.exec() or (0 if w.ctl.wait_stopped(timeout=30) else 3))
"""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_caption_language_follows_the_setting(qtbot, tmp_path, store, small_gguf):
    from app.controller import EngineController
    from app.main_window import MainWindow

    cfg = Config().with_overrides({"caption": {"target_language": "French"}, "audio": {"output_device": "none"},
                                   "models": {"llm_target": str(small_gguf)}})
    w = MainWindow(EngineController(cfg), store, history_path=tmp_path / "history.jsonl")
    qtbot.addWidget(w)
    assert w.language.currentText() == "fr"
    qtbot.waitUntil(lambda: w.loading.isHidden(), timeout=240_000)  # the models finish loading before it closes


def test_a_window_closed_while_loading_gets_no_load_result(qtbot, tmp_path, store, monkeypatch):
    """The load result of a window closed mid-load reaches nobody: no error box, no status change."""
    import threading

    import app.main_window as mw
    from app.controller import EngineController

    boxes = []
    monkeypatch.setattr(mw.QMessageBox, "critical", lambda *a, **k: boxes.append(a[1:]))
    cfg = Config().with_overrides({"models": {"llm_target": str(tmp_path / "missing.gguf")},
                                   "audio": {"output_device": "none"}, "asr": {"model_role": "asr_draft"}})
    ctl = EngineController(cfg)
    failed = threading.Event()
    ctl.load_failed.connect(lambda msg: failed.set())  # the worker's own report, not the window's
    w = mw.MainWindow(ctl, store, history_path=tmp_path / "history.jsonl")
    qtbot.addWidget(w)
    w.show()
    w.close()
    shown = w.status_label.text()
    qtbot.waitUntil(failed.is_set, timeout=240_000)
    qtbot.wait(300)  # queued signals are delivered now (to nobody)
    assert not boxes and w.status_label.text() == shown
    # an open window still gets it
    ctl2 = EngineController(cfg)
    w2 = mw.MainWindow(ctl2, QSettings(str(tmp_path / "s2.ini"), QSettings.IniFormat),
                       history_path=tmp_path / "history2.jsonl")
    qtbot.addWidget(w2)
    qtbot.waitUntil(lambda: bool(boxes), timeout=240_000)
    assert "failed" in w2.status_label.text()
    w2.close()


def close_pauses(x, keep_s=0.1, rel_db=-35.0):
    """``x`` (16 kHz) with every silent run inside its speech (10 ms frames below ``rel_db`` of the loudest) longer
    than ``keep_s`` shortened to ``keep_s``: the same words said without a pause."""
    import numpy as np

    hop = 160
    n = len(x) // hop
    rms = np.sqrt(np.mean(np.asarray(x[: n * hop], np.float64).reshape(n, hop) ** 2, 1))
    silent = rms <= rms.max() * 10 ** (rel_db / 20)
    voiced = np.nonzero(~silent)[0]
    keep, parts, prev, i = int(round(keep_s * 100)), [], 0, voiced[0]
    while i <= voiced[-1]:
        if not silent[i]:
            i += 1
            continue
        j = i
        while silent[j]:
            j += 1
        if j - i > keep:  # keep the middle keep_s of the run
            a = i + (j - i - keep) // 2
            parts.append(x[prev * hop: a * hop])
            prev = a + keep
        i = j
    parts.append(x[prev * hop:])
    return np.concatenate(parts)


class SimulatedRoom:
    """A loudspeaker and a microphone in one simulated room — a stand-in for the sound card, not for any model.

    The player side follows ``audio.playback.Player`` (``available``, ``play``/``stop``/``wait``/``close``, the
    ``idle`` event, ``reference`` called with every block as played, silence included). The microphone
    (:meth:`mic`, an AudioSource paced at real time, 0.1 s blocks) hears what was played through a room (80 ms delay,
    a decaying noise tail, gain 0.5) plus the user's script: the question at 0.5 s, then the interruption once
    ``interrupt_after_s`` of answer audio was played and at least ``talking_on_s`` more is queued (the user talks
    over the assistant while it speaks, not into a gap between two synthesised pieces), then ``tail_s`` of room
    noise. However late the answer comes (a loaded CPU), the microphone waits for it: it ends after the
    interruption's tail, or after ``max_s`` of audio when no interruption could be spoken."""

    available = True
    SR = 16000

    def __init__(self, question, interruption, interrupt_after_s=4.0, talking_on_s=1.0, tail_s=5.0, delay_ms=80,
                 gain=0.5, max_s=300.0):
        import threading

        import numpy as np

        rng = np.random.default_rng(0)
        n = int(0.25 * self.SR)
        h = rng.standard_normal(n) * np.exp(-6.9 * np.arange(n) / n)
        h *= 0.4 / np.sqrt((h ** 2).sum())
        h[0] = 1.0
        self.ir = np.concatenate([np.zeros(int(delay_ms * self.SR / 1000)), h]) * gain
        self.question, self.interruption = question, interruption
        self.interrupt_after, self.talking_on, self.tail = interrupt_after_s, talking_on_s, tail_s
        self.lock = threading.Lock()
        self.q = np.zeros(0, np.float32)
        self.idle = threading.Event()
        self.idle.set()
        self.reference = None
        self.first_sample_wall = None
        self.output_latency_s = 0.0
        self.stops = 0
        self.cut = 0  # stops that dropped queued answer audio
        self.cuts = []  # such stops: (audio time of the microphone block then captured, s; answer audio dropped, s)
        self.now = 0.0  # audio time of the microphone block being captured, s
        self.answer_on = None  # audio time the first answer sample was played, s
        self.answer_played = 0.0  # answer audio played so far, s
        self.interrupt_on = None  # audio time the interruption starts, s
        self.max_s = max_s
        self.noise = rng.standard_normal(int(max_s * self.SR)).astype(np.float32) * 3e-4

    # -- the player -------------------------------------------------------------------------------------------
    def play(self, samples, sample_rate):
        import numpy as np

        from audio.io import resample

        x = resample(np.asarray(samples, np.float32), sample_rate, self.SR)
        with self.lock:
            self.q = np.concatenate([self.q, x])
            self.idle.clear()

    def stop(self):
        import numpy as np

        with self.lock:
            self.cut += int(len(self.q) > 0)
            if len(self.q):
                self.cuts.append((self.now, len(self.q) / self.SR))
            self.q = np.zeros(0, np.float32)
            self.idle.set()
            self.stops += 1

    def wait(self, timeout=None):
        self.idle.wait(timeout)

    def close(self):
        self.stop()

    # -- the microphone ---------------------------------------------------------------------------------------
    def mic(self):
        import time

        import numpy as np

        from audio.sources import AudioBlock, AudioSource

        room = self

        class RoomMic(AudioSource):
            name = "simulated room"
            realtime = True

            def __iter__(self):
                block, sr = 1600, room.SR
                far_hist = np.zeros(len(room.ir), np.float32)
                user = np.zeros(int(room.max_s * sr), np.float32)
                q0 = int(0.5 * sr)
                user[q0:q0 + len(room.question)] = room.question
                t0, i, end = time.monotonic(), 0, None
                while not self._stop.is_set() and i + block <= len(user):
                    room.now = i / sr
                    with room.lock:
                        far = np.zeros(block, np.float32)
                        m = min(block, len(room.q))
                        far[:m] = room.q[:m]
                        room.q = room.q[m:]
                        queued = len(room.q) / sr
                        if not len(room.q):
                            room.idle.set()
                    if m and room.answer_on is None:
                        room.answer_on = i / sr
                        room.first_sample_wall = time.monotonic()
                    room.answer_played += m / sr
                    if room.interrupt_on is None and room.answer_played >= room.interrupt_after and \
                            queued >= room.talking_on:
                        u = i + block  # from the next block on
                        user[u:u + len(room.interruption)] = room.interruption[: len(user) - u]
                        room.interrupt_on = u / sr
                        end = u + len(room.interruption) + int(room.tail * sr)
                    ref = room.reference
                    if ref is not None:
                        ref(far.copy(), sr, 0.0)  # as Player's callback: the block as played, latency 0
                    far_hist = np.concatenate([far_hist, far])
                    echo = np.convolve(far_hist, room.ir)[len(far_hist) - block:len(far_hist)]
                    far_hist = far_hist[-len(room.ir):]
                    mic = (echo + user[i:i + block] + room.noise[i:i + block]).astype(np.float32)
                    due = t0 + (i + block) / sr
                    if due > time.monotonic() and self._stop.wait(due - time.monotonic()):
                        return
                    yield AudioBlock(mic, i / sr, time.monotonic())
                    i += block
                    if end is not None and i >= end:
                        return

        return RoomMic()


def test_talking_over_the_answer_with_the_speaker_on(qtbot, tmp_path, store, small_gguf, runtime):
    """The GUI's duplex wiring on real models (ASR, VAD, LLM, Piper, WebRTC APM, Smart Turn): the answer plays on a
    (simulated) loudspeaker whose echo reaches the microphone. The microphone is echo-cancelled, so the assistant's
    own voice neither starts an utterance nor interrupts it; the user's interruption stops it (barge-in on the
    capture thread), the window shows who is talking, and the latency panel shows the end-of-turn decision.

    The interruption comes once 4 s of the session's first answer were played, while it goes on (as a user
    interrupts), so after the barge-in detector's 3 s warm-up (AEC3 converging, when it takes only speech well above
    the echo); the echo (gain 0.5, the answer's peaks near full scale) is about as loud as the user (peak 0.4).
    However late the answer comes on a loaded CPU, the room's microphone waits for it, and every time asserted is
    audio time: the outcome does not depend on the machine's speed."""
    import threading

    import numpy as np

    from app.controller import EngineController
    from app.main_window import MainWindow
    from audio.io import load_audio, resample
    from bench.duplex_bench import speech_span

    tts = runtime.tts()
    # the question as one turn: the recording pauses 0.26 s between its two sentences, long enough for Smart Turn
    # to be asked (0.2 s) and to end the turn after the first; the answer to that can then start while the second
    # is still spoken (when its speech start reaches the assistant before the first's final) — not this test's
    # subject, so the pauses are cut to 0.1 s
    question = close_pauses(load_audio(QUESTION))
    question = question * (0.4 / np.abs(question).max())
    stop_it = resample(tts.synthesize("Hold on, can you repeat the last part?"), tts.sample_rate, 16000)
    stop_it = stop_it * (0.4 / np.abs(stop_it).max())
    room = SimulatedRoom(question.astype(np.float32), stop_it.astype(np.float32))

    gui_threads = set()

    class Window(MainWindow):  # records the thread each duplex slot runs on
        def _on_speakers(self, who):
            gui_threads.add(threading.current_thread() is threading.main_thread())
            super()._on_speakers(who)

        def _on_barge_in(self, t, path):
            gui_threads.add(threading.current_thread() is threading.main_thread())
            super()._on_barge_in(t, path)

    cfg = Config().with_overrides({"models": {"llm_target": str(small_gguf)}, "llm": {"max_answer_tokens": 60},
                                   "audio": {"output_device": "none"}, "duplex": {"end_of_turn": "smart_turn"}})
    w = Window(EngineController(cfg), store, history_path=tmp_path / "history.jsonl")
    qtbot.addWidget(w)
    w.show()
    w.player, w._player_dev = room, w.output_pick.currentData()  # the loudspeaker is the simulated room's
    w.input_pick.insertItem(0, "simulated room", room.mic())
    w.input_pick.setCurrentIndex(0)
    seen = {"speakers": [], "barge": [], "final": [], "turn": [], "aec": [], "done": []}
    w.ctl.speakers.connect(lambda who: seen["speakers"].append(who))
    w.ctl.barge_in.connect(lambda t, path: seen["barge"].append((t, path)))
    w.ctl.final.connect(lambda u, text, t0, t1: seen["final"].append((text, t0, t1)))
    w.ctl.metrics.connect(lambda m: seen["turn"].append(m) if isinstance(m, TurnMetrics) else None)
    w.ctl.echo_cancelling.connect(lambda on: seen["aec"].append(on))
    w.ctl.answer_done.connect(lambda u, text, interrupted: seen["done"].append(interrupted))
    qtbot.waitUntil(lambda: w.loading.isHidden(), timeout=240_000)
    with qtbot.waitSignal(w.ctl.session_ended, timeout=600_000):
        w.handsfree.setChecked(True)
    assert seen["aec"] == [True] and w.m_aec.text().startswith("on")
    assert room.answer_on is not None, seen["final"]  # the answer played
    assert room.interrupt_on is not None, (room.answer_played, seen["final"])  # and went on long enough
    onset = room.interrupt_on + speech_span(stop_it)[0]
    # the echo of the answer started no utterance: every final lies in the question or in the interruption
    for text, t0, t1 in seen["final"]:
        assert t1 <= room.answer_on + 0.3 or t1 >= onset, (text, t0, t1, room.answer_on, onset)
    # the interruption's words reached the transcript: the end of its sentence, whole ("Hold on" is spoken under
    # double talk, where AEC3's suppressor may garble it)
    said = " ".join(text for text, _, t1 in seen["final"] if t1 >= onset).lower()
    assert "can you repeat the last part" in " ".join(re.sub(r"[^a-z']+", " ", said).split()), seen["final"]
    # barged in by the user only, soon after the onset; the barge-in stopped playback, dropping the answer audio still
    # queued (the answer is not marked interrupted: 4 s into its playback its text and audio were all produced, and
    # AnswerDone's flag reports a cancelled generation, not a cut playback)
    assert seen["barge"] and onset <= seen["barge"][0][0] <= onset + 1.2, (seen["barge"], onset)
    assert all(t >= onset for t, _ in seen["barge"]), seen["barge"]
    t_barge = seen["barge"][0][0]
    assert any(t_barge - 0.3 <= t <= t_barge + 0.1 for t, _ in room.cuts), (room.cuts, t_barge, seen["done"])
    # the interruption's transcript holds the words that fired the barge-in (its utterance starts before it, though
    # AEC3 muffles them) and none of the echo before them
    first = next((t0 for _, t0, t1 in seen["final"] if t1 >= onset), None)
    assert first is not None and onset - 0.5 <= first <= t_barge, (seen["final"], onset, t_barge)
    assert w.barge_ins == len(seen["barge"]) and w.m_barge.text().startswith(f"{len(seen['barge'])}×")
    # who is talking: the assistant while it played, both when the user spoke over it (the user's VAD events come
    # through the ASR thread, so under load they may lag the playback state); nobody at the end
    sp = seen["speakers"]
    assert "assistant" in sp and "both" in sp and "user" in sp, sp
    assert sp[-1] == "" and w.speaker == "" and "nobody" in w.speaking.text()
    # the end-of-turn decisions (Smart Turn at each pause) reached the latency panel
    assert any(m.p_complete is not None and m.rule == "smart_turn" for m in seen["turn"]), seen["turn"]
    assert "utterance" in w.m_turn.text() and w.m_turn.text() != "–"
    assert gui_threads == {True}  # every duplex slot ran on the GUI thread
    assert room.reference is None  # the session gave the player's reference back


def test_start_right_after_a_session_ended_starts_a_new_session(monkeypatch):
    """A start in reply to ``session_ended`` (the window's "next session") while the ended session's thread is still
    returning starts a new session instead of finding the old thread alive and calling itself running."""
    import threading

    from PySide6.QtCore import Qt

    import app.controller
    from app.controller import EngineController
    from engine.session import SessionOptions

    sessions = []

    class Session:  # the session engine's interface as the controller uses it; runs only to say it ran
        stopped = False

        def __init__(self, cfg, rt, opts, on_event, **journal):
            self.opts, self.journal, self.source = opts, None, type("Source", (), {"name": "file"})()

        def open_journal(self, path, label):
            pass

        def run(self):
            sessions.append(self.opts.mode)

    monkeypatch.setattr(app.controller, "Session", Session)
    ctl = EngineController(Config())
    said, release = threading.Event(), threading.Event()
    # the ended session's thread is held just after it said so, as a busy machine may hold it
    ctl.session_ended.connect(lambda: (said.set(), release.wait(10)), Qt.DirectConnection)
    assert ctl.start(SessionOptions(source="file:x.wav", mode="assist"))
    assert said.wait(10) and ctl.running()
    threading.Timer(0.3, release.set).start()
    assert ctl.start(SessionOptions(source="file:x.wav", mode="caption"))
    release.set()
    assert ctl.wait_stopped(timeout=10)
    assert sessions == ["assist", "caption"]
