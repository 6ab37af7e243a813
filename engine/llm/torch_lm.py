"""The causal-LM protocol (:mod:`engine.llm.protocol`) over a transformers model in torch.

:class:`TorchCausalLM` loads a local folder, a hub id or a GGUF (dequantised by transformers) and keeps a
``DynamicCache`` that it crops on rejection, so every speculative method can run on torch (CPU or CUDA).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np


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
