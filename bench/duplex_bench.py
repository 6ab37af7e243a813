"""Full-duplex benchmark (``specvoice bench duplex``): echo cancellation, barge-in and end of turn on synthesised
conversations. Reproducible (seeded), no microphone, every time in audio time (not wall time).

Part A — talking over the assistant with the loudspeaker on. Sessions of assistant answers (Piper, the ``tts_voice``
role, length scale 0.9–1.15, two corpus sentences each) are played through a simulated echo path per session: delay
20–150 ms, a synthetic room impulse response (direct path + exponentially decaying noise tail, RT60 0.15–0.5 s),
gain 0.3–1.0, pink microphone noise at −55 dBFS. Some answers are interrupted by the user (espeak-ng voices, a
different speaker) at a known time 1–3 s into the answer. The microphone is processed in 30 ms blocks, as a live
loop would: WebRTC APM (``audio.aec.EchoCanceller``, 10 ms frames, far end interleaved, delay hint = true delay
± 20 ms) and the Silero VAD (``audio.vad.StreamingVAD``, the project defaults) on the raw and on the cleaned
microphone, plus a barge-in VAD on the cleaned microphone (the same Silero model and threshold, minimum speech
``--barge-min-speech``, ``duplex.barge_in_min_speech_s``, instead of ``vad.min_speech_s``), and the app's barge-in
detector (``audio.aec.BargeInDetector`` built from the ``[duplex]`` defaults: that VAD rule, or at once a chunk with
Silero p ≥ 0.15 that the canceller left within 10 dB of the raw microphone and ≥ 25 dB above the cleaned noise
floor, once 3 s of far end were heard; before that, the VAD rule also needs a raw-microphone chunk the far end's
echo envelope does not explain).
A barge-in is a detection raised while the assistant's audio (plus its echo tail, 0.3 s) is audible. When a
barge-in detector detects the user, playback stops 50 ms later (one output callback) — the far end and its echo are
cut there, as ``Player.stop`` would. Each of the two barge-in detectors has its own playback path (its own APM, its
own stop), so each one's latency and false barge-ins are those it would have in charge; the project-VAD rows listen
to the barge-in VAD's path.

    * false barge-ins: starts during echo-only answers (and before the user's onset in interrupted ones), per answer,
      raw mic vs cleaned mic; those in the first answer of each session (APM not yet converged) also counted alone.
    * true barge-in detection latency: audio time from the user's speech onset to the start event (cleaned mic).
    * WER of the user's interruption (faster-whisper Whisper base, greedy, Whisper English normalisation), on the
      user's audio alone, on the raw mic and on the cleaned mic, for the interruption as played (the assistant stops
      at the barge-in; both barge-in detectors' paths) and with the assistant talking over the whole interruption (a
      shadow APM that never stops playback), and with headphones (the APM running, the far end fed, no echo: does it
      hurt?). ``--no-wer`` skips it.

Part B — end of turn. User turns (Piper and espeak-ng voices; −55 dBFS pink noise) of three kinds: complete
sentences without a pause, sentences with a mid-sentence filler pause ("…like in, um, <0.6–1.5 s> Paris tomorrow?")
and with a plain pause after a comma. A paused turn is one sentence synthesised whole and split at its pause (so
both parts keep their natural prosody). Compared: VAD only (end after ``min_silence_s``: the project default
``vad.min_silence_s``, and 1.0 and 1.6 s for the trade-off) vs VAD + Smart Turn v3.2 (``audio.turn.TurnDetector`` as
the VAD's ``turn_hook``: asked at a 0.2 s pause, the turn ends if P(complete) ≥ ``duplex.turn_threshold``, else
after the hard limit).

    * cut-offs: paused turns whose utterance ended inside the mid-sentence pause.
    * end-of-turn delay: from the last speech sample of the turn to the audio time the "end" event is raised.

Piper's noise is sampled inside its ONNX graph from one seeded sequence, so part B's audio depends on whether part A
ran before it in the same process: compare runs made with the same ``--only``.

Run: ``python -m bench.duplex_bench [--sessions 10 --answers 9 --turns 60] [--out FILE]`` (defaults: ≥ 60 echo-only
answers, 30 interruptions, 60 turns). JSON out. ``--extra-seeds 2,3`` repeats part A (without WER) on more seeds
of the same generator and reports each and all pooled (``echo_seeds``): false barge-ins are rare events that a
single seed may or may not contain.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from audio.io import SAMPLE_RATE

from bench.settings import default_of

HERE = Path(__file__).resolve().parent
SR = SAMPLE_RATE  # Hz
BLOCK = 480  # 30 ms: three 10 ms APM frames
SEED = 20251123
ECHO_TAIL_S = 0.3
STOP_S = 0.05  # barge-in → playback silent (one output callback)
DETECTORS = {"raw": "project VAD (defaults) on the raw microphone",
             "clean": "project VAD (defaults) on the AEC-cleaned microphone",
             "clean_barge": "barge-in VAD (min speech --barge-min-speech) on the AEC-cleaned microphone; its start "
                            "stops playback",
             "barge_dtd": "audio.aec.BargeInDetector as the app builds it ([duplex] defaults): the VAD rule above or, "
                          "at once, Silero p >= 0.15 on a chunk the canceller left within 10 dB of the raw mic and "
                          ">= 25 dB over the cleaned floor (double talk; only after 3 s of far end in the session); "
                          "during those first 3 s the VAD rule also needs a raw-mic chunk louder than the far end's "
                          "echo envelope explains; on its own playback path (own APM), its barge-in stops that "
                          "playback"}
STOPPING = ("clean_barge", "barge_dtd")  # detectors that stop the playback of their own path

INTERRUPTIONS = [
    "Wait, stop, that is not what I asked.",
    "Hold on, can you repeat the last part?",
    "Sorry, I meant next Tuesday, not today.",
    "No, I need the cheaper option please.",
    "Stop, just give me the short answer.",
    "Actually, make it for four people instead.",
    "Hang on, what was the second number?",
    "Okay, thanks, that is enough for now.",
    "Excuse me, can you say that more slowly?",
    "No no, I was asking about the train times.",
    "Wait, how much does that cost in total?",
    "Sorry to interrupt, but I have to leave soon.",
]
# (first part ending at the pause, rest); kind "filler" or "plain"
PAUSED = [
    ("What is the weather going to be like in, um,", "Paris tomorrow?", "filler"),
    ("I would like to book a table for, um,", "two people tonight.", "filler"),
    ("Can you explain how a rainbow forms, um,", "after the rain?", "filler"),
    ("Please set a timer for, hmm,", "ten minutes.", "filler"),
    ("Could you remind me to call, uh,", "my sister on Friday?", "filler"),
    ("What time does the, um,", "pharmacy close today?", "filler"),
    ("I need a recipe for, hmm,", "a quick vegetable soup.", "filler"),
    ("How far is it from here to, uh,", "the central station?", "filler"),
    ("I need to buy some apples,", "a loaf of bread and some milk.", "plain"),
    ("When I get home tonight,", "remind me to water the plants.", "plain"),
    ("If it rains on Saturday,", "what else could we do with the kids?", "plain"),
    ("Before the meeting starts,", "can you summarise the last report?", "plain"),
]
COMPLETE = [
    "What is the weather going to be like in Paris tomorrow?",
    "Please set a timer for ten minutes.",
    "Can you tell me a joke about cats?",
    "How many hours are there in a week?",
    "Remind me to call my sister on Friday.",
    "What time does the pharmacy close today?",
    "Turn off the lights in the kitchen.",
    "How do I make a quick vegetable soup?",
]
# development sentences for choosing duplex.eot_threshold (--dev): none of them is in the lists above
DEV_PAUSED = [
    ("Can you find me a, um,", "cheap hotel near the beach?", "filler"),
    ("How long should I boil, uh,", "an egg for breakfast?", "filler"),
    ("Tell me the score of the, hmm,", "football match last night.", "filler"),
    ("Who wrote the book about, um,", "the old man and the sea?", "filler"),
    ("Add eggs, flour,", "and sugar to my shopping list.", "plain"),
    ("When my brother calls,", "tell him I am in a meeting.", "plain"),
]
DEV_COMPLETE = [
    "Can you find me a cheap hotel near the beach?",
    "How long should I boil an egg?",
    "Who wrote the old man and the sea?",
    "Add eggs and sugar to my shopping list.",
]
ESPEAK_VOICES = [("en-us", 165, 50), ("en-gb", 155, 40), ("en-us+f3", 170, 60), ("en+m3", 150, 35),
                 ("en-gb-x-rp", 160, 55), ("en-us+f2", 175, 65)]


# ------------------------------------------------------------------------------------------------------- signals
def pink(n: int, rng: np.random.Generator, dbfs: float) -> np.ndarray:
    from bench.make_speech import pink_noise

    return (pink_noise(max(n, 2), rng)[:n] * 10 ** (dbfs / 20)).astype(np.float32)


def room_ir(rng: np.random.Generator, rt60: float) -> np.ndarray:
    """Direct path 1.0 + exponentially decaying noise tail (energy 0.5 of the direct path), from 5 ms."""
    n = int(rt60 * SR)
    h = rng.standard_normal(n) * np.exp(-6.9 * np.arange(n) / n)
    h[: int(0.005 * SR)] = 0.0
    h *= np.sqrt(0.5 / (h ** 2).sum())
    h[0] = 1.0
    return h


class EchoPath:
    """Loudspeaker → microphone: ``delay_ms``, room ``ir``, ``gain``."""

    def __init__(self, rng: np.random.Generator):
        self.delay_ms = float(rng.uniform(20, 150))
        self.rt60 = float(rng.uniform(0.15, 0.5))
        self.gain = float(rng.uniform(0.3, 1.0))
        self.ir = room_ir(rng, self.rt60) * self.gain

    def __call__(self, far: np.ndarray, n_out: int) -> np.ndarray:
        d = int(self.delay_ms * SR / 1000)
        size = 1 << (len(far) + len(self.ir)).bit_length()
        y = np.fft.irfft(np.fft.rfft(far, size) * np.fft.rfft(self.ir, size), size)[: len(far) + len(self.ir)]
        y = np.concatenate([np.zeros(d), y])
        out = np.zeros(n_out, np.float32)
        m = min(n_out, len(y))
        out[:m] = y[:m]
        return out

    def describe(self) -> dict:
        return {"delay_ms": round(self.delay_ms, 1), "rt60_s": round(self.rt60, 3), "gain": round(self.gain, 3)}


def speech_span(a: np.ndarray, rel_db: float = -40.0) -> tuple[float, float]:
    """(first, last) voiced 10 ms frame of ``a`` in seconds (frames above ``rel_db`` of the loudest)."""
    from bench.make_speech import _frame_rms

    rms = _frame_rms(a)
    v = np.nonzero(rms > rms.max() * 10 ** (rel_db / 20))[0]
    return v[0] * 0.01, (v[-1] + 1) * 0.01


def split_at_pause(full: np.ndarray, approx: int) -> int:
    """Sample index in the middle of the longest silent run (< −35 dB of the loudest frame) within ±0.4 s of
    ``approx``; ``approx`` itself when there is none."""
    hop = 160
    n = len(full) // hop
    rms = np.sqrt(np.mean(full[: n * hop].reshape(n, hop) ** 2, 1))
    thr = rms.max() * 10 ** (-35 / 20)
    c = approx // hop
    best = None
    i = max(1, c - 40)
    while i < min(n - 1, c + 40):
        if rms[i] < thr:
            j = i
            while j < n and rms[j] < thr:
                j += 1
            if best is None or j - i > best[1] - best[0]:
                best = (i, j)
            i = j
        else:
            i += 1
    return approx if best is None else (best[0] + best[1]) // 2 * hop


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    return round(float(np.percentile(np.asarray(xs), q)), 3)


# ----------------------------------------------------------------------------------------------------- part A
def part_a(voices, vad_path: str, n_sessions: int, n_answers: int, interrupt_every: int, wer: bool,
           rng: np.random.Generator, prng: random.Random, barge_min_speech_s: float,
           barge_threshold: float) -> dict:
    from audio.aec import BargeInDetector, EchoCanceller, apm_available
    from audio.vad import StreamingVAD
    from bench.make_speech import corpus_sentences, level, trim
    from engine.config import DuplexConfig

    dcfg = DuplexConfig()

    ok, why = apm_available()
    if not ok:
        raise SystemExit(why)
    mt, gsm = corpus_sentences()
    pool = mt + gsm
    episodes: list[dict] = []
    sessions: list[dict] = []
    for s in range(n_sessions):
        path = EchoPath(rng)
        hint = path.delay_ms + float(rng.uniform(-20, 20))
        sessions.append({**path.describe(), "delay_hint_ms": round(hint, 1)})
        shadow = EchoCanceller(delay_ms=hint)  # the assistant never stops: WER with it talking over everything
        phones = EchoCanceller(delay_ms=hint)  # headphones: the same far end, no echo in the microphone
        # one playback path per stopping detector: its own APM, and its own barge-in stops its own playback
        aecs = {name: EchoCanceller(delay_ms=hint) for name in STOPPING}
        # detectors: the project's VAD (defaults) on the raw and on the cleaned mic and the barge-in VAD (shorter
        # minimum speech) on the cleaned mic, all on the clean_barge path; the app's BargeInDetector on its own path
        vads = {"raw": StreamingVAD(vad_path), "clean": StreamingVAD(vad_path),
                "clean_barge": StreamingVAD(vad_path, min_speech_s=barge_min_speech_s, threshold=barge_threshold)}
        dtd_fired: list[float] = []
        dtd = BargeInDetector(vad_path, dtd_fired.append, min_speech_s=dcfg.barge_in_min_speech_s,
                              threshold=dcfg.barge_in_threshold)
        t0 = 0.0  # session audio time of the episode start
        for k in range(n_answers):
            text = " ".join(prng.sample(pool, 2))
            far = level(trim(voices.piper(text, length_scale=prng.uniform(0.9, 1.15))), 0.5)
            interrupt = (k % interrupt_every) == interrupt_every - 1
            lead, tail = 0.6, 1.5
            n = int((lead + len(far) / SR + tail) * SR) // BLOCK * BLOCK
            far_full = np.zeros(n, np.float32)
            a0 = int(lead * SR)
            far_full[a0:a0 + len(far)] = far
            user = np.zeros(n, np.float32)
            u_on = u_end = None
            utext = ""
            if interrupt:
                utext = prng.choice(INTERRUPTIONS)
                v, rate, pitch = prng.choice(ESPEAK_VOICES)
                u = level(trim(voices.espeak_ng(utext, voice=v, rate=rate, pitch=pitch)), prng.uniform(0.25, 0.5))
                u0 = a0 + int(prng.uniform(1.0, min(3.0, max(1.0, len(far) / SR - 1.0))) * SR)
                m = min(len(u), n - u0)
                user[u0:u0 + m] = u[:m]
                on, off = speech_span(u)
                u_on, u_end = u0 / SR + on, u0 / SR + off
            noise = pink(n, rng, -55.0)
            mic_full = path(far_full, n) + user + noise
            far_play = {name: far_full.copy() for name in STOPPING}
            mic = {name: mic_full.copy() for name in STOPPING}
            cleaned = {name: np.zeros(n, np.float32) for name in STOPPING}
            stop_at: dict[str, float | None] = {name: None for name in STOPPING}
            starts: dict[str, list[float]] = {name: [] for name in DETECTORS}
            shadow_out, phones_out = (np.zeros(n, np.float32) for _ in range(2))
            mic_phones = user + noise
            for pos in range(0, n, BLOCK):
                b = slice(pos, pos + BLOCK)
                for name in STOPPING:
                    cleaned[name][b] = aecs[name].process_duplex(far_play[name][b], mic[name][b])
                shadow_out[b] = shadow.process_duplex(far_full[b], mic_full[b])
                phones_out[b] = phones.process_duplex(far_full[b], mic_phones[b])
                t_emit = (pos + BLOCK) / SR
                for name, vad in vads.items():
                    for ev in vad(mic["clean_barge"][b] if name == "raw" else cleaned["clean_barge"][b]):
                        if ev.kind == "start":
                            starts[name].append(t_emit)
                dtd.far_level(far_play["barge_dtd"][b], t0 + pos / SR)
                if dtd(cleaned["barge_dtd"][b], t0 + t_emit, mic["barge_dtd"][b]):
                    starts["barge_dtd"].append(t_emit)
                for name in STOPPING:
                    if interrupt and stop_at[name] is None and starts[name] and starts[name][-1] >= u_on:
                        stop_at[name] = t_emit + STOP_S
                        cut = int(stop_at[name] * SR)
                        fp = far_play[name]
                        fade = np.linspace(1.0, 0.0, 80, dtype=np.float32)
                        fp[cut:cut + 80] *= fade[: len(fp[cut:cut + 80])]
                        fp[cut + 80:] = 0.0
                        mic[name] = path(fp, n) + user + noise
            echo_end = (a0 + len(far)) / SR + path.delay_ms / 1000 + ECHO_TAIL_S
            audible_end = {}  # per detector: the end of the echo on the path it listens to
            for name in DETECTORS:
                st = stop_at["barge_dtd" if name == "barge_dtd" else "clean_barge"]
                audible_end[name] = echo_end if st is None else min(echo_end,
                                                                    st + path.delay_ms / 1000 + ECHO_TAIL_S)
            ep = {"session": s, "answer": k, "t0": round(t0, 2), "answer_s": round(len(far) / SR, 2),
                  "interrupt": interrupt, "first_in_session": k == 0}
            for name in DETECTORS:
                limit = u_on if interrupt else audible_end[name]
                ep[f"false_{name}"] = sum(1 for t in starts[name] if lead <= t <= min(limit, audible_end[name]))
            if interrupt:
                ep.update(user_text=utext, user_onset_s=round(u_on, 3))
                for name in STOPPING:
                    key = "stopped_at_s" if name == "clean_barge" else f"stopped_at_{name}_s"
                    ep[key] = round(stop_at[name], 3) if stop_at[name] else None
                for name in DETECTORS:
                    det = [t for t in starts[name] if t >= u_on]
                    ep[f"latency_{name}_s"] = round(det[0] - u_on, 3) if det and det[0] <= u_end else None
                if wer:
                    s0, s1 = max(0, int((u_on - 0.3) * SR)), min(n, int((u_end + 0.4) * SR))
                    ep["_audio"] = {"alone": (user + noise)[s0:s1], "raw": mic["clean_barge"][s0:s1],
                                    "clean": cleaned["clean_barge"][s0:s1],
                                    "clean_barge_dtd": cleaned["barge_dtd"][s0:s1],
                                    "raw_overlap": mic_full[s0:s1], "clean_overlap": shadow_out[s0:s1],
                                    "headphones_clean": phones_out[s0:s1]}
            episodes.append(ep)
            t0 += n / SR
    inter = [e for e in episodes if e["interrupt"]]
    res = {
        **barge_in_summary(episodes),
        "barge_in_min_speech_s": barge_min_speech_s, "barge_in_threshold": barge_threshold,
        "barge_dtd": {"min_speech_s": dcfg.barge_in_min_speech_s, "threshold": dcfg.barge_in_threshold,
                      "low_threshold": dtd.low_threshold, "max_suppression_db": dtd.max_suppression_db,
                      "min_snr_db": dtd.min_snr_db, "warmup_s": round(dtd.warmup * dtd.CHUNK / SR, 3),
                      "hold_s": dtd.hold, "explain_margin_db": dtd.explain_margin_db,
                      "explain_lag_s": dtd.explain_lag, "reverb_decay_db_s": round(dtd.decay * SR / dtd.CHUNK, 1)},
        "detectors": DETECTORS,
    }
    if wer and inter:
        res["wer_double_talk"] = wer_table(voices, inter)
    res["sessions"] = sessions
    res["episodes"] = [{k: v for k, v in e.items() if not k.startswith("_")} for e in episodes]
    return res


def barge_in_summary(episodes: list[dict]) -> dict:
    """False barge-ins and true barge-in latencies per detector over part A episodes (any number of seeds)."""
    echo_only = [e for e in episodes if not e["interrupt"]]
    inter = [e for e in episodes if e["interrupt"]]
    first = [e for e in episodes if e["first_in_session"]]
    res = {"answers_echo_only": len(echo_only), "answers_interrupted": len(inter), "false_barge_ins": {},
           "true_barge_in": {}}
    for name in DETECTORS:
        res["false_barge_ins"][name] = {
            "answers_with_false_barge_in": sum(1 for e in episodes if e[f"false_{name}"] > 0),
            "total_starts": sum(e[f"false_{name}"] for e in episodes),
            "per_answer": round(sum(e[f"false_{name}"] for e in episodes) / max(1, len(episodes)), 3),
            "echo_only_answers_with_false_barge_in": sum(1 for e in echo_only if e[f"false_{name}"] > 0),
            "in_first_answer_of_session": sum(e[f"false_{name}"] for e in first),
            "after_first_answer_of_session": sum(e[f"false_{name}"] for e in episodes if not e["first_in_session"])}
        lat = [e[f"latency_{name}_s"] for e in inter if e[f"latency_{name}_s"] is not None]
        res["true_barge_in"][name] = {"detected": len(lat), "of": len(inter), "latency_p50_s": pct(lat, 50),
                                      "latency_p90_s": pct(lat, 90), "latency_max_s": pct(lat, 100)}
    return res


def wer_table(voices, inter: list[dict]) -> dict:
    import jiwer
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    from engine.asr.faster_whisper_backend import FasterWhisperBackend

    cfg = voices.rt.cfg
    fw = FasterWhisperBackend(voices.rt.model("asr_target").path, device=cfg.asr.device,
                              compute_type=cfg.asr.compute_type, cpu_threads=1, beam_size=1)
    norm = EnglishTextNormalizer({})
    out = {}
    for cond in ("alone", "raw", "clean", "clean_barge_dtd", "raw_overlap", "clean_overlap", "headphones_clean"):
        refs, hyps = [], []
        for e in inter:
            refs.append(norm(e["user_text"]))
            hyps.append(norm(fw.transcribe_text(np.clip(e["_audio"][cond], -1, 1).astype(np.float32))))
            e.setdefault("hyp", {})[cond] = hyps[-1]
        out[cond] = round(jiwer.wer(refs, hyps), 4)
    out["note"] = ("alone: the user's audio + noise; raw/clean: the microphone as played (playback stops at the "
                   "clean_barge detector's barge-in); clean_barge_dtd: the cleaned microphone on the barge_dtd "
                   "detector's path (playback stops at its barge-in); *_overlap: the assistant keeps talking "
                   "through the whole interruption; "
                   "headphones_clean: the APM given the far end of a whole answer but no echo in the "
                   "microphone (headphones)")
    return out


# ----------------------------------------------------------------------------------------------------- part B
def make_turns(voices, n: int, rng: np.random.Generator, prng: random.Random, complete: list[str] | None = None,
               paused: list[tuple[str, str, str]] | None = None) -> list[dict]:
    """``n`` user turns, a third each complete / with a filler pause / with a plain pause, from ``complete`` and
    ``paused`` (default the test lists COMPLETE and PAUSED)."""
    from bench.make_speech import level, trim

    COMPLETE_, PAUSED_ = complete or COMPLETE, paused or PAUSED

    turns = []
    for i in range(n):
        use_piper = i % 2 == 0
        v, rate, pitch = ESPEAK_VOICES[i % len(ESPEAK_VOICES)]
        ls = prng.uniform(0.9, 1.2)

        def say(t: str) -> np.ndarray:
            return trim(voices.piper(t, length_scale=ls) if use_piper else voices.espeak_ng(t, v, rate, pitch))

        kind = ("complete", "filler", "plain")[i % 3]
        if kind == "complete":
            text = COMPLETE_[(i // 3) % len(COMPLETE_)]
            speech = say(text)
            pause_s, resume = 0.0, None
            pre = None
        else:
            cands = [p for p in PAUSED_ if p[2] == kind]
            first, rest, _ = cands[(i // 3) % len(cands)]
            text = f"{first} {rest}"
            full = say(text)
            k = split_at_pause(full, len(say(first)))
            pause_s = prng.uniform(0.6, 1.5)
            a, b = full[:k], full[k:]
            _, a_end = speech_span(a)
            b_on, _ = speech_span(b)
            gap = np.zeros(int(pause_s * SR), np.float32)
            speech = np.concatenate([a, gap, b])
            pre = a_end
            resume = (len(a) + len(gap)) / SR + b_on
            pause_s = resume - a_end  # the silence actually heard
        speech = level(speech, prng.uniform(0.3, 0.6))
        lead = 0.5
        x = np.concatenate([np.zeros(int(lead * SR), np.float32), speech, np.zeros(int(3.5 * SR), np.float32)])
        x = x + pink(len(x), rng, -55.0)
        _, s_end = speech_span(speech)
        turns.append({"text": text, "kind": kind, "voice": "piper" if use_piper else f"espeak:{v}",
                      "pause_s": round(pause_s, 3), "pause_from_s": None if pre is None else lead + pre,
                      "resume_s": None if resume is None else lead + resume, "end_s": lead + s_end, "_x": x})
    return turns


class LLMTurnJudge:
    """The answering LLM's end-of-turn verdict on a stretch of user audio, as the live pipeline computes it: the
    final's decode of the utterance up to the VAD's pause (the ASR backend of the configuration, its
    ``transcribe_final`` where it has one) and one LLM pass over the user's words in PredGen's chat prompt, reading
    p(end-of-turn token) (:meth:`engine.answer.predictive.PredGen.judge_turn`). Returns (p, text, compute seconds:
    decode + pass, measured on this CPU). Memoised per audio stretch (a threshold sweep asks again)."""

    def __init__(self, cfg=None):
        from engine.config import load_config
        from engine.runtime import Runtime, build_assistant

        cfg = cfg or load_config()
        rt = Runtime(cfg, progress=False)
        self.backend = rt.asr_backend()
        self.pg = build_assistant(dataclasses_replace_llm(cfg), rt, lambda ev: None).pg
        self.pg.warm()
        self.memo: dict = {}
        self.calls = 0

    def __call__(self, audio: np.ndarray) -> tuple[float, str, float]:
        from engine.asr.words import join_words

        key = (len(audio), hash(np.asarray(audio[:: 97], np.float32).tobytes()))
        if key not in self.memo:
            self.calls += 1
            t0 = time.perf_counter()
            fn = getattr(self.backend, "transcribe_final", None) or self.backend.transcribe
            text = join_words(fn(np.asarray(audio, np.float32), "").words).strip()
            p = self.pg.judge_turn(text) if text else 0.0
            self.memo[key] = (float(p if p is not None else 0.0), text, time.perf_counter() - t0)
        return self.memo[key]


def dataclasses_replace_llm(cfg):
    """``cfg`` answering with PredGen (the verdict is PredGen's)."""
    import dataclasses

    return dataclasses.replace(cfg, llm=dataclasses.replace(cfg.llm, answer_method="predgen"))


class SimulatedVerdict:
    """``duplex.end_of_turn = llm`` on the audio clock: when the VAD first asks about a silence (at its pause), the
    utterance's audio up to now goes to the :class:`LLMTurnJudge`; its verdict is available once the judge's
    measured compute time has passed in audio time (the audio goes on arriving in real time meanwhile), as the live
    pipeline's pause decode and PredGen's verification pass would deliver it. The live pipeline's pass also carries
    PredGen's candidate (a few tokens more), and a streaming hypothesis that already heard the whole utterance gives
    a verdict sooner; neither is modelled."""

    def __init__(self, judge: LLMTurnJudge, x: np.ndarray):
        self.judge, self.x, self.vad = judge, x, None
        self.asked: dict[int, tuple[float, float, str]] = {}  # silence start (samples) → (ready at s, p, text)

    def __call__(self, silence_start: float) -> float | None:
        v = self.vad
        key = int(round(silence_start * SR))
        if key not in self.asked:
            now = v.n / SR
            p, text, compute_s = self.judge(self.x[v.utt_start: v.n])
            self.asked[key] = (now + compute_s, p, text)
        ready, p, _ = self.asked[key]
        return p if v.n / SR >= ready else None


def run_turn(vad, t: dict) -> dict:
    x = t["_x"]
    ends, turn_ps = [], []
    for pos in range(0, len(x) - BLOCK + 1, BLOCK):
        for ev in vad(x[pos:pos + BLOCK]):
            if ev.kind == "end":
                ends.append((pos + BLOCK) / SR)
            elif ev.kind == "turn":
                turn_ps.append(round(ev.p, 3))
    cut = t["resume_s"] is not None and any(t["pause_from_s"] <= e < t["resume_s"] for e in ends)
    final = [e for e in ends if e >= t["end_s"]]
    return {"cut_off": bool(cut), "early_ends": sum(1 for e in ends if e < t["end_s"]),
            "delay_s": round(final[0] - t["end_s"], 3) if final else None, "turn_p": turn_ps}


def llm_vad(vad_path: str, judge: LLMTurnJudge, x: np.ndarray, hard_s: float, eot_threshold: float,
            wait_s: float):
    """The VAD of ``duplex.end_of_turn = llm`` (as :meth:`engine.runtime.Runtime.vad` builds it: ``wait_s`` =
    ``duplex.eot_wait_s``) over ``x``, its verdicts simulated (:class:`SimulatedVerdict`)."""
    from audio.vad import StreamingVAD

    sv = SimulatedVerdict(judge, x)
    vad = StreamingVAD(vad_path, min_silence_s=hard_s, pause_s=default_of("duplex.turn_pause_s"), verdict=sv,
                       turn_threshold=eot_threshold, unknown_silence_s=wait_s)
    sv.vad = vad
    return vad


def summarise_turns(rows: list[dict], turns: list[dict]) -> dict:
    paused = [r for r, t in zip(rows, turns) if t["resume_s"] is not None]
    delays = [r["delay_s"] for r in rows if r["delay_s"] is not None]
    complete = [r["delay_s"] for r, t in zip(rows, turns) if t["kind"] == "complete" and r["delay_s"] is not None]
    summary = {"cut_off_rate": round(sum(r["cut_off"] for r in paused) / max(1, len(paused)), 3),
               "cut_offs": sum(r["cut_off"] for r in paused),
               "delay_p50_s": pct(delays, 50), "delay_p90_s": pct(delays, 90),
               "delay_mean_s": round(statistics.fmean(delays), 3) if delays else None,
               "complete_delay_p50_s": pct(complete, 50), "complete_delay_p90_s": pct(complete, 90),
               "turns_never_ended": sum(1 for r in rows if r["delay_s"] is None)}
    for kind in ("filler", "plain"):
        sub = [r for r, t in zip(rows, turns) if t["kind"] == kind]
        summary[f"cut_off_rate_{kind}"] = round(sum(r["cut_off"] for r in sub) / max(1, len(sub)), 3)
    return summary


THRESHOLDS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
WAITS = (0.6, 1.0, 1.4)  # s: duplex.eot_wait_s candidates


def choose_eot_threshold(voices, vad_path: str, judge: LLMTurnJudge, n_turns: int, hard_s: float, seed: int) -> dict:
    """``duplex.eot_threshold`` and ``duplex.eot_wait_s`` chosen on development turns (DEV_COMPLETE / DEV_PAUSED,
    their own seed): the pair with the smallest median end-of-turn delay of complete turns among those cutting off
    ≤ 5 % of the paused ones (the fewest cut-offs when none does)."""
    turns = make_turns(voices, n_turns, np.random.default_rng(seed), random.Random(seed), DEV_COMPLETE, DEV_PAUSED)
    sweep = {}
    for wait in WAITS:
        for thr in THRESHOLDS:
            rows = [run_turn(llm_vad(vad_path, judge, t["_x"], hard_s, thr, wait), t) for t in turns]
            sweep[f"{thr:g}@{wait:g}s"] = dict(summarise_turns(rows, turns), threshold=thr, wait_s=wait)
    ok = [k for k, v in sweep.items() if v["cut_off_rate"] <= 0.05]
    key = (lambda k: (sweep[k]["complete_delay_p50_s"] or 9e9, sweep[k]["cut_off_rate"])) if ok else (
        lambda k: (sweep[k]["cut_off_rate"], sweep[k]["complete_delay_p50_s"] or 9e9))
    best = min(ok or list(sweep), key=key)
    return {"seed": seed, "turns": len(turns),
            "rule": "smallest complete-turn median delay with cut-offs <= 5 % (else the fewest cut-offs)",
            "sweep": sweep, "chosen": sweep[best]["threshold"], "chosen_wait_s": sweep[best]["wait_s"]}


def part_b(voices, vad_path: str, n_turns: int, rng, prng, vad_only_silences: list[float], hard_s: float,
           threshold: float, judge: LLMTurnJudge | None = None, eot_threshold: float | None = None,
           eot_wait_s: float | None = None) -> dict:
    from audio.turn import TurnDetector
    from audio.vad import StreamingVAD

    turns = make_turns(voices, n_turns, rng, prng)
    td = TurnDetector(threshold=threshold)
    configs = {f"vad_only_{s:g}s": dict(min_silence_s=s) for s in vad_only_silences}
    configs[f"vad_smart_turn_{hard_s:g}s"] = dict(min_silence_s=hard_s, turn_hook=td.complete_probability,
                                                 turn_threshold=threshold)
    if judge is not None:
        configs[f"vad_llm_{hard_s:g}s"] = "llm"
    res: dict = {"turns": len(turns), "paused_turns": sum(1 for t in turns if t["resume_s"] is not None),
                 "configs": {}}
    per_turn = [{k: v for k, v in t.items() if not k.startswith("_")} for t in turns]
    for name, kw in configs.items():
        if kw == "llm":
            rows = []
            for t in turns:
                vad = llm_vad(vad_path, judge, t["_x"], hard_s, eot_threshold, eot_wait_s)
                r = run_turn(vad, t)
                r["verdicts"] = [{"t": round(k / SR, 3), "ready_s": round(v[0], 3), "p": round(v[1], 4),
                                  "text": v[2]} for k, v in vad.verdict.asked.items()]
                rows.append(r)
            res["eot_threshold"], res["eot_wait_s"] = eot_threshold, eot_wait_s
        else:
            rows = [run_turn(StreamingVAD(vad_path, **kw), t) for t in turns]
        res["configs"][name] = summarise_turns(rows, turns)
        for pt, r in zip(per_turn, rows):
            pt[name] = r
    res["per_turn"] = per_turn
    return res


def part_conversation(vad_path: str, folder: Path, silences: list[float], hard_s: float, threshold: float,
                      judge: LLMTurnJudge | None, eot_threshold: float | None, eot_wait_s: float | None) -> dict:
    """The conversation set's hesitation pauses (``|`` in its scripts: 0.3–1.2 s inside a turn, often mid-sentence;
    bench/data/conversation, every condition): a pause is cut off when an utterance ends inside it. Each end-of-turn
    rule of part B runs over each whole dialogue, as a live session would hear it."""
    from audio.io import load_audio
    from audio.turn import TurnDetector
    from audio.vad import StreamingVAD

    manifest = json.loads((folder / "manifest.json").read_text())["files"]
    td = TurnDetector(threshold=threshold)
    rules = {f"vad_only_{s:g}s": lambda x, s=s: StreamingVAD(vad_path, min_silence_s=s) for s in silences}
    rules[f"vad_smart_turn_{hard_s:g}s"] = lambda x: StreamingVAD(
        vad_path, min_silence_s=hard_s, pause_s=default_of("duplex.turn_pause_s"), turn_hook=td.complete_probability,
        turn_threshold=threshold)
    if judge is not None:
        rules[f"vad_llm_{hard_s:g}s"] = lambda x: llm_vad(vad_path, judge, x, hard_s, eot_threshold, eot_wait_s)
    files = {name: load_audio(folder / name) for name in manifest}
    out: dict = {"files": len(files), "hesitation_pauses": sum(
        1 for m in manifest.values() for p in m["pauses"] if p["kind"] == "hesitation"), "configs": {}}
    for rule, make in rules.items():
        cut, per_file = 0, {}
        for name, x in files.items():
            vad = make(x)
            ends = []
            for pos in range(0, len(x) - BLOCK + 1, BLOCK):
                ends += [ev.t for ev in vad(x[pos:pos + BLOCK]) if ev.kind == "end"]
            hes = [p for p in manifest[name]["pauses"] if p["kind"] == "hesitation"]
            # an end event's time is the silence's start + the pad: inside the pause (with the pad's slack)
            pad = default_of("vad.speech_pad_s")
            n_cut = sum(any(p["start"] <= e - pad + 0.05 and e < p["start"] + p["seconds"] + pad for e in ends)
                        for p in hes)
            cut += n_cut
            per_file[name] = {"hesitations": len(hes), "cut_off": n_cut, "ends": len(ends)}
        out["configs"][rule] = {"cut_off_rate": round(cut / max(1, out["hesitation_pauses"]), 3), "cut_offs": cut,
                                "per_file": per_file}
    return out


# ------------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specvoice bench duplex", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=10, help="echo paths (one APM each)")
    ap.add_argument("--answers", type=int, default=9, help="assistant answers per session")
    ap.add_argument("--interrupt-every", type=int, default=3, help="every N-th answer is interrupted by the user")
    ap.add_argument("--turns", type=int, default=60, help="user turns for the end-of-turn part")
    ap.add_argument("--vad-only-silences", default=None,
                    help="min silence (s) of the VAD-only configs, comma-separated (default: vad.min_silence_s, "
                         "1.0 and 1.6)")
    ap.add_argument("--hard-limit", type=float, default=default_of("duplex.turn_max_silence_s"),
                    help="silence that always ends a turn with Smart Turn, s (default: duplex.turn_max_silence_s)")
    ap.add_argument("--turn-threshold", type=float, default=default_of("duplex.turn_threshold"),
                    help="Smart Turn P(complete) threshold (default: duplex.turn_threshold)")
    ap.add_argument("--barge-min-speech", type=float, default=default_of("duplex.barge_in_min_speech_s"),
                    help="minimum speech of the barge-in VAD on the cleaned mic, s (default: "
                         "duplex.barge_in_min_speech_s; the project VAD uses vad.min_speech_s)")
    ap.add_argument("--barge-threshold", type=float, default=default_of("duplex.barge_in_threshold"),
                    help="speech threshold of the barge-in VAD (default: duplex.barge_in_threshold)")
    ap.add_argument("--no-wer", action="store_true", help="skip the Whisper-base WER of the interruptions")
    ap.add_argument("--only", choices=["echo", "turn"], help="run one part")
    ap.add_argument("--no-llm", action="store_true",
                    help="end of turn without the LLM rule (duplex.end_of_turn = llm needs the ASR and the LLM)")
    ap.add_argument("--eot-threshold", type=float, default=None,
                    help="the LLM rule's threshold (default: chosen on the development turns, DEV_* lists)")
    ap.add_argument("--eot-wait", type=float, default=None,
                    help="the LLM rule's wait for a verdict, s (default: chosen with the threshold; "
                         "duplex.eot_wait_s when the threshold is given)")
    ap.add_argument("--dev-seed", type=int, default=SEED + 7, help="seed of the development turns")
    ap.add_argument("--conversation", default=str(HERE / "data" / "conversation"),
                    help="the conversation set whose hesitation pauses the end-of-turn rules are also run on")
    ap.add_argument("--no-conversation", action="store_true", help="skip the conversation set's hesitation pauses")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--extra-seeds", default="",
                    help="part A again on these seeds (comma-separated; no WER), reported per seed and pooled "
                         "with --seed's under echo_seeds")
    ap.add_argument("--out", default=str(HERE / "results" / "duplex.json"))
    a = ap.parse_args(argv)

    from bench.make_speech import Voices

    t_wall = time.perf_counter()
    voices = Voices(seed=a.seed)
    vad_path = str(voices.rt.model("vad").path)
    args = list(sys.argv[1:] if argv is None else argv)
    out: dict = {"command": " ".join(["specvoice bench duplex", *args]).strip(),
                 "seed": a.seed, "time_base": "audio time (s)"}
    if a.only != "turn":
        out["echo"] = part_a(voices, vad_path, a.sessions, a.answers, a.interrupt_every, not a.no_wer,
                             np.random.default_rng(a.seed), random.Random(a.seed), a.barge_min_speech,
                             a.barge_threshold)
    if a.only != "echo":
        # the product's end-of-speech silence is always among the VAD-only rows: the report marks it as the default
        sil = ([float(s) for s in a.vad_only_silences.split(",") if s] if a.vad_only_silences
               else sorted({default_of("vad.min_silence_s"), 1.0, 1.6}))
        judge = None if a.no_llm else LLMTurnJudge()
        eot, wait = a.eot_threshold, a.eot_wait
        selection = None
        if judge is not None and eot is None:
            selection = choose_eot_threshold(voices, vad_path, judge, max(12, a.turns // 2), a.hard_limit,
                                             a.dev_seed)
            eot, wait = selection["chosen"], selection["chosen_wait_s"]
        wait = default_of("duplex.eot_wait_s") if wait is None else wait
        out["turn"] = part_b(voices, vad_path, a.turns, np.random.default_rng(a.seed + 1), random.Random(a.seed + 1),
                             sil, a.hard_limit, a.turn_threshold, judge, eot, wait)
        if selection is not None:
            out["turn"]["eot_selection"] = selection
        if not a.no_conversation:
            out["turn"]["conversation"] = part_conversation(vad_path, Path(a.conversation), sil, a.hard_limit,
                                                            a.turn_threshold, judge, eot, wait)
    extra = [int(x) for x in a.extra_seeds.split(",") if x.strip()]
    if a.only != "turn" and extra:
        per_seed = [{"seed": a.seed, **barge_in_summary(out["echo"]["episodes"])}]
        pooled = [dict(e, seed=a.seed) for e in out["echo"]["episodes"]]
        for sd in extra:
            # a fresh Voices per seed: its Piper noise sequence starts from that seed, as in a run with --seed sd
            r = part_a(Voices(seed=sd), vad_path, a.sessions, a.answers, a.interrupt_every, False,
                       np.random.default_rng(sd), random.Random(sd), a.barge_min_speech, a.barge_threshold)
            per_seed.append({"seed": sd, **{k: r[k] for k in ("answers_echo_only", "answers_interrupted",
                                                               "false_barge_ins", "true_barge_in")},
                             "sessions": r["sessions"], "episodes": r["episodes"]})
            pooled += [dict(e, seed=sd) for e in r["episodes"]]
        out["echo_seeds"] = {"seeds": [a.seed, *extra], "pooled": barge_in_summary(pooled), "per_seed": per_seed,
                             "note": "part A on each seed (the first is the echo section's run; WER on it only); "
                                     "pooled: all seeds' episodes together"}
        out["echo_seeds"]["per_seed"][0].pop("episodes", None)  # the first seed's are in echo.episodes
    out["wall_s"] = round(time.perf_counter() - t_wall, 1)
    p = Path(a.out)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(out, indent=1))
    brief = {k: v for k, v in out.items() if k not in ("echo", "turn")}
    if "echo" in out:
        brief["echo"] = {k: v for k, v in out["echo"].items() if k != "episodes"}
    if "echo_seeds" in out:
        brief["echo_seeds"] = {"seeds": out["echo_seeds"]["seeds"], "pooled": out["echo_seeds"]["pooled"],
                               "per_seed": [{k: v for k, v in r.items() if k not in ("episodes", "sessions")}
                                            for r in out["echo_seeds"]["per_seed"]]}
    if "turn" in out:
        brief["turn"] = {k: v for k, v in out["turn"].items() if k != "per_turn"}
    print(json.dumps(brief, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
