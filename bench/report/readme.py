"""The README's results table: the block between its markers, and the README with that block replaced."""

from __future__ import annotations

from bench.report.conversation import english_share, language_file
from bench.report.gpu import readme_rows as gpu_readme_rows
from bench.report.markdown import bold, num, sec, table
from bench.report.results import Results

BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"


def render_readme_block(results: Results) -> str:
    """The README's results table (between the markers, markers included)."""
    v = results("voice")["methods"]
    p, c = results("assist_predgen")["answers"][0], results("assist_cascade")["answers"][0]
    s = results("asr_stream")["per_method"]
    cap = results("caption")
    capm = cap["methods"]
    k = cap["mask_k_choice"]["chosen"]
    d = results("duplex")["echo"]
    n_echo = d["answers_echo_only"] + d["answers_interrupted"]
    vf = len(results("voice")["files"])
    rows = [
        ["talk → spoken answer: end of speech → first answer audio, median of "
         f"{vf} spoken questions", f"cascade: {sec(v['cascade']['eos_to_first_audio_s_p50'])}",
         f"PredGen: {bold(sec(v['predgen']['eos_to_first_audio_s_p50']))}", "voice.json"],
        ["the same, on the embedded question", f"cascade: {sec(c['eos_to_first_audio_s'])}",
         f"PredGen: {bold(sec(p['eos_to_first_audio_s']))}", "assist_cascade.json, assist_predgen.json"],
        ["streaming ASR: compute ÷ audio", f"30 s window: {num(s['ar_padded']['compute_ratio'], 3)}",
         f"length-scaled: {bold(num(s['ar']['compute_ratio'], 3))}", "asr_stream.json"],
        ["streaming ASR: end of speech → final transcript, p90",
         f"30 s window: {sec(s['ar_padded']['final_latency_s']['p90'])}",
         f"length-scaled: {bold(sec(s['ar']['final_latency_s']['p90']))}", "asr_stream.json"],
        ["streaming ASR: WER against the spoken text",
         f"offline Whisper greedy: {num(s['ar']['offline_greedy_wer_vs_ref'], 3)}",
         f"streaming: {num(s['ar']['wer_vs_ref'], 3)}", "asr_stream.json"],
        ["live captions: displayed flicker (normalised erasure)", f"AR re-translation: {num(capm['ar']['ne_mean'], 3)}",
         f"SSBD + display-only mask-{k}: {bold(num(capm[f'ssbd_display_mask{k}']['ne_mean'], 3))}", "caption.json"],
        ["live captions: final transcript → caption, median",
         f"AR re-translation: {sec(capm['ar']['final_transcript_to_caption_s_p50'])}",
         f"SSBD: {bold(sec(capm['ssbd']['final_transcript_to_caption_s_p50']))}", "caption.json"],
        ["live captions: chrF against references", f"AR re-translation: {num(capm['ar']['chrf'])}",
         f"SSBD: {num(capm['ssbd']['chrf'])}", "caption.json"],
        ["speaker on: answers stopped by their own echo",
         f"raw microphone: {d['false_barge_ins']['raw']['answers_with_false_barge_in']} / {n_echo}",
         "echo-cancelled: "
         + bold(f"{d['false_barge_ins']['barge_dtd']['answers_with_false_barge_in']} / {n_echo}"),
         "duplex.json"],
    ]
    if (results.folder / "conversation.json").exists():
        cv = results("conversation")["conversation"]["per_method"]["default"]
        rows += [
            ["conversation (12 generated dialogues, clean/reverb/babble/telephone): WER against offline beam 5",
             f"offline Whisper greedy: {num(cv['offline_greedy_wer_vs_beam5'], 3)}",
             f"streaming final: {num(cv['wer_vs_beam5'], 3)}; after the second pass: "
             f"{num(cv.get('wer_vs_beam5_revised'), 3)}", "conversation.json"],
            ["conversation: end of speech → final transcript, p90 (compute ÷ audio)", "—",
             f"{sec(cv['final_latency_s']['p90'])} ({num(cv['compute_ratio'], 2)}"
             + (f": live {num(cv['live_compute_ratio'], 2)}, second pass {num(cv['second_pass_compute_ratio'], 2)}"
                if cv.get("live_compute_ratio") is not None else "") + ")", "conversation.json"],
        ]
        lang_file = language_file(results.folder)
        conv_all = results(lang_file)
        dl = conv_all.get("done_when", {}).get("langid") or {}
        if "last_window_utterance_2s_accuracy" in dl:
            def two(prefix: str) -> str:  # accuracy over utterances ≥ 2 s: each clip alone / the clips in one stream
                return (f"{num(dl[f'{prefix}utterance_2s_accuracy'], 3)} / "
                        f"{num(dl.get(f'{prefix}conversation_utterance_2s_accuracy'), 3)}")

            rows.append([f"language ID (`asr.language=auto`), "
                         f"{conv_all['langid']['summary']['utterances_2s']['utterances']} espeak-ng "
                         "French/German/Spanish utterances ≥ 2 s: identified right, each alone / speakers in one "
                         "stream", f"each decode's own window: {two('last_window_')}",
                         f"the utterance's windows pooled: {two('')}", f"{lang_file}.json"])
    if (results.folder / "language_english.json").exists():
        le = results("language_english")["conversation"]
        fixed, auto = le["per_method"]["default"], le["per_method"]["ar_language_auto"]
        en, n = english_share(le["per_file"], "ar_language_auto")
        rows.append(["the generated conversation under `asr.language=auto`: final WER against the text, final p90 "
                     "(utterances identified as English)",
                     f"`asr.language=en`: {num(fixed['wer_vs_ref'], 3)}, {sec(fixed['final_latency_s']['p90'])}",
                     f"`auto`: {num(auto['wer_vs_ref'], 3)}, {sec(auto['final_latency_s']['p90'])} ({en} / {n})",
                     "language_english.json"])
    if (results.folder / "tts.json").exists():
        tr = results("tts")
        tm = tr["results"]
        chosen = (tr.get("selection") or {}).get("chosen")
        pc = tm.get(chosen) if chosen else None
        rows += [
            [f"codec TTS (`tts.engine=codec`): Whisper-base CER, {tr['sentences']} held-out sentences",
             f"Piper: {num(tm['piper_teacher']['cer'], 1)} %", f"codec LM: {num(tm['ar']['cer'], 1)} %", "tts.json"],
        ]
        if pc is not None:
            rows.append([f"codec TTS: codes/s, PCG ({chosen}, chosen on validation) vs target-only",
                         f"target-only: {num(tm['ar']['tokens_per_s'], 0)}/s",
                         f"PCG: {num(pc['speedup_vs_target'], 2)}× (CER {num(pc['cer'], 1)} %)", "tts.json"])
    rows += gpu_readme_rows(results)
    rows = [[a, b, c_, f"`bench/results/{f}`" if "," not in f else ", ".join(f"`bench/results/{x.strip()}`"
                                                                              for x in f.split(","))]
            for a, b, c_, f in rows]
    cores = results("asr_stream")["config"]["machine"]["cpu_count"]
    return "\n".join([BEGIN, table([f"measured on a {cores}-core CPU (no GPU) unless a row names one", "baseline",
                                    "specvoice (default)", "from"], rows), END])


def update_readme(text: str, block: str) -> str:
    """``text`` with the marked block replaced. Raises ValueError when the markers are missing or out of order."""
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        raise ValueError(f"README.md lacks the {BEGIN} … {END} markers")
    return text[:i] + block + text[j + len(END):]
