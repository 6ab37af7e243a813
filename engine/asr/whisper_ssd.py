"""One Whisper model as the streaming backends use it (:class:`WhisperSSD`): faster-whisper's CTranslate2 encoder and
decoder, the tokenizers with their prompts, word alignment and language identification, and, loaded on first use,
the CTC draft head (:mod:`engine.asr.ctc_draft`) and the torch decoder (:mod:`engine.asr.whisper_torch`) that CTC
self-speculative decoding and SpecASR verify with. Plain AR decoding (:mod:`engine.asr.whisper_ar`) uses its
CTranslate2 parts only, so the default path never imports torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from audio.io import SAMPLE_RATE
from engine.asr.tokenizer import repair_model_tokenizer
from engine.asr.window import WindowPolicy, log_mel
from engine.core.events import Word


class WhisperSSD:
    """Encoder (CTranslate2 via faster-whisper), CTC head and torch decoder of one Whisper model, shared by the
    SSD backend, the AR-torch baseline and the benchmark.

    Args:
        model_dir: CTranslate2 Whisper directory (the ``asr_target`` role).
        head_dir: trained CTC head (default ``assets/ctc_head``).
        lid_head, lid_head_dir: with language "auto", Whisper's language identification is multiplied by the trained
            language-ID head's (engine.asr.language_head.fuse) raised to ``lid_head`` (0 = Whisper's alone); the head
            in ``lid_head_dir`` (default ``assets/lid_head``; Whisper's alone when none is shipped).
        device: "cpu" or "cuda" (None: CUDA when available); compute_type: CTranslate2 type (int8 on CPU).

    Raises:
        FileNotFoundError: no CTC head.
    """

    def __init__(self, model_dir: str | Path, head_dir: str | Path | None = None, device: str | None = None,
                 compute_type: str = "int8", cpu_threads: int = 0, language: str = "en",
                 window: WindowPolicy | None = None, lid_head: float = 2.0,
                 lid_head_dir: str | Path | None = None):
        import ctranslate2
        from faster_whisper import WhisperModel

        # CTranslate2 runs the encoder (and the live decoder): ask it, so the default AR path never imports torch
        device = device or ("cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu")
        if device == "cuda" and compute_type == "int8":
            compute_type = "float16"
        self.device = device
        self.model_dir = model_dir
        self.fw = WhisperModel(str(model_dir), device=device, compute_type=compute_type, cpu_threads=cpu_threads)
        repair_model_tokenizer(self.fw, model_dir)  # the packaged base tokenizer.json lacks a BPE merge
        self._whisper = None
        self._head_dir = head_dir
        self._head = None
        self.lid_head_weight = float(lid_head)
        self._use_lid_head, self._lid_head_dir, self._lid_head = self.lid_head_weight > 0, lid_head_dir, None
        self.window = window or WindowPolicy()
        # "auto": each decode identifies its language (language_for); the default tokenizer says English
        self.language = language if self.fw.model.is_multilingual else None
        self._toks: dict = {}
        self.tok = self.tokenizer()

    @property
    def whisper(self):
        """The torch port of the same weights (decoder with KV-cache control), loaded on first use."""
        if self._whisper is None:
            from engine.asr.whisper_torch import TorchWhisper

            self._whisper = TorchWhisper(self.model_dir, device=self.device)
        return self._whisper

    @property
    def head(self):
        """The CTC head (loaded on first use; FileNotFoundError if none was trained/shipped)."""
        if self._head is None:
            from engine.asr.ctc_draft import CTCHead

            self._head = CTCHead(self._head_dir, device=self.device)
        return self._head

    @property
    def suppressed_ids(self) -> frozenset[int]:
        """Token ids CTranslate2's ``generate`` never emits (the model's ``config.json`` ``suppress_ids``, what its
        default ``suppress_tokens=[-1]`` reads; the tokenizer's non-speech tokens when there is no such file)."""
        if getattr(self, "_suppressed_ids", None) is None:
            import json

            cfg = Path(str(self.model_dir)) / "config.json"
            try:
                ids = json.loads(cfg.read_text()).get("suppress_ids") or []
            except (OSError, ValueError):
                ids = list(self.tok.non_speech_tokens)
            self._suppressed_ids = frozenset(int(i) for i in ids)
        return self._suppressed_ids

    def head_matches(self) -> bool:
        """Whether the CTC head was trained on an encoder of this model's width (it is tied to the encoder it was
        trained on: Whisper base, d_model 512). False also when no head is available."""
        try:
            return int(self.head.config["d_model"]) == int(self.whisper.model.config.d_model)
        except FileNotFoundError:
            return False

    def encode(self, audio: np.ndarray, n_frames: int | None = None):
        """Encode float32 16 kHz audio (n ≤ 480000 samples) in a window of ``n_frames`` mel frames (default: this
        model's :class:`~engine.asr.window.WindowPolicy`; 3000 = the padded 30 s window).

        Returns:
            (CTranslate2 StorageView (1, n_frames / 2, d_model), torch float tensor of the same values).
        """
        import torch

        audio = np.asarray(audio, np.float32)
        n_frames = self.window.n_frames(len(audio)) if n_frames is None else n_frames
        sv = self.fw.encode(log_mel(self.fw.feature_extractor, audio, n_frames))
        if self.device == "cuda":
            t = torch.as_tensor(sv, device="cuda").half()  # the torch port runs in fp16 on CUDA
        else:
            t = torch.from_numpy(np.asarray(sv)).float()
        return sv, t

    @property
    def lid_head(self):
        """The language-ID head (engine.asr.language_head) combined with Whisper's identification, or None: turned
        off (``lid_head=0``) or none shipped. Loaded on first use."""
        if self._lid_head is None and self._use_lid_head:
            from engine.asr.language_head import LanguageIdHead

            try:
                self._lid_head = LanguageIdHead(self._lid_head_dir)
            except FileNotFoundError:
                self._use_lid_head = False
        return self._lid_head

    def tokenizer(self, language: str | None = None):
        """The faster-whisper tokenizer whose SOT sequence names ``language`` (ISO 639-1; default this model's,
        English for "auto"; an English-only model has none). Built once per language."""
        from faster_whisper.tokenizer import Tokenizer

        lang = (language or self.language) if self.fw.model.is_multilingual else None
        lang = "en" if lang == "auto" else lang
        if lang not in self._toks:
            self._toks[lang] = Tokenizer(self.fw.hf_tokenizer, self.fw.model.is_multilingual, task="transcribe",
                                         language=lang)
        return self._toks[lang]

    def language_for(self, sv, language, audio_s: float) -> tuple[str | None, list[tuple[str, float]] | None]:
        """The language to decode a window in: ``language`` None = this model's (a multilingual model set to "auto"
        identifies it on ``sv``, the window's encoder output, and takes the most probable); a code = that one; a
        :class:`engine.asr.backend.LanguageChooser` = identification on ``sv``
        (:func:`engine.asr.language_head.identify_with_whisper`: ``probs`` fused with the language-ID head,
        ``whisper_probs`` Whisper's own) and the caller's choice (:class:`engine.asr.language_id.SessionLanguage`).
        Returns (code or None for an English-only model, the identified (code, probability) pairs best first, or None
        when nothing was identified)."""
        if not self.fw.model.is_multilingual:
            return None, None
        if isinstance(language, str):
            return language, None
        if language is None and self.language != "auto":
            return self.language, None
        from engine.asr.language_head import identify_with_whisper

        probs, own = identify_with_whisper(self.fw.model, sv, int(round(audio_s * SAMPLE_RATE)), self.lid_head,
                                           self.lid_head_weight)
        if language is None:
            return probs[0][0], probs
        return language(probs, audio_s, whisper_probs=own), probs

    @staticmethod
    def prompt_fits(language, lang: str | None) -> bool:
        """Whether a decode in ``lang`` may use its text prompt: a ``language`` callable may say which language its
        caller's prompt text is in (``prompt_language``); prompted with text in one language, Whisper translates
        speech in another into it, so such a window is decoded without the prompt."""
        pl = getattr(language, "prompt_language", None)
        return not pl or lang is None or pl == lang

    def prompt(self, previous_text: str = "", language: str | None = None) -> list[int]:
        """faster-whisper's prompt: [<|startofprev|>, previous tokens (≤ 223)] + SOT sequence (naming ``language``,
        default this model's) + <|notimestamps|>."""
        tok = self.tokenizer(language)
        seq: list[int] = []
        if previous_text.strip():
            prev = tok.encode(" " + previous_text.strip())
            seq = [tok.sot_prev] + prev[-223:]
        return seq + list(tok.sot_sequence) + [tok.no_timestamps]

    def words(self, tokens: list[int], sv, n_samples: int, language: str | None = None,
              forced: Sequence[int] = ()) -> list[Word]:
        """Word timestamps (s, relative to the window) by cross-attention DTW (CTranslate2 ``align``, the same
        path faster-whisper's ``word_timestamps`` uses), for tokens decoded in ``language`` (default this model's).
        ``forced``: text tokens forced before ``tokens`` (a decode's ``prefix``): aligned with them, so that
        ``tokens`` get their times after the words the audio begins with, and not returned."""
        if not tokens:
            return []
        from faster_whisper.transcribe import merge_punctuations

        forced = list(forced)
        al = self.fw.find_alignment(self.tokenizer(language), [forced + list(tokens)], sv, n_samples // 160)[0]
        starts = np.cumsum([0] + [len(a["tokens"]) for a in al])[:-1]
        # as faster-whisper's word_timestamps: punctuation joins its word (no "." word with its own time)
        merge_punctuations(al, "\"'“¿([{-", "\"'.。,，!！?？:：”)]}、")
        return [Word(float(a["start"]), float(a["end"]), a["word"]) for a, i in zip(al, starts)
                if a["word"] and i >= len(forced)]
