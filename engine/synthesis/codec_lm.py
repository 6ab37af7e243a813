"""The codec-token LM of the codec TTS: an autoregressive target over latent-codec tokens, conditioned on the Piper
voice's own VITS prior, and its layer-subset draft — the models PCG's speculative sampling accelerates (Yanuka et
al., "Principled Coarse-Grained Acceptance for Speculative Decoding in Speech", 2025, arXiv:2511.13732).

Pipeline: text → phoneme ids (Piper's espeak-ng phonemiser) → the voice's text encoder and duration predictor
(:class:`engine.synthesis.vits_latent.VitsParts`, cut out of the voice's ONNX file): per phoneme the prior's mean
m_p and log standard deviation logs_p (192 channels each) and its frames w_ceil → the prior expanded to frames
(:func:`frame_conditioning`) → latent-codec tokens sampled autoregressively by :class:`CodecLM` (one per 256-sample
frame, ≈ 86 tokens/s) → centroid latents → the voice's HiFi-GAN generator
(:class:`engine.synthesis.codec.LatentCodec`), 22.05 kHz.

The LM's input at frame i is Emb(code_{i−1}) + C(prior)_i, where C projects [m_p, logs_p] to the model width, mixes
neighbouring frames with two residual convolutions (the whole utterance's prior is known before sampling starts) and
adds an embedding of the frame's progress through its phoneme (8 buckets: the prior is constant over a phoneme).
There is no absolute position embedding: the causal mask orders the frames and the conditioning says where they are,
so sentences longer than any in training are not out of range. The LM models what the prior does not fix — VITS
samples z_p = m_p + ε·exp(logs_p)·noise_scale and the codec's tokens carry that variation — so it stays a
generative model, sampled at a temperature (its per-frame entropy is in assets/codec_tts/config.json).

The draft is the target's first ``draft_layers`` transformer layers with its own norm and head (the paper's draft is
a 3-layer subset of LLaSA-8B). This module holds the torch module (the reference, and what training and a GPU run)
and its loading; :mod:`engine.synthesis.codec_lm_onnx` writes it as ONNX Runtime graphs,
:mod:`engine.synthesis.codec_lm_session` drives it over one utterance (the project's causal-LM protocol,
``eval(tokens) → logits at every position``, ``crop(n)``), and the samplers — target-only AR, standard speculative
sampling, SSD-style constant bias, PCG (Algorithm 1) — are :mod:`engine.synthesis.coarse_grained_sampling`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ASSET_DIR = Path(__file__).resolve().parents[2] / "assets" / "codec_tts"
N_PROG = 8
COND_DIM = 2 * 192 + 1  # [m_p, logs_p, progress through the phoneme in [0, 1)]
ARCH = {"n_codes": 2048, "d": 192, "layers": 4, "heads": 4, "ff": 768, "draft_layers": 1, "draft_rank": 64}  # shipped


def frame_conditioning(m_p: np.ndarray, logs_p: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """The prior expanded to frames by the durations (VITS's hard alignment), with each frame's progress through its
    phoneme: float32 (sum(dur), 385) = [m_p (192), logs_p (192), f / dur] for frame f of a phoneme of dur frames.

    Args:
        m_p, logs_p: float (n, 192) per phoneme id; dur: int (n,) frames per id (the voice's w_ceil)."""
    dur = np.asarray(dur, np.int64)
    prior = np.repeat(np.concatenate([np.asarray(m_p, np.float32), np.asarray(logs_p, np.float32)], 1), dur, 0)
    starts = np.repeat(np.cumsum(dur) - dur, dur)
    prog = (np.arange(int(dur.sum())) - starts) / np.repeat(np.maximum(dur, 1), dur)
    return np.concatenate([prior, prog[:, None].astype(np.float32)], 1)


def _torch():
    import torch

    return torch


def build_modules():
    """The :class:`CodecLM` torch module class (defined on first use, so importing this module does not import
    torch)."""
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
        """Decoder-only transformer over codec tokens; input at frame i = Emb(code_{i−1}) + C(prior)_i (module
        docstring)."""

        def __init__(self, n_codes=1024, d=256, layers=4, heads=4, ff=1024, draft_layers=1, cond_dim=COND_DIM,
                     draft_rank=None):
            super().__init__()
            self.bos = n_codes
            self.draft_layers = draft_layers
            self.code = nn.Embedding(n_codes + 1, d)
            self.cond_in = nn.Linear(cond_dim - 1, d)
            self.cond_convs = nn.ModuleList(nn.Conv1d(d, d, 5, padding=2) for _ in range(2))
            self.prog = nn.Embedding(N_PROG, d)
            self.blocks = nn.ModuleList(Block(d, heads, ff) for _ in range(layers))
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, n_codes)
            self.draft_norm = nn.LayerNorm(d)
            # a rank-r head (d → r → n_codes) costs the draft r·(d + n_codes) multiply-adds instead of d·n_codes:
            # with one layer, the head is half of a full-rank draft's work
            self.draft_head = (nn.Linear(d, n_codes) if not draft_rank else
                               nn.Sequential(nn.Linear(d, draft_rank, bias=False), nn.Linear(draft_rank, n_codes)))

        def cond_embed(self, cond):
            """cond float (B, T, 385) of whole utterances (zero rows = padding) → float (B, T, d)."""
            real = (cond[..., :-1].abs().sum(-1, keepdim=True) > 0).to(cond.dtype).transpose(1, 2)  # (B, 1, T)
            h = self.cond_in(cond[..., :-1]).transpose(1, 2) * real
            for c in self.cond_convs:  # padding frames stay zero, as past a sentence's end at inference
                h = (h + torch.nn.functional.gelu(c(h))) * real
            prog = (cond[..., -1] * N_PROG).long().clamp(0, N_PROG - 1)
            return h.transpose(1, 2) + self.prog(prog)

        def forward(self, x, cond=None, draft: bool = False, caches=None, ce=None):
            """x (B, T) int64 inputs at positions start..start+T−1; ``cond`` float (B, T, 385) for whole utterances
            (T frames from 0), or ``ce`` float (B, T, d) those positions' rows of :meth:`cond_embed` of the whole
            utterance (KV-cached passes) → logits (B, T, n_codes) float."""
            h = self.code(x) + (self.cond_embed(cond) if ce is None else ce)
            T = x.shape[1]
            S = T if caches is None else caches[0]["n"] + T
            # causal over the new queries, which sit at the end of the S keys (one query sees every key)
            mask = None if T == 1 else torch.ones(T, S, dtype=torch.bool, device=x.device).tril(S - T)
            # index the layers (slicing a ModuleList builds a new module on every call: per-token overhead)
            for i in range(self.draft_layers if draft else len(self.blocks)):
                h = self.blocks[i](h, None if caches is None else caches[i], mask)
            if draft:
                return self.draft_head(self.draft_norm(h))
            return self.head(self.norm(h))

    return CodecLM


def CodecLM(**kw):  # noqa: N802 - factory keeps torch out of import time
    """A new :class:`CodecLM` module with random weights; ``kw``: n_codes, d, layers, heads, ff, draft_layers,
    cond_dim, draft_rank (config.json ``arch``; :data:`ARCH` is the shipped one)."""
    return build_modules()(**kw)


def code_embeddings(lm, config: dict) -> np.ndarray:
    """Emb_q for PCG's Eq. 1, float32 (n_codes, d): the table ``config`` (config.json) names in
    ``group_embeddings`` — the target's input code embeddings ("input") or its output embeddings, the head's rows
    ("output", the default) — chosen at training time as the one whose groups at θ = 0.42 are non-trivial
    (engine.synthesis.training ``calibrate``)."""
    if config.get("group_embeddings", "output") == "input":
        return lm.code.weight[: lm.bos].detach().float().cpu().numpy()
    return lm.head.weight.detach().float().cpu().numpy()


def cond_embedding(lm, cond: np.ndarray):
    """:meth:`CodecLM.cond_embed` of one utterance's frame conditioning (float32 (n_frames, 385)), on the module's
    device and dtype: torch tensor (1, n_frames, d), computed once per utterance by the sessions."""
    torch = _torch()
    p = next(lm.parameters())
    with torch.inference_mode():
        c = torch.from_numpy(np.ascontiguousarray(cond, np.float32)).to(p.device)
        return lm.cond_embed(c[None].to(p.dtype))


def load_lm(path: str | Path | None = None, dtype=None):
    """The target + draft from ``path``/lm.safetensors (fp16 on disk) with the architecture in config.json.

    Raises:
        FileNotFoundError: no trained model at ``path``."""
    from safetensors.torch import load_file

    torch = _torch()
    path = Path(path or ASSET_DIR)
    if not (path / "lm.safetensors").exists():
        raise FileNotFoundError(f"no codec TTS at {path} (train it: python -m engine.synthesis.training all)")
    cfg = json.loads((path / "config.json").read_text())
    lm = CodecLM(**cfg["arch"])
    lm.load_state_dict({k: v.to(dtype or torch.float32) for k, v in load_file(str(path / "lm.safetensors")).items()})
    return lm.eval()
