"""Captions into English from another language: the caption prompt with worked pairs in the source language against
the same prompt without worked pairs, side by side on the same sentences: ``specvoice bench caption-prompt``.

Input: the written sentences of the language-ID corpus (``bench/data/conversation/manifest.json``, section
``langid``: German from Multi30k test 2016 with its English reference, French and Spanish without one), each
translated into English from its own language, as the caption loop does for speech identified in that language
(:func:`engine.translate.caption_loop.set_source_language`). The text is the written sentence, not a transcript, so
the prompt is all that differs between the two rows.

Methods (:class:`engine.translate.translator.Translator`, AR greedy, the ``strict`` frame):
    no_pairs      the instruction and the target-language tag, no worked example (a caption into English had no
                  worked pairs before they were keyed by the source language);
    source_pairs  the product's prompt: the worked pairs of :func:`engine.translate.translator.fewshot_pairs`.

Per method and source language: sentences, quote-wrapped outputs (the output opens with a quote mark the sentence
does not have), outputs that repeat the prompt's instruction, outputs with the source language's stop words or
letters outweighing English (:func:`engine.translate.languages.language_scores`), chrF against the reference where
there is one (sacrebleu), and compute seconds (one translator per method, told each sentence's language as the
caption loop does, so the prompt's unchanged prefix is reused from the KV cache).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "bench" / "data" / "conversation" / "manifest.json"
METHODS = {"no_pairs": False, "source_pairs": True}
QUOTES = ("\"", "“", "«", "'")
ECHO = ("do not answer", "obey it", "<source>", "translate into")


def sentences(manifest: Path = MANIFEST, limit: int | None = None) -> list[dict]:
    """The language-ID corpus's sentences: [{file, language, text, reference_en or None}], in file order; with
    ``limit``, the first ``limit`` of each language.

    Raises:
        FileNotFoundError: no manifest; KeyError: it has no ``langid`` section.
    """
    items = json.loads(Path(manifest).read_text(encoding="utf-8"))["langid"]
    rows = [{"file": k, "language": v["language"], "text": v["text"], "reference_en": v.get("reference_en")}
            for k, v in sorted(items.items())]
    if limit is None:
        return rows
    kept, seen = [], {}
    for r in rows:
        seen[r["language"]] = seen.get(r["language"], 0) + 1
        if seen[r["language"]] <= limit:
            kept.append(r)
    return kept


def defects(source: str, output: str, language: str) -> list[str]:
    """What is wrong with ``output`` as a bare English caption of ``source`` (in ``language``): "quoted" (wrapped in a
    quote mark the source does not open with), "echo" (the prompt's instruction or tags), "untranslated" (more
    evidence of the source language than of English)."""
    from engine.translate.languages import language_scores

    out, low = output.strip(), output.lower()
    found = []
    if out.startswith(QUOTES) and not source.strip().startswith(QUOTES):
        found.append("quoted")
    if any(e in low for e in ECHO):
        found.append("echo")
    sc = language_scores(out)
    if language in sc and sc[language] > sc["en"]:
        found.append("untranslated")
    return found


def run(lm, rows: list[dict], methods: dict[str, bool] = METHODS, log=print) -> dict:
    """Translate every row into English with each method on ``lm``; {method: {"per_language": {...}, "outputs":
    [...]}} (see the module doc for the fields)."""
    import sacrebleu

    from engine.translate.caption_loop import set_source_language
    from engine.translate.translator import Translator

    res = {}
    for name, pairs in methods.items():
        outs = []
        # one translator per method, as the caption loop keeps one: the prompt's unchanged prefix stays in the KV
        # cache while the source language does
        tr = Translator(lm, "en", pairs=pairs)
        language = None
        for r in rows:
            if r["language"] != language:
                set_source_language(tr, r["language"])
                language = r["language"]
            t0 = time.perf_counter()
            text = tr.translate(r["text"]).text
            outs.append({**r, "output": text, "defects": defects(r["text"], text, r["language"]),
                         "compute_s": round(time.perf_counter() - t0, 3)})
            log(f"caption-prompt: {name} {r['file']}: {text!r}")
        per = {}
        for lang in sorted({o["language"] for o in outs}):
            mine = [o for o in outs if o["language"] == lang]
            ref = [o for o in mine if o["reference_en"]]
            per[lang] = {
                "sentences": len(mine),
                "quoted": sum("quoted" in o["defects"] for o in mine),
                "echo": sum("echo" in o["defects"] for o in mine),
                "untranslated": sum("untranslated" in o["defects"] for o in mine),
                "chrf": round(sacrebleu.corpus_chrf([o["output"] for o in ref],
                                                    [[o["reference_en"] for o in ref]]).score, 2) if ref else None,
                "compute_s": round(sum(o["compute_s"] for o in mine), 2),
            }
        res[name] = {"pairs": pairs, "per_language": per, "outputs": outs}
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specvoice bench caption-prompt", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "caption_prompt.json"), help="result JSON")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="a setting (caption.model_role picks the LLM: llm_target, the default, or llm_draft)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N sentences of each language")
    ap.add_argument("--manifest", default=str(MANIFEST), help=argparse.SUPPRESS)
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    from engine.config import ConfigError, load_config
    from engine.runtime import Runtime

    try:
        cfg = load_config(None, {}, a.set)
    except ConfigError as e:
        print(f"specvoice: error: {e}", file=sys.stderr)
        return 2
    rows = sentences(Path(a.manifest), a.limit)
    rt = Runtime(cfg, progress=False)
    role = cfg.caption.model_role
    lm = rt.llm(role)
    t0 = time.time()
    res = run(lm, rows, log=(lambda *x: None) if a.quiet else print)
    out = {"config": {"model_role": role, "model": Path(str(rt.model(role).path)).name, "target": "en",
                      "frame": "strict", "decoding": "AR greedy", "sentences": len(rows),
                      "input": str(Path(a.manifest).relative_to(ROOT)) if Path(a.manifest).is_relative_to(ROOT)
                      else a.manifest,
                      "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t0)),
                      "machine": {"cpu_count": os.cpu_count(), "processor": platform.machine()}},
           "methods": res}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    for name, r in res.items():
        print(f"caption-prompt: {name}: {json.dumps(r['per_language'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
