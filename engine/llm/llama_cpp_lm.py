"""The causal-LM protocol (:mod:`engine.llm.protocol`) over llama.cpp (llama-cpp-python), in process.

:class:`LlamaCppLM` loads a GGUF (``logits_all=True`` so every position's logits can be read), keeps one KV
cache and renders the GGUF's own chat template. On CPUs with AMX, llama.cpp's AMX weight repack crashes the first
decode (ggml-org/llama.cpp#20824): :func:`keep_llama_weights_out_of_amx` turns it off once per process.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.core.cpu import CPUINFO, cpu_flags
from engine.llm.protocol import ModelLoadError


def default_threads() -> int:
    return max(1, os.cpu_count() or 1)


def cpu_has_amx(cpuinfo: str | Path = CPUINFO) -> bool:
    """Whether the CPU reports Intel AMX (the ``amx_tile`` flag of Sapphire Rapids and later); False where
    ``cpuinfo`` cannot be read (not Linux)."""
    return "amx_tile" in cpu_flags(cpuinfo)


@functools.cache
def keep_llama_weights_out_of_amx() -> bool:
    """On a CPU with AMX, make llama-cpp-python load every model of this process with ``use_extra_bufts = False``;
    returns whether it did (once per process; later calls return the same).

    llama.cpp built for the machine (``GGML_NATIVE``, as pip builds llama-cpp-python) repacks the weights into its
    AMX buffer type on Sapphire Rapids-class CPUs, and the first decode there can crash the process with a
    segmentation fault (ggml-org/llama.cpp#20824, seen with the Qwen2.5 Q4_K_M GGUFs used here). Without the extra
    buffer types the weights stay in plain CPU buffers (the same weights, not repacked). Other CPUs load as
    llama.cpp chooses. Called by :class:`LlamaCppLM` and :mod:`engine.llm.llama_server`.
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
        n_gpu_layers: layers offloaded to the GPU (-1 = all, 0 = none) when llama.cpp was built with GPU support
            (ignored otherwise); :func:`engine.devices.llm_placement` chooses it from ``llm.device``. The number
            actually offloaded is ``gpu_layers``.

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
