"""A voice per language (``tts.voices``): the answer is spoken only by a voice of the language it is in.

With ``asr.language = auto`` the assistant answers in the language the user spoke (``in_language`` in
:mod:`engine.answer.assistant`), but the embedded voice (``models.tts_voice``, Piper en_US-joe-medium) reads every
text with English phonemes: Whisper-base's CER on its French is 22 %, on its German 37 % (English 6 %), which is
noise to the listener. So English (and a language not known) keeps ``models.tts_voice``; another language is spoken
by the voice ``tts.voices`` names for it, or not at all (the text is still shown and journalled).

``tts.voices`` is ``language=voice`` pairs separated by commas, the language a Whisper code and the voice one of

* a local path: a Piper voice ``.onnx`` (its ``.onnx.json`` beside it) or a directory holding one;
* a hub id ``org/name:file.onnx`` (a Piper voice fetched with its ``.onnx.json``; needs a network, as every hub
  id of :mod:`engine.models`);
* ``kokoro`` or ``kokoro:STYLE``: Kokoro-82M int8 from its pinned packages (:mod:`engine.synthesis.kokoro_tts`),
  fed espeak-ng's phonemes of the language; offered only for the languages where it passed the benchmark's gate
  (:data:`engine.synthesis.kokoro_tts.ADOPTED`, ``bench/results/voices.json``).

:class:`VoiceSet` resolves every voice when it is built (a missing file, a bad hub id or a missing package is one
line at start-up, exit 2 on the CLI) and loads each one on the first answer in its language, once. Every voice of a
set speaks at the English voice's sample rate (another rate is resampled), because the session opens its player and
writes its answer WAV at that rate.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from engine.config import parse_voices  # noqa: F401 (declared with the setting; re-exported)

KOKORO = "kokoro"  # the voice spec of the embedded Kokoro model ("kokoro" or "kokoro:STYLE")


@dataclass(frozen=True)
class VoiceSpec:
    """One ``tts.voices`` entry resolved to disk.

    Attributes:
        language: Whisper code; spec: as written; kind: "piper" | "kokoro"; path: the .onnx (Piper) or the joined
            Kokoro model; config: the Piper voice's .onnx.json (None for Kokoro); style: Kokoro's speaker style.
    """

    language: str
    spec: str
    kind: str
    path: Path
    config: Path | None = None
    style: str = ""


def resolve_voice(language: str, spec: str, cache_dir: Path) -> VoiceSpec:
    """Where the voice ``spec`` of ``language`` is on disk (a hub id is fetched now, Kokoro is joined and its
    sha256 checked now), the way :func:`engine.models.resolve` finds a role's model.

    Raises:
        engine.models.ModelError: a missing path, an unreachable hub, a missing or damaged Kokoro package, Kokoro
            for a language it failed the gate on; one line starting ``tts.voices: <language>=``.
    """
    from engine.models import ModelError, resolve_hub, resolve_path

    head = f"tts.voices: {language}={spec}"
    name, _, style = spec.partition(":")
    if name == KOKORO:
        from engine.synthesis import kokoro_tts

        try:
            path = kokoro_tts.resolve_model(cache_dir)
            style = kokoro_tts.check_language(language, style)
        except ModelError as e:
            raise type(e)(f"{head}: {e}") from None
        return VoiceSpec(language, spec, "kokoro", path, style=style)
    p = Path(spec).expanduser()
    try:
        repo = spec.partition(":")[0]  # a hub id's file may sit in a folder of its repo (org/name:fr/x.onnx)
        if p.exists() or spec.startswith((".", "/", "~")) or os.sep in repo and repo.count("/") != 1:
            m = resolve_path("tts_voice", p)
        elif "/" in repo:
            m = resolve_hub("tts_voice", spec, cache_dir)
        else:
            raise ModelError("neither a path to a Piper .onnx, a hub id org/name:file.onnx, nor kokoro")
    except ModelError as e:
        msg = str(e).removeprefix("model for tts_voice: ")
        raise type(e)(f"{head}: {msg}") from None
    return VoiceSpec(language, spec, "piper", Path(m.path), Path(m.config) if m.config else None)


def load_voice(v: VoiceSpec, length_scale: float = 1.0):
    """The TTS object of a resolved voice: ``synthesize(text) -> float32 (n,)`` at ``sample_rate`` Hz.

    Raises:
        RuntimeError: the voice cannot be loaded.
    """
    if v.kind == "kokoro":
        from engine.synthesis.kokoro_tts import KokoroTTS

        return KokoroTTS(v.path, v.language, style=v.style, speed=1.0 / length_scale)
    from engine.synthesis.piper_tts import PiperTTS

    return PiperTTS(v.path, v.config, length_scale=length_scale)


class Resampled:
    """A voice whose audio is resampled from its own rate to ``sample_rate`` Hz (float32 (n,))."""

    def __init__(self, voice, sample_rate: int):
        self.voice, self.sample_rate = voice, int(sample_rate)

    def synthesize(self, text: str) -> np.ndarray:
        from audio.io import resample

        audio = self.voice.synthesize(text)
        return resample(audio, self.voice.sample_rate, self.sample_rate).astype(np.float32) if len(audio) else audio


def missing_hint(language: str) -> str:
    """The one line that tells the user an answer in ``language`` is not spoken, and the setting that adds a voice."""
    from engine.translate.languages import language_name

    return (f"no {language} voice: {language_name(language)} answers are shown, not spoken "
            f"(set tts.voices={language}=/path/to/{language}-voice.onnx, a Piper voice)")


class VoiceSet:
    """The answer voices by language (see the module docstring).

    Args:
        english: the voice of English and of an unknown language ("" / None); None = text only.
        voices: ``{language: VoiceSpec}`` of ``tts.voices``.
        load: ``load(spec) -> voice``, called once per language on its first use (a runtime passes one that
            caches in the runtime).
    """

    def __init__(self, english, voices: dict[str, VoiceSpec] | None = None,
                 load: Callable[[VoiceSpec], object] | None = None):
        self.english = english
        self.specs = dict(voices or {})
        self._load = load or load_voice
        self._loaded: dict[str, object] = {}
        self._lock = threading.Lock()

    @property
    def sample_rate(self) -> int | None:
        """Hz of every voice of the set (the English voice's; None without one)."""
        return int(self.english.sample_rate) if self.english is not None else None

    def languages(self) -> tuple[str, ...]:
        """The languages with a voice of their own (English aside)."""
        return tuple(self.specs)

    def has(self, language: str | None) -> bool:
        """Whether an answer in ``language`` is spoken."""
        return self._english(language) and self.english is not None or (language or "").lower() in self.specs

    def voice(self, language: str | None):
        """The voice of ``language`` (ISO 639-1; "" / None = not known: the English voice), loaded on first use;
        None when the language has no voice.

        Raises:
            RuntimeError: the voice cannot be loaded (asked again next time).
        """
        if self._english(language):
            return self.english
        lang = language.lower()
        spec = self.specs.get(lang)
        if spec is None:
            return None
        with self._lock:
            if lang not in self._loaded:
                v = self._load(spec)
                rate = self.sample_rate
                self._loaded[lang] = v if rate is None or int(v.sample_rate) == rate else Resampled(v, rate)
            return self._loaded[lang]

    @staticmethod
    def _english(language: str | None) -> bool:
        return not language or language.lower() == "en"
