"""Section on the wake phrase (``bench wake``, bench/wake_bench.py): misses, false wakes and decision latency of the
transcript matcher of engine/answer/wake.py.

Returns Markdown (no trailing newline) and reads only what it prints."""

from __future__ import annotations

from bench.report.markdown import num, pct, produced_by, table
from bench.report.results import Results


def _latency(s: dict) -> str:
    if s["added_updates_p50"] is None:
        return "—"
    return (f"{num(s['added_updates_p50'], 0)} / {num(s['added_updates_max'], 0)} updates; "
            f"{num(s['added_audio_s_p50'])} / {num(s['added_audio_s_p90'])} s")


def section_wake(r: Results) -> str:
    if not (r.folder / "wake.json").exists():
        return ""
    d = r("wake")
    res, neg_all = d["results"], d["negatives"]
    t = d["targets"]
    rows = []
    for phrase, x in res.items():
        n = x["negatives"]
        for cond, s in x["positives"]["per_condition"].items():
            pc = n["per_condition"].get(cond, {})
            rows.append([f"“{phrase}”", cond, f"{pct(s['miss_rate'], 1)} ({s['missed']}/{s['clips']})",
                         _latency(s), f"{pc.get('false_wakes', 0)} in {num(pc.get('audio_s', 0) / 3600)} h"])
        a = x["positives"]["all"]
        rows.append([f"**“{phrase}”**", "**all**", f"**{pct(a['miss_rate'], 1)}** ({a['missed']}/{a['clips']})",
                     _latency(a), f"**{n['false_wakes']}** in {num(n['audio_h'])} h = "
                                  f"**{num(n['per_hour_audio'])}/h** ({num(n['per_hour_speech'])}/h of speech)"])
    near = "; ".join(f"“{p}” {x['near_misses']['woken']} of {x['near_misses']['lines']}"
                     + (f" ({', '.join(repr(w['text']) for w in x['near_misses']['wakes'][:4])})"
                        if x["near_misses"]["wakes"] else "") for p, x in res.items())
    decided = [(p, x["positives"]["per_variant"]["question"]) for p, x in res.items()]
    early = ", ".join(f"“{p}” {q['question_clips_decided_on_a_partial']}/{q['question_clips']}" for p, q in decided)
    sweep = d["tolerance_sweep"]
    srows = [[f"{tol}" + (" (default)" if float(tol) == d["config"]["tolerance"] else "")]
             + [f"{pct(v[p]['miss_rate'], 1)} / {v[p]['false_wakes']}" for p in d["phrases"]]
             for tol, v in sweep.items()]
    over = d["over_target"]
    if over:
        verdict = "Over a target: " + "; ".join(
            f"“{o['phrase']}” {o.get('condition', 'negatives')} {o['metric']} {num(o['value'], 3)} "
            f"(target {num(o['target'], 2)}; e.g. {'; '.join(o['why'][:2])})" for o in over) + "."
    else:
        verdict = (f"Every phrase and condition is within the targets (miss ≤ {pct(t['miss_rate_max'])}, ≤ "
                   f"{num(t['false_wakes_per_hour_max'], 0)} false wake per hour).")
    if d["config"].get("wake_prompt"):
        streamed = ("With `duplex.wake_prompt` (the default) each utterance is decoded with the phrase listened for "
                    "named at the end of Whisper's prompt (“Okay computer is the wake phrase.”), as a listening "
                    "session does: each positive is streamed for its own phrase, every other file once per phrase,")
    else:
        streamed = ("Without the phrase in the prompt (`duplex.wake_prompt = false`) each file is streamed once, "
                    "for all phrases,")
    return f"""## Wake phrase (`python -m bench.wake_bench`)

Hands-free with `duplex.wake_phrase` set, only an utterance that starts with the phrase is answered; the phrase is
matched on the streaming transcript (a phonetic key of the words, weighted edit distance ≤ tolerance × the key's
length: engine/answer/wake.py). Each phrase is said by {d["voices"]} voices (Piper at several length/noise scales,
espeak-ng in several accents), alone and followed by a question, clean, reverberant, in babble and over the
telephone ({d["positives"]["clips"]} clips); the negatives are {num(neg_all["audio_h"])} h of speech with no phrase in
it ({neg_all["committed_files"]} committed recordings and synthesised sets, {neg_all["synthesised_files"]} two-voice
dialogues synthesised at run time). {streamed} through the
session's transcriber (VAD, streaming Whisper `{d["config"]["asr_model_role"]}`, an update per
{num(d["config"]["min_chunk_s"])} s of new audio, the second pass off) and the phrase is matched on the partials'
`{d["config"]["predgen_source"]}` text and the final, as the session does.

{produced_by("wake.json")}

Miss rate per condition; added latency from the end of the phrase to the decision, p50 / max in ASR updates after
the first update holding the whole phrase (0 = that update decided) and p50 / p90 in seconds of audio; false wakes
in the negatives of the same condition:

{table(["phrase", "condition", "missed", "added latency", "false wakes"], rows)}

Decided on a partial, before the final transcript, in the clips with a question (the answer is not delayed at
all): {early}. {verdict}

Near misses — everyday lines written to open like a phrase ("Okay, come with me…", "Hello, a system update…"),
each said once, not counted in the rate per hour — that woke: {near}.

Tolerance (miss rate / false wakes over all negatives), from the same event streams:

{table(["tolerance"] + [f"“{p}”" for p in d["phrases"]], srows)}"""
