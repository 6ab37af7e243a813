"""Sections on live captions: SSBD re-translation (``bench ssbd``), captions on speech (``bench caption``: the
1.5B and 0.5B caption models, sentence by sentence) and captions into English (``bench caption-prompt``).

Each section returns Markdown (no trailing newline) and reads only what it prints."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from bench.report.markdown import bold, num, produced_by, sec, signed, span, stem, table, times
from bench.report.results import Results, defaults


def section_ssbd(r: Results) -> str:
    m30, ap = r("ssbd_multi30k_qwen1.5b"), r("ssbd_asr_partials_qwen1.5b")
    dflt = defaults().caption

    def label(key: str) -> str:
        if key == "ar":
            return "AR re-translation"
        mm = re.fullmatch(r"ssbd_beta([\d.]+)(?:_(display_only_)?mask(\d+))?", key)
        beta, disp, k = mm.groups()
        s = f"SSBD β = {beta}"
        if k:
            s += f" + {'display-only ' if disp else ''}mask-{k}"
        is_def = (float(beta) == dflt.beta and k is not None and int(k) == dflt.mask_k
                  and bool(disp) == dflt.display_only_mask)
        return bold(s + " (the default)", True) if is_def else s

    def rows(d: dict, refs: bool) -> list[list[str]]:
        out = []
        for key, c in d["configs"].items():
            row = [label(key)]
            if refs:
                row += [num(c["bleu"]), num(c["chrf"])]
            row += [num(c["ne"], 3), "—" if key == "ar" else signed(100 * c["ne_change_vs_ar"], 0) + " %",
                    num(c["acceptance_A_over_D"]), num(c["accepted_share_A_over_O"]), num(c["output_tokens_per_s"]),
                    num(c["speedup_vs_ar"]), num(c["sequential_passes_speedup_vs_ar"])]
            out.append(row)
        return out

    head = ["configuration", "NE", "NE vs AR", "A/D", "A/O", "tokens/s", "wall speed-up", "sequential passes ÷"]
    beta_def = f"{dflt.beta:g}"
    b0 = ap["configs"]["ssbd_beta0.0"]
    b2 = ap["configs"][f"ssbd_beta{dflt.beta:.1f}"]
    wall = [c["speedup_vs_ar"] for k, c in m30["configs"].items() if k != "ar" and c["speedup_vs_ar"] > 1]
    bleus = [c["bleu"] for c in m30["configs"].values()]
    return f"""## SSBD re-translation (`specvoice bench ssbd`)

Each streaming update re-translates the grown source with the previous translation as the draft (one forward pass,
Eq. 5 bias β toward the draft, KV cache cropped at the first divergence, greedy AR from there), against AR
re-translation from scratch. NE = normalised erasure (flicker, lower is steadier); A/D = accepted ÷ drafted tokens;
A/O = accepted ÷ output tokens; "sequential passes ÷" = AR's LLM forward passes ÷ the configuration's: the speed-up
where a verification pass costs about one decode step (a GPU). mask-k trims the last k draft tokens before
verification; display-only mask-k keeps them in the draft and only hides them on screen until the source is final.

{produced_by("ssbd_multi30k_qwen1.5b.json", "ssbd_asr_partials_qwen1.5b.json")}

Multi30k (`{m30["input"]}`, {m30["items"]} sentences):

{table(["configuration", "BLEU", "chrF", *head[1:]], rows(m30, True))}

On real streaming-ASR partials ({ap["items"]} spoken MT-Bench questions, `{ap["input"]}`, no references):

{table(head, rows(ap, False))}

On this CPU a batched pass is cheaper per token than decoding but not free, so the wall-clock gain
({span(wall, unit="×")} on Multi30k) is smaller than the pass count suggests. On the ASR partials the unbiased draft is
{times(b0["speedup_vs_ar"])} wall (the ASR's self-corrections make it a poor one), β = {beta_def}
{times(b2["speedup_vs_ar"])}. The embedded Qwen-Coder is a weak translator (BLEU {span(bleus)}); any better GGUF plugs
in with `--model llm_target=PATH`."""


CAPTION_HEAD = ["answers instead of translating (all / of the questions and commands)", "ASR misheard",
                "chrF vs references", "chrF − AR", "displayed NE", "NE ÷ AR", "guard re-translations",
                "final transcript → caption p50 / p90", "EOS → final caption p50 / p90", "first caption p50"]


def _caption_cells(d: dict, ar: dict | None) -> list[str]:
    return [f"{d['answers_instead_of_translating']} / {d['answers_among_questions_commands']}", str(d["asr_misheard"]),
            f"{num(d['chrf'])} ({d['chrf_files']})", "—" if ar is None else signed(d["chrf"] - ar["chrf"], 2),
            num(d["ne_mean"], 3), "1.00" if ar is None else num(d["ne_mean"] / ar["ne_mean"]),
            str(d["guard_triggers"]),
            f"{num(d['final_transcript_to_caption_s_p50'])} / {num(d['final_transcript_to_caption_s_p90'])} s",
            f"{num(d['eos_to_final_caption_s_p50'])} / {num(d['eos_to_final_caption_s_p90'])} s",
            sec(d["first_caption_s_p50"])]


def _caption_kinds(files: Iterable[str]) -> dict[str, int]:
    """How many caption-corpus files are Multi30k sentences (m30k), MT-Bench questions (mt) and voice questions (va)."""
    kinds = {"mt": 0, "va": 0, "m30k": 0}
    for f in files:
        kind = next((k for k in ("m30k", "mt", "va") if Path(f).name.startswith(k)), None)
        if kind:
            kinds[kind] += 1
    return kinds


def section_caption(r: Results) -> str:
    c = r("caption")
    chosen = c["mask_k_choice"]["chosen"]
    dflt = defaults().caption
    methods = c["methods"]
    show = [("ar", "AR re-translation"), ("ssbd", f"SSBD β {c['beta']}"),
            (f"ssbd_display_mask{chosen}", f"SSBD β {c['beta']} + display-only mask-{chosen}"),
            ("ssbd_partial", f"SSBD β {c['beta']}, partials translate the partial transcript"),
            (f"ssbd_partial_display_mask{chosen}",
             f"SSBD β {c['beta']}, partials translate the partial transcript + display-only mask-{chosen}")]

    def is_default(key: str) -> bool:
        return key == f"ssbd_display_mask{dflt.mask_k}" and dflt.method == "ssbd" and dflt.source == "hypothesis"

    rows = []
    for split in ("test", "val", None):
        src = c["splits"][split] if split else methods
        n = src["ar"]["files"]
        for key, label in show:
            d = src[key]
            lab = label + (" (default)" if is_default(key) else "")
            rows.append([f"{split or 'all'} ({n})", bold(lab, is_default(key)),
                         *_caption_cells(d, None if key == "ar" else src["ar"])])
    mask_rows = []
    for k in sorted(c["mask_k_choice"]["val_ne_vs_ar"], key=int):
        cells = [bold(k, int(k) == chosen)]
        for prefix in ("ssbd", "ssbd_partial"):
            key = f"{prefix}_display_mask{k}"
            cells += [num(c["splits"]["val"][key]["ne_vs_ar"]), num(c["splits"]["test"][key]["ne_vs_ar"]),
                      num(methods[key]["ne_vs_ar"]), sec(methods[key]["first_caption_s_p50"])]
        mask_rows.append(cells)
    ratios = ", ".join(num(c["mask_k_choice"]["val_ne_vs_ar"][k]) for k in sorted(c["mask_k_choice"]["val_ne_vs_ar"],
                                                                                  key=int))
    ks = sorted(c["mask_k_choice"]["val_ne_vs_ar"], key=int)
    val_n, test_n = c["splits"]["val"]["ar"]["files"], c["splits"]["test"]["ar"]["files"]
    val_refs, test_refs = c["splits"]["val"]["ar"]["chrf_files"], c["splits"]["test"]["ar"]["chrf_files"]
    kinds = _caption_kinds(c["files"])
    a, s = methods["ar"], methods["ssbd"]
    sd = methods[f"ssbd_display_mask{chosen}"]
    sp = methods["ssbd_partial"]
    test_sd = c["splits"]["test"][f"ssbd_display_mask{chosen}"]
    val_sd = c["splits"]["val"][f"ssbd_display_mask{chosen}"]
    mis = ", ".join(stem(f) for f in a["asr_misheard_files"])
    answered = sorted({stem(f) for k in ("ar", "ssbd", "ssbd_partial") for f in methods[k]["answer_files"]})
    answered_txt = ("No caption answered" if not answered else "Captions that answered: " + ", ".join(answered)) + (
        f"; the captions the rule flags against the spoken text ({mis}) translate what the ASR heard." if mis else ".")

    seg = r("caption_segment")
    segm = seg["methods"]
    seg_rows = []
    for key, label in (("ssbd_utterance", "whole utterance"), ("ssbd_sentence", "sentence by sentence")):
        d = segm[key]
        dm = segm[f"{key}_display_mask{seg['mask_k']}"]
        is_def = key == f"ssbd_{dflt.segment}"
        seg_rows.append([bold(label + (" (default)" if is_def else ""), is_def),
                         f"{num(d['chrf'])} ({d['chrf_files']})",
                         f"{num(d['ne_mean'], 3)} / {num(dm['ne_mean'], 3)}", str(d["guard_triggers"]),
                         f"{num(d['final_transcript_to_caption_s_p50'])} / "
                         f"{num(d['final_transcript_to_caption_s_p90'])} s",
                         f"{num(d['eos_to_final_caption_s_p50'])} / {num(d['eos_to_final_caption_s_p90'])} s"])
    seg_kinds = _caption_kinds(seg["files"])

    q = r("caption_qwen0.5b")
    qm = q["methods"]
    q_rows = []
    for key, label in [("ar", "AR re-translation"), ("ssbd", f"SSBD β {q['beta']}")] + [
            (f"ssbd_display_mask{k}", f"SSBD β {q['beta']} + display-only mask-{k}") for k in (3, chosen)]:
        d = qm[key]
        q_rows.append(["0.5B", label, *_caption_cells(d, None if key == "ar" else qm["ar"])])
    return f"""## Live captions on speech (`specvoice bench caption`)

English files in real time through the caption loop (VAD → streaming ASR → translator behind the fidelity guard →
display-only mask-k), into {c["target_language"]}. Corpus (`bench/data/caption`, sources in its SOURCES.md):
{kinds["mt"]} spoken MT-Bench questions, {kinds["va"]} spoken voice-assistant requests and {kinds["m30k"]} Multi30k
test sentences with their German references (Piper at several rates and espeak-ng voices); every third file of
each kind is the validation split ({val_n} files, {val_refs} references), the rest the test split ({test_n} files,
{test_refs} references). Both methods in one run, one after the other over all files, with nothing else at normal
priority. Display-only mask-k changes only what is shown, so the mask-k rows are the SSBD run shown with each k
(recomputed from the tokens of the updates it showed: NE and first caption exact for that run; translations and
latencies are the run's). mask-k is chosen on the validation split ({c["mask_k_choice"]["rule"]}: k = {chosen};
NE ÷ AR's for k = {ks[0]}…{ks[-1]}: {ratios}). Latencies are from the final transcript and from the end of speech.
"ASR misheard" counts captions the answer rule flags against the spoken text that translate a misrecognised
transcript faithfully (the transcript is far from the spoken text and shows no reply sign): they are the ASR's
errors, not answers, and are listed apart.

{produced_by("caption.json", "caption_segment.json", "caption_qwen0.5b.json")}

Qwen2.5-Coder-1.5B (the default caption model):

{table(["split", "method", *CAPTION_HEAD], rows)}

Every display-only mask-k of the same run (NE ÷ AR's on the validation / test / all files, and the first caption's
median over all files), partials translating the hypothesis of the final transcript and the partial transcript:

{table(["k", "hypothesis: NE ÷ AR val", "test", "all", "first caption p50", "partial transcript: NE ÷ AR val",
        "test", "all", "first caption p50"], mask_rows)}

With {a["chrf_files"]} references SSBD's final captions score as AR's (chrF {num(s["chrf"])} vs {num(a["chrf"])};
{signed(c["splits"]["test"]["ssbd"]["chrf_minus_ar"], 2)} on the test split,
{signed(c["splits"]["val"]["ssbd"]["chrf_minus_ar"], 2)} on the validation split): β = {c["beta"]} keeps some of the
draft where greedy AR would differ, and that costs no measurable quality (without the bias SSBD's output is AR's by
construction, tests/test_exactness_torch.py). Display-only mask-{chosen} (chosen on the validation split:
{num(val_sd["ne_vs_ar"])} there) brings the displayed flicker to {num(sd["ne_vs_ar"])} of AR's on all files —
{num(test_sd["ne_vs_ar"])} on test — at a first caption of {sec(sd["first_caption_s_p50"])} (p50;
{sec(s["first_caption_s_p50"])} unmasked). Partial captions translate the ASR's hypothesis of the final transcript
(`caption.source = hypothesis`, the default: the latest decode of the whole utterance, the final transcript if
speech ended now, where the partial transcript keeps words committed from shorter audio), so the draft the final
verifies already has the corrections the final decode makes: in the same run the final caption comes
{num(s["final_transcript_to_caption_s_p50"])} / {sec(s["final_transcript_to_caption_s_p90"])} after the final
transcript (p50 / p90) against {num(sp["final_transcript_to_caption_s_p50"])} /
{sec(sp["final_transcript_to_caption_s_p90"])} when partials translate the partial transcript, at the same chrF and
NE. SSBD's final caption comes sooner than AR's ({num(s["final_transcript_to_caption_s_p50"])} vs
{sec(a["final_transcript_to_caption_s_p50"])} at the median, {num(s["final_transcript_to_caption_s_p90"])} vs
{sec(a["final_transcript_to_caption_s_p90"])} at p90) but is not free at p90 on this CPU: the slowest finals are long
inputs (`runs` in the JSON) whose final transcript differs from the last translated partial, so the draft must be
verified under the changed prompt (one batched pass over prompt tail ⊕ draft: cheaper per token than decoding, but
not free on a CPU) and the rest decoded after the final transcript. Two things keep the final from waiting on stale
work: a partial verification cancelled by the final transcript stops inside its forward pass (llama.cpp's abort
callback, `engine.llm.llama_cpp_lm.LlamaCppLM.eval_cancellable`), and a partial cut short while decoding keeps the
rest of its draft after what it decoded (`engine.translate.biased_retranslation.next_draft`), so the final verifies a
whole translation instead of re-decoding it. {answered_txt} "Answer" = looks like a reply (not in the target language,
or a reply
sign) and misses the content of the *spoken* text (a low chrF against the Multi30k reference; for the questions and
commands, which have no human translation offline, fewer than half of hand-written German content keywords).

### Sentence by sentence vs the whole utterance

`caption.segment = sentence` translates a finished sentence once and keeps it while the ASR's text of it stays, and
re-translates only the last one. SSBD β {seg["beta"]}, one run over {len(seg["files"])} of the files
({seg_kinds["va"]} requests, {seg_kinds["mt"]} MT-Bench questions, {seg_kinds["m30k"]} Multi30k sentences); NE shown
whole / with display-only mask-{seg["mask_k"]}:

{table(["SSBD translates", "chrF (references)", f"displayed NE (mask-0 / mask-{seg['mask_k']})",
        "guard re-translations", "final transcript → caption p50 / p90", "EOS → final caption p50 / p90"],
       seg_rows)}

Steadier, but on this CPU not sooner at p90 (most slow finals are one long sentence), so the whole utterance is
the default.

### The 0.5B as the caption model

The same {len(q["files"])} files, AR and SSBD in one run (`caption_qwen0.5b.json`; the SSBD rows with mask-k
recomputed as above; its own validation rule would choose mask-{q["mask_k_choice"]["chosen"]}):

{table(["LLM", "method", *CAPTION_HEAD], q_rows)}

The 1.5B stays the caption model: the 0.5B scores {num(a["chrf"] - qm["ar"]["chrf"], 1)} chrF points less with AR
({num(qm["ssbd"]["chrf"])} with SSBD; the 1.5B {num(s["chrf"])}), answered
{qm["ssbd"]["answers_instead_of_translating"]}–{qm["ar"]["answers_instead_of_translating"]} of the
{len(q["files"])} inputs and its guard re-translated {qm["ar"]["guard_triggers"]}–{qm["ssbd"]["guard_triggers"]}.

{_caption_prompt(r)}"""


CAPTION_PROMPT_LABEL = {"no_pairs": "no worked pairs", "source_pairs": "worked pairs in the source language"}


def _caption_prompt(r: Results) -> str:
    """Captions into English with and without worked pairs (``caption_prompt.json``)."""
    d = r("caption_prompt")
    cfg, methods = d["config"], d["methods"]
    dflt = "source_pairs"
    rows = []
    for key, m in methods.items():
        for lang, x in m["per_language"].items():
            rows.append([lang, bold(CAPTION_PROMPT_LABEL.get(key, key) + (" (default)" if key == dflt else ""),
                                    key == dflt),
                         f"{x['quoted']} / {x['sentences']}", f"{x['echo']} / {x['sentences']}",
                         f"{x['untranslated']} / {x['sentences']}", num(x["chrf"], 1), sec(x["compute_s"], 1)])
    return f"""### Captions into English: worked pairs in the source language

Under `asr.language = auto` speech in another language is captioned from the language it was identified in, and the
target may be English. The prompt's worked pairs (a question, a request and a greeting) are written in the source
language with their translation; without them the model is shown no English output and often wraps its translation
in quote marks or repeats the instruction. One run, both prompts one after the other on the same
{cfg["sentences"]} written sentences of the language-ID corpus (`{cfg["input"]}`: German from Multi30k test 2016 with
its English reference, French and Spanish without one), {cfg["model"]}, {cfg["decoding"]}, the `{cfg["frame"]}`
frame. "Quote-wrapped": the caption opens with a quote mark the sentence does not; "echo": it repeats the prompt's
instruction; "untranslated": more of the source language's stop words and letters than English.

{produced_by("caption_prompt.json")}

{table(["source", "prompt", "quote-wrapped", "echo", "untranslated", "chrF (references)", "compute"], rows)}"""
