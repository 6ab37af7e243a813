"""Language identification from the Whisper encoder output a decode already computed: a trained head, combined with
Whisper's own language probabilities.

Whisper names the language from one decoder step after ``<|startoftranscript|>``; on a 2–4 s utterance Whisper base
is often unsure or wrong (synthetic French heard as Thai, accented German as English). The head reads the same
encoder frames (no extra encoder pass; two networks: the frames' mean and standard deviation, and the same statistics
after a per-frame layer and a convolution) and says which of
:attr:`LanguageIdHead.languages` — or ``other`` — is spoken. :func:`fuse` multiplies the two (a product of
experts): each language's Whisper probability times the head's, where the head's ``other`` is shared among the
languages outside its list in proportion to Whisper's probabilities, so any language Whisper knows can still win.

The head is trained by ``python -m engine.training.lid_head`` and shipped in ``assets/lid_head/`` with its card.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

ASSET_DIR = Path(__file__).resolve().parents[2] / "assets" / "lid_head"
FRAME_SAMPLES = 320  # Whisper encoder frames: 20 ms at 16 kHz


class _Net:
    """One network of the head, in numpy (``engine.training.lid_head.build_net`` in torch): [per-frame
    Linear(d_model→F) → GELU → Conv1d(F→F, k) → GELU, when it has them] → mean and standard deviation over the
    frames → LayerNorm → Linear → GELU → Linear(→ classes)."""

    def __init__(self, w: dict[str, np.ndarray]):
        self.proj = (w["proj.weight"].T.copy(), w["proj.bias"]) if "proj.weight" in w else None
        if self.proj is not None:
            conv = w["conv.weight"]  # (out, in, k) → (k·in, out) for the unfolded frames
            self.k = conv.shape[2]
            self.conv = (conv.transpose(2, 1, 0).reshape(-1, conv.shape[0]).copy(), w["conv.bias"])
        self.norm = (w["norm.weight"], w["norm.bias"])
        self.fc1 = (w["fc1.weight"].T.copy(), w["fc1.bias"])
        self.fc2 = (w["fc2.weight"].T.copy(), w["fc2.bias"])

    def log_probs(self, x: np.ndarray) -> np.ndarray:
        y = x
        if self.proj is not None:
            y = _gelu(x @ self.proj[0] + self.proj[1])
            pad = self.k // 2
            yp = np.pad(y, ((pad, pad), (0, 0)))
            unfolded = np.concatenate([yp[i: i + len(y)] for i in range(self.k)], axis=1)  # (T, k·F), tap-major
            y = _gelu(unfolded @ self.conv[0] + self.conv[1])
        h = np.concatenate([y.mean(0), np.sqrt(np.maximum(y.var(0), 1e-6))])
        h = (h - h.mean()) / np.sqrt(h.var() + 1e-5) * self.norm[0] + self.norm[1]
        z = _gelu(h @ self.fc1[0] + self.fc1[1]) @ self.fc2[0] + self.fc2[1]
        return z - z.max() - np.log(np.exp(z - z.max()).sum())


class LanguageIdHead:
    """The language-ID head: the networks listed in its config (the statistics of the encoder frames alone, and of a
    per-frame layer and convolution over them), their probabilities combined by a normalised geometric mean.

    Args:
        path: directory with ``head.safetensors`` and ``config.json`` (default ``assets/lid_head``).

    Raises:
        FileNotFoundError: no head at ``path``.
    """

    def __init__(self, path: str | Path | None = None):
        from safetensors.numpy import load_file

        path = Path(path or ASSET_DIR)
        if not (path / "head.safetensors").exists():
            raise FileNotFoundError(f"no language-ID head at {path} (train one: python -m engine.training.lid_head)")
        self.config = json.loads((path / "config.json").read_text())
        self.classes: list[str] = list(self.config["classes"])
        #: the Whisper language codes the head names (every class but ``other``)
        self.languages: tuple[str, ...] = tuple(c for c in self.classes if c != "other")
        self.d_model = int(self.config["d_model"])
        w = {k: v.astype(np.float32) for k, v in load_file(str(path / "head.safetensors")).items()}
        self.nets = {name: _Net({k[len(name) + 1:]: v for k, v in w.items() if k.startswith(name + ".")})
                     for name in self.config["nets"]}

    def probs_from_frames(self, frames: np.ndarray, nets: Sequence[str] | None = None) -> dict[str, float]:
        """Class probabilities of encoder ``frames``: (T, d_model) float (the audio frames only, T ≥ 1) →
        {class: probability} (the head's languages and ``other``, summing to 1); ``nets``: only these networks
        (default all).

        Raises:
            ValueError: the frames' width is not the head's ``d_model`` (another Whisper size) or T = 0.
        """
        x = np.asarray(frames, np.float32)
        if x.ndim != 2 or x.shape[1] != self.d_model or len(x) == 0:
            raise ValueError(f"expected (T>0, {self.d_model}) encoder frames, got {x.shape}")
        lp = np.mean([self.nets[n].log_probs(x) for n in (nets or self.nets)], axis=0)
        p = np.exp(lp - lp.max())
        p /= p.sum()
        return {c: float(q) for c, q in zip(self.classes, p)}

    def probs(self, encoder_output, n_samples: int) -> dict[str, float]:
        """Class probabilities of a window's encoder output (StorageView on CPU or CUDA, or array (1, frames, d_model)
        float32) holding ``n_samples`` samples of 16 kHz audio at its start (the frames after them are silence
        padding) → {class: probability}.

        Raises:
            ValueError: the encoder's width is not the head's ``d_model``.
        """
        if getattr(encoder_output, "device", "cpu") == "cuda":  # a CTranslate2 StorageView on the GPU
            import ctranslate2

            encoder_output = encoder_output.to_device(ctranslate2.Device.cpu)
        x = np.asarray(encoder_output)[0]
        n = max(1, min(len(x), int(np.ceil(n_samples / FRAME_SAMPLES))))
        return self.probs_from_frames(x[:n])


def _gelu(x: np.ndarray) -> np.ndarray:
    """Exact GELU, as torch's default: x · Φ(x), with erf from Abramowitz & Stegun 7.1.26 (|error| ≤ 1.5e-7)."""
    z = np.abs(x) / np.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = np.sign(x) * (1.0 - poly * np.exp(-z * z))
    return (0.5 * x * (1.0 + erf)).astype(np.float32)


def fuse(whisper_probs: Sequence[tuple[str, float]], head_probs: dict[str, float],
         weight: float = 1.0) -> list[tuple[str, float]]:
    """Product of experts of Whisper's language identification and the head's.

    q(l) ∝ p_whisper(l) · p_head(l)^weight for the head's languages; for any other language
    p_head(l) = p_head(other) · p_whisper(l) / Σ_{m not in the head's list} p_whisper(m).

    Args:
        whisper_probs: (code, probability) pairs from :func:`engine.asr.whisper_ct2.detect_language` (every
            language Whisper knows).
        head_probs: :meth:`LanguageIdHead.probs` (its languages and ``other``).
        weight: the head's exponent (0 = Whisper alone).

    Returns:
        (code, probability) pairs over Whisper's languages, most probable first, summing to 1.
    """
    pw = {c: max(float(p), 1e-9) for c, p in whisper_probs}
    inside = {c for c in head_probs if c != "other"}
    rest = sum(p for c, p in pw.items() if c not in inside) or 1e-9
    other = max(head_probs.get("other", 0.0), 1e-9)
    q = {}
    for c, p in pw.items():
        ph = head_probs[c] if c in inside else other * p / rest
        q[c] = np.log(p) + weight * np.log(max(ph, 1e-9))
    m = max(q.values())
    z = sum(np.exp(v - m) for v in q.values())
    return sorted(((c, float(np.exp(v - m) / z)) for c, v in q.items()), key=lambda x: -x[1])


def identify(model, encoder_output, n_samples: int, head: LanguageIdHead | None = None,
             weight: float = 1.0) -> list[tuple[str, float]]:
    """Language identification of a window: Whisper's (:func:`engine.asr.whisper_ct2.detect_language`, one decoder
    step on ``encoder_output``) fused with ``head``'s raised to ``weight`` (:func:`fuse`).

    Args:
        model: ``ctranslate2.models.Whisper`` (multilingual).
        encoder_output: its encoder output of the window, (1, frames, d_model).
        n_samples: 16 kHz samples of audio at the window's start.
        head: the language-ID head, or None for Whisper's alone (also when its width is not this encoder's).
        weight: the head's exponent (0 = Whisper's alone).

    Returns:
        (code, probability) pairs over Whisper's languages, most probable first.
    """
    return identify_with_whisper(model, encoder_output, n_samples, head, weight)[0]


def identify_with_whisper(model, encoder_output, n_samples: int, head: LanguageIdHead | None = None,
                          weight: float = 1.0) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """:func:`identify`'s fused identification and, beside it, Whisper's own that went into it (the same list when
    no head is fused). Arguments as :func:`identify`.

    Returns:
        (fused, Whisper's own): each (code, probability) pairs over Whisper's languages, most probable first.
    """
    from engine.asr.whisper_ct2 import detect_language

    probs = detect_language(model, encoder_output)
    if head is None or weight <= 0 or encoder_output.shape[-1] != head.d_model:
        return probs, probs
    return fuse(probs, head.probs(encoder_output, n_samples), weight), probs
