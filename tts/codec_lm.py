"""The codec-token TTS models (pcg_tts.txt needs an autoregressive codec-token TTS): target + layer-subset draft,
duration model, and the voice that bundles them with the codec.

Pipeline: text → phoneme ids (Piper's espeak-ng phonemiser) → frames per id (:class:`DurationModel`) → per-frame
conditioning (current/previous/next phoneme, progress inside the phoneme) → codec tokens sampled
autoregressively by :class:`CodecLM` (50 tokens/s) → waveform (:class:`tts.codec.SpectralCodec`).

The draft is the target's first ``draft_layers`` transformer layers with its own norm and head (the paper's draft
is a 3-layer subset of LLaSA-8B). Both are driven through :class:`CodecLMSession`, which follows the project's
causal-LM protocol (``eval(tokens) → logits at every position``, ``crop(n)``). The samplers that drive it —
target-only AR, standard speculative sampling, SSD-style constant bias, PCG (Algorithm 1) — live with the other
speculative algorithms, in :mod:`engine.pcg`; this package holds models only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ASSET_DIR = Path(__file__).resolve().parent.parent / "assets" / "codec_tts"
N_CODES = 512
N_PHONEME_IDS = 256
N_PROG = 8
ARCH = {"n_codes": N_CODES, "d": 256, "layers": 6, "heads": 4, "ff": 1024, "draft_layers": 1, "max_len": 1500}
FRAME_S = 0.02


def frames_per_id(samples: np.ndarray, rate: int, n_frames: int) -> np.ndarray:
    """Piper's samples per phoneme id (at ``rate`` Hz) → frames per id (20 ms), summing to ``n_frames``."""
    ends = np.round(np.cumsum(samples) / rate / FRAME_S).astype(np.int64)
    ends = np.minimum(ends, n_frames)
    ends[-1] = n_frames
    return np.diff(np.concatenate([[0], ends])).astype(np.int64)


def frame_conditioning(ids: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """int64 (n_frames, 4): [current id, previous id, next id, progress bucket 0..7] for every frame."""
    ids = np.asarray(ids, np.int64)
    rows = []
    for j, (pid, n) in enumerate(zip(ids, dur)):
        prev = ids[j - 1] if j > 0 else 0
        nxt = ids[j + 1] if j + 1 < len(ids) else 0
        for f in range(int(n)):
            rows.append((pid, prev, nxt, min(N_PROG - 1, int(N_PROG * f / max(int(n), 1)))))
    return np.asarray(rows, np.int64).reshape(-1, 4)


def _torch():
    import torch

    return torch


def build_modules():
    torch = _torch()
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d, heads, ff):
            super().__init__()
            self.h = heads
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.ff = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))

        def forward(self, x, cache=None, mask=None):
            """x (B, T, d); ``cache``: {"k", "v": (B, h, capacity, d/h) buffers allocated on first use, "n": cached
            positions, "capacity": positions the caller will ever feed}; ``mask``: bool (T, S) attention mask or
            None (attend to every key)."""
            B, T, D = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
            if cache is not None:  # write into a preallocated buffer: no per-step concatenation, O(1) crop
                n = cache["n"]
                if cache["k"] is None:
                    shape = (B, self.h, cache["capacity"], D // self.h)
                    cache["k"], cache["v"] = k.new_zeros(shape), v.new_zeros(shape)
                cache["k"][:, :, n : n + T] = k
                cache["v"][:, :, n : n + T] = v
                cache["n"] = n + T
                k, v = cache["k"][:, :, : n + T], cache["v"][:, :, : n + T]
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
            return x + self.ff(self.ln2(x))

    class CodecLM(nn.Module):
        """Decoder-only transformer over codec tokens; input at frame i = Emb(code_{i−1}) + conditioning(i)."""

        def __init__(self, n_codes=N_CODES, d=320, layers=6, heads=5, ff=1280, draft_layers=1, max_len=1500):
            super().__init__()
            self.bos = n_codes
            self.draft_layers = draft_layers
            self.code = nn.Embedding(n_codes + 1, d)
            self.cur = nn.Embedding(N_PHONEME_IDS, d)
            self.prev = nn.Embedding(N_PHONEME_IDS, d)
            self.next = nn.Embedding(N_PHONEME_IDS, d)
            self.prog = nn.Embedding(N_PROG, d)
            self.pos = nn.Embedding(max_len, d)
            self.blocks = nn.ModuleList(Block(d, heads, ff) for _ in range(layers))
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, n_codes)
            self.draft_norm = nn.LayerNorm(d)
            self.draft_head = nn.Linear(d, n_codes)

        def embed(self, x, cond, start: int = 0):
            pos = torch.arange(start, start + x.shape[1])
            return (self.code(x) + self.cur(cond[..., 0]) + self.prev(cond[..., 1]) + self.next(cond[..., 2])
                    + self.prog(cond[..., 3]) + self.pos(pos)[None])

        def forward(self, x, cond, draft: bool = False, caches=None, start: int = 0):
            """x (B, T) int64 inputs, cond (B, T, 4) → logits (B, T, n_codes) float."""
            h = self.embed(x, cond, start)
            T = x.shape[1]
            S = T if caches is None else start + T
            # causal over the new queries, which sit at the end of the S keys (one query sees every key)
            mask = None if T == 1 else torch.ones(T, S, dtype=torch.bool).tril(S - T)
            # index the layers (slicing a ModuleList builds a new module on every call: per-token overhead)
            for i in range(self.draft_layers if draft else len(self.blocks)):
                h = self.blocks[i](h, None if caches is None else caches[i], mask)
            if draft:
                return self.draft_head(self.draft_norm(h))
            return self.head(self.norm(h))

    class DurationModel(nn.Module):
        """Phoneme ids (B, n) → log(1 + frames) per id (B, n): embedding + 3 conv layers."""

        def __init__(self, d=128):
            super().__init__()
            self.emb = nn.Embedding(N_PHONEME_IDS, d)
            self.convs = nn.ModuleList(nn.Conv1d(d, d, 5, padding=2) for _ in range(3))
            self.out = nn.Linear(d, 1)

        def forward(self, ids):
            h = self.emb(ids).transpose(1, 2)
            for c in self.convs:
                h = h + torch.relu(c(h))
            return self.out(h.transpose(1, 2))[..., 0]

    return CodecLM, DurationModel


def CodecLM(**kw):  # noqa: N802 - factory keeps torch out of import time
    return build_modules()[0](**kw)


def DurationModel(**kw):  # noqa: N802
    return build_modules()[1](**kw)


def load_lm(path: str | Path | None = None, dtype=None):
    import json

    from safetensors.torch import load_file

    torch = _torch()
    path = Path(path or ASSET_DIR)
    if not (path / "lm.safetensors").exists():
        raise FileNotFoundError(f"no codec TTS at {path} (train it: python -m engine.training.codec_tts all)")
    cfg = json.loads((path / "config.json").read_text())
    lm = CodecLM(**cfg["arch"])
    lm.load_state_dict({k: v.to(dtype or torch.float32) for k, v in load_file(str(path / "lm.safetensors")).items()})
    return lm.eval()


class CodecLMSession:
    """:class:`engine.lm.CausalLM` over one utterance of the codec LM.

    ``eval(tokens)`` feeds inputs at positions n_past.. (tokens are codec ids 0..n_codes−1 or BOS = n_codes; the
    per-frame conditioning of those positions is added) and returns float32 logits (len(tokens), n_codes);
    ``crop(n)`` drops cached positions ≥ n (O(1): the KV buffers are preallocated). ``draft=True`` runs the draft
    layers and head. Tokens are their own text: ``tokenize``/``detokenize`` are not meaningful here.

    Args:
        lm: a :class:`CodecLM` module; cond: int64 (n_frames, 4) frame conditioning (:func:`frame_conditioning`).

    Raises:
        ValueError (eval): empty ``tokens`` or positions past the utterance's frames; (crop): n out of range.
    """

    def __init__(self, lm, cond: np.ndarray, draft: bool = False):
        torch = _torch()
        self.lm = lm
        self.cond = torch.from_numpy(np.asarray(cond, np.int64))
        self.draft = draft
        n = lm.draft_layers if draft else len(lm.blocks)
        self.caches = [{"k": None, "v": None, "n": 0, "capacity": len(self.cond) + 1} for _ in range(n)]
        self.n_past = 0
        self.n_forward = 0
        self.n_vocab = int(lm.bos)  # codes 0..n_codes−1 (BOS is an input only)
        self.eos_ids: frozenset[int] = frozenset()

    def eval(self, tokens) -> np.ndarray:
        torch = _torch()
        tokens = list(tokens)
        if not tokens:
            raise ValueError("eval() needs at least one token")
        n0 = self.n_past
        if n0 + len(tokens) > len(self.cond):
            raise ValueError("eval past the end of the utterance's frames")
        x = torch.tensor([tokens])
        c = self.cond[n0 : n0 + len(tokens)][None]
        with torch.inference_mode():
            logits = self.lm(x, c, draft=self.draft, caches=self.caches, start=n0)[0]
        self.n_past += len(tokens)
        self.n_forward += 1
        return logits.float().numpy()

    def crop(self, n: int) -> None:
        if not 0 <= n <= self.n_past:
            raise ValueError(f"crop({n}) outside 0..{self.n_past}")
        for c in self.caches:
            c["n"] = min(c["n"], n)
        self.n_past = n

    def tokenize(self, text: str, special: bool = False) -> list[int]:
        raise NotImplementedError("codec tokens come from phonemes and audio, not text")

    def detokenize(self, ids) -> str:
        return " ".join(str(int(i)) for i in ids)


class CodecVoice:
    """The trained codec TTS models: target + draft LM, duration model, codec, and the phonemiser.

    Args:
        path: assets/codec_tts (codec.npz, lm.safetensors, duration.safetensors, config.json); default ASSET_DIR.
        phonemizer: an object with Piper's ``phonemize(text) → [[phoneme]]`` and ``phonemes_to_ids(phonemes)``
            (a loaded ``piper.PiperVoice``), or None to load one from ``voice_model`` on first use.
        voice_model / voice_config: the Piper voice (.onnx, .onnx.json) whose phonemiser is used; the caller
            resolves the paths.

    Raises:
        FileNotFoundError: the model files are missing.
    """

    sample_rate = 16000

    def __init__(self, path: str | Path | None = None, phonemizer=None, voice_model: str | Path | None = None,
                 voice_config: str | Path | None = None):
        from safetensors.torch import load_file

        from .codec import SpectralCodec

        self.path = Path(path or ASSET_DIR)
        self.lm = load_lm(self.path)
        self.codec = SpectralCodec.load(self.path / "codec.npz")
        self.dm = DurationModel()
        self.dm.load_state_dict(load_file(str(self.path / "duration.safetensors")))
        self.dm.eval()
        self.phonemizer = phonemizer
        self.voice_model, self.voice_config = voice_model, voice_config

    def phoneme_ids(self, text: str) -> list[np.ndarray]:
        """Per sentence, Piper's phoneme ids (int64; espeak-ng phonemes, BOS/EOS/pad as Piper uses them).

        Raises:
            ValueError: no phonemiser and no voice model to load one from.
        """
        if self.phonemizer is None:
            if self.voice_model is None:
                raise ValueError("CodecVoice needs a phonemizer or a Piper voice_model")
            from piper import PiperVoice

            self.phonemizer = PiperVoice.load(str(self.voice_model),
                                              config_path=str(self.voice_config) if self.voice_config else None)
        v = self.phonemizer
        return [np.asarray(v.phonemes_to_ids(ph), np.int64) for ph in v.phonemize(text) if ph]

    def durations(self, ids: np.ndarray) -> np.ndarray:
        """Frames (20 ms) per phoneme id, int64 (n,)."""
        torch = _torch()
        with torch.inference_mode():
            d = torch.expm1(self.dm(torch.from_numpy(ids)[None])[0]).clamp_min(0).numpy()
        return np.round(d).astype(np.int64)

    def conditioning(self, ids: np.ndarray) -> np.ndarray:
        """int64 (n_frames, 4) frame conditioning of one sentence, at most the LM's ``max_len`` frames."""
        return frame_conditioning(ids, self.durations(ids))[: self.lm.pos.num_embeddings]

    def code_embeddings(self) -> np.ndarray:
        """Emb_q for PCG's Eq. 1: the target's output token embeddings (its head's rows), float32 (512, d). This
        model's input embeddings are untied and nearly orthogonal (max pairwise cosine 0.29), while the output
        embeddings place codes the target predicts in the same acoustic contexts together (median nearest-
        neighbour cosine 0.49), which is the similarity Eq. 1 is after."""
        return self.lm.head.weight.detach().float().numpy()
