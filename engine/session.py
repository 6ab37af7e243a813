"""The session engine: one conversation from an audio source to the journal, for the CLI and the desktop app.

A :class:`Session` builds every stage from a :class:`engine.config.Config` (through :class:`engine.runtime.Runtime`)
and runs them::

    source ─► [push-to-talk gate] ─► [echo cancellation + barge-in] ─► capture thread ─► VAD (echo-gated)
          ─► ASR thread (streaming Whisper): journal ──┬─► assist:  Conversation (answer thread: LLM ─► TTS)
                                                       │              └─► answer-delivery thread: journal, play, WAV
                                                       ├─► caption: CaptionLoop (caption thread: translation, journal)
                                                       └─► display queue ─► run()'s thread: ``on_event``

The ASR thread journals each final transcript, revision and error, then feeds the stages the moment an event
exists (they only hand it to their own threads, so the ASR never waits on them): an answer is never on disk before
its question. What the user sees goes through a bounded display queue in which only an out-of-date partial
transcript (or speed reading) may be skipped. Every final transcript, revision, answer sentence, whole answer, final
caption and error is in the journal *before* ``on_event`` sees it, so a crash loses nothing that was shown; a
journal that cannot be written is reported once and the session goes on.

``on_event`` receives :mod:`engine.core.events` records only, on these threads (a consumer must be thread-safe):

* run()'s thread: speech boundaries, partial / final / revised transcripts, ``Backlog``, ``AsrMetrics``,
  ``TurnMetrics``, the transcriber's errors, and the ``Status`` and ``EchoCancelling`` of the start and the end;
* the answer-delivery thread: answer deltas, sentences, audio and ends, ``AnswerSaved``, delivery errors;
* the answer thread: ``SpokenAnswerMetrics``; the caption thread: captions, ``CaptionMetrics``, re-translation
  ``Status``, its error;
* the capture thread: ``BargeIn`` and ``InputLevel``; the speakers thread: ``Speakers``;
* with a wake phrase (``duplex.wake_phrase``, :mod:`engine.answer.wake`): ``WakeState`` on run()'s thread at the
  start, then on the ASR thread (the phrase heard) or the speakers thread (the follow-up window ended).
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from audio.io import write_wav
from audio.sources import AudioSource, FileSource, GatedSource, LevelSource, MicSource
from engine.config import Config
from engine.core.events import (AnswerAudio, AnswerDelta, AnswerDone, AnswerSaved, AsrMetrics, BargeIn,
                                Caption, CaptionMetrics, EchoCancelling, Error, FinalTranscript, InputLevel,
                                PartialTranscript, RevisedTranscript, Speakers, SpeechEnded, SpeechStarted,
                                SpokenAnswerMetrics, Status, TurnDecision, TurnMetrics)
from engine.journal import JournalWriter
from engine.pipeline import EventQueue

MODES = ("transcribe", "assist", "caption")
FILE_PREFIX = "file:"  # a source spec naming a file played as if it were the microphone
BOTH_HOLD_S = 0.5  # "both" talking stays reported this long after a barge-in (playback stops at once), s
DRAIN_S = 30.0  # on Ctrl-C, how long the utterance in flight may take to be finalised and journaled, s


def open_source(spec, cfg: Config, realtime: bool = True, trailing_silence_s: float = 1.0) -> AudioSource:
    """The session's input: ``spec`` is an :class:`audio.sources.AudioSource` (used as given), a ``Path`` or a
    ``"file:<path>"`` string (a file decoded now and played as if it were the microphone, at real-time pace when
    ``realtime``, followed by ``trailing_silence_s`` s of silence), or any other string: a microphone ("" = the
    ``audio.input_device`` setting, else a device index or name).

    Raises:
        audio.io.AudioError: the file cannot be decoded, or there is no such input device.
    """
    if isinstance(spec, AudioSource):
        return spec
    if isinstance(spec, Path) or (isinstance(spec, str) and spec.startswith(FILE_PREFIX)):
        path = spec if isinstance(spec, Path) else spec[len(FILE_PREFIX):]
        return FileSource(path, cfg.audio.block_s, realtime=realtime, trailing_silence_s=trailing_silence_s)
    return MicSource(spec or cfg.audio.input_device or None, cfg.audio.block_s)


def load_models(rt, mode: str, status: Callable[[str], None] = lambda text: None) -> None:
    """Load what a session of ``mode`` needs into the runtime ``rt`` (speech recognition and the VAD, the LLM, and
    the voice for "assist"), telling ``status`` what it loads; a :class:`Session` then starts without waiting.

    Raises:
        engine.models.ModelError, engine.llm.protocol.ModelLoadError: a model that cannot be loaded.
    """
    status("loading speech recognition…")
    rt.asr_backend()
    rt.model("vad")
    if mode in ("assist", "caption"):
        status("loading the language model…")
        rt.llm()
    if mode == "assist":
        status("loading the voice…")
        rt.tts()


@dataclass
class SessionOptions:
    """What a session does with its input.

    Attributes:
        source: the input, as :func:`open_source` takes it ("" = the configured microphone); ``realtime``: a file
            is played at real-time pace (else as fast as it is consumed).
        mode: one of :data:`MODES` — "transcribe" (transcripts only), "assist" (spoken answers) or "caption"
            (live translation into ``target_language``).
        push_to_talk: the stream is one utterance, ended by :meth:`Session.release_talk` (no VAD).
        target_language: caption language (code or English name); "" = ``caption.target_language``.
        player: where answers play (``audio.playback.Player`` or ``NullPlayer``), owned by the caller; None = the
            session opens the configured output device when ``play`` is set (a ``NullPlayer`` otherwise), waits
            for it to play out and closes it.
        play: with ``player`` None, whether to open an output device at all.
        echo_cancellation: None = on in assist mode when the answer plays on a real loudspeaker
            (``player.available``) and the input is live (not a file), if ``duplex.echo_cancellation`` is set;
            True = also for a file; False = off.
        input_level: report the input's level (:class:`InputLevel`) for a meter.
        wav_dir: where answer audio is written (None = nowhere); ``wav_per_answer``: one WAV per answer, as it
            ends (``answer-<time>-<utterance>.wav``), else one WAV of the session's answers at its end
            (``answer-<session>.wav``).
    """

    source: object = ""
    realtime: bool = True
    mode: str = "assist"
    push_to_talk: bool = False
    target_language: str = ""
    player: object = None
    play: bool = True
    echo_cancellation: bool | None = None
    input_level: bool = False
    wav_dir: Path | None = None
    wav_per_answer: bool = False


@dataclass
class SessionResult:
    """What a session did, for its report (:mod:`engine.session_report`)."""

    transcriber: object = None  # the engine.asr transcriber that ran (stats, texts)
    answers: list[dict] = field(default_factory=list)  # {"utterance", "user", "metrics", "answer"}
    finals: dict[int, float] = field(default_factory=dict)  # utterance → wall time of its final transcript
    first_sample_wall: float | None = None  # the player's first sample (None when it cannot tell)
    played: bool = False
    wav: Path | None = None
    captions: list[Caption] = field(default_factory=list)
    caption_updates: dict[int, dict] = field(default_factory=dict)  # utterance → its translation stream's figures
    captions_cancelled: int = 0
    translator: object = None
    error: str | None = None  # a stage failed and ended the session (the caption translator)


class Session:
    """One conversation (see the module docstring). Build it, call :meth:`run` (blocking) on a thread of yours;
    :meth:`stop`, :meth:`release_talk`, :meth:`interrupt_answer` and :meth:`playback_cut` may be called from any
    other thread.

    Args:
        cfg: the configuration every stage is built from.
        rt: the runtime that loads and caches the models (:class:`engine.runtime.Runtime`).
        options: :class:`SessionOptions`.
        on_event: receives every :mod:`engine.core.events` record, after it was journaled.
        journal: the journal file to append this session to (a new journal session, ``journal_label`` — default
            the mode — and the input's name in its first record, started once the input is open), or an
            :class:`engine.journal.Session` already started; None: nothing is journaled. :meth:`run` ends it.
        source: the input already opened (None: ``options.source`` is opened now, before any model loads).

    Raises:
        ValueError: an unknown ``options.mode``.
        engine.config.ConfigError: a ``duplex.wake_phrase`` with no word in it.
        audio.io.AudioError: the input cannot be opened (a file that does not decode, no microphone).
        OSError: the journal cannot be written.
    """

    def __init__(self, cfg: Config, rt, options: SessionOptions, on_event: Callable[[object], None],
                 journal=None, source: AudioSource | None = None, journal_label: str = ""):
        if options.mode not in MODES:
            raise ValueError(f"session mode must be one of {MODES}, got {options.mode!r}")
        self.cfg, self.rt, self.options, self.emit = cfg, rt, options, on_event
        # hands-free with a wake phrase (assist mode): only utterances addressed to the assistant are answered
        self._wake = self._wake_gate()  # before the input and the journal open: a bad phrase starts nothing
        if source is None:
            source = open_source(options.source, cfg, options.realtime)
        self.source = GatedSource(source) if options.push_to_talk else source
        self.journal = self.writer = None
        self.open_journal(journal, journal_label)
        self.result = SessionResult()
        self.transcriber = None
        self.conversation = None
        self.player = options.player
        self._stop = threading.Event()
        self._display = EventQueue(maxsize=256, droppable=lambda ev: isinstance(ev, (PartialTranscript, AsrMetrics))
                                   and getattr(ev, "eos_to_final_s", None) is None)
        self._answers = EventQueue(maxsize=256, droppable=lambda ev: isinstance(ev, AnswerDelta))
        self._turn_p: dict[int, float] = {}  # utterance → Smart Turn's latest P(complete)
        self._verdicts = None  # duplex.end_of_turn = llm: the LLM's end-of-turn verdicts the VAD reads
        # who is talking: user speech (VAD / barge-in), answer audio being produced, the latest barge-in
        # (monotonic s) and the number of barge-ins (written by the capture thread only)
        self._talk = {"user": False, "answer": False, "barge_in": -1.0, "barges": 0}
        self._audio: list[tuple[int, np.ndarray, int]] = []  # (utterance, samples, rate) not yet in a WAV
        self._caption_loop = None
        self._sink = None  # the player's far-end reference while the input is echo-cancelled
        self._monitor_stop = threading.Event()
        # answer audio made before this (monotonic s: a barge-in, Stop) is written to its WAV but not played
        self._cut_wall = float("-inf")
        self._answer_texts: dict[int, str] = {}  # utterance → its whole answer (AnswerDone may precede its metrics)
        self._answers_lock = threading.Lock()  # result.answers and _answer_texts: the answer and delivery threads
        self._journal_failed = False

    def _wake_gate(self):
        """The :class:`engine.answer.wake.WakeGate` of a hands-free assist session with ``duplex.wake_phrase`` set
        (None otherwise: push-to-talk addresses the assistant by itself, and captions answer nothing).

        Raises:
            engine.config.ConfigError: a wake phrase with no word in it.
        """
        d = self.cfg.duplex
        if self.options.mode != "assist" or self.options.push_to_talk or not d.wake_phrase.strip():
            return None
        from engine.answer.wake import WakeGate
        from engine.config import ConfigError
        from engine.core.events import WakeState

        try:
            gate = WakeGate(d.wake_phrase, d.follow_up_s, lambda state: self.emit(WakeState(state, gate.phrase)))
        except ValueError as e:
            raise ConfigError(f"duplex.wake_phrase: {e}") from None
        return gate

    def open_journal(self, journal, label: str = "") -> None:
        """Journal this session to ``journal`` (see the class's Args; before :meth:`run`). A path starts a journal
        session there, labelled ``label`` (default: the mode) with the input's name.

        Raises:
            OSError: the journal cannot be written.
        """
        if isinstance(journal, (str, Path)):
            from engine.journal import Journal

            journal = Journal(journal).start(label or self.options.mode, self.source.name)
        self.journal, self.writer = journal, JournalWriter(journal)

    # -- commands (any thread) --------------------------------------------------------------------------------------
    @property
    def stopped(self) -> bool:
        """:meth:`stop` was called (or a failed stage stopped the session)."""
        return self._stop.is_set()

    def stop(self) -> None:
        """Stop listening and any answer; :meth:`run` winds down and returns (it never waits here)."""
        self._stop.set()
        self.source.close()
        if self.transcriber is not None:
            self.transcriber.stop()
        self.interrupt_answer()

    def release_talk(self) -> None:
        """Push-to-talk released: the utterance ends now (nothing without push-to-talk)."""
        if isinstance(self.source, GatedSource):
            self.source.release()

    def interrupt_answer(self) -> None:
        """Stop the answer being generated or played (audio already made is not played any more)."""
        self._cut_wall = time.monotonic()
        if self.conversation is not None:
            self.conversation.on_speech_start()
        if self.player is not None:
            self.playback_cut(self.player.stop())

    def playback_cut(self, dropped_s) -> None:
        """The answer's playback stopped with ``dropped_s`` s never played (None when the player cannot tell): the
        conversation history keeps what the user heard."""
        if self.conversation is not None:
            self.conversation.on_playback_cut(float(dropped_s) if isinstance(dropped_s, (int, float)) else 0.0)

    # -- the run ----------------------------------------------------------------------------------------------------
    def run(self) -> SessionResult:
        """Build the stages, stream the source to its end (or :meth:`stop`), finish the answers and captions, and
        end the journal session. Returns the :class:`SessionResult` (``error`` set when a stage failed).

        Raises:
            KeyboardInterrupt: after the utterance in flight was finalised and journaled (at most 30 s).
            Exception: what building a stage or the ASR raised (the stream is stopped first).
        """
        status, started = "ok", time.monotonic()
        owned_player = False
        monitor = delivery = None
        try:
            owned_player = self._build()
            if self._stop.is_set():
                return self.result
            delivery = threading.Thread(target=self._deliver_answers, name="answer-delivery", daemon=True)
            delivery.start()
            monitor = threading.Thread(target=self._monitor_speakers, name="speakers", daemon=True)
            monitor.start()
            self._stream()
            self._finish_stages()
            if self.result.error is not None:
                status = "error"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        except BaseException:
            status = "error"
            raise
        finally:
            try:
                self._close_stages(delivery, monitor, owned_player, wait=status == "ok" and not self._stop.is_set())
            finally:
                st = self.transcriber
                if self.journal is not None:
                    try:
                        self.journal.end(st.stats.audio_s if st is not None else None, status)
                    except OSError as e:  # reported once; what interrupted or failed the session stays the error
                        if not self._journal_failed:
                            self._journal_failed = True
                            self.emit(Error("journal", f"cannot end the journal session: {e}"))
                self.emit(Status(f"stopped after {time.monotonic() - started:.1f} s"))
        return self.result

    def _build(self) -> bool:
        """Load and build the stages (before any audio is read). Returns whether the session owns its player."""
        from engine.answer.assistant import Conversation
        from engine.runtime import build_assistant, build_translator
        from engine.translate.caption_loop import CaptionLoop
        from engine.translate.languages import language_name

        cfg, opts, rt = self.cfg, self.options, self.rt
        rt.asr_backend()  # a model error is reported before capture starts
        owned = False
        if opts.mode == "assist":
            assistant = build_assistant(cfg, rt, self._answers.put)
            assistant.warm()
            tts = rt.tts()
            if self._stop.is_set():  # stopped while the models loaded
                return owned
            self.emit(Status(f"models ready ({', '.join(f'{k} {v}s' for k, v in rt.load_times.seconds.items())});"
                              f" answer method: {cfg.llm.answer_method}"))
            if self.player is None:
                from audio.playback import NullPlayer, open_player

                self.player = open_player(tts.sample_rate, cfg.audio.output_device) if opts.play else NullPlayer()
                owned = True
                if opts.play and not self.player.available:
                    self.emit(Status("no audio output device: the answer is written to a WAV only"))
            if cfg.duplex.end_of_turn == "llm" and cfg.llm.answer_method == "predgen" and not opts.push_to_talk:
                from engine.answer.turn import EndOfTurnVerdicts

                self._verdicts = EndOfTurnVerdicts()  # PredGen's end-of-turn probability → the VAD
            self.conversation = Conversation(assistant, self._on_answer_metrics,
                                             on_end_of_turn=self._verdicts.put if self._verdicts else None)
            if self._wake is not None:
                from engine.core.events import WakeState

                self.emit(WakeState(self._wake.state, self._wake.phrase))
        elif opts.mode == "caption":
            target = opts.target_language or cfg.caption.target_language
            c = cfg.caption
            translator = build_translator(cfg, rt, target, on_trigger=lambda ev: self.emit(
                Status(f"(caption re-translated: {', '.join(ev.reasons)})")))
            self.result.translator = translator
            if self._stop.is_set():
                return owned
            self.emit(Status(f"captioning into {language_name(target)} ({c.method}, β={c.beta}, mask-k={c.mask_k}"
                              f"{' display-only' if c.display_only_mask else ''}, by {c.segment})"))
            # the same job policy as the caption benchmark (engine.translate.caption_loop.CaptionLoop)
            self._caption_loop = CaptionLoop(translator, self._on_caption, on_error=self._on_caption_error,
                                             source=cfg.caption.source)
        if self._stop.is_set():
            return owned
        source = self._echo_cancelled(self.source)
        if opts.input_level:
            source = LevelSource(source, lambda level: self.emit(InputLevel(level)))
        hint = self._wake.prompt_hint if self._wake is not None and cfg.duplex.wake_prompt else None
        self.transcriber = rt.transcriber(source, self._on_asr_event, use_vad=not opts.push_to_talk,
                                          verdict=self._verdicts, turn_cfg=cfg, prompt_hint=hint)
        detector = getattr(source, "barge_in", None)
        if detector is not None and self.transcriber.vad is not None:
            from audio.aec import EchoGatedVAD

            # while the answer plays, speech starts only once the barge-in detector heard the user: the utterance
            # VAD alone would take the echo AEC3 leaks while it converges for the user
            self.transcriber.vad = EchoGatedVAD(self.transcriber.vad, detector)
        self.result.transcriber = self.transcriber
        if self._stop.is_set():
            self.transcriber.stop()
        return owned

    def _echo_cancelled(self, source: AudioSource) -> AudioSource:
        """``source`` echo-cancelled against the answer's playback where :class:`SessionOptions` asks for it
        (``EchoCancelling`` says whether it is); a barge-in stops the answer from the capture thread."""
        player, opts = self.player, self.options
        aec = opts.echo_cancellation
        if aec is None:
            live = not isinstance(getattr(source, "inner", source), FileSource)
            aec = bool(getattr(player, "available", False)) and live
        sink = None
        if aec and self.conversation is not None and player is not None:
            def on_barge_in(t: float) -> None:  # capture thread: stop the answer now, report after
                self._talk["user"] = True
                self._talk["barge_in"] = time.monotonic()
                self._talk["barges"] += 1
                self._cut_wall = time.monotonic()
                self.conversation.on_speech_start()
                self.playback_cut(player.stop())
                bi = getattr(cancelled, "barge_in", None)
                self.emit(BargeIn(float(t), getattr(bi, "last_path", None) or ""))

            try:
                cancelled, sink = self.rt.echo_source(source, on_barge_in)
            except Exception as e:
                self._report(Error("echo cancellation", f"off: {type(e).__name__}: {e}"))
                cancelled, sink = source, None
            if sink is not None:
                player.reference = sink
                source = cancelled
        self._sink = sink
        self.emit(EchoCancelling(sink is not None))
        return source

    def _stream(self) -> None:
        """Run the ASR on its thread and deliver the display queue on this one until the stream ends."""
        result: dict = {}
        done = object()
        st = self.transcriber

        def worker():
            try:
                st.run()
            except BaseException as e:  # surfaced on run()'s thread
                result["error"] = e
            finally:
                self._display.put(done)

        th = threading.Thread(target=worker, name="asr", daemon=True)
        th.start()
        try:
            while True:
                try:
                    ev = self._display.get(timeout=0.1)
                except queue.Empty:
                    continue
                if ev is done:
                    break
                self._show(ev)
        except KeyboardInterrupt:
            st.stop()
            deadline = time.monotonic() + DRAIN_S  # the utterance in flight is finalised (and journaled)
            while time.monotonic() < deadline:
                try:
                    ev = self._display.get(timeout=0.1)
                except queue.Empty:
                    if not th.is_alive():
                        break
                    continue
                if ev is done:
                    break
                if isinstance(ev, (FinalTranscript, RevisedTranscript, Error, SpeechEnded)):
                    self._show(ev)
            raise
        finally:
            if th.is_alive():  # left early (Ctrl-C, a failing consumer): no ASR thread outlives the session
                st.stop()
                self._display.close()  # releases an ASR thread waiting for room in the display queue
                th.join(timeout=DRAIN_S)
        if "error" in result:
            raise result["error"]

    def _finish_stages(self) -> None:
        """The stream ended: the answer being given and the captions still queued are finished (not when stopped)."""
        conv, loop = self.conversation, self._caption_loop
        if conv is not None:
            while not self._stop.is_set() and not conv.wait_idle(timeout=0.05):
                pass
        if loop is not None:
            while loop.busy and loop.error is None and not self._stop.is_set():
                time.sleep(0.05)  # the last (final) caption is translated and shown before the session ends

    def _close_stages(self, delivery, monitor, owned_player: bool, wait: bool) -> None:
        """Stop every stage's thread; a player the session opened plays out first when ``wait`` (the stream ended
        normally), else stops at once; the answer audio not yet written goes to its WAV either way."""
        player, sink = self.player, self._sink
        if sink is not None and getattr(player, "reference", None) is sink:
            player.reference = None
        if self.conversation is not None:
            self.conversation.close()
        if delivery is not None:
            self._answers.put(None)  # the answer-delivery thread ends after what is queued before it
            delivery.join(timeout=30)
        self._answers.close()
        loop = self._caption_loop
        if loop is not None:
            if self._stop.is_set():
                loop.abort()
            loop.close(timeout=30)
            self.result.captions_cancelled = loop.cancelled
        if monitor is not None:
            self._monitor_stop.set()
            monitor.join(timeout=5)
        self._display.close()
        self._write_wavs()  # before the play-out: a Ctrl-C while it plays loses no audio
        if player is not None:
            self.result.played = bool(getattr(player, "available", False))
            if owned_player:
                try:
                    if wait:
                        player.wait(timeout=120)
                    else:
                        player.stop()
                finally:
                    player.close()
            self.result.first_sample_wall = getattr(player, "first_sample_wall", None)

    # -- events -----------------------------------------------------------------------------------------------------
    def _on_asr_event(self, ev) -> None:
        """The ASR thread's events: journaled first (a final transcript is on disk before an answer to it can be),
        then the stages are fed at once, and the display gets the event (and the metrics it gives) through the
        queue."""
        conv, loop, cfg = self.conversation, self._caption_loop, self.cfg
        self.writer.note(ev)
        self._journal(ev)
        if loop is not None:
            loop.on_event(ev)
        extra = []
        if isinstance(ev, SpeechStarted):
            self._talk["user"] = True
            if self._wake is not None:  # in conversation: a follow-up, taken without the phrase
                self._wake.speech_started(ev.utterance)
            if conv is not None:
                self._cut_wall = ev.wall
                conv.on_speech_start()  # the user speaks: the answer (generated or still playing) stops
                if self.player is not None:
                    self.playback_cut(self.player.stop())
        elif isinstance(ev, TurnDecision):
            self._turn_p[ev.utterance] = ev.p_complete
            complete = ev.p_complete >= self._turn_threshold()
            extra.append(TurnMetrics(ev.utterance, self._turn_rule(), ev.t, ev.p_complete, complete, complete))
        elif isinstance(ev, SpeechEnded):
            self._talk["user"] = False
            extra.append(self._turn_end(ev))
        elif isinstance(ev, PartialTranscript):
            if conv is not None:
                text = ev.source(cfg.llm.predgen_source)
                if self._wake is not None:  # no speculation before the phrase is heard; the LLM never sees it
                    text = self._wake.partial(ev.utterance, text)
                if text:
                    conv.on_partial(ev.utterance, text, ev.language, t_audio=ev.t_audio)
            extra.append(AsrMetrics(self.transcriber.stats.rtf if self.transcriber else None))
        elif isinstance(ev, FinalTranscript):
            self.result.finals[ev.utterance] = ev.wall
            if conv is not None:
                # with a wake phrase, an utterance not addressed to the assistant is shown and journaled only
                text = ev.text if self._wake is None else self._wake.final(ev.utterance, ev.text)
                if text is not None:
                    conv.on_final(ev.utterance, text, ev.language)
            eos = self.writer.eos.get(ev.utterance)
            if eos is not None:
                extra.append(AsrMetrics(self.transcriber.stats.rtf if self.transcriber else None, ev.utterance,
                                        ev.wall - eos))
        self._display.put(ev)
        for x in extra:
            self._display.put(x)

    def _turn_rule(self) -> str:
        rule = self.cfg.duplex.end_of_turn
        if rule == "llm" and self._verdicts is None:
            rule = "vad"  # no PredGen to judge the words: the silence alone decides
        return "push_to_talk" if self.options.push_to_talk else rule

    def _turn_threshold(self) -> float:
        """The probability at or above which the turn rule's model finds a turn complete."""
        from engine.answer.turn import complete_threshold

        return complete_threshold(self.cfg.duplex, self._turn_rule())

    def _turn_end(self, ev: SpeechEnded) -> TurnMetrics:
        d, rule = self.cfg.duplex, self._turn_rule()
        p = self._turn_p.pop(ev.utterance, None)
        by = ("model" if rule in ("smart_turn", "llm") and p is not None and p >= self._turn_threshold() else
              "released" if rule == "push_to_talk" else "silence")
        return TurnMetrics(ev.utterance, rule, ev.t, p, True, True, by,
                           d.turn_max_silence_s if rule in ("smart_turn", "llm") else self.cfg.vad.min_silence_s)

    def _show(self, ev) -> None:
        """Hand a transcriber event, journaled on the ASR thread, to the consumer (run()'s thread)."""
        self.emit(ev)

    def _journal(self, ev) -> None:
        """Journal ``ev`` (:class:`JournalWriter`). A journal that cannot be written is reported once and the
        session goes on: what is said is still shown, answered and captioned."""
        try:
            self.writer.write(ev)
        except OSError as e:
            if not self._journal_failed:
                self._journal_failed = True
                self.emit(Error("journal", f"cannot write the journal: {e}; the session goes on without it"))

    def _report(self, error: Error) -> None:
        """A session error: journaled, then shown."""
        self._journal(error)
        self.emit(error)

    def _deliver_answers(self) -> None:
        """The answer-delivery thread: answers reach the user the moment they are ready, not on the next ASR event
        (when the user is silent there is none)."""
        while True:
            try:
                ev = self._answers.get(timeout=0.05)
            except queue.Empty:
                continue
            if ev is None:
                return
            try:
                self._deliver(ev)
            except Exception as e:  # a broken output device must not stop the answers
                self._report(Error("answer delivery", f"{type(e).__name__}: {e}"))

    def _deliver(self, ev) -> None:
        player = self.player
        self._journal(ev)
        if isinstance(ev, AnswerAudio):
            if self.options.wav_dir is not None:
                self._audio.append((ev.utterance, np.asarray(ev.samples, np.float32), int(ev.sample_rate)))
            if ev.wall >= self._cut_wall:  # made before a barge-in or Stop: the user cut it, it is not played
                self._talk["answer"] = True
                if player is not None:
                    player.play(ev.samples, ev.sample_rate)
                # the answer's journal record is timed when it was spoken, on the session's audio clock
                self.writer.spoken(ev.utterance, len(ev.samples) / max(1, int(ev.sample_rate)), time.monotonic())
                self.conversation.mark_heard()
        elif isinstance(ev, AnswerDone):
            self._talk["answer"] = False
            with self._answers_lock:
                self._answer_texts[ev.utterance] = ev.text
                for rec in self.result.answers:
                    if rec["utterance"] == ev.utterance:
                        rec["answer"] = ev.text
        self.emit(ev)
        if isinstance(ev, AnswerDone) and self.options.wav_per_answer:
            self._write_wavs(ev.utterance)

    def _on_answer_metrics(self, utt: int, text: str, m) -> None:
        """Conversation's metrics of an answered turn (``engine.answer.assistant.AnswerMetrics``; answer thread)."""
        rec = {"utterance": utt, "user": text, "metrics": m}
        with self._answers_lock:
            if utt in self._answer_texts:  # its AnswerDone was delivered first
                rec["answer"] = self._answer_texts[utt]
            self.result.answers.append(rec)
        e = self.writer.eos.get(utt)
        self.emit(SpokenAnswerMetrics(utt, (m.first_sentence_wall - e) if e and m.first_sentence_wall else None,
                                      (m.first_audio_wall - e) if e and m.first_audio_wall else None, m.nfetfs,
                                      bool(m.presynth_used), m.accepted_tokens, m.gen.tokens_per_s))

    def _on_caption(self, cap: Caption, u) -> None:
        """A caption update (caption thread): the final one journaled, then shown."""
        st = self.result.translator.stream
        self.result.captions.append(cap)
        self.result.caption_updates[cap.utterance] = {
            "source": cap.source, "translation": u.text, "updates": len(st.updates), "ne": round(st.ne, 4),
            "acceptance_A_over_D": round(st.acceptance, 4), "accepted_share_A_over_O": round(st.accepted_share, 4),
            "output_tokens_per_s": round(st.tokens_per_s, 2),
            "compute_s": round(sum(x.compute_s for x in st.updates), 3)}
        self._journal(cap)
        self.emit(cap)
        self.emit(CaptionMetrics(cap.utterance, st.ne, st.acceptance, st.accepted_share, st.tokens_per_s))

    def _on_caption_error(self, msg: str) -> None:
        """The caption loop stopped (caption thread): journaled and shown, and the session ends with it."""
        self.result.error = f"caption failed: {msg}"
        try:
            self._report(Error("caption", msg))
        finally:
            self._stop.set()
            self.source.close()
            if self.transcriber is not None:
                self.transcriber.stop()

    def _monitor_speakers(self) -> None:
        """Who is talking, polled every 50 ms and reported on change (a barge-in stops playback at once: "both"
        is held :data:`BOTH_HOLD_S` after it, and reported at least once per barge-in however late this runs)."""
        talk, last, barges = self._talk, None, 0
        while not self._monitor_stop.wait(0.05):
            fresh = talk["barges"] != barges
            barges = talk["barges"]
            u = talk["user"] or fresh
            a = self._assistant_talking() or fresh or time.monotonic() - talk["barge_in"] < BOTH_HOLD_S
            now = "both" if u and a else "user" if u else "assistant" if a else ""
            if now != last:
                self.emit(Speakers(now))
                last = now
            if self._wake is not None:  # the follow-up window counts from when the answer stopped
                conv = self.conversation
                self._wake.tick(self._assistant_talking() or (conv is not None and not conv.idle()))
        if last:
            self.emit(Speakers(""))

    def _assistant_talking(self) -> bool:
        idle = getattr(self.player, "idle", None)  # audio.playback.Player: set once its queue has played out
        if isinstance(idle, threading.Event) and getattr(self.player, "available", False):
            return not idle.is_set()
        return self._talk["answer"]

    def _write_wavs(self, utterance: int | None = None) -> None:
        """Write the answer audio not yet written: ``utterance``'s (per answer), else all of it (one WAV per
        answer, or the session's WAV). Reported as :class:`AnswerSaved`; a failure as an :class:`Error`."""
        opts = self.options
        if opts.wav_dir is None or not self._audio:
            return
        if opts.wav_per_answer:
            utts = [utterance] if utterance is not None else sorted({u for u, _, _ in self._audio})
            for u in utts:
                parts = [(x, r) for v, x, r in self._audio if v == u]
                self._audio = [p for p in self._audio if p[0] != u]
                name = f"answer-{time.strftime('%Y%m%d-%H%M%S')}-{u}.wav"
                self._save(u, parts, Path(opts.wav_dir) / name)
            return
        parts = [(x, r) for _, x, r in self._audio]
        self._audio = []
        sid = getattr(self.journal, "id", time.strftime("%Y%m%d-%H%M%S"))
        self.result.wav = self._save(None, parts, Path(opts.wav_dir) / f"answer-{sid}.wav")

    def _save(self, utterance: int | None, parts: list[tuple[np.ndarray, int]], path: Path) -> Path | None:
        if not parts:
            return None
        sr = parts[0][1]
        audio = np.concatenate([x for x, r in parts if r == sr])
        try:
            write_wav(path, audio, sr)
        except OSError as e:
            self._report(Error("answer audio", f"cannot write {path}: {e}"))
            return None
        self.emit(AnswerSaved(utterance, str(path), len(audio) / sr))
        return path
