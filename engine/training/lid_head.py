"""Train the language-identification head on the frozen Whisper-base encoder, end to end, on a CPU.

    python -m engine.training.lid_head data --workers 2  # synthesise and encode 40 languages (≈ 22 min)
    python -m engine.training.lid_head train  # train the head on the cached encoder outputs (≈ 18 min, 2 threads)
    python -m engine.training.lid_head validate  # its accuracy on the held-out utterances, card.md
    python -m engine.training.lid_head all

Why: Whisper base names the language of a 2–4 s utterance from one decoder step, and on short or synthetic
speech it is often wrong (espeak-ng French is heard as Thai or Japanese, some German voices as English). The head
reads the same encoder output the decode already computed (mean and standard deviation of its audio frames) and
is combined with Whisper's own language probabilities by :func:`engine.asr.language_head.fuse`.

Data (no multilingual speech corpus exists offline, so it is synthesised):
  * text: words drawn by frequency (Zipf) from the ``wordfreq`` word lists (6–18 words per utterance), so no
    benchmark sentence is ever read; English also from Multi30k train captions;
  * audio: espeak-ng in each language with a random voice variant (every variant espeak-ng ships), rate 120–200 wpm,
    pitch 10–90; English also the Piper joe voice; speed perturbation 0.85–1.15 on 30 %, a synthetic room response
    (RT60 0.15–0.8 s) on 30 %, babble (3–6 voices of random languages at 5–20 dB SNR) on 20 %, telephone band
    (300–3400 Hz, 8 kHz; half of it 8-bit μ-law) on 20 % and white/pink noise at 10–30 dB SNR on 40 % of utterances;
  * classes: :data:`HEAD_LANGUAGES` (Whisper codes) and ``other`` (:data:`OTHER_LANGUAGES`, so speech in a language
    outside the head's list is not forced onto one in it);
  * features: the CTranslate2 int8 encoder output of the utterance in the streaming ASR's scaled ``WindowPolicy()``
    window (85 %) or the padded 30 s window (15 %), the audio frames only (``ceil(samples / 320)``), float16;
    training pools random prefixes (≥ 1 s) as well as the whole utterance, as the stream identifies each growing
    window.

Everything is seeded; CPU threads come from ``SPECVOICE_TRAIN_THREADS`` (default 1); files go to
``$SPECVOICE_CACHE/lid_data`` (default ~/.cache/specvoice/lid_data); the head goes to ``assets/lid_head/``
(``$SPECVOICE_HEAD_OUT`` to write it elsewhere) with ``card.md``. Needs ``wordfreq`` (``pip install -e .[train]``).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import io
import json
import os
import random
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np

from engine.config import cache_dir
from engine.training.ctc_head import SR, THREADS, _noise, _room, _speed

ROOT = Path(__file__).resolve().parents[2]
CACHE = cache_dir() / "lid_data"

# Whisper code → espeak-ng voice(s) (wordfreq has the same code except Norwegian: "nb")
HEAD_LANGUAGES = {
    "en": ["en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029"], "de": ["de"], "fr": ["fr", "fr-be"],
    "es": ["es", "es-419"], "it": ["it"], "pt": ["pt", "pt-br"], "nl": ["nl"], "ru": ["ru"], "pl": ["pl"],
    "tr": ["tr"], "sv": ["sv"], "cs": ["cs"], "fi": ["fi"], "hu": ["hu"], "el": ["el"], "ro": ["ro"],
    "da": ["da"], "no": ["nb"], "uk": ["uk"], "bg": ["bg"], "hr": ["hr"], "ca": ["ca"], "id": ["id"],
    "vi": ["vi"], "ar": ["ar"], "hi": ["hi"],
}
OTHER_LANGUAGES = {"he": ["he"], "is": ["is"], "lt": ["lt"], "lv": ["lv"], "mk": ["mk"], "ms": ["ms"],
                   "sl": ["sl"], "sk": ["sk"], "ta": ["ta"], "ur": ["ur"], "bn": ["bn"], "fa": ["fa"],
                   "ko": ["ko"], "sr": ["sr"]}
WORDFREQ_CODE = {"no": "nb"}
PER_HEAD_LANGUAGE = 280
PER_OTHER_LANGUAGE = 60
PIPER_ENGLISH = 80
BABBLE_POOL = 48  # utterances of random languages that babble is mixed from (never the utterance's own words)


def _variants() -> list[str]:
    out = subprocess.run(["espeak-ng", "--voices=variant"], capture_output=True, text=True, check=True).stdout
    return sorted({line.split()[4].split("/")[-1] for line in out.splitlines()[1:] if len(line.split()) > 4})


@functools.lru_cache(maxsize=None)  # the babble pool draws from a language's list many times
def _words(code: str, n: int = 4000) -> tuple[list[str], np.ndarray]:
    """The ``n`` most frequent words of ``code`` (letters only, ≥ 2 characters) and their frequencies."""
    import wordfreq

    wcode = WORDFREQ_CODE.get(code, code)
    freqs = wordfreq.get_frequency_dict(wcode)  # the list as shipped (no tokeniser needed)
    words = [w for w in sorted(freqs, key=freqs.get, reverse=True)[: n * 2] if len(w) >= 2 and w.isalpha()][:n]
    f = np.array([freqs[w] for w in words], np.float64)
    return words, f / f.sum()


def _english_captions() -> list[str]:
    with gzip.open(ROOT / "bench" / "data" / "text" / "multi30k" / "train.en.gz", "rt") as fh:
        return [s.strip() for s in fh if 20 < len(s.strip()) < 160]


def _telephone(a: np.ndarray, mu_law: bool = False) -> np.ndarray:
    """The telephone band (300–3400 Hz at 8 kHz), optionally through 8-bit μ-law (G.711) as a phone line codes it."""
    from audio.io import mu_law as coded, resample

    spec = np.fft.rfft(a)
    f = np.fft.rfftfreq(len(a), 1 / SR)
    spec[(f < 300) | (f > 3400)] = 0  # the telephone band
    b = resample(np.fft.irfft(spec, len(a)).astype(np.float32), SR, 8000)
    if mu_law:
        peak = np.abs(b).max() + 1e-9
        b = coded(b / peak) * peak
    return resample(b.astype(np.float32), 8000, SR)


def _babble(a: np.ndarray, pool: list[np.ndarray], rng: random.Random) -> np.ndarray:
    """``a`` under babble: 3–6 utterances of the pool (random languages and voices) at random offsets, summed, at
    5–20 dB SNR — other people talking in the room, which a language identification must not follow."""
    b = np.zeros(len(a), np.float32)
    for _ in range(rng.randint(3, 6)):
        u = pool[rng.randrange(len(pool))]
        if len(u) >= len(a):
            s = rng.randrange(len(u) - len(a) + 1)
            b += u[s: s + len(a)] / (np.std(u) + 1e-9)
        else:
            s = rng.randrange(len(a) - len(u) + 1)
            b[s: s + len(u)] += u / (np.std(u) + 1e-9)
    p_sig = np.mean(a[np.abs(a) > 0.01] ** 2) if np.any(np.abs(a) > 0.01) else 1e-4
    b *= np.sqrt(p_sig / (10 ** (rng.uniform(5, 20) / 10)) / (np.mean(b ** 2) + 1e-12))
    return (a + b).astype(np.float32)


def _espeak(text: str, voice: str, rng: random.Random) -> np.ndarray:
    import soundfile as sf

    from audio.io import resample

    cmd = ["espeak-ng", "-v", voice, "-s", str(rng.randint(120, 200)), "-p", str(rng.randint(10, 90)), "--stdout",
           text]
    a, rate = sf.read(io.BytesIO(subprocess.run(cmd, capture_output=True, check=True).stdout), dtype="float32")
    return resample(a, rate, SR)


def _augment(a: np.ndarray, rng: random.Random, nrng: np.random.Generator,
             babble: list[np.ndarray] | None = None) -> np.ndarray:
    if rng.random() < 0.3:
        a = _speed(a, rng.uniform(0.85, 1.15))
    if rng.random() < 0.3:
        a = _room(a, nrng, rt60_max=0.8)
    if babble and rng.random() < 0.2:
        a = _babble(a, babble, rng)
    if rng.random() < 0.2:
        a = _telephone(a, mu_law=rng.random() < 0.5)
    if rng.random() < 0.4:
        a = _noise(a, nrng)
    pad = np.zeros(int(rng.uniform(0.05, 0.5) * SR), np.float32)
    a = np.concatenate([pad, a, pad[: len(pad) // 2]])
    return (a / (np.abs(a).max() + 1e-9) * rng.uniform(0.2, 0.9)).astype(np.float32)


def _babble_pool(seed: int, variants: list[str]) -> list[np.ndarray]:
    """:data:`BABBLE_POOL` utterances in random languages (head and other), random voices: what babble is mixed from."""
    rng = random.Random(f"{seed}-babble")
    voices = {**HEAD_LANGUAGES, **OTHER_LANGUAGES}
    codes = list(voices)
    pool = []
    while len(pool) < BABBLE_POOL:
        code = rng.choice(codes)
        words, freq = _words(code, 1000)
        text = " ".join(np.random.default_rng([seed, len(pool)]).choice(words, size=14, p=freq))
        voice = rng.choice(voices[code])
        if rng.random() < 0.6:
            voice += "+" + rng.choice(variants)
        try:
            pool.append(_espeak(text, voice, rng))
        except subprocess.CalledProcessError:
            continue
    return pool


def _claim(path: Path) -> bool:
    """Whether this process may make ``path`` (not made, and no other worker is making it: ``path``.lock)."""
    if path.exists():
        return False
    try:
        os.close(os.open(str(path) + ".lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    if path.exists():  # made, and its lock removed, between the two checks
        os.remove(str(path) + ".lock")
        return False
    return True


def make_data(seed: int = 0, workers: int = 1) -> None:
    """Synthesise, augment and encode every utterance into CACHE/{code}.npz (resumable per language), in ``workers``
    processes: each language is made by the worker that claims it first ({code}.npz.lock while it is made; the locks
    of an earlier run that stopped midway are removed first). Every language is seeded on its own, so the data do not
    depend on the number of workers."""
    import multiprocessing

    from engine.config import load_config
    from engine.models import resolve

    resolve("asr_target", load_config())  # joined and checked once, before the workers load it
    CACHE.mkdir(parents=True, exist_ok=True)
    for stale in [*CACHE.glob("*.lock"), *CACHE.glob("*.part.npz")]:  # a run that stopped midway
        stale.unlink()
    babble = _babble_pool(seed, _variants())  # made once, shared by the workers
    procs = [multiprocessing.Process(target=_make_data, args=(seed, babble)) for _ in range(max(1, workers))]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode for p in procs):
        raise RuntimeError(f"a data worker failed (exit codes {[p.exitcode for p in procs]})")


def _make_data(seed: int, babble: list[np.ndarray]) -> None:
    from engine.asr.language_head import FRAME_SAMPLES
    from engine.asr.whisper_ct2 import detect_language
    from engine.training.ctc_head import Labeler, Synth

    variants = _variants()
    lab = Labeler()
    piper = Synth() if PIPER_ENGLISH else None
    captions = _english_captions()
    plan = [(c, v, PER_HEAD_LANGUAGE) for c, v in HEAD_LANGUAGES.items()]
    plan += [(c, v, PER_OTHER_LANGUAGE) for c, v in OTHER_LANGUAGES.items()]
    for code, voices, n in plan:
        path = CACHE / f"{code}.npz"
        if not _claim(path):
            continue
        t0 = time.time()
        rng = random.Random(f"{seed}-{code}")
        nrng = np.random.default_rng([seed, *code.encode()])  # str hash() is salted per process: not a seed
        words, freq = _words(code)
        feats, lens, padded, whisper_top = [], [], [], []
        while len(feats) < n + (PIPER_ENGLISH if code == "en" else 0):
            use_piper = code == "en" and len(feats) >= n
            if code == "en" and rng.random() < 0.3 or use_piper:
                text = rng.choice(captions)
            else:
                text = " ".join(nrng.choice(words, size=rng.randint(6, 18), p=freq))
            voice = rng.choice(voices)
            if rng.random() < 0.8:
                voice += "+" + rng.choice(variants)
            try:
                a = piper.piper(text, rng) if use_piper else _espeak(text, voice, rng)
            except subprocess.CalledProcessError:
                continue
            if len(a) < 1.0 * SR:
                continue
            a = _augment(a[: int(12 * SR)], rng, nrng, babble)
            pad = rng.random() < 0.15
            enc = lab.encode(a, 3000 if pad else None)
            feats.append(np.asarray(enc)[0, : int(np.ceil(len(a) / FRAME_SAMPLES))].astype(np.float16))
            lens.append(len(a) / SR)
            padded.append(pad)
            top = detect_language(lab.model.model, enc)[:8]
            whisper_top.append(json.dumps([(c, round(p, 4)) for c, p in top]))
        tmp = path.with_suffix(".part.npz")
        np.savez_compressed(tmp, feats=np.array(feats, dtype=object), secs=np.array(lens), padded=np.array(padded),
                            whisper=np.array(whisper_top))
        tmp.replace(path)  # a worker stopped midway leaves no half-written language
        os.remove(str(path) + ".lock")
        print(f"{code}: {len(feats)} utterances, {sum(lens) / 60:.1f} min, {time.time() - t0:.0f} s", flush=True)


# ---------------------------------------------------------------------------------------------------- train stage
# two networks whose probabilities are combined (normalised geometric mean): the statistics of the encoder frames
# alone, and of a per-frame layer and convolution over them — the two err on different utterances
ARCHS = {"stats": {"frame": 0, "hidden": 256, "dropout": 0.2, "epochs": 40},
         "frames": {"frame": 192, "kernel": 5, "hidden": 256, "dropout": 0.2, "epochs": 24}}
FUSE_WEIGHT = 2.0  # the fusion weight of the card's validation numbers (the product's is asr.language_head)
MAX_TRAIN_FRAMES = 400  # 8 s: longer utterances are cropped while training (the pooled statistics hardly change)


def classes() -> list[str]:
    return list(HEAD_LANGUAGES) + ["other"]


def build_net(d_model: int, n_classes: int, arch: dict):
    """One network of the head as a torch module: [per-frame Linear(d_model→frame) → GELU → Conv1d(frame→frame,
    kernel) → GELU, when ``arch["frame"]`` > 0] → statistics pooling (mean and standard deviation over the audio
    frames) → LayerNorm → Linear(→hidden) → GELU → dropout → Linear(→classes).
    ``forward(x (B, T, d_model), mask (B, T) bool) → logits (B, classes)``."""
    import torch

    class LidNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            f, h = arch["frame"], arch["hidden"]
            if f:
                self.proj = torch.nn.Linear(d_model, f)
                self.conv = torch.nn.Conv1d(f, f, arch["kernel"], padding=arch["kernel"] // 2)
            self.norm = torch.nn.LayerNorm(2 * (f or d_model))
            self.fc1 = torch.nn.Linear(2 * (f or d_model), h)
            self.drop = torch.nn.Dropout(arch["dropout"])
            self.fc2 = torch.nn.Linear(h, n_classes)

        def forward(self, x, mask):
            m = mask.unsqueeze(-1).float()
            y = x * m
            if arch["frame"]:
                y = torch.nn.functional.gelu(self.proj(x)) * m
                y = torch.nn.functional.gelu(self.conv(y.transpose(1, 2)).transpose(1, 2)) * m
            n = m.sum(1).clamp(min=1)
            mean = y.sum(1) / n
            std = ((((y - mean.unsqueeze(1)) ** 2) * m).sum(1) / n).clamp(min=1e-6).sqrt()
            z = self.norm(torch.cat([mean, std], -1))
            return self.fc2(self.drop(torch.nn.functional.gelu(self.fc1(z))))

    return LidNet()


def load_data():
    """(per utterance: frames (T, 512) float16, class index, Whisper's top languages, seconds, is-validation, code)."""
    cls = classes()
    rows = []
    for code in list(HEAD_LANGUAGES) + list(OTHER_LANGUAGES):
        z = np.load(CACHE / f"{code}.npz", allow_pickle=True)
        y = cls.index(code) if code in HEAD_LANGUAGES else cls.index("other")
        for i, (f, s, w) in enumerate(zip(z["feats"], z["secs"], z["whisper"])):
            rows.append((f, y, json.loads(str(w)), float(s), i % 10 == 0, code))
    return rows


def _batch(frames: list[np.ndarray]):
    import torch

    t = max(len(f) for f in frames)
    x = np.zeros((len(frames), t, frames[0].shape[1]), np.float32)
    mask = np.zeros((len(frames), t), bool)
    for i, f in enumerate(frames):
        x[i, : len(f)], mask[i, : len(f)] = f, True
    return torch.from_numpy(x), torch.from_numpy(mask)


def _train_net(name: str, arch: dict, tr: list, va: list, n_classes: int, lr: float, seed: int):
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    epochs = arch["epochs"]
    net = build_net(tr[0][0].shape[1], n_classes, arch)
    counts = np.bincount([r[1] for r in tr], minlength=n_classes).astype(np.float32)
    weight = torch.tensor(counts.sum() / (n_classes * np.maximum(counts, 1)))
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.05)
    n_batches = (len(tr) + 31) // 32
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=epochs * n_batches, pct_start=0.1)
    t0 = time.time()

    def view(f: np.ndarray) -> np.ndarray:
        n = len(f)
        if n > 60 and rng.random() < 0.5:
            n = int(rng.integers(50, n + 1))  # a growing window's prefix (≥ 1 s)
        f = f[:n]
        if len(f) > MAX_TRAIN_FRAMES:
            s = int(rng.integers(0, len(f) - MAX_TRAIN_FRAMES + 1))
            f = f[s: s + MAX_TRAIN_FRAMES]
        return f.astype(np.float32)

    def val_accuracy() -> float:
        net.eval()
        right = []
        with torch.no_grad():
            for b in range(0, len(va), 64):
                x, m = _batch([r[0].astype(np.float32) for r in va[b: b + 64]])
                right += list(net(x, m).argmax(-1).numpy() == np.array([r[1] for r in va[b: b + 64]]))
        return float(np.mean(right))

    for ep in range(epochs):
        net.train()
        order = rng.permutation(len(tr))
        order = sorted(order, key=lambda j: len(tr[j][0]) + rng.integers(0, 80))  # similar lengths per batch
        batches = [order[b: b + 32] for b in range(0, len(order), 32)]
        rng.shuffle(batches)
        for ids in batches:
            x, m = _batch([view(tr[j][0]) for j in ids])
            y = torch.tensor([tr[j][1] for j in ids])
            loss = torch.nn.functional.cross_entropy(net(x, m), y, weight=weight, label_smoothing=0.05)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            sched.step()
        if (ep + 1) % 4 == 0 or ep + 1 == epochs:
            print(f"{name} epoch {ep + 1}: loss {float(loss.detach()):.3f}, val accuracy {val_accuracy():.3f}, "
                  f"{time.time() - t0:.0f} s", flush=True)
    return net, round(time.time() - t0)


def train(lr: float = 2e-3, seed: int = 0) -> dict:
    """Train the head's networks (:data:`ARCHS`; cross-entropy, AdamW) on whole utterances and random prefixes;
    writes assets/lid_head (``$SPECVOICE_HEAD_OUT``) with its config and card."""
    import torch

    from engine.asr.language_head import ASSET_DIR

    torch.set_num_threads(max(1, THREADS))
    rows = load_data()
    cls = classes()
    tr = [r for r in rows if not r[4]]
    va = [r for r in rows if r[4]]
    state, seconds = {}, {}
    for name, arch in ARCHS.items():
        net, seconds[name] = _train_net(name, arch, tr, va, len(cls), lr, seed)
        state.update({f"{name}.{k}": v.half().contiguous() for k, v in net.state_dict().items()})
    from safetensors.torch import save_file

    out_dir = Path(os.environ.get("SPECVOICE_HEAD_OUT", ASSET_DIR))
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out_dir / "head.safetensors"))
    info = {"d_model": tr[0][0].shape[1], "nets": ARCHS, "classes": cls, "other_languages": list(OTHER_LANGUAGES),
            "encoder": "Whisper base (CTranslate2 int8 encoder output), frozen", "lr": lr,
            "train_utterances": len(tr), "val_utterances": len(va), "train_seconds": seconds, "threads": THREADS}
    (out_dir / "config.json").write_text(json.dumps(info, indent=1) + "\n")
    validate(out_dir, va)
    return json.loads((out_dir / "config.json").read_text())


def validate(out_dir: Path, va: list | None = None) -> dict:
    """Whisper alone, the head alone and fused on the held-out utterances (numpy forward, as the product runs it);
    written into ``out_dir``'s config.json and card.md."""
    from engine.asr.language_head import LanguageIdHead, fuse

    cls = classes()
    if va is None:
        va = [r for r in load_data() if r[4]]
    info = json.loads((out_dir / "config.json").read_text())
    lid = LanguageIdHead(out_dir)
    ok: dict[str, list] = {"whisper": [], "head": [], "fused": [], "head_first_1.5s": []}
    for f, y, w, s, _, code in va:
        truth = cls[y]
        hp = lid.probs_from_frames(f)
        ok["whisper"].append(w[0][0] == code)
        ok["head"].append(max(hp, key=hp.get) == truth)
        fused = fuse(w, hp, FUSE_WEIGHT)[0][0]
        ok["fused"].append(fused == code if truth != "other" else fused not in HEAD_LANGUAGES)
        hp = lid.probs_from_frames(f[:75])  # the first 1.5 s: what a growing streaming window reads first
        ok["head_first_1.5s"].append(max(hp, key=hp.get) == truth)
    res = {k: round(float(np.mean(v)), 4) for k, v in ok.items()}
    res["utterances"] = len(va)
    res["weight"] = FUSE_WEIGHT
    info["validation"] = res
    (out_dir / "config.json").write_text(json.dumps(info, indent=1) + "\n")
    write_card(info, out_dir)
    print(json.dumps(res), flush=True)
    return info


def write_card(info: dict, out_dir: Path | None = None) -> None:
    """assets/lid_head/card.md from the training's config.json."""
    out_dir = out_dir or Path(os.environ.get("SPECVOICE_HEAD_OUT", ROOT / "assets" / "lid_head"))
    v = info["validation"]
    rows = (f"| {v['utterances']} | {v['whisper']:.3f} | {v['head']:.3f} | {v['fused']:.3f} | "
            f"{v['head_first_1.5s']:.3f} |")
    st, fr = info["nets"]["stats"], info["nets"]["frames"]
    secs = ", ".join(f"{k} {v} s" for k, v in info["train_seconds"].items())
    card = f"""# Language-ID head on the frozen Whisper-base encoder

Used by `engine/asr/language_head.py` under `asr.language = auto`: Whisper's own language identification times this
head's, raised to `asr.language_head` (a product of experts). Made by `python -m engine.training.lid_head all`,
seeded, on a CPU.

* **Input**: the Whisper-base encoder output the decode already computed (CTranslate2 int8), 20 ms per frame: the
  frames that hold audio (`ceil(samples / 320)`), {info['d_model']} values each.
* **Architecture**: two networks whose probabilities are combined by a normalised geometric mean; each ends in
  statistics pooling (mean and standard deviation over the frames) → LayerNorm → Linear(→{st['hidden']}) → GELU →
  dropout {st['dropout']} → Linear(→{len(info['classes'])}).
  `stats` pools the encoder frames themselves; `frames` first applies a per-frame
  Linear({info['d_model']}→{fr['frame']}) → GELU → Conv1d(kernel {fr['kernel']}) → GELU.
  Classes: {', '.join(info['classes'][:-1])} and `other` ({', '.join(info['other_languages'])} while training).
  fp16 weights.
* **Data**: {info['train_utterances']} synthesised utterances for training, {info['val_utterances']} held out
  (every tenth of each language). Text: words drawn by frequency from the `wordfreq` 3.1.1 word lists (6–18 words;
  no benchmark sentence), English also Multi30k train captions. Speech: espeak-ng 1.51 in each language with a random
  voice variant (80 %), rate 120–200 wpm, pitch 10–90; English also the Piper voice `en_US-joe-medium`. Speed
  perturbation 0.85–1.15 on 30 %, a synthetic room response (RT60 0.15–0.8 s) on 30 %, babble (3–6 voices of random
  languages at 5–20 dB SNR) on 20 %, telephone band (half of it 8-bit μ-law) on 20 %, white/pink noise at 10–30 dB
  SNR on 40 %. 85 % encoded in the streaming ASR's length-scaled window, 15 % in the padded 30 s window.
* **Training**: cross-entropy with class weights and label smoothing 0.05, AdamW (one-cycle, max lr {info['lr']}),
  {st['epochs']} (`stats`) and {fr['epochs']} (`frames`) epochs of whole utterances and random prefixes ≥ 1 s (a
  growing streaming window), cropped to 8 s; {secs} on {info['threads']} CPU thread(s).

## Validation (held-out synthetic utterances, never trained on)

Language named right by Whisper base alone, the head alone and the two fused (`fuse`, weight
{info['validation']['weight']}); an `other` utterance counts as right when the fused choice is outside the head's
list. These utterances are harder than speech: random word sequences, odd voice variants, noise.

| utterances | Whisper base | head | fused | head on the first 1.5 s |
|---|---|---|---|---|
{rows}

Synthetic speech is all the head was trained on: on real speech it is one vote next to Whisper's, never alone.
Licences: wordfreq data CC BY-SA 4.0 (text only, not shipped), espeak-ng GPL-3.0 (used as a program, not shipped).
"""
    (out_dir / "card.md").write_text(card)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.training.lid_head", description=__doc__.split("\n")[0])
    ap.add_argument("stage", choices=["data", "train", "validate", "all"])
    ap.add_argument("--workers", type=int, default=THREADS, help="data: processes synthesising and encoding "
                    "(default SPECVOICE_TRAIN_THREADS)")
    a = ap.parse_args(argv)
    if not shutil.which("espeak-ng"):
        raise SystemExit("espeak-ng is not installed (apt install espeak-ng)")
    if a.stage in ("data", "all"):
        make_data(workers=a.workers)
    if a.stage in ("train", "all"):
        train()
    if a.stage == "validate":
        validate(Path(os.environ.get("SPECVOICE_HEAD_OUT", ROOT / "assets" / "lid_head")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
