"""Streaming ASR benchmark: every method on the live path (file played in real time → VAD → LocalAgreement-2
streaming ASR), the same files, one run.

Each file is played through exactly what ``specvoice transcribe`` runs: ``Runtime.transcriber(FileSource(path,
block_s, realtime=True), emit).run()`` (the backend is wrapped in a thin proxy that records each decode's backend
stats; nothing else changes). Methods are configuration overrides (``--methods``): ``ar``, ``ssd``, ``specasr``
(length-scaled encoder window, the default) and ``ar_padded``, ``ssd_padded`` (the 30 s window, the baseline);
``ar_piece20``/``ar_piece10`` = a trimmed utterance's final from a decode of the whole utterance (``asr.final_piece_s``)
instead of the words that left the buffer + the buffer's latest decode; ``ar_trim_committed`` = the words that leave
a trimmed buffer keep LocalAgreement-2's committed text (``asr.trim_latest=false``).
Models load once per distinct model configuration; each method has its own backend, warmed up before timing.

Metrics, per file × method and pooled per method:
    * compute ratio = ASR compute seconds / audio seconds (``TranscriberStats``; every update and final decode,
      the second pass's decodes, the 1 s of trailing silence FileSource appends included), split into
      ``live_compute_ratio`` (the updates and finals) and ``second_pass_compute_ratio`` (``asr.revise_max_s``: the
      decodes that revise finished speech while the process is idle); encoder / decoder seconds summed over the
      backend stats of every decode: ``encoder_s`` = ``encode_s`` (+ SpecASR's ``draft_encode_s``), ``decoder_s`` =
      ``decode_s`` + ``ctc_s`` (the draft counts: CTC head for SSD; SpecASR's draft decoder, its draft encoder
      excluded), ``align_s`` = word alignment.
    * final latency = ``UtteranceRecord.final_wall − eos_wall`` (end of speech audio available → final text),
      p50 / p90 / max over utterances. Utterances cut by the 60 s run-on limit count with their forced end.
    * first-partial latency = wall time of the utterance's first PartialTranscript with non-empty text − the wall
      time at which its speech onset was played (run start + the VAD's speech-start time ``t_start``, which
      includes the VAD's ``speech_pad_s`` pre-roll). It includes the VAD's onset decision (``min_speech_s``) and
      the first ``min_chunk_s`` of audio, so its floor is ≈ min_chunk_s. Only meaningful in real time.
    * flicker = normalised erasure NE (SSBD Eq. 3–4 on the ASR's displayed text): per utterance, the displayed
      strings are every PartialTranscript's ``committed + tentative`` text in order, then the final text; words
      are whitespace-separated tokens as displayed (case and punctuation count: "Thursday" → "Thursday." erases
      one word); E(i) = |Y^{i−1}| − |LCP(Y^{i−1}, Y^i)|; NE = Σ E / |final words|, pooled over utterances
      (Σ erasures / Σ final words).
    * WER (jiwer, Whisper's English normaliser) of the stream's final text (every FinalTranscript joined) against
      (a) the offline faster-whisper beam-5 transcript of the same file (Whisper base, ``asr_target``), (b) the
      offline greedy transcript, (c) the reference text when there is one; ``wer_delta_vs_offline_greedy`` =
      WER(stream, beam-5) − WER(offline greedy, beam-5) — what streaming costs against decoding the whole file
      greedily (and the same against the reference). Pooled WERs are corpus-level (Σ errors / Σ reference words)
      over files whose reference is not empty; non-speech files (reference "") get no WER (the offline
      transcripts of silence or music are hallucinations), only words emitted (stream and offline).
    * loops = final utterance texts in which a word n-gram (n = 1..6, lowercase words without punctuation)
      repeats ≥ 3 times in a row, or whose zlib compression ratio exceeds 2.4 (texts ≥ 30 characters);
      ``words_emitted`` = words in the final text (a non-speech file, reference "", should emit none).
    * vs_ar_padded: compute ratio, p90 final latency and total compute relative to ``ar_padded``;
      ``decoder_speedup_vs_ar`` = decoder_s(AR of the same window) / decoder_s(method) and
      ``compute_speedup_vs_ar`` = compute(AR of the same window) / compute(method) (ssd, specasr vs ar;
      ssd_padded vs ar_padded). In real time a faster method also makes more updates (computation-aware policy).

Run: ``specvoice bench asr-stream [FILES...] [--methods ar,ssd,specasr,ar_padded,ssd_padded] [--out JSON]``;
default files: bench/data/stream_speech (make with ``python -m bench.make_speech``) + tests/data/jfk.flac.
``--fast`` plays as fast as the ASR consumes (quick checks only: latencies then mean nothing).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np

from audio.io import SAMPLE_RATE

from bench.inputs import audio_files
from bench.stats import percentiles, rnd as _r
from engine.translate.stream_metrics import erasure  # SSBD Eq. 3: |prev| − |LCP(prev, cur)|
from engine.asr.window import compression_ratio

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = HERE / "data" / "stream_speech"
JFK = ROOT / "tests" / "data" / "jfk.flac"
JFK_REF = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
SR = SAMPLE_RATE  # Hz

METHODS: dict[str, dict] = {
    "ar": {"asr": {"method": "ar"}},
    "ssd": {"asr": {"method": "ssd"}},  # paper Table 1 "high accuracy": τ_CTC 0.7, τ_SLM 0.2 (the defaults)
    "ssd_rtfx": {"asr": {"method": "ssd", "tau_ctc": 3.0, "tau_slm": 0.1}},  # paper Table 1 "high RTFx"
    # accept a draft token only where it is surely the greedy choice (p > 0.5), Eq. 3 off: the output is greedy AR's
    "ssd_lossless": {"asr": {"method": "ssd", "tau_ctc": 0.0, "tau_slm": 0.5}},
    "specasr": {"asr": {"method": "specasr"}},
    "ar_padded": {"asr": {"method": "ar", "encoder_window": "padded"}},
    "ar_w6": {"asr": {"method": "ar", "encoder_min_s": 6.0}},  # scaled, windows down to 6 s
    "ssd_w6": {"asr": {"method": "ssd", "encoder_min_s": 6.0}},
    "ssd_lossless_w6": {"asr": {"method": "ssd", "tau_ctc": 0.0, "tau_slm": 0.5, "encoder_min_s": 6.0}},
    "ar_w20": {"asr": {"method": "ar", "encoder_min_s": 20.0}},  # scaled, windows of at least 20 s
    # whisper_streaming's final rule (LocalAgreement-2 commits + the last tail) instead of the whole-utterance decode
    "ar_la2_final": {"asr": {"method": "ar", "final_full": False}},
    # the previous defaults: ≥ 20 s windows, the previous utterance as acoustic context, LocalAgreement-2 final,
    # no pre-roll before the VAD start
    "ar_before": {"asr": {"method": "ar", "encoder_min_s": 20.0, "context_gap_s": 3.0, "final_full": False,
                          "pre_roll_s": 0.0}},
    "ssd_padded": {"asr": {"method": "ssd", "encoder_window": "padded"}},
    # the buffer of a long utterance trimmed at a committed sentence end past 15 s (the previous default) vs 8 s
    "ar_trim15": {"asr": {"method": "ar", "buffer_trim_s": 15.0}},
    # the decode that gives the final text (at a pause, at the end of speech) with beam search, partials greedy
    "ar_final_beam5": {"asr": {"method": "ar", "final_beam_size": 5}},
    # the decode that gives the final text greedy, as the partials (the default's beam: asr.final_beam_size)
    "ar_final_greedy": {"asr": {"method": "ar", "final_beam_size": 1}},
    # a trimmed utterance's final from one exactly verified decode of the whole utterance, long speech finished in
    # pieces of up to 20 s (10 s) while it is spoken, instead of the words that left the buffer + its latest decode
    "ar_piece20": {"asr": {"method": "ar", "final_piece_s": 20.0}},
    "ar_piece10": {"asr": {"method": "ar", "final_piece_s": 10.0}},
    # the words that leave a trimmed buffer keep LocalAgreement-2's committed text, not the latest decode's
    "ar_trim_committed": {"asr": {"method": "ar", "trim_latest": False}},
    # a trimmed buffer starts at its cut, without the audio of the words before it
    "ar_no_overlap": {"asr": {"method": "ar", "trim_overlap_s": 0.0}},
    # the acoustic context's text forced as the prefix of the decodes that hear its audio, not dropped by time
    "ar_context_prefix": {"asr": {"method": "ar", "context_prefix": True}},
    # the second pass decodes its windows as the live decoder does (no timestamp tokens, the text as a draft)
    "ar_revise_no_timestamps": {"asr": {"method": "ar", "revise_timestamps": False}},
    # a second-pass window cut by its length gets 4 s of acoustic context from the previous one (8 s)
    "ar_revise_context4": {"asr": {"method": "ar", "revise_context_s": 4.0}},
    # the final decodes tell new words from committed ones by time and n-gram alone (asr.align_final off)
    "ar_align_time": {"asr": {"method": "ar", "align_final": False}},
    # a final that opens with the acoustic context's words is kept as decoded (the rule before asr.context_repeat_words)
    "ar_context_repeat_off": {"asr": {"method": "ar", "context_repeat_words": 0}},
    # the second pass decodes chains of utterances a pause completes, not the stream's offline 30 s windows
    "ar_revise_chains": {"asr": {"method": "ar", "revise_mode": "chains"}},
    # an update waits for 1 s (1.5 s) of new audio, not 1.25 s: more (fewer) re-decodes of the growing buffer
    "ar_chunk100": {"asr": {"method": "ar", "min_chunk_s": 1.0}},
    "ar_chunk150": {"asr": {"method": "ar", "min_chunk_s": 1.5}},
    # a streaming update's decode that fails the guards is redone on the padded window too, not only the final's
    "ar_partial_retry": {"asr": {"method": "ar", "partial_retry": True}},
    # an update due while its audio ends in a silence inside speech runs at once, not after the pause's decode
    "ar_no_hold": {"asr": {"method": "ar", "hold_at_silence": False}},
    # an update waits only in a silence its audio ends in, and one running when the VAD hears a silence goes on
    "ar_no_yield": {"asr": {"method": "ar", "yield_to_pause": False}},
    # the final text's decode that fails the guards is redone on the padded 30 s window
    "ar_final_retry": {"asr": {"method": "ar", "final_retry": True}},
    # each utterance's language identified (asr.language=auto) instead of fixed: what detecting the language costs
    # English speech
    "ar_language_auto": {"asr": {"method": "ar", "language": "auto"}},
    # the update policy before the four changes above: an update per 1 s, every failed decode redone on the padded
    # window, no hold in a silence
    "ar_chunk100_retry_all": {"asr": {"method": "ar", "min_chunk_s": 1.0, "partial_retry": True, "final_retry": True,
                                      "hold_at_silence": False}},
}
DEFAULT_METHODS = ["ar", "ar_final_beam5", "ar_piece20", "ar_trim_committed", "ar_no_overlap", "ssd",
                   "ssd_lossless", "specasr", "ar_padded"]
BASELINE = "ar_padded"
# the AR baseline with the same encoder window
AR_OF = {
    "ar_no_overlap": "ar", "ar_context_prefix": "ar", "ar_revise_no_timestamps": "ar", "ar_revise_context4": "ar",
    "ar_align_time": "ar", "ar_context_repeat_off": "ar", "ar_revise_chains": "ar", "ar_chunk100": "ar",
    "ar_chunk150": "ar",
    "ar_partial_retry": "ar", "ar_no_hold": "ar", "ar_no_yield": "ar", "ar_final_retry": "ar",
    "ar_chunk100_retry_all": "ar", "ar_language_auto": "ar",
    "ar_trim15": "ar", "ar_final_beam5": "ar", "ar_final_greedy": "ar", "ar_w20": "ar", "ar_before": "ar",
    "ar_w6": "ar", "ssd_w6": "ar_w6",
    "ssd_lossless_w6": "ar_w6", "ar_la2_final": "ar", "ar_piece20": "ar", "ar_piece10": "ar",
    "ar_trim_committed": "ar", "ssd": "ar", "ssd_rtfx": "ar", "ssd_lossless": "ar", "specasr": "ar",
    "ssd_padded": "ar_padded"
}


# --------------------------------------------------------------------------------------------------------- metrics
def loop_words(text: str) -> list[str]:
    """Lowercase words without punctuation (for repetition detection)."""
    return re.findall(r"[a-z0-9']+", text.lower())


def repeated_ngram(words: list[str], max_n: int = 6, min_repeats: int = 3,
                   min_span: int = 6) -> tuple[int, int] | None:
    """(n, start) of the first word n-gram (1 ≤ n ≤ ``max_n``) repeated ≥ ``min_repeats`` times in a row over at
    least ``min_span`` words, or None — the decode guard's rule (``engine.asr.window.loop_start`` on words):
    "no, no, no" or "the N, N, N2" is speech, "yeah yeah yeah yeah yeah yeah" is a loop."""
    for n in range(1, max_n + 1):
        for i in range(len(words) - n * min_repeats + 1):
            g = words[i: i + n]
            r = 1
            while words[i + r * n: i + (r + 1) * n] == g:
                r += 1
            if r >= min_repeats and r * n >= min_span:
                return n, i
    return None


def is_loop(text: str, max_ratio: float = 2.4, min_chars: int = 30) -> bool:
    """A final text that loops: a word n-gram (n = 1..6) repeated ≥ 3 times consecutively over ≥ 6 words, or a compression
    ratio above ``max_ratio`` for texts of at least ``min_chars`` characters."""
    if repeated_ngram(loop_words(text)) is not None:
        return True
    return len(text) >= min_chars and compression_ratio(text) > max_ratio


def erasure_counts(displayed: list[str]) -> tuple[int, int]:
    """(Σ erased words over consecutive displayed strings, words of the last (final) string)."""
    seqs = [t.split() for t in displayed]
    if not seqs:
        return 0, 0
    return sum(erasure(a, b) for a, b in zip(seqs, seqs[1:])), len(seqs[-1])


def normalized_erasure(displayed: list[str]) -> float:
    """NE = Σ erased words / words of the final string (the last one); 0 for an empty final with no erasures,
    Σ erased words when the final is empty."""
    erased, n = erasure_counts(displayed)
    return erased / n if n else float(erased)


class WER:
    """jiwer WER with Whisper's English normaliser; None when the normalised reference is empty."""

    def __init__(self):
        import jiwer
        from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

        self.jiwer = jiwer
        self.norm = EnglishTextNormalizer({})

    def pairs(self, refs: list[str], hyps: list[str]) -> tuple[list[str], list[str]]:
        R, H = [], []
        for r, h in zip(refs, hyps):
            nr = self.norm(r or "").strip()
            if nr:
                R.append(nr)
                H.append(self.norm(h or "").strip())
        return R, H

    def wer(self, refs: list[str] | str, hyps: list[str] | str) -> float | None:
        if isinstance(refs, str):
            refs, hyps = [refs], [hyps]
        R, H = self.pairs(refs, hyps)
        return _r(self.jiwer.wer(R, H), 4) if R else None

    def detail(self, ref: str, hyp: str) -> dict | None:
        R, H = self.pairs([ref], [hyp])
        if not R:
            return None
        o = self.jiwer.process_words(R, H)
        return {"wer": _r(o.wer, 4), "sub": o.substitutions, "del": o.deletions, "ins": o.insertions,
                "ref_words": o.hits + o.substitutions + o.deletions}


# --------------------------------------------------------------------------------------------------------- inputs
def default_files() -> list[Path]:
    files = sorted(CORPUS.glob("*.flac")) + sorted((CORPUS / "nonspeech").glob("*.flac"))
    if not files:
        print(f"asr-stream: no corpus in {CORPUS} (run: python -m bench.make_speech); using jfk.flac only",
              file=sys.stderr)
    return files + [JFK]


def reference_for(p: Path, refs: dict[str, str]) -> str | None:
    """--refs entry (by name or path), else refs.json next to the file, else a .txt next to it, else jfk's."""
    for k in (p.name, str(p)):
        if k in refs:
            return refs[k]
    rj = p.parent / "refs.json"
    if rj.exists():
        try:
            local = json.loads(rj.read_text())
        except (OSError, ValueError):
            local = {}
        if p.name in local:
            return local[p.name]
    if p.with_suffix(".txt").exists():
        return p.with_suffix(".txt").read_text().strip()
    if p.resolve() == JFK.resolve():
        return JFK_REF
    return None


def _rel(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


# --------------------------------------------------------------------------------------------------------- running
class RecordingBackend:
    """The ASR backend with every decode's stats recorded: the same ``name``, ``transcribe`` and, where the backend
    has one, ``transcribe_final``, with the same signatures."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.records: list[dict] = []
        # the same signatures as the inner methods (the transcriber passes draft, language and prefix where taken)
        self.transcribe = self._recording(inner.transcribe)
        final = getattr(inner, "transcribe_final", None)
        if final is not None:
            self.transcribe_final = self._recording(final)

    def _recording(self, fn):
        @functools.wraps(fn)
        def decode(audio, prompt="", **kw):
            return self._record(fn, audio, prompt, **kw)

        return decode

    def _record(self, fn, audio, prompt: str, **kw):
        t0 = time.perf_counter()
        res = fn(audio, prompt, **kw)
        rec = {"audio_s": len(audio) / SR, "wall_s": time.perf_counter() - t0}
        rec.update(res.stats)
        self.records.append(rec)
        return res

    def __getattr__(self, k):
        return getattr(self.inner, k)


def cpu_model(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The CPU's model name (``model name`` in /proc/cpuinfo; the timings depend on it), "" where unknown."""
    try:
        for line in Path(cpuinfo).read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def machine() -> dict:
    """The machine a benchmark ran on, for its JSON: CPU count and model, platform, processor, Python version."""
    return {"cpu_count": os.cpu_count(), "cpu_model": cpu_model(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "python": platform.python_version()}


def method_config(base, name: str):
    from engine.config import validate

    cfg = base.with_overrides(METHODS[name])
    validate(cfg)
    return cfg


def model_key(cfg) -> str:
    """Configurations that may share one Runtime (loaded models): everything but the ASR method."""
    d = cfg.as_dict()
    d["asr"] = {k: v for k, v in d["asr"].items() if k != "method"}
    return json.dumps(d, sort_keys=True)


MEAN_KEYS = ("avg_logprob", "no_speech_prob", "max_entropy")  # per-decode values: averaged, not summed


def sum_stats(records: list[dict]) -> dict:
    """Numeric backend stats summed over decodes (``MEAN_KEYS`` averaged; guard reasons and stages counted)."""
    tot: dict = {"decodes": len(records)}
    reasons: dict = {}
    stages: dict = {}
    for r in records:
        for k, v in r.items():
            if isinstance(v, bool):
                v = int(v)
            if isinstance(v, (int, float)) and k not in MEAN_KEYS:
                tot[k] = tot.get(k, 0) + v
        if r.get("guard"):
            reasons[r["guard"]] = reasons.get(r["guard"], 0) + 1
        if isinstance(r.get("stage"), str):
            stages[r["stage"]] = stages.get(r["stage"], 0) + 1
    for k in MEAN_KEYS:
        vals = [r[k] for r in records if isinstance(r.get(k), (int, float))]
        if vals:
            tot[k + "_mean"] = float(np.mean(vals))
    tot = {k: (_r(v, 4) if isinstance(v, float) else v) for k, v in tot.items()}
    tot["guard_failures"] = reasons
    tot["stages"] = stages
    return tot


def split_times(tot: dict) -> dict:
    enc = tot.get("encode_s", 0.0) + tot.get("draft_encode_s", 0.0)
    dec = tot.get("decode_s", 0.0) - tot.get("draft_encode_s", 0.0) + tot.get("ctc_s", 0.0)
    return {"encoder_s": _r(enc, 4), "decoder_s": _r(dec, 4), "align_s": _r(tot.get("align_s", 0.0), 4)}


def run_stream(rt, cfg, backend, path: Path, realtime: bool) -> dict:
    """Play ``path`` through the live transcriber with ``backend``; returns the raw per-run results (``events``:
    every event the transcriber emitted, in order)."""
    from audio.sources import FileSource
    from engine.core.events import Error, FinalTranscript, PartialTranscript

    events: list = []
    source = FileSource(path, cfg.audio.block_s, realtime=realtime)
    tr = rt.transcriber(source, events.append)
    rec_backend = RecordingBackend(backend)
    tr.backend = rec_backend  # the same transcriber, its decodes recorded
    t0 = time.monotonic()
    st = tr.run()
    wall = time.monotonic() - t0
    partials: dict[int, list] = {}
    finals: dict[int, str] = {}
    errors = []
    for ev in events:
        if isinstance(ev, PartialTranscript):
            partials.setdefault(ev.utterance, []).append(ev)
        elif isinstance(ev, FinalTranscript):
            finals[ev.utterance] = ev.text
        elif isinstance(ev, Error):
            errors.append(f"{ev.where}: {ev.message}")
    return {"stats": st, "partials": partials, "finals": finals, "records": rec_backend.records, "wall_s": wall,
            "errors": errors, "transcript": list(tr.transcript), "events": events}


def file_metrics(raw: dict, offline: dict, ref: str | None, W: WER) -> dict:
    st = raw["stats"]
    utts = []
    final_lat, first_lat = [], []
    erased_total = final_words_total = 0
    loops = []
    for u in st.utterances:
        parts = raw["partials"].get(u.index, [])
        final = raw["finals"].get(u.index, u.text)
        shown = [p.text for p in parts] + [final]
        erased, nfin = erasure_counts(shown)
        erased_total += erased
        final_words_total += nfin
        lat = (u.final_wall - u.eos_wall) if u.final_wall is not None and u.eos_wall is not None else None
        first = next((p.wall for p in parts if p.text), None)
        fp = (first - (st.started_wall + u.t_start)) if first is not None else None
        if lat is not None:
            final_lat.append(lat)
        if fp is not None:
            first_lat.append(fp)
        loop = bool(final) and is_loop(final)
        if loop:
            loops.append({"t_start": _r(u.t_start, 2), "t_end": _r(u.t_end, 2), "text": final[:300]})
        utts.append({"index": u.index, "t_start": _r(u.t_start, 2), "t_end": _r(u.t_end, 2), "text": final,
                     "final_latency_s": _r(lat), "first_partial_s": _r(fp), "updates": u.updates,
                     "compute_s": _r(u.asr_compute_s), "partials": len(parts), "erased_words": erased,
                     "loop": loop})
    hyp = " ".join(t for t in raw["transcript"] if t)
    tot = sum_stats(raw["records"])
    out = {
        "audio_s": _r(st.audio_s, 2), "asr_compute_s": _r(st.asr_compute_s), "updates": st.updates,
        "updates_abandoned": st.updates_abandoned,  # asr.yield_to_pause: stopped after their encoder pass
        "compute_ratio": _r(st.asr_compute_s / st.audio_s if st.audio_s else 0.0, 4),
        # the second pass's decodes (asr.revise_max_s; run while the process is idle), counted in asr_compute_s
        "second_pass_compute_s": _r(st.revise_compute_s),
        **split_times(tot),
        "final_latency_s": percentiles(final_lat), "first_partial_s": percentiles(first_lat),
        "utterances": len(st.utterances),
        "utterances_without_partial": sum(1 for u in utts if u["first_partial_s"] is None),
        "ne": _r(erased_total / final_words_total if final_words_total else float(erased_total), 4),
        "erased_words": erased_total, "final_words": final_words_total,
        # non-speech (reference ""): Whisper's offline hallucinations are no reference; words_emitted counts
        "wer_vs_beam5": None if ref == "" else W.wer(offline["beam5"], hyp),
        "wer_vs_greedy": None if ref == "" else W.wer(offline["greedy"], hyp),
        "vs_beam5": None if ref == "" else W.detail(offline["beam5"], hyp),
        "wer_vs_ref": W.wer(ref, hyp) if ref is not None else None,
        "loops": len(loops), "loop_texts": loops, "words_emitted": len(hyp.split()),
        "text": hyp, "wall_s": _r(raw["wall_s"], 2), "errors": raw["errors"],
        "backend_totals": tot, "utterance_detail": utts,
    }
    g = offline.get("greedy_wer_vs_beam5")
    out["wer_delta_vs_offline_greedy"] = (_r(out["wer_vs_beam5"] - g, 4)
                                          if out["wer_vs_beam5"] is not None and g is not None else None)
    gr = offline.get("greedy_wer_vs_ref")
    out["wer_delta_vs_offline_greedy_ref"] = (_r(out["wer_vs_ref"] - gr, 4)
                                              if out["wer_vs_ref"] is not None and gr is not None else None)
    return out


def summarize(name: str, per_file: list[dict], W: WER) -> dict:
    rows = [(f, f["methods"][name]) for f in per_file if "error" not in f["methods"].get(name, {"error": 1})]
    audio = sum(m["audio_s"] for _, m in rows)
    comp = sum(m["asr_compute_s"] for _, m in rows)
    second = sum(m.get("second_pass_compute_s") or 0.0 for _, m in rows)
    lat = [u["final_latency_s"] for _, m in rows for u in m["utterance_detail"] if u["final_latency_s"] is not None]
    fp = [u["first_partial_s"] for _, m in rows for u in m["utterance_detail"] if u["first_partial_s"] is not None]
    erased = sum(m["erased_words"] for _, m in rows)
    fw = sum(m["final_words"] for _, m in rows)
    hyps = [m["text"] for _, m in rows]
    # offline transcripts of non-speech files (reference "") are hallucinations: no reference for the stream
    b5 = [f["offline"]["beam5"] if f["ref"] != "" else "" for f, _ in rows]
    gr = [f["offline"]["greedy"] if f["ref"] != "" else "" for f, _ in rows]
    refs = [f["ref"] if f["ref"] is not None else "" for f, _ in rows]
    s = {
        "files": len(rows), "audio_s": _r(audio, 2), "asr_compute_s": _r(comp), "updates": sum(m["updates"] for _, m in rows),
        "updates_abandoned": sum(m.get("updates_abandoned", 0) for _, m in rows),
        "compute_ratio": _r(comp / audio if audio else 0.0, 4),
        "second_pass_compute_ratio": _r(second / audio if audio else 0.0, 4),
        "live_compute_ratio": _r((comp - second) / audio if audio else 0.0, 4),
        "encoder_s": _r(sum(m["encoder_s"] for _, m in rows)), "decoder_s": _r(sum(m["decoder_s"] for _, m in rows)),
        "align_s": _r(sum(m["align_s"] for _, m in rows)),
        "final_latency_s": percentiles(lat), "first_partial_s": percentiles(fp),
        "ne": _r(erased / fw if fw else float(erased), 4),
        "wer_vs_beam5": W.wer(b5, hyps), "wer_vs_greedy": W.wer(gr, hyps),
        "offline_greedy_wer_vs_beam5": W.wer(b5, gr),
        "offline_nonspeech_words": {"beam5": sum(len(f["offline"]["beam5"].split()) for f, _ in rows if f["ref"] == ""),
                                    "greedy": sum(len(f["offline"]["greedy"].split()) for f, _ in rows if f["ref"] == "")},
        "wer_vs_ref": W.wer(refs, hyps), "offline_greedy_wer_vs_ref": W.wer(refs, gr),
        "offline_beam5_wer_vs_ref": W.wer(refs, b5),
        "loops": sum(m["loops"] for _, m in rows),
        "nonspeech_words": sum(m["words_emitted"] for f, m in rows if f["ref"] == ""),
        "nonspeech_files": sum(1 for f, _ in rows if f["ref"] == ""),
        "fallbacks": sum(m["backend_totals"].get("fallback", 0) for _, m in rows),
        "errors": sum(len(m["errors"]) for _, m in rows),
        "failed_files": sum(1 for f in per_file if "error" in f["methods"].get(name, {})),
    }
    for k in ("", "_ref"):
        a, b = s["wer_vs_beam5" if not k else "wer_vs_ref"], s["offline_greedy_wer_vs_beam5" if not k else "offline_greedy_wer_vs_ref"]
        s["wer_delta_vs_offline_greedy" + k] = _r(a - b, 4) if a is not None and b is not None else None
    return s


def add_ratios(summary: dict[str, dict]) -> None:
    base = summary.get(BASELINE)
    for name, s in summary.items():
        if base and name != BASELINE:
            p90, bp90 = s["final_latency_s"]["p90"], base["final_latency_s"]["p90"]
            s["vs_ar_padded"] = {
                "compute_ratio": _r(s["compute_ratio"] / base["compute_ratio"], 3) if base["compute_ratio"] else None,
                "p90_latency_ratio": _r(p90 / bp90, 3) if p90 is not None and bp90 else None,
                "compute_speedup": _r(base["asr_compute_s"] / s["asr_compute_s"], 3) if s["asr_compute_s"] else None,
                "decoder_speedup": _r(base["decoder_s"] / s["decoder_s"], 3) if s["decoder_s"] else None,
            }
        ar = summary.get(AR_OF.get(name, ""))
        if ar:
            s["decoder_speedup_vs_ar"] = _r(ar["decoder_s"] / s["decoder_s"], 3) if s["decoder_s"] else None
            s["compute_speedup_vs_ar"] = _r(ar["asr_compute_s"] / s["asr_compute_s"], 3) if s["asr_compute_s"] else None
            s["ar_baseline"] = AR_OF[name]


def _fmt(x, nd=2):
    if x is None:
        return "-"
    return f"{x:.{nd}f}" if isinstance(x, float) else str(x)


def print_tables(per_file: list[dict], summary: dict[str, dict], headline: str) -> None:
    key = "wer_vs_beam5" if headline == "beam5" else "wer_vs_ref"
    print(f"\nper file (WER vs {headline}, compute ratio, final latency p90 s, NE, loops / words on non-speech)")
    methods = list(summary)
    print(f"{'file':34s} " + " ".join(f"{m:>24s}" for m in methods))
    for f in per_file:
        cells = []
        for m in methods:
            x = f["methods"].get(m)
            if x is None or "error" in x:
                cells.append(f"{'' if x is None else 'FAILED':>24s}")
                continue
            extra = f"w{x['words_emitted']}" if f["ref"] == "" else f"L{x['loops']}"
            cells.append(f"{_fmt(x[key], 3):>5s} {_fmt(x['compute_ratio'], 2):>5s} "
                         f"{_fmt(x['final_latency_s']['p90'], 2):>5s} {_fmt(x['ne'], 2):>4s} {extra:>3s}")
        print(f"{Path(f['file']).name[:34]:34s} " + " ".join(cells))
    print("\nper method")
    hdr = (f"{'method':11s} {'ratio':>6s} {'enc s':>7s} {'dec s':>7s} {'lat50':>6s} {'lat90':>6s} {'latmx':>6s} "
           f"{'1stP50':>6s} {'NE':>5s} {'WERb5':>6s} {'WERgr':>6s} {'dGrdy':>6s} {'WERref':>6s} {'loops':>5s} "
           f"{'nsW':>4s} {'xcomp':>6s} {'xp90':>6s} {'decSU':>6s} {'e2eSU':>6s}")
    print(hdr)
    for m, s in summary.items():
        v = s.get("vs_ar_padded", {})
        print(f"{m:11s} {_fmt(s['compute_ratio'], 3):>6s} {_fmt(s['encoder_s'], 1):>7s} {_fmt(s['decoder_s'], 1):>7s} "
              f"{_fmt(s['final_latency_s']['p50']):>6s} {_fmt(s['final_latency_s']['p90']):>6s} "
              f"{_fmt(s['final_latency_s']['max']):>6s} {_fmt(s['first_partial_s']['p50']):>6s} "
              f"{_fmt(s['ne'], 3):>5s} {_fmt(s['wer_vs_beam5'], 3):>6s} {_fmt(s['wer_vs_greedy'], 3):>6s} "
              f"{_fmt(s['wer_delta_vs_offline_greedy'], 3):>6s} {_fmt(s['wer_vs_ref'], 3):>6s} {s['loops']:>5d} "
              f"{s['nonspeech_words']:>4d} {_fmt(v.get('compute_ratio')):>6s} {_fmt(v.get('p90_latency_ratio')):>6s} "
              f"{_fmt(s.get('decoder_speedup_vs_ar')):>6s} {_fmt(s.get('compute_speedup_vs_ar')):>6s}")
    print("ratio = ASR compute / audio; lat = end of speech → final (s); 1stP50 = speech onset → first partial "
          "(s); dGrdy = WERb5 − offline greedy's WERb5; nsW = words on non-speech files; xcomp/xp90 = vs "
          "ar_padded; decSU/e2eSU = decoder / compute speed-up vs AR with the same window")


# ------------------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specvoice bench asr-stream", description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="audio files (any format/rate/channels), folders of WAV/FLAC files, or "
                    "patterns (default: bench/data/stream_speech + tests/data/jfk.flac)")
    ap.add_argument("--refs", help="JSON {file name or path: reference text} (default: refs.json next to each file)")
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS), help=f"comma list of {', '.join(METHODS)}")
    ap.add_argument("--out", default=str(HERE / "results" / "asr_stream.json"))
    ap.add_argument("--fast", action="store_true", help="no real-time pacing (quick checks; latencies meaningless)")
    ap.add_argument("--offline-ref", choices=["beam5", "refs"], default="beam5",
                    help="which reference the table's headline WER uses (all are in the JSON)")
    ap.add_argument("--config", help="TOML config file (as specvoice --config)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="base configuration override applied before each method's (repeatable)")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)

    from bench.input_audio import decode_all
    from engine.config import ConfigError, load_config
    from engine.runtime import Runtime
    from engine.asr.faster_whisper_backend import FasterWhisperBackend

    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        print(f"asr-stream: unknown method(s) {bad}; choose from {', '.join(METHODS)}", file=sys.stderr)
        return 2
    try:
        base = load_config(a.config, sets=a.set)
        cfgs = {m: method_config(base, m) for m in methods}
    except ConfigError as e:
        print(f"asr-stream: {e}", file=sys.stderr)
        return 2
    refs_in = json.loads(Path(a.refs).read_text()) if a.refs else {}
    try:
        files = audio_files(a.files, "asr-stream") if a.files else default_files()
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    log = (lambda *x: None) if a.quiet else (lambda *x: print(*x, file=sys.stderr, flush=True))
    t_run = time.monotonic()

    audio = decode_all({p: p for p in files}, "asr-stream")
    if audio is None:
        return 2

    # one Runtime per model configuration, one warmed-up backend per method
    runtimes: dict[str, Runtime] = {}
    backends: dict[str, object] = {}
    load_s: dict[str, float] = {}
    warm = (np.random.default_rng(0).standard_normal(2 * SR) * 0.01).astype(np.float32)
    for m in methods:
        t0 = time.perf_counter()
        rt = runtimes.setdefault(model_key(cfgs[m]), Runtime(cfgs[m], progress=not a.quiet))
        rt.cfg = cfgs[m]  # same models; this method's settings for the backend and the transcriber
        backends[m] = rt.asr_backend()
        sample = audio[files[0]][: 3 * SR] if len(audio[files[0]]) >= SR else warm
        backends[m].transcribe(sample, "")
        load_s[m] = _r(time.perf_counter() - t0)
        log(f"asr-stream: {m} ready ({backends[m].name}, {load_s[m]} s load + warm-up)")
    rt0 = next(iter(runtimes.values()))
    fw = FasterWhisperBackend(rt0.model(base.asr.model_role).path, device=base.asr.device,
                              compute_type=base.asr.compute_type, cpu_threads=base.asr.cpu_threads,
                              language=base.asr.language, beam_size=5)
    W = WER()

    per_file = []
    for p in files:
        ref = reference_for(p, refs_in)
        t0 = time.perf_counter()
        fw.beam_size = 5
        b5 = fw.transcribe_text(audio[p])
        fw.beam_size = 1
        gr = fw.transcribe_text(audio[p])
        off = {"beam5": b5, "greedy": gr, "greedy_wer_vs_beam5": W.wer(b5, gr),
               "beam5_wer_vs_ref": W.wer(ref, b5) if ref is not None else None,
               "greedy_wer_vs_ref": W.wer(ref, gr) if ref is not None else None,
               "seconds": _r(time.perf_counter() - t0, 2)}
        entry = {"file": _rel(p), "duration_s": _r(len(audio[p]) / SR, 2), "ref": ref,
                 "nonspeech": ref == "", "offline": off, "methods": {}}
        log(f"asr-stream: {p.name} ({entry['duration_s']} s): offline refs in {off['seconds']} s")
        for m in methods:
            rt = runtimes[model_key(cfgs[m])]
            rt.cfg = cfgs[m]
            try:
                raw = run_stream(rt, cfgs[m], backends[m], p, realtime=not a.fast)
                res = file_metrics(raw, off, ref, W)
            except Exception as e:  # one broken cell must not lose a long real-time run
                import traceback

                entry["methods"][m] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
                log(f"asr-stream:   {m:10s} FAILED: {type(e).__name__}: {e}")
                continue
            entry["methods"][m] = res
            log(f"asr-stream:   {m:10s} ratio {res['compute_ratio']:.3f}  WER b5 {_fmt(res['wer_vs_beam5'], 3)}  "
                f"lat p90 {_fmt(res['final_latency_s']['p90'])} s  loops {res['loops']}  words {res['words_emitted']}"
                + (f"  errors {res['errors']}" if res["errors"] else ""))
        per_file.append(entry)
        report = build_report(a, methods, cfgs, base, per_file, W, rt0, load_s, t_run, complete=False)
        write_json(Path(a.out), report)  # after every file: an interrupted run keeps what it measured

    report = build_report(a, methods, cfgs, base, per_file, W, rt0, load_s, t_run, complete=True)
    out = Path(a.out)
    write_json(out, report)
    print_tables(per_file, report["per_method"], a.offline_ref)
    print(f"\n{len(files)} files × {len(methods)} methods, {'real time' if not a.fast else 'fast (not real time)'}, "
          f"{report['config']['wall_s']} s → {out}")
    return 0


def write_json(out: Path, report: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    tmp.replace(out)


def build_report(a, methods, cfgs, base, per_file, W, rt0, load_s, t_run, complete: bool) -> dict:
    import ctranslate2
    import faster_whisper
    import torch

    summary = {m: summarize(m, per_file, W) for m in methods}
    add_ratios(summary)
    return {
        "config": {
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - (time.monotonic() - t_run))),
            "complete": complete, "realtime": not a.fast, "methods": methods,
            "method_overrides": {m: METHODS[m] for m in methods}, "headline_wer": a.offline_ref,
            "machine": machine(),
            "versions": {"torch": torch.__version__, "ctranslate2": ctranslate2.__version__,
                         "faster_whisper": faster_whisper.__version__},
            "settings": {m: {"asr": dataclasses.asdict(cfgs[m].asr)} for m in methods},
            "vad": dataclasses.asdict(base.vad), "audio": dataclasses.asdict(base.audio),
            "models": rt0.describe(), "load_and_warmup_s": load_s,
            "offline_reference": {"model_role": base.asr.model_role, "beam5": "faster-whisper beam_size=5",
                                  "greedy": "faster-whisper beam_size=1"},
            "wall_s": _r(time.monotonic() - t_run, 1),
        },
        "per_method": summary,
        "per_file": per_file,
    }


if __name__ == "__main__":
    raise SystemExit(main())
