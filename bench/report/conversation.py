"""Sections on conversational speech (``bench conversation``): the generated conversation and real recordings,
languages other than English and language identification, English under ``asr.language=auto``, and what a live
final loses by not hearing the future (``bench causal-final``).

Each section returns Markdown (no trailing newline) and reads only what it prints; a section whose result file is
not committed returns ""."""

from __future__ import annotations

from pathlib import Path

from bench.report.asr import asr_stream_label
from bench.report.markdown import num, produced_by, sec, signed, table
from bench.report.results import Results


def language_file(folder: Path) -> str:
    """The result that holds asr.language=auto: "language" (the language job's) where it exists, else the older
    runs' "conversation", which measured it with the English corpora."""
    return "language" if (folder / "language.json").exists() else "conversation"


def _compute_split(x: dict) -> str:
    """Compute ÷ audio: "total (live …, second pass …)", i.e. the updates and finals and the second pass's
    decodes, or the total alone for a run that did not split it."""
    if x.get("live_compute_ratio") is None:
        return num(x.get("compute_ratio"), 3)
    return (f"{num(x['compute_ratio'], 3)} (live {num(x['live_compute_ratio'], 3)}, second pass "
            f"{num(x['second_pass_compute_ratio'], 3)})")


def _conv_row(label: str, x: dict) -> list[str]:
    lat = x["final_latency_s"]
    return [label, _compute_split(x), f"{sec(lat['p50'])} / {sec(lat['p90'])}",
            f"{num(x['wer_vs_beam5'], 3)} ({signed(x['wer_delta_vs_offline_greedy'], 3)})",
            num(x.get("wer_vs_beam5_revised"), 3),
            num(x["offline_greedy_wer_vs_beam5"], 3),
            f"{num(x['wer_vs_ref'], 3)} ({signed(x['wer_delta_vs_offline_greedy_ref'], 3)})",
            num(x.get("wer_vs_ref_revised"), 3),
            f"{num(x['offline_greedy_wer_vs_ref'], 3)} / {num(x['offline_beam5_wer_vs_ref'], 3)}"]


CONV_HEAD = ["", "compute ÷ audio", "final p50 / p90", "final WER vs beam 5 (− offline greedy)",
             "revised vs beam 5", "offline greedy vs beam 5", "final WER vs text (− offline greedy)",
             "revised vs text", "offline greedy / beam 5 vs text"]


def section_conversation(r: Results) -> str:
    """Conversational and real speech (``conversation.json``, ``specvoice bench conversation``)."""
    if not (r.folder / "conversation.json").exists():
        return ""
    d = r("conversation")
    cfg = d["config"]
    parts = []
    for corpus, title in (("conversation", "Generated conversation (bench/data/conversation)"),
                          ("real", "Real recordings (bench/data/real_speech)")):
        c = d.get(corpus)
        if not c:
            continue
        rows = []
        for m, x in c["per_method"].items():
            rows.append(_conv_row(f"**all** ({m}, {num(x['audio_s'], 0)} s)", x))
        for cond, per in c.get("per_condition", {}).items():
            for m, x in per.items():
                rows.append(_conv_row(f"{cond} ({m})", x))
        for f in c["per_file"]:
            for m, x in f["methods"].items():
                if "error" in x:
                    rows.append([f"`{f['file']}` ({m})", "failed: " + x["error"]] + [""] * 7)
                    continue
                y = dict(x, offline_greedy_wer_vs_beam5=f["offline"].get("greedy_wer_vs_beam5"),
                         offline_greedy_wer_vs_ref=f["offline"].get("greedy_wer_vs_ref"),
                         offline_beam5_wer_vs_ref=f["offline"].get("beam5_wer_vs_ref"))
                if y["wer_vs_ref"] is None or y["offline_greedy_wer_vs_ref"] is None:
                    y["wer_delta_vs_offline_greedy_ref"] = None
                several = len(f["methods"]) > 1
                rows.append(_conv_row(f"`{f['file']}`" + (f" ({m})" if several else ""), y))
        parts.append(f"#### {title}\n\n{table(CONV_HEAD, rows)}")
    # the language job (language.json) measures asr.language=auto apart; older runs measured it in this one
    separate = language_file(r.folder) == "language"
    lang = r("language") if separate else d
    if separate:
        lcfg = lang["config"]
        when = (f"From {lcfg['measured_in']}" if lcfg.get("measured_in") else f"Measured apart ({lcfg['started']})")
        parts.append(f"""#### Languages other than English (`asr.language=auto`)

{when}; played {"in real time" if lcfg.get("realtime") else "as fast as it decodes"}.

{produced_by("language.json")}""")
    ml = lang.get("multilingual")
    if ml:
        mrows = []
        for m, x in ml["per_method"].items():
            for k, v in x["parts"].items():
                mrows.append([m, k, num(x.get("language_accuracy"), 2), num(v.get("stream_wer_vs_beam5"), 3),
                              num(v.get("stream_wer_vs_beam5_revised"), 3),
                              num(v.get("offline_greedy_wer_vs_beam5"), 3)])
        parts.append(f"""#### English → German read text (`{ml["file"]}`)

Language of each utterance as identified (`asr.language=auto`) and WER against offline beam 5 decoded in each part's
language:

{table(["method", "part", "utterances' language right", "final WER vs beam 5", "revised WER vs beam 5",
        "offline greedy vs beam 5"], mrows)}""")
    li = lang.get("langid")
    if li:
        off = li.get("offline", {})
        if li.get("supported") and li.get("summary"):
            sm = li["summary"]
            conv = (li.get("conversation") or {}).get("summary") or {}

            def acc2(x):  # accuracy over utterances of 2 s or more (older results: every utterance)
                return (x.get("utterances_2s") or {}).get("accuracy", x.get("utterance_accuracy", x.get("accuracy")))

            offh = li.get("offline_head") or {}
            lrows = [[k, str(v["files"]), str(v["utterances"]), num(acc2(v), 3),
                      num((conv.get("per_language") or {}).get(k, {}).get("accuracy"), 3),
                      num(off.get("per_language", {}).get(k), 3),
                      num(offh.get("per_language", {}).get(k), 3) if offh else "–"]
                     for k, v in sm["per_language"].items()]
            lrows.append(["**all**", str(len(li["files"])), str(sm["utterances"]), num(acc2(sm), 3),
                          num(acc2(conv), 3) if conv else "–", num(off.get("accuracy"), 3),
                          num(offh.get("accuracy"), 3) if offh else "–"])
            named = li.get("languages_named") or {}
            if named.get("summary"):
                nconv = (named.get("conversation") or {}).get("summary") or {}
                lrows.append([f"**all**, `asr.languages={named['asr.languages']}`", str(len(li["files"])),
                              str(named["summary"]["utterances"]), num(acc2(named["summary"]), 3),
                              num(acc2(nconv), 3) if nconv else "–", "–", "–"])
            last = li.get("last_window") or {}
            if last.get("summary"):
                lconv = (last.get("conversation") or {}).get("summary") or {}
                lrows.append(["**all**, `asr.language_pool=false` (each decode's own window)", str(len(li["files"])),
                              str(last["summary"]["utterances"]), num(acc2(last["summary"]), 3),
                              num(acc2(lconv), 3) if lconv else "–", "–", "–"])
            lid = table(["language", "files", "utterances", "identified right: each clip alone",
                         "identified right: speakers in one stream", "offline Whisper (per file)",
                         "offline Whisper + language-ID head (per file)"], lrows)
            if conv:
                lid += f"\n\nOne stream: {conv.get('clips', '')} clips, {li['conversation'].get('how', '')}."
            if last.get("summary"):
                lid += ("\n\nThe default rows give each decode its utterance's identification so far (its windows "
                        "pooled, `asr.language_pool`); the `asr.language_pool=false` row, in the same run, gives each "
                        "decode its own window's alone.")
        offl = off.get("how", "") + (f"; with the head: {li['offline_head']['how']}" if li.get("offline_head") else "")
        cap = li.get("captions") or {}
        if cap.get("supported"):
            crow = [[k, str(v["files"]), num(v["chrf"], 1), v["reference"]] for k, v in cap["per_language"].items()]
            apart = f", run apart on {cap['started'][:10]} with the same settings" if cap.get("started") else ""
            captxt = f"Captions into {cap['target']} (chrF against the references{apart}):\n\n" + table(
                ["source language", "utterances", "chrF", "reference"], crow)
        else:
            captxt = f"Captions into English: not measured ({cap.get('reason', 'not run')})."
        parts.append(f"""#### Language identification (espeak-ng French, German, Spanish, ≥ 2 s each)

{lid}

Offline: {offl}.

{captxt}""")
    dw = d.get("done_when", {})
    dwrows = [[k, signed(v.get("wer_vs_beam5_delta"), 3), signed(v.get("wer_vs_ref_delta"), 3),
               signed(v.get("revised_wer_vs_beam5_delta"), 3), signed(v.get("revised_wer_vs_ref_delta"), 3),
               sec(v.get("final_latency_p90_s")), _compute_split(v)]
              for k, v in dw.items() if isinstance(v, dict) and "wer_vs_beam5_delta" in v]
    mode = "in real time" if cfg.get("realtime") else "as fast as it decodes (latencies not meaningful)"
    methods = ", ".join(asr_stream_label(cfg, m) for m in cfg.get("methods", []) if m != "default")
    methods = f" Beside the default: {methods}." if methods else ""
    speed = _conversation_speed(d)
    body = "\n\n".join(parts)
    return f"""### Conversation and real speech (`specvoice bench conversation`)

The streaming transcript of disfluent, multi-voice speech (hesitation pauses mid-sentence, fillers, restarts,
backchannels, overlaps; clean, reverberant, babble and telephone-band versions of the same dialogues) and of real
recordings, against the text and against offline Whisper (greedy at temperature 0 and beam 5, in the same run);
fillers are removed from both sides before scoring. *Final* is the text of each utterance when its end of speech
is confirmed; *revised* is the text after the second pass (`asr.revise_mode`: `offline` re-decodes the stream in
consecutive 30 s windows from Whisper's seek position, as offline Whisper moves through a recording, once each
window's audio has been heard and at the end of the stream; `chains` re-decodes consecutive utterances together once a
pause completes them). Played {mode}; faster-whisper {cfg["versions"]["faster_whisper"]} on
{cfg["machine"]["cpu_count"]} cores.{methods}{speed}

{produced_by("conversation.json")}

{body}

Against the targets (final ≤ offline greedy + 0.02, revised ≤ + 0.01, against beam 5 and the text; final p90 ≤ 1
s;
compute ≤ 0.5× audio):

{table(["run", "final − greedy (beam 5)", "final − greedy (text)", "revised − greedy (beam 5)",
        "revised − greedy (text)", "final p90", "compute ÷ audio"], dwrows)}"""


def english_share(per_file: list[dict], method: str) -> tuple[int, int]:
    """(utterances identified as English, utterances with a language) of ``method`` over ``per_file`` rows."""
    langs = [lang for f in per_file for lang in (f["methods"].get(method, {}).get("languages") or []) if lang]
    return sum(lang == "en" for lang in langs), len(langs)


def section_language_english(r: Results) -> str:
    """What ``asr.language = auto`` costs English speech (``language_english.json``: the conversation job's English
    corpora, the default beside ``ar_language_auto`` in one run)."""
    if not (r.folder / "language_english.json").exists():
        return ""
    d = r("language_english")
    cfg = d["config"]
    rows = []
    for corpus, title in (("conversation", "generated conversation"), ("real", "real recordings")):
        c = d.get(corpus)
        if not c:
            continue
        for m, x in c["per_method"].items():
            en, n = english_share(c["per_file"], m)
            rows.append(_conv_row(f"{title} ({m}, `asr.language={cfg['settings'][m]['asr']['language']}`)", x)
                        + [f"{en} / {n}" if n else "–"])
    mode = "in real time" if cfg.get("realtime") else "as fast as it decodes (latencies not meaningful)"
    return f"""### English under `asr.language=auto` (`specvoice bench conversation`)

The English corpora of the conversation benchmark (the generated conversation and the English real recordings),
transcribed with the language fixed (`asr.language=en`, the default) and with each utterance's language identified
(`asr.language=auto`), side by side in one run, played {mode} (started {cfg["started"]}) on
{cfg["machine"]["cpu_count"]} cores ({cfg["machine"]["cpu_model"]}).{_conversation_speed(d)} Under `auto` the previous
utterance's audio is not kept as acoustic context (`asr.context_gap_s`): each utterance's language is identified on
its own audio. The last column counts the utterances identified as English.

{produced_by("language_english.json")}

{table(CONV_HEAD + ["utterances identified as English"], rows)}"""


def _conversation_speed(d: dict) -> str:
    """" The machine's speed in this run: …" from the default's decodes of the generated conversation (encoder
    seconds per second of window, decoder seconds per token), so that latencies of runs on a shared machine can be
    compared; "" when the run has none."""
    tot = {"encode_s": 0.0, "window_s": 0.0, "decode_s": 0.0, "tokens": 0}
    for f in (d.get("conversation") or {}).get("per_file", []):
        bt = f["methods"].get("default", {}).get("backend_totals") or {}
        for k in tot:
            tot[k] += bt.get(k) or 0
    if not tot["window_s"] or not tot["tokens"]:
        return ""
    return (f" The machine's speed in this run (the default's decodes of the generated conversation): the encoder "
            f"took {tot['encode_s'] / tot['window_s'] * 1000:.1f} ms per second of window, the decoder "
            f"{tot['decode_s'] / tot['tokens'] * 1000:.1f} ms per token; latency and compute scale with them.")


def section_causal_final(r: Results) -> str:
    """What a live final loses by not hearing the future (``conversation_causal.json``, ``specvoice bench
    causal-final``)."""
    if not (r.folder / "conversation_causal.json").exists():
        return ""
    d = r("conversation_causal")
    cfg = d["config"]
    rows = []
    for g, per in d["per_group"].items():
        for k, s in per.items():
            rows.append([f"**{g}**" if g == "all" else g, k,
                         f"{num(s['wer_vs_beam5'], 3)} ({signed(s['wer_delta_vs_offline_greedy'], 3)})",
                         f"{num(s['wer_vs_ref'], 3)} ({signed(s['wer_delta_vs_offline_greedy_ref'], 3)})"])
    meth = "\n".join(f"* `{k}`: {v}" for k, v in d["methods"].items())
    return f"""### What a live final loses by not hearing the future (`specvoice bench causal-final`)

A live final is decoded at the end of speech; offline Whisper hears each word with the audio after it. At every end
of speech of the `conversation.json` run (started {cfg["source_started"]}), offline Whisper (beam
{cfg["beam_size"]}, word timestamps) decodes all the audio heard so far (the last ≤ {num(cfg["window_s"], 0)} s),
plus a look-ahead, and keeps the words between the previous end of speech and this one: no compute or latency limit,
the whole past as context, only the future withheld. Deltas are over offline greedy of the same run (the
conversation target for a final: ≤ + 0.02).

{produced_by("conversation_causal.json")}

{meth}

{table(["group", "transcript", "WER vs beam 5 (− offline greedy)", "WER vs text (− offline greedy)"], rows)}"""
