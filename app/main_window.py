"""Main window: talk, hear the answer, see the live transcript, switch to live captions.

Everything the window knows arrives through :class:`app.controller.EngineController` signals; the window only calls
the controller's slots (start, release_talk, stop, interrupt_answer, apply_config). It shows who is talking (you,
the assistant, both — the engine echo-cancels the microphone while the answer plays on a loudspeaker, and your
voice over it interrupts the answer), and each utterance's end-of-turn decision in the metrics panel. A closed
window is disconnected from the controller: a model load or a session still winding down reports to nobody.
"""

from __future__ import annotations

import functools
import html
from pathlib import Path

import numpy as np
from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence, QPainter, QPen
from PySide6.QtWidgets import (QButtonGroup, QComboBox, QFileDialog, QFormLayout, QGroupBox, QHBoxLayout, QLabel,
                               QMainWindow, QMessageBox, QProgressBar, QPushButton, QRadioButton, QTextBrowser,
                               QVBoxLayout, QWidget)

from audio.sources import output_devices

from .caption_window import CaptionWindow
from .controller import FILE_PREFIX, EngineController, SessionOptions
from .export import History, Item
from .journal import default_journal_path
from .settings import SettingsDialog, base_settings, load_settings


class Sparkline(QWidget):
    """A small plot of one metric over the conversation."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.values: list[float] = []
        self.setMinimumHeight(48)

    def add(self, v: float) -> None:
        self.values = (self.values + [float(v)])[-50:]
        self.update()

    def paintEvent(self, e):  # noqa: N802 (Qt)
        if len(self.values) < 1:
            return
        p = QPainter(self)
        p.setPen(QPen(Qt.darkCyan, 2))
        w, h = self.width(), self.height()
        hi = max(self.values) or 1.0
        pts = [(i * w / max(1, len(self.values) - 1), h - 4 - (v / hi) * (h - 8)) for i, v in enumerate(self.values)]
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            p.drawLine(int(x0), int(y0), int(x1), int(y1))
        if len(pts) == 1:
            p.drawEllipse(int(pts[0][0]), int(pts[0][1]), 3, 3)
        p.end()


def _live(slot):
    """Controller slots: do nothing once the window is closed (a queued signal may still be in flight)."""

    @functools.wraps(slot)
    def wrapper(self, *args):
        if self._closed:
            return None
        return slot(self, *args)

    return wrapper


SPEAKER_LABELS = {"": ("nobody", "color:gray"), "user": ("you", "color:#1b6e3a;font-weight:bold"),
                  "assistant": ("assistant", "color:#1f4e9a;font-weight:bold"),
                  "both": ("both (you are interrupting)", "color:#a8431b;font-weight:bold")}


class MainWindow(QMainWindow):
    closed = Signal()

    def __init__(self, controller: EngineController | None = None, store: QSettings | None = None,
                 history_path: str | Path | None = None, config_path: str | None = None):
        super().__init__()
        self.setWindowTitle("specvoice")
        self.store = store or QSettings("specvoice", "specvoice")
        # the CLI's configuration (config_path / $SPECVOICE_CONFIG, the environment) with the dialog edits on top; a
        # bad file or stored value is reported on the settings line and only that value falls back
        self.settings_warnings: list[str] = []
        self.settings_note = QLabel()
        self.settings_note.setObjectName("settings_note")
        self.settings_note.setWordWrap(True)
        self.settings_note.setStyleSheet("color:#a8431b")
        self.settings_note.hide()
        self.base_cfg = base_settings(config_path)
        cfg = load_settings(self.store, config_path, self.settings_warnings.append)
        if self.settings_warnings:
            self.settings_note.setText("⚠ " + "; ".join(self.settings_warnings))
            self.settings_note.show()
        self.ctl = controller or EngineController(cfg)
        if controller is None:
            self.ctl.apply_config(cfg)
        self.history = History(Path(history_path or default_journal_path()))
        self.caption_window = CaptionWindow()
        self.player = None
        self._answer_text: dict[int, str] = {}
        self._final_t: dict[int, tuple[float, float]] = {}
        self._presynth: dict[int, bool] = {}  # utterance → PredGen's pre-synthesised sentence was played
        self._closed = False
        self._links: list = []  # (controller signal, slot) pairs, disconnected when the window closes
        self.speaker = ""  # who is talking: "" | "user" | "assistant" | "both"
        self.barge_ins = 0
        self._build()
        self._wire()
        self.ctl.load(self.mode())

    # -- layout ---------------------------------------------------------------------------------------------------
    def _build(self) -> None:
        self.conversation = QTextBrowser()
        self.conversation.setOpenExternalLinks(False)
        self.live = QLabel()
        self.live.setWordWrap(True)
        self.live.setObjectName("live")
        self.talk = QPushButton("Hold to talk  (Space)")
        self.talk.setObjectName("talk")
        self.talk.setMinimumHeight(44)
        self.handsfree = QPushButton("Start hands-free")
        self.handsfree.setCheckable(True)
        self.stop_audio = QPushButton("Stop answer")
        self.input_pick = QComboBox()
        self.output_pick = QComboBox()
        self.level = QProgressBar()
        self.level.setRange(0, 100)
        self.level.setTextVisible(False)
        self.mode_assistant = QRadioButton("Assistant")
        self.mode_caption = QRadioButton("Live caption")
        self.mode_assistant.setChecked(True)
        self.modes = QButtonGroup(self)
        self.modes.addButton(self.mode_assistant)
        self.modes.addButton(self.mode_caption)
        self.language = QComboBox()
        self.language.addItems(["de", "fr", "es", "it", "pt", "nl", "zh", "ja"])
        self.language.setEditable(True)  # any code or English name caption.target_language accepts
        self.language.setCurrentText(_language_code(self.ctl.cfg.caption.target_language))
        self.status_label = QLabel("starting…")
        self.loading = QProgressBar()  # models load once, on a worker thread: a busy indicator meanwhile
        self.loading.setRange(0, 0)
        self.loading.setMaximumHeight(10)
        self._refresh_devices()

        self.m_rtf, self.m_ttfs, self.m_audio, self.m_accept, self.m_ne = (QLabel("–") for _ in range(5))
        self.m_turn, self.m_barge, self.m_aec = (QLabel("–") for _ in range(3))
        self.m_turn.setObjectName("end_of_turn")
        self.speaking = QLabel()
        self.speaking.setObjectName("speaking")
        self._show_speaker("")
        self.plot = Sparkline()
        metrics = QGroupBox("Metrics")
        mf = QFormLayout(metrics)
        mf.addRow("ASR RTF", self.m_rtf)
        mf.addRow("TTFS (s)", self.m_ttfs)
        mf.addRow("First audio (s)", self.m_audio)
        mf.addRow("Acceptance", self.m_accept)
        mf.addRow("NE (captions)", self.m_ne)
        mf.addRow("End of turn", self.m_turn)
        mf.addRow("Barge-in", self.m_barge)
        mf.addRow("Echo cancellation", self.m_aec)
        mf.addRow("First audio over time", self.plot)

        devices = QGroupBox("Devices")
        df = QFormLayout(devices)
        df.addRow("Input", self.input_pick)
        df.addRow("Level", self.level)
        df.addRow("Talking", self.speaking)
        df.addRow("Output", self.output_pick)
        mode = QGroupBox("Mode")
        ml = QHBoxLayout(mode)
        ml.addWidget(self.mode_assistant)
        ml.addWidget(self.mode_caption)
        ml.addWidget(QLabel("→"))
        ml.addWidget(self.language)

        side = QVBoxLayout()
        side.addWidget(mode)
        side.addWidget(devices)
        side.addWidget(metrics)
        side.addStretch(1)
        controls = QHBoxLayout()
        controls.addWidget(self.talk, 2)
        controls.addWidget(self.handsfree, 1)
        controls.addWidget(self.stop_audio, 1)
        left = QVBoxLayout()
        left.addWidget(self.conversation, 1)
        left.addWidget(self.live)
        left.addLayout(controls)
        left.addWidget(self.status_label)
        left.addWidget(self.settings_note)
        left.addWidget(self.loading)
        root = QHBoxLayout()
        root.addLayout(left, 3)
        root.addLayout(side, 1)
        w = QWidget()
        w.setLayout(root)
        self.setCentralWidget(w)
        self.resize(1100, 680)

        menu = self.menuBar()
        fm = menu.addMenu("&File")
        for label, suffix in (("Export transcript as TXT…", ".txt"), ("Export captions as SRT…", ".srt"),
                              ("Export captions as VTT…", ".vtt")):
            a = QAction(label, self)
            a.triggered.connect(lambda _=False, s=suffix: self.export_dialog(s))
            fm.addAction(a)
        vm = menu.addMenu("&View")
        a = QAction("Caption window", self)
        a.triggered.connect(self.caption_window.show)
        vm.addAction(a)
        sm = menu.addMenu("&Settings")
        a = QAction("Settings…", self)
        a.setShortcut(QKeySequence.Preferences)
        a.triggered.connect(self.open_settings)
        sm.addAction(a)

    def _refresh_devices(self) -> None:
        self.input_pick.clear()
        for label, spec in self.ctl.inputs():
            self.input_pick.addItem(label, spec)
        self.input_pick.addItem("WAV file as microphone…", "choose-file")
        if self.input_pick.count() == 1:
            self.status_label.setText("No microphone found: choose a WAV file as input.")
        self.output_pick.clear()
        outs = output_devices()
        for d in outs:
            self.output_pick.addItem(d["name"], str(d["index"]))
        self.output_pick.addItem("No playback (write WAV only)", "none")

    def add_file_input(self, path: str) -> None:
        """Add a WAV file as an input and select it (used by the picker and by tests)."""
        spec = FILE_PREFIX + str(path)
        idx = self.input_pick.findData(spec)
        if idx < 0:
            self.input_pick.insertItem(self.input_pick.count() - 1, f"File: {Path(path).name}", spec)
            idx = self.input_pick.findData(spec)
        self.input_pick.setCurrentIndex(idx)

    # -- wiring ---------------------------------------------------------------------------------------------------
    def _wire(self) -> None:
        c = self.ctl
        self._links = [(c.status, self._on_status), (c.load_failed, self._load_failed), (c.error, self._error),
                       (c.level, self._on_level), (c.partial, self._on_partial), (c.final, self._on_final),
                       (c.answer_sentence, self._on_answer_sentence), (c.answer_audio, self._on_answer_audio),
                       (c.answer_done, self._on_answer_done), (c.caption, self._on_caption),
                       (c.metrics, self._on_metrics), (c.speech_started, self._on_speech_started),
                       (c.session_ended, self._on_session_ended), (c.models_ready, self._models_loaded),
                       (c.load_failed, self._models_loaded), (c.speakers, self._on_speakers),
                       (c.barge_in, self._on_barge_in), (c.echo_cancelling, self._on_echo_cancelling)]
        for sig, slot in self._links:  # bound methods of the window: delivered on the GUI thread (queued)
            sig.connect(slot)
        self.talk.pressed.connect(self.talk_pressed)
        self.talk.released.connect(self.talk_released)
        self.handsfree.toggled.connect(self.toggle_handsfree)
        self.stop_audio.clicked.connect(self.stop_answer)
        self.input_pick.activated.connect(self._input_chosen)

    def _unwire(self) -> None:
        """Disconnect every controller signal from this window (on close)."""
        for sig, slot in self._links:
            try:
                sig.disconnect(slot)
            except (RuntimeError, TypeError):  # already gone
                pass
        self._links = []

    def _show_speaker(self, who: str) -> None:
        text, style = SPEAKER_LABELS.get(who, (who, ""))
        self.speaking.setText(f"<span style='{style}'>{html.escape(text)}</span>")

    @_live
    def _on_speakers(self, who: str) -> None:
        self.speaker = who
        self._show_speaker(who)

    @_live
    def _on_barge_in(self, t: float, path: str) -> None:
        self.barge_ins += 1
        if self.player is not None:
            self.player.stop()  # the engine stopped it already; this covers a player swapped meanwhile
        how = {"double_talk": "double talk", "vad": "speech"}.get(path, path or "speech")
        self.m_barge.setText(f"{self.barge_ins}× (last at {t:.2f} s, {how})")

    @_live
    def _on_echo_cancelling(self, on: bool) -> None:
        self.m_aec.setText("on (loudspeaker)" if on else "off")

    @_live
    def _on_status(self, text: str) -> None:
        self.status_label.setText(text)

    @_live
    def _on_level(self, v: float) -> None:
        self.level.setValue(int(v * 100))

    @_live
    def _models_loaded(self, *_):
        self.loading.hide()

    @_live
    def _load_failed(self, msg: str) -> None:
        QMessageBox.critical(self, "Model loading failed", msg)

    def mode(self) -> str:
        return "caption" if self.mode_caption.isChecked() else "assistant"

    def _input_chosen(self, i: int) -> None:
        if self.input_pick.itemData(i) == "choose-file":
            path, _ = QFileDialog.getOpenFileName(self, "Audio file to use as the microphone", "",
                                                  "Audio (*.wav *.flac *.mp3 *.ogg)")
            if path:
                self.add_file_input(path)

    def _options(self, push_to_talk: bool) -> SessionOptions:
        return SessionOptions(source=self.input_pick.currentData() or "", mode=self.mode(),
                              push_to_talk=push_to_talk, target_language=self.language.currentText(),
                              player=self.player)

    def talk_pressed(self) -> None:
        if self.ctl.running():
            return
        self._ensure_player()
        self.ctl.start(self._options(push_to_talk=True))

    def talk_released(self) -> None:
        self.ctl.release_talk()

    def toggle_handsfree(self, on: bool) -> None:
        if on:
            self._ensure_player()
            if not self.ctl.start(self._options(push_to_talk=False)):
                self.handsfree.setChecked(False)
                return
            self.handsfree.setText("Stop listening")
        else:
            self.ctl.stop()
            self.handsfree.setText("Start hands-free")

    def stop_answer(self) -> None:
        self.ctl.interrupt_answer()
        if self.player is not None:
            self.ctl.playback_cut(self.player.stop())

    def _ensure_player(self) -> None:
        from audio.playback import NullPlayer, open_player

        dev = self.output_pick.currentData() or ""
        if self.player is None or getattr(self, "_player_dev", None) != dev:
            if self.player is not None:
                self.player.close()
            self.player = NullPlayer() if dev == "none" else open_player(22050, dev)
            self._player_dev = dev

    # -- rendering ------------------------------------------------------------------------------------------------
    def _append(self, who: str, text: str, style: str = "") -> None:
        self.conversation.append(f'<p style="{style}"><b>{who}:</b> {html.escape(text)}</p>')

    @_live
    def _on_partial(self, utt: int, committed: str, tentative: str) -> None:
        self.live.setText(f"<b>{html.escape(committed.strip())}</b> <i style='color:gray'>"
                          f"{html.escape(tentative)}</i>")

    def _journal(self, item: Item) -> None:
        """Append ``item`` to the journal (fsynced) before it is shown; a failure is shown, not raised."""
        try:
            self.history.add(item)
        except OSError as e:
            self._error(f"cannot write the journal {self.history.path}: {e}")

    @_live
    def _on_final(self, utt: int, text: str, t0: float, t1: float) -> None:
        self.live.setText("")
        if not text:
            return
        self._final_t[utt] = (t0, t1)
        if self.mode() == "assistant":
            self._journal(Item("user", text, t0, t1, utterance=utt))
        self._append("You", text)

    @_live
    def _on_speech_started(self, utt: int) -> None:
        if self.player is not None:
            self.ctl.playback_cut(self.player.stop())  # barge-in: the history keeps what was heard

    @_live
    def _on_answer_sentence(self, utt: int, index: int, text: str) -> None:
        self._answer_text[utt] = (self._answer_text.get(utt, "") + " " + text).strip()

    @_live
    def _on_answer_audio(self, utt: int, samples, sr: int) -> None:
        if self.player is not None:
            self.player.play(np.asarray(samples, np.float32), sr)

    @_live
    def _on_answer_done(self, utt: int, text: str, interrupted: bool) -> None:
        accepted = self._presynth.get(utt, False)
        style = "color:#1b6e3a" if accepted else ""
        t0, t1 = self._final_t.get(utt, (0.0, 0.0))
        self._journal(Item("assistant", text, t1, t1, utterance=utt))
        self._append("Assistant" + (" (prepared while you spoke)" if accepted else ""),
                     text + (" …(interrupted)" if interrupted else ""), style)

    @_live
    def _on_caption(self, cap) -> None:
        if cap.final:
            t0, t1 = self._final_t.get(cap.utterance, (0.0, 0.0))
            self._journal(Item("caption", cap.source, t0, t1, translation=cap.translation, utterance=cap.utterance))
        self.caption_window.show_caption(cap)
        self.live.setText(f"{html.escape(cap.translation_stable)}<span style='color:gray'> …</span>")
        if cap.final:
            self._append("Caption", f"{cap.source}  →  {cap.translation}")

    @_live
    def _on_metrics(self, m: dict) -> None:
        kind = m.get("kind")
        if kind == "asr" and m.get("rtf") is not None:
            self.m_rtf.setText(f"{m['rtf']:.2f}")
        elif kind == "answer":
            self._presynth[m["utterance"]] = bool(m.get("presynth_used"))
            if m.get("ttfs_s") is not None:
                self.m_ttfs.setText(f"{m['ttfs_s']:.2f}")
            if m.get("first_audio_s") is not None:
                self.m_audio.setText(f"{m['first_audio_s']:.2f}")
                self.plot.add(m["first_audio_s"])
            self.m_accept.setText(f"{m.get('accepted_tokens', 0)} tokens, NFETFS {m.get('nfetfs')}")
        elif kind == "turn":
            self.m_turn.setText(_turn_text(m, self.ctl.cfg.duplex.turn_threshold))
        elif kind == "caption":
            self.m_ne.setText(f"{m['ne']:.2f}")
            self.m_accept.setText(f"A/D {m['acceptance']:.2f}, A/O {m['accepted_share']:.2f}")

    @_live
    def _error(self, msg: str) -> None:
        self.status_label.setText(f"⚠ {msg}")

    @_live
    def _on_session_ended(self) -> None:
        self.history.end_session()  # the next session starts later on the journal's clock
        if self.handsfree.isChecked():
            self.handsfree.blockSignals(True)
            self.handsfree.setChecked(False)
            self.handsfree.setText("Start hands-free")
            self.handsfree.blockSignals(False)

    # -- dialogs --------------------------------------------------------------------------------------------------
    def open_settings(self) -> SettingsDialog:
        dlg = SettingsDialog(self.ctl.cfg, self.store, self, base=self.base_cfg)
        dlg.applied.connect(self.ctl.apply_config)
        dlg.show()
        return dlg

    def export_dialog(self, suffix: str) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export", f"specvoice{suffix}", f"*{suffix}")
        if path:
            try:
                self.history.export(path)
            except (OSError, ValueError) as e:
                QMessageBox.warning(self, "Export failed", str(e))

    def keyPressEvent(self, e):  # noqa: N802 (Qt) — push-to-talk with the space bar
        if e.key() == Qt.Key_Space and not e.isAutoRepeat():
            self.talk.setDown(True)
            self.talk_pressed()
            return
        super().keyPressEvent(e)

    def keyReleaseEvent(self, e):  # noqa: N802 (Qt)
        if e.key() == Qt.Key_Space and not e.isAutoRepeat():
            self.talk.setDown(False)
            self.talk_released()
            return
        super().keyReleaseEvent(e)

    def closeEvent(self, e):  # noqa: N802 (Qt)
        self._closed = True  # signals already queued to this window are dropped by the slots' guard
        self._unwire()  # a model load or a session still winding down no longer reaches this window
        self.ctl.stop()  # returns at once; the session winds down in the background
        if self.player is not None:
            self.player.close()
        self.caption_window.close()
        self.closed.emit()
        super().closeEvent(e)


def run_app(argv=None, config_path: str | None = None) -> int:
    """Run the desktop app with the configuration of ``config_path`` (None: $SPECVOICE_CONFIG or the default file)
    and the environment, the dialog edits on top. Returns the exit code."""
    import sys

    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv if argv is None else argv)
    app.setApplicationName("specvoice")
    w = MainWindow(config_path=config_path)
    w.show()
    code = app.exec()
    # the window is gone: let the session finish its journal and threads (bounded; they are daemons after that)
    w.ctl.stop()
    w.ctl.wait_stopped(timeout=10)
    return code


def _turn_text(m: dict, threshold: float) -> str:
    """The metrics panel's end-of-turn line for a ``metrics`` dict of kind "turn" (see ``EngineController``)."""
    p = m.get("p_complete")
    if not m.get("final"):
        return f"utterance {m['utterance']}: Smart Turn P(complete) {p:.2f} < {threshold:.2f} → keeps listening"
    if m.get("by") == "silence":
        extra = f" (Smart Turn P {p:.2f})" if p is not None else ""
        return f"utterance {m['utterance']}: ended by {m.get('silence_s', 0):.1f} s of silence{extra}"
    if m.get("by") == "released":
        return f"utterance {m['utterance']}: ended (talk button released)"
    return f"utterance {m['utterance']}: complete, Smart Turn P(complete) {p:.2f} ≥ {threshold:.2f}"


def _language_code(name: str) -> str:
    """``caption.target_language`` ("German", "de", …) as the code the language box lists, or as given."""
    codes = {"german": "de", "french": "fr", "spanish": "es", "italian": "it", "portuguese": "pt", "dutch": "nl",
             "chinese": "zh", "japanese": "ja"}
    return codes.get(name.strip().lower(), name.strip())
