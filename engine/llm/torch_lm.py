"""The causal-LM protocol (:mod:`engine.llm.protocol`) over a transformers model in torch.

:class:`TorchCausalLM` loads a local folder, a hub id or a GGUF (dequantised by transformers) and keeps a
``DynamicCache`` that it crops on rejection, so every speculative method can run on torch: float32 on the CPU,
bfloat16 on CUDA (the LLM backend on a GPU where llama.cpp was built without CUDA,
:func:`engine.devices.llm_placement`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from engine.config import LlmConfig


class TorchCausalLM:
    """:class:`CausalLM` over a transformers causal LM (``AutoModelForCausalLM``), CPU or CUDA.

    Args:
        model: a loaded causal LM, or a local path / hub id to load; a ``.gguf`` file is dequantised by transformers
            (needs the ``gguf`` and ``accelerate`` packages), e.g. the embedded Qwen GGUFs, so the same weights run
            on an adapter whose batched and one-at-a-time logits agree, or on a GPU where llama.cpp was built
            without CUDA (:func:`engine.devices.llm_placement`).
        tokenizer: its tokenizer (loaded from the same place when ``model`` is a path).
        device: "cpu", "cuda" or None / "auto" (CUDA when torch sees a device: :func:`engine.devices.resolve_device`,
            family ``llm``).
        dtype: torch dtype (or its name) of a model loaded here: None = bfloat16 on CUDA, float32 on the CPU. A
            model passed in keeps its dtype.
        n_ctx: context window, tokens (``eval`` past it raises ValueError); default ``llm.n_ctx``'s, as
            :class:`engine.llm.llama_cpp_lm.LlamaCppLM`; 0 = no limit here.
        cache_dir: where a dequantised GGUF is kept (:func:`load_gguf`), so only the first load pays the conversion
            (minutes on a few cores: every tensor and the 150k-token vocabulary); None = convert every time.

    Raises:
        engine.devices.DeviceError: ``device="cuda"`` without a CUDA device visible to torch.
    """

    def __init__(self, model, tokenizer=None, device: str | None = None, dtype=None, n_ctx: int = LlmConfig.n_ctx,
                 cache_dir: str | Path | None = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

        from engine.devices import resolve_device, torch_dtype_name

        self.device = resolve_device(device or "auto", "llm", "torch")
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        load_dtype = dtype or getattr(torch, torch_dtype_name(self.device, "llm"))
        if isinstance(model, (str, Path)) and str(model).endswith(".gguf"):
            model, gguf_tok = load_gguf(Path(model), load_dtype, cache_dir)
            tokenizer = tokenizer or gguf_tok
        elif isinstance(model, (str, Path)):
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(str(model))
            model = AutoModelForCausalLM.from_pretrained(str(model), dtype=load_dtype)
        elif dtype is not None:
            model = model.to(dtype)
        self.torch = torch
        self.model = model.to(self.device).eval()
        self.dtype = next(self.model.parameters()).dtype
        self.tok = tokenizer
        self.n_vocab = int(model.config.vocab_size)
        self.n_ctx = int(n_ctx) if n_ctx else 1 << 30  # rotary models run past max_position_embeddings
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
        if self._n + len(tokens) > self.n_ctx:
            raise ValueError(f"context window of {self.n_ctx} tokens exceeded ({self._n}+{len(tokens)})")
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


class _OneParse:
    """Within the block, ``gguf.GGUFReader`` of a file already read returns the same reader: transformers reads a
    GGUF once for the tokenizer, once for the configuration and once for the weights, and parsing the metadata of a
    150k-token vocabulary takes seconds each time. The reader is read-only (a memory map)."""

    def __enter__(self):
        import gguf

        self._module, self._orig, readers = gguf, gguf.GGUFReader, {}
        orig = self._orig

        def reader(path, *args, **kwargs):
            key = (str(Path(path).resolve()), args, tuple(sorted(kwargs.items())))
            if key not in readers:
                readers[key] = orig(path, *args, **kwargs)
            return readers[key]

        gguf.GGUFReader = reader
        return self

    def __exit__(self, *exc):
        self._module.GGUFReader = self._orig
        return False


def load_gguf(path: Path, dtype, cache_dir: str | Path | None = None):
    """A GGUF dequantised by transformers into ``dtype``: (model, tokenizer).

    With ``cache_dir``, the converted model and tokenizer are saved once under ``cache_dir/torch_gguf/`` (safetensors,
    one folder per GGUF and dtype, keyed by the GGUF's name, size and modification time) and later loads read that
    folder; a changed GGUF is converted again. The conversion is deterministic, so a cached load gives the same
    weights.

    Raises:
        OSError, ValueError: the GGUF cannot be read or converted (transformers' own errors).
    """
    import json
    import shutil

    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    if cache_dir is None:
        with _OneParse():
            tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype), tok
    st = path.stat()
    source = {"gguf": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "dtype": str(dtype)}
    d = Path(cache_dir).expanduser() / "torch_gguf" / f"{path.stem}-{str(dtype).removeprefix('torch.')}"
    try:
        fresh = json.loads((d / "source.json").read_text()) == source
    except (OSError, ValueError):
        fresh = False
    if fresh:
        return AutoModelForCausalLM.from_pretrained(str(d), dtype=dtype), AutoTokenizer.from_pretrained(str(d))
    with _OneParse():
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype)
    tmp = d.with_name(d.name + ".partial")
    try:  # written beside, then renamed: an interrupted save is never read as a cache
        from safetensors.torch import save_model

        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        # the weights as they are now, dense; transformers refuses save_pretrained on a model loaded from a GGUF, and
        # its config names the GGUF loader, which a folder of dense weights must not go through
        model.config.save_pretrained(str(tmp))
        cfg = json.loads((tmp / "config.json").read_text())
        cfg.pop("quantization_config", None)
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
        save_model(model, str(tmp / "model.safetensors"))  # tied embeddings are written once
        tok.save_pretrained(str(tmp))
        (tmp / "source.json").write_text(json.dumps(source))
        shutil.rmtree(d, ignore_errors=True)
        tmp.rename(d)
    except (OSError, ValueError, RuntimeError):  # a full or read-only disk: loaded anyway, the next start pays again
        shutil.rmtree(tmp, ignore_errors=True)
    return model, tok
