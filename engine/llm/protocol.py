"""The causal-LM protocol every speculative algorithm is written against.

The protocol is deliberately small (STYLE.md: "small protocols make new algorithms cheap"):

    lm.eval(tokens)  -> logits at every position, float32 array of shape (len(tokens), n_vocab);
                        row i is the next-token distribution after tokens[i]. The tokens are appended
                        after the ``lm.n_past`` tokens already in the KV cache.
    lm.crop(n)       -> keep only the first n tokens of the KV cache (n <= n_past).
    lm.tokenize(text, special=False) / lm.detokenize(ids)
    lm.n_past, lm.n_vocab, lm.eos_ids

Draft/target verification (CTC-SSD, SpecASR, PredGen, SSBD, PCG) is then: ``crop`` to the verified prefix, ``eval``
the draft in one pass, compare the rows with the draft under one of the acceptance rules of :mod:`engine.core.verify`.

Adapters:
    * :class:`engine.llm.llama_cpp_lm.LlamaCppLM` — llama-cpp-python (GGUF; CPU, or GPU layers offloaded when built with CUDA/Metal).
    * :class:`engine.llm.torch_lm.TorchCausalLM` — any transformers causal LM (``past_key_values`` DynamicCache).
    * :class:`engine.asr.whisper_torch.WhisperDecoderLM` — the torch Whisper decoder conditioned on one encoder output
      (plus one-pass token-tree evaluation).
    * :class:`engine.synthesis.codec_lm_session.CodecLMSession` — the codec LM (target or draft layers) over one
      utterance.
    * :class:`engine.asr.whisper_ct2.CT2WhisperDecoder` — CTranslate2's Whisper decoder, which keeps no KV cache between
      calls and returns no per-position logits: it implements the verification form, :class:`TokenScorer`
      (p(draft token | prefix) for every draft token in one pass), and continues greedily from a prefix.
"""

from __future__ import annotations

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
    server's streamed completion). :func:`engine.llm.generate.greedy_stream` and :class:`engine.llm.generate.GreedySteps`
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












class ModelLoadError(RuntimeError):
    """A model file exists but cannot be loaded."""
