"""Generate the streaming-ASR speech corpus (bench/data/stream_speech): synthetic dialogues, a pause-free
monologue, short questions, and a non-speech guard set. Seeded and deterministic; the output is committed.

Voices: the Piper voice of the ``tts_voice`` role (length/noise scales varied; 22.05 kHz resampled to 16 kHz with
PyAV/libswresample, ``audio.io.resample``) and espeak-ng (several English voices and variants, 140–190 words/min).
Piper's VITS samples noise inside the ONNX graph; ``onnxruntime.set_seed`` before the session is created makes
the whole sequence of synthesis calls reproducible.

Text: sentences of bench/data/mt_bench_questions.jsonl and bench/data/gsm8k_test_first100.jsonl and the
conversational lines below. The reference of each file is exactly the text synthesised, in order.

Files (16 kHz mono 16-bit FLAC):
    * ``dialogue_{1,2,3}.flac`` (45–70 s): alternating speakers, 0.3–2.0 s pauses between turns and 0.12–0.45 s
      pauses inside turns; dialogue_2 has light noise (25 dB SNR); dialogue_3 a synthetic room (exponentially
      decaying noise impulse response, RT60 0.45 s) and noise at 28 dB SNR.
    * ``monologue_70s.flac``: ≈ 70 s of one Piper voice with no pause longer than 0.3 s (sentence silences
      trimmed to ≤ 0.1 s, joined with 0.05–0.25 s gaps, internal pauses shortened to ≤ 0.25 s).
    * ``questions_{1..4}.flac``: one short spoken question each (3–8 s), at different rates.
    * ``nonspeech/``: silence, white and pink noise, a tone melody, hard-clipped speech, 50 Hz hum with reversed
      babble. References "" except clipped_speech (its sentence).
    * ``refs.json`` in each folder: {file name: reference text}.

Spoken questions for the voice-to-voice benchmark (``--questions N --out bench/data``): see :func:`spoken_questions`.

Run: ``python -m bench.make_speech`` (``--check``: also print each file's offline faster-whisper WER vs its
reference, greedy and beam 5).
"""

from __future__ import annotations

import argparse
import io
import json
import random
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

from audio.io import SAMPLE_RATE

HERE = Path(__file__).resolve().parent
OUT = HERE / "data" / "stream_speech"
SR = SAMPLE_RATE  # Hz
SEED = 20240611

# Natural spoken English, written for this corpus.
CONVERSATION = [
    "Yeah, I think we should move the meeting to Thursday.",
    "Thursday works for me, but not before ten in the morning.",
    "Okay, so who is going to send the invitation?",
    "I can do that after lunch, no problem.",
    "Did you hear back from the landlord about the heating?",
    "Not yet, I called twice and left a message both times.",
    "Honestly, I would just email them and keep a record of it.",
    "That is a good idea, I will do that tonight.",
    "By the way, how was your trip to the coast last weekend?",
    "It was lovely, we walked along the cliffs and had fish and chips.",
    "The weather was a bit cold, but the sun came out on Sunday.",
    "Oh nice, I have been meaning to go there for ages.",
    "You should, the train only takes about two hours.",
    "Can you remind me what time the kids finish school today?",
    "They finish at half past three, and then they have football practice.",
    "Right, so I need to pick them up at five then.",
    "Could you grab some milk and bread on the way home?",
    "Sure, do we need anything else from the shop?",
    "Maybe some apples and a bag of rice if they have it.",
    "I was thinking we could cook pasta tonight.",
    "Sounds good to me, I will make a salad to go with it.",
    "Have you finished the report for the client yet?",
    "Almost, I just need to check the numbers in the last section.",
    "Let me know if you want me to read it before you send it.",
    "Thanks, that would really help, I keep missing small mistakes.",
    "So what did the doctor say about your knee?",
    "She said it is nothing serious, I just need to rest it for a week.",
    "Good, I was worried it might need surgery.",
    "No, thankfully not, but no running for a while.",
    "Are you coming to the party on Saturday night?",
    "I would love to, but my sister is visiting that weekend.",
    "Bring her along, the more the merrier.",
    "Really? I will ask her, I am sure she would enjoy it.",
    "I cannot find my keys anywhere, have you seen them?",
    "I think you left them on the kitchen table next to the fruit bowl.",
    "Oh there they are, thank you so much.",
    "What do you think about the new project plan?",
    "I like it overall, but the deadline looks a bit tight.",
    "We could ask for two more weeks and cut the optional features.",
    "Let us talk to the manager about it tomorrow morning.",
    "Do you want to watch a film tonight or just relax?",
    "A film sounds great, something funny would be nice.",
    "Okay, I will find something while you make the tea.",
    "Wait, did you remember to lock the back door?",
    "Yes, I checked it twice before we left.",
    "Great, then let us get going or we will miss the bus.",
    "I have been learning to play the guitar in the evenings.",
    "That is amazing, how long have you been practising?",
    "Only about three months, so I still only know a few songs.",
]

QUESTIONS = [
    ("What is the weather going to be like in Paris tomorrow?", ("piper", dict(length_scale=0.85))),
    ("How much in dollars does she make every day at the farmers' market?", ("piper", dict(length_scale=1.0))),
    ("Can you explain how a rainbow forms after the rain?", ("piper", dict(length_scale=1.3))),
    ("How many hours are there in a week, and how many minutes is that?",
     ("espeak", dict(voice="en-us", rate=150, pitch=50))),
]


# ------------------------------------------------------------------------------------------------------------ text
def _sentences(text: str) -> list[str]:
    parts = re.split(r"(?<=[.!?])\s+", " ".join(text.replace("’", "'").split()))
    return [p for p in parts if 5 <= len(p.split()) <= 18 and re.fullmatch(r"[A-Za-z0-9 ,.'?!-]+", p)]


def corpus_sentences() -> tuple[list[str], list[str]]:
    """(MT-Bench sentences, GSM8K sentences) that read well aloud (5–18 words, plain characters)."""
    mt = [s for line in (HERE / "data" / "mt_bench_questions.jsonl").open()
          for t in json.loads(line)["turns"] for s in _sentences(t)]
    gsm = [s for line in (HERE / "data" / "gsm8k_test_first100.jsonl").open()
           for s in _sentences(json.loads(line)["question"])]
    return mt, gsm


# ----------------------------------------------------------------------------------------------------------- audio
class Voices:
    """Piper (the tts_voice role) and espeak-ng, both giving float32 16 kHz mono."""

    def __init__(self, seed: int = SEED):
        import onnxruntime as ort

        from audio.io import resample
        from engine.config import load_config
        from engine.runtime import Runtime

        ort.set_seed(seed)  # Piper's in-graph noise: reproducible from a session created after this
        self.rt = Runtime(load_config(), progress=False)
        self.tts = self.rt.tts()
        self.resample = resample
        self.espeak = shutil.which("espeak-ng")
        if not self.espeak:
            raise SystemExit("espeak-ng is not installed (apt-get install -y espeak-ng)")

    def piper(self, text: str, length_scale: float = 1.0, noise_scale: float = 0.667,
              noise_w_scale: float = 0.8) -> np.ndarray:
        from piper import SynthesisConfig

        self.tts.syn_config = SynthesisConfig(length_scale=length_scale, noise_scale=noise_scale,
                                              noise_w_scale=noise_w_scale)
        a = self.tts.synthesize(text)
        return self.resample(a, self.tts.sample_rate, SR)

    def espeak_ng(self, text: str, voice: str = "en-us", rate: int = 160, pitch: int = 50) -> np.ndarray:
        import soundfile as sf

        cmd = [self.espeak, "-v", voice, "-s", str(rate), "-p", str(pitch), "--stdout", text]
        wav = subprocess.run(cmd, capture_output=True, check=True).stdout
        a, rate_hz = sf.read(io.BytesIO(wav), dtype="float32")
        return self.resample(a, rate_hz, SR)

    def say(self, text: str, spec: tuple[str, dict]) -> np.ndarray:
        kind, kw = spec
        return self.piper(text, **kw) if kind == "piper" else self.espeak_ng(text, **kw)


def _frame_rms(a: np.ndarray, hop: int = 160) -> np.ndarray:
    n = len(a) // hop
    return np.sqrt((a[: n * hop].reshape(n, hop) ** 2).mean(axis=1) + 1e-12)


def trim(a: np.ndarray, keep_s: float = 0.05, rel_db: float = -40.0) -> np.ndarray:
    """Cut leading/trailing silence (10 ms frames below ``rel_db`` of the peak frame) to ``keep_s`` seconds."""
    rms = _frame_rms(a)
    if not len(rms):
        return a
    voiced = np.nonzero(rms > rms.max() * 10 ** (rel_db / 20))[0]
    if not len(voiced):
        return a[:0]
    keep = int(keep_s * SR)
    lo = max(0, voiced[0] * 160 - keep)
    hi = min(len(a), (voiced[-1] + 1) * 160 + keep)
    return a[lo:hi]


def shorten_pauses(a: np.ndarray, max_s: float = 0.25, rel_db: float = -40.0) -> np.ndarray:
    """Shorten every internal silent stretch longer than ``max_s`` to ``max_s`` (cut in its middle)."""
    rms = _frame_rms(a)
    if not len(rms):
        return a
    silent = rms <= rms.max() * 10 ** (rel_db / 20)
    keep = np.ones(len(a), bool)
    limit = int(max_s * 100)
    i = 0
    while i < len(silent):
        if silent[i]:
            j = i
            while j < len(silent) and silent[j]:
                j += 1
            if j - i > limit:
                mid = (i + j) // 2
                drop = (j - i) - limit
                lo = (mid - drop // 2) * 160
                keep[lo: lo + drop * 160] = False
            i = j
        else:
            i += 1
    return a[keep]


def longest_pause(a: np.ndarray, rel_db: float = -40.0) -> float:
    """Longest internal run of 10 ms frames below ``rel_db`` of the peak frame, seconds."""
    rms = _frame_rms(trim(a, 0.0, rel_db))
    silent = rms <= rms.max() * 10 ** (rel_db / 20)
    best = run = 0
    for s in silent:
        run = run + 1 if s else 0
        best = max(best, run)
    return best / 100


def add_noise(a: np.ndarray, snr_db: float, rng: np.random.Generator) -> np.ndarray:
    """White + pink noise at ``snr_db`` below the power of the active speech."""
    n = rng.standard_normal(len(a)) * 0.5 + pink_noise(len(a), rng) * 0.5
    act = np.abs(a) > 0.02 * np.abs(a).max()
    p_sig = np.mean(a[act] ** 2) if act.any() else 1e-4
    n *= np.sqrt(p_sig / 10 ** (snr_db / 10) / (np.mean(n ** 2) + 1e-12))
    return (a + n).astype(np.float32)


def pink_noise(n: int, rng: np.random.Generator) -> np.ndarray:
    """1/f noise by spectral shaping of white noise, unit RMS."""
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / SR)
    f[0] = f[1]
    x = np.fft.irfft(spec / np.sqrt(f), n)
    return (x / (np.sqrt(np.mean(x ** 2)) + 1e-12)).astype(np.float32)


def reverb(a: np.ndarray, rng: np.random.Generator, rt60: float = 0.45, wet: float = 0.6) -> np.ndarray:
    """Convolve with an exponentially decaying noise impulse response (direct path + diffuse tail)."""
    n = int(rt60 * SR)
    t = np.arange(n) / SR
    rir = rng.standard_normal(n) * np.exp(-6.9 * t / rt60)
    rir[: int(0.005 * SR)] = 0.0  # the diffuse tail starts after the direct sound
    rir *= wet / np.sqrt((rir ** 2).sum())
    rir[0] = 1.0
    size = 1 << (len(a) + n - 2).bit_length()
    y = np.fft.irfft(np.fft.rfft(a, size) * np.fft.rfft(rir, size), size)[: len(a)]
    return (y / (np.abs(y).max() + 1e-9) * np.abs(a).max()).astype(np.float32)


def level(a: np.ndarray, peak: float) -> np.ndarray:
    return (a / (np.abs(a).max() + 1e-9) * peak).astype(np.float32)


def silence(s: float) -> np.ndarray:
    return np.zeros(int(round(s * SR)), np.float32)


# -------------------------------------------------------------------------------------------------------- dialogues
# (name, speakers [(spec, peak level)], target seconds, noise SNR dB or None, reverb)
DIALOGUES = [
    ("dialogue_1", [(("piper", dict(length_scale=1.0, noise_scale=0.667, noise_w_scale=0.8)), 0.7),
                    (("espeak", dict(voice="en-us", rate=165, pitch=45)), 0.55),
                    (("piper", dict(length_scale=1.2, noise_scale=0.5, noise_w_scale=0.6)), 0.5)],
     58.0, None, False),
    ("dialogue_2", [(("piper", dict(length_scale=0.9, noise_scale=0.7, noise_w_scale=0.9)), 0.65),
                    (("espeak", dict(voice="en-gb", rate=150, pitch=40)), 0.6),
                    (("espeak", dict(voice="en-us+f3", rate=175, pitch=60)), 0.5)],
     55.0, 25.0, False),
    ("dialogue_3", [(("piper", dict(length_scale=1.1, noise_scale=0.6, noise_w_scale=0.7)), 0.7),
                    (("espeak", dict(voice="en-gb+m4", rate=145, pitch=35)), 0.6),
                    (("piper", dict(length_scale=0.95, noise_scale=0.8, noise_w_scale=0.9)), 0.55)],
     52.0, 28.0, True),
]


def make_dialogue(voices: Voices, speakers, target_s: float, rng: random.Random, mt: list[str], gsm: list[str],
                  conv: list[str]) -> tuple[np.ndarray, str]:
    """Turns of alternating speakers until ``target_s`` seconds; Piper speakers also read benchmark questions."""
    pieces, texts, total = [silence(rng.uniform(0.3, 0.8))], [], 0.0
    prev = -1
    while total < target_s - 4.0:
        # the first speaker (Piper) talks most; never the same speaker twice in a row
        choices = [i for i in range(len(speakers)) if i != prev]
        who = rng.choices(choices, weights=[3 if i == 0 else 2 for i in choices])[0]
        prev = who
        spec, peak = speakers[who]
        n_sent = rng.choice([1, 1, 2, 2, 3]) if spec[0] == "piper" else rng.choice([1, 1, 2])
        turn = []
        for k in range(n_sent):
            if spec[0] == "piper" and rng.random() < 0.45:
                text = (mt if rng.random() < 0.5 else gsm).pop(0)
            else:
                text = conv.pop(0) if conv else mt.pop(0)
            a = trim(voices.say(text, spec), keep_s=0.08)
            if k:
                turn.append(silence(rng.uniform(0.12, 0.45)))  # a short pause inside the turn
            turn.append(a)
            texts.append(text)
        seg = level(np.concatenate(turn), peak * rng.uniform(0.85, 1.0))
        gap = silence(rng.uniform(0.3, 2.0))
        pieces += [seg, gap]
        total += (len(seg) + len(gap)) / SR
    return np.concatenate(pieces), " ".join(texts)


def make_monologue(voices: Voices, rng: random.Random, mt: list[str], gsm: list[str], conv: list[str],
                   target_s: float = 70.0) -> tuple[np.ndarray, str]:
    """One Piper voice, ≈ ``target_s`` seconds, no pause longer than 0.3 s."""
    pieces, texts, total = [silence(0.2)], [], 0.2
    pool = [s for pair in zip(mt, gsm, conv) for s in pair]
    while total < target_s - 0.5:
        text = pool.pop(0)
        a = shorten_pauses(trim(voices.piper(text, length_scale=1.0, noise_scale=0.6, noise_w_scale=0.7),
                                keep_s=0.02), max_s=0.2)
        if total + len(a) / SR > target_s + 2.0:
            continue
        if texts:
            pieces.append(silence(rng.uniform(0.05, 0.22)))  # + ≤ 0.02 s kept at each side: ≤ 0.26 s
        pieces.append(level(a, 0.7))
        texts.append(text)
        total = sum(len(p) for p in pieces) / SR
    pieces.append(silence(0.2))
    return np.concatenate(pieces), " ".join(texts)


# -------------------------------------------------------------------------------------------------------- non-speech
def make_tones(rng: np.random.Generator, seconds: float = 10.0) -> np.ndarray:
    """A melody of harmonic tones (fundamental + decaying overtones, attack/release envelope) and a bass note."""
    scale = [0, 2, 4, 7, 9, 12, 14, 16]  # major pentatonic, semitones above A3
    out = np.zeros(int(seconds * SR), np.float32)
    t = 0.0
    while t < seconds - 0.1:
        dur = float(rng.choice([0.25, 0.25, 0.5, 0.5, 0.75]))
        f0 = 220.0 * 2 ** (int(rng.choice(scale)) / 12)
        n = int(min(dur, seconds - t) * SR)
        tt = np.arange(n) / SR
        env = np.minimum(1.0, tt / 0.02) * np.exp(-2.5 * tt)
        note = sum((0.6 ** h) * np.sin(2 * np.pi * f0 * (h + 1) * tt) for h in range(5))
        i = int(t * SR)
        out[i: i + n] += (0.25 * env * note).astype(np.float32)
        t += dur
    tt = np.arange(len(out)) / SR
    bass = 0.08 * np.sin(2 * np.pi * 110.0 * tt) * (0.6 + 0.4 * np.sin(2 * np.pi * 0.5 * tt))
    return level(out + bass.astype(np.float32), 0.6)


def make_nonspeech(voices: Voices, rng: np.random.Generator, clipped_text: str, babble: list[str]) -> dict:
    n = 10 * SR
    files = {
        "silence_10s.flac": (np.zeros(n, np.float32), ""),
        "noise_white_10s.flac": ((0.05 * rng.standard_normal(n)).astype(np.float32), ""),
        "noise_pink_10s.flac": (0.05 * pink_noise(n, rng), ""),
        "tones_10s.flac": (make_tones(rng), ""),
    }
    sent = trim(voices.piper(clipped_text, length_scale=1.0), keep_s=0.05)
    clipped = np.clip(level(sent, 1.0) * 4.0, -0.3, 0.3)
    files["clipped_speech.flac"] = (np.concatenate([silence(0.5), clipped, silence(0.8)]), clipped_text)
    t = np.arange(n) / SR
    hum = 0.12 * np.sin(2 * np.pi * 50 * t) + 0.04 * np.sin(2 * np.pi * 100 * t) + 0.02 * np.sin(2 * np.pi * 150 * t)
    rev = np.concatenate([trim(voices.espeak_ng(s, "en-gb", 170, 45))[::-1] for s in babble[:2]]
                         + [trim(voices.piper(s))[::-1] for s in babble[2:]])
    rev = np.resize(rev, n)
    files["hum_babble.flac"] = ((hum + level(rev, 0.05)).astype(np.float32), "")
    return files


# ------------------------------------------------------------------------------------------------------------- main
def build(seed: int = SEED) -> dict[str, tuple[np.ndarray, str]]:
    """Synthesise every file; returns {relative path: (audio, reference)} (nothing written)."""
    voices = Voices(seed)
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    mt, gsm = corpus_sentences()
    rng.shuffle(mt)
    rng.shuffle(gsm)
    conv = list(CONVERSATION)
    rng.shuffle(conv)
    files: dict[str, tuple[np.ndarray, str]] = {}
    for name, speakers, target, snr, room in DIALOGUES:
        a, text = make_dialogue(voices, speakers, target, rng, mt, gsm, conv)
        if room:
            a = reverb(a, nrng)
        if snr is not None:
            a = add_noise(a, snr, nrng)
        files[f"{name}.flac"] = (a, text)
    files["monologue_70s.flac"] = make_monologue(voices, rng, mt, gsm, conv + list(CONVERSATION))
    for i, (text, spec) in enumerate(QUESTIONS, 1):
        a = level(trim(voices.say(text, spec), keep_s=0.05), 0.7)
        files[f"questions_{i}.flac"] = (np.concatenate([silence(0.4), a, silence(0.6)]), text)
    clipped_text = "Please turn the music down a little, I can barely hear myself think."
    for k, v in make_nonspeech(voices, nrng, clipped_text, [mt.pop(0), gsm.pop(0), mt.pop(0), gsm.pop(0)]).items():
        files[f"nonspeech/{k}"] = v
    return files


QUESTION_RATES = (0.85, 1.0, 1.2)  # Piper length_scale: fast, normal, slow speakers


def spoken_questions(n: int = 12, seed: int = SEED) -> dict[str, tuple[np.ndarray, str]]:
    """MT-Bench first-turn questions that read well aloud (≤ 150 characters, plain characters), spoken by the Piper
    voice at the rates of ``QUESTION_RATES`` in turn, with natural pauses: each comma- or sentence-separated clause
    is said on its own and the clauses are joined with 0.12–0.4 s of silence (shorter than the VAD's end-of-speech
    silence, so one question stays one utterance). 0.5 s of silence before, 1.0 s after. Returns
    {"voice_questions/qNN.flac": (float32 16 kHz audio, reference text)}."""
    rng = random.Random(seed + 7)
    voices = Voices(seed)
    qs = []
    for line in (HERE / "data" / "mt_bench_questions.jsonl").open():
        q = json.loads(line)["turns"][0]
        if len(q) <= 150 and re.fullmatch(r"[A-Za-z0-9 ,.'?!-]+", q) and len(q.split()) >= 6:
            qs.append(q)
    files = {}
    for i, q in enumerate(qs[:n]):
        rate = QUESTION_RATES[i % len(QUESTION_RATES)]
        clauses = [c for c in re.split(r"(?<=[,.?!])\s+", q) if c.strip()]
        parts = [silence(0.5)]
        for j, c in enumerate(clauses):
            if j:
                parts.append(silence(rng.uniform(0.12, 0.4)))
            parts.append(trim(voices.piper(c, length_scale=rate), keep_s=0.03))
        parts.append(silence(1.0))
        files[f"voice_questions/q{i:02d}_rate{rate:.2f}.flac"] = (level(np.concatenate(parts), 0.7), q)
    return files


def write(files: dict[str, tuple[np.ndarray, str]], out: Path = OUT) -> None:
    import soundfile as sf

    refs: dict[Path, dict[str, str]] = {}
    for rel, (a, text) in files.items():
        p = out / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        sf.write(str(p), np.clip(a, -1.0, 1.0), SR, subtype="PCM_16", format="FLAC")
        refs.setdefault(p.parent, {})[p.name] = text
    for d, r in refs.items():
        (d / "refs.json").write_text(json.dumps(r, indent=1, ensure_ascii=False) + "\n")


def check(files: dict[str, tuple[np.ndarray, str]]) -> None:
    """Offline faster-whisper (Whisper base) transcripts of every file: WER vs the reference, greedy and beam 5."""
    import jiwer
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    from engine.config import load_config
    from engine.runtime import Runtime
    from engine.asr.faster_whisper_backend import FasterWhisperBackend

    norm = EnglishTextNormalizer({})
    cfg = load_config()
    fw = FasterWhisperBackend(Runtime(cfg, progress=False).model("asr_target").path, device=cfg.asr.device,
                              compute_type=cfg.asr.compute_type, cpu_threads=cfg.asr.cpu_threads, beam_size=1)
    print(f"{'file':34s} {'dur s':>6s} {'WER greedy':>10s} {'WER beam5':>9s}  greedy transcript")
    for rel, (a, text) in files.items():
        a16 = np.clip(a, -1, 1).astype(np.float32)
        row = []
        for beam in (1, 5):
            fw.beam_size = beam
            hyp = fw.transcribe_text(a16)
            r, h = norm(text), norm(hyp)
            row.append((jiwer.wer(r, h) if r.strip() else float(len(h.split())), hyp))
        print(f"{rel:34s} {len(a) / SR:6.1f} {row[0][0]:10.3f} {row[1][0]:9.3f}  {row[0][1][:90]!r}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.make_speech", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(OUT), help="output folder (default bench/data/stream_speech)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--check", action="store_true", help="print offline Whisper-base WER of every file")
    ap.add_argument("--questions", type=int, default=0, metavar="N",
                    help="instead: write N spoken MT-Bench questions to OUT/voice_questions (the voice benchmark's input)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    files = spoken_questions(a.questions, a.seed) if a.questions else build(a.seed)
    write(files, out)
    total = 0
    for rel, (x, text) in files.items():
        size = (out / rel).stat().st_size
        total += size
        extra = f", longest pause {longest_pause(x):.2f} s" if rel.startswith("monologue") else ""
        print(f"{rel:34s} {len(x) / SR:6.1f} s {size / 1024:7.0f} KiB  {len(text.split()):4d} words{extra}")
    print(f"total {total / 2 ** 20:.2f} MiB in {out}")
    if a.check:
        check(files)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
