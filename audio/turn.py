"""End-of-turn classification with Smart Turn v3.2 (Daily / pipecat-ai, BSD-2-Clause; assets/smart_turn/card.md).

Smart Turn is an audio-only classifier (a Whisper-tiny-sized encoder + a linear head, int8 ONNX) that reads the last
≤ 8 s of a user's speech and gives the probability that the turn is complete (the speaker has finished) rather than
paused mid-phrase. Preprocessing matches pipecat's ``LocalSmartTurnAnalyzerV3._predict_endpoint`` exactly: 16 kHz
float audio, keep the last 8 s (128 000 samples) or left-pad with zeros to 8 s, Whisper log-mel features with
``chunk_length=8`` (80 mel bins × 800 frames, 10 ms hop, zero-mean unit-variance waveform normalisation), input
``input_features`` (1, 80, 800); the output (1, 1) is already a sigmoid probability.

The features come from ``transformers.WhisperFeatureExtractor`` (pipecat vendors a numpy copy of the same
computation; the two agree to ≈ 1e-6).

The model's matrix products are dynamically quantised (uint8 activations × int8 weights). On x86-64 CPUs without
VNNI, onnxruntime's default U8S8 kernel sums pairs of products in saturating 16-bit registers (``vpmaddubsw``), so
the same audio gets a different probability than on a VNNI CPU, enough to flip a decision near the threshold; there
the session uses the exact U8U8 kernel (``session.x64quantprecision``, onnxruntime's documented remedy) instead.
Which CPUs those are is the engine's to say (``engine.core.cpu.int8_gemm_saturates``): it passes the decision as
``exact_int8``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from audio.io import SAMPLE_RATE

SR = SAMPLE_RATE  # Hz: Smart Turn reads 16 kHz audio, the engine's rate
WINDOW_S = 8  # seconds of context the model reads
MODEL_PATH = Path(__file__).resolve().parent.parent / "assets" / "smart_turn" / "smart-turn-v3.2-cpu.onnx"


class TurnDetector:
    """Smart Turn v3.2 over onnxruntime.

    Args:
        model_path: the ONNX file (default: assets/smart_turn/smart-turn-v3.2-cpu.onnx).
        threshold: probability at or above which :meth:`is_complete` says the turn is complete.
        threads: onnxruntime intra-op threads.
        exact_int8: use onnxruntime's exact U8U8 kernel for the quantised products (kept as ``self.exact_int8``);
            False = its default kernel. The engine passes ``engine.core.cpu.int8_gemm_saturates()``: True on CPUs
            where the default kernel saturates.

    Raises:
        FileNotFoundError: the model file is missing.
    """

    def __init__(self, model_path: str | Path | None = None, threshold: float = 0.5, threads: int = 1,
                 exact_int8: bool = False):
        import onnxruntime as ort
        from transformers import WhisperFeatureExtractor

        path = Path(model_path) if model_path else MODEL_PATH
        if not path.is_file():
            raise FileNotFoundError(f"Smart Turn model not found: {path}")
        so = ort.SessionOptions()
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.inter_op_num_threads = 1
        so.intra_op_num_threads = threads
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.exact_int8 = bool(exact_int8)
        if self.exact_int8:
            so.add_session_config_entry("session.x64quantprecision", "1")
        self.session = ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
        self.fe = WhisperFeatureExtractor(chunk_length=WINDOW_S)
        self.threshold = threshold
        self.last_probability: float | None = None

    @staticmethod
    def window(audio_16k: np.ndarray) -> np.ndarray:
        """The model's input waveform: the last 8 s of ``audio_16k`` (float32, 16 kHz), zero-padded at the start
        to exactly 128 000 samples."""
        x = np.asarray(audio_16k, np.float32).reshape(-1)
        n = WINDOW_S * SR
        if len(x) >= n:
            return x[-n:]
        return np.concatenate([np.zeros(n - len(x), np.float32), x])

    def features(self, audio_16k: np.ndarray) -> np.ndarray:
        """Log-mel input features, float32 (1, 80, 800)."""
        x = self.window(audio_16k)
        f = self.fe(x, sampling_rate=SR, padding="max_length", max_length=WINDOW_S * SR, truncation=True,
                    do_normalize=True, return_tensors="np").input_features
        return np.asarray(f, np.float32)

    def complete_probability(self, audio_16k: np.ndarray) -> float:
        """Probability (0–1) that the speaker has finished the turn, from the last ≤ 8 s of ``audio_16k``
        (float32 mono 16 kHz: the user's speech up to now, trailing silence included)."""
        out = self.session.run(None, {"input_features": self.features(audio_16k)})[0]
        p = float(np.asarray(out).reshape(-1)[0])
        self.last_probability = p
        return p

    def is_complete(self, audio_16k: np.ndarray) -> bool:
        """``complete_probability(audio_16k) >= threshold``."""
        return self.complete_probability(audio_16k) >= self.threshold

    __call__ = complete_probability
