"""Greedy decoding over an LLM server in ONE streamed request: the :class:`engine.llm.protocol.GreedyDecoder`
capability of :class:`engine.llm.remote.adapter.RemoteLM` (:class:`StreamedGreedy`, a mix-in of it).

A streamed ``/v1/completions`` (SGLang: ``/generate``) decodes a whole continuation without log-probs, so answers,
captions and PredGen's final step cost one request, not one per token. llama-cpp-python's server computes log-probs
by sorting the whole vocabulary in Python for every returned position, whatever ``logprobs`` asks for (measured in
bench/results/remote_predgen_voice_asr_partials_qwen0.5b.json): a streamed decode skips that entirely.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Sequence

from .client import HttpStats
from .errors import RemoteLMError

if TYPE_CHECKING:
    from .client import HttpClient
    from .logits import PendingEval
    from .tokenizer import LocalTokenizer

log = logging.getLogger(__name__)


@dataclass
class RemoteStats(HttpStats):
    """Counters of one :class:`RemoteLM` (all since construction or :meth:`RemoteLM.reset_stats`): the HTTP counters
    of :class:`engine.llm.remote.client.HttpStats` (``requests`` of every kind: connect probes, tokenisation,
    scoring), and those below.

    Attributes:
        eval_requests: scoring requests (one per materialised ``eval``).
        echo_requests: scoring requests that asked for prompt log-probs (verification of several rows).
        prompt_tokens: tokens sent in scoring requests.
        reprocessed_tokens: prompt tokens the server evaluated (not served from its prefix cache) — reported by
            the server (SGLang ``cached_tokens``, vLLM ``prompt_tokens_details``) or estimated (see
            ``reprocessed_source``).
        reprocessed_source: "server", or "estimate: single-slot prefix cache" (llama-cpp-python keeps one
            sequence: a request re-evaluates everything after its longest common prefix with the previous one,
            and at least the last token).
        echo_prompt_tokens / echo_reprocessed_tokens / echo_bytes_sent / echo_bytes_received: the same counts for
            the echo (verification) requests alone.
        stream_requests / stream_tokens / stream_prompt_tokens: streamed greedy decodings (:meth:`RemoteLM.generate`,
            one request each), the token ids they yielded, the context tokens they sent.
        stream_retokenize_conflicts: streamed texts whose local re-tokenisation disagreed with ids already yielded
            (text-only servers; the text stays right, the ids of the rest are those of the remaining text).
    """

    eval_requests: int = 0
    echo_requests: int = 0
    prompt_tokens: int = 0
    reprocessed_tokens: int = 0
    reprocessed_source: str = ""
    echo_prompt_tokens: int = 0
    echo_reprocessed_tokens: int = 0
    echo_bytes_sent: int = 0
    echo_bytes_received: int = 0
    stream_requests: int = 0
    stream_tokens: int = 0
    stream_prompt_tokens: int = 0
    stream_retokenize_conflicts: int = 0



class StreamedGreedy:
    """:meth:`generate` of :class:`engine.llm.remote.adapter.RemoteLM`. A mix-in: it reads the adapter's connection
    state and tokenizer, keeps its token bookkeeping (the protocol's KV cache) and counts in its ``stats``; it calls
    the adapter's ``tokenize``, ``detokenize`` and ``_reprocessed``."""

    # the adapter's attributes used here (set by RemoteLM.__init__ and RemoteLM.connect)
    _http: HttpClient
    stats: RemoteStats
    tok: LocalTokenizer | None
    base_url: str
    api: str
    model: str | None
    n_ctx: int
    ids_prompt: bool
    ids_keys: bool
    tokenize_path: str
    finish_reason: str
    _stream_finish: str
    _tokens: list[int]
    _unsent: list[PendingEval]
    _last_sent: list[int]

    def generate(self, tokens: Sequence[int], max_tokens: int, stop_ids: frozenset[int] | set[int] = frozenset(),
                 stop: Sequence[str] = (), cancel: threading.Event | None = None) -> Iterator[int]:
        """Greedy continuation of ``tokens`` in ONE streamed request (:class:`engine.llm.protocol.GreedyDecoder`).

        OpenAI-compatible ``/v1/completions`` with ``stream: true``, ``temperature: 0`` (and ``repeat_penalty: 1``
        for llama-cpp-python, whose default penalises repeats): the server serves the shared prefix from its cache,
        decodes token after token and sends each as it comes. Token ids are read from the stream where the server
        gives them (vLLM ``return_tokens_as_token_ids``; SGLang's native ``/generate``); a text-only stream
        (llama-cpp-python) is re-tokenised locally, yielding a token only once the text after it has started a new
        word (so a later piece cannot re-merge it) — the rest at the end. A greedy split that is not the canonical
        tokenisation of its text thus comes back canonical (same text, other ids; rare).

        Args:
            tokens: the whole context (e.g. prompt ⊕ accepted answer tokens); ``n_past`` becomes its length.
            max_tokens: at most this many tokens are yielded (≥ 1).
            stop_ids: end of decoding at these ids (never yielded; end-of-turn ids stop every server anyway).
            stop: stop strings (the server cuts the text before them).
            cancel: set it (a newer partial arrived, barge-in) and the generator stops before its next token and
                closes the connection, which stops the server.

        Yields:
            int token ids, as they are decoded. Afterwards (or when the generator is closed) the bookkeeping cache
            holds ``tokens`` ⊕ the yielded ids, and ``finish_reason`` says why it ended: "stop" (a stop id or
            string, the end of the answer), "length" (``max_tokens``) or "cancel".

        Raises:
            ValueError: empty ``tokens``, ``max_tokens`` < 1, or the context window would overflow.
            RemoteLMError: the server failed or went away (also mid-stream), or answered in an unusable form.
        """
        tokens = [int(t) for t in tokens]
        if not tokens:
            raise ValueError("generate() needs at least one context token")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if len(tokens) + max_tokens > self.n_ctx:
            max_tokens = self.n_ctx - len(tokens)
            if max_tokens < 1:
                raise ValueError(f"context window of {self.n_ctx} tokens exceeded ({len(tokens)}+1)")
        self._unsent.clear()  # the streamed request evaluates those tokens anyway
        self._tokens = list(tokens)
        return self._generate(tokens, max_tokens, frozenset(int(i) for i in stop_ids), list(stop), cancel)

    def _generate(self, tokens: list[int], max_tokens: int, stop_ids: frozenset[int], stop: list[str],
                  cancel: threading.Event | None) -> Iterator[int]:
        out: list[int] = []
        self.finish_reason = ""
        self._stream_finish = ""
        self.stats.stream_requests += 1
        self.stats.stream_prompt_tokens += len(tokens)
        from engine.core.verify import common_prefix

        k = common_prefix(self._last_sent, tokens)
        self._reprocessed(len(tokens) - min(k, len(tokens) - 1), len(tokens), False)
        try:
            if self.api == "sglang":
                events = self._stream_sglang(tokens, max_tokens, stop_ids, stop)
            else:
                events = self._stream_openai(tokens, max_tokens, stop_ids, stop)
            for ids in events:
                for t in ids:
                    if t in stop_ids:
                        self.finish_reason = "stop"
                    elif len(out) >= max_tokens:
                        self.finish_reason = "length"
                    elif cancel is not None and cancel.is_set():
                        self.finish_reason = "cancel"
                    if self.finish_reason:
                        return
                    out.append(t)
                    self._tokens.append(t)
                    self.stats.stream_tokens += 1
                    yield t
                if cancel is not None and cancel.is_set():
                    self.finish_reason = "cancel"
                    return
            self.finish_reason = "stop" if self._stream_finish == "stop" else "length"
        finally:
            self._last_sent = tokens + out  # the server's single slot holds what it evaluated

    def _stream_openai(self, tokens: list[int], max_tokens: int, stop_ids: frozenset[int],
                       stop: list[str]) -> Iterator[list[int]]:
        body = {"prompt": list(tokens) if self.ids_prompt else self.tok.render(tokens), "max_tokens": max_tokens,
                "temperature": 0.0, "stream": True}
        if self.model:
            body["model"] = self.model
        if stop:
            body["stop"] = stop
        if self.ids_keys:  # vLLM: each streamed token as "token_id:N"
            body.update(logprobs=1, return_tokens_as_token_ids=True)
            if stop_ids:
                body["stop_token_ids"] = sorted(stop_ids)
        if self.tokenize_path == "/extras/tokenize":  # llama-cpp-python: its default repeat_penalty is 1.1
            body.update(repeat_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0)
        text = ""
        done: list[int] = []
        finished = False
        for ev in self._http.stream("/v1/completions", body):
            try:
                ch = ev["choices"][0]
            except (KeyError, IndexError, TypeError):
                if isinstance(ev, dict) and not ev.get("choices"):
                    continue  # e.g. a final usage-only chunk
                raise RemoteLMError(f"unexpected streamed /v1/completions event: {str(ev)[:200]}") from None
            keyed = ((ch.get("logprobs") or {}).get("tokens") or []) if self.ids_keys else []
            if keyed:
                ids = [int(x[9:]) for x in keyed if isinstance(x, str) and x.startswith("token_id:")]
                done.extend(ids)
                yield ids
            else:
                text += ch.get("text") or ""
                new = self._stable_ids(text, done, final=False)
                done.extend(new)
                if new:
                    yield new
            if ch.get("finish_reason"):
                finished = True
                self._stream_finish = ch["finish_reason"]
        if not finished:
            raise RemoteLMError(f"the LLM server at {self.base_url} ended the stream without a finish reason "
                                f"(it went away mid-answer?)")
        if not self.ids_keys or text:
            rest = self._stable_ids(text, done, final=True)
            if rest:
                yield rest

    def _stable_ids(self, text: str, done: list[int], final: bool) -> list[int]:
        """Token ids of streamed ``text`` beyond ``done`` that no later text can change: those before the start of
        its last whitespace run, on which the tokenisations of the whole text and of that prefix agree (all of
        them when ``final``)."""
        if self.tok is None and not self.tokenize_path:
            raise RemoteLMError("a text-only stream needs a tokenizer")
        ids = self.tokenize(text) if text else []
        if not final:
            runs = list(re.finditer(r"\s+", text))
            cut = runs[-1].start() if runs else 0
            head = self.tokenize(text[:cut]) if cut else []
            n = 0
            while n < min(len(ids), len(head)) and ids[n] == head[n]:
                n += 1
            ids = ids[:n]
        if ids[: len(done)] != done:
            if not final:
                return []  # wait for the end of the stream
            self.stats.stream_retokenize_conflicts += 1
            log.warning("streamed text re-tokenises differently from the ids already yielded; continuing with the "
                        "ids of the remaining text")
            return self.tokenize(text[len(self.detokenize(done)):]) if len(text) > len(self.detokenize(done)) else []
        return ids[len(done):]

    def _stream_sglang(self, tokens: list[int], max_tokens: int, stop_ids: frozenset[int],
                       stop: list[str]) -> Iterator[list[int]]:
        sp = {"max_new_tokens": max_tokens, "temperature": 0.0}
        if stop:
            sp["stop"] = stop
        if stop_ids:
            sp["stop_token_ids"] = sorted(stop_ids)
        body = {"input_ids": list(tokens), "sampling_params": sp, "stream": True, "return_logprob": True,
                "logprob_start_len": len(tokens), "top_logprobs_num": 0}
        seen = 0
        finished = False
        for ev in self._http.stream("/generate", body):
            meta = ev.get("meta_info") or {}
            got = [int(e[1]) for e in meta.get("output_token_logprobs") or [] if e and len(e) > 1]
            new = got[seen:]  # the list is cumulative (SGLang's default streaming output)
            seen += len(new)
            if new:
                yield new
            if meta.get("finish_reason"):
                finished = True
                fr = meta["finish_reason"]
                self._stream_finish = fr.get("type", "") if isinstance(fr, dict) else str(fr)
        if not finished:
            raise RemoteLMError(f"SGLang at {self.base_url} ended the stream without a finish reason")
