"""Train the CTC draft head on the frozen Whisper-base encoder, end to end, on a 2-core CPU.

    python -m engine.training.ctc_head data   # synthesise speech, encode it, label it (≈ 25 min)
    python -m engine.training.ctc_head train  # train the head on the cached features (≈ 5–10 min)
    python -m engine.training.ctc_head eval   # CER/WER on held-out synthetic speech and jfk.flac
    python -m engine.training.ctc_head all

Data (ctc_self_speculative_asr.txt needs a CTC-trained encoder that stays frozen; none exists offline, so the head
is trained here, on the same frozen encoder the decoder reads — the draft is "self"):
  * text: Multi30k train (captions), MT-Bench questions and GSM8K test questions 0–999, cut into sentences;
    held out (never trained on): Multi30k test_2017 and GSM8K questions 1200+;
  * audio: the Piper joe voice (length/noise scales varied) and espeak-ng (several English accents and variants,
    rate 120–200 wpm, pitch 25–75), resampled to 16 kHz; several utterances packed per 30 s window with
    0.15–1.0 s gaps; white/pink noise at 10–30 dB SNR on 70 % of windows, a synthetic room response on 30 %,
    speed perturbation 0.9–1.1 on 30 % of utterances;
  * targets: self-distillation — Whisper-base's own greedy transcript of each window (what the verifier would
    say); windows whose label is > 0.4 normalised CER from the synthesised text are dropped (Whisper did not
    understand the audio, so the label would teach the head noise);
  * features: the CTranslate2 int8 encoder output (what the streaming ASR computes), float16, cached.

Everything is seeded; files go to ``$SPECVOICE_CACHE/ctc_data`` (default ~/.cache/specvoice/ctc_data); the head
goes to ``assets/ctc_head/`` with ``card.md``.
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

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("SPECVOICE_SHARED", ROOT.parent / "shared"))
CACHE = Path(os.environ.get("SPECVOICE_CACHE", Path.home() / ".cache" / "specvoice")) / "ctc_data"
HELDOUT_DIR = ROOT / "bench" / "data" / "heldout_speech"
SR = 16000
WINDOW_S = 29.0
ESPEAK_VOICES = ["en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-029", "en-us+f3",
                 "en-us+m3", "en-gb+f2", "en-us+m7", "en-gb+m4", "en-us+f4"]


# ----------------------------------------------------------------------------------------------------------- text
def _sentences(text: str) -> list[str]:
    parts = re.split(r"(?<=[.!?])\s+", " ".join(text.split()))
    return [p for p in parts if 3 <= len(p.split()) <= 22 and not re.search(r"[<>{}\[\]\\|_=^]", p)]


def load_texts() -> tuple[list[str], list[str]]:
    """(train sentences, held-out sentences), deterministic."""
    d = SHARED / "data"
    with gzip.open(d / "text" / "multi30k" / "train.en.gz", "rt") as f:
        m30k = [line.strip() for line in f if line.strip()]
    with gzip.open(d / "text" / "multi30k" / "test_2017_flickr.en.gz", "rt") as f:
        m30k_test = [line.strip() for line in f if line.strip()]
    gsm = [json.loads(line)["question"] for line in (d / "prompts" / "gsm8k_test.jsonl").open()]
    mtb = [t for line in (d / "prompts" / "mt_bench_questions.jsonl").open() for t in json.loads(line)["turns"]]
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

        m = resolve("tts_voice", load_config())
        self.voice = PiperVoice.load(str(m.path), config_path=str(m.config) if m.config else None)
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


def _room(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    rt60 = rng.uniform(0.15, 0.5)
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
    """CTranslate2 Whisper-base: int8 encoder output (the head's input) and greedy labels (the head's target)."""

    def __init__(self):
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer

        from engine.config import load_config
        from engine.models import resolve

        m = resolve("asr_target", load_config())
        self.model = WhisperModel(str(m.path), device="cpu", compute_type="int8")
        self.tok = Tokenizer(self.model.hf_tokenizer, self.model.model.is_multilingual, task="transcribe",
                             language="en")

    def encode(self, audio: np.ndarray):
        feats = self.model.feature_extractor(audio, padding=30 * SR - len(audio))[:, :3000]
        return self.model.encode(feats)

    def label(self, enc) -> str:
        prompt = list(self.tok.sot_sequence) + [self.tok.no_timestamps]
        r = self.model.model.generate(enc, [prompt], beam_size=1, max_length=448)[0]
        return self.tok.decode([t for t in r.sequences_ids[0] if t < self.tok.eot]).strip()


def _cer(ref: str, hyp: str) -> float:
    import jiwer

    from engine.ctc_draft import normalize_text

    def n(s):
        return " ".join(re.sub(r"[^a-z0-9' ]", " ", normalize_text(s).lower()).split())

    r = n(ref)
    return jiwer.cer(r, n(hyp)) if r else 1.0


# ----------------------------------------------------------------------------------------------------- data stage
def make_data(n_piper: int, n_espeak: int, seed: int = 0) -> None:
    """Synthesise, pack, encode and label training windows into CACHE/shard_*.npz (resumable), and the
    held-out utterances into bench/data/heldout_speech (one FLAC per utterance + refs.json)."""
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
    i_shard, i = 0, 0
    t0 = time.time()
    while i < len(utts):
        # pack one window
        pieces, texts, length = [], [], 0.0
        while i < len(utts):
            text, kind = utts[i]
            a = synth.piper(text, rng) if kind == "piper" else synth.espeak_ng(text, rng)
            if rng.random() < 0.3:
                a = _speed(a, rng.uniform(0.9, 1.1))
            gap = np.zeros(int(rng.uniform(0.15, 1.0) * SR), np.float32)
            if length + (len(a) + len(gap)) / SR > WINDOW_S:
                if not pieces:
                    i += 1  # too long on its own
                break
            pieces += [gap, a]
            texts.append(text)
            length += (len(a) + len(gap)) / SR
            i += 1
        if not pieces:
            continue
        out = CACHE / f"shard_{i_shard:04d}.npz"
        i_shard += 1
        if out.exists():
            continue
        audio = np.concatenate(pieces)
        audio /= np.abs(audio).max() + 1e-9
        audio *= nrng.uniform(0.3, 0.9)
        if nrng.random() < 0.3:
            audio = _room(audio, nrng)
        if nrng.random() < 0.7:
            audio = _noise(audio, nrng)
        enc = lab.encode(audio)
        label = lab.label(enc)
        ref = " ".join(texts)
        feats = np.asarray(enc)[0].astype(np.float16)
        np.savez(out, feats=feats, label=label, ref=ref, n_frames=int(np.ceil(len(audio) / 320)),
                 cer=_cer(ref, label))
        print(f"{out.name}: {len(audio) / SR:.1f} s, {len(texts)} utt, label CER {_cer(ref, label):.3f}, "
              f"{time.time() - t0:.0f} s elapsed", flush=True)


# ---------------------------------------------------------------------------------------------------- train stage
ARCH = {"channels": 256, "kernel": 5, "blocks": 3, "dropout": 0.1}


def load_shards(max_cer: float = 0.4):
    from engine.ctc_draft import encode_text

    feats, targets, refs = [], [], []
    for p in sorted(CACHE.glob("shard_*.npz")):
        z = np.load(p)
        if float(z["cer"]) > max_cer or not str(z["label"]):
            continue
        feats.append(z["feats"])
        targets.append(encode_text(str(z["label"])))
        refs.append(str(z["label"]))
    return feats, targets, refs


def train(epochs: int = 30, lr: float = 2e-3, seed: int = 0, batch: int = 4) -> dict:
    import torch

    from engine.ctc_draft import ASSET_DIR, build_head, decode_ids, greedy_path

    torch.manual_seed(seed)
    feats, targets, labels = load_shards()
    n_val = max(2, len(feats) // 20)
    idx = list(range(len(feats)))
    random.Random(seed).shuffle(idx)
    val, tr = idx[:n_val], idx[n_val:]
    d_model = feats[0].shape[1]
    head = build_head(d_model, ARCH)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.01)
    steps = epochs * ((len(tr) + batch - 1) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.15)
    ctc = torch.nn.CTCLoss(blank=0, zero_infinity=True)
    print(f"{len(tr)} train / {len(val)} val windows, {sum(p.numel() for p in head.parameters())} params", flush=True)
    t0 = time.time()
    for ep in range(epochs):
        head.train()
        random.Random(seed + ep).shuffle(tr)
        tot = 0.0
        for b in range(0, len(tr), batch):
            ids = tr[b : b + batch]
            x = torch.from_numpy(np.stack([feats[j] for j in ids]).astype(np.float32))
            # feature-level augmentation: time masking (SpecAugment-style on encoder frames)
            if True:
                for r in range(x.shape[0]):
                    for _ in range(4):
                        s = random.randrange(0, x.shape[1] - 20)
                        x[r, s : s + random.randrange(2, 12)] = 0
            lp = torch.log_softmax(head(x), -1).transpose(0, 1)  # (T, B, C)
            tg = [torch.tensor(targets[j]) for j in ids]
            loss = ctc(lp, torch.cat(tg), torch.full((len(ids),), lp.shape[0], dtype=torch.long),
                       torch.tensor([len(t) for t in tg]))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
            opt.step()
            sched.step()
            tot += float(loss) * len(ids)
        head.eval()
        with torch.no_grad():
            errs = [_cer(labels[j], greedy_path(torch.log_softmax(
                head(torch.from_numpy(feats[j].astype(np.float32))[None]), -1)[0].numpy())) for j in val]
        print(f"epoch {ep + 1}/{epochs}: loss {tot / len(tr):.3f}, val CER {np.mean(errs):.3f}, "
              f"{time.time() - t0:.0f} s", flush=True)
    from safetensors.torch import save_file

    ASSET_DIR.mkdir(parents=True, exist_ok=True)
    save_file({k: v.half().contiguous() for k, v in head.state_dict().items()}, str(ASSET_DIR / "head.safetensors"))
    info = {"d_model": d_model, "arch": ARCH, "alphabet": "printable ASCII 32..126, blank=0",
            "encoder": "Whisper base (CTranslate2 int8 encoder output), frozen", "epochs": epochs, "lr": lr,
            "batch": batch, "train_windows": len(tr), "val_windows": len(val),
            "train_audio_min": None, "val_cer": float(np.mean(errs)), "train_seconds": round(time.time() - t0)}
    (ASSET_DIR / "config.json").write_text(json.dumps(info, indent=1))
    return info


# ----------------------------------------------------------------------------------------------------- eval stage
def evaluate() -> dict:
    """CER/WER of the CTC draft alone vs the references (held-out synthetic, jfk.flac), and of Whisper greedy."""
    import jiwer

    from audio.io import load_audio
    from engine.ctc_draft import CTCHead

    head, lab = CTCHead(), Labeler()
    refs = json.loads((HELDOUT_DIR / "refs.json").read_text())
    items = [(HELDOUT_DIR / k, v) for k, v in refs.items()]
    jfk_ref = ("And so my fellow Americans, ask not what your country can do for you, ask what you can do for "
               "your country.")
    items.append((SHARED / "data" / "speech" / "jfk.flac", jfk_ref))

    def norm(s):
        from engine.ctc_draft import normalize_text
        return " ".join(re.sub(r"[^a-z0-9' ]", " ", normalize_text(s).lower()).split())

    rows = []
    for path, ref in items:
        a = load_audio(path)
        enc = lab.encode(a)
        d = head.draft(np.asarray(enc), int(np.ceil(len(a) / 320)))
        rows.append({"file": path.name, "ref": ref, "ctc": d.text, "whisper": lab.label(enc),
                     "max_entropy": d.max_entropy})
    held = [r for r in rows if r["file"] != "jfk.flac"]
    jfk = [r for r in rows if r["file"] == "jfk.flac"][0]

    def score(rs, key):
        R = [norm(r["ref"]) for r in rs]
        H = [norm(r[key]) for r in rs]
        return {"cer": round(jiwer.cer(R, H), 4), "wer": round(jiwer.wer(R, H), 4)}

    out = {"heldout_synthetic": {"n": len(held), "ctc": score(held, "ctc"), "whisper_base": score(held, "whisper")},
           "jfk": {"ctc": score([jfk], "ctc"), "whisper_base": score([jfk], "whisper"), "ctc_text": jfk["ctc"]},
           "rows": rows}
    (CACHE / "eval.json").write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if k != "rows"}, indent=1))
    write_card(out)
    return out


def write_card(ev: dict) -> None:
    from engine.ctc_draft import ASSET_DIR

    cfg = json.loads((ASSET_DIR / "config.json").read_text())
    shards = sorted(CACHE.glob("shard_*.npz"))
    minutes = 0.0
    if shards:
        for p in shards:
            z = np.load(p)
            minutes += int(z["n_frames"]) * 0.02 / 60
    h, j = ev["heldout_synthetic"], ev["jfk"]
    card = f"""# CTC draft head on the frozen Whisper-base encoder

Self-speculative draft for `engine/ssd_asr.py` (ctc_self_speculative_asr.txt). Made by
`python -m engine.training.ctc_head all` (data → train → eval), seeded, on a 2-core CPU.

* **Input**: Whisper-base encoder output (CTranslate2 int8, as the streaming ASR computes it), 1500 × 512 per
  30 s window, 20 ms per frame. The encoder is frozen (never updated), so the draft shares the target's encoder.
* **Architecture**: LayerNorm → Linear(512→{cfg['arch']['channels']}) → {cfg['arch']['blocks']} residual blocks
  (LayerNorm, Conv1d k={cfg['arch']['kernel']}, GELU, dropout {cfg['arch']['dropout']}) → Linear(→96):
  printable ASCII (case, digits, punctuation) + blank. fp16 weights, {(ASSET_DIR / 'head.safetensors').stat().st_size / 1e6:.1f} MB.
* **Data**: {len(shards)} windows ({minutes:.0f} min) of synthetic speech packed several utterances per 30 s
  window: Piper en_US-joe-medium (length/noise scales varied) and espeak-ng (12 English voices/variants, rate
  120–200, pitch 25–75), speed perturbation on 30 % of utterances, room response on 30 % and noise (10–30 dB
  SNR) on 70 % of windows. Text: Multi30k train, MT-Bench, GSM8K test 0–999. {cfg['train_windows']} windows
  trained, {cfg['val_windows']} validation; windows whose Whisper label was > 0.4 CER from the text dropped.
* **Targets**: Whisper-base's own greedy transcripts of each window (self-distillation: the head learns to say
  what the verifier would say).
* **Training**: CTC loss, AdamW (lr {cfg['lr']}, one-cycle), batch {cfg['batch']}, {cfg['epochs']} epochs, time masking on
  encoder frames; {cfg['train_seconds']} s on 2 cores. Validation CER vs the Whisper labels: {cfg['val_cer']:.3f}.

## Accuracy of the draft alone (Whisper English normalisation)

| set | CTC head CER | CTC head WER | Whisper-base greedy CER | WER |
|---|---|---|---|---|
| held-out synthetic ({h['n']} utterances, bench/data/heldout_speech, text never trained on) | {h['ctc']['cer']:.3f} | {h['ctc']['wer']:.3f} | {h['whisper_base']['cer']:.3f} | {h['whisper_base']['wer']:.3f} |
| jfk.flac (real speech) | {j['ctc']['cer']:.3f} | {j['ctc']['wer']:.3f} | {j['whisper_base']['cer']:.3f} | {j['whisper_base']['wer']:.3f} |

jfk draft: "{j['ctc_text']}"

## Limits
Trained on one hour-scale of synthetic speech only: it is data-limited (../shared/notes/ctc_head_experiment.md
measured the same). Real speech, pseudo-labelled by Whisper itself, is what would improve it most — on a user's
machine the final transcripts of their own speech are exactly such labels.
"""
    (ASSET_DIR / "card.md").write_text(card)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.training.ctc_head")
    p.add_argument("stage", choices=["data", "train", "eval", "all"])
    p.add_argument("--piper", type=int, default=700)
    p.add_argument("--espeak", type=int, default=1100)
    p.add_argument("--epochs", type=int, default=30)
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if a.stage in ("data", "all"):
        make_data(a.piper, a.espeak)
    if a.stage in ("train", "all"):
        train(a.epochs)
    if a.stage in ("eval", "all"):
        evaluate()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
