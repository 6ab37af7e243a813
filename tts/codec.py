"""A small discrete acoustic codec: vector-quantised spectral frames (50 tokens/s) with a Griffin-Lim vocoder.

Why this codec (see assets/codec_tts/card.md): no neural codec weights can be had offline, and a neural codec
(encoder + RVQ + GAN decoder) does not train to intelligible speech on a 2-core CPU in the time this project has.
Frame-level VQ of the log-magnitude spectrum, with the codebook learned by k-means on the teacher voice's speech,
gives one discrete token per 20 ms frame — the same interface a neural codec gives an autoregressive TTS — and
decodes back to a waveform without training a vocoder: each token's centroid log-magnitude spectrum is
interpolated to a 10 ms hop and phase is recovered with Griffin-Lim (torch.stft / torch.istft).

Shapes: audio float32 (n_samples,) at 16 kHz; tokens int64 (n_frames,), n_frames = ceil(n_samples / 320).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SR = 16000
N_FFT = 1024
HOP = 320  # token hop: 20 ms → 50 tokens/s
SYN_HOP = 160  # synthesis hop for Griffin-Lim (10 ms)
N_MELS = 80


def _mel_filters(n_mels: int = N_MELS) -> np.ndarray:
    from faster_whisper.feature_extractor import FeatureExtractor

    return FeatureExtractor.get_mel_filters(SR, N_FFT, n_mels=n_mels).astype(np.float32)  # (n_mels, 513)


def log_magnitude(audio: np.ndarray, hop: int = HOP) -> np.ndarray:
    """float32 (n_frames, 513) natural-log magnitude spectrum (Hann window 1024, centred frames)."""
    import torch

    x = torch.from_numpy(np.asarray(audio, np.float32))
    spec = torch.stft(x, N_FFT, hop, window=torch.hann_window(N_FFT), center=True, return_complex=True)
    return torch.log(spec.abs().clamp_min(1e-5)).T.numpy()


class SpectralCodec:
    """VQ codebook over spectral frames.

    Attributes:
        centroids_mel: float32 (K, 80) log-mel centroids (what the quantiser compares);
        centroids_mag: float32 (K, 513) mean log-magnitude per code (what the vocoder renders).
    """

    def __init__(self, centroids_mel: np.ndarray, centroids_mag: np.ndarray, decoder=None):
        self.centroids_mel = np.asarray(centroids_mel, np.float32)
        self.centroids_mag = np.asarray(centroids_mag, np.float32)
        self.K = len(self.centroids_mel)
        self._mel = _mel_filters()
        self.decoder = decoder  # a CodeDecoder module (learned inverse) or None (centroid spectra)

    # ------------------------------------------------------------------------------------------ fit / io
    @staticmethod
    def mel_of(logmag: np.ndarray) -> np.ndarray:
        mel = _mel_filters()
        return np.log(np.maximum(np.exp(logmag) @ mel.T, 1e-5)).astype(np.float32)

    @classmethod
    def fit(cls, logmags: list[np.ndarray], K: int = 512, iters: int = 25, seed: int = 0) -> "SpectralCodec":
        """k-means (k-means++ init, Lloyd iterations in torch) over the log-mel of all frames."""
        import torch

        mag = np.concatenate(logmags)
        X = torch.from_numpy(cls.mel_of(mag))
        g = torch.Generator().manual_seed(seed)
        # k-means++ on a subsample for the init
        sub = X[torch.randperm(len(X), generator=g)[: min(len(X), 20000)]]
        C = sub[torch.randint(len(sub), (1,), generator=g)]
        d2 = torch.cdist(sub, C).squeeze(1) ** 2
        for _ in range(K - 1):
            i = torch.multinomial(d2 / d2.sum(), 1, generator=g)
            C = torch.cat([C, sub[i]])
            d2 = torch.minimum(d2, (torch.cdist(sub, sub[i]).squeeze(1) ** 2))
        for _ in range(iters):
            a = torch.cdist(X, C).argmin(1)
            for k in range(K):
                m = a == k
                if m.any():
                    C[k] = X[m].mean(0)
        a = torch.cdist(X, C).argmin(1).numpy()
        cm = np.zeros((K, mag.shape[1]), np.float32)
        for k in range(K):
            m = a == k
            cm[k] = mag[m].mean(0) if m.any() else mag.mean(0)
        return cls(C.numpy(), cm)

    def save(self, path: str | Path) -> None:
        np.savez_compressed(path, centroids_mel=self.centroids_mel.astype(np.float16),
                            centroids_mag=self.centroids_mag.astype(np.float16))

    @classmethod
    def load(cls, path: str | Path, decoder: str | Path | None | bool = True) -> "SpectralCodec":
        """The codebook from ``path`` (.npz); ``decoder``: the learned inverse's weights (.safetensors), True for
        ``decoder.safetensors`` beside ``path`` when it exists, False/None for the centroid spectra."""
        z = np.load(path)
        dec = None
        if decoder is True:
            decoder = Path(path).with_name("decoder.safetensors")
            decoder = decoder if decoder.exists() else None
        if decoder:
            dec = load_decoder(decoder)
        return cls(z["centroids_mel"].astype(np.float32), z["centroids_mag"].astype(np.float32), dec)

    # ---------------------------------------------------------------------------------------- encode / decode
    def encode(self, audio: np.ndarray) -> np.ndarray:
        """16 kHz audio → int64 tokens (n_frames,)."""
        import torch

        mel = torch.from_numpy(self.mel_of(log_magnitude(audio)))
        return torch.cdist(mel, torch.from_numpy(self.centroids_mel)).argmin(1).numpy().astype(np.int64)

    def spectrum(self, tokens) -> np.ndarray:
        """Tokens (T,) → float32 log-magnitude (2T, 513) at the 10 ms synthesis hop: the learned decoder's when
        there is one, else each code's centroid spectrum interpolated."""
        tokens = np.asarray(tokens, np.int64)
        if self.decoder is not None:
            import torch

            with torch.inference_mode():
                return self.decoder(torch.from_numpy(tokens)[None])[0].numpy()
        lm = self.centroids_mag[tokens]  # (T, 513) at 20 ms
        T = len(lm)
        up = HOP // SYN_HOP
        t_src = np.arange(T) * up
        t_dst = np.arange(T * up)
        return np.stack([np.interp(t_dst, t_src, lm[:, f]) for f in range(lm.shape[1])], 1).astype(np.float32)

    def decode(self, tokens, n_iter: int = 32) -> np.ndarray:
        """Tokens → float32 16 kHz audio (Griffin-Lim on :meth:`spectrum`)."""
        tokens = np.asarray(tokens, np.int64)
        if tokens.size == 0:
            return np.zeros(0, np.float32)
        return griffin_lim(np.exp(self.spectrum(tokens)).T, n_iter)


def griffin_lim(mag: np.ndarray, n_iter: int = 32, hop: int = SYN_HOP) -> np.ndarray:
    """Magnitude spectrogram float (513, T) at ``hop`` → float32 16 kHz audio, peak-normalised to 0.9 (phase by
    Griffin-Lim, ``n_iter`` iterations from a seeded random phase)."""
    import torch

    mag = torch.from_numpy(np.asarray(mag, np.float32))
    win = torch.hann_window(N_FFT)
    g = torch.Generator().manual_seed(0)
    angle = torch.rand(mag.shape, generator=g) * 2 * np.pi
    spec = mag * torch.exp(1j * angle)
    length = (mag.shape[1] - 1) * hop
    for _ in range(n_iter):
        y = torch.istft(spec, N_FFT, hop, window=win, center=True, length=length)
        s2 = torch.stft(y, N_FFT, hop, window=win, center=True, return_complex=True)
        spec = mag * torch.exp(1j * torch.angle(s2))
    y = torch.istft(spec, N_FFT, hop, window=win, center=True, length=length).numpy()
    return (y / (np.abs(y).max() + 1e-6) * 0.9).astype(np.float32)


DECODER_ARCH = {"d": 192, "layers": 4, "layers_up": 2}


def build_decoder(n_codes: int = 512, d: int = 192, layers: int = 4, layers_up: int = 2):
    """The learned inverse: codes (B, T) → log-magnitude (B, 2T, 513) at the 10 ms hop. A code embedding, residual
    convolutions (kernel 5) over the 20 ms frames so each frame sees ±``2·layers`` neighbours (transitions,
    coarticulation), a ×2 transposed convolution to 10 ms and ``layers_up`` more convolutions there."""
    import torch
    from torch import nn

    class CodeDecoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(n_codes, d)
            self.convs = nn.ModuleList(nn.Conv1d(d, d, 5, padding=2) for _ in range(layers))
            self.up = nn.ConvTranspose1d(d, d, 4, stride=2, padding=1)
            self.convs_up = nn.ModuleList(nn.Conv1d(d, d, 5, padding=2) for _ in range(layers_up))
            self.out = nn.Linear(d, N_FFT // 2 + 1)

        def forward(self, codes):
            h = self.emb(codes).transpose(1, 2)
            for c in self.convs:
                h = h + torch.nn.functional.gelu(c(h))
            h = self.up(h)
            for c in self.convs_up:
                h = h + torch.nn.functional.gelu(c(h))
            return self.out(h.transpose(1, 2))

    return CodeDecoder()


def load_decoder(path: str | Path):
    """A :func:`build_decoder` module from its ``.safetensors`` (fp16 weights; the architecture in the metadata)."""
    import json

    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), "pt") as f:
        arch = json.loads((f.metadata() or {}).get("arch", "{}")) or DECODER_ARCH
    dec = build_decoder(**arch)
    dec.load_state_dict({k: v.float() for k, v in load_file(str(path)).items()})
    return dec.eval().to(torch.float32)
