"""The latent codec: one token per VITS latent frame of the Piper voice, decoded by the voice's own generator.

VITS's generator (HiFi-GAN, engine/synthesis/vits_latent.py) renders a 192-channel latent z at 256 samples per frame
(22.05 kHz, ≈ 86 frames/s). The codec quantises each frame of z to the nearest of K centroids (k-means on the
teacher's z, Euclidean); decoding is centroid lookup followed by the generator. One codebook gives one token per
frame, the interface the AR codec LM and the speculative samplers (engine/synthesis/coarse_grained_sampling.py) take
unchanged.
Why k-means on z (assets/codec_tts/card.md has the round-trip table): a spectral codec decoded by Griffin-Lim or a
small learned decoder lost 13–16 points of CER on the round trip, while the voice's own generator, trained with the
voice, renders z nearly losslessly; K is chosen by round-trip CER (engine/synthesis/training.py ``codec``).

Shapes: z float32 (T, 192); tokens int64 (T,); audio float32 (256 T,) at 22.05 kHz.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# re-exported: the codec's frame geometry
from engine.synthesis.vits_latent import HOP, SAMPLE_RATE, Z_CHANNELS  # noqa: F401


class LatentCodec:
    """k-means codebook over VITS latent frames.

    Attributes:
        centroids: float32 (K, 192) centroid latents; K: the number of codes.
    """

    def __init__(self, centroids: np.ndarray):
        self.centroids = np.ascontiguousarray(centroids, np.float32)
        self.K = len(self.centroids)
        self._c2 = (self.centroids ** 2).sum(1)

    @classmethod
    def fit(cls, z: np.ndarray, K: int = 1024, iters: int = 20, seed: int = 0,
            init_sample: int = 30000) -> LatentCodec:
        """k-means (k-means++ init on a random subsample of ``init_sample`` frames, then ``iters`` Lloyd iterations
        over all frames, in torch) of ``z`` float (N, 192). An emptied cluster is re-seeded at the frame farthest
        from its centroid."""
        import torch

        X = torch.from_numpy(np.asarray(z, np.float32))
        g = torch.Generator().manual_seed(seed)
        sub = X[torch.randperm(len(X), generator=g)[: min(len(X), init_sample)]]
        C = torch.empty(K, X.shape[1])
        C[0] = sub[torch.randint(len(sub), (1,), generator=g)]
        d2 = ((sub - C[0]) ** 2).sum(1)
        for k in range(1, K):
            C[k] = sub[torch.multinomial(d2 / d2.sum(), 1, generator=g)]
            d2 = torch.minimum(d2, ((sub - C[k]) ** 2).sum(1))
        for _ in range(iters):
            a, dist = _assign(X, C)
            counts = torch.bincount(a, minlength=K).float()
            sums = torch.zeros_like(C).index_add_(0, a, X)
            empty = counts == 0
            C = torch.where(empty[:, None], C, sums / counts.clamp_min(1)[:, None])
            if empty.any():
                far = dist.topk(int(empty.sum())).indices
                C[empty] = X[far]
        return cls(C.numpy())

    def save(self, path: str | Path) -> None:
        np.savez_compressed(path, centroids=self.centroids.astype(np.float16))

    @classmethod
    def load(cls, path: str | Path) -> LatentCodec:
        """The codebook from ``path`` (.npz, float16 centroids)."""
        with np.load(path) as z:
            return cls(z["centroids"].astype(np.float32))

    def encode(self, z: np.ndarray) -> np.ndarray:
        """Latent float (T, 192) → int64 tokens (T,): the nearest centroid of each frame."""
        z = np.asarray(z, np.float32)
        d = self._c2[None] - 2 * z @ self.centroids.T  # |z|² is the same for every code
        return d.argmin(1).astype(np.int64)

    def latent(self, tokens) -> np.ndarray:
        """Tokens (T,) → float32 (T, 192) centroid latents."""
        return self.centroids[np.asarray(tokens, np.int64)]

    def decode(self, tokens, parts) -> np.ndarray:
        """Tokens (T,) → float32 audio (256 T,) at 22.05 kHz, rendered by ``parts`` (a
        :class:`engine.synthesis.vits_latent.VitsParts` of the voice the codec was fit on)."""
        return parts.generate(self.latent(tokens))


def _assign(X, C, chunk: int = 65536):
    """Nearest centroid (int64 (N,)) and its squared distance (N,) for every row of X, in chunks."""
    import torch

    c2 = (C ** 2).sum(1)
    idx, dist = [], []
    for b in range(0, len(X), chunk):
        x = X[b : b + chunk]
        d = c2[None] - 2 * x @ C.T
        m, i = d.min(1)
        idx.append(i)
        dist.append(m + (x ** 2).sum(1))
    return torch.cat(idx), torch.cat(dist)
