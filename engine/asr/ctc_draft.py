"""CTC draft head on the frozen Whisper encoder (ctc_self_speculative_asr.txt, §2.1).

The head maps Whisper encoder frames h_t (1500 × d_model per 30 s window, 20 ms per frame) to a distribution over
a character alphabet plus blank. Its greedy alignment path (Eq. 2), collapsed by B (repeats, then blanks), is the
draft hypothesis ŷ; the frame entropies (Eq. 3) decide whether ŷ is accepted without the decoder.

The head is trained by ``python -m engine.training.ctc_head`` (self-distillation from Whisper's own greedy
transcripts of synthesised speech) and shipped in ``assets/ctc_head/`` with its model card.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ASSET_DIR = Path(__file__).resolve().parents[2] / "assets" / "ctc_head"
BLANK = 0
#: printable ASCII (space .. ~); index i+1 is chr(32 + i); 0 is the CTC blank ε
ALPHABET = [chr(c) for c in range(32, 127)]
N_CLASSES = len(ALPHABET) + 1
FRAME_S = 0.02  # Whisper encoder frame hop (seconds)


def normalize_text(text: str) -> str:
    """Map text into the head's alphabet: NFKD, typographic quotes/dashes to ASCII, other characters dropped,
    runs of whitespace to one space."""
    rep = {"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-", "\u2026": "..."}
    text = "".join(rep.get(c, c) for c in text)
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if 32 <= ord(c) < 127 or c.isspace())
    return " ".join(text.split())


def encode_text(text: str) -> list[int]:
    """Characters → class ids (1..95). Characters outside the alphabet are dropped."""
    return [ord(c) - 31 for c in normalize_text(text)]


def decode_ids(ids) -> str:
    return "".join(ALPHABET[i - 1] for i in ids if 0 < i < N_CLASSES)


def build_head(d_model: int, arch: dict):
    """The head as a torch module: LayerNorm → Linear(d_model→ch) → n_blocks × residual (Conv1d k, GELU) →
    Linear(ch → N_CLASSES). Input (B, T, d_model) float32 → logits (B, T, N_CLASSES)."""
    import torch
    from torch import nn

    ch, k, n_blocks = int(arch["channels"]), int(arch["kernel"]), int(arch["blocks"])

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(ch)
            self.conv = nn.Conv1d(ch, ch, k, padding=k // 2)
            self.drop = nn.Dropout(float(arch.get("dropout", 0.1)))

        def forward(self, x):  # (B, T, ch)
            y = self.conv(self.norm(x).transpose(1, 2)).transpose(1, 2)
            return x + self.drop(torch.nn.functional.gelu(y))

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(d_model)
            self.inp = nn.Linear(d_model, ch)
            self.blocks = nn.ModuleList(Block() for _ in range(n_blocks))
            self.out = nn.Linear(ch, N_CLASSES)

        def forward(self, h):
            x = self.inp(self.norm(h))
            for b in self.blocks:
                x = b(x)
            return self.out(x)

    return Head()


@dataclass(frozen=True)
class CTCDraft:
    """Output of the CTC head for one window.

    Attributes:
        text: ŷ = B(â), the collapsed greedy path (Eq. 2), stripped.
        max_entropy: max_t H(p(·|h_t)) in nats over the speech frames (Eq. 3's left-hand side).
        entropies: float32 (n_frames,) frame entropies (nats).
        log_probs: float32 (n_frames, N_CLASSES) frame log-probabilities (for alignment and diagnostics).
    """

    text: str
    max_entropy: float
    entropies: np.ndarray
    log_probs: np.ndarray


def greedy_path(log_probs: np.ndarray) -> str:
    """Eq. 2: â_t = argmax_a p(a|h_t); ŷ = B(â) (merge repeats, then drop blanks)."""
    best = log_probs.argmax(axis=-1)
    keep = np.ones_like(best, dtype=bool)
    keep[1:] = best[1:] != best[:-1]
    return decode_ids(best[keep & (best != BLANK)])


def frame_entropy(log_probs: np.ndarray) -> np.ndarray:
    """Eq. 3's per-frame entropy H_t = −Σ_a p(a|h_t) log p(a|h_t) (nats), float32 (n_frames,)."""
    return -(np.exp(log_probs) * log_probs).sum(axis=-1).astype(np.float32)


class CTCHead:
    """The trained head, loaded from ``assets/ctc_head`` (or ``path``).

    Args:
        path: directory with ``head.safetensors`` and ``config.json``.
        device: torch device of the encoder output it will see.

    Raises:
        FileNotFoundError: no trained head at ``path``.
    """

    def __init__(self, path: str | Path | None = None, device: str = "cpu"):
        import torch
        from safetensors.torch import load_file

        path = Path(path or ASSET_DIR)
        if not (path / "head.safetensors").exists():
            raise FileNotFoundError(f"no CTC head at {path} (train one: python -m engine.training.ctc_head)")
        self.config = json.loads((path / "config.json").read_text())
        self.module = build_head(int(self.config["d_model"]), self.config["arch"])
        state = {k: v.float() for k, v in load_file(str(path / "head.safetensors")).items()}
        self.module.load_state_dict(state)
        self.module.eval().to(device)
        self.device = device
        self._torch = torch

    def log_probs(self, encoder_out, n_frames: int | None = None) -> np.ndarray:
        """encoder_out (1, 1500, d_model) torch/numpy → float32 log-probs (n_frames, N_CLASSES); ``n_frames``
        = frames that hold audio (ceil(samples / 320)), the padding after it is ignored."""
        torch = self._torch
        h = encoder_out if isinstance(encoder_out, torch.Tensor) else torch.from_numpy(np.asarray(encoder_out))
        with torch.inference_mode():
            lp = torch.log_softmax(self.module(h.to(self.device, torch.float32)).float(), dim=-1)[0]
        lp = lp.cpu().numpy()
        return lp[: n_frames] if n_frames else lp

    def draft(self, encoder_out, n_frames: int | None = None) -> CTCDraft:
        """Eq. 2 draft and Eq. 3 entropies for one window."""
        lp = self.log_probs(encoder_out, n_frames)
        ent = frame_entropy(lp)
        return CTCDraft(greedy_path(lp).strip(), float(ent.max()) if ent.size else 0.0, ent, lp)
