"""The causal-LM protocol every speculative algorithm is written against, and its adapters.

The protocol is deliberately small (STYLE.md: "small protocols make new algorithms cheap"):

    lm.eval(tokens)  -> logits at every position, float32 array of shape (len(tokens), n_vocab);
                        row i is the next-token distribution after tokens[i]. The tokens are appended
                        after the ``lm.n_past`` tokens already in the KV cache.
    lm.crop(n)       -> keep only the first n tokens of the KV cache (n <= n_past).
    lm.tokenize(text, special=False) / lm.detokenize(ids)
    lm.n_past, lm.n_vocab, lm.eos_ids

Draft/target verification (CTC-SSD, SpecASR, PredGen, SSBD, PCG) is then: ``crop`` to the verified prefix, ``eval``
the draft in one pass, compare the rows with the draft under one of the acceptance rules of :mod:`engine.verify`.

Adapters:
    * :class:`LlamaCppLM` — llama-cpp-python (GGUF; CPU, or GPU layers offloaded when built with CUDA/Metal).
    * :class:`TorchCausalLM` — any transformers causal LM (``past_key_values`` DynamicCache).
    * :class:`engine.whisper_torch.WhisperDecoderLM` — the torch Whisper decoder conditioned on one encoder output
      (plus one-pass token-tree evaluation).
    * :class:`tts.codec_lm.CodecLMSession` — the codec LM (target or draft layers) over one utterance.
    * :class:`engine.ct2_whisper.CT2WhisperDecoder` — CTranslate2's Whisper decoder, which keeps no KV cache between
      calls and returns no per-position logits: it implements the verification form, :class:`TokenScorer`
      (p(draft token | prefix) for every draft token in one pass), and continues greedily from a prefix.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Iterator, Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class CausalLM(Protocol):
    """Evaluate tokens → logits at every position; crop the KV cache; (de)tokenize."""

    n_vocab: int
    eos_ids: frozenset[int]

    @property
    def n_past(self) -> int:
        """Tokens currently held in the KV cache."""
        ...

    def eval(self, tokens: Sequence[int]) -> np.ndarray:
        """Append ``tokens`` to the cache; return float32 logits of shape (len(tokens), n_vocab).

        Raises:
            ValueError: empty ``tokens`` or the context window would overflow.
        """
        ...

    def crop(self, n: int) -> None:
        """Keep the first ``n`` cached tokens (0 <= n <= n_past).

        Raises:
            ValueError: n out of range.
        """
        ...

    def tokenize(self, text: str, special: bool = False) -> list[int]: ...

    def detokenize(self, ids: Sequence[int]) -> str: ...


@runtime_checkable
class GreedyDecoder(Protocol):
    """Optional capability of a :class:`CausalLM`: greedy decoding of a whole continuation in one call (an LLM
    server's streamed completion). :func:`engine.generate.greedy_stream` and :class:`engine.generate.GreedySteps`
    use it when the LM has it, else one ``eval`` per token. After a call, ``finish_reason`` (optional attribute)
    says why it ended: "stop" (end of the answer), "length" or "cancel"."""

    def generate(self, tokens: Sequence[int], max_tokens: int, stop_ids: frozenset[int] | set[int] = frozenset(),
                 stop: Sequence[str] = (), cancel=None) -> Iterator[int]:
        """Greedy continuation of ``tokens`` (the whole context; the KV cache is made to hold it): yield token ids
        as they are decoded, until a stop id (not yielded), a stop string, ``max_tokens`` or ``cancel`` (a
        ``threading.Event``). Afterwards the cache holds ``tokens`` ⊕ the yielded ids (``n_past`` says so).

        Raises:
            ValueError: empty ``tokens`` or the context window would overflow.
        """
        ...


@runtime_checkable
class TokenScorer(Protocol):
    """The verification form of the protocol, for a decoder without per-position logits or a persistent cache."""

    n_forward: int

    def token_probs(self, context: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        """ONE pass over ``context`` ⊕ ``tokens``: float64 (len(tokens),), p(tokens[i] | context, tokens[<i])."""
        ...


def default_threads() -> int:
    return max(1, os.cpu_count() or 1)


def cpu_has_amx(cpuinfo: str | Path = "/proc/cpuinfo") -> bool:
    """Whether the CPU reports Intel AMX (the ``amx_tile`` flag of Sapphire Rapids and later); False where
    ``cpuinfo`` cannot be read (not Linux)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return False
    return any(line.startswith("flags") and " amx_tile" in line for line in text.splitlines())


@functools.cache
def keep_llama_weights_out_of_amx() -> bool:
    """On a CPU with AMX, make llama-cpp-python load every model of this process with ``use_extra_bufts = False``;
    returns whether it did (once per process; later calls return the same).

    llama.cpp built for the machine (``GGML_NATIVE``, as pip builds llama-cpp-python) repacks the weights into its
    AMX buffer type on Sapphire Rapids-class CPUs, and the first decode there can crash the process with a
    segmentation fault (ggml-org/llama.cpp#20824, seen with the Qwen2.5 Q4_K_M GGUFs used here). Without the extra
    buffer types the weights stay in plain CPU buffers (the same weights, not repacked). Other CPUs load as
    llama.cpp chooses. Called by :class:`LlamaCppLM` and :mod:`engine.llama_server`.
    """
    if not cpu_has_amx():
        return False
    from llama_cpp import llama as llama_mod

    low = llama_mod.llama_cpp
    default = low.llama_model_default_params

    def params():
        mp = default()
        if hasattr(mp, "use_extra_bufts"):
            mp.use_extra_bufts = False
        return mp

    low.llama_model_default_params = params
    return True


class LlamaCppLM:
    """:class:`CausalLM` over llama-cpp-python.

    Per-position logits need ``logits_all=True`` (../shared/MODELS.md: with it off ``scores`` is not filled).
    The chat template is the GGUF's own (``tokenizer.chat_template``), rendered with llama-cpp-python's
    ``Jinja2ChatFormatter``.

    Args:
        model_path: a .gguf file.
        n_ctx: context window, tokens.
        n_threads: CPU threads (0 = all cores).
        n_gpu_layers: layers offloaded to the GPU (-1 = all) when llama.cpp was built with GPU support.

    Raises:
        ModelLoadError: llama-cpp-python missing, or the file is not a loadable GGUF.
    """

    def __init__(self, model_path: str | Path, n_ctx: int = 4096, n_threads: int = 0, n_gpu_layers: int = -1,
                 seed: int = 0):
        try:
            import llama_cpp
        except ImportError:
            raise ModelLoadError("llama-cpp-python is not installed (pip install llama-cpp-python==0.3.36)") from None
        self._llama_cpp = llama_cpp
        gpu = n_gpu_layers if llama_cpp.llama_supports_gpu_offload() else 0
        keep_llama_weights_out_of_amx()
        try:
            self.llm = llama_cpp.Llama(
                model_path=str(model_path), n_ctx=n_ctx, n_threads=n_threads or default_threads(),
                n_gpu_layers=gpu, logits_all=True, verbose=False, seed=seed, n_batch=512,
            )
        except (ValueError, RuntimeError, OSError) as e:
            raise ModelLoadError(f"cannot load GGUF model {model_path}: {e}") from None
        self.path = Path(model_path)
        self.n_vocab = self.llm.n_vocab()
        self.n_ctx = n_ctx
        eos = {self.llm.token_eos()}
        for t in ("<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<|eot_id|>"):
            ids = self.llm.tokenize(t.encode(), add_bos=False, special=True)
            if len(ids) == 1:
                eos.add(ids[0])
        self.eos_ids = frozenset(eos)
        self.gpu_layers = gpu
        self._cancel = None  # the event eval_cancellable watches (llama.cpp's abort callback reads it)
        self._abort_cb = llama_cpp.ggml_abort_callback(lambda _data: self._cancel is not None and self._cancel.is_set())
        self._no_abort_cb = llama_cpp.ggml_abort_callback()  # NULL: no per-node call outside eval_cancellable

    @property
    def n_past(self) -> int:
        return self.llm.n_tokens

    def eval_cancellable(self, tokens: Sequence[int], cancel) -> np.ndarray | None:
        """:meth:`eval` that stops within one graph node once ``cancel`` (a ``threading.Event``) is set: llama.cpp's
        abort callback, installed for this call only (it runs between the graph's nodes, ≈ 1 000 per pass of a 1.5B,
        so other calls do not pay for it). An aborted pass leaves nothing: ``n_past`` and the cache are as before.

        Returns:
            float32 (len(tokens), n_vocab) logits, or None when cancelled (before or during the pass).

        Raises:
            ValueError: empty ``tokens`` or the context window exceeded.
        """
        if cancel is None:
            return self.eval(tokens)
        if cancel.is_set():
            return None
        import logging

        ctx = self.llm._ctx.ctx
        n0 = self.llm.n_tokens
        log = logging.getLogger("llama-cpp-python")  # llama.cpp reports an aborted decode at its error level
        level = log.level
        self._cancel = cancel
        self._llama_cpp.llama_set_abort_callback(ctx, self._abort_cb, None)
        log.setLevel(logging.CRITICAL)
        try:
            return self.eval(tokens)
        except RuntimeError:
            if not cancel.is_set():
                raise
            self.llm._ctx.kv_cache_seq_rm(-1, n0, -1)  # what the aborted pass may have written
            self.llm.n_tokens = n0
            return None
        finally:
            log.setLevel(level)
            self._llama_cpp.llama_set_abort_callback(ctx, self._no_abort_cb, None)
            self._cancel = None

    def eval(self, tokens: Sequence[int]) -> np.ndarray:
        tokens = list(tokens)
        if not tokens:
            raise ValueError("eval() needs at least one token")
        start = self.llm.n_tokens
        if start + len(tokens) > self.n_ctx:
            raise ValueError(f"context window of {self.n_ctx} tokens exceeded ({start}+{len(tokens)})")
        self.llm.eval(tokens)
        return np.array(self.llm.scores[start : start + len(tokens)], dtype=np.float32)

    def crop(self, n: int) -> None:
        if not 0 <= n <= self.llm.n_tokens:
            raise ValueError(f"crop({n}) outside 0..{self.llm.n_tokens}")
        if n == self.llm.n_tokens:
            return
        # Llama.eval() removes cache entries past n_tokens before decoding (kv_cache_seq_rm(-1, n_tokens, -1));
        # remove them now as well so the memory state always equals n_past.
        self.llm._ctx.kv_cache_seq_rm(-1, n, -1)
        self.llm.n_tokens = n

    def set_threads(self, n: int) -> None:
        """CPU threads for the following evaluations (0 = all cores); lets speculation leave a core to the ASR."""
        n = n or default_threads()
        self.llm._ctx.set_n_threads(n, n)

    def tokenize(self, text: str, special: bool = False) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.llm.detokenize(list(ids)).decode("utf-8", errors="replace")

    def detokenize_bytes(self, ids: Sequence[int]) -> bytes:
        return self.llm.detokenize(list(ids))

    def chat_prompt(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """Render ``messages`` ([{"role", "content"}]) with the GGUF's chat template."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = self.llm.metadata.get("tokenizer.chat_template")
        if not template:
            # base models (e.g. Gemma-270M base) have none: a plain transcript
            text = "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages)
            return text + ("Assistant:" if add_generation_prompt else "")
        eos = self.llm.detokenize([self.llm.token_eos()]).decode("utf-8", errors="replace")
        bos = self.llm.detokenize([self.llm.token_bos()]).decode("utf-8", errors="replace")
        fmt = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos,
                                  add_generation_prompt=add_generation_prompt)
        return fmt(messages=messages).prompt


class TorchCausalLM:
    """:class:`CausalLM` over a transformers causal LM (``AutoModelForCausalLM``), CPU or CUDA.

    Args:
        model: a loaded causal LM, or a local path / hub id to load; a ``.gguf`` file is dequantised to float32 by
            transformers (needs the ``gguf`` and ``accelerate`` packages), e.g. the embedded Qwen GGUFs, so the
            same weights run on an adapter whose batched and one-at-a-time logits agree.
        tokenizer: its tokenizer (loaded from the same place when ``model`` is a path).
    """

    def __init__(self, model, tokenizer=None, device: str | None = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

        if isinstance(model, (str, Path)) and str(model).endswith(".gguf"):
            p = Path(model)
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
            model = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=torch.float32)
        elif isinstance(model, (str, Path)):
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(str(model))
            model = AutoModelForCausalLM.from_pretrained(str(model))
        self.torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model = model.to(self.device).eval()
        self.tok = tokenizer
        self.n_vocab = int(model.config.vocab_size)
        eos = model.config.eos_token_id
        self.eos_ids = frozenset(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        self._cache_cls = DynamicCache
        self.cache = DynamicCache()
        self._n = 0

    @property
    def n_past(self) -> int:
        return self._n

    def eval(self, tokens: Sequence[int]) -> np.ndarray:
        tokens = list(tokens)
        if not tokens:
            raise ValueError("eval() needs at least one token")
        t = self.torch
        ids = t.tensor([tokens], device=self.device)
        pos = t.arange(self._n, self._n + len(tokens), device=self.device)[None]
        with t.inference_mode():
            out = self.model(input_ids=ids, past_key_values=self.cache, use_cache=True, position_ids=pos)
        self.cache = out.past_key_values
        self._n += len(tokens)
        return out.logits[0].float().cpu().numpy()

    def crop(self, n: int) -> None:
        if not 0 <= n <= self._n:
            raise ValueError(f"crop({n}) outside 0..{self._n}")
        if n == 0:
            self.cache = self._cache_cls()
        elif n < self._n:
            self.cache.crop(n - self._n)  # negative = tokens to remove (transformers 4.x and 5.x)
        self._n = n

    def tokenize(self, text: str, special: bool = False) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False, split_special_tokens=not special)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids))

    def chat_prompt(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The tokenizer's chat template when it has one, else a plain "Role: text" transcript."""
        if getattr(self.tok, "chat_template", None):
            return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
        text = "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages)
        return text + ("Assistant:" if add_generation_prompt else "")


class ModelLoadError(RuntimeError):
    """A model file exists but cannot be loaded."""
