"""Piper TTS (VITS, not autoregressive): the answer voice. Uses the ``piper-tts`` package (GPL-3.0) with the
embedded ``en_US-joe-medium`` voice (role ``tts_voice``), on onnxruntime (CUDA provider when asked and present).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


class PiperTTS:
    """Synthesise text to float32 mono audio at ``sample_rate`` Hz (22,050 for the joe voice).

    Args:
        model_path: voice .onnx; config_path: its .onnx.json.
        length_scale: phoneme duration scale (> 1 slower).

    Raises:
        RuntimeError: the voice cannot be loaded.
    """

    def __init__(self, model_path: str | Path, config_path: str | Path | None = None, length_scale: float = 1.0,
                 use_cuda: bool = False):
        from piper import PiperVoice, SynthesisConfig

        try:
            self.voice = PiperVoice.load(str(model_path), config_path=str(config_path) if config_path else None,
                                         use_cuda=use_cuda)
        except Exception as e:
            raise RuntimeError(f"cannot load Piper voice {model_path}: {e}") from None
        self.sample_rate = int(self.voice.config.sample_rate)
        self.syn_config = SynthesisConfig(length_scale=length_scale)

    def synthesize(self, text: str) -> np.ndarray:
        """float32 (n,) samples in [-1, 1]; empty array for text with nothing to say."""
        chunks = [c.audio_float_array for c in self.voice.synthesize(text, syn_config=self.syn_config)]
        if not chunks:
            return np.zeros(0, np.float32)
        return np.concatenate(chunks).astype(np.float32)
