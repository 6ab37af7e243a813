"""The ASR driver of one stream: capture → VAD → streaming ASR → events (:class:`StreamingTranscriber`).

Threads:
    * capture: iterates the :class:`audio.sources.AudioSource`, runs the VAD on each block and enqueues blocks and
      speech boundaries (an :class:`engine.pipeline.AudioQueue`). It does nothing slow, so the microphone is never
      blocked by the engines.
    * ASR (:meth:`StreamingTranscriber.run`): drains everything queued, then re-decodes the current utterance if at
      least ``asr.min_chunk_s`` of new audio arrived (computation-aware, as whisper_streaming); at end of speech it
      finishes the utterance and emits :class:`engine.core.events.FinalTranscript`. At a VAD pause (a possible end
      of speech) it decodes the utterance up to the pause with the final's settings, and when the VAD confirms the
      end there that decode is the final text, not decoded again (``TranscriberStats.final_reused``). When it
      falls behind a real-time source it decodes everything queued in one pass and emits
      :class:`engine.pipeline.Backlog` events.
    * revise (``asr.revise_max_s`` > 0, a real-time source): the second pass
      (:class:`engine.asr.second_pass_worker.SecondPassWorker`); a file read as fast as it is consumed runs it on the
      ASR thread instead, at once (deterministic).
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from audio.io import SAMPLE_RATE
from audio.sources import AudioBlock, AudioSource
from audio.vad import StreamingVAD
from engine.asr.backend import ASRBackend
from engine.asr.language_id import SessionLanguage
from engine.asr.offline_window_pass import OfflineWindowPass
from engine.asr.online_processor import OnlineASRProcessor
from engine.asr.second_pass import (
    PassJob,
    Revision,
    RevisionPass,
    SecondPass,
    SpokenUtterance,
)
from engine.asr.second_pass_worker import SecondPassWorker
from engine.asr.words import join_words
from engine.config import AsrConfig
from engine.core.cpu import ASR
from engine.core.events import (
    CommittedWords,
    Error,
    FinalTranscript,
    PartialTranscript,
    RevisedTranscript,
    SpeechEnded,
    SpeechStarted,
    TurnDecision,
)
from engine.pipeline import AudioQueue, Backlog, release_memory


@dataclass
class UtteranceRecord:
    """Timing of one utterance (``*_wall`` are time.monotonic seconds)."""

    index: int
    t_start: float
    t_end: float | None = None
    eos_wall: float | None = None  # when the audio at the end of speech was available
    vad_end_wall: float | None = None  # when the VAD decided the utterance ended
    final_wall: float | None = None
    text: str = ""
    updates: int = 0
    asr_compute_s: float = 0.0
    first_partial_wall: float | None = None
    language: str = ""  # ISO 639-1 code of the final decode ("" when the backend does not say)
    revised_text: str | None = None  # the second pass's text, when it changed the final's
    # the final text is the latest hypothesis (decoded with the final's settings up to the end of speech, e.g. at
    # the VAD's pause): no decode at the end of speech
    final_reused: bool = False


@dataclass
class TranscriberStats:
    """Totals of one stream; ``max_backlog_s``: the longest ASR delay behind a real-time source (s);
    ``dropped_audio_s``: audio the source could not keep (s; only a microphone more than its queue behind)."""

    audio_s: float = 0.0
    asr_compute_s: float = 0.0
    updates: int = 0
    updates_abandoned: int = 0  # streaming updates stopped after their encoder pass in a silence (not in updates)
    utterances: list[UtteranceRecord] = field(default_factory=list)
    started_wall: float = 0.0
    ended_wall: float = 0.0
    max_backlog_s: float = 0.0
    dropped_audio_s: float = 0.0
    revisions: int = 0  # RevisedTranscript events
    revise_compute_s: float = 0.0  # second-pass decodes (counted in asr_compute_s too), seconds
    final_reused: int = 0  # finals that are the latest hypothesis, not decoded again (UtteranceRecord.final_reused)

    @property
    def rtf(self) -> float:
        """ASR compute seconds per second of audio."""
        return self.asr_compute_s / self.audio_s if self.audio_s else 0.0


class StreamingTranscriber:
    """Capture + VAD + LocalAgreement-2 streaming ASR over one source.

    Args:
        source: audio source (file, microphone).
        backend: ASR backend (plain AR or a speculative decoder).
        vad: a :class:`audio.vad.StreamingVAD`, or None to treat the whole stream as one utterance.
        emit: receives SpeechStarted, PartialTranscript, CommittedWords, SpeechEnded, FinalTranscript,
            RevisedTranscript, TurnDecision, Backlog, Error.
        asr: the ``asr`` settings (:class:`engine.config.AsrConfig`, whose help says what each does): the update
            policy (``min_chunk_s``, ``hold_at_silence``, ``yield_to_pause``: an update waits, and a running one
            is abandoned after its encoder pass, while the VAD hears a silence inside the utterance, on a real-time
            source), the utterance's buffer (``pre_roll_s``, ``context_gap_s``; ``buffer_trim_s``; the rest of
            :class:`engine.asr.online_processor.OnlineASRProcessor`'s settings) and the second pass
            (``revise_max_s`` > 0: a :class:`engine.asr.second_pass.RevisionPass` of ``revise_mode``, run between
            utterances once the process uses less than ``revise_idle_cores``; a source that is not real time runs
            it on the ASR thread at once).
        session_language: ``asr.language = "auto"``: the session's language identification with hysteresis
            (:class:`engine.asr.language_id.SessionLanguage`); None = the backend's fixed language.
        revise_backend: the second pass's decoder, or a function that builds it (called on the thread that runs
            the second pass, so a model's worker threads inherit its priority); default ``backend``. The runtime
            gives greedy AR on the padded 30 s window, as an offline decode, on a model instance of its own
            (:meth:`engine.runtime.Runtime.revise_backend`).
        max_utterance_s: speech without a pause is closed at a word boundary after this long (seconds), so the
            answer and caption paths are not starved.
        max_backlog_s: capacity of the capture → ASR queue, seconds of audio.
        lag_warn_s: ASR delay behind a real-time source that emits :class:`engine.pipeline.Backlog`, seconds.
        prompt_hint: called on the ASR thread as an utterance opens: text put at the end of its decoding prompt
            (Whisper's previous text, after the earlier utterances'), e.g. the wake phrase while a hands-free
            session listens for it, so Whisper spells a made-up name as the user typed it; "" = none.

    Raises:
        ValueError: ``asr.revise_mode`` is neither "offline" nor "chains".
    """

    def __init__(self, source: AudioSource, backend: ASRBackend, vad: StreamingVAD | None,
                 emit: Callable[[object], None], asr: AsrConfig, *, session_language: SessionLanguage | None = None,
                 revise_backend: ASRBackend | Callable[[], ASRBackend] | None = None, max_utterance_s: float = 60.0,
                 max_backlog_s: float = 600.0, lag_warn_s: float = 3.0,
                 prompt_hint: Callable[[], str] | None = None):
        self.source = source
        self.prompt_hint = prompt_hint
        self.asr = asr
        self.session_language = session_language
        if asr.revise_mode not in ("offline", "chains"):
            raise ValueError(f"revise_mode must be 'offline' or 'chains', not {asr.revise_mode!r}")
        self.second: RevisionPass | None = None if asr.revise_max_s <= 0 else (
            OfflineWindowPass(None) if asr.revise_mode == "offline" else SecondPass(None, asr))
        self._stop = threading.Event()
        self._second_worker = None if self.second is None else SecondPassWorker(
            self.second, revise_backend or backend, source, asr.revise_idle_cores, emit, self._revised, self._stop)
        self.texts: dict[int, str] = {}  # each utterance's text, the second pass's revisions applied
        self.backend = backend
        self.vad = vad
        self.emit = emit
        self.max_utterance_s = max_utterance_s
        self._last_words: list = []
        self.q = AudioQueue(max_backlog_s)
        self.lag_warn_s = lag_warn_s
        self.realtime = bool(getattr(source, "realtime", True))  # a file fed "as fast as consumed" never lags
        self.stats = TranscriberStats()
        self.transcript: list[str] = []  # final text of each utterance, in order (never lost)
        self.capture_error: Exception | None = None

    # -- capture thread ---------------------------------------------------------------------------------------
    def _put_audio(self, block: AudioBlock) -> None:
        seconds = len(block.samples) / SAMPLE_RATE
        while not self.q.put(("audio", block), seconds, timeout=0.1):
            if self._stop.is_set():
                return

    def _capture(self) -> None:
        dropped = 0.0
        try:
            for block in self.source:
                if self._stop.is_set():
                    break
                self._put_audio(block)
                lost = float(getattr(self.source, "dropped_s", 0.0))
                if lost > dropped:
                    dropped = self.stats.dropped_audio_s = lost
                    self.q.put(("lost", f"{lost:.1f} s of microphone audio could not be kept (speech recognition "
                                        "is too far behind)"))
                events = self.vad(block.samples) if self.vad is not None else []
                for ev in events:
                    self.q.put((ev.kind, ev.t, block, getattr(ev, "p", None), getattr(ev, "speech_end", None)))
            if self.vad is not None:
                for ev in self.vad.flush():
                    self.q.put((ev.kind, ev.t, None, None, getattr(ev, "speech_end", None)))
        except Exception as e:  # the device vanished, a file broke mid-way: report, finish what we have
            self.capture_error = e
            self.q.put(("error", e))
        self.q.put(("eof",))

    def stop(self) -> None:
        self._stop.set()
        self.source.close()

    # -- ASR loop ---------------------------------------------------------------------------------------------
    def run(self) -> TranscriberStats:
        """Process the whole source (blocks until it ends or :meth:`stop`). Returns the stats."""
        self.stats.started_wall = time.monotonic()
        cap = threading.Thread(target=self._capture, name="capture", daemon=True)
        cap.start()
        ring: list[AudioBlock] = []  # recent audio for the pre-roll before a VAD start
        proc: OnlineASRProcessor | None = None
        rec: UtteranceRecord | None = None
        pending_new = 0.0
        utt_index = -1
        last_wall = time.monotonic()
        last_block: AudioBlock | None = None
        done = False
        pause_at: float | None = None
        if self.vad is None:
            utt_index, proc, rec = self._start(0, 0.0, [])
        lagging = False
        if self._second_worker is not None and self.realtime:
            self._second_worker.start()
        while not done:
            items = [self.q.get()]
            while True:
                try:
                    items.append(self.q.get_nowait())
                except queue.Empty:
                    break
            if self.realtime:
                oldest = next((it[1].wall for it in items if it[0] == "audio"), None)
                if oldest is not None:
                    lag = time.monotonic() - oldest
                    self.stats.max_backlog_s = max(self.stats.max_backlog_s, lag)
                    if not lagging and lag > self.lag_warn_s:
                        lagging = True
                        self.emit(Backlog(lag, caught_up=False))
                    elif lagging and lag < self.lag_warn_s / 2:
                        lagging = False
                        self.emit(Backlog(lag, caught_up=True))
            for item in items:
                kind = item[0]
                if kind == "audio":
                    block: AudioBlock = item[1]
                    last_wall, last_block = block.wall, block
                    self.stats.audio_s = block.t_end
                    ring.append(block)
                    while ring and ring[-1].t_end - ring[0].t_start > self.asr.buffer_trim_s + 3.0:
                        ring.pop(0)
                    if self._second_worker is not None:
                        self._second_worker.keep(block, rec.t_start if rec is not None else None)
                    if proc is not None:
                        proc.insert_audio_chunk(block.samples)
                        pending_new += len(block.samples) / SAMPLE_RATE
                elif kind == "start" and proc is None:
                    if not self.realtime and self.second is not None:
                        while self.second.due(item[1]):  # a chain the silence before this start completed
                            self._second_worker.run_once()
                    utt_index, proc, rec = self._start(utt_index + 1, item[1], ring)
                    pending_new = proc.audio_end - rec.t_start
                elif kind == "turn" and rec is not None and len(item) > 3 and item[3] is not None:
                    self.emit(TurnDecision(rec.index, item[1], float(item[3])))
                elif kind == "pause" and proc is not None:
                    pause_at = item[1]  # a possible end of speech: decode up to it now, the final may be ready
                elif kind == "end" and proc is not None:
                    blk = item[2]
                    t_end = item[1]
                    rec.t_end = t_end
                    rec.vad_end_wall = time.monotonic() if blk is None else blk.wall
                    # the end of speech is when its audio was available, also when the end of the stream closed
                    # the utterance (the VAD's flush, no block): from the last block's clock, not the stream's end
                    # and at the last speech sample, not the pad after it (``t_end``, what the ASR hears)
                    spoken = t_end if item[4] is None else item[4]
                    ref = blk if blk is not None else last_block
                    rec.eos_wall = (rec.vad_end_wall if ref is None
                                    else min(rec.vad_end_wall, ref.wall - max(0.0, ref.t_end - spoken)))
                    self.emit(SpeechEnded(rec.index, t_end, rec.eos_wall, rec.vad_end_wall))
                    self._finish(proc, rec, t_end)
                    proc, rec, pending_new, pause_at = None, None, 0.0, None
                    if not self.realtime and self.second is not None and self.second.ready is not None:
                        self._second_worker.run_once()  # a file read as fast as consumed: now, before the next one
                elif kind == "error":
                    self.emit(Error("audio", f"audio input failed: {item[1]}"))
                elif kind == "lost":
                    self.emit(Error("audio", item[1]))
                elif kind == "eof":
                    done = True
            if done and proc is not None:
                rec.t_end = proc.audio_end
                rec.eos_wall = rec.vad_end_wall = last_wall
                self.emit(SpeechEnded(rec.index, rec.t_end, rec.eos_wall, rec.vad_end_wall))
                self._finish(proc, rec)
                proc = None
            if done and self.second is not None and not self.realtime and not self._stop.is_set():
                while self.second.due(None):  # the end of the stream completes the last chain
                    self._second_worker.run_once()
            if proc is not None and pause_at is not None:
                # the final's decode up to the pause, unless the latest hypothesis is already that (a streaming
                # update that heard the pause is not when the final decodes with other settings, e.g. beam search):
                # when the VAD confirms the end there, the final is this decode, with no decode of the same audio
                if (not proc.final_covers(pause_at) and proc.audio_end >= pause_at - 1e-3
                        and not proc.mostly_doubtful):  # a doubtful utterance keeps no new words at its end
                    pending_new = 0.0
                    self._update(proc, rec, until=pause_at)
                pause_at = None
            if proc is not None and pending_new >= self.asr.min_chunk_s and not self._in_silence(proc.audio_end):
                pending_new = 0.0
                if not self._update(proc, rec):
                    pending_new = self.asr.min_chunk_s  # abandoned in a silence: due again once speech resumes
                if proc.audio_end - rec.t_start > self.max_utterance_s:
                    # a run-on "utterance" (no pause): close it so the answer/caption paths are not starved, at a
                    # word boundary; its audio after the cut (from its buffer) starts the next utterance
                    cut = proc.run_on_cut()
                    rest = proc.audio[max(0, int(round((cut - proc.buffer_time_offset) * SAMPLE_RATE))):].copy()
                    rec.t_end = cut
                    rec.eos_wall = rec.vad_end_wall = time.monotonic()
                    self.emit(SpeechEnded(rec.index, rec.t_end, rec.eos_wall, rec.vad_end_wall))
                    self._finish(proc, rec, cut, cut=True)
                    utt_index, proc, rec = self._start(utt_index + 1, cut, [], carry=rest)
                    pending_new = proc.audio_end - cut
        cap.join(timeout=1.0)
        if self._second_worker is not None:
            self._second_worker.finish()  # after stop() it runs nothing more; at the end of a source: what is due
        self.stats.ended_wall = time.monotonic()
        return self.stats

    def _in_silence(self, audio_end: float | None = None) -> bool:
        """``hold_at_silence`` on a real-time source: whether an update due now waits. It does while the audio this
        thread has (up to ``audio_end``, seconds) ends in a silence inside the utterance that the VAD (level with or
        ahead of this thread) still hears, and with ``yield_to_pause`` while the VAD hears any silence inside the
        utterance (this thread's audio may end just before it: the thread lags the capture while it decodes). An
        update decoded now would be superseded within the VAD's pause (0.2 s) by the pause's decode up to the end
        of speech, which would wait for it, and so would the final (an update of several seconds of audio takes
        0.3 to 1 s on a small CPU). Resumed speech, or the pause itself, lets the decode run. ``audio_end`` None:
        any silence (the abandonment check of a running update, :meth:`_update`). A source that is not real time
        is read ahead of this thread, so the VAD's state says nothing about its audio: never."""
        if not (self.asr.hold_at_silence and self.realtime and self.vad is not None):
            return False
        since = self.vad.silence_since
        return since is not None and (self.asr.yield_to_pause or audio_end is None or since <= audio_end + 1e-3)

    def _start(self, index: int, t_start: float, ring: list[AudioBlock], carry: np.ndarray | None = None):
        """Open utterance ``index`` at the audio time ``t_start`` (seconds) with its pre-roll (or acoustic context)
        from ``ring``; ``carry``: the rest of a run-on utterance cut at ``t_start`` (its audio from there on, float32
        16 kHz), which starts this one instead."""
        # Acoustic context: when the previous utterance ended moments ago, its audio stays at the head of the
        # buffer (its words count as committed), so Whisper decodes the new words in their long-form context. Not
        # under asr.language = "auto": the language of the window would be the previous utterance's, and a switch
        # of language after a short pause would be decoded in the old one.
        prev = self.stats.utterances[-1] if self.stats.utterances else None
        ctx_words: list = []
        t_buf = t_start
        if (carry is None and prev is not None and prev.t_end is not None and self.session_language is None
                and t_start - prev.t_end < self.asr.context_gap_s
                and t_start - prev.t_start < self.asr.buffer_trim_s and ring and ring[0].t_start <= prev.t_start):
            t_buf = prev.t_start
            ctx_words = list(self._last_words)
        elif self.asr.pre_roll_s > 0 and ring:
            # soft onsets start before the VAD is sure: decode a little earlier, never into the previous utterance
            floor = max(ring[0].t_start, prev.t_end if prev is not None and prev.t_end is not None else 0.0)
            t_buf = max(floor, t_start - self.asr.pre_roll_s)
        earlier = [t for t in self.texts.values() if t]  # the second pass's revisions are the better context
        earlier = earlier[:-1] if ctx_words else earlier
        context = " ".join(earlier)[-200:]
        hint = self.prompt_hint().strip() if self.prompt_hint is not None else ""
        if hint:  # kept whole, after the earlier text: the prompt's last words weigh most
            context = (context[-max(0, 199 - len(hint)):] + " " + hint).strip()[-200:]
        proc = OnlineASRProcessor(self.backend, self.asr, context=context + " " if context else "", t_offset=t_buf,
                                  context_words=ctx_words, committed_until=ctx_words[-1].end if ctx_words else None,
                                  speech_start=t_start, session_language=self.session_language)
        t_start_utt, t_start = t_start, t_buf
        if carry is not None:
            proc.insert_audio_chunk(carry)
        for b in ring:  # pre-roll: audio from t_start on, already captured
            if b.t_end <= t_start:
                continue
            skip = max(0, int(round((t_start - b.t_start) * SAMPLE_RATE)))
            proc.insert_audio_chunk(b.samples[skip:])
        rec = UtteranceRecord(index=index, t_start=t_start_utt)
        self.stats.utterances.append(rec)
        if self._second_worker is not None:
            self._second_worker.utterance_started()
        self.emit(SpeechStarted(index, t_start_utt))
        return index, proc, rec

    def _update(self, proc: OnlineASRProcessor, rec: UtteranceRecord, until: float | None = None) -> bool:
        """Re-decode ``proc``'s buffer (up to ``until``, audio time in seconds: the VAD's pause) and emit what it
        gives. A streaming update (``until`` None) under ``yield_to_pause`` is abandoned after its encoder pass
        when the VAD hears a silence by then (:meth:`_in_silence`). Returns False when it was abandoned."""
        n_before = len(proc.updates)
        abandon = self._in_silence if until is None and self.asr.yield_to_pause else None
        try:
            with ASR.decoding():  # speculation waits for it (engine.core.cpu)
                new, tentative = proc.process_iter(until, abandon=abandon)
        except Exception as e:
            self.emit(Error("asr", f"transcription update failed: {type(e).__name__}: {e}"))
            return True
        done = proc.updates[n_before:]  # the update's decode, and the decode of a finished piece if one was due
        if not done:
            return True
        compute_s = sum(u.compute_s for u in done)
        rec.asr_compute_s += compute_s
        self.stats.asr_compute_s += compute_s
        if done[-1].stats.get("abandoned"):  # its encoder pass is compute spent; no text came of it
            self.stats.updates_abandoned += 1
            return False
        rec.updates += 1
        self.stats.updates += 1
        if new:
            self.emit(CommittedWords(rec.index, tuple(new)))
        if rec.first_partial_wall is None:
            rec.first_partial_wall = time.monotonic()
        self.emit(PartialTranscript(rec.index, join_words(proc.committed) + " ", join_words(tentative),
                                    proc.audio_end, compute_s, hypothesis=proc.hypothesis, language=proc.language))
        return True

    def _finish(self, proc: OnlineASRProcessor, rec: UtteranceRecord, speech_end: float | None = None,
                cut: bool = False) -> None:
        n_before = len(proc.updates)
        try:
            with ASR.decoding():
                proc.finish(speech_end, cut=cut)
        except Exception as e:
            self.emit(Error("asr", f"final transcription failed: {type(e).__name__}: {e}"))
        for u in proc.updates[n_before:]:
            rec.asr_compute_s += u.compute_s
            self.stats.asr_compute_s += u.compute_s
            self.stats.updates += 1
        rec.final_reused = proc.final_reused
        self.stats.final_reused += proc.final_reused
        rec.text = proc.text
        rec.language = proc.language
        self._last_words = list(proc.committed)
        release_memory()
        rec.final_wall = time.monotonic()
        if rec.text:
            self.transcript.append(rec.text)
        self.texts[rec.index] = rec.text
        self.emit(FinalTranscript(rec.index, rec.text, tuple(proc.committed), rec.t_start, rec.t_end or proc.audio_end,
                                  rec.final_wall, language=proc.language))
        if self.session_language is not None:
            self.session_language.end_utterance(proc.language or None, proc.language_probs,
                                                proc.language_whisper_probs)
        if self._second_worker is not None:
            self._second_worker.utterance_ended(SpokenUtterance(rec.index, rec.t_start, rec.t_end or proc.audio_end,
                                                                list(proc.committed), proc.language),
                                                whole=proc.decoded_whole)

    # -- second pass ------------------------------------------------------------------------------------------

    # -- second pass ------------------------------------------------------------------------------------------
    def _revised(self, job: PassJob, rev: Revision | None) -> None:
        """Account for a second-pass decode and emit its :class:`RevisedTranscript` if a text changed (called from
        the thread that decoded it)."""
        self.stats.revise_compute_s += job.compute_s
        self.stats.asr_compute_s += job.compute_s
        if rev is None:
            return
        by_index = {u.index: u for u in self.stats.utterances}
        for index, text, _ in rev.changed:
            self.texts[index] = text
            if index in by_index:
                by_index[index].revised_text = text
        self.stats.revisions += 1
        self.emit(RevisedTranscript(tuple(i for i, _, _ in rev.changed), tuple(t for _, t, _ in rev.changed),
                                    tuple(w for _, _, ws in rev.changed for w in ws), rev.window[0], rev.window[1],
                                    rev.language))
