"""Train the codec-token TTS end to end on a 2-core CPU (pcg_tts.txt needs an AR codec-token TTS; none can be had
offline, so it is built here from the Piper voice as the teacher).

    python -m engine.training.codec_tts data    # Piper speech + phoneme alignments, 1200 sentences (≈ 8 min)
    python -m engine.training.codec_tts codec   # k-means codebook (512 codes, 50 tokens/s) on the first 600 (≈ 1 min)
    python -m engine.training.codec_tts lm      # duration model + AR target (6 layers), 8 epochs (≈ 21 min)
    python -m engine.training.codec_tts draft   # draft = target's first layer + its own head, distilled (≈ 3 min)
    python -m engine.training.codec_tts decoder --decoder-epochs 6          # learned code → spectrum decoder
    python -m engine.training.codec_tts decoder --decoder-epochs 4 --decoder-init --decoder-gta 0.5 --decoder-lr 1e-3
                                                # … fine-tuned on the target's ground-truth-aligned samples
    python -m engine.training.codec_tts finetune --finetune-epochs 1     # target on its own samples (draft frozen)
    python -m engine.training.codec_tts all     # all of the above, in this order

Data: sentences from Multi30k train, MT-Bench and GSM8K (the CTC head's training text, engine.training.ctc_head),
synthesised by Piper (en_US-joe-medium) with its phoneme/sample alignments, resampled to 16 kHz. Held out: the
CTC head's held-out sentences (Multi30k test 2017, GSM8K 1200+), never trained on.
Outputs go to assets/codec_tts/ (codec.npz, decoder.safetensors, lm.safetensors, duration.safetensors, config.json); cached data to
$SPECVOICE_CACHE/codec_tts_data/data.npz (plain arrays and texts; keyed by the Piper voice's sha256 and
rebuilt when missing, corrupt or of another voice).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("SPECVOICE_CACHE", Path.home() / ".cache" / "specvoice")) / "codec_tts_data"
ASSET = ROOT / "assets" / "codec_tts"
DATA_FILE = "data.npz"
N_SENTENCES = 1200


def _sentences(seed: int = 0) -> list[str]:
    """The training sentences (4–16 words) in their seeded order; the first n are used."""
    from engine.training.ctc_head import load_texts

    train, _ = load_texts()
    sents = [s for s in train if 4 <= len(s.split()) <= 16]
    random.Random(seed).shuffle(sents)
    return sents


def _voice():
    """The teacher Piper voice's resolved model (engine.models) and its sha256."""
    from engine.config import load_config
    from engine.models import resolve, sha256_file

    m = resolve("tts_voice", load_config())
    return m, (m.sha256 or sha256_file(Path(m.path)))


def save_data(path: Path, rate: int, items: list[dict], voice_sha256: str) -> None:
    """Write the synthesised data as one ``.npz`` of plain arrays, atomically: texts, and per utterance the phoneme ids
    (int16), samples per id (int32) and 16 kHz audio (float32), concatenated with their offsets."""
    def cat(key, dtype):
        arrs = [np.asarray(x[key], dtype) for x in items]
        offs = np.cumsum([0] + [len(a) for a in arrs]).astype(np.int64)
        return (np.concatenate(arrs) if arrs else np.zeros(0, dtype)), offs

    ids, id_off = cat("ids", np.int16)
    samples, _ = cat("samples", np.int32)
    audio, audio_off = cat("audio", np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        np.savez(f, voice_sha256=np.array(voice_sha256), rate=np.array(rate, np.int64),
                 texts=np.array([x["text"] for x in items], dtype=str), ids=ids, id_offsets=id_off,
                 samples=samples, audio=audio, audio_offsets=audio_off)
    os.replace(tmp, path)


def read_data(path: Path, voice_sha256: str | None = None) -> dict | None:
    """{"rate", "voice_sha256", "items": [{"text", "ids", "samples", "audio"}]} from :func:`save_data`'s file;
    None when it is missing, unreadable, inconsistent, or (``voice_sha256`` given) made with another voice.
    Only plain arrays are read (np.load refuses object arrays)."""
    try:
        with np.load(path) as z:
            d = {k: z[k] for k in z.files}
        sha, rate, texts = str(d["voice_sha256"]), int(d["rate"]), [str(t) for t in d["texts"]]
        io, ao = d["id_offsets"], d["audio_offsets"]
        if voice_sha256 is not None and sha != voice_sha256:
            return None
        if not (len(io) == len(ao) == len(texts) + 1 and io[-1] == len(d["ids"]) == len(d["samples"])
                and ao[-1] == len(d["audio"]) and (np.diff(io) >= 0).all() and (np.diff(ao) >= 0).all()):
            return None
    except Exception:  # missing, not a zip, truncated, a missing or malformed array
        return None
    items = [{"text": t, "ids": d["ids"][io[i] : io[i + 1]], "samples": d["samples"][io[i] : io[i + 1]],
              "audio": d["audio"][ao[i] : ao[i + 1]]} for i, t in enumerate(texts)]
    return {"rate": rate, "voice_sha256": sha, "items": items}


def make_data(n: int, seed: int = 0) -> None:
    """Piper speech for ``n`` training sentences: 16 kHz audio, phoneme ids, samples per id (22.05 kHz), cached in
    ``CACHE/data.npz`` for the voice's sha256 (what an earlier run of the same voice synthesised is kept)."""
    from audio.io import resample
    from piper import PiperVoice

    m, sha = _voice()
    voice = PiperVoice.load(str(m.path), config_path=str(m.config) if m.config else None, include_alignments=True)
    rate = int(voice.config.sample_rate)
    sents = _sentences(seed)
    wanted = set(sents[:n])
    old = read_data(CACHE / DATA_FILE, sha)
    items = [x for x in old["items"] if x["text"] in wanted] if old else []
    done = {x["text"] for x in items}
    t0 = time.time()
    for i, s in enumerate(sents[:n]):
        if s in done:
            continue
        for c in voice.synthesize(s, include_alignments=True):
            if c.phoneme_id_samples is None or len(c.phoneme_id_samples) != len(c.phoneme_ids):
                continue
            items.append({"text": s, "ids": np.asarray(c.phoneme_ids, np.int16),
                          "samples": np.asarray(c.phoneme_id_samples, np.int32),
                          "audio": resample(c.audio_float_array, rate, 16000).astype(np.float32)})
        if i % 50 == 0:
            print(f"{i}/{n} sentences, {time.time() - t0:.0f} s", flush=True)
    save_data(CACHE / DATA_FILE, rate, items, sha)
    print(f"{len(items)} utterances, {sum(len(x['audio']) for x in items) / 16000 / 60:.1f} min", flush=True)


def load_data(n: int = N_SENTENCES) -> dict:
    """The cached training data of the current teacher voice; synthesised again (:func:`make_data` with ``n``
    sentences) when the cache is missing, corrupt or of another voice."""
    _, sha = _voice()
    d = read_data(CACHE / DATA_FILE, sha)
    if d is None:
        print(f"no usable data cache at {CACHE / DATA_FILE}: synthesising {n} sentences", flush=True)
        make_data(n)
        d = read_data(CACHE / DATA_FILE, sha)
        if d is None:
            raise RuntimeError(f"could not write a readable data cache at {CACHE / DATA_FILE}")
    return d


def fit_codec(K: int = 512, n_sentences: int = 600) -> None:
    """k-means codebook over the log-mel frames of the first ``n_sentences`` training sentences' speech (the shipped
    codec was fit on the first 600; the LM then trained on 1200)."""
    from tts.codec import SpectralCodec, log_magnitude

    d = load_data()
    first = set(_sentences()[:n_sentences])
    d["items"] = [x for x in d["items"] if x["text"] in first]
    ASSET.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    codec = SpectralCodec.fit([log_magnitude(x["audio"]) for x in d["items"]], K=K, iters=20)
    codec.save(ASSET / "codec.npz")
    print(f"codec: {K} codes, {time.time() - t0:.0f} s", flush=True)


def sequences():
    """Per utterance: codes (T,), frame conditioning (T, 4) and the per-id durations in frames."""
    from tts.codec import SpectralCodec
    from tts.codec_lm import frame_conditioning, frames_per_id

    d = load_data()
    codec = SpectralCodec.load(ASSET / "codec.npz")
    out = []
    for x in d["items"]:
        codes = codec.encode(x["audio"])
        dur = frames_per_id(x["samples"], d["rate"], len(codes))
        out.append({"codes": codes, "cond": frame_conditioning(x["ids"], dur), "ids": x["ids"].astype(np.int64),
                    "dur": dur, "text": x["text"]})
    return out


def train_lm(epochs: int, seed: int = 0, input_noise: float = 0.0) -> None:
    """Duration model + AR target. ``input_noise``: fraction of the target's input codes replaced by random codes
    during training (not its labels), so that it learns to lean on the phoneme conditioning rather than on copying
    the previous frame — a free-running model otherwise drifts after a few of its own samples (exposure bias)."""
    import torch

    from tts.codec_lm import ARCH, CodecLM, DurationModel

    torch.manual_seed(seed)
    seqs = sequences()
    n_val = max(4, len(seqs) // 25)
    val, tr = seqs[:n_val], seqs[n_val:]
    # ---- duration model (phoneme ids → frames per id), padded batches of 16
    dm = DurationModel()
    opt = torch.optim.AdamW(dm.parameters(), lr=3e-3)
    for ep in range(30):
        random.Random(seed + 100 + ep).shuffle(tr)
        tot, nb = 0.0, 0
        for b in range(0, len(tr), 16):
            items = tr[b : b + 16]
            L = max(len(s["ids"]) for s in items)
            ids = torch.zeros(len(items), L, dtype=torch.long)
            dur = torch.zeros(len(items), L)
            m = torch.zeros(len(items), L)
            for i, s in enumerate(items):
                ids[i, : len(s["ids"])] = torch.from_numpy(s["ids"])
                dur[i, : len(s["dur"])] = torch.log1p(torch.from_numpy(s["dur"]).float())
                m[i, : len(s["ids"])] = 1
            loss = (((dm(ids) - dur) ** 2) * m).sum() / m.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item()
            nb += 1
        if ep % 10 == 9:
            print(f"duration epoch {ep + 1}: loss {tot / nb:.3f}", flush=True)
    # ---- AR target
    lm = CodecLM(**ARCH)
    print(f"target: {sum(p.numel() for p in lm.parameters()) / 1e6:.2f} M params, {len(tr)} utterances, "
          f"{sum(len(s['codes']) for s in tr)} frames", flush=True)
    opt = torch.optim.AdamW(lm.parameters(), lr=1e-3, weight_decay=0.01)
    batch = 8
    steps = epochs * ((len(tr) + batch - 1) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=steps, pct_start=0.1)
    t0 = time.time()
    for ep in range(epochs):
        lm.train()
        random.Random(seed + ep).shuffle(tr)
        tot, n = 0.0, 0
        for b in range(0, len(tr), batch):
            x, c, y, mask = _batch(tr[b : b + batch], lm.bos)
            if input_noise > 0:
                noisy = (torch.rand(x.shape) < input_noise) & (x != lm.bos)
                x = torch.where(noisy, torch.randint(0, lm.bos, x.shape), x)
            logits = lm(x, c)
            loss = (torch.nn.functional.cross_entropy(logits.transpose(1, 2), y, reduction="none") * mask).sum() / mask.sum()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(lm.parameters(), 1.0)
            opt.step()
            sched.step()
            tot += loss.item()
            n += 1
        vl = _val_loss(lm, val)
        print(f"target epoch {ep + 1}/{epochs}: train {tot / n:.3f}, val {vl:.3f}, {time.time() - t0:.0f} s", flush=True)
    from safetensors.torch import save_file

    ASSET.mkdir(parents=True, exist_ok=True)
    save_file({k: v.half().contiguous() for k, v in lm.state_dict().items()}, str(ASSET / "lm.safetensors"))
    save_file({k: v.contiguous() for k, v in dm.state_dict().items()}, str(ASSET / "duration.safetensors"))
    info = {"arch": ARCH, "epochs": epochs, "input_noise": input_noise, "train_utterances": len(tr),
            "val_loss": vl, "train_frames": int(sum(len(s["codes"]) for s in tr)), "train_s": round(time.time() - t0)}
    (ASSET / "config.json").write_text(json.dumps(info, indent=1))


def finetune_lm(epochs: int, seed: int = 0, mix: float = 0.5, temperature: float = 0.5, lr: float = 2e-4,
                input_noise: float = 0.2) -> None:
    """Fine-tune the shipped target on its own samples (parallel scheduled sampling): per batch, a teacher-forced
    pass without gradient samples every frame at ``temperature``; a fraction ``mix`` of the input codes is replaced
    by those samples (and ``input_noise`` of the rest by random codes), the labels stay the teacher's codes. The
    draft's layers — the code/conditioning embeddings and the first block — are frozen, so the draft (first layer +
    its own head) is unchanged. Free-running, the target reads its own samples; this trains it on them."""
    import torch

    from tts.codec_lm import load_lm

    torch.manual_seed(seed)
    seqs = sequences()
    n_val = max(4, len(seqs) // 25)
    val, tr = seqs[:n_val], seqs[n_val:]
    lm = load_lm(ASSET, dtype=torch.float32)
    frozen = [lm.code, lm.cur, lm.prev, lm.next, lm.prog, lm.pos, *lm.blocks[: lm.draft_layers], lm.draft_norm,
              lm.draft_head]
    for m in frozen:
        for p in m.parameters():
            p.requires_grad_(False)
    params = [p for p in lm.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    batch = 8
    steps = epochs * ((len(tr) + batch - 1) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.05)
    vl0 = _val_loss(lm, val)
    print(f"fine-tune: val {vl0:.3f} before", flush=True)
    t0, c0 = time.time(), time.process_time()
    for ep in range(epochs):
        random.Random(seed + 1000 + ep).shuffle(tr)
        tot, n = 0.0, 0
        for b in range(0, len(tr), batch):
            x, c, y, mask = _batch(tr[b : b + batch], lm.bos)
            lm.eval()
            with torch.no_grad():
                samp = torch.multinomial(torch.softmax(lm(x, c).flatten(0, 1) / temperature, -1), 1).view(y.shape)
            lm.train()
            own = torch.zeros_like(x)
            own[:, 1:] = samp[:, :-1]
            r = torch.rand(x.shape)
            keep = x != lm.bos
            x = torch.where((r < mix) & keep, own, x)
            x = torch.where((r >= mix) & (r < mix + input_noise) & keep, torch.randint(0, lm.bos, x.shape), x)
            logits = lm(x, c)
            loss = (torch.nn.functional.cross_entropy(logits.transpose(1, 2), y, reduction="none") * mask).sum() / mask.sum()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            tot += loss.item()
            n += 1
            if n % 20 == 0:
                print(f"  step {n}: train {tot / n:.3f}, {time.time() - t0:.0f} s wall, "
                      f"{time.process_time() - c0:.0f} s CPU", flush=True)
        vl = _val_loss(lm, val)
        print(f"fine-tune epoch {ep + 1}/{epochs}: train {tot / n:.3f}, val {vl:.3f}, {time.time() - t0:.0f} s wall, "
              f"{time.process_time() - c0:.0f} s CPU", flush=True)
    from safetensors.torch import save_file

    save_file({k: v.half().contiguous() for k, v in lm.state_dict().items()}, str(ASSET / "lm.safetensors"))
    info = json.loads((ASSET / "config.json").read_text())
    info["finetune"] = {"epochs": epochs, "steps": steps, "mix_own_samples": mix, "temperature": temperature,
                        "input_noise": input_noise, "lr": lr, "frozen": "embeddings, draft layers and draft head",
                        "val_loss_before": vl0, "val_loss": vl, "cpu_s": round(time.process_time() - c0)}
    (ASSET / "config.json").write_text(json.dumps(info, indent=1))


def _batch(items, bos: int):
    import torch

    T = max(len(s["codes"]) for s in items)
    B = len(items)
    x = torch.full((B, T), bos, dtype=torch.long)
    y = torch.zeros((B, T), dtype=torch.long)
    c = torch.zeros((B, T, 4), dtype=torch.long)
    mask = torch.zeros((B, T))
    for i, s in enumerate(items):
        n = len(s["codes"])
        codes = torch.from_numpy(s["codes"])
        y[i, :n] = codes
        x[i, 1:n] = codes[:-1]
        c[i, :n] = torch.from_numpy(s["cond"])
        mask[i, :n] = 1
    return x, c, y, mask


def _val_loss(lm, val) -> float:
    import torch

    lm.eval()
    with torch.no_grad():
        x, c, y, mask = _batch(val, lm.bos)
        logits = lm(x, c)
        return float((torch.nn.functional.cross_entropy(logits.transpose(1, 2), y, reduction="none") * mask).sum()
                     / mask.sum())


def gta_codes(lm, codes: np.ndarray, cond: np.ndarray, temperature: float, g) -> np.ndarray:
    """Ground-truth-aligned codes: the target LM teacher-forced on the true codes (and the true durations' frame
    conditioning), each frame sampled at ``temperature`` — code sequences like the LM's own, frame-aligned with the
    teacher's audio (as Tacotron vocoders are fine-tuned on ground-truth-aligned predictions)."""
    import torch

    x = torch.from_numpy(np.concatenate([[lm.bos], codes[:-1]]))[None]
    with torch.inference_mode():
        logits = lm(x, torch.from_numpy(cond)[None])[0]
        return torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=g)[:, 0].numpy()


def train_decoder(epochs: int, seed: int = 0, input_noise: float = 0.1, crop: int = 200, batch: int = 16,
                  gta: float = 0.0, gta_temperature: float = 0.5, init: bool = False, lr: float = 2e-3) -> None:
    """The codec's learned inverse (tts.codec.build_decoder): codes → the teacher's log-magnitude spectrum at the 10 ms
    synthesis hop, L1 on log-magnitude (floored at e^-9), random 4 s crops of the training utterances (validation
    ones held out). ``input_noise``: fraction of input codes replaced by random codes, so that the decoder also
    renders the LM's less clean code sequences smoothly. ``gta``: fraction of the crops whose input codes are the
    target LM's ground-truth-aligned samples (:func:`gta_codes`, one draw per utterance at ``gta_temperature``)
    instead of the teacher's codes; ``init``: start from the shipped decoder. Writes
    assets/codec_tts/decoder.safetensors."""
    import torch

    from tts.codec import DECODER_ARCH, SYN_HOP, SpectralCodec, build_decoder, load_decoder, log_magnitude
    from tts.codec_lm import frame_conditioning, frames_per_id, load_lm

    torch.manual_seed(seed)
    d = load_data()
    codec = SpectralCodec.load(ASSET / "codec.npz", decoder=False)
    items = d["items"]
    n_val = max(4, len(items) // 25)
    lm = load_lm(ASSET) if gta > 0 else None
    g = torch.Generator().manual_seed(seed)
    pairs, gta_s = [], time.process_time()
    for x in items:
        codes = codec.encode(x["audio"])
        mag = np.maximum(log_magnitude(x["audio"], SYN_HOP), -9.0)
        T2 = 2 * len(codes)
        mag = np.concatenate([mag, np.repeat(mag[-1:], max(0, T2 - len(mag)), 0)])[:T2]
        alt = None
        if lm is not None:
            cond = frame_conditioning(x["ids"], frames_per_id(x["samples"], d["rate"], len(codes)))
            alt = gta_codes(lm, codes, cond, gta_temperature, g)
        pairs.append((codes, mag.astype(np.float32), alt))
    gta_s = time.process_time() - gta_s
    val, tr = pairs[:n_val], pairs[n_val:]
    if init:
        dec = load_decoder(ASSET / "decoder.safetensors").train()
    else:
        dec = build_decoder(codec.K, **DECODER_ARCH)
        with torch.no_grad():
            dec.out.bias.copy_(torch.from_numpy(np.concatenate([m for _, m, _ in tr]).mean(0)))
    n_params = sum(p.numel() for p in dec.parameters())
    steps_per_epoch = sum(len(c) for c, _, _ in tr) // (crop * batch) + 1
    opt = torch.optim.AdamW(dec.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=epochs * steps_per_epoch, pct_start=0.1)
    rng = np.random.default_rng(seed)
    print(f"decoder: {n_params / 1e6:.2f} M params, {len(tr)} utterances, {steps_per_epoch} steps/epoch", flush=True)
    t0, c0 = time.time(), time.process_time()

    def val_l1(k=0):
        """mean L1 on the validation utterances from the teacher's codes (k=0) or the GTA codes (k=2)"""
        dec.eval()
        with torch.no_grad():
            e = [float((dec(torch.from_numpy(p[k])[None])[0] - torch.from_numpy(p[1])).abs().mean()) for p in val]
        dec.train()
        return float(np.mean(e))

    def vals():
        return f"val L1 {val_l1():.3f}" + (f" (GTA codes {val_l1(2):.3f})" if lm is not None else "")

    cen = lambda k: np.mean([np.abs(np.maximum(codec.spectrum(p[k]), -9) - p[1]).mean() for p in val])  # noqa: E731
    print(f"decoder at init: {vals()}; centroid spectra {cen(0):.3f}"
          + (f" (GTA codes {cen(2):.3f}; GTA sampling {gta_s:.0f} s CPU)" if lm is not None else ""), flush=True)
    for ep in range(epochs):
        tot = 0.0
        for _ in range(steps_per_epoch):
            X = np.zeros((batch, crop), np.int64)
            Y = np.zeros((batch, 2 * crop, tr[0][1].shape[1]), np.float32)
            M = np.zeros((batch, 2 * crop, 1), np.float32)
            for b in range(batch):
                c, m, alt = tr[rng.integers(len(tr))]
                if alt is not None and rng.random() < gta:
                    c = alt
                s0 = int(rng.integers(0, max(1, len(c) - crop + 1)))
                n = min(crop, len(c) - s0)
                X[b, :n], Y[b, : 2 * n], M[b, : 2 * n] = c[s0 : s0 + n], m[2 * s0 : 2 * (s0 + n)], 1
            x = torch.from_numpy(X)
            if input_noise > 0:
                x = torch.where(torch.rand(x.shape) < input_noise, torch.randint(0, codec.K, x.shape), x)
            loss = ((dec(x) - torch.from_numpy(Y)).abs() * torch.from_numpy(M)).sum() / (M.sum() * Y.shape[2])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            tot += loss.item()
        print(f"decoder epoch {ep + 1}/{epochs}: train L1 {tot / steps_per_epoch:.3f}, {vals()}, "
              f"{time.time() - t0:.0f} s wall, {time.process_time() - c0:.0f} s CPU", flush=True)
    from safetensors.torch import save_file

    save_file({k: v.half().contiguous() for k, v in dec.state_dict().items()}, str(ASSET / "decoder.safetensors"),
              metadata={"arch": json.dumps(DECODER_ARCH)})
    info = json.loads((ASSET / "config.json").read_text()) if (ASSET / "config.json").exists() else {}
    entry = {"arch": DECODER_ARCH, "epochs": epochs, "steps": epochs * steps_per_epoch, "batch": batch,
             "crop_frames": crop, "input_noise": input_noise, "gta": gta, "gta_temperature": gta_temperature,
             "lr": lr, "train_utterances": len(tr), "val_l1": round(val_l1(), 4),
             "val_l1_gta": round(val_l1(2), 4) if lm is not None else None,
             "cpu_s": round(time.process_time() - c0 + gta_s)}
    prev = info.get("decoder")
    if init and prev:  # fine-tuned from the shipped decoder: keep its history
        entry["init"] = {k: v for k, v in prev.items() if k != "init"} | ({"init": prev["init"]} if "init" in prev else {})
    info["decoder"] = entry
    (ASSET / "config.json").write_text(json.dumps(info, indent=1))


def train_draft(epochs: int, seed: int = 0) -> None:
    """Draft = the target's first ``draft_layers`` layers (frozen, shared) + its own norm and head, distilled
    from the target's distribution (KL), as the paper's draft is a layer subset of the target."""
    import torch

    from tts.codec_lm import load_lm

    torch.manual_seed(seed)
    seqs = sequences()
    n_val = max(4, len(seqs) // 25)
    tr = seqs[n_val:]
    lm = load_lm(ASSET, dtype=torch.float32)
    for p in lm.parameters():
        p.requires_grad_(False)
    params = list(lm.draft_norm.parameters()) + list(lm.draft_head.parameters())
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(params, lr=2e-3)
    batch = 8
    t0 = time.time()
    for ep in range(epochs):
        random.Random(seed + ep).shuffle(tr)
        tot, n = 0.0, 0
        for b in range(0, len(tr), batch):
            x, c, y, mask = _batch(tr[b : b + batch], lm.bos)
            with torch.no_grad():
                q = torch.log_softmax(lm(x, c) / 0.8, -1)
            p = torch.log_softmax(lm(x, c, draft=True) / 0.8, -1)
            kl = (torch.exp(q) * (q - p)).sum(-1)
            loss = (kl * mask).sum() / mask.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item()
            n += 1
        print(f"draft epoch {ep + 1}/{epochs}: KL {tot / n:.3f}, {time.time() - t0:.0f} s", flush=True)
    from safetensors.torch import save_file

    save_file({k: v.half().contiguous() for k, v in lm.state_dict().items()}, str(ASSET / "lm.safetensors"))
    info = json.loads((ASSET / "config.json").read_text())
    info.update(draft_epochs=epochs, draft_kl=tot / n)
    (ASSET / "config.json").write_text(json.dumps(info, indent=1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.training.codec_tts")
    ap.add_argument("stage", choices=["data", "codec", "decoder", "lm", "draft", "finetune", "all"])
    ap.add_argument("--sentences", type=int, default=N_SENTENCES)
    ap.add_argument("--codec-sentences", type=int, default=600)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--draft-epochs", type=int, default=3)
    ap.add_argument("--decoder-epochs", type=int, default=6)
    ap.add_argument("--decoder-gta", type=float, default=0.0,
                    help="fraction of decoder crops fed the target LM's ground-truth-aligned samples")
    ap.add_argument("--decoder-init", action="store_true", help="fine-tune the shipped decoder")
    ap.add_argument("--finetune-epochs", type=int, default=1)
    ap.add_argument("--decoder-lr", type=float, default=2e-3)
    ap.add_argument("--temperature", type=float, default=0.5, help="GTA sampling temperature")
    ap.add_argument("--input-noise", type=float, default=0.4,
                    help="fraction of input codes replaced by random codes while training the target")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if a.stage in ("data", "all"):
        make_data(a.sentences)
    if a.stage in ("codec", "all"):
        fit_codec(n_sentences=a.codec_sentences)
    if a.stage in ("lm", "all"):
        train_lm(a.epochs, input_noise=a.input_noise)
    if a.stage in ("draft", "all"):
        train_draft(a.draft_epochs)
    if a.stage == "decoder":
        train_decoder(a.decoder_epochs, gta=a.decoder_gta, gta_temperature=a.temperature, init=a.decoder_init,
                      lr=a.decoder_lr)
    if a.stage == "all":  # the shipped recipe: decoder on the teacher's codes, then with GTA codes; LM fine-tune
        train_decoder(6)
        train_decoder(4, gta=0.5, gta_temperature=0.5, init=True, lr=1e-3)
    if a.stage in ("finetune", "all"):
        finetune_lm(a.finetune_epochs, temperature=a.temperature)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
