"""The GUI's engine: a QObject whose work runs on worker threads and reports only through Qt signals.

Signals are emitted from the capture/ASR/answer threads and delivered to the GUI thread as queued events, so the
window never blocks and never touches an engine object directly: :meth:`EngineController.stop` only signals the
workers and returns at once; the session thread winds down in the background and emits ``session_ended`` last.
Every worker that fails emits ``error`` with a one-line message and ends. Models load once (``load()``, on a worker thread,
with progress messages); a session is started with an input (a microphone device or a WAV file played as if it
were the microphone) in one of two modes — assistant or live caption — and with hands-free (VAD) or push-to-talk
turn taking.

Talking over the assistant (``[duplex]`` settings, as ``specvoice assist --mic``): when the answer plays on a real
output device and the input is a microphone, the microphone is echo-cancelled (``Runtime.echo_source``: WebRTC AEC3
with the player's output as the far-end reference) before the VAD and the ASR, and ``audio.aec.BargeInDetector``
on the cleaned microphone stops the answer (``barge_in``); while the answer is audible an utterance starts only once
that detector heard the user, from where it heard them begin (``audio.aec.EchoGatedVAD``). ``speakers`` says who is
talking (user / assistant / both; "both" at least once per barge-in) and the end-of-turn decision of each utterance
arrives as a ``metrics`` dict of kind "turn".
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QObject, Signal

from audio.aec import EchoGatedVAD
from audio.sources import AudioSource, FileSource, MicSource, input_devices
from engine.config import Config
from engine.core.events import (AnswerAudio, AnswerDelta, AnswerDone, AnswerSentence, Error, FinalTranscript, PartialTranscript, SpeechEnded,
    RevisedTranscript, SpeechStarted, TurnDecision)
from engine.pipeline import Backlog
from engine.runtime import Runtime

from .desktop_check import repair_signal_emit

FILE_PREFIX = "file:"
repair_signal_emit()  # PySide6 6.12.0 loses a reference to True per emit: the workers emit thousands per session


class GatedSource(AudioSource):
    """Push-to-talk: passes the wrapped source's blocks only while ``open`` is set; closing ends the stream."""

    def __init__(self, inner: AudioSource):
        super().__init__()
        self.inner = inner
        self.name = inner.name
        self.gate = threading.Event()
        self.gate.set()

    def release(self) -> None:
        self.gate.clear()
        self.inner.close()

    def close(self) -> None:
        self.release()
        super().close()

    def __iter__(self):
        for b in self.inner:
            if not self.gate.is_set():
                return
            yield b


@dataclass
class SessionOptions:
    """What a session listens to and how.

    Attributes:
        source: "" = the default microphone, a device index/name, "file:/path.wav" (played as if it were the
            microphone), or an ``audio.sources.AudioSource`` (16 kHz float32 blocks) used as given.
        mode: "assistant" | "caption".
        push_to_talk: the utterance ends when the talk button is released (no VAD).
        realtime: a file input is paced at real time.
        target_language: caption language.
        player: the output the answers are played on (``audio.playback.Player`` or ``NullPlayer``; None = none).
            With echo cancellation its ``reference`` receives the far end, and a barge-in stops it (from the
            capture thread, without waiting for the GUI).
        echo_cancellation: None = on in assistant mode for a live input (a microphone or an AudioSource, not a
            file) when ``player.available`` (a real loudspeaker) and ``duplex.echo_cancellation`` is set; True = also
            for a file input; False = off.
    """

    source: "str | AudioSource"
    mode: str = "assistant"
    push_to_talk: bool = False
    realtime: bool = True
    target_language: str = "de"
    player: object = None
    echo_cancellation: bool | None = None


SPEAKERS = ("", "user", "assistant", "both")  # values of EngineController.speakers
BOTH_HOLD_S = 0.5  # "both" stays on this long after a barge-in (playback stops at once), s


def _seconds(x) -> float:
    """A player's ``stop()`` result as seconds dropped (players that cannot tell return None: 0.0)."""
    return float(x) if isinstance(x, (int, float)) else 0.0


class EngineController(QObject):
    """Owns the runtime and the running session; everything it reports arrives as signals."""

    status = Signal(str)
    models_ready = Signal(dict)
    load_failed = Signal(str)
    level = Signal(float)  # input RMS, 0..1
    speech_started = Signal(int)
    partial = Signal(int, str, str)  # utterance, committed, tentative
    final = Signal(int, str, float, float)  # utterance, text, t_start, t_end
    answer_delta = Signal(int, str, bool)  # utterance, text, accepted before the user finished (PredGen)
    answer_sentence = Signal(int, int, str)
    answer_audio = Signal(int, object, int)  # utterance, float32 samples, sample rate
    answer_done = Signal(int, str, bool)  # utterance, text, interrupted
    caption = Signal(object)  # engine.core.events.Caption
    metrics = Signal(dict)
    error = Signal(str)
    session_ended = Signal()
    barge_in = Signal(float, str)  # audio time (s) of the detection, path ("vad" | "double_talk")
    speakers = Signal(str)  # who is talking now: "" | "user" | "assistant" | "both" (on change, from a worker)
    echo_cancelling = Signal(bool)  # the session's microphone is echo-cancelled (emitted once a session starts)
    final_language = Signal(int, str)  # utterance, ISO 639-1 code of its final ("" unknown); just before ``final``
    revised = Signal(object)  # engine.core.events.RevisedTranscript: the second pass changed final texts

    def __init__(self, cfg: Config | None = None):
        super().__init__()
        self.cfg = cfg or Config()
        self.rt = Runtime(self.cfg, progress=False)
        self._session: threading.Thread | None = None
        self._source: AudioSource | None = None
        self._transcriber = None
        self._conv = None
        self._stop = threading.Event()
        self._ended = threading.Event()  # the session thread has emitted session_ended (it is returning)
        self._loader: threading.Thread | None = None
        self.loaded = False

    # -- models ---------------------------------------------------------------------------------------------------
    def load(self, mode: str = "assistant") -> threading.Thread:
        """Load the models for ``mode`` on a worker thread (status messages as it goes)."""

        def work():
            try:
                self.status.emit("loading speech recognition…")
                self.rt.asr_backend()
                self.rt.model("vad")
                self.status.emit("loading the language model…")
                self.rt.llm()
                if mode == "assistant":
                    self.status.emit("loading the voice…")
                    self.rt.tts()
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
        """New settings. Models whose role or file changed are reloaded on next use; thresholds apply to the next
        session (the running one keeps its settings)."""
        old = self.cfg
        self.cfg = cfg
        if cfg.models != old.models or cfg.asr.model_role != old.asr.model_role or cfg.llm != old.llm \
                or cfg.tts != old.tts or cfg.asr.compute_type != old.asr.compute_type:
            keep = self.rt
            self.rt = Runtime(cfg, progress=False)
            # reuse already loaded models whose role/file is unchanged
            for key, obj in keep._cache.items():
                if key.startswith("llm:") and cfg.models.llm_target == old.models.llm_target \
                        and cfg.llm.n_ctx == old.llm.n_ctx:
                    self.rt._cache[key] = obj
                if key.startswith("tts:") and cfg.models.tts_voice == old.models.tts_voice \
                        and cfg.tts.length_scale == old.tts.length_scale:
                    self.rt._cache[key] = obj
                if key.startswith(("asr:", "whisper_ssd:", "torch_whisper:")) and cfg.models == old.models \
                        and cfg.asr.model_role == old.asr.model_role and cfg.asr.compute_type == old.asr.compute_type:
                    self.rt._cache[key] = obj
            self.rt.resolved.update({r: m for r, m in keep.resolved.items() if getattr(cfg.models, r) ==
                                     getattr(old.models, r)})
        else:
            self.rt.cfg = cfg

    # -- sessions -------------------------------------------------------------------------------------------------
    @staticmethod
    def inputs() -> list[tuple[str, str]]:
        """(label, source spec) for the input picker: microphones, then a WAV-file entry is added by the GUI."""
        return [(d["name"], str(d["index"])) for d in input_devices()]

    def _make_source(self, opts: SessionOptions) -> AudioSource:
        if isinstance(opts.source, AudioSource):
            src: AudioSource = opts.source
        elif opts.source.startswith(FILE_PREFIX):
            src = FileSource(opts.source[len(FILE_PREFIX):], self.cfg.audio.block_s,
                                          realtime=opts.realtime, trailing_silence_s=1.0)
        else:
            src = MicSource(opts.source or None, self.cfg.audio.block_s)
        return GatedSource(src) if opts.push_to_talk else src

    def running(self) -> bool:
        """A session thread is alive (listening, or still winding down after :meth:`stop`)."""
        return self._session is not None and self._session.is_alive()

    def stopping(self) -> bool:
        """:meth:`stop` was called and the session thread has not ended yet."""
        return self.running() and self._stop.is_set()

    def start(self, opts: SessionOptions) -> bool:
        """Start listening. Returns False (and emits ``error``) when the input cannot be opened or the previous
        session is still winding down."""
        if self.running() and self._ended.is_set() and threading.current_thread() is not self._session:
            # the session already said it ended (its last statement) and is returning: a start right after
            # session_ended must start a new session, not find the old thread alive and report it running
            self._session.join(timeout=5.0)
        if self.stopping():
            self.error.emit("the previous session is still stopping; try again in a moment")
            return False
        if self.running():
            return True
        try:
            self._source = self._make_source(opts)
        except Exception as e:  # no microphone, unreadable file
            self.error.emit(str(e))
            return False
        self._stop = threading.Event()  # a new event per session: a late stop() of the old one cannot reach it
        self._ended = threading.Event()
        self._session = threading.Thread(target=self._run, args=(opts, self._stop, self._ended), name="session",
                                         daemon=True)
        self._session.start()
        return True

    def emit_transcript(self, ev: "FinalTranscript | RevisedTranscript") -> None:
        """Report a transcript event as signals: ``final_language`` then ``final`` for a ``FinalTranscript``,
        ``revised`` for a ``RevisedTranscript`` (what the session's ASR thread calls for each; safe from any thread).

        Raises:
            TypeError: another event.
        """
        if isinstance(ev, FinalTranscript):
            self.final_language.emit(ev.utterance, ev.language)  # first: queued signals arrive in emission order
            self.final.emit(ev.utterance, ev.text, ev.t_start, ev.t_end)
        elif isinstance(ev, RevisedTranscript):
            self.revised.emit(ev)
        else:
            raise TypeError(f"not a transcript event: {type(ev).__name__}")

    def release_talk(self) -> None:
        """Push-to-talk released: the utterance ends now."""
        if isinstance(self._source, GatedSource):
            self._source.release()

    def stop(self) -> None:
        """Stop listening and any answer. Returns at once (it never waits on a worker): the session thread stops
        its capture, answer and caption threads in the background and emits ``session_ended`` when they are done.
        :meth:`wait_stopped` waits for that where waiting is allowed (not on the GUI thread)."""
        self._stop.set()
        if self._source is not None:
            self._source.close()
        if self._transcriber is not None:
            self._transcriber.stop()
        if self._conv is not None:
            self._conv.on_speech_start()

    def wait_stopped(self, timeout: float | None = None) -> bool:
        """Block until the session thread (and the model loader) ended, at most ``timeout`` s. Returns True when
        no worker is left. Meant for shutdown after the window closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in (self._session, self._loader):
            if t is not None:
                t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t is not None and t.is_alive() for t in (self._session, self._loader))

    def interrupt_answer(self) -> None:
        if self._conv is not None:
            self._conv.on_speech_start()

    def playback_cut(self, dropped_s) -> None:
        """The window's player stopped an answer with ``dropped_s`` seconds never played (a float, or None when the
        player cannot tell): the conversation history keeps what the user heard."""
        if self._conv is not None:
            self._conv.on_playback_cut(_seconds(dropped_s))

    def _run(self, opts: SessionOptions, stop: threading.Event, ended: threading.Event) -> None:
        """The session thread: ends on any exception with an ``error`` signal, always emits ``session_ended``
        (``ended`` is set just before)."""
        try:
            self._session_body(opts, stop)
        except Exception as e:
            self.error.emit(f"the session stopped: {type(e).__name__}: {e}")
        finally:
            self._transcriber = None
            self._conv = None
            ended.set()
            self.session_ended.emit()

    def _session_body(self, opts: SessionOptions, stop: threading.Event) -> None:
        from engine.answer.assistant import Conversation
        from engine.translate.caption_loop import CaptionLoop
        from engine.runtime import build_assistant, build_translator

        cfg = self.cfg
        try:
            self.rt.asr_backend()  # load now: a model error is reported before capture starts
            vad = None if opts.push_to_talk else self.rt.vad()
        except Exception as e:
            self.error.emit(f"cannot start speech recognition: {e}")
            return
        started = time.monotonic()
        eos: dict[int, float] = {}
        # user speech (VAD/barge-in); an answer's audio is being produced; monotonic time of the latest barge-in;
        # barge-ins so far
        talk = {"user": False, "answer": False, "barge_in": -1.0, "barges": 0}
        answer_marks: dict[int, dict] = {}
        translator = None
        conv = None

        def on_answer(ev):
            if isinstance(ev, AnswerDelta):
                self.answer_delta.emit(ev.utterance, ev.text, False)
            elif isinstance(ev, AnswerSentence):
                self.answer_sentence.emit(ev.utterance, ev.index, ev.text)
            elif isinstance(ev, AnswerAudio):
                mk = answer_marks.setdefault(ev.utterance, {})
                mk.setdefault("first_audio", ev.wall)
                conv.mark_heard()
                talk["answer"] = True
                self.answer_audio.emit(ev.utterance, ev.samples, ev.sample_rate)
            elif isinstance(ev, AnswerDone):
                talk["answer"] = False
                self.answer_done.emit(ev.utterance, ev.text, ev.interrupted)
            elif isinstance(ev, Error):
                self.error.emit(f"{ev.where}: {ev.message}")

        def on_metrics(utt, text, m):
            e = eos.get(utt)
            self.metrics.emit({
                "kind": "answer", "utterance": utt,
                "ttfs_s": (m.first_sentence_wall - e) if e and m.first_sentence_wall else None,
                "first_audio_s": (m.first_audio_wall - e) if e and m.first_audio_wall else None,
                "nfetfs": m.nfetfs, "presynth_used": m.presynth_used, "accepted_tokens": m.accepted_tokens,
                "tokens_per_s": m.gen.tokens_per_s})

        try:
            if opts.mode == "assistant":
                assistant = build_assistant(cfg, self.rt, on_answer)
                assistant.warm()
                conv = Conversation(assistant, on_metrics)
                self._conv = conv
            else:
                translator = build_translator(cfg, self.rt, opts.target_language)
        except Exception as e:
            self.error.emit(f"cannot start the {opts.mode}: {e}")
            return
        if stop.is_set():  # stopped while the models loaded
            return

        def on_caption(cap, u):
            self.caption.emit(cap)
            st = translator.stream
            self.metrics.emit({"kind": "caption", "utterance": cap.utterance, "ne": st.ne, "acceptance": st.acceptance,
                               "accepted_share": st.accepted_share, "tokens_per_s": st.tokens_per_s})

        def on_caption_error(msg: str):  # the loop has stopped: the error is shown, and the session ends with it
            self.error.emit(f"caption: {msg}")
            stop.set()
            if self._source is not None:
                self._source.close()
            if self._transcriber is not None:
                self._transcriber.stop()

        # the same job policy as `specvoice caption` and its benchmark (engine.translate.caption_loop.CaptionLoop)
        cap_loop = (CaptionLoop(translator, on_caption, on_error=on_caption_error, source=cfg.caption.source)
                    if translator is not None else None)

        rule = "push_to_talk" if vad is None else cfg.duplex.end_of_turn
        turn_p: dict[int, float] = {}  # utterance → the latest Smart Turn probability

        def on_event(ev):
            if cap_loop is not None:
                cap_loop.on_event(ev)
            if isinstance(ev, SpeechStarted):
                talk["user"] = True
                self.speech_started.emit(ev.utterance)
                if conv is not None:
                    conv.on_speech_start()
            elif isinstance(ev, TurnDecision):
                turn_p[ev.utterance] = ev.p_complete
                complete = ev.p_complete >= cfg.duplex.turn_threshold
                self.metrics.emit({"kind": "turn", "utterance": ev.utterance, "rule": rule, "t": ev.t,
                                   "p_complete": ev.p_complete, "complete": complete, "final": complete})
            elif isinstance(ev, SpeechEnded):
                talk["user"] = False
                eos[ev.utterance] = ev.wall
                p = turn_p.pop(ev.utterance, None)
                self.metrics.emit({"kind": "turn", "utterance": ev.utterance, "rule": rule, "t": ev.t,
                                   "p_complete": p, "complete": True, "final": True,
                                   "by": ("model" if rule == "smart_turn" and p is not None
                                          and p >= cfg.duplex.turn_threshold else
                                          "released" if rule == "push_to_talk" else "silence"),
                                   "silence_s": (cfg.duplex.turn_max_silence_s if rule == "smart_turn"
                                                 else cfg.vad.min_silence_s)})
            elif isinstance(ev, PartialTranscript):
                self.partial.emit(ev.utterance, ev.committed, ev.tentative)
                self.metrics.emit({"kind": "asr", "rtf": self._transcriber.stats.rtf if self._transcriber else None})
                if conv is not None:
                    conv.on_partial(ev.utterance, ev.source(cfg.llm.predgen_source), ev.language)
            elif isinstance(ev, FinalTranscript):
                self.emit_transcript(ev)
                if ev.utterance in eos:
                    self.metrics.emit({"kind": "asr", "eos_to_final_s": ev.wall - eos[ev.utterance],
                                       "rtf": self._transcriber.stats.rtf if self._transcriber else None})
                if conv is not None:
                    conv.on_final(ev.utterance, ev.text, ev.language)
            elif isinstance(ev, RevisedTranscript):  # shown and journaled by the window; an answer given stays
                self.emit_transcript(ev)
            elif isinstance(ev, Backlog):
                self.status.emit("speech recognition is back in step" if ev.caught_up else
                                 f"speech recognition is {ev.behind_s:.1f} s behind; catching up (no audio is lost)")
            elif isinstance(ev, Error):
                self.error.emit(f"{ev.where}: {ev.message}")

        class LevelSource(AudioSource):
            def __init__(s, inner):
                super().__init__()
                s.inner = inner
                s.name = inner.name

            def close(s):
                s.inner.close()

            def __iter__(s):
                for b in s.inner:
                    self.level.emit(float(min(1.0, np.sqrt(np.mean(b.samples ** 2)) * 4)) if len(b.samples) else 0.0)
                    yield b

        source: AudioSource = self._source
        player = opts.player
        loudspeaker = bool(getattr(player, "available", False))
        aec = opts.echo_cancellation
        if aec is None:
            aec = loudspeaker and not isinstance(getattr(self._source, "inner", self._source), FileSource)
        sink = None
        if aec and conv is not None and player is not None:
            def on_barge_in(t: float) -> None:  # capture thread: stop the answer now, tell the window after
                talk["user"] = True
                talk["barge_in"] = time.monotonic()
                talk["barges"] += 1  # the capture thread is the only writer
                conv.on_speech_start()
                conv.on_playback_cut(_seconds(player.stop()))  # the history keeps what the user heard
                bi = getattr(source, "barge_in", None)
                self.barge_in.emit(float(t), getattr(bi, "last_path", None) or "")

            try:
                source, sink = self.rt.echo_source(self._source, on_barge_in)
            except Exception as e:
                self.error.emit(f"echo cancellation is off: {type(e).__name__}: {e}")
                source, sink = self._source, None
            if sink is not None:
                player.reference = sink
        self.echo_cancelling.emit(sink is not None)

        def assistant_talking() -> bool:
            idle = getattr(player, "idle", None)  # audio.playback.Player: set once its queue has played out
            if isinstance(idle, threading.Event) and loudspeaker:
                return not idle.is_set()
            return talk["answer"]

        monitor_stop = threading.Event()

        def monitor() -> None:  # who is talking, polled every 50 ms; emitted on change
            last, barges = None, 0
            while not monitor_stop.wait(0.05):
                # a barge-in stops playback at once: "both" is held BOTH_HOLD_S after it so that it can be seen, and
                # shown at least once per barge-in however late this thread runs (a loaded CPU)
                fresh = talk["barges"] != barges
                barges = talk["barges"]
                u = talk["user"] or fresh
                a = assistant_talking() or fresh or time.monotonic() - talk["barge_in"] < BOTH_HOLD_S
                now = "both" if u and a else "user" if u else "assistant" if a else ""
                if now != last:
                    self.speakers.emit(now)
                    last = now
            if last:
                self.speakers.emit("")

        try:
            self._transcriber = self.rt.transcriber(LevelSource(source), on_event, use_vad=vad is not None)
        except Exception:
            if sink is not None and getattr(player, "reference", None) is sink:
                player.reference = None
            raise
        detector = getattr(source, "barge_in", None)
        if detector is not None and self._transcriber.vad is not None:
            # while the answer plays, speech starts only once the barge-in detector heard the user: the utterance
            # VAD alone would take the echo AEC3 leaks while it converges for the user (audio.aec.EchoGatedVAD)
            self._transcriber.vad = EchoGatedVAD(self._transcriber.vad, detector)
        if stop.is_set():
            self._transcriber.stop()
        mon = threading.Thread(target=monitor, name="speakers", daemon=True)
        mon.start()  # stopped in the finally below
        try:
            self._transcriber.run()
        except Exception as e:
            self.error.emit(f"speech recognition stopped: {type(e).__name__}: {e}")
        finally:
            if sink is not None and getattr(player, "reference", None) is sink:
                player.reference = None
            if conv is not None:
                while not stop.is_set() and not conv.wait_idle(timeout=0.1):
                    pass
                conv.close()
            if cap_loop is not None:
                while cap_loop.busy and cap_loop.error is None and not stop.is_set():
                    time.sleep(0.05)  # the last (final) caption is translated and emitted before the session ends
                if stop.is_set():
                    cap_loop.abort()
                cap_loop.close(timeout=30)
            monitor_stop.set()
            mon.join(timeout=5)
        self.status.emit(f"stopped after {time.monotonic() - started:.1f} s")
