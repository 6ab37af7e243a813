"""Autoregressive codec-token TTS (target + layer-subset draft) and its speculative samplers (pcg_tts.txt).

Pipeline: text → phoneme ids (Piper's espeak-ng phonemiser) → frames per id (:class:`DurationModel`) → per-frame
conditioning (current/previous/next phoneme, progress inside the phoneme) → codec tokens sampled
autoregressively by :class:`CodecLM` (50 tokens/s, temperature 0.5 by default) → waveform
(:class:`tts.codec.SpectralCodec`).

The draft is the target's first ``draft_layers`` transformer layers with its own norm and head (the paper's draft
is a 3-layer subset of LLaSA-8B). Both are driven through :class:`CodecLMSession`, which follows the project's
causal-LM protocol (``eval(tokens) → logits at every position``, ``crop(n)``), and every sampler —
target-only AR, standard speculative sampling, SSD-style constant bias, PCG (Algorithm 1) — is written once over
it in :func:`speculative_generate`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
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
            blocks = self.blocks[: self.draft_layers] if draft else self.blocks
            for i, b in enumerate(blocks):
                h = b(h, None if caches is None else caches[i], mask)
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
    """The causal-LM protocol over one utterance: ``eval(tokens)`` feeds inputs at positions n_past.. (tokens are
    codec ids or BOS; the per-frame conditioning of those positions is added) and returns float32 logits
    (len(tokens), n_codes); ``crop(n)`` drops cached positions ≥ n. ``draft=True`` runs the draft layers/head."""

    def __init__(self, lm, cond: np.ndarray, draft: bool = False):
        torch = _torch()
        self.lm = lm
        self.cond = torch.from_numpy(np.asarray(cond, np.int64))
        self.draft = draft
        n = lm.draft_layers if draft else len(lm.blocks)
        self.caches = [{"k": None, "v": None, "n": 0, "capacity": len(self.cond) + 1} for _ in range(n)]
        self.n_past = 0
        self.n_forward = 0
        self.eos_ids = frozenset()

    def eval(self, tokens) -> np.ndarray:
        torch = _torch()
        tokens = list(tokens)
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


@dataclass
class GenStats:
    """tokens: generated; rounds: verification rounds; drafted / accepted: draft tokens proposed / kept;
    target_passes / draft_passes: forward passes; seconds: wall time."""

    tokens: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    target_passes: int = 0
    draft_passes: int = 0
    seconds: float = 0.0
    accepted_lengths: list = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return float(np.mean(self.accepted_lengths)) if self.accepted_lengths else 0.0


def ar_generate(lm, cond: np.ndarray, rng: np.random.Generator, temperature: float = 0.8) -> tuple[np.ndarray, GenStats]:
    """Target-only AR sampling: one target pass per token."""
    from engine.pcg import sample_categorical, softmax

    t0 = time.perf_counter()
    s = CodecLMSession(lm, cond)
    n = len(cond)
    out: list[int] = []
    tok = lm.bos
    while len(out) < n:
        q = softmax(s.eval([tok])[-1], temperature)
        tok = sample_categorical(q, rng)
        out.append(tok)
    st = GenStats(tokens=n, target_passes=s.n_forward, seconds=time.perf_counter() - t0)
    return np.asarray(out, np.int64), st


def speculative_generate(lm, cond: np.ndarray, rng: np.random.Generator, accept, lookahead: int = 3,
                         temperature: float = 0.8) -> tuple[np.ndarray, GenStats]:
    """Speculative sampling with lookahead L_d (pcg_tts.txt Algorithm 1 with ``accept`` = PCG's group step;
    standard SD / SSD bias with the token-level steps of :mod:`engine.pcg`).

    ``accept(x, p, q, rng) → StepResult``: decides one drafted position given the draft distribution p and target
    distribution q (float64 (n_codes,)). On the first rejection the step's token replaces the draft and the round
    ends; if all L_d are accepted, one more token is sampled from q (the bonus token).
    """
    from engine.pcg import sample_categorical, softmax

    t0 = time.perf_counter()
    n = len(cond)
    tgt, dft = CodecLMSession(lm, cond), CodecLMSession(lm, cond, draft=True)
    t_inputs: list[int] = []  # inputs evaluated by the target (positions 0..)
    d_inputs: list[int] = []
    out: list[int] = []
    st = GenStats()

    def sync(sess, evaluated, ctx):
        k = 0
        while k < min(len(evaluated), len(ctx)) and evaluated[k] == ctx[k]:
            k += 1
        k = min(k, len(ctx) - 1)  # always re-feed at least the last input: its row predicts the next token
        sess.crop(k)
        del evaluated[k:]
        return k

    while len(out) < n:
        ctx = [lm.bos] + out  # inputs; ctx[i] feeds position i, whose logits predict out[i]
        L = min(lookahead, n - len(out) - 1)
        # ---- draft L tokens
        k = sync(dft, d_inputs, ctx)
        xs, ps = [], []
        feed = ctx[k:]
        for j in range(L):
            row = dft.eval(feed)[-1]
            d_inputs += feed
            p = softmax(row, temperature)
            x = sample_categorical(p, rng)
            xs.append(x)
            ps.append(p)
            feed = [x]
        # ---- target: one pass over the missing context + the draft
        k = sync(tgt, t_inputs, ctx)
        feed = ctx[k:] + xs
        rows = tgt.eval(feed)
        t_inputs += feed
        rows = rows[len(ctx) - k - 1 :]  # rows[j] predicts position len(out)+j
        st.rounds += 1
        st.drafted += L
        acc = 0
        for j in range(L):
            q = softmax(rows[j], temperature)
            r = accept(xs[j], ps[j], q, rng)
            out.append(r.token)
            if r.accepted:
                acc += 1
            else:
                break
        else:
            q = softmax(rows[L], temperature)
            out.append(sample_categorical(q, rng))
        st.accepted += acc
        st.accepted_lengths.append(acc)
    st.tokens = n
    st.target_passes, st.draft_passes = tgt.n_forward, dft.n_forward
    st.seconds = time.perf_counter() - t0
    return np.asarray(out[:n], np.int64), st


class CodecTTS:
    """The codec TTS engine: ``synthesize(text) → float32 16 kHz``.

    Args:
        path: assets/codec_tts (codec.npz, lm.safetensors, duration.safetensors, config.json).
        method: "pcg" (default), "ar", "sd" or "ssd".
        theta: PCG θ (Eq. 1); lookahead: L_d; temperature: sampling temperature; seed: RNG seed.

    Raises:
        FileNotFoundError: the model files are missing.
    """

    sample_rate = 16000

    def __init__(self, path: str | Path | None = None, method: str = "pcg", theta: float = 0.42, lookahead: int = 3,
                 temperature: float = 0.5, seed: int = 0, phonemizer=None, cache_dir: str | Path | None = None):
        from safetensors.torch import load_file

        from .codec import SpectralCodec

        path = Path(path or ASSET_DIR)
        self.lm = load_lm(path)
        self.codec = SpectralCodec.load(path / "codec.npz")
        self.dm = DurationModel()
        self.dm.load_state_dict(load_file(str(path / "duration.safetensors")))
        self.dm.eval()
        self.method, self.theta, self.lookahead, self.temperature = method, theta, lookahead, temperature
        self.rng = np.random.default_rng(seed)
        self.phonemizer = phonemizer
        import os

        self.cache_dir = Path(cache_dir or os.environ.get("SPECVOICE_CACHE") or Path.home() / ".cache" / "specvoice")
        self.groups = self.groups_for(theta)
        self.last_stats: GenStats | None = None

    def phoneme_ids(self, text: str) -> list[np.ndarray]:
        """Per sentence, Piper's phoneme ids (espeak-ng phonemes, BOS/EOS/pad as Piper uses them)."""
        if self.phonemizer is None:
            from engine.config import load_config
            from engine.models import resolve
            from piper import PiperVoice

            m = resolve("tts_voice", load_config())
            self.phonemizer = PiperVoice.load(str(m.path), config_path=str(m.config) if m.config else None)
        v = self.phonemizer
        return [np.asarray(v.phonemes_to_ids(ph), np.int64) for ph in v.phonemize(text) if ph]

    def durations(self, ids: np.ndarray) -> np.ndarray:
        torch = _torch()
        with torch.inference_mode():
            d = torch.expm1(self.dm(torch.from_numpy(ids)[None])[0]).clamp_min(0).numpy()
        return np.round(d).astype(np.int64)

    def tokens(self, ids: np.ndarray, method: str | None = None, theta: float | None = None):
        from engine.pcg import pcg_step, sd_step

        cond = frame_conditioning(ids, self.durations(ids))
        cond = cond[: self.lm.pos.num_embeddings]
        method = method or self.method
        if method == "ar":
            return ar_generate(self.lm, cond, self.rng, self.temperature)
        if method == "pcg":
            G = self.groups if theta is None or theta == self.theta else self.groups_for(theta)
            acc = lambda x, p, q, rng: pcg_step(x, p, q, G, rng)  # noqa: E731
        elif method == "sd":
            acc = lambda x, p, q, rng: sd_step(x, p, q, rng)  # noqa: E731
        elif method == "ssd":
            acc = lambda x, p, q, rng: sd_step(x, p, q, rng, bias=0.3)  # noqa: E731
        else:
            raise ValueError(f"unknown codec TTS method {method!r} (ar, sd, ssd, pcg)")
        return speculative_generate(self.lm, cond, self.rng, acc, self.lookahead, self.temperature)

    def code_embeddings(self) -> np.ndarray:
        """Emb_q for Eq. 1: the target's output token embeddings (its head's rows), float32 (512, d). This
        model's input embeddings are untied and nearly orthogonal (max pairwise cosine 0.29), while the output
        embeddings place codes the target predicts in the same acoustic contexts together (median nearest-
        neighbour cosine 0.49), which is the similarity Eq. 1 is after."""
        return self.lm.head.weight.detach().float().numpy()

    def groups_for(self, theta: float):
        """Eq. 1 groups from the target's code embeddings at θ (cached on disk)."""
        from engine.pcg import AcousticGroups

        emb = self.code_embeddings()
        return AcousticGroups.cached(emb, theta, self.cache_dir / "asg")

    def synthesize(self, text: str) -> np.ndarray:
        """float32 (n,) at 16 kHz; empty for text with nothing to say. ``last_stats`` holds the sampler's counters."""
        parts = []
        total = GenStats()
        for ids in self.phoneme_ids(text):
            toks, st = self.tokens(ids)
            parts.append(self.codec.decode(toks))
            parts.append(np.zeros(int(0.15 * self.sample_rate), np.float32))
            for f in ("tokens", "rounds", "drafted", "accepted", "target_passes", "draft_passes", "seconds"):
                setattr(total, f, getattr(total, f) + getattr(st, f))
            total.accepted_lengths += st.accepted_lengths
        self.last_stats = total
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)
