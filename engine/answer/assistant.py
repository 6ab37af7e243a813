"""Answer path (AR baseline): at end of utterance the LLM target answers with its chat template; the text is split
into sentences as it streams and each sentence is synthesised (Piper) on a TTS thread while the LLM continues.

Multi-turn: the conversation (system, user, assistant, ...) is kept; the KV cache of the earlier turns is reused
through :class:`engine.llm.generate.LMSession`. An answer can be interrupted (``cancel``) — barge-in stops it and the
partial answer is what enters the history.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from engine.config import LlmConfig, TtsConfig
from engine.llm.chat import ChatHistory
from engine.core.events import AnswerAudio, AnswerDelta, AnswerDone, AnswerSentence, Error, Status
from engine.llm.generate import GenStats, LMSession, TextStreamer, greedy_stream
from engine.answer.sentences import SentenceSplitter, clean_for_speech


def in_language(user_text: str, language: str) -> str:
    """The user's turn as the LLM sees it: ``user_text``, and, when the user spoke another language than English
    (``language``: ISO 639-1 code of the transcript, "" = not known), a line asking for the answer in that language
    (the system prompt asks for English). English text is unchanged, so speculation on partials and the final
    answer see the same prompt as before."""
    if not language or language == "en":
        return user_text
    from engine.translate.languages import language_name

    name = language_name(language)
    return f"{user_text}\n(The user spoke {name}: answer in {name}.)"


@dataclass
class AnswerMetrics:
    """Wall-clock marks of one answer (time.monotonic seconds) and counters."""

    start_wall: float = 0.0
    first_token_wall: float | None = None
    first_sentence_wall: float | None = None  # first complete sentence generated (TTFS mark)
    first_audio_wall: float | None = None  # first sentence's audio synthesised
    done_wall: float | None = None
    nfetfs: int | None = None  # LLM forward passes from end of input to the first sentence
    presynth_used: bool = False  # PredGen: the pre-synthesised first sentence was played as is
    accepted_tokens: int = 0  # PredGen: candidate tokens accepted by the final verification
    # PredGen: whether the final verification ran (False: the final transcript was the candidate's own prompt, so
    # the candidate is greedy's answer as it is: NFETFS 0 when its first sentence was pre-synthesised; None: not
    # PredGen)
    verified: bool | None = None
    speculative_updates: int = 0
    steps: list = field(default_factory=list)  # PredGen StepInfo of each update this turn
    sentences: int = 0
    # the answer's language when it has no voice (tts.voices): its text was shown, no audio made; "" = spoken
    no_voice: str = ""
    audio_s: float = 0.0
    tts_compute_s: float = 0.0
    gen: GenStats = field(default_factory=GenStats)


class Assistant:
    """Multi-turn spoken-answer generator.

    Args:
        lm: a :class:`engine.llm.llama_cpp_lm.LlamaCppLM` (needs ``chat_prompt``) or any CausalLM with a ``chat_prompt`` method.
        tts: an object with ``synthesize(text) -> float32 array`` and ``sample_rate``; None = text only. It speaks
            English and a language not known; ``voices`` gives the other languages theirs.
        system_prompt: the system message (``llm.system_prompt``).
        max_tokens: answer length cap, tokens.
        emit: callback receiving events.
        max_history_turns: at most this many earlier (user, assistant) pairs are kept (0 = no limit besides the
            context).
        first_clause_words: words a clause needs to be the first spoken piece (``tts.first_clause_words``; 0 = the
            whole first sentence).
        voices: the voices by language (:class:`engine.synthesis.voices.VoiceSet`, ``tts.voices``); None = ``tts``
            alone. An answer is spoken only by a voice of its language (:meth:`use_language`): without one its text
            is emitted as always and no audio is made; the first such turn of each language emits a ``Status`` that
            names the setting that adds a voice.

    The defaults of the settings are the configuration's (:mod:`engine.config`).
    """

    def __init__(self, lm, tts, system_prompt: str, max_tokens: int = 256,
                 emit: Callable[[object], None] = lambda e: None, max_history_turns: int = 0,
                 first_clause_words: int = TtsConfig.first_clause_words, voices=None):
        self.lm = lm
        self.first_clause_words = first_clause_words  # the first spoken piece may be a clause (engine.answer.sentences)
        self.session = LMSession(lm)
        self.tts = tts
        if voices is None:
            from engine.synthesis.voices import VoiceSet

            voices = VoiceSet(tts)
        self.voices = voices
        self.no_voice = ""  # the current turn's language when it has no voice
        self._told: set[str] = set()  # languages the user was told have no voice (once each per session)
        self.system_prompt = system_prompt
        self.max_tokens = max_tokens
        self.emit = emit
        self.chat = ChatHistory(lm, max_tokens=max_tokens, max_turns=max_history_turns)
        self.spoken: list[tuple[str, float]] = []  # the current answer's synthesised sentences: (text, seconds)

    @property
    def history(self) -> list[dict[str, str]]:
        """Every turn of the conversation, oldest first (``self.chat.kept`` is what the LM still sees)."""
        return self.chat.turns

    def warm(self) -> None:
        """Evaluate the system prompt now (at load), so the first answer only pays for the user's turn."""
        toks = self.chat.prefix_tokens(self.system_prompt)
        if toks:
            self.session.prefill(toks)

    def use_language(self, language: str) -> None:
        """Speak the next turns in ``language`` (ISO 639-1 of the user's turn; "" = not known: the English voice):
        :attr:`tts` becomes that language's voice, or None — the answer is shown and journalled, not spoken, and the
        first time per language a ``Status`` says why and which setting adds a voice. A voice that fails to load
        is one ``Error`` and the turn is not spoken."""
        try:
            voice = self.voices.voice(language)
        except Exception as e:  # a damaged voice file must not stop the answers
            voice = None
            if language not in self._told:
                self._told.add(language)
                self.emit(Error("tts", f"the {language} voice cannot be loaded ({e}); its answers are not spoken"))
        self.tts = voice
        self.no_voice = language if voice is None and self.voices.english is not None else ""
        if self.no_voice and language not in self._told:
            from engine.synthesis.voices import missing_hint

            self._told.add(language)
            self.emit(Status(missing_hint(language)))

    def messages(self, user_text: str) -> list[dict[str, str]]:
        """System prompt, the kept turns and ``user_text``: fits ``n_ctx`` with ``max_tokens`` to spare."""
        return self.chat.prompt(self.system_prompt, user_text)[0]

    def prompt_tokens(self, user_text: str) -> list[int]:
        return self.chat.prompt(self.system_prompt, user_text)[1]

    def answer(self, utterance: int, user_text: str, cancel: threading.Event | None = None) -> tuple[str, AnswerMetrics]:
        """Generate, split and synthesise the answer to ``user_text``; blocks until done or cancelled.

        Returns:
            (answer text, metrics). Events: AnswerDelta, AnswerSentence, AnswerAudio, AnswerDone.
        """
        cancel = cancel or threading.Event()
        m = AnswerMetrics(start_wall=time.monotonic(), no_voice=self.no_voice)
        self.spoken = []
        tts_q: queue.Queue = queue.Queue(maxsize=64)  # sentences waiting for TTS; never dropped (put waits)
        tts_thread = threading.Thread(target=self._tts_worker, args=(utterance, tts_q, m, cancel), daemon=True,
                                      name="tts")
        tts_thread.start()
        splitter = SentenceSplitter(first_clause_words=self.first_clause_words)
        streamer = TextStreamer(self.lm.detokenize)
        n_sent = 0
        prompt = self.prompt_tokens(user_text)
        try:
            for tok in greedy_stream(self.session, prompt, self.max_tokens, self.lm.eos_ids, cancel, m.gen):
                delta = streamer.push(tok)
                if not delta:
                    continue
                if m.first_token_wall is None:
                    m.first_token_wall = time.monotonic()
                self.emit(AnswerDelta(utterance, delta))
                for s in splitter.push(delta):
                    n_sent = self._sentence(utterance, n_sent, s, m, tts_q)
            if not cancel.is_set():
                for s in splitter.flush():
                    n_sent = self._sentence(utterance, n_sent, s, m, tts_q)
        except Exception as e:  # an LLM failure must not take the assistant down
            self.emit(Error("llm", f"answer generation failed: {type(e).__name__}: {e}"))
        tts_q.put(None)
        tts_thread.join()
        text = streamer.text.strip()
        m.done_wall = time.monotonic()
        self.chat.add(user_text, text)
        self.emit(AnswerDone(utterance, text, interrupted=cancel.is_set()))
        return text, m

    def _sentence(self, utterance: int, index: int, s: str, m: AnswerMetrics, tts_q: queue.Queue) -> int:
        if m.first_sentence_wall is None:
            m.first_sentence_wall = time.monotonic()
        m.sentences += 1
        self.emit(AnswerSentence(utterance, index, s))
        tts_q.put((index, s))
        return index + 1

    def _tts_worker(self, utterance: int, q: queue.Queue, m: AnswerMetrics, cancel: threading.Event) -> None:
        while True:
            item = q.get()
            if item is None:
                return
            if cancel.is_set() or self.tts is None:
                continue
            index, text = item
            spoken = clean_for_speech(text)
            if not spoken:
                continue
            t0 = time.perf_counter()
            try:
                audio = self.tts.synthesize(spoken)
            except Exception as e:
                self.emit(Error("tts", f"speech synthesis failed: {e}"))
                continue
            m.tts_compute_s += time.perf_counter() - t0
            if len(audio) == 0 or cancel.is_set():
                continue
            self._audio(utterance, index, text, audio, m)

    def _audio(self, utterance: int, index: int, text: str, audio, m: AnswerMetrics) -> None:
        """Emit one sentence's synthesised audio and account for it (metrics, :attr:`spoken`)."""
        if m.first_audio_wall is None:
            m.first_audio_wall = time.monotonic()
        seconds = len(audio) / self.tts.sample_rate
        m.audio_s += seconds
        self.spoken.append((text, seconds))
        self.emit(AnswerAudio(utterance, index, np.asarray(audio, np.float32), self.tts.sample_rate))

    def keep_heard(self, dropped_s: float) -> str | None:
        """Barge-in after (part of) the last answer was spoken: playback dropped ``dropped_s`` seconds of its
        synthesised audio, so the conversation history keeps only the sentences whose audio had started playing —
        what the user heard (a sentence cut short counts as heard). Call it once the answer is in the history.
        Returns the kept answer text (None: nothing to change — all of it was heard, or none of it: then the
        turn stays as generated)."""
        total = sum(d for _, d in self.spoken)
        heard_s = total - max(0.0, dropped_s)
        kept, t = [], 0.0
        for text, d in self.spoken:
            if t >= heard_s - 1e-3:
                break
            kept.append(text)
            t += d
        turns = self.chat.turns
        if not kept or len(kept) == len(self.spoken) or len(turns) < 2 or turns[-1]["role"] != "assistant":
            return None
        turns[-1] = {"role": "assistant", "content": " ".join(s.strip() for s in kept)}
        return turns[-1]["content"]


class PredGenAssistant(Assistant):
    """:class:`Assistant` that speculates on partial transcripts with PredGen (engine.answer.predictive).

    ``speculate(partial)`` runs one bounded update (Algorithm 1 lines 9–14); ``answer(final)`` runs the final
    verification and plays the pre-synthesised first sentence when it was accepted (lines 17–26), or, when the final
    transcript is the text the candidate was generated from (the final is the last partial's hypothesis), plays it at
    once without a verification (NFETFS 0; :meth:`engine.answer.predictive.PredGen.finish`).
    """

    def __init__(self, lm, tts, system_prompt: str, max_tokens: int = 256,
                 emit: Callable[[object], None] = lambda e: None, verifier: str = "greedy", top_k: int = 3,
                 beta: float = 0.2, tokens_per_update: int = 8, judge_lm=None,
                 speculation_threads: int = LlmConfig.predgen_speculation_threads,
                 first_clause_words: int = TtsConfig.first_clause_words, voices=None):
        super().__init__(lm, tts, system_prompt, max_tokens, emit, first_clause_words=first_clause_words,
                         voices=voices)
        from engine.answer.predictive import PredGen

        self.pg = PredGen(lm, tts, system_prompt, verifier=verifier, top_k=top_k, beta=beta,
                          tokens_per_update=tokens_per_update, max_tokens=max_tokens, judge_lm=judge_lm,
                          history=None, speculation_threads=speculation_threads,
                          first_clause_words=first_clause_words)
        self.pg.chat = self.chat  # one conversation
        self.chat.max_tokens = max_tokens
        self.session = self.pg.session
        self.updates_this_turn = 0

    def warm(self) -> None:
        self.pg.warm()

    def use_language(self, language: str) -> None:
        """:meth:`Assistant.use_language`, for PredGen's pre-synthesis too: a partial in a language without a voice
        is speculated on without synthesising its first sentence."""
        super().use_language(language)
        self.pg.tts = self.tts

    def speculate(self, utterance: int, partial: str, cancel: threading.Event | None = None,
                  on_eot: Callable[[float], None] | None = None):
        """One speculative update on a partial transcript; returns the :class:`engine.answer.predictive.StepInfo`.
        ``on_eot(p)``: the LLM's end-of-turn probability of ``partial``, as soon as its verification pass read it."""
        self.updates_this_turn += 1
        return self.pg.update(partial, cancel, on_eot=on_eot)

    def answer(self, utterance: int, user_text: str, cancel: threading.Event | None = None) -> tuple[str, AnswerMetrics]:
        cancel = cancel or threading.Event()
        m = AnswerMetrics(start_wall=time.monotonic(), speculative_updates=self.updates_this_turn,
                          steps=list(self.pg.steps), no_voice=self.no_voice)
        self.updates_this_turn = 0
        self.spoken = []
        tts_q: queue.Queue = queue.Queue(maxsize=64)  # sentences waiting for TTS; never dropped (put waits)
        tts_thread = threading.Thread(target=self._tts_worker, args=(utterance, tts_q, m, cancel), daemon=True,
                                      name="tts")
        tts_thread.start()

        def on_sentence(index: int, text: str, audio, presynth: bool) -> None:
            if not text:
                return
            if m.first_token_wall is None:
                m.first_token_wall = time.monotonic()
            self.emit(AnswerDelta(utterance, (" " if index else "") + text))
            if index == 0 and audio is not None and len(audio) and not cancel.is_set():
                m.first_sentence_wall = time.monotonic()
                m.sentences += 1
                self.emit(AnswerSentence(utterance, 0, text))
                self._audio(utterance, 0, text, audio, m)
            else:
                self._sentence(utterance, index, text, m, tts_q)

        try:
            n_prompt = len(self.pg.prompt_tokens(user_text))
            info = self.pg.finish(user_text, on_sentence, cancel)
            text = info.answer
            m.nfetfs, m.presynth_used, m.accepted_tokens = info.nfetfs, info.presynth_used, info.accepted
            m.verified = info.verified
            m.gen.new_tokens, m.gen.decode_s = info.gen_tokens, info.decode_s
            m.gen.prompt_tokens = n_prompt
        except Exception as e:
            self.emit(Error("llm", f"answer generation failed: {type(e).__name__}: {e}"))
            text = ""
        tts_q.put(None)
        tts_thread.join()
        m.done_wall = time.monotonic()
        self.emit(AnswerDone(utterance, text, interrupted=cancel.is_set()))
        return text, m


class Conversation:
    """The answer side of the assistant as one worker thread that owns the LLM.

    Feed it transcript events: ``on_partial`` (speculation, latest-only; a newer partial cancels stale work),
    ``on_final`` (answer; runs after any in-flight speculation is cancelled), ``on_speech_start`` (barge-in: stop
    the answer being generated or spoken). Results arrive through the assistant's ``emit`` callback. The CLI and
    the GUI both drive the assistant through this class. ``language`` (of ``on_partial``/``on_final``: the
    transcript event's ISO 639-1 code) asks for the answer in the language the user spoke (:func:`in_language`)
    and has it spoken by that language's voice, or by none (:meth:`Assistant.use_language`).
    A revised transcript (``RevisedTranscript``) is not answered again.
    """

    def __init__(self, assistant: Assistant, on_metrics: Callable[[int, str, AnswerMetrics], None] | None = None,
                 on_end_of_turn: Callable[[int, float, float], None] | None = None):
        self.a = assistant
        self.on_metrics = on_metrics
        # (utterance, audio time the partial covers in s, p): the LLM's end-of-turn probability of a partial
        self.on_end_of_turn = on_end_of_turn
        self._cv = threading.Condition()
        self._partial: tuple[int, str, str, float | None] | None = None  # (utterance, text, language, t_audio)
        self._finals: list[tuple[int, str, str]] = []
        self._cancel = threading.Event()
        self._busy: str = ""
        self._closed = False
        self._heard = False  # the current answer's audio reached the user
        self.pending_text = ""
        self._current: tuple[int, str, str] | None = None  # the (utterance, text, language) being answered
        self._cut: float | None = None  # seconds of the answer's audio a barge-in dropped, applied at its end
        self._thread = threading.Thread(target=self._run, name="answer", daemon=True)
        self._thread.start()

    @property
    def speculative(self) -> bool:
        return isinstance(self.a, PredGenAssistant)

    def on_partial(self, utterance: int, text: str, language: str = "", t_audio: float | None = None) -> None:
        """Speculate on a partial transcript (``t_audio``: the audio time it covers, seconds, for
        ``on_end_of_turn``)."""
        if not self.speculative or not text.strip():
            return
        with self._cv:
            self._partial = (utterance, (self.pending_text + text).strip(), language, t_audio)
            if self._busy == "speculate":
                self._cancel.set()
            self._cv.notify()

    def on_final(self, utterance: int, text: str, language: str = "") -> None:
        with self._cv:
            text = (self.pending_text + text).strip()
            self.pending_text = ""
            self._partial = None
            if text:
                self._finals.append((utterance, text, language))
            if self._busy == "speculate":
                self._cancel.set()
            self._cv.notify()

    def mark_heard(self) -> None:
        self._heard = True

    def on_speech_start(self) -> bool:
        """Barge-in, or the user going on after a pause. The answer being generated or spoken is stopped; if none
        of its audio was heard yet, its text and any final transcripts still queued are held and prefixed to the
        next final transcript (the user was still talking: one turn, answered once, not over them). Returns True
        if an answer was interrupted."""
        with self._cv:
            held = [t for _, t, _ in self._finals]  # queued, not answered yet: the user speaks again first
            self._finals.clear()
            interrupted = self._busy == "answer"
            if interrupted:
                self._cancel.set()
                if not self._heard and self._current is not None:
                    held.insert(0, self._current[1])  # nothing heard yet: the user was still talking
            if held:
                self.pending_text = " ".join(held + [self.pending_text.strip()]).strip() + " "
            return interrupted

    def on_playback_cut(self, dropped_s: float) -> None:
        """Playback was stopped by a barge-in with ``dropped_s`` seconds of answer audio never played: the history
        keeps what the user heard (:meth:`Assistant.keep_heard`), now or when the answer in flight ends. A cut that
        dropped nothing (≤ 0 s) changes nothing."""
        if not dropped_s > 0:
            return
        with self._cv:
            if self._busy == "answer":
                self._cut = dropped_s
                return
        try:
            self.a.keep_heard(dropped_s)
        except Exception as e:  # the history is a convenience: never let it take the session down
            self.a.emit(Error("llm", f"history update failed: {type(e).__name__}: {e}"))

    def idle(self) -> bool:
        with self._cv:
            return not self._busy and not self._finals and self._partial is None

    def wait_idle(self, timeout: float | None = None) -> bool:
        t_end = None if timeout is None else time.monotonic() + timeout
        while not self.idle():
            if t_end is not None and time.monotonic() > t_end:
                return False
            time.sleep(0.02)
        return True

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cancel.set()
            self._cv.notify()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        # The LLM's compute threads are created by this thread and inherit its priority: speculating on partials
        # must never slow the ASR down, so the answer side yields the CPU to it.
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        except (AttributeError, OSError):
            pass
        while True:
            with self._cv:
                while not self._closed and not self._finals and self._partial is None:
                    self._cv.wait()
                if self._closed:
                    return
                self._cancel = threading.Event()
                if self._finals:
                    job, self._busy = self._finals.pop(0), "answer"
                    self._current = job
                    self._heard = False
                else:
                    job, self._busy = self._partial, "speculate"
                    self._partial = None
                cancel = self._cancel
            try:
                use_language = getattr(self.a, "use_language", None)
                if use_language is not None:  # the voice of the turn's language, or none (tts.voices)
                    use_language(job[2])
                if self._busy == "answer":
                    _, m = self.a.answer(job[0], in_language(job[1], job[2]), cancel)
                    with self._cv:
                        cut, self._cut = self._cut, None
                    if cut is not None:
                        self.a.keep_heard(cut)
                    if self.on_metrics:
                        self.on_metrics(job[0], job[1], m)
                else:
                    hook = self.on_end_of_turn
                    on_eot = (None if hook is None or job[3] is None else
                              lambda p, u=job[0], t=job[3]: hook(u, t, p))
                    self.a.speculate(job[0], in_language(job[1], job[2]), cancel,
                                     **({"on_eot": on_eot} if on_eot is not None else {}))
            except Exception as e:
                self.a.emit(Error("llm", f"{self._busy} failed: {type(e).__name__}: {e}"))
            finally:
                with self._cv:
                    self._busy = ""
                    self._current = None
