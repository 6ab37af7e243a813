"""SSBD benchmark: AR re-translation vs SSBD (β sweep) vs +mask-k and +display-only mask-k, one run, same input.

Like the paper's Tables 3–4 (ssbd_live_translation.txt). Inputs:
    (a) Multi30k test 2016 en→de, streamed lag-3 (3 more source words per update, then the full sentence), scored
        against the references with BLEU and chrF (sacrebleu) on the final translations;
    (b) a partial-transcript stream file (PredGen's simulated-inputs format, e.g. bench/data/mtbench_asr_partials.json):
        no references, so NE, speed and acceptance only.
Per configuration: BLEU, chrF, NE (Eq. 4 over displayed outputs), A/D, A/O, output tokens/s, total compute and
speed-up vs AR. The mask-k rows run at the product's β (``caption.beta``); display-only mask-k changes only what is
shown, so its rows reuse that β's run's outputs.

Run: ``specvoice bench ssbd [--n 15] [--stream FILE]``. JSON out.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
MULTI30K = HERE / "data" / "text" / "multi30k"  # shipped (bench/data/text/SOURCES.md)


def multi30k(n: int, data_dir: Path) -> list[tuple[str, str]]:
    def read(name):
        p = data_dir / name
        return gzip.open(p, "rt").read().splitlines() if p.suffix == ".gz" else p.read_text().splitlines()

    en, de = read("test_2016_flickr.en.gz"), read("test_2016_flickr.de.gz")
    return list(zip(en, de))[:n]


def lag_k(sentence: str, k: int = 3) -> list[str]:
    w = sentence.split()
    steps = [" ".join(w[:i]) for i in range(k, len(w), k)]
    return steps + [sentence]


def run_stream(tr, sources: list[str]) -> dict:
    tr.reset()
    for i, src in enumerate(sources):
        tr.translate_ssbd(src, final=i == len(sources) - 1)
    st = tr.stream
    return {"final": st.updates[-1].text, "ne": st.ne, "draft": sum(u.draft for u in st.updates),
            "accepted": sum(u.accepted for u in st.updates), "output": sum(u.output for u in st.updates),
            "compute_s": sum(u.compute_s for u in st.updates),
            "forward_passes": sum(u.forward_passes for u in st.updates), "updates": len(st.updates),
            "displayed": [u.text if u.final else u.stable_text for u in st.updates],
            "full_outputs": [u.text for u in st.updates], "tokens": [u.tokens for u in st.updates]}


def main(argv=None) -> int:
    import sacrebleu

    from bench.settings import fill_from_config
    from engine.config import load_config
    from engine.runtime import Runtime
    from engine.translate.biased_retranslation import ARRetranslator, SSBDTranslator, mask_tail
    from engine.translate.stream_metrics import normalized_erasure

    p = argparse.ArgumentParser(prog="specvoice bench ssbd", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=15, help="Multi30k sentences")
    p.add_argument("--data", default=str(MULTI30K), help="folder with test_2016_flickr.{en,de}.gz")
    p.add_argument("--stream", help="partial-transcript stream JSON instead of Multi30k (no references)")
    p.add_argument("--to", default="de")
    p.add_argument("--betas", nargs="+", type=float, default=[0.0, 0.1, 0.2, 0.3, 0.4])
    p.add_argument("--ks", nargs="+", type=int, default=[3, 5])
    p.add_argument("--role", default="llm_target")
    p.add_argument("--model", help="a GGUF path or hub id for the llm_target role")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="longest translation of one update (default: caption.max_tokens)")
    p.add_argument("--out", default="bench/results/ssbd.json")
    args = p.parse_args(argv)

    cfg = load_config(None, {"llm_target": args.model} if args.model else None)
    fill_from_config(args, cfg, {"max_tokens": "caption.max_tokens"})
    beta = cfg.caption.beta
    rt = Runtime(cfg)
    lm = rt.llm(args.role)
    if args.stream:
        data = json.loads(Path(args.stream).read_text())
        items = [([s for s, _ in parts], None) for parts in list(data.values())[: args.n]]
    else:
        items = [(lag_k(en), de) for en, de in multi30k(args.n, Path(args.data))]

    configs = [("ar", lambda: ARRetranslator(lm, args.to, args.max_tokens, mask_k=0))]
    configs += [(f"ssbd_beta{b}", (lambda b=b: SSBDTranslator(lm, args.to, args.max_tokens, b, 0, True)))
                for b in args.betas]
    configs += [(f"ssbd_beta{beta}_mask{k}", (lambda k=k: SSBDTranslator(lm, args.to, args.max_tokens, beta, k, False)))
                for k in args.ks]
    runs: dict[str, list[dict]] = {}
    for name, make in configs:
        tr = make()
        runs[name] = []
        for i, (sources, _) in enumerate(items):
            runs[name].append(run_stream(tr, sources))
        print(f"{name}: {sum(r['compute_s'] for r in runs[name]):.1f} s", flush=True)
    # display-only mask-k: the product β's outputs, tails hidden on screen
    base = f"ssbd_beta{beta}" if f"ssbd_beta{beta}" in runs else next(n for n in runs if n.startswith("ssbd"))
    for k in args.ks:
        rows = []
        for r in runs[base]:
            shown = []
            for j, full in enumerate(r["full_outputs"]):
                if j == len(r["full_outputs"]) - 1:
                    shown.append(full)
                else:
                    shown.append(mask_tail(lm, r["tokens"][j], k)[0])
            rows.append({**r, "ne": normalized_erasure(shown), "displayed": shown})
        runs[f"{base}_display_only_mask{k}"] = rows

    refs = [de for _, de in items]
    ar_time = sum(r["compute_s"] for r in runs["ar"])
    ar_ne = statistics.mean(r["ne"] for r in runs["ar"])
    report = {"benchmark": "ssbd", "model": str(rt.model(args.role).path),
              "input": args.stream or f"multi30k test_2016_flickr en-{args.to}, lag-3", "items": len(items),
              "configs": {}}
    for name, rows in runs.items():
        hyps = [r["final"] for r in rows]
        d, a, o = (sum(r[x] for r in rows) for x in ("draft", "accepted", "output"))
        t = sum(r["compute_s"] for r in rows)
        c = {"ne": round(statistics.mean(r["ne"] for r in rows), 4),
             "ne_change_vs_ar": round(statistics.mean(r["ne"] for r in rows) / ar_ne - 1, 3) if ar_ne else None,
             "acceptance_A_over_D": round(a / d, 4) if d else None, "accepted_share_A_over_O": round(a / o, 4),
             "output_tokens_per_s": round(o / t, 2), "compute_s": round(t, 2),
             "speedup_vs_ar": round(ar_time / t, 3),
             "forward_passes": sum(r["forward_passes"] for r in rows),
             "sequential_passes_speedup_vs_ar": round(sum(r["forward_passes"] for r in runs["ar"])
                                                      / max(1, sum(r["forward_passes"] for r in rows)), 3)}
        if all(refs):
            c["bleu"] = round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
            c["chrf"] = round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2)
        report["configs"][name] = c
    report["examples"] = {name: [{"displayed": r["displayed"], "final": r["final"]} for r in rows[:5]]
                          for name, rows in runs.items()}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    print(json.dumps(report["configs"], indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
