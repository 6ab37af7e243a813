"""Sections on the live session's audio path: long sessions (``bench soak``), talking over the assistant
(``bench duplex``: echo cancellation, barge-in, end of turn) and the VAD's near-talker gate (``bench vad-gate``).

Each section returns Markdown (no trailing newline) and reads only what it prints."""

from __future__ import annotations

import re

from bench.report.markdown import bold, num, pct, produced_by, sec, span, table
from bench.report.results import Results, defaults


def section_soak(r: Results) -> str:
    d = r("soak")
    w = d["windows"]
    win = ", ".join(f"{num(x['eos_to_final_s_p50'])} / {num(x['eos_to_final_s_p90'])}" for x in w)
    peaks = " / ".join(num(x["rss_mib_max"], 0) for x in w)
    rss = [s["rss_mib"] for s in d["samples"] if s["wall_s"] >= 300]
    rss_sorted = sorted(rss)
    median = rss_sorted[len(rss_sorted) // 2]
    caught = [e for e in d["backlog_events"] if not e["caught_up"]]
    at = re.search(r"rss_mib_at_(\d+)min", next(k for k in d if k.startswith("rss_mib_at_"))).group(1)
    behind = max(e["behind_s"] for e in d["backlog_events"])
    return f"""## Long sessions (`specvoice bench soak`)

{num(d["minutes"], 0)} minutes of the streaming corpus (dialogues, monologue, questions, jfk) cycled with short
silences, at {num(d["speed"], 0)}× real time through the `transcribe` pipeline (default ASR, `{d["asr_method"]}`),
while other work shared the CPU (compute ÷ audio {num(d["asr_compute_per_audio"])} overall).

{produced_by("soak.json")}

{table(["audio fed (s)", "audio transcribed (s)", "dropped (s)", "utterances", "errors", "backlog episodes",
        "largest backlog (s)", "RSS at 5 min (MiB)", "RSS at the end (MiB)", "RSS growth after 5 min, peak (MiB)"],
       [[num(d["audio_fed_s"], 0), num(d["audio_transcribed_s"], 0), num(d["dropped_audio_s"], 1), str(d["utterances"]),
         str(len(d["errors"])), str(len(caught)), num(d["max_backlog_s"], 1), num(d["rss_mib_at_5min"], 0),
         num(d["samples"][-1]["rss_mib"], 0), num(d["rss_growth_after_5min_mib"], 0)]])}

Per {num(w[0]["audio_min"][1] - w[0]["audio_min"][0], 0)}-minute window:

{table(["audio minutes", "utterances", "end of speech → final p50 / p90 / max (s)", "compute ÷ audio",
        "longest queue (s)", "peak RSS (MiB)"],
       [[f"{num(x['audio_min'][0], 0)}–{num(x['audio_min'][1], 0)}", str(x["utterances"]),
         f"{num(x['eos_to_final_s_p50'])} / {num(x['eos_to_final_s_p90'])} / {num(x['eos_to_final_s_max'])}",
         num(x["compute_per_audio"]), num(x["queue_s_max"], 1), num(x["rss_mib_max"], 0)] for x in w])}

No audio was dropped; recognition fell behind {len(caught)} times (at most {num(behind, 1)} s behind the live
source) and caught up. End of speech → final p50 / p90 per window: {win} s — the last window's p90 is
{num(abs(d["p90_last_minus_first_window_s"]))} s {"below" if d["p90_last_minus_first_window_s"] < 0 else "above"} the
first's. RSS: {num(d["rss_mib_at_5min"], 0)} MiB at {at} min, median {num(median, 0)} MiB after it,
{num(d["samples"][-1]["rss_mib"], 0)} MiB at the end, per-window peaks {peaks} MiB — no upward trend, but transient
peaks up to {num(d["rss_growth_after_5min_mib"], 0)} MiB above the {at}-minute sample (long utterances decoded in
pieces). The pipeline returns freed heap to the OS after each utterance (`malloc_trim`)."""


DETECTORS = (("raw", "raw microphone, project VAD"), ("clean", "echo-cancelled microphone, project VAD defaults"),
             ("clean_barge", "echo-cancelled, the barge-in detector's VAD rule alone"),
             ("barge_dtd", "echo-cancelled, barge-in detector (VAD or double talk; the default)"))


def section_duplex(r: Results) -> str:
    d = r("duplex")
    e = d["echo"]
    n_echo = e["answers_echo_only"] + e["answers_interrupted"]
    rows = []
    for key, label in DETECTORS:
        f, t = e["false_barge_ins"][key], e["true_barge_in"][key]
        lat = "—" if t["latency_p50_s"] is None else (
            f"{num(t['latency_p50_s'])} / {num(t['latency_p90_s'])} / {num(t['latency_max_s'])} s")
        rows.append([bold(label, key == "barge_dtd"), f"{f['answers_with_false_barge_in']} / {n_echo}",
                     f"{t['detected']} / {t['of']}", lat])
    w = e["wer_double_talk"]
    wrows = [["the user's interruption alone", pct(w["alone"], 1)],
             ["raw microphone", pct(w["raw"], 1)],
             ["echo-cancelled, playback stopped by the VAD rule alone", pct(w["clean"], 1)],
             ["echo-cancelled, playback stopped by the barge-in detector", pct(w["clean_barge_dtd"], 1)],
             ["raw microphone, the assistant talking over all of it", pct(w["raw_overlap"], 1)],
             ["echo-cancelled, the assistant talking over all of it", pct(w["clean_overlap"], 1)],
             ["headphones (no echo, APM on)", pct(w["headphones_clean"], 1)]]
    turn_file = "duplex_turn.json" if (r.folder / "duplex_turn.json").exists() else "duplex.json"
    t = r(turn_file[:-5])["turn"]
    dflt = defaults()
    trows = []
    for key, c in t["configs"].items():
        vad = re.fullmatch(r"vad_only_([\d.]+)s", key)
        smart = re.fullmatch(r"vad_smart_turn_([\d.]+)s", key)
        llm = re.fullmatch(r"vad_llm_([\d.]+)s", key)
        lab = (f"VAD silence {vad.group(1)} s" if vad else
               f"VAD + Smart Turn ({smart.group(1)} s hard limit)" if smart else
               f"VAD + the LLM's end-of-turn probability (threshold {num(t.get('eot_threshold'))}, "
               f"{num(t.get('eot_wait_s'), 1)} s without a verdict, {llm.group(1)} s hard limit)" if llm else key)
        is_def = (dflt.duplex.end_of_turn == "vad" and key == f"vad_only_{dflt.vad.min_silence_s:g}s") or (
            dflt.duplex.end_of_turn == "smart_turn" and key.startswith("vad_smart_turn")) or (
            dflt.duplex.end_of_turn == "llm" and key.startswith("vad_llm"))
        complete = (f"{num(c['complete_delay_p50_s'])} / {num(c['complete_delay_p90_s'])} s"
                    if "complete_delay_p50_s" in c else "—")
        conv = (t.get("conversation") or {}).get("configs", {}).get(key)
        conv_cut = "—" if conv is None else f"{pct(conv['cut_off_rate'], 1)} ({conv['cut_offs']})"
        trows.append([bold(lab + (" (default)" if is_def else ""), is_def),
                      f"{pct(c['cut_off_rate'], 1)} (after a filler {pct(c['cut_off_rate_filler'])}, after a plain "
                      f"comma {pct(c['cut_off_rate_plain'])})",
                      f"{num(c['delay_p50_s'])} / {num(c['delay_p90_s'])} / {num(c['delay_mean_s'])} s", complete,
                      str(c["turns_never_ended"]), conv_cut])
    n_hes = (t.get("conversation") or {}).get("hesitation_pauses", "—")
    conv_head = f"conversation set: hesitation pauses cut off (of {n_hes})"
    sel = t.get("eot_selection")
    llm_row = next((c for k, c in t["configs"].items() if k.startswith("vad_llm")), None)
    llm_text = "" if llm_row is None else (
        f"\n\nThe LLM's end-of-turn probability (`duplex.end_of_turn = llm`) reads p(`<|im_end|>`) after the user's "
        f"words from PredGen's own pass: at each pause the utterance is decoded as its final would be and the LLM "
        f"reads it; the verdict counts only once that compute (measured on this CPU, ASR + one LLM pass) has passed "
        f"in audio time. It cuts off {pct(llm_row['cut_off_rate'], 1)} of the mid-sentence pauses and ends complete "
        f"turns {sec(llm_row['complete_delay_p50_s'])} after their last word at the median "
        f"(p90 {sec(llm_row['complete_delay_p90_s'])})."
        + ("" if sel is None else
           f" Its threshold, {num(sel['chosen'])}, and its wait for a verdict, {sec(sel['chosen_wait_s'], 1)}, were "
           f"chosen on {sel['turns']} development turns of other sentences (seed {sel['seed']}): {sel['rule']}."))
    s = r("duplex_seeds")
    es = s["echo_seeds"]
    srows = []
    for label, x in [(", ".join(str(k) for k in es["seeds"]) + " pooled", es["pooled"])] + [
            (str(p["seed"]), p) for p in es["per_seed"]]:
        fb, tb = x["false_barge_ins"], x["true_barge_in"]

        def lat(k):
            y = tb[k]
            return (f"{y['detected']} / {y['of']}, {num(y['latency_p50_s'])} / {num(y['latency_p90_s'])} / "
                    f"{num(y['latency_max_s'])} s")
        srows.append([label, f"{x['answers_echo_only']} / {x['answers_interrupted']}",
                      f"{fb['barge_dtd']['answers_with_false_barge_in']} "
                      f"({fb['barge_dtd']['in_first_answer_of_session']})",
                      f"{fb['clean_barge']['answers_with_false_barge_in']} "
                      f"({fb['clean_barge']['in_first_answer_of_session']})",
                      lat("barge_dtd"), lat("clean_barge")])
    raw_all = es["pooled"]["false_barge_ins"]["raw"]
    p90s = [p["true_barge_in"]["barge_dtd"]["latency_p90_s"] for p in es["per_seed"]]
    st = next(c for k, c in t["configs"].items() if k.startswith("vad_smart_turn"))
    bd = e["barge_dtd"]
    return f"""## Duplex: talking over the assistant (`specvoice bench duplex`)

All in audio time, so machine load does not matter. {n_echo} simulated answers ({e["answers_echo_only"]} echo-only,
{e["answers_interrupted"]} interrupted by the user) played through synthetic rooms (varied delay, reverberation and
echo gain; the JSON's `echo.sessions`) and {t["turns"]} user turns ({t["paused_turns"]} with a mid-sentence pause).
Each barge-in detector stops the playback of its own copy of the session, so its numbers are those it has in charge.

{produced_by(*dict.fromkeys(["duplex.json", turn_file, "duplex_seeds.json"]))}

{table(["detector", "answers with a false barge-in (echo only)", "true barge-ins detected",
        "detection delay p50 / p90 / max"], rows)}

WER of the user's interruption:

{table(["microphone", "WER"], wrows)}

End of turn:

{table(["end of turn", "mid-sentence pauses cut off", "end-of-turn delay p50 / p90 / mean",
        "complete turns: delay p50 / p90", "turns never ended", conv_head], trows)}{llm_text}

Echo cancellation removes every false barge-in. The VAD alone is slow to notice an interruption for two reasons:
Silero needs a few hundred milliseconds of a word before its probability passes the threshold even on the user's
voice alone, and AEC3's suppressor, which cuts the bands the echo dominates during double talk, lowers it further.
Yet from the first chunk the cleaned audio stands far above the cleaned noise floor while the canceller removed only
a little of it (it removes much more of echo alone): that double-talk evidence (VAD probability at least
{num(bd["low_threshold"])}, at most {num(bd["max_suppression_db"], 0)} dB removed, at least
{num(bd["min_snr_db"], 0)} dB above the cleaned floor, after {num(bd["warmup_s"], 1)} s of far end) is the fast path.

A single seed holds few of the rare events, so the barge-in part also runs on more seeds of the same generator
(false barge-ins over all answers, in brackets those in a session's first answer, while AEC3 converges; the raw
microphone has a false barge-in in {raw_all["answers_with_false_barge_in"]} of
{es["pooled"]["answers_echo_only"] + es["pooled"]["answers_interrupted"]}):

{table(["seeds", "answers (echo only / interrupted)", "false barge-ins: barge-in detector", "its VAD rule alone",
        "true barge-ins, barge-in detector: detected, p50 / p90 / max", "its VAD rule alone"], srows)}

The VAD rule's false barge-ins all come while AEC3 converges, from echo leaking through it in a burst; the detector's
echo-envelope check during those first seconds of far end holds them back. The detector's p90 stays at
{span(p90s, unit=" s")} on every seed. Smart Turn cuts off fewer mid-sentence pauses at a lower median delay, but a
complete turn it misjudges waits for the hard limit (p90 {sec(st["delay_p90_s"])}), so it is opt-in
(`duplex.end_of_turn = smart_turn`)."""


def section_vad_gate(r: Results) -> str:
    """The VAD's near-talker gate swept on development conversations (``vad_gate.json``, ``specvoice bench
    vad-gate``)."""
    if not (r.folder / "vad_gate.json").exists():
        return ""
    d = r("vad_gate")
    rows = []
    for v in d["sweep"]:
        x = v["summary"]
        name = "off" if not v["near_snr_db"] else f"{num(v['near_snr_db'], 1)} dB"
        if v["near_snr_db"] == d["config_near_snr_db"]:
            name = f"**{name} (default)**"
        rows.append([name, x["utterances"], num(x["longest_utterance_s"], 1), num(x["speech_coverage_min"], 3),
                     num(x["speech_lost_s"], 2), x["files_losing_speech"], num(x["babble_only_s"], 1),
                     num(x["babble_only_excess_s"], 1), num(x["quiet_speech_lost_s"], 2)])
    x0 = d["sweep"][0]["summary"]
    seeds = ", ".join(str(s) for s in d["data"]["seeds"])
    return f"""## VAD near-talker gate (development conversations)

{produced_by("vad_gate.json")}

Silero hears background talkers as speech, so in babble a user's turn would not end until the transcriber's longest
utterance. `vad.near_snr_db` gates it (audio/vad.py): while the background is itself speech, a chunk is the user's
speech only when its level stands that many dB above the background's. The sweep runs the VAD alone (no ASR) over the
babble and clean versions of {x0["files"]} development dialogues (`bench.make_conversation`, seeds {seeds}: not the
held-out test set), {x0["utterances_quiet"]} utterances in quiet. "Lost" is near-talker speech inside a quiet
utterance that no babble-file utterance covers; "babble-only" is time inside utterances where nobody near speaks
(its excess over the same time in quiet). Rule: {d["rule"]}; chosen {num(d["chosen_near_snr_db"], 1)} dB (the
default is {num(d["config_near_snr_db"], 1)} dB).

{table(["near_snr_db", "utterances", "longest (s)", "min coverage", "lost (s)", "files losing speech",
        "babble-only (s)", "excess over quiet (s)", "quiet speech lost with the gate (s)"], rows)}"""
