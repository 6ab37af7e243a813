"""Train the CTC draft head on the frozen Whisper-base encoder, end to end, on a CPU (one thread by default).

    python -m engine.training.ctc_head data   # synthesise streams, cut them into buffers, encode, label (≈ 25 min)
    python -m engine.training.ctc_head train  # train the head on the cached windows (≈ 10 min; --adapt)
    python -m engine.training.ctc_head eval   # CER/WER on held-out synthetic speech and jfk.flac (--compare DIR)
    python -m engine.training.ctc_head all

Data (ctc_self_speculative_asr.txt needs a CTC-trained encoder that stays frozen; none exists offline, so the head
is trained here, on the same frozen encoder the decoder reads — the draft is "self"):
  * text: Multi30k train (captions), MT-Bench questions and GSM8K test questions 0–999, cut into sentences;
    held out (never trained on): Multi30k test_2017 and GSM8K questions 1200+;
  * audio: the Piper joe voice (length/noise scales varied) and espeak-ng (several English accents and variants,
    rate 120–200 wpm, pitch 25–75), resampled to 16 kHz; several utterances packed per 14–28 s stream with
    0.15–1.0 s pauses; white/pink noise at 10–30 dB SNR on 70 % of streams, a synthetic room response on 30 %,
    speed perturbation 0.9–1.1 on 30 % of utterances;
  * windows: what the streaming ASR encodes — each stream is cut into ``--per-stream`` buffers that start at the
    stream start (a growing buffer) or in a pause (after committed text) and end anywhere (mid-word cuts) or in
    a pause, 1–28 s long, mostly 2–12 s; 80 % are encoded in the length-scaled :data:`TRAINING_WINDOW`
    (audio + 4 s margin), 20 % in the padded 30 s window;
  * targets: self-distillation — Whisper-base's own greedy transcript of each window from the same encoder
    output (what the verifier would say); windows whose label is > 0.4 normalised CER from the synthesised text
    are dropped (a window that cuts an utterance is compared with the complete utterances plus the best-matching
    word prefix of the cut one);
  * features: the CTranslate2 int8 encoder output (what the streaming ASR computes) of the audio frames plus 10
    frames of the margin (the head reads ``ceil(samples / 320)`` frames), float16, cached.

Training starts from scratch (8 epochs, peak lr 2e-3); ``--adapt`` instead fine-tunes the shipped head (same
architecture, 6 epochs, peak lr 5e-4) — on these windows that reached a higher held-out CER. Everything is
seeded; CPU threads come from ``SPECVOICE_TRAIN_THREADS`` (default 1); text is read from ``bench/data``
(shipped, see bench/data/text/SOURCES.md); files go to ``$SPECVOICE_CACHE/ctc_data`` (default ~/.cache/specvoice/ctc_data); the head goes
to ``assets/ctc_head/`` (``$SPECVOICE_HEAD_OUT`` to write it elsewhere) with ``card.md``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from audio.io import SAMPLE_RATE
from engine.asr.window import WindowPolicy
from engine.config import cache_dir

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench" / "data"  # shipped text (bench/data/text/SOURCES.md)
CACHE = cache_dir() / "ctc_data"
HELDOUT_DIR = ROOT / "bench" / "data" / "heldout_speech"
SR = SAMPLE_RATE  # Hz: the audio the streaming ASR encodes
STREAM_S = 28.0  # longest stream (= WindowPolicy.max_audio_s: the longest buffer one window decodes)
THREADS = int(os.environ.get("SPECVOICE_TRAIN_THREADS", "1"))  # CPU threads for every stage
# the scaled window the shipped head's features were encoded in (a 6 s shortest window; the streaming ASR now
# encodes at least asr.encoder_min_s): kept so that a retrained head sees the same distribution
TRAINING_WINDOW = WindowPolicy(min_s=6.0)
ESPEAK_VOICES = ["en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-029", "en-us+f3",
                 "en-us+m3", "en-gb+f2", "en-us+m7", "en-gb+m4", "en-us+f4"]


# ----------------------------------------------------------------------------------------------------------- text
def _sentences(text: str) -> list[str]:
    parts = re.split(r"(?<=[.!?])\s+", " ".join(text.split()))
    return [p for p in parts if 3 <= len(p.split()) <= 22 and not re.search(r"[<>{}\[\]\\|_=^]", p)]


def load_texts() -> tuple[list[str], list[str]]:
    """(train sentences, held-out sentences), deterministic."""
    with gzip.open(DATA / "text" / "multi30k" / "train.en.gz", "rt") as f:
        m30k = [line.strip() for line in f if line.strip()]
    with gzip.open(DATA / "text" / "multi30k" / "test_2017_flickr.en.gz", "rt") as f:
        m30k_test = [line.strip() for line in f if line.strip()]
    with gzip.open(DATA / "gsm8k_test.jsonl.gz", "rt") as f:
        gsm = [json.loads(line)["question"] for line in f]
    mtb = [t for line in (DATA / "mt_bench_questions.jsonl").open() for t in json.loads(line)["turns"]]
    rng = random.Random(0)
    train = rng.sample(m30k, 1400)
    for q in gsm[:1000] + mtb:
        train += _sentences(q)
    held = rng.sample(m30k_test, 20) + [s for q in gsm[1200:1240] for s in _sentences(q)][:20]
    rng.shuffle(train)
    return train, held


# ---------------------------------------------------------------------------------------------------------- audio
class Synth:
    """Piper and espeak-ng utterances as float32 16 kHz."""

    def __init__(self):
        from audio.io import resample
        from engine.config import load_config
        from engine.models import resolve
        from piper import PiperVoice

        import onnxruntime

        m = resolve("tts_voice", load_config())
        self.voice = PiperVoice.load(str(m.path), config_path=str(m.config) if m.config else None)
        so = onnxruntime.SessionOptions()  # THREADS cores, as the rest of the pipeline
        so.intra_op_num_threads, so.inter_op_num_threads = THREADS, 1
        self.voice.session = onnxruntime.InferenceSession(str(m.path), sess_options=so,
                                                          providers=["CPUExecutionProvider"])
        self.rate = int(self.voice.config.sample_rate)
        self.resample = resample
        self.espeak = shutil.which("espeak-ng")

    def piper(self, text: str, rng: random.Random) -> np.ndarray:
        from piper import SynthesisConfig

        cfg = SynthesisConfig(length_scale=rng.uniform(0.8, 1.3), noise_scale=rng.uniform(0.4, 0.9),
                              noise_w_scale=rng.uniform(0.5, 1.0))
        chunks = [c.audio_float_array for c in self.voice.synthesize(text, syn_config=cfg)]
        a = np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, np.float32)
        return self.resample(a, self.rate, SR)

    def espeak_ng(self, text: str, rng: random.Random) -> np.ndarray:
        import io

        import soundfile as sf

        if not self.espeak:
            raise RuntimeError("espeak-ng is not installed (apt install espeak-ng)")
        cmd = [self.espeak, "-v", rng.choice(ESPEAK_VOICES), "-s", str(rng.randint(120, 200)),
               "-p", str(rng.randint(25, 75)), "--stdout", text]
        wav = subprocess.run(cmd, capture_output=True, check=True).stdout
        a, rate = sf.read(io.BytesIO(wav), dtype="float32")
        return self.resample(a, rate, SR)


def _speed(a: np.ndarray, factor: float) -> np.ndarray:
    """Speed perturbation (tempo and pitch together) by resampling."""
    n = int(len(a) / factor)
    return np.interp(np.linspace(0, len(a) - 1, n), np.arange(len(a)), a).astype(np.float32)


def _room(a: np.ndarray, rng: np.random.Generator, rt60_max: float = 0.5) -> np.ndarray:
    """``a`` in a synthetic room: exponentially decaying noise response, RT60 0.15 s–``rt60_max`` seconds."""
    rt60 = rng.uniform(0.15, rt60_max)
    n = int(rt60 * SR)
    t = np.arange(n) / SR
    rir = rng.standard_normal(n) * np.exp(-6.9 * t / rt60)
    rir[0] = 1.0
    rir /= np.sqrt((rir ** 2).sum())
    m = len(a) + n - 1
    size = 1 << (m - 1).bit_length()
    y = np.fft.irfft(np.fft.rfft(a, size) * np.fft.rfft(rir, size), size)[: len(a)]
    return (y / (np.abs(y).max() + 1e-9) * np.abs(a).max()).astype(np.float32)


def _noise(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    snr = rng.uniform(10, 30)
    n = rng.standard_normal(len(a))
    if rng.random() < 0.5:  # pink-ish: integrate white noise a little
        n = np.cumsum(n) * 0.02 + n * 0.3
        n -= np.convolve(n, np.ones(400) / 400, mode="same")
    p_sig = np.mean(a[np.abs(a) > 0.01] ** 2) if np.any(np.abs(a) > 0.01) else 1e-4
    n *= np.sqrt(p_sig / (10 ** (snr / 10)) / (np.mean(n ** 2) + 1e-12))
    return (a + n).astype(np.float32)


# -------------------------------------------------------------------------------------------------------- whisper
class Labeler:
    """CTranslate2 Whisper-base: int8 encoder output (the head's input) and greedy labels (the head's target),
    computed as the streaming backend does (``engine.asr.ctc_self_speculative``: ``log_mel`` in a :class:`WindowPolicy` window)."""

    def __init__(self):
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer

        from engine.config import load_config
        from engine.models import resolve

        m = resolve("asr_target", load_config())
        self.model = WhisperModel(str(m.path), device="cpu", compute_type="int8", cpu_threads=THREADS)
        from engine.asr.tokenizer import repair_model_tokenizer

        repair_model_tokenizer(self.model, m.path)
        self.tok = Tokenizer(self.model.hf_tokenizer, self.model.model.is_multilingual, task="transcribe",
                             language="en")

    def encode(self, audio: np.ndarray, n_frames: int | None = None):
        """Encoder output of ``audio`` in a window of ``n_frames`` mel frames (default: the scaled
        :data:`TRAINING_WINDOW`; 3000 = the padded 30 s window)."""
        from engine.asr.window import log_mel

        n_frames = TRAINING_WINDOW.n_frames(len(audio)) if n_frames is None else n_frames
        return self.model.encode(log_mel(self.model.feature_extractor, audio, n_frames))

    def label(self, enc) -> str:
        """Greedy transcript (prompt = SOT sequence + <|notimestamps|>), as the plain AR backend
        (:class:`engine.asr.whisper_ar.WhisperARBackend`) decodes a window."""
        prompt = list(self.tok.sot_sequence) + [self.tok.no_timestamps]
        r = self.model.model.generate(enc, [prompt], beam_size=1, max_length=448)[0]
        return self.tok.decode([t for t in r.sequences_ids[0] if t < self.tok.eot]).strip()


def _norm(s: str) -> str:
    from engine.asr.ctc_draft import normalize_text

    return " ".join(re.sub(r"[^a-z0-9' ]", " ", normalize_text(s).lower()).split())


def _cer(ref: str, hyp: str) -> float:
    import jiwer

    r = _norm(ref)
    return jiwer.cer(r, _norm(hyp)) if r else 1.0


def _lenient_cer(full: list[str], partial: str, hyp: str) -> float:
    """CER of ``hyp`` against the complete utterances ``full`` followed by the best-matching word prefix of the
    utterance ``partial`` that the window cuts (its audio ends anywhere in it, so any prefix is a fair label)."""
    words = partial.split()
    return min(_cer(" ".join(full + words[:k]), hyp) for k in range(len(words) + 1)) if full or words else 1.0


# ----------------------------------------------------------------------------------------------------- data stage
def _window_lengths(rng: random.Random) -> float:
    """Streaming buffer length (s): mostly 2–12 s, some 1–2 s and 12–28 s."""
    u = rng.random()
    return rng.uniform(1.0, 2.0) if u < 0.1 else rng.uniform(2.0, 12.0) if u < 0.75 else rng.uniform(12.0, STREAM_S)


def stream_windows(spans: list[tuple[int, int, str]], n_total: int, k: int, rng: random.Random):
    """``k`` windows (start, end, padded) of one stream, as a streaming buffer would hold them.

    ``spans`` are the utterances (start, end sample, text). A window starts at the stream start (half of them: a
    buffer growing from the first word) or in the pause before an utterance (a buffer after earlier text was
    committed), and ends at an arbitrary sample (60 %: mid-word cuts included) or in a pause after an utterance
    (40 %); about 20 % are encoded in the padded 30 s window."""
    out = []
    for _ in range(k):
        s = 0
        if rng.random() >= 0.5 and len(spans) > 1:
            j = rng.randrange(1, len(spans))
            prev_end = spans[j - 1][1]
            s = rng.randint(prev_end, max(prev_end, spans[j][0] - 1))
        e = min(n_total, s + int(_window_lengths(rng) * SR))
        if rng.random() < 0.4:  # end in the pause after the last utterance that ends before e
            ends = [(b, spans[i + 1][0] if i + 1 < len(spans) else n_total) for i, (a, b, _) in enumerate(spans)
                    if s < a and b <= e]
            if ends:
                b, nxt = ends[-1]
                e = min(n_total, b + int(rng.uniform(0.05, 0.6) * SR), max(b + 1, nxt))
        if e - s < int(0.8 * SR):
            continue
        out.append((s, e, rng.random() < 0.2))
    return out


def window_ref(spans, s: int, e: int) -> tuple[list[str], str]:
    """(texts of the utterances wholly inside [s, e), text of the utterance the end cuts or "")."""
    full = [t for a, b, t in spans if a >= s and b <= e]
    cut = [t for a, b, t in spans if a >= s and a < e < b]
    return full, cut[0] if cut else ""


def make_data(n_piper: int, n_espeak: int, per_stream: int = 10, seed: int = 0, max_minutes: float = 0) -> None:
    """Synthesise streams of packed utterances, cut each into ``per_stream`` streaming-buffer windows, encode
    (scaled :data:`TRAINING_WINDOW`, 20 % padded) and label them into CACHE/shard_*.npz (resumable; stops
    after ``max_minutes`` of wall time when > 0), and the held-out utterances into bench/data/heldout_speech
    (one FLAC per utterance + refs.json)."""
    import soundfile as sf

    CACHE.mkdir(parents=True, exist_ok=True)
    train, held = load_texts()
    synth, lab = Synth(), Labeler()
    rng, nrng = random.Random(seed), np.random.default_rng(seed)

    if not (HELDOUT_DIR / "refs.json").exists():
        HELDOUT_DIR.mkdir(parents=True, exist_ok=True)
        refs = {}
        for i, text in enumerate(held):
            kind = "piper" if i % 2 == 0 else "espeak"
            a = synth.piper(text, rng) if kind == "piper" else synth.espeak_ng(text, rng)
            a = np.concatenate([np.zeros(int(0.3 * SR), np.float32), a, np.zeros(int(0.3 * SR), np.float32)])
            name = f"held_{i:03d}_{kind}.flac"
            sf.write(HELDOUT_DIR / name, a, SR)
            refs[name] = text
        (HELDOUT_DIR / "refs.json").write_text(json.dumps(refs, indent=1))
        print(f"held-out: {len(refs)} utterances in {HELDOUT_DIR}", flush=True)

    kinds = ["piper"] * n_piper + ["espeak"] * n_espeak
    rng.shuffle(kinds)
    utts = list(zip(train, kinds))
    i_stream, i = 0, 0
    t0 = time.time()
    while i < len(utts):
        if max_minutes and time.time() - t0 > 60 * max_minutes:
            print(f"stopping after {max_minutes} min", flush=True)
            break
        # pack one stream: utterances with 0.15-1.0 s pauses, up to STREAM_S
        pieces, spans, length = [], [], 0
        target = int(rng.uniform(0.5, 1.0) * STREAM_S * SR)
        while i < len(utts):
            text, kind = utts[i]
            a = synth.piper(text, rng) if kind == "piper" else synth.espeak_ng(text, rng)
            if rng.random() < 0.3:
                a = _speed(a, rng.uniform(0.9, 1.1))
            gap = np.zeros(int(rng.uniform(0.15, 1.0) * SR), np.float32)
            if length + len(a) + len(gap) > STREAM_S * SR:
                if not pieces:
                    i += 1  # too long on its own
                break
            pieces += [gap, a]
            spans.append((length + len(gap), length + len(gap) + len(a), text))
            length += len(a) + len(gap)
            i += 1
            if length > target:
                break
        if not pieces:
            continue
        out = CACHE / f"shard_{i_stream:04d}.npz"
        i_stream += 1
        wins = stream_windows(spans, length, per_stream, rng)
        if out.exists():
            continue
        audio = np.concatenate(pieces + [np.zeros(int(rng.uniform(0.2, 1.0) * SR), np.float32)])
        audio /= np.abs(audio).max() + 1e-9
        audio *= nrng.uniform(0.3, 0.9)
        if nrng.random() < 0.3:
            audio = _room(audio, nrng)
        if nrng.random() < 0.7:
            audio = _noise(audio, nrng)
        rec = {"feats": [], "label": [], "ref": [], "cer": [], "n_samples": [], "padded": []}
        for s, e, padded in wins:
            a = audio[s:e]
            enc = lab.encode(a, 3000 if padded else None)
            label = lab.label(enc)
            full, cut = window_ref([(x - s, y - s, t) for x, y, t in spans], 0, e - s)
            n_keep = int(np.ceil(len(a) / 320)) + 10  # audio frames + 10 frames (200 ms) of the margin
            rec["feats"].append(np.asarray(enc)[0, :n_keep].astype(np.float16))
            rec["label"].append(label)
            rec["ref"].append(" ".join(full + [cut]).strip())
            rec["cer"].append(_lenient_cer(full, cut, label))
            rec["n_samples"].append(len(a))
            rec["padded"].append(padded)
        if not rec["feats"]:
            continue
        lens = [len(f) for f in rec["feats"]]
        np.savez(out, feats=np.concatenate(rec["feats"]), lens=np.array(lens), label=np.array(rec["label"]),
                 stream_s=length / SR,
                 ref=np.array(rec["ref"]), cer=np.array(rec["cer"]), n_samples=np.array(rec["n_samples"]),
                 padded=np.array(rec["padded"]))
        print(f"{out.name}: {length / SR:.1f} s stream, {len(spans)} utt, {len(lens)} windows "
              f"{[round(n / SR, 1) for n in rec['n_samples']]}, label CER {np.round(rec['cer'], 2).tolist()}, "
              f"{time.time() - t0:.0f} s elapsed", flush=True)


# ---------------------------------------------------------------------------------------------------- train stage
ARCH = {"channels": 256, "kernel": 5, "blocks": 3, "dropout": 0.1}


def load_shards(max_cer: float = 0.4):
    """(features, target ids, labels, audio seconds, padded flags) of the windows whose label passed the filter."""
    from engine.asr.ctc_draft import encode_text

    feats, targets, labels, secs, padded = [], [], [], [], []
    for p in sorted(CACHE.glob("shard_*.npz")):
        z = np.load(p)
        if "lens" not in z:  # an old-format shard (one padded window)
            continue
        offs = np.concatenate([[0], np.cumsum(z["lens"])])
        for w in range(len(z["lens"])):
            lab = str(z["label"][w])
            if float(z["cer"][w]) > max_cer or not lab or not encode_text(lab):
                continue
            if len(encode_text(lab)) * 2 + 2 > z["lens"][w]:  # CTC needs frames for the label
                continue
            feats.append(z["feats"][offs[w]:offs[w + 1]])
            targets.append(encode_text(lab))
            labels.append(lab)
            secs.append(int(z["n_samples"][w]) / SR)
            padded.append(bool(z["padded"][w]))
    return feats, targets, labels, secs, padded


def _batches(idx: list[int], lens: list[int], max_frames: int, rng: random.Random) -> list[list[int]]:
    """Length-bucketed batches of about ``max_frames`` padded frames each, in random order."""
    idx = sorted(idx, key=lambda j: (lens[j], rng.random()))
    out, cur = [], []
    for j in idx:
        if cur and (len(cur) + 1) * lens[j] > max_frames:
            out.append(cur)
            cur = []
        cur.append(j)
    if cur:
        out.append(cur)
    rng.shuffle(out)
    return out


def train(epochs: int = 8, lr: float = 2e-3, seed: int = 0, init: str | None = None,
          max_frames: int = 3000, max_minutes: float = 0) -> dict:
    """CTC-train the head on the cached windows; ``init`` = "shipped" adapts the head in assets/ctc_head (same
    architecture), None trains from scratch. Writes the head and config.json to assets/ctc_head."""
    import torch

    from engine.asr.ctc_draft import ASSET_DIR, build_head, greedy_path

    torch.set_num_threads(THREADS)
    torch.manual_seed(seed)
    feats, targets, labels, secs, padded = load_shards()
    n_val = max(4, len(feats) // 20)
    idx = list(range(len(feats)))
    random.Random(seed).shuffle(idx)
    val, tr = idx[:n_val], idx[n_val:]
    d_model = feats[0].shape[1]
    head = build_head(d_model, ARCH)
    init_from = None
    if init == "shipped" and (ASSET_DIR / "head.safetensors").exists():
        from safetensors.torch import load_file

        old = json.loads((ASSET_DIR / "config.json").read_text())
        if old.get("arch") == ARCH and int(old.get("d_model", 0)) == d_model:
            head.load_state_dict({k: v.float() for k, v in load_file(str(ASSET_DIR / "head.safetensors")).items()})
            init_from = {k: old.get(k) for k in ("train_windows", "epochs", "lr", "train_seconds")}
    lens = [len(f) for f in feats]
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.01)
    steps = epochs * len(_batches(tr, lens, max_frames, random.Random(0)))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps + epochs, pct_start=0.15)
    ctc = torch.nn.CTCLoss(blank=0, zero_infinity=True)
    print(f"{len(tr)} train / {len(val)} val windows ({sum(secs) / 3600:.2f} h of buffers), "
          f"{sum(p.numel() for p in head.parameters())} params, init {'shipped head' if init_from else 'scratch'}",
          flush=True)

    def val_cer():
        head.eval()
        with torch.no_grad():
            return float(np.mean([_cer(labels[j], greedy_path(torch.log_softmax(
                head(torch.from_numpy(feats[j].astype(np.float32))[None]), -1)[0].numpy())) for j in val]))

    t0, cpu0 = time.time(), time.process_time()
    hist = [{"epoch": 0, "val_cer": round(val_cer(), 4)}]
    print(f"epoch 0: val CER {hist[0]['val_cer']:.3f}", flush=True)
    done = 0
    for ep in range(epochs):
        head.train()
        brng = random.Random(seed + ep)
        tot, n = 0.0, 0
        for ids in _batches(tr, lens, max_frames, brng):
            T = max(lens[j] for j in ids)
            x = torch.zeros(len(ids), T, d_model)
            for r, j in enumerate(ids):
                x[r, : lens[j]] = torch.from_numpy(feats[j].astype(np.float32))
                # feature-level augmentation: time masking (SpecAugment-style on encoder frames), ~1 per 100 frames
                for _ in range(max(1, lens[j] // 100)):
                    s = brng.randrange(0, max(1, lens[j] - 12))
                    x[r, s : s + brng.randrange(2, 12)] = 0
            lp = torch.log_softmax(head(x), -1).transpose(0, 1)  # (T, B, C)
            tg = [torch.tensor(targets[j]) for j in ids]
            loss = ctc(lp, torch.cat(tg), torch.tensor([lens[j] for j in ids]), torch.tensor([len(t) for t in tg]))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
            opt.step()
            sched.step()
            tot += float(loss.detach()) * len(ids)
            n += len(ids)
        done = ep + 1
        hist.append({"epoch": done, "loss": round(tot / n, 4), "val_cer": round(val_cer(), 4)})
        print(f"epoch {done}/{epochs}: loss {tot / n:.3f}, val CER {hist[-1]['val_cer']:.3f}, "
              f"{time.time() - t0:.0f} s", flush=True)
        if max_minutes and time.time() - t0 > 60 * max_minutes:
            break
    from safetensors.torch import save_file

    out_dir = Path(os.environ.get("SPECVOICE_HEAD_OUT", ASSET_DIR))
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.half().contiguous() for k, v in head.state_dict().items()}, str(out_dir / "head.safetensors"))
    sec = np.array(secs)
    info = {"d_model": d_model, "arch": ARCH, "alphabet": "printable ASCII 32..126, blank=0",
            "encoder": "Whisper base (CTranslate2 int8 encoder output), frozen",
            "window": "scaled WindowPolicy() windows of streaming buffers (80 %) and padded 30 s windows (20 %)",
            "init": "shipped head" if init_from else "scratch", "init_head": init_from,
            "epochs": done, "lr": lr, "batch_frames": max_frames, "train_windows": len(tr), "val_windows": len(val),
            "train_padded_windows": int(sum(padded[j] for j in tr)),
            "train_audio_h": round(float(sec[tr].sum()) / 3600, 3),
            "train_len_s_percentiles": {str(q): round(float(np.percentile(sec[tr], q)), 1) for q in (5, 25, 50, 75, 95)},
            "val_cer": hist[-1]["val_cer"], "history": hist, "train_seconds": round(time.time() - t0),
            "train_cpu_seconds": round(time.process_time() - cpu0), "threads": THREADS}
    (out_dir / "config.json").write_text(json.dumps(info, indent=1))
    return info


# ----------------------------------------------------------------------------------------------------- eval stage
JFK_REF = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."


def evaluate(heads: dict[str, str | Path] | None = None, write: bool = True) -> dict:
    """CER/WER of the CTC draft alone (Whisper English normalisation) for each head in ``heads`` (name → dir;
    default the shipped head), and of Whisper-base greedy, on the same encoder outputs:

    * held-out synthetic utterances (bench/data/heldout_speech) and jfk.flac, each in the scaled window and in the
      padded 30 s window, against the reference text;
    * streaming prefixes of the held-out utterances (cut at 40 %, 70 %, 100 % of their length, scaled window),
      against Whisper-base's greedy transcript of the same window (what the verifier will say), cut at its first
      repetition loop as the backend's guard cuts it.
    """
    from audio.io import load_audio
    from engine.asr.ctc_draft import ASSET_DIR, CTCHead

    heads = heads or {"head": ASSET_DIR}
    models = {k: CTCHead(v) for k, v in heads.items()}
    lab = Labeler()
    refs = json.loads((HELDOUT_DIR / "refs.json").read_text())
    jfk = ROOT / "tests" / "data" / "jfk.flac"
    items = [(HELDOUT_DIR / k, v) for k, v in refs.items()] + [(jfk, JFK_REF)]
    rows = []
    for path, ref in items:
        audio = load_audio(path)
        views = [("scaled", 1.0, None), ("padded", 1.0, 3000)]
        if path != jfk:
            views += [("prefix", 0.4, None), ("prefix", 0.7, None)]
        for view, frac, nf in views:
            a = audio[: int(len(audio) * frac)]
            sv = lab.encode(a, nf)
            row = {"file": path.name, "view": view, "frac": frac, "ref": ref, "whisper": lab.label(sv)}
            enc = np.asarray(sv)
            for name, m in models.items():
                row[name] = m.draft(enc, int(np.ceil(len(a) / 320))).text
            rows.append(row)
        print(f"{path.name}: {rows[-1]}", flush=True) if path == jfk else None

    out = {"sets": score_rows(rows, list(models), jfk.name), "rows": rows}
    out["jfk_text"] = {k: [r for r in rows if r["file"] == jfk.name and r["view"] == "scaled"][0][k]
                       for k in list(models) + ["whisper"]}
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / "eval.json").write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if k != "rows"}, indent=1))
    if write:
        write_card(out)
    return out


def _unloop(text: str) -> str:
    """``text`` cut at its first word-level repetition loop, as the backend's DecodeGuard cuts a decode."""
    from engine.asr.window import loop_start

    w = text.split()
    i = loop_start(w, min_span=6)
    return " ".join(w[:i] if i is not None else w)


def score_rows(rows: list[dict], heads: list[str], jfk_name: str = "jfk.flac") -> dict:
    """Pooled CER/WER per evaluation set and head (prefix sets against Whisper's transcript, loops cut)."""
    import jiwer

    def score(rs, key, ref_key):
        R = [_norm(_unloop(r[ref_key]) if ref_key == "whisper" else r[ref_key]) for r in rs]
        H = [_norm(r[key]) for r in rs]
        keep = [i for i, r in enumerate(R) if r]
        R, H = [R[i] for i in keep], [H[i] for i in keep]
        return {"n": len(R), "cer": round(jiwer.cer(R, H), 4), "wer": round(jiwer.wer(R, H), 4)}

    held = [r for r in rows if r["file"] != jfk_name]
    jfk = [r for r in rows if r["file"] == jfk_name]
    sets = {
        "heldout_scaled": ([r for r in held if r["view"] == "scaled"], "ref"),
        "heldout_padded": ([r for r in held if r["view"] == "padded"], "ref"),
        "jfk_scaled": ([r for r in jfk if r["view"] == "scaled"], "ref"),
        "jfk_padded": ([r for r in jfk if r["view"] == "padded"], "ref"),
        "prefix_40_vs_whisper": ([r for r in held if r["view"] == "prefix" and r["frac"] == 0.4], "whisper"),
        "prefix_70_vs_whisper": ([r for r in held if r["view"] == "prefix" and r["frac"] == 0.7], "whisper"),
        "prefix_100_vs_whisper": ([r for r in held if r["view"] == "scaled"], "whisper"),
    }
    return {name: {k: score(rs, k, ref_key) for k in heads + (["whisper"] if ref_key == "ref" else [])}
            for name, (rs, ref_key) in sets.items()}


def write_card(ev: dict, main: str = "head", old: str | None = None) -> None:
    """assets/ctc_head/card.md from config.json and an :func:`evaluate` result (``old``: a second head in it,
    shown beside ``main`` for comparison)."""
    from engine.asr.ctc_draft import ASSET_DIR

    cfg = json.loads((ASSET_DIR / "config.json").read_text())
    S = ev["sets"]
    shards = sorted(CACHE.glob("shard_*.npz"))
    n_win = stream_h = 0.0
    for p in shards:
        z = np.load(p)
        if "lens" in z:
            n_win += len(z["lens"])
            stream_h += float(z["stream_s"]) / 3600 if "stream_s" in z else 0.0
    names = {"heldout_scaled": "held-out synthetic, scaled window (40 utterances, text never trained on)",
             "heldout_padded": "held-out synthetic, padded 30 s window",
             "jfk_scaled": "jfk.flac (real speech), scaled window", "jfk_padded": "jfk.flac, padded 30 s window",
             "prefix_40_vs_whisper": "held-out prefixes cut at 40 % (mid-word), scaled, vs Whisper's transcript",
             "prefix_70_vs_whisper": "held-out prefixes cut at 70 %, scaled, vs Whisper's transcript",
             "prefix_100_vs_whisper": "held-out full utterances, scaled, vs Whisper's transcript"}
    cols = [main] + ([old] if old else [])
    head_row = " | ".join(f"{'this head' if c == main else 'previous head'} CER / WER" for c in cols)
    lines = [f"| set | {head_row} | Whisper-base greedy CER / WER |", "|---|" + "---|" * (len(cols) + 1)]
    for k, desc in names.items():
        cells = [f"{S[k][c]['cer']:.3f} / {S[k][c]['wer']:.3f}" for c in cols]
        w = S[k].get("whisper")
        lines.append(f"| {desc} | " + " | ".join(cells) + f" | {w['cer']:.3f} / {w['wer']:.3f} |" if w
                     else f"| {desc} | " + " | ".join(cells) + " | (reference) |")
    table = "\n".join(lines)
    prev_note = (" The previous head was trained on padded 30 s windows of packed utterances only."
                 if old else "")
    pc = cfg.get("train_len_s_percentiles", {})
    init = cfg.get("init_head") or {}
    init_txt = (f"initialised from the previous head (trained from scratch on {init.get('train_windows')} padded "
                f"30 s windows of packed utterances, {init.get('epochs')} epochs, lr {init.get('lr')}, "
                f"{init.get('train_seconds')} s on 2 cores), then adapted: "
                if cfg.get("init") == "shipped head" else "from scratch: ")
    card = f"""# CTC draft head on the frozen Whisper-base encoder

Self-speculative draft for `engine/asr/ctc_self_speculative.py` (ctc_self_speculative_asr.txt). Made by
`python -m engine.training.ctc_head all` (data → train → eval), seeded, on a CPU.

* **Input**: Whisper-base encoder output (CTranslate2 int8, as the streaming ASR computes it), 20 ms per frame,
  of the length-scaled window (`engine.training.ctc_head.TRAINING_WINDOW`: the buffered audio + 4 s of silence, at
  least 6 s) or of the padded 30 s window (1500 frames). The head reads the frames that hold audio
  (`ceil(samples / 320)`). The encoder is frozen (never updated), so the draft shares the target's encoder.
* **Architecture**: LayerNorm → Linear(512→{cfg['arch']['channels']}) → {cfg['arch']['blocks']} residual blocks
  (LayerNorm, Conv1d k={cfg['arch']['kernel']}, GELU, dropout {cfg['arch']['dropout']}) → Linear(→96):
  printable ASCII (case, digits, punctuation) + blank. fp16 weights, {(ASSET_DIR / 'head.safetensors').stat().st_size / 1e6:.1f} MB.
* **Data**: streaming-buffer windows of synthetic speech: {len(shards)} streams ({stream_h:.2f} h of distinct
  audio), {int(n_win)} windows cut from them. Streams of 14–28 s pack several utterances with
  0.15–1.0 s pauses: Piper en_US-joe-medium (length/noise scales varied) and espeak-ng (12 English
  voices/variants, rate 120–200, pitch 25–75), speed perturbation on 30 % of utterances, room response on 30 %
  and noise (10–30 dB SNR) on 70 % of streams. Text: Multi30k train, MT-Bench, GSM8K test 0–999. Each stream is
  cut into buffers as streaming holds them: starting at the stream start (a growing buffer) or in the pause
  before an utterance (a buffer after committed text), ending at an arbitrary sample (mid-word cuts) or in a
  pause; lengths 1–28 s, mostly 2–12 s (percentiles 5/25/50/75/95: {pc.get('5')} / {pc.get('25')} /
  {pc.get('50')} / {pc.get('75')} / {pc.get('95')} s). {cfg['train_windows']} windows trained
  ({cfg.get('train_audio_h')} h of buffers, {cfg.get('train_padded_windows')} of them in the padded 30 s window,
  the rest scaled), {cfg['val_windows']} validation. Windows whose Whisper label was > 0.4 CER from the text were
  dropped (for a window that cuts an utterance, CER against the complete utterances plus the best-matching word
  prefix of the cut one). Features stored: the audio frames + 10 frames of the margin, float16.
* **Targets**: Whisper-base's own greedy transcript of each window, decoded from the same encoder output
  (self-distillation: the head learns to say what the verifier would say of that buffer).
* **Training**: CTC loss, AdamW (one-cycle, max lr {cfg['lr']}), length-bucketed batches of ≤ {cfg.get('batch_frames')}
  frames, time masking on encoder frames; {init_txt}{cfg['epochs']} epochs, {cfg['train_seconds']} s
  ({cfg.get('train_cpu_seconds')} CPU s, {cfg.get('threads')} thread). Validation CER vs the Whisper labels:
  {cfg['val_cer']:.3f}.

## Accuracy of the draft alone (Whisper English normalisation)

{table}

Prefix sets: Whisper's transcript of the same window (cut at its first repetition loop, as the backend's guard
cuts it) is the reference — what the verifier will say of that buffer.{prev_note}

jfk draft (scaled window): "{ev['jfk_text'][main]}"

## Limits
Trained on synthetic speech only ({stream_h:.1f} h of distinct audio): the held-out error is far above
the training error, so it is data-limited. Real speech, pseudo-labelled by Whisper itself, is what would improve
it most — on a user's machine the final transcripts of their own speech are exactly such labels.
"""
    (ASSET_DIR / "card.md").write_text(card)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.training.ctc_head")
    p.add_argument("stage", choices=["data", "train", "eval", "all"])
    p.add_argument("--piper", type=int, default=600, help="Piper utterances to synthesise")
    p.add_argument("--espeak", type=int, default=900, help="espeak-ng utterances to synthesise")
    p.add_argument("--per-stream", type=int, default=10, help="streaming windows cut from each stream")
    p.add_argument("--data-minutes", type=float, default=0, help="stop the data stage after this many minutes")
    p.add_argument("--epochs", type=int, default=None, help="default 8 from scratch, 6 with --adapt")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate; default 2e-3, 5e-4 with --adapt")
    p.add_argument("--adapt", action="store_true", help="adapt the shipped head instead of training from scratch")
    p.add_argument("--compare", default=None, help="eval: a second head directory to compare with (e.g. the old one)")
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if a.stage in ("data", "all"):
        make_data(a.piper, a.espeak, a.per_stream, max_minutes=a.data_minutes)
    if a.stage in ("train", "all"):
        train(a.epochs or (6 if a.adapt else 8), a.lr or (5e-4 if a.adapt else 2e-3),
              init="shipped" if a.adapt else None)
    if a.stage in ("eval", "all"):
        from engine.asr.ctc_draft import ASSET_DIR

        heads = {"head": ASSET_DIR, **({"old": a.compare} if a.compare else {})}
        ev = evaluate(heads, write=False)
        write_card(ev, "head", "old" if a.compare else None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
