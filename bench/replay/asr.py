"""ASR family of the replay (:mod:`bench.replay`): CTC self-speculative decoding (both presets of Saon et al. 2026,
Table 1) and SpecASR (adaptive, recycling, tree; Wei et al., DAC 2025) vs AR greedy, all on the torch Whisper-base
decoder (the product's verification decoder, :mod:`engine.asr.whisper_torch`), SpecASR drafting with Whisper tiny.en.

Per utterance the trace keeps what a decode needs besides the models: the encoder window (mel frames), the target
and draft prompts, the CTC head's draft text and its max frame entropy (Eq. 3's input: the head runs in the replay
too, on the placeholder encoder output, for its cost), and per method the recorded calls of the target and draft
decoders, the tokens produced and the tokenizer tape. Timed per method, as ``bench asr`` times it: the decoding stage
— AR: greedy decoding; CTC-SSD: the CTC head + Eq. 3/5/6; SpecASR: the draft's encoder + drafting + verification.
Feature extraction is not timed (the log-mel is computed before the clock starts; the placeholders encode a log-mel
of random values); the target encoder's output is shared by the methods.

Placeholder models: ``transformers.WhisperForConditionalGeneration`` built from each model's architecture
(``bench/data/replay/models/whisper-*.json``, written by :func:`record` from the real model), seeded random weights,
float16 on CUDA and float32 on the CPU as :class:`engine.asr.whisper_torch.TorchWhisper` loads the real ones.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import numpy as np

from bench.replay.trace import RecordingLM, ReplayDiverged, ScriptedLM, Tape, TapedTokenizer, new_counters

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "bench" / "data" / "replay" / "models"
TRACE = ROOT / "bench" / "data" / "replay" / "asr.json.gz"
SSD = {"ssd_acc": (0.7, 0.2), "ssd_rtfx": (3.0, 0.1)}  # τ_CTC, τ_SLM (paper Table 1)
SPEC = ("adaptive", "recycling", "tree")
METHODS = ("ar",) + tuple(SSD) + SPEC
ARCH_FILES = {"target": "whisper-base.json", "draft": "whisper-tiny.en.json"}


# ------------------------------------------------------------------------------------------------ models
def architecture(w) -> dict:
    """What a placeholder of the TorchWhisper ``w`` needs: its transformers config and its decoding constants."""
    gc = w.model.generation_config
    return {"config": w.model.config.to_dict(), "multilingual": w.multilingual, "eot": int(w.eot),
            "no_timestamps": int(w.no_timestamps), "suppress": [int(i) for i in w.suppress],
            "suppress_begin": [int(i) for i in w.suppress_begin],
            "suppress_tokens": list(gc.suppress_tokens or []), "begin_suppress_tokens": list(gc.begin_suppress_tokens or [])}


def mask_ids(arch: dict) -> np.ndarray:
    """Tokens Whisper always suppresses in no-timestamps decoding (their filler is kept apart, trace.summarize)."""
    v = int(arch["config"]["vocab_size"])
    return np.union1d(np.asarray(arch["suppress"], np.int64), np.arange(arch["no_timestamps"] + 1, v))


def placeholder_whisper(arch: dict, tape: Tape, prefix: str, device: str = "cpu", seed: int = 0):
    """A :class:`engine.asr.whisper_torch.TorchWhisper` of architecture ``arch`` with seeded random weights
    (float16 on CUDA, float32 on the CPU), its tokenizer answered by ``tape``, and a log-mel of random values."""
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    from engine.asr.whisper_torch import TorchWhisper
    from engine.devices import torch_dtype_name

    torch.manual_seed(seed)
    cfg = WhisperConfig.from_dict(arch["config"])
    dtype = getattr(torch, torch_dtype_name(device, "asr"))
    model = WhisperForConditionalGeneration(cfg).to(dtype).to(device).eval()
    model.generation_config.suppress_tokens = arch["suppress_tokens"]
    model.generation_config.begin_suppress_tokens = arch["begin_suppress_tokens"]
    w = TorchWhisper.__new__(TorchWhisper)
    w.device, w.dtype, w.model = device, dtype, model
    w.multilingual = arch["multilingual"]
    w.eot, w.no_timestamps = arch["eot"], arch["no_timestamps"]
    w.suppress, w.suppress_begin = list(arch["suppress"]), list(arch["suppress_begin"])
    w.fw_tokenizer = TapedTokenizer(None, tape, prefix, {"eot": w.eot, "no_timestamps": w.no_timestamps})
    w.tokenizer = w.fw_tokenizer
    n_mels = cfg.num_mel_bins
    gen = torch.Generator().manual_seed(seed)

    def log_mel(audio, n_frames: int = 3000):
        return torch.randn(1, n_mels, n_frames, generator=gen).to(device, dtype)

    w.log_mel = log_mel
    return w


def _route(w, role: str, wrap, arch: dict):
    """Make ``w.decoder(enc)`` return its decoder wrapped by ``wrap(lm, role)`` (RecordingLM / ScriptedLM)."""
    from engine.asr.whisper_torch import WhisperDecoderLM

    w.decoder = lambda enc: wrap(WhisperDecoderLM(w, enc), role)


# ---------------------------------------------------------------------------------------------- decoding
def _decode(method: str, target, draft, head, enc, item: dict, n_frames_ctc: int) -> dict:
    """One timed decode of ``method`` (the decoding stage as ``bench asr`` times it)."""
    from engine.asr.ctc_self_speculative import SSDDecoder

    t0 = time.perf_counter()
    if method == "ar":
        r = target.greedy(enc, item["prompt"])
        out = {"tokens": r.tokens, "stage": "ar"}
    elif method in SSD:
        tc, ts = SSD[method]
        d = head.draft(enc, n_frames_ctc)  # the CTC head's cost is the method's
        text, ent = (d.text, d.max_entropy) if item.get("ctc") is None else (item["ctc"]["text"], item["ctc"]["max_entropy"])
        r = SSDDecoder(target, tc, ts, rejoin=False).decode(enc, item["prompt"], text, ent)
        out = {"tokens": r.tokens, "stage": r.stage,
               "ctc": {"text": d.text, "max_entropy": float(d.max_entropy), "labels": rle(d.log_probs.argmax(-1))}}
    else:
        from engine.asr.draft_model_speculative import SpecASR

        spec = SpecASR(target, draft)
        n = item["n_samples"]
        r = spec.decode(np.zeros(n, np.float32), enc, item["prompt"], method, draft_prompt=item["draft_prompt"])
        out = {"tokens": r["tokens"], "stage": method}
    out["seconds"] = time.perf_counter() - t0
    return out


def rle(labels) -> list[int]:
    """Run-length code of a frame label sequence: [label, run, label, run, ...]."""
    out: list[int] = []
    for x in np.asarray(labels).tolist():
        if out and out[-2] == x:
            out[-1] += 1
        else:
            out += [int(x), 1]
    return out


def unrle(code: list[int]) -> np.ndarray:
    return np.repeat(np.asarray(code[0::2], np.int64), np.asarray(code[1::2], np.int64))


def _scripted_head(head, labels_of):
    """The CTC head's log-probs rebuilt so that each frame's argmax is the recorded label (``labels_of()``): its
    greedy path, and so the draft text and its cost, are the recorded ones (the placeholder encoder's output is
    noise)."""
    orig = head.log_probs

    def log_probs(encoder_out, n_frames=None):
        lp = orig(encoder_out, n_frames)
        lab = labels_of()
        if lab is not None and len(lab) == len(lp):
            lp[:] = -30.0
            lp[np.arange(len(lab)), lab] = 0.0
        return lp

    head.log_probs = log_probs
    return head


def _inputs(limit: int):
    from bench.asr_bench import default_inputs

    items = default_inputs()
    return items[:limit] if limit else items


# ------------------------------------------------------------------------------------------------ record
def real_model_dirs() -> dict:
    """The installed target (Whisper base) and draft (tiny.en) CTranslate2 folders, checked as the product checks."""
    from engine.config import load_config
    from engine.models import resolve

    cfg = load_config()
    return {"target": resolve("asr_target", cfg, progress=False).path,
            "draft": resolve("asr_draft", cfg, progress=False).path}


def record(limit: int = 0, model_dirs: dict | None = None) -> dict:
    """Real weights on the CPU: every method on the held-out utterances (bench asr's inputs), every decoder call
    recorded. Returns the trace (module docstring)."""
    from audio.io import load_audio
    from engine.asr.ctc_draft import CTCHead
    from engine.asr.whisper_torch import TorchWhisper
    from engine.asr.window import WindowPolicy
    dirs = model_dirs or real_model_dirs()
    tape = Tape(recording=True)
    ws = {r: TorchWhisper(d, device="cpu") for r, d in dirs.items()}
    arch = {r: architecture(w) for r, w in ws.items()}
    prompts = {r: w.prompt() for r, w in ws.items()}
    masks = {r: mask_ids(a) for r, a in arch.items()}
    for r, w in ws.items():
        w.fw_tokenizer = TapedTokenizer(w.fw_tokenizer, tape, r, {})
        w.tokenizer = TapedTokenizer(w.tokenizer, tape, r + ".raw", {})
    streams: dict = {}
    for r, w in ws.items():
        _route(w, r, lambda lm, role: RecordingLM(lm, streams.setdefault(role, []), masks[role]), arch[r])
    head = CTCHead()
    window = WindowPolicy()
    items = []
    for path, ref in _inputs(limit):
        audio = load_audio(path)
        n_frames = window.n_frames(len(audio))
        enc = ws["target"].encode(audio, n_frames)
        item = {"file": path.name, "ref": ref, "n_samples": len(audio), "n_frames": n_frames,
                "path": str(path.resolve().relative_to(ROOT)), "prompt": prompts["target"],
                "draft_prompt": prompts["draft"], "ctc": None, "m": {}}
        ctc_frames = int(np.ceil(len(audio) / 320))
        for m in METHODS:
            streams.clear()
            if m in SPEC:  # the draft encodes the same audio in its own window
                ws["draft"].encode = _encode_as(ws["draft"], audio, n_frames)
            r = _decode(m, ws["target"], ws["draft"], head, enc, item, ctc_frames)
            if m in SSD and item["ctc"] is None:
                item["ctc"] = r["ctc"]
            item["m"][m] = {"tokens": r["tokens"], "stage": r["stage"], "calls": {k: list(v) for k, v in streams.items()}}
        items.append(item)
        print(f"recorded {path.name}: " + " ".join(f"{m}:{len(v['tokens'])}t" for m, v in item["m"].items()), flush=True)
    return {"family": "asr", "methods": list(METHODS), "baseline": "ar", "arch": arch, "tape": tape.entries,
            "items": items, "recorded_on": "cpu, float32, real weights (Whisper base + CTC head, tiny.en draft)"}


def _encode_as(w, audio, n_frames):
    """``w.encode`` for SpecASR's draft: this audio in this window (SpecASR.decode passes the audio it is given)."""
    orig = type(w).encode

    def enc(_audio, n=None):
        return orig(w, audio, n_frames)

    return enc


# ------------------------------------------------------------------------------------------- replay, real
class _Models:
    """One set of models for a run: the real weights, or placeholders whose decoders replay the trace."""

    def __init__(self, trace: dict, device: str, weights: str, model_dirs: dict | None = None):
        from engine.asr.ctc_draft import CTCHead

        self.weights, self.device = weights, device
        self.labels = None
        if weights == "placeholder":
            tape = Tape(trace["tape"])
            self.ws = {r: placeholder_whisper(trace["arch"][r], tape, r, device) for r in ARCH_FILES}
            for r, w in self.ws.items():  # the raw tokenizer's decode was taped under "<role>.raw"
                w.tokenizer = TapedTokenizer(None, tape, r + ".raw", {})
            masks = {r: mask_ids(trace["arch"][r]) for r in ARCH_FILES}
            for r, w in self.ws.items():
                _route(w, r, lambda lm, role: ScriptedLM(lm, self.calls[role], masks[role],
                                                        counters=self.counters[role]), trace["arch"][r])
        else:
            from engine.asr.whisper_torch import TorchWhisper

            dirs = model_dirs or real_model_dirs()
            self.ws = {r: TorchWhisper(d, device=device) for r, d in dirs.items()}
        self.head = CTCHead(device=device)
        if weights == "placeholder":
            _scripted_head(self.head, lambda: self.labels)
        self.calls: dict = {}
        self.counters: dict = {}

    def audio(self, item: dict) -> np.ndarray:
        if self.weights == "real":  # the real weights hear the real audio (the placeholders a log-mel of random values)
            from audio.io import load_audio

            return load_audio(ROOT / item["path"])
        return np.zeros(item["n_samples"], np.float32)

    def decode(self, item: dict, m: str, audio: np.ndarray, enc) -> tuple[dict | None, dict]:
        """One timed decode of method ``m``: (result or None where the replay diverged, the role counters)."""
        import torch

        rec = item["m"][m]
        ctc = item.get("ctc") or {}
        self.labels = unrle(ctc["labels"]) if ctc.get("labels") else None
        self.calls = {r: rec["calls"].get(r, []) for r in ARCH_FILES}
        self.counters = {r: new_counters() for r in ARCH_FILES}
        d = self.ws["draft"]
        if m in SPEC:  # the draft's log-mel is computed before the clock starts (feature extraction is not timed)
            mel = d.log_mel(audio, item["n_frames"])
            own = d.__dict__.get("log_mel")
            d.log_mel = lambda *_a, **_k: mel
            d.encode = _encode_as(d, audio, item["n_frames"])
        if self.device == "cuda":
            torch.cuda.synchronize()
        try:
            r = _decode(m, self.ws["target"], d, self.head, enc, item, int(np.ceil(item["n_samples"] / 320)))
        except ReplayDiverged as e:
            print(f"{item['file']} {m}: replay diverged ({e})", flush=True)
            return None, self.counters
        finally:
            if m in SPEC:
                if own is None:
                    del d.log_mel
                else:
                    d.log_mel = own
        return r, self.counters


def _run(trace: dict, device: str, kinds=("placeholder",), limit: int = 0, repeats: int = 1,
         model_dirs: dict | None = None) -> dict:
    """Every method on every item with each set of weights in ``kinds``, taking turns item by item and method by
    method (so load changes hit every configuration alike). Returns {kind: result} (module docstring)."""
    items = trace["items"][:limit] if limit else trace["items"]
    sets = {k: _Models(trace, device, k, model_dirs) for k in kinds}
    res = {k: {m: {"seconds": 0.0, "items": 0, "exact": 0, "overhead_s": 0.0, "target_passes": 0, "draft_passes": 0}
               for m in METHODS} for k in kinds}
    order = [items[0]] * (1 if items else 0) + list(items) * repeats  # the first decode of each method warms up
    for k_item, item in enumerate(order):
        prepared = {}
        for k, ms in sets.items():
            audio = ms.audio(item)
            prepared[k] = (audio, ms.ws["target"].encode(audio, item["n_frames"]))
        # the two sets take turns, and which goes first alternates item by item: a decode right after the other
        # set's finds the caches holding the other's weights (a measurable share of a 10 ms CTC-only decode)
        turn = list(sets.items()) if k_item % 2 else list(sets.items())[::-1]
        for m in METHODS:
            rec = item["m"][m]
            for k, ms in turn:
                r, c = ms.decode(item, m, *prepared[k])
                if r is None or k_item == 0:
                    continue
                over = sum(x["overhead_s"] for x in c.values())
                s = res[k][m]
                s["seconds"] += r["seconds"] - over
                s["overhead_s"] += over
                s["items"] += 1
                replayed = k == "placeholder"
                s["target_passes"] += c["target"]["calls"] if replayed else len(rec["calls"].get("target", []))
                s["draft_passes"] += c["draft"]["calls"] if replayed else len(rec["calls"].get("draft", []))
                ok = r["tokens"] == rec["tokens"] and not (replayed and any(x["diverged"] for x in c.values()))
                s["exact"] += int(ok)
    out = {}
    for k in kinds:
        base = res[k]["ar"]["seconds"]
        for s in res[k].values():
            s["seconds"] = round(s["seconds"], 4)
            s["overhead_s"] = round(s["overhead_s"], 4)
        out[k] = {"family": "asr", "device": device, "weights": k, "replayed": k == "placeholder",
                  "model": "whisper-base (torch decoder) + CTC head; SpecASR draft whisper-tiny.en", "baseline": "ar",
                  "repeats": repeats, "audio_s": round(sum(i["n_samples"] for i in items) / 16000 * repeats, 2),
                  "methods": res[k],
                  "speedups": {m: round(base / s["seconds"], 3) if s["seconds"] > 0 else None for m, s in res[k].items()}}
    return out


def replay(trace: dict, device: str = "cpu", limit: int = 0, repeats: int = 1) -> dict:
    """Placeholder weights on ``device``, every decision from ``trace`` (module docstring). JSON-ready result."""
    return _run(trace, device, ("placeholder",), limit, repeats)["placeholder"]


def real(trace: dict, device: str = "cpu", limit: int = 0, repeats: int = 1, model_dirs: dict | None = None) -> dict:
    """The real weights on ``device``, timed as :func:`replay` times (``exact``: produced the recorded tokens)."""
    return _run(trace, device, ("real",), limit, repeats, model_dirs)["real"]


def validate(trace: dict, device: str = "cpu", limit: int = 0, repeats: int = 1) -> tuple[dict, dict]:
    """(replayed, real): both in one run, taking turns decode by decode."""
    r = _run(trace, device, ("real", "placeholder"), limit, repeats)
    return r["placeholder"], r["real"]


# ---------------------------------------------------------------------------------------------------- io
def save(trace: dict, path: Path) -> None:
    """The trace as gzip JSON at ``path``; the architectures also as JSON under bench/data/replay/models/."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(trace, f, separators=(",", ":"))
    MODELS.mkdir(parents=True, exist_ok=True)
    for r, name in ARCH_FILES.items():
        (MODELS / name).write_text(json.dumps(trace["arch"][r], indent=1) + "\n")


def load(path: Path = TRACE) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.replay.asr", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--limit", type=int, default=0)
    r.add_argument("--out", default=str(TRACE))
    for name in ("replay", "validate"):
        p = sub.add_parser(name)
        p.add_argument("--trace", default=str(TRACE))
        p.add_argument("--device", default="cpu")
        p.add_argument("--limit", type=int, default=0)
        p.add_argument("--repeats", type=int, default=1)
        p.add_argument("--out")
    a = ap.parse_args(argv)
    if a.cmd == "record":
        t = record(a.limit)
        save(t, Path(a.out))
        print(f"wrote {a.out} ({Path(a.out).stat().st_size} bytes)")
        return 0
    t = load(Path(a.trace))
    if a.cmd == "validate":
        rep, re_ = validate(t, a.device, a.limit, a.repeats)
        out = {"replayed": rep, "real": re_}
    else:
        out = {"replayed": replay(t, a.device, a.limit, a.repeats)}
    print(json.dumps({k: v["speedups"] for k, v in out.items()}, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
