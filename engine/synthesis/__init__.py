"""Speech synthesis (text-to-speech): the answer's voice.

Two engines, chosen by ``tts.engine`` (engine/runtime.py builds them):

* ``piper`` (the default): :mod:`engine.synthesis.piper_tts`, the Piper voice (VITS, not autoregressive).
* ``codec``: :mod:`engine.synthesis.codec_tts`, an autoregressive codec-token TTS built on that voice's own parts
  and sampled with PCG (Yanuka et al., "Principled Coarse-Grained Acceptance for Speculative Decoding in Speech",
  2025, arXiv:2511.13732). Its pieces: :mod:`~engine.synthesis.vits_latent` (the voice's prior and generator, cut
  out of its ONNX file), :mod:`~engine.synthesis.codec` (one k-means token per latent frame),
  :mod:`~engine.synthesis.codec_lm` (the target and draft LM), :mod:`~engine.synthesis.codec_lm_onnx` (their ONNX
  Runtime graphs), :mod:`~engine.synthesis.codec_lm_session` (the LM over one utterance),
  :mod:`~engine.synthesis.coarse_grained_sampling` (PCG and the other samplers),
  :mod:`~engine.synthesis.device_sampling` (whole sampling rounds on a GPU, as CUDA graphs) and
  :mod:`~engine.synthesis.training` (the script that trained assets/codec_tts).
"""
