"""The Piper voice's own VITS parts, cut out of its ONNX file: the text-side prior and the latent → waveform generator.

VITS (Kim et al., 2021) synthesises in four steps, all inside Piper's single ONNX graph: the text encoder ``enc_p``
gives per phoneme the prior's mean m_p and log standard deviation logs_p (192 channels each); the stochastic duration
predictor ``dp`` gives frames per phoneme w_ceil = ceil(exp(logw) · length_scale); the prior, expanded by those
durations, is sampled, z_p = m_p + ε · exp(logs_p) · noise_scale, and the inverse flow maps it to the latent z
(192 channels per 256-sample frame at 22.05 kHz, ≈ 86 frames/s); the HiFi-GAN generator ``dec`` renders z as audio.

The codec TTS (engine/synthesis/codec_lm.py) replaces the prior sample and the flow with codec tokens of z sampled
by an autoregressive LM that reads the expanded prior, and keeps the rest. This module extracts, with
``onnx.utils.extract_model``, three sub-graphs of the installed voice file (never a copy in git):

* ``prior``: phoneme ids → m_p, logs_p (1, 192, n) and w_ceil (1, 1, n) (text encoder + duration predictor);
* ``generator``: z (1, 192, T) → audio (1, 1, 256 T) (``dec``);
* ``teacher``: the whole voice with m_p, logs_p, w_ceil and z as extra outputs (training data).

They are cached under ``<cache_dir>/vits_<sha256 of the voice>/`` and rebuilt when missing; the voice's sha256 is
checked against the one the codec was trained on.

Tensor names are those of Piper's export of en_US-joe-medium (onnx 1.x, torch exporter): the generator's input is the
masked flow output ``/Mul_7_output_0``; m_p, logs_p are the text encoder's ``/enc_p/Split`` outputs; w_ceil is
``/Ceil_output_0``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.models import sha256_file

SAMPLE_RATE = 22050
HOP = 256  # waveform samples per latent frame
Z_CHANNELS = 192
# tensor names inside the voice's graph (see the module docstring)
M_P, LOGS_P, W_CEIL, Z, AUDIO = "/enc_p/Split_output_0", "/enc_p/Split_output_1", "/Ceil_output_0", "/Mul_7_output_0", \
    "output"
PARTS = {"prior": (["input", "input_lengths", "scales"], [M_P, LOGS_P, W_CEIL]),
         "generator": ([Z], [AUDIO]),
         "teacher": (["input", "input_lengths", "scales"], [M_P, LOGS_P, W_CEIL, Z, AUDIO])}


def extract(voice_model: str | Path, cache_dir: str | Path, part: str, sha256: str | None = None) -> Path:
    """The ``part`` sub-graph ("prior", "generator" or "teacher") of ``voice_model`` as an ONNX file in
    ``cache_dir``, extracted on first use.

    Args:
        voice_model: the Piper voice .onnx; cache_dir: where extracted graphs are kept; sha256: the voice's sha256
            when the caller knows it (computed otherwise).

    Raises:
        ImportError: ``onnx`` is not installed and the graph is not cached yet. KeyError: unknown part.
    """
    inputs, outputs = PARTS[part]
    sha = sha256 or sha256_file(Path(voice_model))
    out = Path(cache_dir) / f"vits_{sha[:16]}" / f"{part}.onnx"
    if not out.exists():
        import onnx.utils

        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        onnx.utils.extract_model(str(voice_model), str(tmp), inputs, outputs, check_model=False)
        tmp.replace(out)
    return out


def _session(path: Path, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def expand(x: np.ndarray, durations: np.ndarray) -> np.ndarray:
    """Per-phoneme rows (n, C) repeated ``durations`` (int (n,)) times → (sum(durations), C): VITS's hard monotonic
    alignment (generate_path) applied to the prior."""
    return np.repeat(np.asarray(x), np.asarray(durations, np.int64), axis=0)


class VitsParts:
    """ONNX Runtime sessions of the voice's prior and generator (and, on demand, the whole voice as teacher).

    Args:
        voice_model: the Piper voice .onnx; cache_dir: where the extracted graphs are cached;
        noise_scale, length_scale, noise_w: the voice's inference scales (its .onnx.json ``inference``);
        sha256: the voice's sha256 (checked by the caller against the codec's); threads: ORT intra-op threads.
    """

    def __init__(self, voice_model: str | Path, cache_dir: str | Path, noise_scale: float = 0.667,
                 length_scale: float = 1.0, noise_w: float = 0.8, sha256: str | None = None, threads: int = 1):
        self.voice_model = Path(voice_model)
        self.cache_dir = Path(cache_dir)
        self.sha256 = sha256 or sha256_file(self.voice_model)
        self.scales = np.array([noise_scale, length_scale, noise_w], np.float32)
        self.threads = threads
        self._sessions: dict = {}

    def session(self, part: str):
        if part not in self._sessions:
            self._sessions[part] = _session(extract(self.voice_model, self.cache_dir, part, self.sha256), self.threads)
        return self._sessions[part]

    def _feed(self, ids: np.ndarray) -> dict:
        ids = np.asarray(ids, np.int64)
        return {"input": ids[None], "input_lengths": np.array([len(ids)], np.int64), "scales": self.scales}

    def prior(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Phoneme ids int (n,) → m_p, logs_p float32 (n, 192) and durations int64 (n,) in latent frames (the
        voice's duration predictor, sampled with its noise_w)."""
        m, logs, w = self.session("prior").run(None, self._feed(ids))
        return m[0].T.copy(), logs[0].T.copy(), w[0, 0].astype(np.int64)

    def teacher(self, ids: np.ndarray) -> dict:
        """The voice itself on phoneme ids: {"m_p", "logs_p": float32 (n, 192), "dur": int64 (n,), "z": float32
        (T, 192), "audio": float32 (256 T,) at 22.05 kHz}."""
        m, logs, w, z, audio = self.session("teacher").run(None, self._feed(ids))
        return {"m_p": m[0].T.copy(), "logs_p": logs[0].T.copy(), "dur": w[0, 0].astype(np.int64),
                "z": z[0].T.copy(), "audio": audio.reshape(-1).astype(np.float32)}

    def generate(self, z: np.ndarray) -> np.ndarray:
        """Latent float (T, 192) → float32 audio (256 T,) at 22.05 kHz (the voice's HiFi-GAN generator)."""
        z = np.ascontiguousarray(np.asarray(z, np.float32).T[None])
        if z.shape[2] == 0:
            return np.zeros(0, np.float32)
        return self.session("generator").run(None, {Z: z})[0].reshape(-1).astype(np.float32)
