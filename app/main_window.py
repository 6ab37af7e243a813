"""Main window: talk, hear the answer, see the live transcript, switch to live captions.

Everything the window knows arrives through :class:`app.controller.EngineController` signals; the window only calls
the controller's slots (start, release_talk, stop, interrupt_answer, apply_config). It owns one thing the session
uses: the output device (the "Output" choice, kept open across sessions so that an answer still playing when a
session ends plays out), which it passes to each session; the session plays the answers on it. It shows who is
talking (you, the assistant, both — the engine echo-cancels the microphone while the answer plays on a loudspeaker,
and your voice over it interrupts the answer), and each utterance's end-of-turn decision in the metrics panel. A
closed window is disconnected from the controller: a model load or a session still winding down reports to nobody.

What it shows is current: the metrics panel (plain labels, each with its exact definition and unit in the tooltip)
is cleared when a session starts, while the latency plot keeps every answered turn of the window's life. With the
output "No playback (write WAV only)" each answer's audio is written to ``answers/`` beside the journal and its path
is shown. A missing microphone is named in the input list and on the status line. Lines that come and go (the
partial transcript, the end-of-turn decision, the loading bar) have their space reserved, so nothing moves. With a
wake phrase (``duplex.wake_phrase``) the line under the buttons names it before hands-free starts, then says whether
the session is listening for it or in conversation (``WakeState``, also on the status line).

The transcript is the best one known: when the engine's second pass revises final transcripts
(``RevisedTranscript``, arriving as the controller's ``revised`` signal) the shown lines of those utterances take
the new text, marked "(revised)" with the text before the revision in its tooltip, a line whose words all moved to
a neighbour is dropped (the session journaled the revision before it arrived, so the exports show it too); an
answer already given is left as it is. A final in another language than the session's default (``asr.language``,
English when it is "auto") is tagged with its ISO 639-1 code ("[fr]"), and the status line names the language the
session speaks.
"""

from __future__ import annotations

import functools
import html
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QButtonGroup, QComboBox, QFileDialog, QFormLayout, QGroupBox, QHBoxLayout, QLabel,
                               QMainWindow, QMessageBox, QProgressBar, QPushButton, QRadioButton, QSizePolicy,
                               QTextBrowser, QVBoxLayout, QWidget)

from audio.sources import output_devices
from engine.answer.turn import complete_threshold
from engine.core.events import (AsrMetrics, CaptionMetrics, SpokenAnswerMetrics, TurnMetrics)
from engine.journal import default_journal_path
from engine.session import FILE_PREFIX, SessionOptions
from engine.translate.languages import caption_targets, language_code, language_name

from .caption_window import CaptionWindow
from .controller import EngineController
from .export import History
from .metrics_panel import METRICS, LatencyPlot, answer_speculation_text, turn_text
from .settings import SettingsDialog, base_settings, load_settings

DEFAULT_LANGUAGE = "en"  # a final in this language needs no tag when asr.language is "auto"


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


NO_MIC = "no-microphone"  # the input list's placeholder when no microphone is found


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
        # what the sessions journal (the engine writes it before a signal arrives here) and what File → Export reads
        self.history = History(Path(history_path or default_journal_path()), since_now=True)  # this window's
        self.ctl.journal_path = self.history.path
        self.caption_window = CaptionWindow()
        self.player = None
        self._answer_text: dict[int, str] = {}
        self._presynth: dict[int, bool] = {}  # utterance → PredGen's pre-synthesised sentence was played
        self._final_language: dict[int, str] = {}  # utterance → ISO 639-1 code of its final ("" unknown)
        # what the conversation view shows, one dict per paragraph (see _entry_html): a revision re-renders it
        self._entries: list[dict] = []
        self._session_no = 0  # sessions started by this window: utterance numbers start again at each
        self.session_language = ""  # the language the current session speaks (ISO 639-1), "" not known yet
        self._closed = False
        self._links: list = []  # (controller signal, slot) pairs, disconnected when the window closes
        self.speaker = ""  # who is talking: "" | "user" | "assistant" | "both"
        self.barge_ins = 0
        self.no_microphone = False
        self._status = ""  # the latest status message, without the missing-microphone note
        # "No playback (write WAV only)": the session writes each answer's audio to answers_dir when it is done
        self.answers_dir = self.history.path.parent / "answers"
        self.answer_wavs: list[Path] = []
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
        self.live.setAlignment(Qt.AlignLeft | Qt.AlignTop)
        self.live.setFixedHeight(self._lines(2))  # reserved: a partial transcript never moves the buttons
        self.answer_wav = QLabel()  # where "No playback (write WAV only)" wrote the latest answer
        self.answer_wav.setObjectName("answer_wav")
        self.answer_wav.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.answer_wav.setStyleSheet("color:#555")
        self.talk = QPushButton("Hold to talk  (Space)")
        self.talk.setObjectName("talk")
        self.talk.setMinimumHeight(44)
        self.handsfree = QPushButton("Start hands-free")
        self.handsfree.setCheckable(True)
        self.stop_audio = QPushButton("Stop answer")
        self.wake_label = QLabel()  # hands-free with a wake phrase: the phrase to say, then the session's state
        self.wake_label.setObjectName("wake")
        self.wake_label.setStyleSheet("color:#555")
        self.wake_label.setFixedHeight(self._lines(1))  # reserved: a phrase set or cleared never moves the status
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
        self.language.addItems([code for code, _ in caption_targets()])
        self.language.setEditable(True)  # any code or English name caption.target_language accepts
        self.language.setCurrentText(_language_code(self.ctl.cfg.caption.target_language))
        self.status_label = QLabel("starting…")
        self.language_label = QLabel()  # the language the session speaks (asr.language, or the detected one)
        self.language_label.setObjectName("session_language")
        self.language_label.setStyleSheet("color:#555")
        self.language_label.setAlignment(Qt.AlignRight | Qt.AlignVCenter)
        # room for a long name from the start: a detected language never moves the status line
        self.language_label.setMinimumWidth(self.fontMetrics().horizontalAdvance("Spoken language: Portuguese (pt)"))
        self.language_label.setToolTip("The language you speak: asr.language in the settings, or the one detected "
                                       "from your speech when it is auto.")
        configured = self.ctl.cfg.asr.language
        self._show_session_language("" if configured == "auto" else configured)
        self.loading = QProgressBar()  # models load once, on a worker thread: a busy indicator meanwhile
        self.loading.setRange(0, 0)
        self.loading.setMaximumHeight(10)
        keep = self.loading.sizePolicy()
        keep.setRetainSizeWhenHidden(True)  # hidden once the models are loaded: the layout does not move
        self.loading.setSizePolicy(keep)
        self._refresh_devices()

        metrics = QGroupBox("Metrics")
        mf = QFormLayout(metrics)
        mf.setFieldGrowthPolicy(QFormLayout.AllNonFixedFieldsGrow)
        # every value has its lines reserved: a longer value (an end-of-turn decision) never moves the panel
        lines = {"m_accept": 3, "m_turn": 3, "m_barge": 2, "m_ne": 2}
        for attr, (label, tip) in METRICS.items():
            value = QLabel("–")
            value.setObjectName(attr)
            value.setWordWrap(True)
            value.setAlignment(Qt.AlignLeft | Qt.AlignTop)
            value.setFixedHeight(self._lines(lines.get(attr, 1)))
            value.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Fixed)
            value.setToolTip(tip)
            name = QLabel(label)
            name.setToolTip(tip)
            name.setAlignment(Qt.AlignLeft | Qt.AlignTop)
            setattr(self, attr, value)
            mf.addRow(name, value)
        self.m_turn.setObjectName("end_of_turn")
        self.speaking = QLabel()
        self.speaking.setObjectName("speaking")
        self._show_speaker("")
        self.plot = LatencyPlot()
        plot_title = QLabel("Time to the spoken answer, every turn")
        plot_title.setToolTip(self.plot.toolTip())
        mf.addRow(plot_title)
        mf.addRow(self.plot)

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

        side_panel = QWidget()
        side_panel.setFixedWidth(380)  # no value can widen it and squeeze the conversation
        side = QVBoxLayout(side_panel)
        side.setContentsMargins(0, 0, 0, 0)
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
        left.addWidget(self.wake_label)
        status = QHBoxLayout()
        status.addWidget(self.status_label, 1)
        status.addWidget(self.language_label)
        left.addLayout(status)
        left.addWidget(self.answer_wav)
        left.addWidget(self.settings_note)
        left.addWidget(self.loading)
        root = QHBoxLayout()
        root.addLayout(left, 1)
        root.addWidget(side_panel)
        w = QWidget()
        w.setLayout(root)
        self.setCentralWidget(w)
        self.resize(1100, 720)
        self._show_wake_hint()

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

    def _lines(self, n: int) -> int:
        """Height in pixels of ``n`` lines of the window's font (a label's reserved space)."""
        return self.fontMetrics().lineSpacing() * n + 4

    def _refresh_devices(self) -> None:
        self.input_pick.clear()
        for label, spec in self.ctl.inputs():
            self.input_pick.addItem(label, spec)
        self.no_microphone = self.input_pick.count() == 0
        if self.no_microphone:  # named in the list itself, and on every status line (see _on_status)
            self.input_pick.addItem("No microphone found", NO_MIC)
        self.input_pick.addItem("WAV file as microphone…", "choose-file")
        if self.no_microphone:
            self.status_label.setText(self._with_microphone_note("starting…"))
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
                       (c.answer_sentence, self._on_answer_sentence), (c.answer_saved, self._on_answer_saved),
                       (c.answer_done, self._on_answer_done), (c.caption, self._on_caption),
                       (c.metrics, self._on_metrics),
                       (c.session_ended, self._on_session_ended), (c.models_ready, self._models_loaded),
                       (c.load_failed, self._models_loaded), (c.speakers, self._on_speakers),
                       (c.barge_in, self._on_barge_in), (c.echo_cancelling, self._on_echo_cancelling),
                       (c.final_language, self._on_final_language), (c.revised, self._on_revised),
                       (c.wake_state, self._on_wake_state)]
        for sig, slot in self._links:  # bound methods of the window: delivered on the GUI thread (queued)
            sig.connect(slot)
        self.talk.pressed.connect(self.talk_pressed)
        self.talk.released.connect(self.talk_released)
        self.handsfree.toggled.connect(self.toggle_handsfree)
        self.stop_audio.clicked.connect(self.stop_answer)
        self.input_pick.activated.connect(self._input_chosen)
        self.input_pick.currentIndexChanged.connect(self._input_changed)

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

    def _show_wake_hint(self, *_) -> None:
        """Outside a session, the wake phrase hands-free waits for (``duplex.wake_phrase``; nothing when unset)."""
        d = self.ctl.cfg.duplex
        phrase = " ".join(d.wake_phrase.split())
        hint = (f"Hands-free answers only what starts with “{phrase}” (then follow-ups for {d.follow_up_s:g} s "
                "after each answer; push-to-talk needs no phrase)") if phrase else ""
        self.wake_label.setText(hint)
        self.handsfree.setToolTip(hint or "Listen continuously: the voice detector decides when you spoke; every "
                                          "utterance is answered (set a wake phrase in Settings → duplex.wake_phrase)")

    @_live
    def _on_wake_state(self, state: str, text: str) -> None:
        phrase = " ".join(self.ctl.cfg.duplex.wake_phrase.split())
        self.wake_label.setText(f"Listening for “{phrase}”" if state == "listening" else
                                "In conversation: no need for the phrase until the follow-up window ends")
        self._on_status(text)

    @_live
    def _on_status(self, text: str) -> None:
        self._status = text
        self.status_label.setText(self._with_microphone_note(text))

    def _input_changed(self, _i: int) -> None:
        if self.no_microphone and self._status:  # the note comes and goes with the "No microphone found" entry
            self.status_label.setText(self._with_microphone_note(self._status))

    def _with_microphone_note(self, text: str) -> str:
        """``text``, followed by the missing microphone while no microphone exists and no file is chosen."""
        if self.no_microphone and self.input_pick.currentData() == NO_MIC:
            return f"{text} — No microphone found: choose a WAV file as input (Input → WAV file as microphone…)"
        return text

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
        """The session mode chosen: "assist" or "caption" (:data:`engine.session.MODES`)."""
        return "caption" if self.mode_caption.isChecked() else "assist"

    def _input_chosen(self, i: int) -> None:
        if self.input_pick.itemData(i) == "choose-file":
            path, _ = QFileDialog.getOpenFileName(self, "Audio file to use as the microphone", "",
                                                  "Audio (*.wav *.flac *.mp3 *.ogg)")
            if path:
                self.add_file_input(path)

    def _options(self, push_to_talk: bool) -> SessionOptions:
        return SessionOptions(source=self.input_pick.currentData() or "", mode=self.mode(),
                              push_to_talk=push_to_talk, target_language=self.language.currentText(),
                              player=self.player, wav_dir=self.answers_dir if self.writes_wav() else None,
                              wav_per_answer=True, input_level=True)

    def _start(self, push_to_talk: bool) -> bool:
        """Start a session with the chosen input (False, with the reason on the status line, when it cannot)."""
        if self.input_pick.currentData() == NO_MIC:
            self._error("No microphone found: choose a WAV file as input (Input → WAV file as microphone…)")
            return False
        self._ensure_player()
        opts = self._options(push_to_talk=push_to_talk)
        self._clear_session_view()
        return self.ctl.start(opts)

    def _clear_session_view(self) -> None:
        """A session starts: the metrics of the previous one are cleared (the latency plot keeps every turn)."""
        for attr in METRICS:
            getattr(self, attr).setText("–")
        self.barge_ins = 0
        self.live.setText("")
        # per-utterance state: utterance numbers start again at each session
        for per_utterance in (self._answer_text, self._presynth, self._final_language):
            per_utterance.clear()
        self._session_no += 1  # the shown lines of earlier sessions keep their own utterance numbers
        configured = self.ctl.cfg.asr.language
        self._show_session_language("" if configured == "auto" else configured)

    def talk_pressed(self) -> None:
        if self.ctl.running():
            return
        self._start(push_to_talk=True)

    def talk_released(self) -> None:
        self.ctl.release_talk()

    def toggle_handsfree(self, on: bool) -> None:
        if on:
            if not self._start(push_to_talk=False):
                self.handsfree.setChecked(False)
                return
            self.handsfree.setText("Stop listening")
        else:
            self.ctl.stop()
            self.handsfree.setText("Start hands-free")

    def stop_answer(self) -> None:
        self.ctl.interrupt_answer()
        if self.player is not None:  # also an answer still playing after its session ended
            self.player.stop()

    def _ensure_player(self) -> None:
        from audio.playback import NullPlayer, open_player

        dev = self.output_pick.currentData() or ""
        if self.player is None or getattr(self, "_player_dev", None) != dev:
            if self.player is not None:
                self.player.close()
            self.player = NullPlayer() if dev == "none" else open_player(22050, dev)
            self._player_dev = dev

    # -- rendering ------------------------------------------------------------------------------------------------
    def _append(self, who: str, text: str, style: str = "", utterance: int | None = None,
                language: str = "") -> None:
        """Show one line of the conversation: ``who``: ``text``. A user line gives its ``utterance`` (a revision
        finds it by that) and ``language`` (ISO 639-1, tagged when not the session's default)."""
        e = {"who": who, "text": text, "style": style, "language": language, "before": None,
             "key": None if utterance is None else (self._session_no, utterance)}
        self._add_entry(e)

    def _add_entry(self, e: dict) -> None:
        self._entries.append(e)
        self.conversation.append(self._entry_html(e))

    def default_language(self) -> str:
        """The language a final needs no tag in: ``asr.language``, or English when it is "auto" (ISO 639-1)."""
        configured = self.ctl.cfg.asr.language
        return DEFAULT_LANGUAGE if configured == "auto" else configured

    def _entry_html(self, e: dict) -> str:
        """One paragraph of the conversation view: a line (who, text, language tag, revision mark) or a note."""
        if "note" in e:
            return f'<p style="color:gray">{html.escape(e["note"])}</p>'
        tag = ""
        if e["language"] and e["language"] != self.default_language():
            tag = (f' <span style="color:#555" title="{html.escape(language_name(e["language"]), quote=True)}">'
                   f'[{html.escape(e["language"])}]</span>')
        mark = ""
        if e["before"] is not None:  # the tooltip keeps what was shown before the first revision
            before = f'before the revision: {e["before"]}' if e["before"] else "no text before the revision"
            mark = (f' <span style="color:gray;font-size:small" title="{html.escape(before, quote=True)}">'
                    f'(revised)</span>')
        return f'<p style="{e["style"]}"><b>{e["who"]}:</b>{tag} {html.escape(e["text"])}{mark}</p>'

    def _render(self) -> None:
        """Show :attr:`_entries` again (after a revision), keeping the scroll position — at the end if it was."""
        bar = self.conversation.verticalScrollBar()
        at_end, pos = bar.value() >= bar.maximum() - 2, bar.value()
        self.conversation.setHtml("".join(self._entry_html(e) for e in self._entries))
        bar.setValue(bar.maximum() if at_end else pos)

    def shown_user_lines(self) -> list[tuple[int, str]]:
        """(utterance, text) of the user lines the current session shows, in order."""
        return [(e["key"][1], e["text"]) for e in self._entries
                if e.get("key") is not None and e["key"][0] == self._session_no]

    def _show_session_language(self, code: str) -> None:
        self.session_language = code
        if code:
            self.language_label.setText(f"Spoken language: {language_name(code)} ({code})")
        else:
            self.language_label.setText("Spoken language: detecting…")

    @_live
    def _on_partial(self, utt: int, committed: str, tentative: str) -> None:
        self.live.setText(f"<b>{html.escape(committed.strip())}</b> <i style='color:gray'>"
                          f"{html.escape(tentative)}</i>")

    @_live
    def _on_final_language(self, utt: int, language: str) -> None:
        self._final_language[utt] = language  # the final itself follows at once

    @_live
    def _on_final(self, utt: int, text: str, t0: float, t1: float) -> None:
        self.live.setText("")
        language = self._final_language.get(utt, "")
        if language and language != self.session_language:
            # the engine's session language follows each utterance's (with hysteresis inside the decode)
            self._show_session_language(language)
        if not text:
            return
        self._append("You", text, utterance=utt, language=language)

    @_live
    def _on_revised(self, ev) -> None:
        """A ``RevisedTranscript`` (journaled by the session before it arrives): the user lines of ``ev.utterances``
        take ``ev.texts`` ("" drops the line). An answer already given is not redone."""
        for utt, text in zip(ev.utterances, ev.texts):
            key = (self._session_no, utt)
            i = next((i for i, e in enumerate(self._entries) if e.get("key") == key), None)
            if i is None:
                if not text:
                    continue
                # its final was empty (not shown): shown now, before the next utterance's line, if any is shown
                i = next((j for j, e in enumerate(self._entries) if e.get("key") is not None
                          and e["key"][0] == key[0] and e["key"][1] > utt), len(self._entries))
                self._entries.insert(i, {"who": "You", "text": text, "style": "", "before": "", "key": key,
                                         "language": ev.language})
                continue
            e = self._entries[i]
            if not text:
                del self._entries[i]
                continue
            if text != e["text"]:
                e["before"] = e["text"] if e["before"] is None else e["before"]
                e["text"] = text
            e["language"] = ev.language or e["language"]
        self._render()

    @_live
    def _on_answer_sentence(self, utt: int, index: int, text: str) -> None:
        self._answer_text[utt] = (self._answer_text.get(utt, "") + " " + text).strip()
        self.live.setText(f"<b>Assistant:</b> {html.escape(self._answer_text[utt])}"
                          f"<span style='color:gray'> …</span>")  # cleared when the answer is done

    def writes_wav(self) -> bool:
        """Output is "No playback (write WAV only)": each answer's audio goes to a WAV in :attr:`answers_dir`."""
        return self.output_pick.currentData() == "none"

    @_live
    def _on_answer_saved(self, ev) -> None:
        """An answer's audio was written (``engine.core.events.AnswerSaved``): shown under the buttons and noted
        after the answer's line."""
        self.answer_wavs.append(Path(ev.path))
        self.answer_wav.setText(f"Answer audio (not played): {ev.path}  ({ev.seconds:.1f} s)")
        self.answer_wav.setToolTip(ev.path)
        self._add_entry({"note": f"(audio written to {ev.path})"})

    @_live
    def _on_answer_done(self, utt: int, text: str, interrupted: bool) -> None:
        accepted = self._presynth.get(utt, False)
        style = "color:#1b6e3a" if accepted else ""
        self._append("Assistant" + (" (prepared while you spoke)" if accepted else ""),
                     text + (" …(interrupted)" if interrupted else ""), style)
        self.live.setText("")

    @_live
    def _on_caption(self, cap) -> None:
        self.caption_window.show_caption(cap)
        # "…" marks a translation still being revised: a final one has none
        self.live.setText("" if cap.final else
                          f"{html.escape(cap.translation_stable)}<span style='color:gray'> …</span>")
        if cap.final:
            self._append("Caption", f"{cap.source}  →  {cap.translation}")

    @_live
    def _on_metrics(self, m) -> None:
        """A metrics event of the session (``engine.core.events``: ``AsrMetrics``, ``SpokenAnswerMetrics``,
        ``TurnMetrics``, ``CaptionMetrics``) shown in the metrics panel."""
        if isinstance(m, AsrMetrics) and m.rtf is not None:
            self.m_rtf.setText(f"{m.rtf:.2f}× real time")
        elif isinstance(m, SpokenAnswerMetrics):
            self._presynth[m.utterance] = m.presynth_used
            if m.ttfs_s is not None:
                self.m_ttfs.setText(f"{m.ttfs_s:.2f} s")
            if m.first_audio_s is not None:
                self.m_audio.setText(f"{m.first_audio_s:.2f} s")
                self.plot.add(m.first_audio_s)
            self.m_accept.setText(answer_speculation_text(m))
        elif isinstance(m, TurnMetrics):
            self.m_turn.setText(turn_text(m, complete_threshold(self.ctl.cfg.duplex, m.rule)))
        elif isinstance(m, CaptionMetrics):
            self.m_ne.setText(f"{m.ne:.2f} words taken back per word")
            self.m_accept.setText(f"{m.acceptance:.0%} of draft tokens kept; {m.accepted_share:.0%} of the "
                                  f"translation from the draft")

    @_live
    def _error(self, msg: str) -> None:
        self.status_label.setText(f"⚠ {msg}")

    @_live
    def _on_session_ended(self) -> None:
        self.live.setText("")  # nothing is pending any more: no "…" left over
        self._show_wake_hint()
        if self.handsfree.isChecked():
            self.handsfree.blockSignals(True)
            self.handsfree.setChecked(False)
            self.handsfree.setText("Start hands-free")
            self.handsfree.blockSignals(False)

    # -- dialogs --------------------------------------------------------------------------------------------------
    def open_settings(self) -> SettingsDialog:
        dlg = SettingsDialog(self.ctl.cfg, self.store, self, base=self.base_cfg)
        dlg.applied.connect(self.ctl.apply_config)
        dlg.applied.connect(self._show_wake_hint)  # after the controller took the new configuration
        dlg.show()
        return dlg

    def export_dialog(self, suffix: str) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export", f"specvoice{suffix}", f"*{suffix}")
        if path:
            try:
                where = Path(self.history.export(path)).resolve()
            except (OSError, ValueError) as e:
                QMessageBox.warning(self, "Export failed", str(e))
                return
            self.status_label.setText(f"Exported to {where}")
            QMessageBox.information(self, "Exported", f"The conversation was saved to\n{where}")

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

    from .desktop_check import check_display, check_platform_libraries

    # Qt would abort the process (exit 134): with no display, or naming only the first missing library
    problem = None if QApplication.instance() else check_display() or check_platform_libraries()
    if problem:
        print(f"specvoice: error: {problem}", file=sys.stderr)
        return 2
    app = QApplication.instance() or QApplication(sys.argv if argv is None else argv)
    app.setApplicationName("specvoice")
    w = MainWindow(config_path=config_path)
    w.show()
    code = app.exec()
    # the window is gone: let the session finish its journal and threads (bounded; they are daemons after that)
    w.ctl.stop()
    w.ctl.wait_stopped(timeout=10)
    return code


def _language_code(name: str) -> str:
    """``caption.target_language`` ("German", "de", …) as the code the language box lists, or as given."""
    return language_code(name) or name.strip()
