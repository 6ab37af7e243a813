"""Wake-phrase benchmark (``specvoice bench wake``, ``python -m bench.wake_bench``): how often a spoken wake phrase
is missed, how often speech without it wakes the assistant, and how late the decision comes — for the matcher of
:mod:`engine.answer.wake` on the streaming transcript the session computes anyway.

Positives. Each phrase (``--phrases``, default "hey spec voice" and "okay computer") is said by 11
voices — Piper (the ``tts_voice`` role) at four length/noise scales and espeak-ng in seven accents and variants —
alone and followed (after a 0.1–0.3 s gap) by a question of bench/data/wake/questions.txt, in four conditions:
clean, reverberant (synthetic room, RT60 0.6 s), babble (8 espeak-ng talkers at 10 dB SNR) and telephone (300–3400
Hz, 8 kHz μ-law): the helpers of :mod:`bench.make_conversation`. 0.6–1.0 s of silence before, 1 s after.

Negatives (no phrase in them): every English speech file committed under bench/data — the conversation set
(bench/data/conversation, 4 conditions), the real recordings (bench/data/real_speech), the streaming-ASR, caption,
held-out and spoken-question sets — plus conversational speech synthesised at run time (not committed) to reach
``--hours`` of audio: two-voice dialogues of :data:`bench.make_speech.CONVERSATION` and of MT-Bench and GSM8K
sentences, by the same voices, 0.4–1.5 s between utterances, the conditions taken in turn.

Near misses, apart (not in the rate per hour, since they are written to be hard): each line of
bench/data/wake/openers.txt — everyday speech opening with "hey", "okay", "hello", "hi", "computer", "assistant",
some a sound away from a phrase ("Hello, a system update…") — said once, voices and conditions in turn.

Every file is streamed once through exactly what a session runs (``Runtime.transcriber``: capture, Silero VAD,
streaming Whisper with the configuration's update policy) with no real-time pacing: the source hands over its next
0.1 s block only once the ASR has taken everything queued, so updates come every ``asr.min_chunk_s`` of new
audio, as in a real-time run whose updates keep up, and the run is deterministic. The second pass
(``asr.revise_max_s``) is off: a revision never wakes the assistant. With ``duplex.wake_prompt`` (the default) every
utterance is decoded with the phrase listened for at the end of its prompt, as a listening session does, so a
positive is streamed for its own phrase and every other file once per phrase (``--set duplex.wake_prompt=false``:
once for all phrases). The phrase is then applied to the event stream: per utterance, the PredGen source text of each partial (``llm.predgen_source``) and the final text
through :class:`engine.answer.wake.WakeMatcher`, as :class:`engine.answer.wake.WakeGate` does while listening.

Reported per phrase and condition (and pooled):
    * miss rate: clips in which no utterance woke (target ≤ 5 %); each miss with its transcript and best distance;
    * added latency: from the audio time the phrase ends to the decision — in ASR updates (partials decoded
      after the first update whose audio holds the whole phrase; 0 = that first update decided) and in seconds of
      audio (the audio the ASR had consumed at the decision minus the phrase's end) — p50/p90/max; and how many
      clips with a question were decided on a partial (before the final: the answer is not delayed at all);
    * false wakes: utterances of the negatives that woke, per hour of audio and per hour of VAD speech (target ≤ 1
      per hour), each with its transcript;
    * near misses woken, each with its transcript;
    * a tolerance sweep: miss rate and false wakes at other tolerances, from the same event streams.
A condition or phrase over a target is named in ``targets`` with the reason (the transcripts of its misses).

Run: ``python -m bench.wake_bench [--phrases "hey spec voice,okay computer"] [--hours 1.0] [--voices 11]
[--out bench/results/wake.json]``; ``--quick`` (2 voices, 0.05 h) checks the script. ≈ 25 min per phrase on 2
cores (the negatives are heard once per phrase).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from audio.io import SAMPLE_RATE
from audio.sources import ArraySource

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
WAKE_DATA = DATA / "wake"
OUT = HERE / "results" / "wake.json"
SR = SAMPLE_RATE  # Hz
SEED = 20260301
PHRASES = ("hey spec voice", "okay computer")  # a made-up name and an everyday one
CONDITIONS = ("clean", "reverb", "babble", "telephone")
TOLERANCES = (0.15, 0.2, 0.25, 0.3, 0.35)
MISS_TARGET = 0.05  # share of clips
FALSE_WAKE_TARGET = 1.0  # per hour
#: the voices saying the phrase: (synthesiser, its settings)
VOICES = (
    ("piper", dict(length_scale=1.0, noise_scale=0.667, noise_w_scale=0.8)),
    ("espeak", dict(voice="en-us", rate=165, pitch=50)),
    ("piper", dict(length_scale=0.85, noise_scale=0.5, noise_w_scale=0.6)),
    ("espeak", dict(voice="en-gb+f1", rate=160, pitch=70)),
    ("piper", dict(length_scale=1.2, noise_scale=0.8, noise_w_scale=0.9)),
    ("espeak", dict(voice="en-us+m4", rate=150, pitch=40)),
    ("piper", dict(length_scale=0.95, noise_scale=0.9, noise_w_scale=1.0)),
    ("espeak", dict(voice="en-gb-x-rp+f5", rate=175, pitch=60)),
    ("espeak", dict(voice="en-029+m1", rate=165, pitch=45)),
    ("espeak", dict(voice="en-gb-scotland", rate=155, pitch=55)),
    ("espeak", dict(voice="en-us+f4", rate=170, pitch=75)),
)
#: committed English speech without a wake phrase: (folder, glob)
COMMITTED_NEGATIVES = (("conversation", "*.flac"), ("real_speech", "*.wav"), ("real_speech", "*.flac"),
                       ("real_speech", "*.mp3"), ("stream_speech", "*.flac"), ("stream_speech_heldout", "*.flac"),
                       ("caption", "*.flac"), ("heldout_speech", "*.flac"), ("voice_questions", "*.flac"))


def _lines(name: str) -> list[str]:
    return [s.strip() for s in (WAKE_DATA / name).read_text(encoding="utf-8").splitlines()
            if s.strip() and not s.startswith("#")]


# ------------------------------------------------------------------------------------------------------ the audio
@dataclass
class Clip:
    """One benchmark input: ``audio`` (float32 16 kHz) or ``path``; positives know their phrase and where it ends."""

    name: str
    kind: str  # "positive" | "negative"
    condition: str
    audio: np.ndarray | None = None
    path: Path | None = None
    phrase: str = ""
    variant: str = ""  # "alone" | "question"
    voice: int = -1
    phrase_end_s: float = 0.0  # audio time the phrase ends, s
    meta: dict = field(default_factory=dict)


class Conditions:
    """The conditions of :mod:`bench.make_conversation` for short clips: one babble bed made once, cut at random."""

    def __init__(self, voices, rng: random.Random, sentences: list[str], bed_s: float = 120.0):
        from bench.make_conversation import babble

        self.rng = rng
        self.nrng = np.random.default_rng(rng.randrange(2 ** 31))
        self.voices = voices
        self.bed = babble(voices, int(bed_s * SR), rng, sentences)

    def apply(self, x: np.ndarray, condition: str) -> np.ndarray:
        from bench.make_conversation import BABBLE_SNR_DB, active_power, apply_condition

        if condition != "babble":
            return apply_condition(x, condition, self.nrng)[0]
        start = self.rng.randrange(0, len(self.bed) - len(x))
        b = self.bed[start: start + len(x)] * np.sqrt(active_power(x) / 10 ** (BABBLE_SNR_DB / 10))
        y = x + b
        return (y * min(1.0, 0.95 / float(np.abs(y).max()))).astype(np.float32)


def positives(voices, cond: Conditions, phrases: list[str], n_voices: int, rng: random.Random) -> list[Clip]:
    """Each phrase by each voice, alone and followed by a question, in each condition."""
    from bench.make_speech import level, trim

    questions = _lines("questions.txt")
    clips = []
    for v, spec in enumerate(VOICES[:n_voices]):
        for phrase in phrases:
            said = trim(voices.say(phrase, spec), keep_s=0.03)
            for variant in ("alone", "question"):
                for condition in CONDITIONS:
                    lead = np.zeros(int(rng.uniform(0.6, 1.0) * SR), np.float32)
                    parts = [lead, said]
                    q = ""
                    if variant == "question":
                        q = rng.choice(questions)
                        parts += [np.zeros(int(rng.uniform(0.1, 0.3) * SR), np.float32),
                                  trim(voices.say(q, spec), keep_s=0.03)]
                    x = level(np.concatenate(parts + [np.zeros(SR, np.float32)]), rng.uniform(0.5, 0.8))
                    clips.append(Clip(f"{phrase.replace(' ', '_')}-v{v}-{variant}-{condition}", "positive",
                                      condition, cond.apply(x, condition), phrase=phrase, variant=variant, voice=v,
                                      phrase_end_s=(len(lead) + len(said)) / SR, meta={"question": q}))
    return clips


def committed_negatives() -> list[Clip]:
    """Every committed English speech file without a phrase (see the module docstring)."""
    seen, out = set(), []
    for folder, pattern in COMMITTED_NEGATIVES:
        for p in sorted((DATA / folder).glob(pattern)):
            if p in seen:
                continue
            seen.add(p)
            cond = next((c for c in CONDITIONS if c in p.stem), "clean")
            out.append(Clip(f"{folder}/{p.name}", "negative", cond, path=p))
    return out


def synthesised_negatives(voices, cond: Conditions, seconds: float, rng: random.Random, n_voices: int) -> list[Clip]:
    """≈ ``seconds`` of conversational speech without a phrase: dialogues of ≈ 60 s, two voices each, of everyday
    lines (:data:`bench.make_speech.CONVERSATION`) and MT-Bench/GSM8K sentences."""
    from bench.make_speech import CONVERSATION, corpus_sentences, level, trim

    mt, gsm = corpus_sentences()
    pool = list(CONVERSATION) * 2 + mt + gsm
    rng.shuffle(pool)
    clips, total, i = [], 0.0, 0
    while total < seconds and pool:
        a, b = rng.sample(range(n_voices), 2)
        parts, n = [np.zeros(int(0.5 * SR), np.float32)], 0
        while n < 60 * SR and pool:
            spec = VOICES[(a, b)[len(parts) % 2]]
            x = level(trim(voices.say(pool.pop(), spec), keep_s=0.03), rng.uniform(0.4, 0.8))
            gap = np.zeros(int(rng.uniform(0.4, 1.5) * SR), np.float32)
            parts += [x, gap]
            n += len(x) + len(gap)
        condition = CONDITIONS[i % len(CONDITIONS)]
        x = cond.apply(np.concatenate(parts), condition)
        clips.append(Clip(f"synthesised/dialogue_{i:03d}", "negative", condition, x))
        total += len(x) / SR
        i += 1
    return clips


def near_misses(voices, cond: Conditions, rng: random.Random, n_voices: int, per_file: int = 10) -> list[Clip]:
    """The lines of bench/data/wake/openers.txt (everyday speech opening like a phrase), each said once, the voices
    and conditions taken in turn, ``per_file`` lines a file with 1.2–2.0 s between them."""
    from bench.make_speech import level, trim

    lines = _lines("openers.txt")
    clips = []
    for f in range(0, len(lines), per_file):
        condition = CONDITIONS[(f // per_file) % len(CONDITIONS)]
        parts = [np.zeros(int(0.6 * SR), np.float32)]
        for i, line in enumerate(lines[f: f + per_file], f):
            x = trim(voices.say(line, VOICES[i % n_voices]), keep_s=0.03)
            parts += [level(x, rng.uniform(0.5, 0.8)), np.zeros(int(rng.uniform(1.2, 2.0) * SR), np.float32)]
        clips.append(Clip(f"near_miss/openers_{f // per_file:02d}", "near_miss", condition,
                          cond.apply(np.concatenate(parts), condition), meta={"lines": len(lines[f: f + per_file])}))
    return clips


# ------------------------------------------------------------------------------------------------------ the stream
class PacedSource(ArraySource):
    """An in-memory source that hands over its next block only once the transcriber has taken everything queued
    (``queue``: the transcriber's audio queue, set once it exists): no real-time waits, and updates come every
    ``asr.min_chunk_s`` of new audio, as in a real-time run that keeps up."""

    def __init__(self, audio: np.ndarray, block_s: float):
        super().__init__(audio, block_s, realtime=False, name="paced", trailing_silence_s=1.0)
        self.queue = None

    def __iter__(self):
        for block in super().__iter__():
            while self.queue is not None and len(self.queue) and not self._stop.is_set():
                time.sleep(0.002)
            yield block


def stream(rt, cfg, audio: np.ndarray, phrase: str = "") -> dict:
    """The transcriber's events of ``audio``: {"utterances": [{"start", "end", "partials": [(text, audio_s)],
    "final", "final_audio_s"}], "audio_s", "compute_s"} — ``audio_s`` of an event is the audio the ASR had taken
    when it was emitted. ``phrase``: the session listens for it with ``duplex.wake_prompt`` (every utterance's prompt
    ends with :func:`engine.answer.wake.prompt_sentence` of it, as :meth:`engine.answer.wake.WakeGate.prompt_hint`
    gives while listening)."""
    from engine.answer.wake import prompt_sentence

    from engine.core.events import FinalTranscript, PartialTranscript, SpeechEnded, SpeechStarted

    src = PacedSource(audio, cfg.audio.block_s)
    utts: dict[int, dict] = {}
    holder = {}

    def on_event(ev):
        now = holder["st"].stats.audio_s
        if isinstance(ev, SpeechStarted):
            utts[ev.utterance] = {"start": ev.t, "end": None, "partials": [], "final": "", "final_audio_s": None}
        elif isinstance(ev, PartialTranscript):
            utts.setdefault(ev.utterance, {"start": None, "end": None, "partials": [], "final": "",
                                           "final_audio_s": None})["partials"].append(
                (ev.source(cfg.llm.predgen_source), round(max(now, ev.t_audio), 3)))
        elif isinstance(ev, SpeechEnded):
            if ev.utterance in utts:
                utts[ev.utterance]["end"] = ev.t
        elif isinstance(ev, FinalTranscript):
            u = utts.setdefault(ev.utterance, {"start": ev.t_start, "end": ev.t_end, "partials": [], "final": "",
                                               "final_audio_s": None})
            u["final"], u["final_audio_s"] = ev.text, round(now, 3)

    hint = prompt_sentence(phrase)
    st = rt.transcriber(src, on_event, prompt_hint=(lambda: hint) if hint else None)
    holder["st"] = st
    src.queue = st.q
    t0 = time.process_time()
    st.run()
    return {"utterances": [utts[k] for k in sorted(utts)], "audio_s": len(audio) / SR,
            "compute_s": time.process_time() - t0}


# ------------------------------------------------------------------------------------------------------ scoring
def decide(matcher, utt: dict, phrase_end_s: float | None = None) -> dict:
    """The wake decision on one utterance as :class:`engine.answer.wake.WakeGate` makes it while listening: the first
    partial that matches, else the final. With ``phrase_end_s``: the added latency (see the module docstring)."""
    covered = None  # index of the first partial whose audio holds the whole phrase
    partial_distances = []
    for i, (text, at) in enumerate(utt["partials"]):
        if phrase_end_s is not None and covered is None and at >= phrase_end_s:
            covered = i
        m = matcher.match(text)
        partial_distances.append(m.distance)
        if m.woken:
            return _decision("partial", m, at, i, covered, phrase_end_s, text)
    m = matcher.match(utt["final"], final=True)
    if m.woken:
        n = len(utt["partials"])
        return _decision("final", m, utt["final_audio_s"], n, n if covered is None else covered, phrase_end_s,
                         utt["final"])
    return {"woken": False, "distance": round(min([m.distance] + partial_distances), 3), "text": utt["final"]}


def _decision(by, m, at, index, covered, phrase_end_s, text) -> dict:
    out = {"woken": True, "by": by, "distance": round(m.distance, 3), "text": text, "rest": m.rest}
    if phrase_end_s is not None:
        out["added_updates"] = max(0, index - (covered if covered is not None else index))
        out["added_audio_s"] = round(max(0.0, (at or 0.0) - phrase_end_s), 3)
    return out


def _pct(xs: list[float], q: float):
    return round(float(np.percentile(xs, q)), 3) if xs else None


def score_positives(clips: list[Clip], streams: dict[str, dict], phrase: str, tolerance: float) -> dict:
    from engine.answer.wake import WakeMatcher

    matcher = WakeMatcher(phrase, tolerance)
    rows = []
    for c in clips:
        if c.phrase != phrase:
            continue
        utts = streams[c.name]["utterances"]
        ds = [decide(matcher, u, c.phrase_end_s) for u in utts]
        hit = next((d for d in ds if d["woken"]), None)
        row = {"clip": c.name, "condition": c.condition, "variant": c.variant, "voice": c.voice,
               "woken": hit is not None}
        if hit is not None:
            row.update({k: hit[k] for k in ("by", "distance", "added_updates", "added_audio_s", "rest")})
        else:
            row["why"] = ("no speech detected" if not utts else
                          f"transcribed {' | '.join(u['final'] for u in utts)!r}; best distance "
                          f"{min(d['distance'] for d in ds)} > tolerance {tolerance}")
        rows.append(row)
    return {"rows": rows}


def summarise_positives(rows: list[dict]) -> dict:
    hits = [r for r in rows if r["woken"]]
    q = [r for r in rows if r["variant"] == "question"]
    ups = [r["added_updates"] for r in hits]
    secs = [r["added_audio_s"] for r in hits]
    return {"clips": len(rows), "missed": len(rows) - len(hits),
            "miss_rate": round(1 - len(hits) / len(rows), 4) if rows else None,
            "added_updates_p50": _pct(ups, 50), "added_updates_p90": _pct(ups, 90),
            "added_updates_max": max(ups) if ups else None,
            "added_audio_s_p50": _pct(secs, 50), "added_audio_s_p90": _pct(secs, 90),
            "added_audio_s_max": max(secs) if secs else None,
            "question_clips_decided_on_a_partial": sum(1 for r in q if r.get("by") == "partial"),
            "question_clips": len(q),
            "misses": [{"clip": r["clip"], "why": r["why"]} for r in rows if not r["woken"]]}


def score_negatives(clips: list[Clip], streams: dict[str, dict], phrase: str, tolerance: float) -> dict:
    from engine.answer.wake import WakeMatcher

    matcher = WakeMatcher(phrase, tolerance)
    wakes, n_utts, per_cond = [], 0, {}
    for c in clips:
        s = streams[c.name]
        pc = per_cond.setdefault(c.condition, {"false_wakes": 0, "audio_s": 0.0, "speech_s": 0.0, "utterances": 0})
        pc["audio_s"] += s["audio_s"]
        for u in s["utterances"]:
            n_utts += 1
            pc["utterances"] += 1
            if u["start"] is not None and u["end"] is not None:
                pc["speech_s"] += u["end"] - u["start"]
            d = decide(matcher, u)
            if d["woken"]:
                pc["false_wakes"] += 1
                wakes.append({"file": c.name, "by": d["by"], "distance": d["distance"], "text": d["text"]})
    audio_h = sum(p["audio_s"] for p in per_cond.values()) / 3600
    speech_h = sum(p["speech_s"] for p in per_cond.values()) / 3600
    for p in per_cond.values():
        p["per_hour_audio"] = round(p["false_wakes"] / (p["audio_s"] / 3600), 3) if p["audio_s"] else None
        p["audio_s"], p["speech_s"] = round(p["audio_s"], 1), round(p["speech_s"], 1)
    return {"false_wakes": len(wakes), "utterances": n_utts, "audio_h": round(audio_h, 3),
            "speech_h": round(speech_h, 3),
            "per_hour_audio": round(len(wakes) / audio_h, 3) if audio_h else None,
            "per_hour_speech": round(len(wakes) / speech_h, 3) if speech_h else None,
            "per_condition": per_cond, "wakes": wakes}


def evaluate(pos: list[Clip], neg: list[Clip], streams: dict, phrases: list[str], tolerance: float,
             near: list[Clip] = ()) -> dict:
    """``streams``: phrase → clip name → :func:`stream` (what the session listening for that phrase heard)."""
    out = {}
    for phrase in phrases:
        rows = score_positives(pos, streams[phrase], phrase, tolerance)["rows"]
        per = {c: summarise_positives([r for r in rows if r["condition"] == c]) for c in CONDITIONS}
        per_variant = {v: summarise_positives([r for r in rows if r["variant"] == v]) for v in ("alone", "question")}
        out[phrase] = {"positives": {"all": summarise_positives(rows), "per_condition": per,
                                     "per_variant": per_variant},
                       "negatives": score_negatives(neg, streams[phrase], phrase, tolerance)}
        if near:
            n = score_negatives(list(near), streams[phrase], phrase, tolerance)
            out[phrase]["near_misses"] = {"lines": sum(c.meta["lines"] for c in near), "utterances": n["utterances"],
                                          "woken": n["false_wakes"], "wakes": n["wakes"]}
    return out


def targets(results: dict) -> list[dict]:
    """Each phrase/condition over a target, with why."""
    out = []
    for phrase, r in results.items():
        for cond, s in r["positives"]["per_condition"].items():
            if s["miss_rate"] is not None and s["miss_rate"] > MISS_TARGET:
                out.append({"phrase": phrase, "condition": cond, "metric": "miss_rate", "value": s["miss_rate"],
                            "target": MISS_TARGET, "why": [m["why"] for m in s["misses"]]})
        n = r["negatives"]
        if n["per_hour_audio"] is not None and n["per_hour_audio"] > FALSE_WAKE_TARGET:
            out.append({"phrase": phrase, "metric": "false_wakes_per_hour", "value": n["per_hour_audio"],
                        "target": FALSE_WAKE_TARGET, "why": [f"{w['file']}: {w['text']!r}" for w in n["wakes"]]})
    return out


# ------------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specvoice bench wake", description=__doc__.split("\n\n")[0])
    ap.add_argument("--phrases", default=",".join(PHRASES), help="comma-separated wake phrases")
    ap.add_argument("--hours", type=float, default=1.0, help="negative audio to stream, hours (≥ 1 for the target)")
    ap.add_argument("--voices", type=int, default=len(VOICES), help=f"voices saying the phrase (≤ {len(VOICES)})")
    ap.add_argument("--tolerance", type=float, default=None, help="the matcher's (default: engine.answer.wake's)")
    ap.add_argument("--quick", action="store_true", help="2 voices, 0.05 h of negatives: checks the script")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="configuration override")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--streams", default="out/wake_streams.json",
                    help="where the heard event streams are kept (phrase → clip → events; not committed)")
    ap.add_argument("--rescore", action="store_true",
                    help="score the streams kept by an earlier run with the same arguments instead of decoding")
    a = ap.parse_args(argv)
    from engine.answer.wake import DEFAULT_TOLERANCE
    from engine.config import load_config
    from engine.runtime import Runtime

    phrases = [p.strip() for p in a.phrases.split(",") if p.strip()]
    n_voices = 2 if a.quick else max(2, min(a.voices, len(VOICES)))
    hours = 0.05 if a.quick else a.hours
    tolerance = DEFAULT_TOLERANCE if a.tolerance is None else a.tolerance
    started = time.monotonic()
    cfg = load_config(sets=a.set + ["asr.revise_max_s=0"])
    rng = random.Random(SEED)

    from bench.make_speech import Voices, corpus_sentences

    voices = Voices(SEED)
    mt, gsm = corpus_sentences()
    babble_text = list(reversed(mt + gsm)) * 4
    cond = Conditions(voices, rng, babble_text)
    pos = positives(voices, cond, phrases, n_voices, rng)
    neg = committed_negatives()
    from audio.io import load_audio

    for c in neg:
        c.audio = load_audio(c.path)
    have = sum(len(c.audio) for c in neg) / SR
    if a.quick:
        neg = neg[:3]
        have = sum(len(c.audio) for c in neg) / SR
    neg += synthesised_negatives(voices, cond, max(0.0, hours * 3600 - have), rng, n_voices if a.quick else
                                 len(VOICES))
    near = near_misses(voices, cond, rng, len(VOICES))
    synth_s = time.monotonic() - started
    print(f"wake: {len(pos)} positive clips, {len(neg)} negative files "
          f"({sum(len(c.audio) for c in neg) / SR / 3600:.2f} h), made in {synth_s:.0f} s", flush=True)

    rt = Runtime(cfg, progress=False)
    # with the phrase in the prompt what the ASR hears depends on the phrase listened for: a positive is streamed
    # for its own phrase, the rest once per phrase; without it, every clip once for all phrases
    bias = cfg.duplex.wake_prompt
    heard: dict[str, dict[str, dict]] = {p: {} for p in (phrases if bias else [""])}
    jobs = [(c.phrase if bias else "", c) for c in pos] + [(p, c) for c in near + neg for p in heard]
    compute = 0.0
    kept = Path(a.streams)
    if a.rescore:
        heard = json.loads(kept.read_text(encoding="utf-8"))
        missing = [(p, c.name) for p, c in jobs if c.name not in heard.get(p, {})]
        if missing:
            raise SystemExit(f"{kept} lacks {len(missing)} streams of this run (e.g. {missing[0]}): run without "
                             "--rescore")
        compute = sum(s["compute_s"] for p in heard.values() for s in p.values())
    for i, (phrase, c) in enumerate([] if a.rescore else jobs):
        heard[phrase][c.name] = s = stream(rt, cfg, c.audio, phrase)
        compute += s["compute_s"]
        if i % 25 == 0:
            print(f"  {i + 1}/{len(jobs)} {c.name} {phrase!r} ({time.monotonic() - started:.0f} s)", flush=True)
    if not a.rescore:
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(json.dumps(heard), encoding="utf-8")
    streams = {p: heard[p if bias else ""] for p in phrases}
    results = evaluate(pos, neg, streams, phrases, tolerance, near)
    sweep = {}
    for tol in TOLERANCES:
        r = evaluate(pos, neg, streams, phrases, tol, near)
        sweep[str(tol)] = {p: {"miss_rate": r[p]["positives"]["all"]["miss_rate"],
                               "false_wakes": r[p]["negatives"]["false_wakes"],
                               "false_wakes_per_hour": r[p]["negatives"]["per_hour_audio"],
                               "near_misses_woken": r[p]["near_misses"]["woken"]} for p in phrases}
    doc = {
        "benchmark": "wake", "complete": not a.quick and hours >= 1.0 and n_voices >= 10, "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "seconds": round(time.monotonic() - started, 1), "synthesis_s": round(synth_s, 1),
        "asr_cpu_s": round(compute, 1),
        "config": {"asr_model_role": cfg.asr.model_role, "min_chunk_s": cfg.asr.min_chunk_s,
                   "predgen_source": cfg.llm.predgen_source, "vad_min_silence_s": cfg.vad.min_silence_s,
                   "revise_max_s": 0.0, "tolerance": tolerance, "wake_prompt": bias,
                   "pacing": "as consumed, one 0.1 s block at a time",
                   "overrides": a.set},
        "phrases": phrases, "voices": n_voices, "conditions": list(CONDITIONS),
        "targets": {"miss_rate_max": MISS_TARGET, "false_wakes_per_hour_max": FALSE_WAKE_TARGET},
        "positives": {"clips": len(pos), "audio_s": round(sum(len(c.audio) for c in pos) / SR, 1)},
        "near_misses": {"files": len(near), "lines": sum(c.meta["lines"] for c in near)},
        "negatives": {"files": len(neg), "audio_h": round(sum(len(c.audio) for c in neg) / SR / 3600, 3),
                      "committed_files": sum(1 for c in neg if c.path is not None),
                      "synthesised_files": sum(1 for c in neg if c.path is None)},
        "results": results, "over_target": targets(results), "tolerance_sweep": sweep,
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for phrase, r in results.items():
        p, n = r["positives"]["all"], r["negatives"]
        print(f"{phrase!r}: miss {p['miss_rate']:.1%} ({p['missed']}/{p['clips']}), added updates p50 "
              f"{p['added_updates_p50']} max {p['added_updates_max']}, added audio p50 {p['added_audio_s_p50']} s; "
              f"false wakes {n['false_wakes']} in {n['audio_h']} h ({n['per_hour_audio']}/h)")
    print(f"wrote {out} in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
