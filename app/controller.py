"""The GUI's adapter over the session engine: a QObject that runs :class:`engine.session.Session` on a worker
thread and reports its events only through Qt signals.

Signals are emitted from the engine's threads and delivered to the GUI thread as queued events, so the window never
blocks and never touches an engine object: :meth:`EngineController.stop` only tells the session and returns at
once; the session thread winds down in the background (joining the session's threads, each for a bounded time) and
emits ``session_ended`` as its last statement. Models load once
(``load()``, on a worker thread, with progress messages); a session is started with
:class:`engine.session.SessionOptions` — its input (a microphone, or a file played as if it were one), its mode
(assist or caption) and its turn taking (hands-free VAD or push-to-talk). Everything else — echo cancellation and
barge-in, the journal (written before a signal is emitted), the answers' playback and WAVs, the metrics — is the
session engine's, shared with ``specvoice assist``/``caption``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from audio.sources import input_devices
from engine.config import Config
from engine.core import events as E
from engine.journal import default_journal_path
from engine.pipeline import Backlog
from engine.runtime import Runtime
from engine.session import Session, SessionOptions, load_models

from .desktop_check import repair_signal_emit

repair_signal_emit()  # PySide6 6.12.0 loses a reference to True per emit: the workers emit thousands per session

#: what the ``metrics`` signal carries
METRICS = (E.AsrMetrics, E.SpokenAnswerMetrics, E.TurnMetrics, E.CaptionMetrics)


class EngineController(QObject):
    """Owns the runtime and the running session; everything it reports arrives as signals.

    Args:
        cfg: the configuration (default: the built-in one).
        journal_path: the journal every session appends to (default: :func:`engine.journal.default_journal_path`).
    """

    status = Signal(str)
    models_ready = Signal(dict)
    load_failed = Signal(str)
    level = Signal(float)  # input level, 0..1
    speech_started = Signal(int)
    partial = Signal(int, str, str)  # utterance, committed, tentative
    final = Signal(int, str, float, float)  # utterance, text, t_start, t_end
    answer_delta = Signal(int, str, bool)  # utterance, text, accepted before the user finished (PredGen)
    answer_sentence = Signal(int, int, str)
    answer_audio = Signal(int, object, int)  # utterance, float32 samples, sample rate (played by the session)
    answer_done = Signal(int, str, bool)  # utterance, text, interrupted
    answer_saved = Signal(object)  # engine.core.events.AnswerSaved: an answer's audio was written to a WAV
    caption = Signal(object)  # engine.core.events.Caption
    metrics = Signal(object)  # one of METRICS (engine.core.events)
    error = Signal(str)
    session_ended = Signal()
    barge_in = Signal(float, str)  # audio time (s) of the detection, path ("vad" | "double_talk")
    speakers = Signal(str)  # who is talking now: one of engine.core.events.SPEAKERS (on change)
    echo_cancelling = Signal(bool)  # the session's microphone is echo-cancelled (emitted once a session starts)
    final_language = Signal(int, str)  # utterance, ISO 639-1 code of its final ("" unknown); just before ``final``
    revised = Signal(object)  # engine.core.events.RevisedTranscript: the second pass changed final texts
    # hands-free with a wake phrase: "listening" | "conversation" (engine.core.events.WakeState) and its status line
    wake_state = Signal(str, str)

    def __init__(self, cfg: Config | None = None, journal_path: str | Path | None = None):
        super().__init__()
        self.cfg = cfg or Config()
        self.rt = Runtime(self.cfg, progress=False)
        self.journal_path = Path(journal_path) if journal_path else default_journal_path()
        self._thread: threading.Thread | None = None
        self._session: Session | None = None
        self._ended = threading.Event()  # the session thread has emitted session_ended (it is returning)
        self._loader: threading.Thread | None = None
        self.loaded = False

    # -- models ---------------------------------------------------------------------------------------------------
    def load(self, mode: str = "assist") -> threading.Thread:
        """Load the models for ``mode`` on a worker thread (status messages as it goes)."""

        def work():
            try:
                load_models(self.rt, mode, self.status.emit)
                self.loaded = True
                self.models_ready.emit(dict(self.rt.load_times.seconds))
                self.status.emit("ready")
            except Exception as e:
                # the status first: an open window shows it before the error box (queued in this order)
                self.status.emit(f"model loading failed: {e}")
                self.load_failed.emit(f"{type(e).__name__}: {e}")

        t = threading.Thread(target=work, name="model-load", daemon=True)
        t.start()
        self._loader = t
        return t

    def apply_config(self, cfg: Config) -> None:
        """New settings. Models whose role or file changed are reloaded on next use (the runtime keeps the rest);
        thresholds apply to the next session (the running one keeps its settings)."""
        self.rt = self.rt.reconfigured(cfg)
        self.cfg = cfg

    # -- sessions -------------------------------------------------------------------------------------------------
    @staticmethod
    def inputs() -> list[tuple[str, str]]:
        """(label, source spec) for the input picker: microphones, then a WAV-file entry is added by the GUI."""
        return [(d["name"], str(d["index"])) for d in input_devices()]

    def running(self) -> bool:
        """A session thread is alive (listening, or still winding down after :meth:`stop`)."""
        return self._thread is not None and self._thread.is_alive()

    def stopping(self) -> bool:
        """:meth:`stop` was called and the session thread has not ended yet."""
        return self.running() and self._session is not None and self._session.stopped

    def start(self, opts: SessionOptions) -> bool:
        """Start a session. Returns False (and emits ``error``) when the input cannot be opened or the previous
        session is still winding down."""
        if self.running() and self._ended.is_set() and threading.current_thread() is not self._thread:
            # the session already said it ended (its last statement) and is returning: a start right after
            # session_ended must start a new session, not find the old thread alive and report it running
            self._thread.join(timeout=5.0)
        if self.stopping():
            self.error.emit("the previous session is still stopping; try again in a moment")
            return False
        if self.running():
            return True
        try:  # opened now: no microphone or an unreadable file is reported at once
            session = Session(self.cfg, self.rt, opts, self._on_event)
        except Exception as e:
            self.error.emit(str(e))
            return False
        self._session = session
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(session, self._ended), name="session", daemon=True)
        self._thread.start()
        return True

    def release_talk(self) -> None:
        """Push-to-talk released: the utterance ends now."""
        if self._session is not None:
            self._session.release_talk()

    def stop(self) -> None:
        """Stop listening and any answer. Returns at once (it never waits on a worker): the session stops its
        threads in the background and ``session_ended`` is emitted when they are done. :meth:`wait_stopped` waits
        for that where waiting is allowed (not on the GUI thread)."""
        if self._session is not None:
            self._session.stop()

    def wait_stopped(self, timeout: float | None = None) -> bool:
        """Block until the session thread (and the model loader) ended, at most ``timeout`` s. Returns True when
        no worker is left. Meant for shutdown after the window closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in (self._thread, self._loader):
            if t is not None:
                t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t is not None and t.is_alive() for t in (self._thread, self._loader))

    def interrupt_answer(self) -> None:
        """Stop the answer being generated or played ("Stop answer")."""
        if self._session is not None:
            self._session.interrupt_answer()

    def playback_cut(self, dropped_s) -> None:
        """A player stopped an answer with ``dropped_s`` seconds never played (a float, or None when the player
        cannot tell): the conversation history keeps what the user heard."""
        if self._session is not None:
            self._session.playback_cut(dropped_s)

    def _run(self, session: Session, ended: threading.Event) -> None:
        """The session thread: ends on any exception with an ``error`` signal, always emits ``session_ended``
        (``ended`` is set just before)."""
        try:
            try:  # on this thread: the journal is read to place the session on its clock
                session.open_journal(self.journal_path, "app")
            except OSError as e:
                self.error.emit(f"cannot write the journal {self.journal_path}: {e}; the session goes on without it")
            session.run()
        except Exception as e:
            self.error.emit(f"the session stopped: {type(e).__name__}: {e}")
        finally:
            ended.set()
            self.session_ended.emit()

    # -- events → signals (from the engine's threads) -------------------------------------------------------------
    def emit_transcript(self, ev: "E.FinalTranscript | E.RevisedTranscript") -> None:
        """Report a transcript event as signals: ``final_language`` then ``final`` for a ``FinalTranscript``,
        ``revised`` for a ``RevisedTranscript`` (safe from any thread).

        Raises:
            TypeError: another event.
        """
        if isinstance(ev, E.FinalTranscript):
            self.final_language.emit(ev.utterance, ev.language)  # first: queued signals arrive in emission order
            self.final.emit(ev.utterance, ev.text, ev.t_start, ev.t_end)
        elif isinstance(ev, E.RevisedTranscript):
            self.revised.emit(ev)
        else:
            raise TypeError(f"not a transcript event: {type(ev).__name__}")

    def _on_event(self, ev) -> None:
        if isinstance(ev, E.InputLevel):
            self.level.emit(ev.level)
        elif isinstance(ev, E.PartialTranscript):
            self.partial.emit(ev.utterance, ev.committed, ev.tentative)
        elif isinstance(ev, (E.FinalTranscript, E.RevisedTranscript)):
            self.emit_transcript(ev)
        elif isinstance(ev, METRICS):
            self.metrics.emit(ev)
        elif isinstance(ev, E.SpeechStarted):
            self.speech_started.emit(ev.utterance)
        elif isinstance(ev, E.AnswerDelta):
            self.answer_delta.emit(ev.utterance, ev.text, False)
        elif isinstance(ev, E.AnswerSentence):
            self.answer_sentence.emit(ev.utterance, ev.index, ev.text)
        elif isinstance(ev, E.AnswerAudio):
            self.answer_audio.emit(ev.utterance, ev.samples, ev.sample_rate)
        elif isinstance(ev, E.AnswerDone):
            self.answer_done.emit(ev.utterance, ev.text, ev.interrupted)
        elif isinstance(ev, E.AnswerSaved):
            self.answer_saved.emit(ev)
        elif isinstance(ev, E.Caption):
            self.caption.emit(ev)
        elif isinstance(ev, E.Speakers):
            self.speakers.emit(ev.who)
        elif isinstance(ev, E.BargeIn):
            self.barge_in.emit(ev.t, ev.path)
        elif isinstance(ev, E.EchoCancelling):
            self.echo_cancelling.emit(ev.on)
        elif isinstance(ev, E.WakeState):
            self.wake_state.emit(ev.state, ev.text)
        elif isinstance(ev, Backlog):
            self.status.emit("speech recognition is back in step" if ev.caught_up else
                             f"speech recognition is {ev.behind_s:.1f} s behind; catching up (no audio is lost)")
        elif isinstance(ev, E.Status):
            self.status.emit(ev.text)
        elif isinstance(ev, E.Error):
            self.error.emit(f"{ev.where}: {ev.message}")
