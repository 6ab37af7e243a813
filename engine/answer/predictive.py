"""PredGen: answer while the user is still speaking (Li & Grover, "PredGen: Accelerated Inference of Large
Language Models through Input-Time Speculation for Real-Time Speech Interaction", 2025,
https://arxiv.org/abs/2506.15556).

Algorithm 1, with AR ``predictive_generate`` (§3.3):

    on the first partial prompt P₁:      (R₁, A₁) ← predictive_generate(0, P₁, "")            (lines 2–5)
    on each new partial P_{i+1}:          k_i ← verifier(P_{i+1}, R_i)                          (line 12)
                                          (R_{i+1}, A_{i+1}) ← predictive_generate(k_i, P_{i+1}, R_i)  (line 14)
    at end of input (P_N):                final verification of R_{N-1}'s first sentence        (line 19)
                                          accepted → play A_{N-1} at once (NFETFS = 1)          (line 20)
                                          else     → predictive_generate(k, P_N, R_{N-1}); play A_N (line 23)
                                          then generate the rest, sentence by sentence          (line 26)

When P_N is the prompt R_{N-1} was generated from (the final transcript is the last partial's text), the final
verification cannot change anything: every token of R_{N-1} was accepted by the verifier on P_N itself or generated
greedily after those, so the verifier (greedy, top-k, biased: each a function of the logits of P_N ⊕ R that accepts
greedy's tokens) would accept all of it — with the greedy verifier R_{N-1} is greedy's answer. It is skipped: A_{N-1}
is played at once (NFETFS = 0) and generation goes on from the KV cache the update left. Whenever the prompts differ
(and for the reflection verifier, whose judge reads another prompt) it runs as above.

Verification (§3.1) concatenates S = P ⊕ R and runs ONE forward pass over the part of S not already cached
(the prompt's common prefix with the cache is reused), then crops the KV cache to P ⊕ R[:k] — the accepted tokens'
KV is kept and never recomputed; generation resumes from the correction token, which that same pass produced.
Verifiers: greedy (lossless), top-k, reflection (an LLM judge compares the log-likelihood of "yes"/"no" in one
pass, Table 2; on "no" it falls back to greedy), and any :mod:`engine.core.verify` function (e.g. SSBD's biased β).

Work while the user speaks is bounded: at most ``tokens_per_update`` new tokens per partial, stopping once the first
sentence is complete, and a ``cancel`` event (a newer partial arrived) stops it between tokens.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from engine.config import TtsConfig
from engine.core import verify as V
from engine.llm.chat import ChatHistory
from engine.llm.generate import GreedySteps, LMSession, TextStreamer
from engine.answer.sentences import SentenceSplitter, clean_for_speech

PREDGEN_SYSTEM = ("The instruction provided by the user may be truncated. In such cases, respond based on your best "
                  "guess of the incomplete instruction. Do not complain about incomplete prompts.")

PREFILL_CHUNK = 12  # tokens per cancellable pre-fill pass of a speculative update

REFLECTION_TEMPLATE = ("You are given an incomplete prompt and the model's speculative partial answer.\n"
                       "Please judge whether the partial prompt is consistent with the model's answer.\n"
                       "Partial Prompt: {prompt}\nPartial Answer: {answer}")

VERIFIERS = ("greedy", "top_k", "reflection", "biased")
# verifiers whose verdict is a function of the logits of P ⊕ R that accepts every greedy token: on the prompt R was
# generated from they accept all of R, so the final verification is skipped when the prompts are equal
SAME_PROMPT_ACCEPTS_ALL = ("greedy", "top_k", "biased")


def first_sentence(detokenize: Callable, tokens: list[int], first_clause_words: int = 0) -> tuple[int, str] | None:
    """(number of tokens that make up the first complete sentence, its text) or None if it is not complete yet.

    A sentence is complete when :class:`engine.answer.sentences.SentenceSplitter` confirms its boundary (PredGen A.1:
    '.', '?', '!'); with ``first_clause_words`` > 0 a clause of at least that many words (ending at ',', ';', ':'
    or a dash) also counts, so the first spoken piece can be shorter than a sentence."""
    sp = SentenceSplitter(first_clause_words=first_clause_words)
    st = TextStreamer(detokenize)
    for i, t in enumerate(tokens):
        delta = st.push(t)
        if delta:
            got = sp.push(delta)
            if got:
                sent = got[0]
                # the smallest prefix whose text already contains the whole sentence
                for n in range(1, i + 2):
                    if sent in detokenize(tokens[:n]):
                        return n, sent
                return i + 1, sent
    return None


@dataclass
class Candidate:
    """R_i with its first sentence and pre-synthesised audio A_i."""

    prompt: list[int] = field(default_factory=list)
    response: list[int] = field(default_factory=list)
    first_len: int | None = None
    first_text: str = ""
    audio: np.ndarray | None = None
    audio_text: str = ""
    # the greedy token after P ⊕ R when the update left all of P ⊕ R evaluated in the KV cache (None: unknown)
    next_token: int | None = None


@dataclass
class StepInfo:
    """One update or the final step. ``accepted``: k_i; ``nfe``: LLM forward passes; ``compute_s``: wall time."""

    partial: str
    accepted: int
    previous_len: int
    generated: int
    nfe: int
    compute_s: float
    tts_s: float = 0.0
    first_sentence: str = ""
    cancelled: bool = False
    #: the LLM's probability that the user's turn is complete: of the end-of-turn token right after ``partial``
    #: in the chat template (read from this update's verification pass; None when it could not be read)
    p_eot: float | None = None


@dataclass
class FinalInfo:
    """The end-of-input step: ``nfetfs`` = LLM forward passes from end of input to the first sentence;
    ``ttfs_s`` = compute time to the first sentence; ``audio_s`` = time to the first audio being ready;
    ``presynth_used`` = A_{N-1} was played as is; ``verified`` = the final verification ran (False: the final prompt
    was R_{N-1}'s own, nothing to verify)."""

    accepted: int
    nfetfs: int
    ttfs_s: float
    audio_latency_s: float
    presynth_used: bool
    first_sentence: str
    answer: str = ""
    answer_tokens: list[int] = field(default_factory=list)
    gen_tokens: int = 0
    decode_s: float = 0.0
    verified: bool = True


class PredGen:
    """PredGen over a :class:`engine.llm.protocol.CausalLM` with a chat template.

    Args:
        lm: target LLM (``chat_prompt``, ``tokenize``, ``detokenize``, ``eos_ids``).
        tts: ``synthesize(text) -> float32 array`` + ``sample_rate``; None = no pre-synthesis.
        system_prompt: the assistant's system prompt (``llm.system_prompt``); PredGen's truncation note (A.3) is
            appended.
        verifier: "greedy" | "top_k" | "reflection" | "biased".
        top_k: k of the top-k verifier. beta: β of the biased verifier (SSBD Eq. 5).
        tokens_per_update: token budget of one speculative update (while the user speaks).
        judge_lm: a second context on the same weights for the reflection judge (keeps the main KV cache);
            None = the main LM (its cache is then refilled after judging).
        history: earlier turns [{"role","content"}] (multi-turn).
        speculation_threads: LLM threads for updates while the user speaks (0 = all); the final step uses all.
        yield_to_asr: each speculative forward pass waits while a streaming-ASR decode runs (engine.core.cpu policy).
        first_clause_words: words a clause needs to be the first spoken piece (``tts.first_clause_words``; 0 = the
            whole first sentence).

    The defaults of the settings are the configuration's (:mod:`engine.config`).
    """

    def __init__(self, lm, tts, system_prompt: str, verifier: str = "greedy", top_k: int = 3,
                 beta: float = 0.2, tokens_per_update: int = 8, max_tokens: int = 256, judge_lm=None,
                 history: list[dict] | None = None, speculation_threads: int = 0, yield_to_asr: bool = True,
                 first_clause_words: int = TtsConfig.first_clause_words):
        if verifier not in VERIFIERS:
            raise ValueError(f"unknown PredGen verifier {verifier!r}; choose from {', '.join(VERIFIERS)}")
        self.lm = lm
        self.session = LMSession(lm)
        self.tts = tts
        self.system_prompt = (system_prompt + " " + PREDGEN_SYSTEM).strip()
        self.verifier = verifier
        self.top_k = top_k
        self.beta = beta
        self.tokens_per_update = tokens_per_update
        self.first_clause_words = first_clause_words  # the first spoken piece may be a clause (engine.answer.sentences)
        self.max_tokens = max_tokens
        self.judge = LMSession(judge_lm) if judge_lm is not None else None
        self.chat = ChatHistory(lm, max_tokens=max_tokens)
        for u, a in zip((history or [])[0::2], (history or [])[1::2]):
            self.chat.add(u["content"], a["content"])
        self.speculation_threads = speculation_threads
        self.yield_to_asr = yield_to_asr
        self.cand = Candidate()
        self.steps: list[StepInfo] = []
        self._yes_no: tuple[list[int], list[int]] | None = None
        self._pending_fill = None

    # -- prompts ------------------------------------------------------------------------------------------------
    @property
    def history(self) -> list[dict]:
        """Every turn of the conversation, oldest first (``self.chat.kept`` is what the LM still sees)."""
        return self.chat.turns

    def messages(self, user_text: str) -> list[dict]:
        """System prompt, the kept turns and ``user_text``: fits ``n_ctx`` with ``max_tokens`` to spare."""
        return self.chat.prompt(self.system_prompt, user_text)[0]

    def prompt_tokens(self, user_text: str) -> list[int]:
        return self.chat.prompt(self.system_prompt, user_text)[1]

    def warm(self) -> None:
        """Pre-fill the system prompt (and history) so the first update pays only for the user's words."""
        self.session.prefill(self.chat.prefix_tokens(self.system_prompt))

    def reset_turn(self) -> None:
        self.cand = Candidate()
        self.steps = []

    # -- verification (§3.1) -------------------------------------------------------------------------------------
    def _rows_for(self, prompt: list[int], response: list[int]) -> np.ndarray:
        """ONE forward pass over (uncached part of P) ⊕ R; returns rows (len(R)+1, vocab), rows[j] predicting R[j].
        The same pass reads the end-of-turn probability (:meth:`end_of_turn_probability`)."""
        rows = self.session.eval_draft(prompt, response, probe=self._user_end(prompt))
        self._read_eot(prompt)
        return rows

    # -- the user's turn, as the LLM reads it ---------------------------------------------------------------------
    _eot: tuple[tuple[int, ...], float] | None = None  # (prompt up to the user's end-of-turn token, its probability)

    def _user_end(self, prompt: list[int]) -> int | None:
        """Index in ``prompt`` of the end-of-turn token that closes the user's message (the chat template's last
        end-of-turn token, e.g. ``<|im_end|>`` before ``<|im_start|>assistant``), None if it has none."""
        eos = self.lm.eos_ids
        for i in range(len(prompt) - 1, 0, -1):
            if prompt[i] in eos:
                return i
        return None

    def _read_eot(self, prompt: list[int]) -> None:
        """Keep p(end-of-turn token | system, history, user's words) from the pass just made (its row before the
        token), or keep the earlier value when this pass did not evaluate that row because the user's words are
        unchanged (the cache held them)."""
        i = self._user_end(prompt)
        row = self.session.probe_row
        if i is None:
            return
        key = tuple(prompt[: i + 1])
        if row is not None:
            z = row.astype(np.float64)
            z -= z.max()
            self._eot = (key, float(np.exp(z[prompt[i]]) / np.exp(z).sum()))
        elif self._eot is not None and self._eot[0] != key:
            self._eot = None

    def judge_turn(self, user_text: str) -> float | None:
        """The end-of-turn probability of ``user_text`` on its own: one pass over the uncached part of its prompt
        (what an update's verification pass reads along the way). None when the prompt has no end-of-turn token."""
        prompt = self.prompt_tokens(user_text)
        self.session.prefill(prompt, probe=self._user_end(prompt))
        self._read_eot(prompt)
        return self.end_of_turn_probability(prompt)

    def end_of_turn_probability(self, prompt: list[int]) -> float | None:
        """The LLM's probability that the user's turn in ``prompt`` is complete: of the chat template's end-of-turn
        token right after the user's words, as the last verification pass over ``prompt`` read it — the quantity a
        transcript-based turn detector (LiveKit's) estimates, here at no extra forward pass. None when no pass read
        it for these words."""
        i = self._user_end(prompt)
        if i is None or self._eot is None or self._eot[0] != tuple(prompt[: i + 1]):
            return None
        return self._eot[1]

    def _judge_yes(self, partial: str, answer: str) -> bool:
        """Reflection (§3.1, Table 2): one pass; accept if log p("yes") > log p("no") for the first answer token."""
        sess = self.judge or self.session
        lm = sess.lm
        if self._yes_no is None:
            def ids(words):
                out = []
                for w in words:
                    t = lm.tokenize(w)
                    if len(t) == 1:
                        out.append(t[0])
                return out
            self._yes_no = (ids(["yes", "Yes", " yes", " Yes"]), ids(["no", "No", " no", " No"]))
        prompt = lm.tokenize(lm.chat_prompt([{"role": "user", "content": REFLECTION_TEMPLATE.format(
            prompt=partial, answer=answer)}]), special=True)
        row = sess.prefill(prompt)
        yes, no = self._yes_no
        return float(np.max(row[yes])) > float(np.max(row[no]))

    def verify(self, partial: str, prompt: list[int], response: list[int], first_len: int | None,
               first_text: str, defer_fill: bool = False) -> tuple[int, int | None, int, bool]:
        """Line 12: k ← verifier(P, R). Leaves the KV cache at P ⊕ R[:k].

        Returns:
            (k, correction token or None, forward passes used, fill_pending). ``fill_pending`` is True only for a
            reflection "yes" with ``defer_fill``: the judge input is not P ⊕ R, so the KV of P ⊕ R[:k] still has to
            be filled by :meth:`fill` (one pass) before generation continues.
        """
        if not response:
            row = self.session.prefill(prompt, probe=self._user_end(prompt))
            self._read_eot(prompt)
            return 0, int(np.argmax(row)), 1, False
        nfe = 0
        if self.verifier == "reflection" and first_len:
            nfe += 1
            if self._judge_yes(partial, first_text):
                if defer_fill:
                    self._pending_fill = (prompt, response[:first_len])
                    return first_len, None, nfe, True
                nxt = self.fill(prompt, response[:first_len])
                return first_len, nxt, nfe + 1, False
        rows = self._rows_for(prompt, response)
        nfe += 1
        if self.verifier == "top_k":
            v = V.top_k(rows, response, self.top_k)
        elif self.verifier == "biased":
            v = V.biased(rows, response, self.beta)
        else:  # greedy, and reflection's fallback
            v = V.greedy(rows, response)
        self.session.crop(len(prompt) + v.accepted)
        return v.accepted, v.correction, nfe, False

    def fill(self, prompt: list[int], accepted: list[int]) -> int:
        """One pass that puts P ⊕ accepted in the KV cache; returns the next (greedy) token."""
        rows = self._rows_for(prompt, accepted)
        self.session.crop(len(prompt) + len(accepted))
        return int(np.argmax(rows[-1]))

    # -- predictive_generate (§3.3) --------------------------------------------------------------------------------
    def _extend(self, out: list[int], nxt: int | None, budget: int, cancel: threading.Event | None,
                stop_at_first: bool, speculative: bool = False) -> tuple[list[int], int, bool]:
        """AR greedy from the cached P ⊕ out, starting with token ``nxt``. Returns (out, forward passes, ended).
        :attr:`_after` is then the greedy token after the returned ``out`` when the cache holds all of P ⊕ out
        (an end-of-answer token when ended), else None (its last token was not evaluated)."""
        nfe = 0
        n_new = 0
        self._after = None
        while nxt is not None and n_new < budget and len(out) < self.max_tokens:
            if nxt in self.lm.eos_ids:
                self._after = nxt
                return out, nfe, True
            out.append(nxt)
            n_new += 1
            if stop_at_first and first_sentence(self.lm.detokenize, out, self.first_clause_words) is not None:
                return out, nfe, False  # its KV is not needed until the next verification re-evaluates it
            if cancel is not None and cancel.is_set():
                return out, nfe, False
            if speculative:
                self._yield_to_asr(cancel)
            nxt = self._step(nxt, speculative)
            nfe += 1
        self._after = nxt
        return out, nfe, False

    _after: int | None = None

    def _resume(self, prompt: list[int], response: list[int], next_token: int | None
                ) -> tuple[list[int], int] | None:
        """Where greedy decoding after ``prompt`` ⊕ ``response`` goes on without a forward pass: (out, nxt) with the
        KV cache holding ``prompt`` ⊕ out and ``nxt`` the token after out, not yet evaluated — all of ``response``
        and ``next_token`` when the cache holds all of it, else ``response`` but its last token (the update stopped
        at the first sentence, or was cancelled, before evaluating it). None when the cache holds neither (another
        prompt was pre-filled since, or another session wrote the LM's cache)."""
        s = self.session
        s._claim()  # the cache as this session last left it, or empty if another session wrote it since
        full = list(prompt) + list(response)
        if s.tokens == full and next_token is not None:
            return list(response), next_token
        if response and s.tokens == full[:-1]:
            return list(response[:-1]), response[-1]
        return None

    def _refill(self, prompt: list[int], response: list[int]) -> tuple[list[int], int]:
        """ONE forward pass that puts ``prompt`` ⊕ ``response`` in the KV cache, evaluating only what the cache
        does not already hold (at least the last token, for its row); returns (``response``, the greedy token after
        it). The tokens are taken as they are, not verified."""
        s = self.session
        s._claim()
        full = list(prompt) + list(response)
        n = min(V.common_prefix(s.tokens, full), len(full) - 1)
        s.crop(n)
        row = s.eval(full[n:])[-1]
        return list(response), int(np.argmax(row))

    _steps: GreedySteps | None = None  # the final step's decoding (one streamed request on an LLM server)

    def _step(self, tok: int, speculative: bool = False) -> int | None:
        """The greedy token after the cache ⊕ ``tok``: one ``eval``, or in the final step the next token of its
        :class:`engine.llm.generate.GreedySteps` (None once that stream ended)."""
        if self._steps is not None and not speculative:
            return self._steps.step(tok)
        return int(np.argmax(self.session.eval([tok])[-1]))

    def _synth(self, text: str) -> tuple[np.ndarray | None, float]:
        if self.tts is None:
            return None, 0.0
        t0 = time.perf_counter()
        audio = self.tts.synthesize(clean_for_speech(text))
        return audio, time.perf_counter() - t0

    def _yield_to_asr(self, cancel: threading.Event | None) -> None:
        """Speculation never competes with a streaming-ASR decode (engine.core.cpu): wait until none is in flight."""
        if self.yield_to_asr:
            from engine.core.cpu import ASR

            ASR.wait_idle(cancel=cancel)

    def _prefill_chunks(self, prompt: list[int], cancel: threading.Event | None) -> int:
        """Pre-fill the uncached part of ``prompt`` (all but its last ``PREFILL_CHUNK`` tokens) in chunks of
        ``PREFILL_CHUNK`` tokens, checking ``cancel`` between chunks, so that a speculative update gives the CPU back
        within one chunk's compute when a newer partial or the final transcript arrives (a llama.cpp forward pass
        cannot be interrupted; on a CPU its cost grows with the tokens it evaluates). Returns forward passes made.
        Greedy outputs are unchanged: the cache holds the same tokens the one-pass verification would have put in
        it. Not used by :meth:`finish` (its verification is one pass, as NFETFS counts)."""
        if cancel is None:
            return 0
        s = self.session
        n = len(s.tokens) if s.tokens == prompt[: len(s.tokens)] else V.common_prefix(s.tokens, prompt)
        passes = 0
        while len(prompt) - n > 2 * PREFILL_CHUNK and not cancel.is_set():
            self._yield_to_asr(cancel)
            n += PREFILL_CHUNK
            s.prefill(prompt[:n])
            passes += 1
        return passes

    def update(self, partial: str, cancel: threading.Event | None = None,
               on_eot: Callable[[float], None] | None = None) -> StepInfo:
        """Lines 9–14: verify R_i against the new partial prompt, keep the accepted prefix, extend it within the
        budget, and (re)synthesise the first sentence if it changed. ``on_eot(p)`` is called right after the
        verification pass with the LLM's end-of-turn probability of ``partial`` (:meth:`end_of_turn_probability`),
        when it could be read."""
        t0 = time.perf_counter()
        if self.speculation_threads and hasattr(self.lm, "set_threads"):
            self.lm.set_threads(self.speculation_threads)
        c = self.cand
        prompt = self.prompt_tokens(partial)
        n_pre = self._prefill_chunks(prompt, cancel)
        if cancel is not None and cancel.is_set():  # a newer partial is waiting: keep R_{i-1}, stop now
            info = StepInfo(partial, 0, len(c.response), 0, n_pre, time.perf_counter() - t0, 0.0, c.first_text, True)
            self.steps.append(info)
            return info
        self._yield_to_asr(cancel)
        told = False
        if on_eot is not None and c.response:
            # the end-of-turn rule waits on the verdict: the user's words first, in a pass of their own (the
            # verification then evaluates only the candidate), so the verdict does not wait for the candidate's rows
            self.session.prefill(prompt, probe=self._user_end(prompt))
            self._read_eot(prompt)
            n_pre += 1
            p_first = self.end_of_turn_probability(prompt)
            if p_first is not None:
                on_eot(p_first)
                told = True
        k, nxt, nfe, _ = self.verify(partial, prompt, c.response, c.first_len, c.first_text)
        nfe += n_pre
        p_eot = self.end_of_turn_probability(prompt)
        if on_eot is not None and p_eot is not None and not told:
            on_eot(p_eot)  # before the extension: an end-of-turn rule waits on it
        out, nfe2, ended = self._extend(list(c.response[:k]), nxt, self.tokens_per_update, cancel,
                                        stop_at_first=True, speculative=True)
        fs = first_sentence(self.lm.detokenize, out, self.first_clause_words)
        if fs is None and ended and out:  # a complete one-sentence answer (EOS, no trailing space)
            fs = (len(out), self.lm.detokenize(out).strip())
        new = Candidate(prompt, out, fs[0] if fs else None, fs[1] if fs else "", next_token=self._after)
        tts_s = 0.0
        if fs and fs[1] == c.audio_text and c.audio is not None:
            new.audio, new.audio_text = c.audio, c.audio_text  # unchanged: keep A_i
        elif fs and not (cancel is not None and cancel.is_set()):
            new.audio, tts_s = self._synth(fs[1])
            new.audio_text = fs[1]
        self.cand = new
        info = StepInfo(partial, k, len(c.response), len(out) - k, nfe + nfe2, time.perf_counter() - t0, tts_s,
                        new.first_text, bool(cancel is not None and cancel.is_set()),
                        p_eot)
        self.steps.append(info)
        return info

    def finish(self, final: str, on_sentence: Callable[[int, str, np.ndarray | None, bool], None] | None = None,
               cancel: threading.Event | None = None) -> FinalInfo:
        """Lines 17–26: final verification; play A_{N-1} if its sentence is accepted, else generate the first
        sentence; then stream the rest sentence by sentence. When ``final``'s prompt is the one R_{N-1} was
        generated from, nothing is verified (all of R_{N-1} is accepted, module docstring): A_{N-1} is played at
        once and generation goes on from the cache the update left (``FinalInfo.verified`` False).

        ``on_sentence(index, text, audio, presynthesised)`` is called for each sentence as soon as it is complete
        (``audio`` only for the first; later sentences are synthesised by the caller)."""
        t0 = time.perf_counter()
        if hasattr(self.lm, "set_threads"):
            self.lm.set_threads(0)
        c = self.cand
        prompt = self.prompt_tokens(final)
        # R_{N-1} was generated from this very prompt: the verification would accept all of it (module docstring)
        verified = not (prompt == c.prompt and self.verifier in SAME_PROMPT_ACCEPTS_ALL)
        if verified:
            k, nxt, nfe, fill_pending = self.verify(final, prompt, c.response, c.first_len, c.first_text,
                                                    defer_fill=True)
            out = list(c.response[:k])
        else:
            k, nfe = len(c.response), 0
            resume = self._resume(prompt, c.response, c.next_token)
            fill_pending = resume is None  # the cache moved on since: one pass refills it (after the first audio)
            out, nxt = resume if resume is not None else (list(c.response), None)
        if self._steps is not None:
            self._steps.close()
        self._steps = GreedySteps(self.session, self.max_tokens - len(out) - 1, self.lm.eos_ids, cancel)
        presynth = bool(c.first_len and k >= c.first_len and c.audio is not None and c.audio_text == c.first_text)
        if presynth:
            first_text, first_audio = c.first_text, c.audio
            ttfs = audio_latency = time.perf_counter() - t0
            if on_sentence:
                on_sentence(0, first_text, first_audio, True)
            if fill_pending:
                out, nxt = self._refill(prompt, out) if not verified else (out, self.fill(prompt, out))
        else:
            if fill_pending:  # judged consistent (or R_{N-1}'s own prompt), but A_{N-1} is missing: fill, generate
                out, nxt = self._refill(prompt, out) if not verified else (out, self.fill(prompt, out))
                nfe += 1
            out, nfe2, ended = self._extend(out, nxt, self.max_tokens, cancel, stop_at_first=True)
            nfe += nfe2
            fs = (first_sentence(self.lm.detokenize, out, self.first_clause_words)
                  or (len(out), self.lm.detokenize(out).strip()))
            first_text = fs[1]
            ttfs = time.perf_counter() - t0
            first_audio, _ = self._synth(first_text) if first_text else (None, 0.0)
            audio_latency = time.perf_counter() - t0
            if on_sentence:
                on_sentence(0, first_text, first_audio, False)
            # the cache holds P ⊕ out[:-1] (the last token was not evaluated): resume with it
            nxt = None if ended or not out else out.pop()
        # line 26: the rest of the answer, streamed sentence by sentence
        t_dec = time.perf_counter()
        n_eval0 = self.session.n_eval
        streamer = TextStreamer(self.lm.detokenize)
        for t in out:
            streamer.push(t)
        sp = SentenceSplitter()
        pos = streamer.text.find(first_text)
        sent_i = 1
        done_first = pos >= 0
        pending = streamer.text[pos + len(first_text):] if done_first else ""
        emitted = []

        def emit(text_piece: str) -> None:
            nonlocal sent_i
            for sent in sp.push(text_piece):
                emitted.append(sent)
                if on_sentence:
                    on_sentence(sent_i, sent, None, False)
                sent_i += 1

        emit(pending)
        while nxt is not None and len(out) < self.max_tokens and not (cancel is not None and cancel.is_set()):
            if nxt in self.lm.eos_ids:
                break
            out.append(nxt)
            delta = streamer.push(nxt)
            if not done_first:
                if first_text in streamer.text:
                    done_first = True
                    delta = streamer.text[streamer.text.find(first_text) + len(first_text):]
                else:
                    delta = ""
            if delta:
                emit(delta)
            nxt = self._step(nxt)
        self._steps.close()
        self._steps = None
        for sent in sp.flush():
            if on_sentence:
                on_sentence(sent_i, sent, None, False)
            sent_i += 1
        answer = self.lm.detokenize(out).strip()
        info = FinalInfo(k, nfe, ttfs, audio_latency, presynth, first_text, answer, list(out),
                         self.session.n_eval - n_eval0, time.perf_counter() - t_dec, verified)
        self.chat.add(final, answer)
        self.reset_turn()
        return info
