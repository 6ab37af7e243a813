"""The causal-LM protocol (:mod:`engine.llm.protocol`) over an LLM server: vLLM, SGLang or llama-cpp-python's server.

PredGen and SSBD need one thing from a server: the log-probabilities of a given continuation in one request, with
the shared prefix served from the server's prefix cache. :class:`RemoteLM` gets them from

    * an OpenAI-compatible ``/v1/completions`` with ``echo: true``, ``logprobs: N``, ``max_tokens: 1``,
      ``temperature: 0`` (vLLM; llama-cpp-python's ``llama_cpp.server`` started with ``--logits_all true``);
    * SGLang's native ``/generate`` with ``return_logprob``, ``logprob_start_len`` and ``top_logprobs_num``
      (RadixAttention matches the cached prefix up to ``logprob_start_len``).

Plain llama.cpp ``llama-server`` returns log-probabilities of generated tokens only: :meth:`RemoteLM.connect`
detects that and raises :class:`NoPromptLogprobsError` (PredGen/SSBD cannot verify a draft there; the cascade can,
with ``require_prompt_logprobs=False``).

How the protocol maps onto requests:
    * The adapter keeps the token list that the protocol calls the KV cache; every scoring request sends the whole
      token list (as token ids where the server takes them, else as text that must re-tokenise to the same ids —
      checked on every response), and the server's prefix cache avoids recomputing the shared prefix. ``crop`` is
      local bookkeeping only.
    * ``eval(tokens)`` returns the rows lazily (:class:`RemoteRows`): the request is made when a row is first read,
      and asks only for the rows from the first one read. Reading the last row only (pre-fill, one AR step) is a
      request without prompt log-probs; reading the rows of a draft (verification) is ONE request with them. An
      ``eval`` whose rows were never read is sent (last row only) before the next operation, so the server has
      still pre-filled the tokens.
    * A server returns top-N log-probs, not full logits: a row is a dense float32 array of length ``n_vocab`` built
      from them (:func:`engine.llm.remote.logits.dense_row` says how, and which acceptance rules stay exact).
    * ``generate`` (the optional :class:`engine.llm.protocol.GreedyDecoder` capability,
      :mod:`engine.llm.remote.stream`) decodes a whole greedy continuation in ONE streamed ``/v1/completions``
      request (SGLang: ``/generate``) without log-probs, so answers, captions and PredGen's final step cost one
      request, not one per token.

Errors: every failure to reach the server or to understand it raises :class:`RemoteLMError` (subclasses
:class:`NoPromptLogprobsError`, :class:`TokenizerMismatchError`), after ``retries`` retries with exponential
back-off for connection errors, 408/429 and 5xx answers (a read time-out is not retried: the server is still busy
with the request) — the HTTP side is :class:`engine.llm.remote.client.HttpClient`. The API key is read from the
environment variable named by ``api_key_env`` and sent as a bearer token; it is never logged nor shown in ``repr``.

The package splits by concern: ``client`` (HTTP/SSE on httpx), ``tokenizer`` (:class:`LocalTokenizer`), ``logits``
(rows from top-N log-probs, the lazy :class:`RemoteRows`), ``stream`` (``generate``), ``errors``, and this adapter.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from dataclasses import asdict
from typing import Sequence

import numpy as np

from .client import HttpClient
from .errors import HTTPStatusError, NoPromptLogprobsError, RemoteLMError, TokenizerMismatchError
from .logits import PendingEval, RemoteRows, dense_row, top_logprob_entries
from .stream import RemoteStats, StreamedGreedy
from .tokenizer import END_TOKENS, LocalTokenizer

__all__ = ["RemoteLM", "RemoteStats", "RemoteRows", "LocalTokenizer", "RemoteLMError", "NoPromptLogprobsError",
           "TokenizerMismatchError"]

log = logging.getLogger(__name__)

PROBE_TEXT = "The capital of Italy is"
CHECK_TEXT = "Hello, world! Grüße aus Köln — 42 tokens?\n  Indented line.\t¿Qué tal? 你好"


# ------------------------------------------------------------------------------------------------- the adapter
class RemoteLM(StreamedGreedy):
    """:class:`engine.llm.protocol.CausalLM` over an LLM server (see the module docstring).

    Args:
        base_url: the server, e.g. "http://127.0.0.1:8000" (a trailing "/v1" is accepted).
        model: the served model name sent in OpenAI requests (None = the first of ``/v1/models``).
        tokenizer: the served model's tokenizer — a .gguf (vocabulary only is loaded), a transformers tokenizer
            directory/hub id, or a :class:`LocalTokenizer`. None = the server's tokenisation endpoints (one request
            per new text; the chat template then needs vLLM's ``/tokenize`` with ``messages``).
        api: "auto" | "openai" | "sglang".
        api_key_env: name of the environment variable holding the API key (None = no key).
        n_ctx: context window, tokens (at most the server's).
        top_n: log-probs requested per position (≥ 2; ≥ the top-k verifier's k; vLLM caps it at --max-logprobs).
        timeout_s: time-out of one request, seconds: the longest wait for an answer (in a stream: for the next
            bytes). retries / backoff_s: retries of a transient failure, first wait in seconds (then doubled).
        require_prompt_logprobs: refuse a server without prompt log-probs (PredGen/SSBD need them). With False,
            such a server is accepted for the cascade: only last rows (pre-fill, AR decoding) can be read.
        connect: probe the server now (else call :meth:`connect` before use).
        connect_timeout_s: time-out of opening a connection, seconds (None = ``min(timeout_s, 10)``).

    Raises:
        ValueError: an unknown ``api``, ``top_n`` < 2, a non-positive time-out or negative ``retries``.

    Raises (from :meth:`connect`):
        RemoteLMError: the server is unreachable or its answers cannot be used.
        NoPromptLogprobsError: it returns no prompt log-probs and ``require_prompt_logprobs``.
        TokenizerMismatchError: the local tokenizer disagrees with the server's.
    """

    def __init__(self, base_url: str, model: str | None = None, tokenizer=None, api: str = "auto",
                 api_key_env: str | None = None, n_ctx: int = 4096, top_n: int = 5, timeout_s: float = 30.0,
                 retries: int = 2, backoff_s: float = 0.25, require_prompt_logprobs: bool = True,
                 connect: bool = True, connect_timeout_s: float | None = None):
        if api not in ("auto", "openai", "sglang"):
            raise ValueError(f"api must be auto, openai or sglang, got {api!r}")
        if top_n < 2:
            raise ValueError(f"top_n must be >= 2 (greedy needs the top-1 and a runner-up), got {top_n}")
        key = os.environ.get(api_key_env) if api_key_env else None
        if api_key_env and not key:
            raise RemoteLMError(f"the API key variable {api_key_env} is not set")
        self.stats = RemoteStats()
        self._http = HttpClient(base_url, key, timeout_s, retries, backoff_s, self.stats,
                                connect_timeout_s=connect_timeout_s)
        self.base_url = self._http.url
        self.model = model
        self.api = api
        self.n_ctx = n_ctx
        self.top_n = top_n
        self.require_prompt_logprobs = require_prompt_logprobs
        self.tok = tokenizer if isinstance(tokenizer, LocalTokenizer) or tokenizer is None else LocalTokenizer(
            tokenizer)
        self.prompt_logprobs = False
        self.layout = ""  # "standard": entry k predicts token k; "shifted": entry k follows token k (llama-cpp)
        self.ids_prompt = False
        self.ids_keys = False  # top-logprob keys are "token_id:N" (vLLM return_tokens_as_token_ids)
        self.tokenize_path = ""
        self.finish_reason = ""  # of the last generate(): "stop" | "length" | "cancel"
        self._stream_finish = ""
        self._tokens: list[int] = []
        self._unsent: list[PendingEval] = []
        self._last_sent: list[int] = []
        self._str2ids: dict[str, list[int]] | None = None
        self._detok_cache: OrderedDict = OrderedDict()
        self._tok_cache: OrderedDict = OrderedDict()
        self.n_vocab = self.tok.n_vocab if self.tok is not None else 0
        self.eos_ids = self.tok.eos_ids if self.tok is not None else frozenset()
        self._connected = False
        if connect:
            self.connect()

    def __repr__(self) -> str:
        return f"RemoteLM({self.base_url!r}, model={self.model!r}, api={self.api!r})"

    # -- connection --------------------------------------------------------------------------------------------
    def connect(self) -> "RemoteLM":
        """Detect the API, the tokenisation endpoint and the log-prob layout; check the tokenizer. Idempotent."""
        if self._connected:
            return self
        if self.api == "auto":
            self.api = "sglang" if self._try("GET", "/get_model_info") is not None else "openai"
        if self.api == "openai":
            models = self._try("GET", "/v1/models")
            if models is None:
                raise RemoteLMError(f"{self.base_url} answers neither /v1/models (OpenAI-compatible) nor "
                                    f"/get_model_info (SGLang): is it an LLM server?")
            ids = [m.get("id") for m in models.get("data", []) if isinstance(m, dict)]
            if self.model is None and ids:
                self.model = ids[0]
            for m in models.get("data", []):
                if isinstance(m, dict) and m.get("id") == self.model and m.get("max_model_len"):
                    self.n_ctx = min(self.n_ctx, int(m["max_model_len"]))
        self._detect_tokenize()
        if self.tok is None:
            if not self.tokenize_path:
                raise RemoteLMError("the server has no tokenisation endpoint: give the model's tokenizer "
                                    "(llm.tokenizer: a .gguf or a tokenizer directory)")
            self.n_vocab = self._server_vocab_size()
            self.eos_ids = frozenset(i for t in END_TOKENS for i in [self._server_single_id(t)] if i is not None)
        self._check_tokenizer()
        if self.api == "sglang":
            self.ids_prompt, self.prompt_logprobs, self.layout = True, True, "sglang"
        else:
            self._probe_openai()
        self._connected = True
        log.info("remote LM %s: api=%s layout=%s ids_prompt=%s prompt_logprobs=%s", self.base_url, self.api,
                 self.layout, self.ids_prompt, self.prompt_logprobs)
        return self

    def close(self) -> None:
        self._http.close()

    def _try(self, method: str, path: str, body: dict | None = None) -> dict | None:
        """A probe: an error status means "not supported" (None; llama_cpp.server answers 500 to an invalid request);
        an unreachable server raises."""
        try:
            return self._http.call(method, path, body, retry=False)
        except HTTPStatusError:
            return None

    def _detect_tokenize(self) -> None:
        probes = [("/extras/tokenize", {"input": "hi"}), ("/tokenize", {"content": "hi"}),
                  ("/tokenize", {"prompt": "hi", "model": self.model})]
        for path, body in probes:
            r = self._try("POST", path, body)
            if isinstance(r, dict) and isinstance(r.get("tokens"), list) and r["tokens"]:
                self.tokenize_path, self._tokenize_field = path, next(iter(body))
                return

    def _server_tokenize(self, text: str) -> list[int]:
        body = {self._tokenize_field: text}
        if self._tokenize_field == "prompt":
            body.update(model=self.model, add_special_tokens=False)
        r = self._http.call("POST", self.tokenize_path, body)
        return [int(t["id"]) if isinstance(t, dict) else int(t) for t in r["tokens"]]

    def _server_detokenize(self, ids: Sequence[int]) -> str:
        path = self.tokenize_path.replace("tokenize", "detokenize")
        body = {"tokens": list(ids)}
        if self._tokenize_field == "prompt":
            body["model"] = self.model
        r = self._http.call("POST", path, body)
        return r.get("text", r.get("prompt", r.get("content", "")))

    def _server_single_id(self, text: str) -> int | None:
        try:
            ids = self._server_tokenize(text)
        except RemoteLMError:
            return None
        return ids[0] if len(ids) == 1 else None

    def _server_vocab_size(self) -> int:
        info = self._try("GET", "/get_model_info") if self.api == "sglang" else None
        if info and info.get("vocab_size"):
            return int(info["vocab_size"])
        raise RemoteLMError("cannot learn the vocabulary size from the server: give the model's tokenizer "
                            "(llm.tokenizer)")

    def _check_tokenizer(self) -> None:
        """The local tokenizer must tokenise like the server's (or, without a tokenisation endpoint, round-trip)."""
        if self.tok is None:
            return
        local = self.tok.tokenize(CHECK_TEXT, special=True)
        if self.tokenize_path:
            remote = self._server_tokenize(CHECK_TEXT)
            if remote != local:
                d = next((i for i, (a, b) in enumerate(zip(local, remote)) if a != b), min(len(local), len(remote)))
                raise TokenizerMismatchError(
                    f"the local tokenizer {self.tok.path} and the server's disagree on a test string at token {d} "
                    f"(local {local[d:d + 4]}, server {remote[d:d + 4]}): is the server running the same model?")
        elif self.tok.render(local) != CHECK_TEXT:
            raise TokenizerMismatchError(f"the local tokenizer {self.tok.path} does not round-trip a test string")

    def _probe_openai(self) -> None:
        """Find how prompts can be sent and how echoed log-probs line up with positions."""
        probe = self.tokenize(PROBE_TEXT)
        k = len(probe)
        variants = [(True, True), (True, False), (False, False)]  # (ids prompt, return_tokens_as_token_ids)
        echo = plain = None
        for ids_prompt, as_ids in variants:
            self.ids_prompt, self.ids_keys = ids_prompt, as_ids
            try:
                plain = self._completion(probe, echo=False, retry=False)
                echo = self._completion(probe, echo=True, retry=False)
                break
            except HTTPStatusError:
                continue
        if echo is None:
            raise RemoteLMError(f"{self.base_url}/v1/completions rejects a logprobs request with temperature 0")
        p_entries = top_logprob_entries(plain)
        e_entries = top_logprob_entries(echo)
        if not p_entries:
            raise RemoteLMError(f"{self.base_url} returns no log-probs at all for /v1/completions (logprobs=N)")
        if self.ids_keys and not any(str(key).startswith("token_id:") for key in (p_entries[0] or {})):
            self.ids_keys = False  # the server ignored return_tokens_as_token_ids
        last = p_entries[0]
        top1 = max(last, key=last.get)

        def same(entry) -> bool:
            return bool(entry) and top1 in entry and abs(entry[top1] - last[top1]) < 1e-3 and max(
                entry, key=entry.get) == top1

        if len(e_entries) >= k + 1 and same(e_entries[k]) and any(e_entries[1:k]):
            self.layout, self.prompt_logprobs = "standard", True
        elif len(e_entries) == k and same(e_entries[k - 1]) and any(e_entries[1:k]):
            self.layout, self.prompt_logprobs = "shifted", True
        else:
            self.layout, self.prompt_logprobs = "none", False
            if self.require_prompt_logprobs:
                raise NoPromptLogprobsError(
                    f"{self.base_url} does not return prompt log-probabilities (/v1/completions with echo=true "
                    f"gave {len(e_entries)} log-prob entries for a {k}-token prompt; plain llama.cpp llama-server "
                    f"behaves so). PredGen and SSBD need them to verify a draft in one request: use vLLM, SGLang "
                    f"or llama_cpp.server --logits_all true, or llm.answer_method = cascade (works with this "
                    f"server).")
        if not self.ids_prompt and self.tok is None:
            raise RemoteLMError("this server takes text prompts only: give the model's tokenizer (llm.tokenizer) "
                                "so that prompts and string-keyed log-probs map to token ids")

    # -- requests ----------------------------------------------------------------------------------------------
    def _completion(self, tokens: list[int], echo: bool, retry: bool = True) -> dict:
        body = {"prompt": list(tokens) if self.ids_prompt else self.tok.render(tokens), "max_tokens": 1,
                "temperature": 0.0, "logprobs": self.top_n, "echo": echo}
        if self.model:
            body["model"] = self.model
        if self.ids_keys:
            body["return_tokens_as_token_ids"] = True
        return self._http.call("POST", "/v1/completions", body, retry=retry)

    def _score(self, tokens: list[int], first: int) -> np.ndarray:
        """ONE request: float32 rows (len(tokens) − first, n_vocab); row i follows ``tokens[first + i]``.

        Raises:
            RemoteLMError: the server failed, re-tokenised a text prompt differently, or cannot give the rows.
        """
        n = len(tokens)
        if not 0 <= first < n:
            raise ValueError(f"rows from {first} of {n} tokens")
        if first < n - 1 and not self.prompt_logprobs:
            raise NoPromptLogprobsError(f"{self.base_url} returns no prompt log-probs: only the last row of an "
                                        f"evaluation can be read (cascade decoding), not a draft's rows")
        self.stats.eval_requests += 1
        self.stats.prompt_tokens += n
        echo = first < n - 1
        self.stats.echo_requests += echo
        b0 = (self.stats.bytes_sent, self.stats.bytes_received)
        try:
            return self._score_request(tokens, first, echo)
        finally:
            if echo:
                self.stats.echo_bytes_sent += self.stats.bytes_sent - b0[0]
                self.stats.echo_bytes_received += self.stats.bytes_received - b0[1]

    def _score_request(self, tokens: list[int], first: int, echo: bool) -> np.ndarray:
        n = len(tokens)
        if self.api == "sglang":
            return self._score_sglang(tokens, first)
        resp = self._completion(tokens, echo)
        self._account(resp, tokens, echo)
        choice = resp["choices"][0]
        entries = top_logprob_entries(resp)
        out = np.empty((n - first, self.n_vocab), np.float32)
        if not self.ids_prompt and echo:
            self._check_echo_tokens(choice, tokens)
        elif not self.ids_prompt:
            got = (resp.get("usage") or {}).get("prompt_tokens")
            if got is not None and got != n:
                raise RemoteLMError(f"the server re-tokenised a {n}-token text prompt into {got} tokens "
                                    f"(non-canonical token sequence): this server cannot take token ids")
        stop = choice.get("finish_reason") == "stop"
        for r in range(first, n):
            if self.layout == "shifted":
                e = entries[r] if echo else (entries[0] if entries else None)
                if r == 0 and echo:  # the first entry is always null there: ask for it alone
                    out[0] = self._score([tokens[0]], 0)[0]
                    continue
                spurious = tokens[r] if echo else None
            else:  # entry k predicts token k (entry n: the generated token); without echo only that one
                k = r + 1 if echo else 0
                e = entries[k] if k < len(entries) else None
                spurious = None
            nxt = tokens[r + 1] if r + 1 < n else None
            if e is None and r == n - 1 and stop:
                out[r - first] = self._eos_row()
                continue
            if e is None:
                raise RemoteLMError(f"the server returned no log-probs for position {r} of {n}")
            out[r - first] = dense_row(self._keyed(e, nxt, spurious), self.n_vocab)
        return out

    def _score_sglang(self, tokens: list[int], first: int) -> np.ndarray:
        n = len(tokens)
        body = {"input_ids": list(tokens), "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
                "return_logprob": True, "logprob_start_len": first, "top_logprobs_num": self.top_n}
        resp = self._http.call("POST", "/generate", body)
        meta = resp.get("meta_info") or {}
        if "cached_tokens" in meta:
            self._reprocessed(n - int(meta["cached_tokens"]), n, first < n - 1)
            self.stats.reprocessed_source = "server"
        itop = meta.get("input_top_logprobs") or []
        itok = meta.get("input_token_logprobs") or []
        otop = meta.get("output_top_logprobs") or []
        out = np.empty((n - first, self.n_vocab), np.float32)
        # entry j is position first + j: the distribution that predicts that token, i.e. the row after first + j − 1
        for r in range(first, n - 1):
            j = r + 1 - first
            if j >= len(itop) or not itop[j]:
                raise RemoteLMError(f"SGLang returned no input_top_logprobs for position {r + 1} of {n}")
            known = {int(t[1]): float(t[0]) for t in itop[j] if t and t[0] is not None}
            if j < len(itok) and itok[j] and itok[j][0] is not None:
                known.setdefault(int(itok[j][1]), float(itok[j][0]))
            out[r - first] = dense_row(known, self.n_vocab)
        if not otop or not otop[0]:
            raise RemoteLMError("SGLang returned no output_top_logprobs")
        last = {int(t[1]): float(t[0]) for t in otop[0] if t and t[0] is not None}
        out[n - 1 - first] = dense_row(last, self.n_vocab)
        return out

    def _account(self, resp: dict, tokens: list[int], echo: bool) -> None:
        usage = resp.get("usage") or {}
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        if cached is not None:
            self._reprocessed(len(tokens) - int(cached), len(tokens), echo)
            self.stats.reprocessed_source = "server"
        else:
            from engine.core.verify import common_prefix

            k = min(common_prefix(self._last_sent, tokens), len(tokens) - 1)
            self._reprocessed(len(tokens) - k, len(tokens), echo)
            self.stats.reprocessed_source = "estimate: single-slot prefix cache"
        self._last_sent = list(tokens)

    def _reprocessed(self, k: int, n: int, echo: bool) -> None:
        self.stats.reprocessed_tokens += k
        if echo:
            self.stats.echo_reprocessed_tokens += k
            self.stats.echo_prompt_tokens += n

    def _check_echo_tokens(self, choice: dict, tokens: list[int]) -> None:
        got = (choice.get("logprobs") or {}).get("tokens") or []
        pieces = self.tok.pieces()
        want = [pieces[t] if 0 <= t < len(pieces) else None for t in tokens]
        if len(got) < len(tokens) or any(w is not None and g != w for g, w in zip(got, want)):
            d = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(tokens)))
            raise RemoteLMError(f"the server re-tokenised the text prompt differently at token {d} "
                                f"({got[d:d + 3]} vs {want[d:d + 3]}): this server cannot take token ids")

    def _keyed(self, entry: dict, nxt: int | None, spurious: int | None) -> dict[int, float]:
        """Top-logprob entry {key: logprob} → {token id: logprob}."""
        if spurious is not None and len(entry) > self.top_n and self.tok is not None:
            entry = dict(entry)
            entry.pop(self.tok.pieces()[spurious], None)  # llama-cpp-python adds the *current* token's value
        out: dict[int, float] = {}
        for key, lp in entry.items():
            if lp is None:
                continue
            if isinstance(key, str) and key.startswith("token_id:"):
                i = int(key[9:])
            else:
                i = self._resolve(key, nxt)
            if i is not None and 0 <= i < self.n_vocab and i not in out:
                out[i] = float(lp)
        return out

    def _resolve(self, piece: str, nxt: int | None) -> int | None:
        """Token id of a string key: unique in the vocabulary, else the next token if its text matches, else an
        end-of-turn id (special tokens all read as ""), else the smallest id."""
        if self._str2ids is None:
            if self.tok is None:
                raise RemoteLMError("string-keyed log-probs need the model's tokenizer (llm.tokenizer)")
            m: dict[str, list[int]] = {}
            for i, s in enumerate(self.tok.pieces()):
                m.setdefault(s, []).append(i)
            self._str2ids = m
        ids = self._str2ids.get(piece)
        if not ids:
            return None
        if len(ids) == 1:
            return ids[0]
        if nxt is not None and nxt in ids:
            return nxt
        eos = [i for i in ids if i in self.eos_ids]
        return self._stop_id() if eos and self._stop_id() in ids else (min(eos) if eos else ids[0])

    def _stop_id(self) -> int:
        if not hasattr(self, "_stop"):
            ids = self.tokenize("<|im_end|>", special=True)
            self._stop = ids[0] if len(ids) == 1 and ids[0] in self.eos_ids else min(self.eos_ids)
        return self._stop

    def _eos_row(self) -> np.ndarray:
        """The row of a server whose greedy next token ended the text (no log-probs returned for it)."""
        return dense_row({self._stop_id(): 0.0}, self.n_vocab)
    # -- the CausalLM protocol ---------------------------------------------------------------------------------
    @property
    def n_past(self) -> int:
        return len(self._tokens)

    def flush(self) -> None:
        """Send every ``eval`` whose rows were never read (last row only), so the server has pre-filled them."""
        while self._unsent:
            p = self._unsent.pop(0)
            p.fetch(len(p.tokens) - 1)

    def eval(self, tokens: Sequence[int]) -> RemoteRows:
        """Append ``tokens``; their rows (len(tokens), n_vocab), fetched when first read (see :class:`RemoteRows`).

        Raises:
            ValueError: empty ``tokens`` or the context window would overflow.
            RemoteLMError: (when the rows are read) the server failed.
        """
        tokens = [int(t) for t in tokens]
        if not tokens:
            raise ValueError("eval() needs at least one token")
        if len(self._tokens) + len(tokens) > self.n_ctx:
            raise ValueError(f"context window of {self.n_ctx} tokens exceeded ({len(self._tokens)}+{len(tokens)})")
        self.flush()
        start = len(self._tokens)
        self._tokens.extend(tokens)
        p = PendingEval(self._score, self._unsent, list(self._tokens), start)
        self._unsent.append(p)
        return RemoteRows(p, 0, len(tokens), self.n_vocab)

    def crop(self, n: int) -> None:
        if not 0 <= n <= len(self._tokens):
            raise ValueError(f"crop({n}) outside 0..{len(self._tokens)}")
        self.flush()
        del self._tokens[n:]

    def tokenize(self, text: str, special: bool = False) -> list[int]:
        if self.tok is not None:
            return self.tok.tokenize(text, special)
        key = (text, special)
        if key not in self._tok_cache:
            ids = self._server_tokenize(text)  # the server's endpoints parse special tokens
            self._tok_cache[key] = ids
            if len(self._tok_cache) > 4096:
                self._tok_cache.popitem(last=False)
        return list(self._tok_cache[key])

    def detokenize(self, ids: Sequence[int]) -> str:
        if self.tok is not None:
            return self.tok.detokenize(ids)
        key = tuple(int(i) for i in ids)
        if key not in self._detok_cache:
            self._detok_cache[key] = self._server_detokenize(key) if key else ""
            if len(self._detok_cache) > 65536:
                self._detok_cache.popitem(last=False)
        return self._detok_cache[key]

    def chat_prompt(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """``messages`` rendered with the served model's chat template: the local tokenizer's, else vLLM's
        ``/tokenize`` with ``messages``.

        Raises:
            RemoteLMError: neither is available.
        """
        if self.tok is not None:
            return self.tok.chat_prompt(messages, add_generation_prompt)
        if self.tokenize_path == "/tokenize" and self._tokenize_field == "prompt":
            r = self._http.call("POST", "/tokenize", {"model": self.model, "messages": messages,
                                                      "add_generation_prompt": add_generation_prompt})
            return self._server_detokenize(r["tokens"])
        raise RemoteLMError("no chat template: give the model's tokenizer (llm.tokenizer)")

    def reset_stats(self) -> None:
        for k, v in asdict(RemoteStats()).items():
            setattr(self.stats, k, v)
