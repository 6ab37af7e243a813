"""Answer path (AR baseline): at end of utterance the LLM target answers with its chat template; the text is split
into sentences as it streams and each sentence is synthesised (Piper) on a TTS thread while the LLM continues.

Multi-turn: the conversation (system, user, assistant, ...) is kept; the KV cache of the earlier turns is reused
through :class:`engine.generate.LMSession`. An answer can be interrupted (``cancel``) — barge-in stops it and the
partial answer is what enters the history.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .events import AnswerAudio, AnswerDelta, AnswerDone, AnswerSentence, Error
from .generate import GenStats, LMSession, TextStreamer, greedy_stream
from .text import SentenceSplitter, clean_for_speech


@dataclass
class AnswerMetrics:
    """Wall-clock marks of one answer (time.monotonic seconds) and counters."""

    start_wall: float = 0.0
    first_token_wall: float | None = None
    first_sentence_wall: float | None = None  # first complete sentence generated (TTFS mark)
    first_audio_wall: float | None = None  # first sentence's audio synthesised
    done_wall: float | None = None
    sentences: int = 0
    audio_s: float = 0.0
    tts_compute_s: float = 0.0
    gen: GenStats = field(default_factory=GenStats)


class Assistant:
    """Multi-turn spoken-answer generator.

    Args:
        lm: a :class:`engine.lm.LlamaCppLM` (needs ``chat_prompt``) or any CausalLM with a ``chat_prompt`` method.
        tts: an object with ``synthesize(text) -> float32 array`` and ``sample_rate``; None = text only.
        system_prompt: the system message.
        max_tokens: answer length cap, tokens.
        emit: callback receiving events.
    """

    def __init__(self, lm, tts, system_prompt: str, max_tokens: int = 256,
                 emit: Callable[[object], None] = lambda e: None, max_history_turns: int = 8):
        self.lm = lm
        self.session = LMSession(lm)
        self.tts = tts
        self.system_prompt = system_prompt
        self.max_tokens = max_tokens
        self.emit = emit
        self.history: list[dict[str, str]] = []
        self.max_history_turns = max_history_turns

    def warm(self) -> None:
        """Evaluate the system prompt now (at load), so the first answer only pays for the user's turn."""
        sys_only = self.lm.chat_prompt([{"role": "system", "content": self.system_prompt}], add_generation_prompt=False)
        toks = self.lm.tokenize(sys_only, special=True)
        if toks:
            self.session.prefill(toks)

    def messages(self, user_text: str) -> list[dict[str, str]]:
        hist = self.history[-2 * self.max_history_turns :]
        return [{"role": "system", "content": self.system_prompt}, *hist, {"role": "user", "content": user_text}]

    def prompt_tokens(self, user_text: str) -> list[int]:
        return self.lm.tokenize(self.lm.chat_prompt(self.messages(user_text)), special=True)

    def answer(self, utterance: int, user_text: str, cancel: threading.Event | None = None) -> tuple[str, AnswerMetrics]:
        """Generate, split and synthesise the answer to ``user_text``; blocks until done or cancelled.

        Returns:
            (answer text, metrics). Events: AnswerDelta, AnswerSentence, AnswerAudio, AnswerDone.
        """
        cancel = cancel or threading.Event()
        m = AnswerMetrics(start_wall=time.monotonic())
        tts_q: queue.Queue = queue.Queue()
        tts_thread = threading.Thread(target=self._tts_worker, args=(utterance, tts_q, m, cancel), daemon=True,
                                      name="tts")
        tts_thread.start()
        splitter = SentenceSplitter()
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
        self.history += [{"role": "user", "content": user_text}, {"role": "assistant", "content": text}]
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
            if m.first_audio_wall is None:
                m.first_audio_wall = time.monotonic()
            m.audio_s += len(audio) / self.tts.sample_rate
            self.emit(AnswerAudio(utterance, index, np.asarray(audio, np.float32), self.tts.sample_rate))
