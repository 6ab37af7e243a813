"""Conversational ASR benchmark: the streaming transcript of conversation, disfluent and noisy, against the text
and against offline Whisper, per file and per condition; language ID and captions into English of French, German
and Spanish speech.

Corpora (``--corpus``, a comma list; default all three):
    * ``conversation``: bench/data/conversation (``python -m bench.make_conversation``): three scripted dialogues
      of 2–4 voices with hesitations, fillers, restarts, backchannels and overlaps, each clean, reverberant, with
      babble at 10 dB SNR and telephone-band. Summaries pooled and per condition.
    * ``real``: bench/data/real_speech (recordings, see its README): jfk, a two-speaker sentence, a telephone call
      (human transcript) and a four-speaker meeting (human words per speaker, no order across speakers: scored
      against offline beam 5 and by the share of human words missed, order-free), pooled over the English files;
      and the English→German read text (``faster_whisper_multilingual.mp3``), reported apart: the stream with
      ``asr.language = "auto"``, the detected language of each utterance against the spoken one (the manifest's
      ``language_spans``: an utterance's language is that of the span holding its midpoint) and WER against
      offline beam 5 decoded span by span in the language Whisper detects on the span (:func:`offline_spans`),
      for the English part, the German part and the whole file; offline greedy the same way.
    * ``langid``: bench/data/conversation/langid: 12 German, French and Spanish utterances each (≥ 2 s). The
      stream with ``asr.language = "auto"``: the detected language of each utterance (accuracy per utterance and
      per language; over every utterance the VAD found, over those with a final text, and over those of at least
      2 s, the issue's bar), next to offline Whisper's detection of the whole file (``WhisperModel.detect_language``);
      then the same clips as one stream of speakers taking turns (:func:`langid_conversation`: each espeak-ng voice
      says its sentences in a row, the speakers round-robin over the languages), where a speaker's earlier
      utterances inform the identification of the next (``conversation`` in the report);
      then (unless ``--no-captions``) each file through the live caption path into English
      (``caption.target_language = "en"``) and chrF (sacrebleu) of the final captions against the Multi30k
      English references (German only: French and Spanish have none offline).
Where the configuration or the ASR backend does not accept ``asr.language = "auto"`` (a one-second decode is tried
first), or transcript events carry no detected language, or captions into English are not accepted, those parts
report ``{"supported": false, "reason": ...}`` and the rest of the run goes on; the multilingual file is then
streamed with the configured language.

Each file is played in real time through exactly what ``specvoice transcribe`` runs (``Runtime.transcriber(
FileSource(...))``, the backend's decodes recorded as in :mod:`bench.asr_stream_bench`), once per method
(``--methods``: ``default`` = the configuration as loaded, or any method of :data:`bench.asr_stream_bench.METHODS`);
offline faster-whisper greedy (temperature 0) and beam 5 (Whisper base, ``asr_target``) decode every file in the
same run. The language-ID corpus runs with the first method only.

Metrics (per file and method, and pooled): the metrics of :func:`bench.asr_stream_bench.file_metrics` and
:func:`bench.asr_stream_bench.summarize` — compute ÷ audio, final latency (end of speech → final text) p50/p90, NE,
WER of the stream's final text against offline beam 5, against offline greedy and against the reference text,
offline greedy's and beam 5's WER against the same, and ``wer_delta_vs_offline_greedy[_ref]`` = stream − offline
greedy — with every text normalised by :func:`bench.conversation_scoring.normalise` (fillers removed from both
sides, then Whisper's English normaliser). A transcript revision (``engine.core.events.RevisedTranscript``:
``texts[i]`` is the new text of utterance ``utterances[i]``) replaces those utterances' final text in
``text_revised``; WERs of the revised text are reported when a run had any. Per file (English corpora):
``revised_vs_offline_greedy`` (the revised text, or the final where nothing was revised, next to offline greedy:
WER vs beam 5 and vs the reference, the order-free error against the meeting's human words — missed plus extra
words ÷ human words — and each difference), and ``repeats``: n-grams of 1–4 normalised words said twice back to back
(a seam decoded twice, a loop) in the final and the revised text, ``beyond_offline`` counting those neither offline
transcript repeats as often (the offline transcripts' own in ``offline.repeats``).
:func:`bench.conversation_scoring.done_when` restates the issue's acceptance figures with the measured values.

Corpora (``--corpus``): ``conversation`` (the generated dialogues), ``real`` (the English real recordings),
``multilingual`` (the real recording that changes language, under ``asr.language=auto``) and ``langid`` (the
French, German and Spanish utterances: language ID and captions into English). ``specvoice bench all`` runs the
first two as the ``conversation`` job and the last two as the ``language`` job (``language.json``).

Run: ``specvoice bench conversation [--corpus conversation,real,multilingual,langid] [--methods default]
[--only NAME ...] [--fast] [--no-captions] [--set SECTION.KEY=VALUE ...] [--out bench/results/conversation.json]``.
``--fast`` plays as fast as the ASR consumes (quick checks only: latencies then mean nothing).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from audio.io import SAMPLE_RATE

from bench.conversation_scoring import (LANGID_MIN_UTTERANCE_S, ConversationWER, accuracy, done_when,
                                       file_repeats, langid_summary, langid_utterances, multilingual_metrics,
                                       spoken_at, summarize_group, words_missed)
from bench.stats import rnd as _r

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CONVERSATION = HERE / "data" / "conversation"
REAL = HERE / "data" / "real_speech"
SR = SAMPLE_RATE  # Hz
CORPORA = ("conversation", "real", "multilingual", "langid")

# --------------------------------------------------------------------------------------------------------- inputs
@dataclasses.dataclass
class Item:
    """One benchmark input."""

    name: str
    path: Path
    corpus: str  # conversation | real | multilingual | langid
    ref: str | None  # reference text (None: none in order)
    group: str = ""  # the condition (conversation), the language (langid) or languages, comma-separated (real)
    meta: dict = dataclasses.field(default_factory=dict)


def _manifest(folder: Path) -> dict:
    p = folder / "manifest.json"
    if not p.exists():
        raise SystemExit(f"conversation: no {p} (run: python -m bench.make_conversation)")
    return json.loads(p.read_text(encoding="utf-8"))


def load_items(corpora: list[str], conversation: Path = CONVERSATION) -> list[Item]:
    """The inputs of ``corpora`` in order, from the manifests of ``conversation`` (default bench/data/conversation;
    another folder written by ``python -m bench.make_conversation --out``) and bench/data/real_speech.

    Raises:
        SystemExit: a manifest is missing.
    """
    items: list[Item] = []
    if "conversation" in corpora:
        m = _manifest(conversation)
        items += [Item(rel, conversation / rel, "conversation", e["reference"], e["condition"], e)
                  for rel, e in m["files"].items()]
    if "real" in corpora or "multilingual" in corpora:  # real: the English recordings; multilingual: the others
        m = _manifest(REAL)
        for name, e in m["files"].items():
            kind = "multilingual" if len(e.get("languages", ["en"])) > 1 else "real"
            if kind in corpora:
                items.append(Item(name, REAL / name, kind, e.get("reference"), ",".join(e.get("languages", ["en"])),
                                  e))
    if "langid" in corpora:
        m = _manifest(conversation)
        items += [Item(rel, conversation / rel, "langid", e["text"], e["language"], e)
                  for rel, e in m["langid"].items()]
    return items


# ------------------------------------------------------------------------------------------------------- running
def play(rt, cfg, backend, path: Path, realtime: bool) -> dict:
    """Play ``path`` through the live transcriber with ``backend`` (:func:`bench.asr_stream_bench.run_stream`, plus
    the detected language of each final transcript and the second pass's revisions). Returns the raw results that
    :func:`bench.asr_stream_bench.file_metrics` takes, with ``languages`` {utterance: ISO 639-1 code, or None where
    the event has none}, ``revisions`` {utterance: latest revised text} and ``event_types`` (Counter of event type
    names)."""
    from bench.asr_stream_bench import run_stream
    from engine.core.events import FinalTranscript, RevisedTranscript

    raw = run_stream(rt, cfg, backend, path, realtime)
    events = raw["events"]
    revisions: dict[int, str] = {}
    for ev in events:
        if isinstance(ev, RevisedTranscript):  # a second pass revised these utterances' text
            revisions.update(zip(ev.utterances, ev.texts))
    return {**raw, "revisions": revisions, "event_types": Counter(type(e).__name__ for e in events),
            "languages": {ev.utterance: ev.language or None for ev in events if isinstance(ev, FinalTranscript)}}


class Offline:
    """Offline faster-whisper transcripts of whole files (Whisper base, the ``asr_target`` role), greedy and beam 5.

    Args:
        model: a ``faster_whisper.WhisperModel``.
    """

    def __init__(self, model):
        self.model = model

    def transcribe(self, audio: np.ndarray, beam_size: int, language: str = "en") -> dict:
        """{"text", "segments": [{"start", "end", "text"}]} of float32 16 kHz ``audio`` decoded in ``language``
        (faster-whisper's defaults otherwise). Greedy (``beam_size`` 1) is temperature 0 alone: the default
        temperature fallback re-decodes a failing window by sampling, which no seed makes repeatable, so a greedy
        reference with it changed from run to run on the real telephone call; beam 5 keeps the fallback (it
        repeats)."""
        kw = {"temperature": 0.0} if beam_size == 1 else {}
        segs, _ = self.model.transcribe(audio, language=language, beam_size=beam_size, vad_filter=False, **kw)
        segs = [{"start": _r(s.start, 2), "end": _r(s.end, 2), "text": s.text.strip()} for s in segs]
        return {"text": " ".join(s["text"] for s in segs).strip(), "segments": segs}

    def detect(self, audio: np.ndarray) -> tuple[str, float]:
        """(language, probability) Whisper detects on the first 30 s of ``audio``."""
        lang, p, _ = self.model.detect_language(audio)
        return lang, _r(p, 4)

    def detect_with_head(self, audio: np.ndarray, weight: float) -> tuple[str, float] | None:
        """(language, probability) of Whisper's identification on the padded 30 s window of the first 30 s of
        ``audio`` combined with the language-ID head's raised to ``weight`` (engine.asr.language_head.fuse;
        ``asr.language_head``); None without a head or with weight 0."""
        from engine.asr.language_head import LanguageIdHead, identify
        from engine.asr.window import log_mel

        if not hasattr(self, "_lid_head"):
            try:
                self._lid_head = LanguageIdHead()
            except FileNotFoundError:
                self._lid_head = None
        if self._lid_head is None or weight <= 0:
            return None
        audio = audio[: 30 * 16000]
        sv = self.model.encode(log_mel(self.model.feature_extractor, audio, 3000))
        lang, p = identify(self.model.model, sv, len(audio), self._lid_head, weight)[0]
        return lang, _r(p, 4)


def method_configs(base, methods: list[str]) -> dict:
    """{method: Config}; ``default`` is ``base`` itself.

    Raises:
        ConfigError: an override gives an invalid configuration.
    """
    from bench.asr_stream_bench import method_config

    return {m: base if m == "default" else method_config(base, m) for m in methods}


def with_auto(cfg):
    """``cfg`` with ``asr.language = "auto"``; (config, None) or (None, reason) where the configuration rejects it."""
    from engine.config import ConfigError, validate

    try:
        c = cfg.with_overrides({"asr": {"language": "auto"}})
        validate(c)
        return c, None
    except (ConfigError, ValueError, TypeError) as e:
        return None, f"configuration: {e}"


def probe_auto(backend, audio: np.ndarray) -> str | None:
    """None when ``backend`` (built with ``asr.language = "auto"``) decodes ``audio`` and transcript events can
    carry a language; else the reason, one line."""
    from engine.core.events import FinalTranscript

    try:
        backend.transcribe(audio[: 2 * SR], "")
    except Exception as e:  # the backend rejects "auto": report it, do not crash the run
        return f"ASR backend: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
    if "language" not in {f.name for f in dataclasses.fields(FinalTranscript)}:
        return "FinalTranscript has no language field: the detected language is not reported"
    return None


class Models:
    """One Runtime per distinct model configuration, one warmed-up backend per (method, auto) pair."""

    def __init__(self, log, quiet: bool):
        self.runtimes: dict[str, object] = {}
        self.backends: dict[tuple[str, bool], object] = {}
        self.load_s: dict[str, float] = {}
        self.log, self.quiet = log, quiet

    def runtime(self, cfg):
        from bench.asr_stream_bench import model_key
        from engine.runtime import Runtime

        key = model_key(cfg)
        if key not in self.runtimes:
            self.runtimes[key] = Runtime(cfg, progress=not self.quiet)
        rt = self.runtimes[key]
        rt.cfg = cfg  # same models; this configuration's settings for the backend and the transcriber
        return rt

    def backend(self, name: str, auto: bool, cfg, warm: np.ndarray):
        key = (name, auto)
        if key not in self.backends:
            t0 = time.perf_counter()
            b = self.runtime(cfg).asr_backend()
            if not auto:  # an "auto" backend is warmed up by probe_auto, which may fail
                b.transcribe(warm, "")
            self.backends[key] = b
            self.load_s[name + ("+auto" if auto else "")] = _r(time.perf_counter() - t0)
            self.log(f"conversation: {name}{' (language auto)' if auto else ''} ready ({b.name}, "
                     f"{self.load_s[name + ('+auto' if auto else '')]} s)")
        return self.backends[key]


def stream_metrics(raw: dict, off: dict, ref: str | None, W: ConversationWER) -> dict:
    """:func:`bench.asr_stream_bench.file_metrics` + the per-utterance languages and, where the run revised any
    final text, the revised text and its WERs."""
    from bench.asr_stream_bench import file_metrics

    res = file_metrics(raw, off, ref, W)
    for u in res["utterance_detail"]:
        u["language"] = raw["languages"].get(u["index"])
    res["languages"] = [u["language"] for u in res["utterance_detail"]]
    res["event_types"] = dict(raw["event_types"])
    if raw["revisions"]:
        for u in res["utterance_detail"]:
            u["text_revised"] = raw["revisions"].get(u["index"], u["text"])
        finals = {u["index"]: u["text"] for u in res["utterance_detail"]}
        finals.update(raw["revisions"])
        revised = " ".join(t for _, t in sorted(finals.items()) if t)
        res.update(revisions=len(raw["revisions"]), text_revised=revised,
                   wer_vs_beam5_revised=W.wer(off["beam5"], revised),
                   wer_vs_ref_revised=W.wer(ref, revised) if ref is not None else None)
    return res


def revised_vs_greedy(res: dict, offline: dict) -> dict:
    """The revised text (the final where nothing was revised) next to offline greedy on one file: WER against beam 5
    and against the reference, the order-free error against the human words (:func:`words_missed` ``error``, the
    meeting) and each ``delta_*`` = revised − offline greedy."""
    rev_b5 = res.get("wer_vs_beam5_revised", res["wer_vs_beam5"])
    rev_ref = res.get("wer_vs_ref_revised", res["wer_vs_ref"])
    wm, gwm = res.get("words_missed_revised"), (offline.get("words_missed") or {}).get("greedy")
    out = {"wer_vs_beam5": rev_b5, "greedy_wer_vs_beam5": offline["greedy_wer_vs_beam5"],
           "wer_vs_ref": rev_ref, "greedy_wer_vs_ref": offline["greedy_wer_vs_ref"],
           "words_error": wm["error"] if wm else None, "greedy_words_error": gwm["error"] if gwm else None}
    for k in ("wer_vs_beam5", "wer_vs_ref", "words_error"):
        a, b = out[k], out[f"greedy_{k}"]
        out[f"delta_{k}"] = _r(a - b, 4) if a is not None and b is not None else None
    return out


def offline_refs(off: Offline, audio: np.ndarray, ref: str | None, W: ConversationWER, language: str = "en") -> dict:
    """Offline beam 5 and greedy transcripts of a whole file and their WERs (greedy vs beam 5, both vs ``ref``)."""
    t0 = time.perf_counter()
    b5 = off.transcribe(audio, 5, language)
    gr = off.transcribe(audio, 1, language)
    return {"beam5": b5["text"], "greedy": gr["text"], "greedy_wer_vs_beam5": W.wer(b5["text"], gr["text"]),
            "beam5_wer_vs_ref": W.wer(ref, b5["text"]) if ref is not None else None,
            "greedy_wer_vs_ref": W.wer(ref, gr["text"]) if ref is not None else None,
            "seconds": _r(time.perf_counter() - t0, 2)}


def offline_spans(off: Offline, audio: np.ndarray, spans: list) -> dict:
    """Offline transcripts of a file that changes language, span by span ([start, end, spoken language], seconds):
    each span's language as Whisper detects it on that span's audio, then beam 5 and greedy decoded in it
    (one long-form decode of the whole file with per-window detection lost or translated the German half).
    Returns {"parts": {spoken language: {"span", "detected", "probability", "beam5", "greedy"}}, "beam5", "greedy"
    (the parts joined), "seconds"}."""
    t0 = time.perf_counter()
    parts = {}
    for s0, s1, spoken in spans:
        seg = audio[int(s0 * SR): int(s1 * SR)]
        lang, p = off.detect(seg)
        parts[spoken] = {"span": [s0, s1], "detected": lang, "probability": p,
                         "beam5": off.transcribe(seg, 5, lang)["text"], "greedy": off.transcribe(seg, 1, lang)["text"]}
    return {"parts": parts, "beam5": " ".join(p["beam5"] for p in parts.values()),
            "greedy": " ".join(p["greedy"] for p in parts.values()), "seconds": _r(time.perf_counter() - t0, 2)}


# ------------------------------------------------------------------------------------------------ language-ID stream
def langid_conversation(items: list[Item], audio: dict[str, np.ndarray]) -> tuple[np.ndarray, list[dict]]:
    """The language-ID clips as one stream of speakers taking turns: a speaker is one espeak-ng voice of one
    language (``meta["voice"]``) saying all of its sentences one after another (each clip keeps its silences: ≥ 1.2
    s between sentences), and the speakers follow each other round-robin over the languages (a French speaker, a
    German one, a Spanish one, the next French one, …). Returns (float32 16 kHz audio, [{"file", "language",
    "voice", "start", "end"} per clip, seconds in the stream]), in order."""
    speakers: dict[tuple[str, str], list[Item]] = {}
    for it in items:
        speakers.setdefault((it.group, it.meta.get("voice", "")), []).append(it)
    by_lang: dict[str, list[list[Item]]] = {}
    for (lang, _), its in speakers.items():
        by_lang.setdefault(lang, []).append(its)
    order = [sp for rnd in zip(*by_lang.values()) for sp in rnd]
    order += [sp for v in by_lang.values() for sp in v[min(map(len, by_lang.values())):]]
    parts, spans, pos = [], [], 0
    for sp in order:
        for it in sp:
            a = audio[it.name]
            spans.append({"file": it.name, "language": it.group, "voice": it.meta.get("voice"),
                          "start": _r(pos / SR, 3), "end": _r((pos + len(a)) / SR, 3)})
            parts.append(a)
            pos += len(a)
    return np.concatenate(parts).astype(np.float32), spans


# ------------------------------------------------------------------------------------------------------- captions
def captions(items: list[Item], cfg, models: Models, log, target: str = "en") -> dict:
    """Each language-ID file through the live caption path into ``target`` (``cfg`` has ``asr.language = "auto"``):
    the final caption per file, chrF (sacrebleu, corpus and per file) against the English reference where there is
    one and ``target`` is English. ``{"supported": False, "reason"}`` where the configuration or the translator
    does not take ``target``."""
    import sacrebleu

    from audio.io import load_audio
    from bench.caption_bench import run_one, translator
    from engine.config import ConfigError, validate

    try:
        ccfg = cfg.with_overrides({"caption": {"target_language": target}})
        validate(ccfg)
    except (ConfigError, ValueError, TypeError) as e:
        return {"supported": False, "reason": f"configuration: {e}"}
    rt = models.runtime(ccfg)
    try:
        tr = translator(rt, ccfg, target)
    except Exception as e:  # no caption LLM here, or English is not a target it takes
        return {"supported": False, "reason": f"translator: {type(e).__name__}: {' '.join(str(e).split())[:300]}"}
    rows = []
    for it in items:
        res = run_one(rt, ccfg, load_audio(it.path), tr)
        ref = it.meta.get("reference_en") if target in ("en", "English") else None
        row = {"file": it.name, "language": it.group, "transcript": res["transcript"], "caption": res["caption"],
               "reference_en": ref, "errors": res["errors"],
               "chrf": _r(sacrebleu.sentence_chrf(res["caption"], [ref]).score, 2) if ref else None}
        rows.append(row)
        log(f"conversation:   caption {it.name}: {res['caption'][:80]!r}" + (f"  chrF {row['chrf']}" if ref else ""))
    per_lang = {}
    for lang in sorted({r["language"] for r in rows}):
        rs = [r for r in rows if r["language"] == lang and r["reference_en"]]
        per_lang[lang] = {"files": sum(1 for r in rows if r["language"] == lang),
                          "chrf": _r(sacrebleu.corpus_chrf([r["caption"] for r in rs],
                                                           [[r["reference_en"] for r in rs]]).score, 2) if rs else None,
                          "reference": "Multi30k test 2016 English" if rs else "none offline"}
    return {"supported": True, "target": target, "per_language": per_lang, "files": rows}


def captions_target(path: Path, method: str, cfg) -> tuple[dict | None, str | None]:
    """(the result at ``path``, None) where it has a language-ID section and its ASR settings for ``method`` equal
    ``cfg``'s (captions added to it then come from the configuration the rest of it measured), else (None, why)."""
    try:
        report = json.loads(path.read_text())
        ran = report["config"]["settings"][method]["asr"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return None, f"{path}: no language-ID result for {method} ({type(e).__name__}: {e})"
    if "langid" not in report:
        return None, f"{path}: no language-ID result for {method} (no langid section)"
    now = json.loads(json.dumps(dataclasses.asdict(cfg.asr)))
    if ran != now:
        diff = sorted(k for k in set(ran) | set(now) if ran.get(k) != now.get(k))
        return None, f"{path} ran with other ASR settings ({', '.join(diff)})"
    return report, None


def captions_into(path: Path, report: dict, lid: list[Item], auto_cfg, models: Models, log) -> int:
    """:func:`captions` of the language-ID corpus written into ``report``'s ``langid`` section (checked by
    :func:`captions_target`) and saved at ``path``, with the time the captions ran: for a run whose caption model
    was missing. Returns 0."""
    from bench.asr_stream_bench import write_json

    cap = {**captions(lid, auto_cfg, models, log), "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "run": "apart from the rest of the result (--captions-into), with its settings"}
    report["langid"]["captions"] = cap
    write_json(path, report)
    log(f"conversation: captions → {path}: {cap.get('per_language') or cap.get('reason')}")
    return 0


# ----------------------------------------------------------------------------------------------------------- main
def _fmt(x, nd=3):
    return "-" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def print_report(report: dict) -> None:
    for corpus in ("conversation", "real"):
        sec = report.get(corpus)
        if not sec:
            continue
        print(f"\n{corpus}: per file (stream WER vs beam 5 / vs text, offline greedy vs beam 5 / vs text, "
              "final latency p90 s, compute ratio; the revised text's next to it)")
        for f in sec["per_file"]:
            for m, x in f["methods"].items():
                if "error" in x:
                    print(f"  {f['file'][-44:]:44s} {m:10s} FAILED {x['error']}")
                    continue
                print(f"  {f['file'][-44:]:44s} {m:10s} {_fmt(x['wer_vs_beam5']):>6s} {_fmt(x['wer_vs_ref']):>6s}  "
                      f"{_fmt(f['offline']['greedy_wer_vs_beam5']):>6s} {_fmt(f['offline']['greedy_wer_vs_ref']):>6s}  "
                      f"{_fmt(x['final_latency_s']['p90'], 2):>5s} {_fmt(x['compute_ratio'], 2):>5s}")
                rv, rp = x.get("revised_vs_offline_greedy"), x.get("repeats")
                if rv and rp:
                    print(f"  {'':44s} {'revised':10s} {_fmt(rv['wer_vs_beam5']):>6s} {_fmt(rv['wer_vs_ref']):>6s}  "
                          f"order-free error {_fmt(rv['words_error'])} (greedy {_fmt(rv['greedy_words_error'])}); "
                          f"repeated n-grams: revised {rp['revised']['count']} ({rp['revised']['beyond_offline']} "
                          f"beyond offline), final {rp['final']['count']} ({rp['final']['beyond_offline']}), "
                          f"offline greedy {f['offline']['repeats']['offline_greedy']['count']}")
        groups = {"all": sec["per_method"], **{c: v for c, v in sec.get("per_condition", {}).items()}}
        print(f"{corpus}: pooled {'and per condition ' if corpus == 'conversation' else ''}"
              "(WERb5 / greedy WERb5 / delta; WERref / greedy / beam5 / delta; lat p50 p90; ratio)")
        for g, per in groups.items():
            for m, s in per.items():
                print(f"  {g:10s} {m:10s} {_fmt(s['wer_vs_beam5']):>6s} {_fmt(s['offline_greedy_wer_vs_beam5']):>6s} "
                      f"{_fmt(s['wer_delta_vs_offline_greedy']):>6s}; {_fmt(s['wer_vs_ref']):>6s} "
                      f"{_fmt(s['offline_greedy_wer_vs_ref']):>6s} {_fmt(s['offline_beam5_wer_vs_ref']):>6s} "
                      f"{_fmt(s['wer_delta_vs_offline_greedy_ref']):>6s}; {_fmt(s['final_latency_s']['p50'], 2)} "
                      f"{_fmt(s['final_latency_s']['p90'], 2)}; {_fmt(s['compute_ratio'], 3)}")
    ml = report.get("multilingual")
    if ml:
        print(f"\nmultilingual ({ml['file']}): language ID {ml['language_id']}")
        for m, r in ml["per_method"].items():
            parts = "; ".join(f"{k}: stream {_fmt(p.get('stream_wer_vs_beam5'))} greedy "
                              f"{_fmt(p['offline_greedy_wer_vs_beam5'])}" for k, p in r["parts"].items())
            print(f"  {m:10s} language accuracy {_fmt(r.get('language_accuracy'))}; WER vs beam 5 — {parts}")
    li = report.get("langid")
    if li:
        if li.get("supported"):
            print(f"\nlanguage ID (stream, asr.language=auto, each file alone): {li['summary']}")
            if li.get("conversation"):
                print(f"language ID (stream, speakers taking turns in one stream): {li['conversation'].get('summary')}")
        else:
            print(f"\nlanguage ID: not supported ({li.get('reason')})")
        print(f"language ID (offline Whisper, whole file): {li['offline']}")
        cap = li.get("captions")
        if cap:
            shown = cap.get("per_language") if cap.get("supported") else f"not supported ({cap.get('reason')})"
            print(f"captions into {cap.get('target', 'English')}: {shown}")
    dw = report.get("done_when")
    if dw:
        print("\ndone when:")
        for k, v in dw.items():
            print(f"  {k}: {v}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specvoice bench conversation", description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default=",".join(CORPORA), help=f"comma list of {', '.join(CORPORA)}")
    ap.add_argument("--methods", default="default",
                    help="comma list: default (the configuration as loaded) or methods of bench asr-stream")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="only inputs whose file name contains one of these")
    ap.add_argument("--out", default=str(HERE / "results" / "conversation.json"),
                    help="result JSON (default bench/results/conversation.json), rewritten after every file")
    ap.add_argument("--fast", action="store_true", help="no real-time pacing (quick checks; latencies meaningless)")
    ap.add_argument("--no-captions", action="store_true", help="skip the captions of the language-ID corpus")
    ap.add_argument("--config", help="TOML config file (as specvoice --config)")
    ap.add_argument("--langid-languages", default="en,de,fr,es", metavar="CODES",
                    help="language-ID corpus: also run it with asr.languages set to these (the languages spoken in "
                         "the corpus and English, as a user who names the languages they speak); '' = skip")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="base configuration override (repeatable)")
    ap.add_argument("--data", metavar="DIR", default=str(CONVERSATION),
                    help="folder of the conversation and langid corpora (default bench/data/conversation, the "
                         "held-out test set; a development set: python -m bench.make_conversation --seed N --out DIR)")
    ap.add_argument("--captions-into", metavar="RESULT",
                    help="only the captions of the language-ID corpus, written into the langid section of RESULT "
                         "(an earlier run's JSON, whose settings must equal these; for a run whose caption model was "
                         "missing)")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)

    from bench.asr_stream_bench import METHODS, machine, write_json
    from bench.input_audio import decode_all
    from engine.config import ConfigError, load_config

    corpora = [c.strip() for c in a.corpus.split(",") if c.strip()]
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    bad = [c for c in corpora if c not in CORPORA] + [m for m in methods if m != "default" and m not in METHODS]
    if bad or not corpora or not methods:
        print(f"conversation: unknown corpus or method {bad}; corpora: {', '.join(CORPORA)}; methods: default, "
              f"{', '.join(METHODS)}", file=sys.stderr)
        return 2
    try:
        base = load_config(a.config, sets=a.set)
        cfgs = method_configs(base, methods)
    except ConfigError as e:
        print(f"conversation: {e}", file=sys.stderr)
        return 2
    cap_report = None
    if a.captions_into:  # checked before any model loads
        cap_report, why = (captions_target(Path(a.captions_into), methods[0], cfgs[methods[0]])
                           if corpora == ["langid"] else (None, "it needs --corpus langid"))
        if cap_report is None:
            print(f"conversation: --captions-into: {why}", file=sys.stderr)
            return 2
    try:
        items = load_items(corpora, Path(a.data))
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    if a.only:
        items = [it for it in items if any(s in it.name for s in a.only)]
        if not items:
            print(f"conversation: no input matches {a.only}", file=sys.stderr)
            return 2
    log = (lambda *x: None) if a.quiet else (lambda *x: print(*x, file=sys.stderr, flush=True))
    t_run = time.monotonic()
    audio = decode_all({it.name: it.path for it in items}, "conversation")
    if audio is None:
        return 2

    models = Models(log, a.quiet)
    warm = audio[items[0].name][: 3 * SR]
    for m in methods if not a.captions_into else []:  # captions decode with language auto only
        models.backend(m, False, cfgs[m], warm)
    # language "auto": accepted by the configuration, decoded by the backend, reported on the events?
    auto_cfgs: dict[str, object] = {}
    auto_reason = None
    if any(it.corpus in ("multilingual", "langid") for it in items):
        for m in methods:
            c, auto_reason = with_auto(cfgs[m])
            if c is None:
                break
            auto_reason = probe_auto(models.backend(m, True, c, warm), warm)
            if auto_reason:
                break
            auto_cfgs[m] = c
        if auto_reason:
            auto_cfgs = {}
            log(f"conversation: asr.language=auto not supported ({auto_reason}); language ID not measured")
    if a.captions_into:
        if auto_reason:
            print(f"conversation: --captions-into: asr.language=auto not supported ({auto_reason})", file=sys.stderr)
            return 2
        return captions_into(Path(a.captions_into), cap_report, items, auto_cfgs[methods[0]], models, log)
    rt0 = models.runtime(base)
    off = Offline(_whisper(rt0, base))
    W = ConversationWER()
    report: dict = {"config": {}, "corpora": corpora}

    def finish(complete: bool) -> dict:
        import ctranslate2
        import faster_whisper

        report["config"] = {
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - (time.monotonic() - t_run))),
            "complete": complete, "realtime": not a.fast, "methods": methods, "corpora": corpora,
            "method_overrides": {m: ({} if m == "default" else METHODS[m]) for m in methods}, "sets": a.set,
            "machine": machine(), "versions": {"ctranslate2": ctranslate2.__version__,
                                               "faster_whisper": faster_whisper.__version__},
            "settings": {m: {"asr": dataclasses.asdict(cfgs[m].asr)} for m in methods},
            "vad": dataclasses.asdict(base.vad), "models": rt0.describe(), "load_and_warmup_s": models.load_s,
            "language_auto": {"supported": not auto_reason, "reason": auto_reason},
            "offline_reference": {"model_role": base.asr.model_role, "beam5": "faster-whisper beam_size=5",
                                  "greedy": "faster-whisper beam_size=1",
                                  "multilingual": "per language span: the language Whisper detects on the span, then "
                                                  "beam 5 and greedy in it"},
            "normalisation": "bench.conversation_scoring.normalise (fillers removed from both sides, Whisper's "
                             "English normaliser; the multilingual file: Whisper's basic normaliser)",
            "wall_s": _r(time.monotonic() - t_run, 1),
        }
        report["done_when"] = done_when(report)
        return report

    out = Path(a.out)
    # -- English corpora ------------------------------------------------------------------------------------------
    for corpus in ("conversation", "real"):
        rows = []
        for it in [i for i in items if i.corpus == corpus]:
            entry = {"file": it.name, "group": it.group, "duration_s": _r(len(audio[it.name]) / SR, 2),
                     "ref": it.ref, "offline": offline_refs(off, audio[it.name], it.ref, W), "methods": {}}
            log(f"conversation: {it.name} ({entry['duration_s']} s): offline in {entry['offline']['seconds']} s")
            for m in methods:
                try:
                    raw = play(models.runtime(cfgs[m]), cfgs[m], models.backend(m, False, cfgs[m], warm), it.path,
                               realtime=not a.fast)
                    res = stream_metrics(raw, entry["offline"], it.ref, W)
                except Exception as e:  # one broken cell must not lose a long real-time run
                    import traceback

                    entry["methods"][m] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
                    log(f"conversation:   {m} FAILED: {type(e).__name__}: {e}")
                    continue
                words = it.meta.get("speaker_words")
                if words:  # the meeting: human words per speaker, no order across speakers
                    res["words_missed"] = words_missed(list(words.values()), res["text"])
                    res["words_missed_revised"] = words_missed(list(words.values()),
                                                               res.get("text_revised", res["text"]))
                    entry["offline"]["words_missed"] = {k: words_missed(list(words.values()), entry["offline"][k])
                                                        for k in ("greedy", "beam5")}
                # n-grams repeated back to back (a seam decoded twice, a loop): the stream's final and revised text
                # against the offline transcripts, and the offline transcripts' own
                reps = file_repeats(entry["offline"], {**res, "text_revised": res.get("text_revised", res["text"])})
                entry["offline"]["repeats"] = {k: reps.pop(k) for k in ("offline_greedy", "offline_beam5")}
                res["repeats"] = reps
                res["revised_vs_offline_greedy"] = revised_vs_greedy(res, entry["offline"])
                entry["methods"][m] = res
                log(f"conversation:   {m:10s} WER b5 {_fmt(res['wer_vs_beam5'])} (greedy "
                    f"{_fmt(entry['offline']['greedy_wer_vs_beam5'])})  WER ref {_fmt(res['wer_vs_ref'])} (greedy "
                    f"{_fmt(entry['offline']['greedy_wer_vs_ref'])})  lat p90 {_fmt(res['final_latency_s']['p90'], 2)}")
                rv = res["revised_vs_offline_greedy"]
                log(f"conversation:   {'':10s} revised: WER b5 {_fmt(rv['wer_vs_beam5'])} WER ref {_fmt(rv['wer_vs_ref'])}"
                    f" order-free error {_fmt(rv['words_error'])} (greedy {_fmt(rv['greedy_words_error'])}); "
                    f"repeats beyond offline: final {reps['final']['beyond_offline']}, revised "
                    f"{reps['revised']['beyond_offline']} {reps['revised']['beyond_offline_ngrams'] or ''}")
            rows.append(entry)
            report[corpus] = {"per_file": rows, "per_method": {m: summarize_group(m, rows, W) for m in methods}}
            if corpus == "conversation":
                conds = sorted({r["group"] for r in rows}, key=lambda c: (c != "clean", c))
                report[corpus]["per_condition"] = {
                    c: {m: summarize_group(m, [r for r in rows if r["group"] == c], W) for m in methods} for c in conds}
            write_json(out, finish(False))  # after every file: an interrupted run keeps what it measured

    # -- the English → German read text ---------------------------------------------------------------------------
    for it in [i for i in items if i.corpus == "multilingual"]:
        spans = it.meta["language_spans"]
        Wb = ConversationWER(english=False)
        entry = {"file": it.name, "duration_s": _r(len(audio[it.name]) / SR, 2), "language_spans": spans,
                 "offline": offline_spans(off, audio[it.name], spans),
                 "language_id": "asr.language=auto" if not auto_reason else f"not supported ({auto_reason})",
                 "per_method": {}}
        for m in methods:
            cfg = auto_cfgs.get(m, cfgs[m])
            try:
                raw = play(models.runtime(cfg), cfg, models.backend(m, m in auto_cfgs, cfg, warm), it.path,
                           realtime=not a.fast)
                res = stream_metrics(raw, entry["offline"], None, Wb)
                r = multilingual_metrics(entry["offline"], spans, res)
                r.update(text=res["text"], final_latency_s=res["final_latency_s"], compute_ratio=res["compute_ratio"],
                         utterance_detail=res["utterance_detail"])
            except Exception as e:  # one broken cell must not lose the run
                r = {"error": f"{type(e).__name__}: {e}"}
            entry["per_method"][m] = r
            log(f"conversation: {it.name} {m}: language accuracy {r.get('language_accuracy')}")
        entry["offline_parts"] = multilingual_metrics(entry["offline"], spans, None)["parts"]
        report["multilingual"] = entry
        write_json(out, finish(False))

    # -- language ID and captions ---------------------------------------------------------------------------------
    lid = [i for i in items if i.corpus == "langid"]
    if lid:
        m = methods[0]
        sec: dict = {"method": m, "supported": not auto_reason, "reason": auto_reason, "files": []}
        det, det_head = {}, {}
        for it in lid:
            lang, p = off.detect(audio[it.name])
            det.setdefault(it.group, []).append(lang == it.group)
            row = {"file": it.name, "language": it.group, "speech_s": it.meta.get("speech_s"),
                   "offline_detected": lang, "offline_probability": p}
            with_head = off.detect_with_head(audio[it.name], cfgs[m].asr.language_head)
            if with_head is not None:
                row["offline_head_detected"], row["offline_head_probability"] = with_head
                det_head.setdefault(it.group, []).append(with_head[0] == it.group)
            sec["files"].append(row)

        def accuracy(d: dict, how: str) -> dict:
            return {"accuracy": _r(sum(map(sum, d.values())) / sum(map(len, d.values())), 4),
                    "per_language": {k: _r(sum(v) / len(v), 4) for k, v in d.items()}, "how": how}

        sec["offline"] = accuracy(det, "faster-whisper detect_language on each whole file (Whisper base)")
        if det_head:
            sec["offline_head"] = accuracy(det_head, "Whisper base's identification on each whole file's padded 30 s "
                                                     "window times the language-ID head's (engine/asr/language_head.py)"
                                                     f" to the power asr.language_head = {cfgs[m].asr.language_head}")
        if not auto_reason:
            # (what differs, config): the method as it is, its languages named, and its identification by the
            # latest window alone (the baseline of asr.language_pool)
            variants = [("", auto_cfgs[m])]
            if a.langid_languages:
                variants.append(("languages", auto_cfgs[m].with_overrides({"asr": {"languages": a.langid_languages}})))
            if auto_cfgs[m].asr.language_pool:
                variants.append(("last_window", auto_cfgs[m].with_overrides({"asr": {"language_pool": False}})))
            for variant, cfg in variants:
                key = f"{m}+{variant}" if variant else m
                for it, row in zip(lid, sec["files"]):
                    try:
                        raw = play(models.runtime(cfg), cfg, models.backend(m, True, cfg, warm), it.path,
                                   realtime=not a.fast)
                        res = stream_metrics(raw, {"beam5": "", "greedy": ""}, None, W)
                        row.setdefault("methods", {})[key] = {
                            "utterance_detail": res["utterance_detail"], "languages": res["languages"],
                            "text": res["text"]}
                    except Exception as e:
                        row.setdefault("methods", {})[key] = {"error": f"{type(e).__name__}: {e}"}
                    log(f"conversation: {it.name} [{key}]: {row['methods'][key].get('languages')} "
                        f"(offline {row['offline_detected']})")
                summary = langid_summary(sec["files"], key)
                stream = langid_stream(lid, audio, cfg, models, m, W, warm, not a.fast, log)
                if not variant:
                    sec["summary"], sec["conversation"] = summary, stream
                elif variant == "languages":  # the same with the spoken languages named (asr.languages)
                    sec["languages_named"] = {"asr.languages": a.langid_languages, "summary": summary,
                                              "conversation": stream}
                else:  # each decode identified by its own window alone (asr.language_pool = false)
                    sec["last_window"] = {"asr.language_pool": False, "summary": summary, "conversation": stream}
                write_json(out, finish(False))
            if not a.no_captions:
                sec["captions"] = captions(lid, auto_cfgs[m], models, log)
        elif not a.no_captions:
            sec["captions"] = {"supported": False, "reason": f"asr.language=auto: {auto_reason}"}
        report["langid"] = sec

    report = finish(True)
    write_json(out, report)
    print_report(report)
    pace = "real time" if not a.fast else "fast (not real time)"
    print(f"\n{len(items)} inputs × {len(methods)} method(s), {pace}, "
          f"{report['config']['wall_s']} s → {out}")
    return 0


def langid_stream(lid: list[Item], audio: dict[str, np.ndarray], cfg, models, m: str, W, warm, realtime: bool,
                  log) -> dict:
    """The language-ID corpus as speakers taking turns in one stream (:func:`langid_conversation`) through the live
    transcriber with ``asr.language = "auto"``: each utterance's detected language against the language of the clip
    holding its midpoint; accuracy over every utterance, over those of at least :data:`LANGID_MIN_UTTERANCE_S`, and
    per language."""
    import tempfile

    import soundfile as sf

    stream, spans = langid_conversation(lid, audio)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "langid_conversation.flac"
        sf.write(path, stream, SR)
        try:
            raw = play(models.runtime(cfg), cfg, models.backend(m, True, cfg, warm), path, realtime=realtime)
            res = stream_metrics(raw, {"beam5": "", "greedy": ""}, None, W)
        except Exception as e:  # one broken cell must not lose the run
            return {"error": f"{type(e).__name__}: {e}"}
    utts = langid_utterances(res["utterance_detail"],
                             lambda u: spoken_at(spans, (u["t_start"] + u["t_end"]) / 2))
    pairs = [(u["language"], u["spoken"]) for u in utts]
    long = [(u["language"], u["spoken"]) for u in utts if u["seconds"] >= LANGID_MIN_UTTERANCE_S]
    summary = {"all_utterances": accuracy(pairs), "utterances_2s": accuracy(long),
               "per_language": {k: accuracy([x for x in long if x[1] == k]) for k in sorted({s["language"]
                                                                                           for s in spans})},
               "empty_texts": sum(u["empty_text"] for u in utts), "clips": len(spans)}
    log(f"conversation: langid as one stream: {summary}")
    return {"how": "each espeak-ng voice is one speaker saying its sentences in a row; speakers round-robin over "
                   "the languages, one stream", "seconds": _r(len(stream) / SR, 1), "spans": spans,
            "utterances": utts, "summary": summary}


def _whisper(rt, cfg):
    """A faster-whisper model of ``cfg.asr.model_role`` for the offline transcripts."""
    from engine.asr.faster_whisper_backend import FasterWhisperBackend

    fw = FasterWhisperBackend(rt.model(cfg.asr.model_role).path, device=cfg.asr.device,
                              compute_type=cfg.asr.compute_type, cpu_threads=cfg.asr.cpu_threads, language="en")
    return fw.model


if __name__ == "__main__":
    raise SystemExit(main())
