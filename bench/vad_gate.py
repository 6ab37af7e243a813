"""VAD near-talker gate sweep: which ``vad.near_snr_db`` keeps all of the near talkers' speech in babble.

The streaming VAD's near-talker gate (audio/vad.py, ``StreamingVAD._near_talker``) counts a chunk as speech, while
the background is itself speech, only when its level stands ``near_snr_db`` dB above the background level. Too low
and babble holds the user's utterance open (the turn never ends); too high and the near talker's quieter syllables
fall under the gate. This benchmark reproduces the choice of the default (``vad.near_snr_db`` in engine/config.py).

Data: development conversations, never the committed test set (bench/data/conversation, seed
``bench.make_conversation.SEED``): the three scripted dialogues of :mod:`bench.make_conversation` built with seeds
7, 8 and 9 (``--seeds``; :func:`bench.make_conversation.build_dialogue`, the same code as ``python -m
bench.make_conversation --seed N``), their ``babble`` (eight other talkers 10 dB under the speech) and ``clean``
(the same mix without babble: the quiet version) files, written with their manifest under ``--data/seed{N}``
(default: ``<models cache>/bench/vad_gate_dev``) and reused while every file's sha256 matches the manifest.

Method: the VAD alone (no ASR), built as the runtime builds it (:meth:`engine.runtime.Runtime.vad`, the
configuration as loaded with ``vad.near_snr_db`` set to each value of ``--values``; 0 = no gate), fed
``audio.block_s`` blocks. Per file and value:
    * ``utterances``, ``longest_utterance_s``: in the babble file (and ``*_quiet`` in the clean file);
    * ``speech_coverage``: share of the reference speech (the manifest's ``segments``: every piece each dialogue
      voice said) inside an utterance, on the VAD's 32 ms chunks (a chunk is inside when its midpoint is);
    * ``speech_lost_s``: reference speech inside an utterance of the quiet version (the clean file with no gate:
      Silero's rules alone) but inside none of the babble file's; ``quiet_speech_lost_s`` the same for the clean
      file with the gate at this value (the gate must leave quiet speech alone);
    * ``babble_only_s``: time inside the babble file's utterances outside every reference segment (babble the
      utterances hold: between turns, and the pads and pauses also held in quiet); ``babble_only_excess_s`` is that
      minus the same time in the quiet version;
    * ``gate_on_s``: audio time during which the gate was on (``StreamingVAD.near_gate`` after each block), in the
      babble file and (``quiet_gate_on_s``) in the clean file.
Rule (the default's): the largest value whose ``speech_lost_s`` and ``quiet_speech_lost_s`` are 0 on every file.

JSON (``--out``, default bench/results/vad_gate.json): ``command``, ``vad`` (the loaded configuration's vad
section, before the sweep's value), ``block_s``, ``model`` (the VAD model's path and source), ``data`` (seeds,
folder, each file's sha256 by ``seed{N}/name``), ``time_grid_s`` (0.032: the chunk), ``rule``, ``sweep`` (per
value: ``summary`` pooled over the files, :func:`summarize`, and ``per_file``, :func:`file_metrics` with
``seed``, ``file``, ``gate_on_s``, ``quiet_gate_on_s``), ``chosen_near_snr_db`` (by the rule; None when no value
qualifies), ``config_near_snr_db`` (the configuration's), ``wall_s``. A table of the summaries is printed.

Run: ``specvoice bench vad-gate [--seeds 7,8,9] [--values 0,3,4,5,6,6.5,7,8] [--data DIR] [--rebuild]
[--config FILE] [--set SECTION.KEY=VALUE ...] [--out bench/results/vad_gate.json]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

from audio.io import SAMPLE_RATE as SR
from bench.stats import rnd
from engine.models import sha256_file

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CHUNK = 512  # the VAD's chunk (audio.vad.CHUNK): the time grid of every measure
DEV_SEEDS = (7, 8, 9)
VALUES = (0.0, 3.0, 4.0, 5.0, 6.0, 6.5, 7.0, 8.0)
CONDITIONS = ("babble", "clean")
TEST_SET = HERE / "data" / "conversation"  # held out: never tuned on
RULE = ("the largest near_snr_db whose speech_lost_s (babble vs the quiet version without the gate) and "
        "quiet_speech_lost_s (the quiet version with the gate vs without) are 0 on every file")


# ------------------------------------------------------------------------------------------------- the dev data
def dev_set(seed: int, folder: Path, rebuild: bool = False) -> dict:
    """The development conversations of ``seed`` in ``folder``: built with :mod:`bench.make_conversation` (babble
    and clean files of every dialogue, its ``write``: FLAC + manifest.json) unless ``folder`` already holds them
    with matching sha256 (and not ``rebuild``). Returns the manifest's ``files`` ({name: entry with segments,
    condition, sha256, ...}).

    Raises:
        ValueError: ``seed`` is the committed test set's, or ``folder`` is the test set's folder.
    """
    from bench import make_conversation as mc

    if seed == mc.SEED:
        raise ValueError(f"seed {seed} builds the held-out test set (bench/data/conversation); use other seeds")
    if folder.resolve() == TEST_SET.resolve() or TEST_SET.resolve() in folder.resolve().parents:
        raise ValueError(f"{folder} is inside the held-out test set; give another --data folder")
    man = folder / "manifest.json"
    if man.is_file() and not rebuild:
        m = json.loads(man.read_text(encoding="utf-8"))
        files = m.get("files", {})
        want = {f"{d.name}_{c}.flac" for d in mc.DIALOGUES for c in CONDITIONS}
        if m.get("seed") == seed and set(files) == want and all(
                (folder / n).is_file() and sha256_file(folder / n) == e["sha256"] for n, e in files.items()):
            return files
    dialogues = {}
    for i in range(len(mc.DIALOGUES)):
        built = mc.build_dialogue(i, seed)
        dialogues.update({n: f for n, f in built.items() if f["condition"] in CONDITIONS})
    return mc.write(dialogues, {}, folder, seed)["files"]


# -------------------------------------------------------------------------------------------------- measuring
def run_vad(vad, audio: np.ndarray, block: int) -> tuple[list[tuple[float, float]], float]:
    """Feed ``audio`` (float32 16 kHz) to ``vad`` (a fresh :class:`audio.vad.StreamingVAD`) in ``block``-sample
    blocks, then flush. Returns ((start, end) seconds of each utterance, seconds of audio after which the
    near-talker gate was on)."""
    events, gate_blocks = [], 0
    for i in range(0, len(audio), block):
        events += vad(audio[i: i + block])
        gate_blocks += min(block, len(audio) - i) if vad.near_gate else 0
    events += vad.flush()
    starts = [e.t for e in events if e.kind == "start"]
    ends = [e.t for e in events if e.kind == "end"]
    return list(zip(starts, ends)), gate_blocks / SR


def chunk_mask(spans, n: int) -> np.ndarray:
    """bool (n // 512,): the 32 ms chunks whose midpoint lies in one of ``spans`` ((start, end) seconds, or
    manifest segments with "start"/"end")."""
    t = (np.arange(n // CHUNK) + 0.5) * CHUNK / SR
    m = np.zeros(len(t), bool)
    for s in spans:
        a, b = (s["start"], s["end"]) if isinstance(s, dict) else s
        m |= (t >= a) & (t < b)
    return m


def file_metrics(babble: list[tuple[float, float]], quiet_gated: list[tuple[float, float]],
                 quiet: list[tuple[float, float]], segments: list[dict], n: int) -> dict:
    """The measures of one file at one value (module docstring), from utterance spans ((start, end) seconds):
    ``babble`` in the babble file, ``quiet_gated`` in the clean file with the same gate, ``quiet`` in the clean file
    without the gate; ``segments``: the reference speech (manifest entries with "start", "end" in seconds); ``n``:
    samples in the file (both versions have the same length). Times in seconds, on 32 ms chunks."""
    sec = CHUNK / SR
    speech = chunk_mask(segments, n)
    b, qg, q = chunk_mask(babble, n), chunk_mask(quiet_gated, n), chunk_mask(quiet, n)

    def longest(spans):
        return rnd(max((e - s for s, e in spans), default=0.0), 2)

    return {
        "utterances": len(babble), "utterances_quiet": len(quiet), "utterances_quiet_gated": len(quiet_gated),
        "longest_utterance_s": longest(babble), "longest_utterance_quiet_s": longest(quiet),
        "speech_s": rnd(speech.sum() * sec, 2),
        "speech_coverage": rnd((speech & b).sum() / speech.sum(), 4),
        "speech_coverage_quiet": rnd((speech & q).sum() / speech.sum(), 4),
        "speech_lost_s": rnd((speech & q & ~b).sum() * sec, 3),
        "quiet_speech_lost_s": rnd((speech & q & ~qg).sum() * sec, 3),
        "babble_only_s": rnd((b & ~speech).sum() * sec, 2),
        "babble_only_excess_s": rnd(((b & ~speech).sum() - (q & ~speech).sum()) * sec, 2),
    }


def summarize(per_file: list[dict]) -> dict:
    """Pooled measures of one value over its files (``per_file``: :func:`file_metrics` rows, with ``gate_on_s`` and
    ``quiet_gate_on_s``): sums of counts and times, the lowest coverage, the longest utterance, and
    ``files_losing_speech`` (files with ``speech_lost_s`` or ``quiet_speech_lost_s`` above 0)."""
    def total(k, nd=2):
        return rnd(sum(r[k] for r in per_file), nd)

    return {
        "files": len(per_file),
        "utterances": sum(r["utterances"] for r in per_file),
        "utterances_quiet": sum(r["utterances_quiet"] for r in per_file),
        "longest_utterance_s": max(r["longest_utterance_s"] for r in per_file),
        "longest_utterance_quiet_s": max(r["longest_utterance_quiet_s"] for r in per_file),
        "speech_coverage_min": min(r["speech_coverage"] for r in per_file),
        "speech_coverage_quiet_min": min(r["speech_coverage_quiet"] for r in per_file),
        "speech_lost_s": total("speech_lost_s", 3),
        "quiet_speech_lost_s": total("quiet_speech_lost_s", 3),
        "files_losing_speech": sum(1 for r in per_file if r["speech_lost_s"] > 0 or r["quiet_speech_lost_s"] > 0),
        "babble_only_s": total("babble_only_s"),
        "babble_only_excess_s": total("babble_only_excess_s"),
        "gate_on_s": total("gate_on_s", 1),
        "quiet_gate_on_s": total("quiet_gate_on_s", 1),
    }


def choose(sweep: list[dict]) -> float | None:
    """The value chosen by :data:`RULE` from ``sweep`` ([{"near_snr_db", "summary"}]); None when none loses no
    speech."""
    ok = [r["near_snr_db"] for r in sweep
          if r["summary"]["speech_lost_s"] == 0 and r["summary"]["quiet_speech_lost_s"] == 0]
    return max(ok) if ok else None


def table(sweep: list[dict], chosen: float | None) -> str:
    """The printed table: one row per value."""
    head = (f"{'near_snr_db':>11} {'utts':>5} {'(quiet)':>7} {'longest s':>9} {'cov min':>7} {'lost s':>7} "
            f"{'quiet lost':>10} {'babble-only s':>13} {'excess s':>8} {'gate on s':>9} {'(quiet)':>7}")
    rows = [head, "-" * len(head)]
    for r in sweep:
        s = r["summary"]
        mark = "  <- chosen" if r["near_snr_db"] == chosen else ""
        rows.append(f"{r['near_snr_db']:>11g} {s['utterances']:>5} {s['utterances_quiet']:>7} "
                    f"{s['longest_utterance_s']:>9.2f} {s['speech_coverage_min']:>7.3f} {s['speech_lost_s']:>7.3f} "
                    f"{s['quiet_speech_lost_s']:>10.3f} {s['babble_only_s']:>13.1f} {s['babble_only_excess_s']:>8.1f} "
                    f"{s['gate_on_s']:>9.1f} {s['quiet_gate_on_s']:>7.1f}{mark}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specvoice bench vad-gate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default=",".join(map(str, DEV_SEEDS)),
                    help="development seeds of bench.make_conversation (comma list; never the test set's)")
    ap.add_argument("--values", default=",".join(f"{v:g}" for v in VALUES),
                    help="vad.near_snr_db values to sweep, dB (comma list; 0 = no gate)")
    ap.add_argument("--data", default=None,
                    help="folder for the generated conversations (default <models cache>/bench/vad_gate_dev)")
    ap.add_argument("--rebuild", action="store_true", help="generate the conversations even when cached")
    ap.add_argument("--config", default=None, help="TOML configuration (default: the usual one)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="configuration override (repeatable)")
    ap.add_argument("--out", default=str(HERE / "results" / "vad_gate.json"))
    a = ap.parse_args(argv)

    from audio.io import load_audio
    from engine.config import ConfigError, load_config
    from engine.runtime import Runtime

    try:
        base = load_config(a.config, sets=a.set)
        values = [float(v) for v in a.values.split(",") if v.strip()]
        configs = {v: base.with_overrides({"vad": {"near_snr_db": v}}) for v in values}
        seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    t_wall = time.perf_counter()
    data = Path(a.data) if a.data else base.cache_dir() / "bench" / "vad_gate_dev"
    files = []  # (seed, name, babble audio, clean audio, segments, sha256 of both)
    try:
        for seed in seeds:
            folder = data / f"seed{seed}"
            man = dev_set(seed, folder, a.rebuild)
            for name, e in man.items():
                if e["condition"] != "babble":
                    continue
                clean = name.replace("_babble", "_clean")
                files.append((seed, name, load_audio(folder / name), load_audio(folder / clean), e["segments"],
                              {f"seed{seed}/{name}": e["sha256"], f"seed{seed}/{clean}": man[clean]["sha256"]}))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    rt0 = Runtime(base, progress=False)
    block = round(base.audio.block_s * SR)
    quiet = {}  # (seed, name) → utterance spans of the clean file without the gate
    off = Runtime(base.with_overrides({"vad": {"near_snr_db": 0.0}}), progress=False)
    for seed, name, _, c, _, _ in files:
        quiet[seed, name] = run_vad(off.vad(), c, block)[0]
    sweep = []
    for v, cfg in configs.items():
        rt = Runtime(cfg, progress=False)
        per_file = []
        for seed, name, b, c, segs, _ in files:
            spans, gate_s = run_vad(rt.vad(), b, block)
            spans_q, gate_q = run_vad(rt.vad(), c, block) if v else (quiet[seed, name], 0.0)
            per_file.append({"seed": seed, "file": name,
                             **file_metrics(spans, spans_q, quiet[seed, name], segs, len(b)),
                             "gate_on_s": rnd(gate_s, 1), "quiet_gate_on_s": rnd(gate_q, 1)})
        sweep.append({"near_snr_db": v, "summary": summarize(per_file), "per_file": per_file})
        print(f"near_snr_db {v:g}: {len(per_file)} files", file=sys.stderr, flush=True)
    chosen = choose(sweep)
    vad_model = rt0.model("vad")
    args = list(sys.argv[1:] if argv is None else argv)
    out = {
        "command": " ".join(["specvoice bench vad-gate", *args]).strip(),
        "vad": dataclasses.asdict(base.vad), "block_s": base.audio.block_s,
        "model": {"path": str(vad_model.path), "source": vad_model.source},
        "data": {"generator": "bench.make_conversation (build_dialogue, write)", "seeds": seeds,
                 "conditions": list(CONDITIONS), "folder": str(data),
                 "sha256": {k: h for f in files for k, h in sorted(f[5].items())}},
        "time_grid_s": CHUNK / SR,
        "rule": RULE,
        "sweep": sweep,
        "chosen_near_snr_db": chosen,
        "config_near_snr_db": base.vad.near_snr_db,
        "wall_s": round(time.perf_counter() - t_wall, 1),
    }
    p = Path(a.out)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(out, indent=1) + "\n")
    print(table(sweep, chosen))
    print(f"chosen near_snr_db: {chosen} (configuration: {base.vad.near_snr_db}); wrote {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
