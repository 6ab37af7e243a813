"""Whisper in torch with full decoder control: encoder once, decoder as a :class:`engine.llm.protocol.CausalLM`.

The weights are the CTranslate2 fp16 weights of the same role (``engine.asr.whisper_ct2``), so greedy decoding here
matches faster-whisper's greedy decoding (tests/test_whisper_parity.py). Features come from faster-whisper's
numpy ``FeatureExtractor`` (80 or 128 log-mel bins, 10 ms hop, 30 s window).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from audio.io import SAMPLE_RATE
from engine.asr.whisper_ct2 import load_whisper_torch

N_SAMPLES = 30 * SAMPLE_RATE


@dataclass(frozen=True)
class DecodeResult:
    """Greedy decoding output.

    Attributes:
        tokens: generated text tokens (no prompt, no EOT).
        text: decoded text.
        n_forward: decoder forward passes used.
    """

    tokens: list[int]
    text: str
    n_forward: int


class WhisperDecoderLM:
    """:class:`engine.llm.protocol.CausalLM` over the Whisper decoder for one encoder output.

    ``eval(tokens)`` returns float32 logits (len(tokens), n_vocab) with Whisper's suppression applied only by the
    caller (logits here are raw). The self-attention KV cache is cropped with :meth:`crop`; cross-attention K/V
    are computed once per encoder output and kept.
    """

    def __init__(self, whisper: "TorchWhisper", encoder_out):
        from transformers import DynamicCache, EncoderDecoderCache

        self.w = whisper
        self.enc = encoder_out
        self._mk = lambda: EncoderDecoderCache(DynamicCache(), DynamicCache())
        self.cache = self._mk()
        self._n = 0
        self.n_vocab = whisper.model.config.vocab_size
        self.eos_ids = frozenset([whisper.eot])
        self.n_forward = 0

    @property
    def n_past(self) -> int:
        return self._n

    def eval(self, tokens: Sequence[int]) -> np.ndarray:
        return self.eval_torch(tokens).float().cpu().numpy()

    def eval_torch(self, tokens: Sequence[int], attention_mask=None, position_ids=None):
        """Like :meth:`eval` but returns a torch tensor; ``attention_mask`` (1, 1, q, n_past+q) additive float
        and ``position_ids`` (1, q) allow token-tree verification."""
        import torch

        tokens = list(tokens)
        if not tokens:
            raise ValueError("eval() needs at least one token")
        if self._n + len(tokens) > self.w.model.config.max_target_positions:
            raise ValueError("Whisper decoder context (448 tokens) exceeded")
        ids = torch.tensor([tokens], device=self.w.device)
        kwargs = {}
        if position_ids is not None:
            kwargs["position_ids"] = position_ids
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        with torch.inference_mode():
            out = self.w.model.model.decoder(
                input_ids=ids, encoder_hidden_states=self.enc, past_key_values=self.cache, use_cache=True,
                cache_position=torch.arange(self._n, self._n + len(tokens), device=self.w.device), **kwargs,
            )
            logits = self.w.model.proj_out(out.last_hidden_state)[0]
        self.cache = out.past_key_values
        self._n += len(tokens)
        self.n_forward += 1
        return logits

    def eval_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        """Evaluate a token tree in ONE pass (SpecInfer-style tree attention, as SpecASR §IV-C verifies drafts).

        Args:
            tokens: tree nodes in topological order (a parent precedes its children).
            parents: parents[i] = index of node i's parent, or -1 for a root (root nodes follow the cached
                context directly).

        Returns:
            float32 (len(tokens), n_vocab): row i = logits after the path root..i, as if that path alone had been
            evaluated sequentially. Every node stays in the KV cache; keep one path with :meth:`keep_path`.
        """
        import torch

        q = len(tokens)
        depth = [0] * q
        allowed = torch.zeros(q, q, dtype=torch.bool)
        for i, p in enumerate(parents):
            if p >= i:
                raise ValueError("eval_tree: a parent must precede its child")
            if p >= 0:
                depth[i] = depth[p] + 1
                allowed[i] = allowed[p]
            allowed[i, i] = True
        n = self._n
        mask = torch.zeros(1, 1, q, n + q, dtype=self.w.dtype)
        mask[0, 0, :, n:].masked_fill_(~allowed, torch.finfo(self.w.dtype).min)
        pos = torch.tensor([[n + d for d in depth]])
        return self.eval_torch(tokens, attention_mask=mask.to(self.w.device),
                               position_ids=pos.to(self.w.device)).float().cpu().numpy()

    def keep_path(self, base: int, nodes: Sequence[int]) -> None:
        """After :meth:`eval_tree` at context length ``base``: keep the cached context [0, base) plus the tree
        nodes ``nodes`` (indices into that tree, a root-to-leaf path), in order; drop the rest of the tree."""
        import torch

        idx = torch.tensor(list(range(base)) + [base + i for i in nodes], device=self.w.device)
        for layer in self.cache.self_attention_cache.layers:
            layer.keys = layer.keys.index_select(2, idx)
            layer.values = layer.values.index_select(2, idx)
        self._n = base + len(nodes)

    def crop(self, n: int) -> None:
        if not 0 <= n <= self._n:
            raise ValueError(f"crop({n}) outside 0..{self._n}")
        if n < self._n:
            self.cache.self_attention_cache.crop(n - self._n)
        self._n = n

    def tokenize(self, text: str, special: bool = False) -> list[int]:
        return self.w.fw_tokenizer.encode(text)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.w.tokenizer.decode([i for i in ids if i < self.w.eot])


class TorchWhisper:
    """Whisper (CTranslate2 weights) in torch.

    Args:
        model_dir: CTranslate2 Whisper directory (model.bin, config.json, tokenizer.json).
        device: "cpu", "cuda" or None / "auto" (CUDA when torch sees a device: :func:`engine.devices.resolve_device`,
            family ``asr``). The weights are float16 on CUDA (the stored CTranslate2 precision), float32 on the CPU.
        threads: torch intra-op threads on CPU (0 = leave as is).

    Raises:
        ValueError: not a Whisper CTranslate2 directory.
        engine.devices.DeviceError: ``device="cuda"`` without a CUDA device visible to torch.
    """

    def __init__(self, model_dir: str | Path, device: str | None = None, threads: int = 0):
        import torch
        from faster_whisper.feature_extractor import FeatureExtractor
        from faster_whisper.tokenizer import Tokenizer

        from engine.asr.tokenizer import load_hf_tokenizer
        from engine.devices import resolve_device, torch_dtype_name

        if threads:
            torch.set_num_threads(threads)
        self.device = resolve_device(device or "auto", "asr", "torch")
        dtype = getattr(torch, torch_dtype_name(self.device, "asr"))
        self.model = load_whisper_torch(model_dir, dtype=dtype).to(self.device)
        self.dtype = dtype
        cfg = self.model.config
        self.multilingual = cfg.vocab_size >= 51865
        self.features = FeatureExtractor(feature_size=cfg.num_mel_bins)
        hf_tok = load_hf_tokenizer(model_dir)
        self.fw_tokenizer = Tokenizer(hf_tok, self.multilingual, task="transcribe",
                                      language="en" if self.multilingual else None)
        self.tokenizer = self.fw_tokenizer.tokenizer  # tokenizers.Tokenizer
        self.eot = self.fw_tokenizer.eot
        self.no_timestamps = self.fw_tokenizer.no_timestamps
        gc = self.model.generation_config
        self.suppress = sorted(set(gc.suppress_tokens) | self._non_text_specials())
        self.suppress_begin = list(gc.begin_suppress_tokens or [])

    def _non_text_specials(self) -> set[int]:
        # faster-whisper's suppress_tokens=[-1] = config suppress_ids + the special tokens but EOT
        t = self.fw_tokenizer
        s = {t.transcribe, t.translate, t.sot, t.sot_prev, t.sot_lm, t.no_speech}
        return {i for i in s if i is not None}

    def prompt(self, language: str = "en", without_timestamps: bool = True) -> list[int]:
        """SOT sequence: [<|startoftranscript|>, <|en|>, <|transcribe|>, <|notimestamps|>] (multilingual) or
        [<|startoftranscript|>, <|notimestamps|>] (English-only)."""
        from faster_whisper.tokenizer import Tokenizer

        t = Tokenizer(self.tokenizer, self.multilingual, task="transcribe",
                      language=language if self.multilingual else None)
        seq = list(t.sot_sequence)
        if without_timestamps:
            seq.append(t.no_timestamps)
        return seq

    def log_mel(self, audio: np.ndarray, n_frames: int = 3000):
        """audio float32 (n_samples,) at 16 kHz, ≤ n_frames · 160 samples → torch (1, n_mels, n_frames); 3000 =
        the padded 30 s window (see :func:`engine.asr.window.log_mel`)."""
        import torch

        from engine.asr.window import log_mel

        audio = np.asarray(audio, dtype=np.float32)[: n_frames * 160]
        feats = log_mel(self.features, audio, n_frames)
        return torch.from_numpy(feats)[None].to(self.device, self.dtype)

    def encode(self, audio: np.ndarray, n_frames: int = 3000):
        """Encoder output (1, n_frames / 2, d_model) for ≤ 30 s of 16 kHz audio in a window of ``n_frames`` mel
        frames (even, ≤ 3000). A shorter window slices the sinusoidal position table ``embed_positions`` (the
        first n_frames / 2 positions, as whisper.cpp's ``audio_ctx``); 3000 is transformers' own forward.

        Raises:
            ValueError: n_frames odd or outside 2..3000.
        """
        import torch

        if n_frames % 2 or not 2 <= n_frames <= 3000:
            raise ValueError(f"n_frames must be even and in 2..3000, not {n_frames}")
        x = self.log_mel(audio, n_frames)
        enc = self.model.model.encoder
        with torch.inference_mode():
            if n_frames == 3000:
                return enc(x).last_hidden_state
            h = torch.nn.functional.gelu(enc.conv1(x))
            h = torch.nn.functional.gelu(enc.conv2(h)).permute(0, 2, 1)
            h = h + enc.embed_positions.weight[: h.shape[1]]
            for layer in enc.layers:
                out = layer(h, None)
                h = out[0] if isinstance(out, tuple) else out
            return enc.layer_norm(h)

    def decoder(self, encoder_out) -> WhisperDecoderLM:
        return WhisperDecoderLM(self, encoder_out)

    def suppress_logits(self, logits: np.ndarray, first: bool) -> np.ndarray:
        """Apply Whisper's token suppression to logits (n_vocab,) or rows (n, n_vocab), in place, and return them;
        ``first``: also the tokens suppressed at the first generated position (every given row)."""
        logits[..., self.suppress] = -np.inf
        if first:
            logits[..., self.suppress_begin] = -np.inf
        # no timestamps are generated in without_timestamps mode
        logits[..., self.no_timestamps + 1 :] = -np.inf
        return logits

    def greedy(self, encoder_out, prompt: list[int] | None = None, max_new: int = 224,
               prefix: list[int] | None = None) -> DecodeResult:
        """Plain AR greedy decoding (the baseline every speculative decoder is measured against).

        Args:
            prompt: SOT sequence (default ``self.prompt()``).
            prefix: text tokens forced after the prompt (already decided), continued from.
        """
        lm = self.decoder(encoder_out)
        prompt = prompt or self.prompt()
        prefix = list(prefix or [])
        row = lm.eval(prompt + prefix)[-1]
        out = list(prefix)
        while len(out) < max_new:
            tok = int(np.argmax(self.suppress_logits(row, first=not out)))
            if tok == self.eot:
                break
            out.append(tok)
            row = lm.eval([tok])[-1]
        return DecodeResult(out, lm.detokenize(out), lm.n_forward)

    def transcribe_greedy(self, audio: np.ndarray, language: str = "en") -> DecodeResult:
        return self.greedy(self.encode(audio), self.prompt(language))
