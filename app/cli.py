"""``specvoice`` command line: transcribe, assist, caption, models.

Live events print as they happen; each command writes a JSON report (``--out DIR``, default ``./out``).
Errors a user can cause (bad audio, missing/corrupt model, bad config, no device) print one line and exit 2;
Ctrl-C stops cleanly (exit 130) after writing what was transcribed so far.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
from importlib import resources
from pathlib import Path

import numpy as np

EXIT_USAGE = 2


def default_question() -> Path:
    """The embedded spoken question (assets/question.wav)."""
    return Path(str(resources.files("assets").joinpath("question.wav")))


# -- argument parsing -------------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help="TOML configuration file")
    common.add_argument("--model", action="append", default=[], metavar="ROLE=SPEC",
                        help="model for a role: embedded, a local path, or a hub id (repeatable)")
    common.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override any setting, e.g. --set vad.min_silence_s=0.8 (repeatable)")
    common.add_argument("--out", default="out", help="directory for reports, WAVs and transcripts (default: out)")
    common.add_argument("--quiet", action="store_true", help="print only the final results")

    p = argparse.ArgumentParser(prog="specvoice", description="Offline speculative voice assistant.")
    sub = p.add_subparsers(dest="cmd", required=True)

    def src_args(sp, audio_required: bool):
        sp.add_argument("audio", nargs=None if audio_required else "?", help="audio file (any format/rate)")
        sp.add_argument("--mic", action="store_true", help="use the microphone instead of a file")
        sp.add_argument("--fast", action="store_true",
                        help="feed the file as fast as it is consumed instead of at real-time pace")

    t = sub.add_parser("transcribe", parents=[common], help="live transcription of a file or the microphone")
    src_args(t, audio_required=False)
    a = sub.add_parser("assist", parents=[common], help="talk → transcript → spoken answer")
    src_args(a, audio_required=False)
    a.add_argument("--no-play", action="store_true", help="never play audio (it is always written to a WAV)")
    c = sub.add_parser("caption", parents=[common], help="live caption and translation")
    src_args(c, audio_required=False)
    c.add_argument("--to", default="de", help="target language code or name (default: de)")
    b = sub.add_parser("bench", help="benchmarks (method vs its AR baseline, JSON out)")
    b.add_argument("which", choices=["asr", "asr-stream", "tts", "predgen", "ssbd", "partial-streams"])
    b.add_argument("rest", nargs=argparse.REMAINDER, help="options of that benchmark (see --help after its name)")
    sub.add_parser("app", help="the desktop app (Qt)")
    m = sub.add_parser("models", parents=[common], help="resolve, join and verify every model role")
    m.add_argument("--verify", action="store_true", help="re-hash every file even if it was verified before")
    m.add_argument("--roles", default="", help="comma-separated roles (default: all)")
    return p


def _config(args):
    from engine.config import load_config

    models = {}
    for item in args.model:
        if "=" not in item:
            raise _UsageError(f"--model expects ROLE=SPEC, got {item!r}")
        k, v = item.split("=", 1)
        models[k.strip()] = v.strip()
    return load_config(args.config, models, args.set)


class _UsageError(Exception):
    pass


# -- output -----------------------------------------------------------------------------------------------------
class Printer:
    """Prints events as they arrive (one line each; partials overwrite on a TTY)."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.tty = sys.stdout.isatty()
        self.t0 = time.monotonic()
        self._partial = False

    def line(self, text: str, partial: bool = False) -> None:
        if self.quiet:
            return
        stamp = f"[{time.monotonic() - self.t0:6.2f}s] "
        if self.tty and partial:
            sys.stdout.write("\r\033[K" + stamp + text)
            self._partial = True
        else:
            if self._partial and self.tty:
                sys.stdout.write("\r\033[K")
            sys.stdout.write(stamp + text + "\n")
            self._partial = False
        sys.stdout.flush()


def _source(args, cfg):
    from audio.sources import FileSource, MicSource

    if args.mic:
        return MicSource(cfg.audio.input_device or None, cfg.audio.block_s)
    path = args.audio
    if path is None:
        if args.cmd == "assist":
            path = default_question()
        else:
            raise _UsageError(f"{args.cmd}: give an audio file or --mic")
    return FileSource(path, cfg.audio.block_s, realtime=not args.fast)


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=float))


def _r(x, nd=3):
    return None if x is None else round(float(x), nd)


# -- commands ---------------------------------------------------------------------------------------------------
def _run_transcriber(args, cfg, rt, on_event, printer):
    """Start capture + streaming ASR; feed events to ``on_event`` on this thread. Returns the transcriber."""
    from engine.events import Error, FinalTranscript, PartialTranscript

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    source = _source(args, cfg)
    events: queue.Queue = queue.Queue()
    st = rt.transcriber(source, events.put)
    transcript_file = out / f"{args.cmd}-transcript.txt"
    transcript_file.write_text("")
    result: dict = {}

    def worker():
        try:
            result["stats"] = st.run()
        except BaseException as e:  # surfaced on the main thread
            result["error"] = e
        events.put(None)

    th = threading.Thread(target=worker, name="asr", daemon=True)
    th.start()
    try:
        while True:
            ev = events.get()
            if ev is None:
                break
            if isinstance(ev, PartialTranscript):
                printer.line(f"… {ev.committed.strip()} ⟨{ev.tentative}⟩", partial=True)
            elif isinstance(ev, FinalTranscript):
                printer.line(f"you: {ev.text}")
                if ev.text:
                    with open(transcript_file, "a") as f:  # written as it happens: a crash loses nothing said
                        f.write(f"[{ev.t_start:.2f}-{ev.t_end:.2f}] {ev.text}\n")
            elif isinstance(ev, Error):
                printer.line(f"! {ev.where}: {ev.message}")
            on_event(ev)
    except KeyboardInterrupt:
        st.stop()
        th.join(timeout=30)
        raise
    th.join()
    if "error" in result:
        raise result["error"]
    return st


def _asr_report(st, cfg) -> dict:
    s = st.stats
    utts = []
    for u in s.utterances:
        utts.append({
            "text": u.text, "t_start": _r(u.t_start), "t_end": _r(u.t_end), "updates": u.updates,
            "asr_compute_s": _r(u.asr_compute_s),
            "eos_to_final_s": _r(u.final_wall - u.eos_wall) if u.final_wall and u.eos_wall else None,
            "vad_decision_s": _r(u.vad_end_wall - u.eos_wall) if u.vad_end_wall and u.eos_wall else None,
        })
    lat = [u["eos_to_final_s"] for u in utts if u["eos_to_final_s"] is not None]
    return {
        "method": cfg.asr.method, "model_role": cfg.asr.model_role, "audio_s": _r(s.audio_s),
        "compute_s": _r(s.asr_compute_s), "rtf": _r(s.rtf, 4), "updates": s.updates,
        "eos_to_final_s_mean": _r(np.mean(lat)) if lat else None, "utterances": utts,
        "text": " ".join(u.text for u in s.utterances if u.text),
    }


def cmd_transcribe(args, cfg, rt, printer) -> dict:
    st = _run_transcriber(args, cfg, rt, lambda ev: None, printer)
    rep = _asr_report(st, cfg)
    counts = getattr(rt.asr_backend(), "counts", None)
    if counts is not None:  # SSD: how each re-decode ended (Eq. 3 ctc / Eq. 5 verified / Eq. 6 fallback)
        rep["ssd_stages"] = dict(counts)
    return {"asr": rep}


def build_assistant(cfg, rt, emit):
    """The cascade or PredGen assistant per ``cfg.llm.answer_method`` (shared with the GUI)."""
    from engine.assistant import Assistant, PredGenAssistant

    c = cfg.llm
    lm, tts = rt.llm(), rt.tts()
    if c.answer_method == "cascade":
        return Assistant(lm, tts, c.system_prompt, c.max_answer_tokens, emit=emit)
    if c.answer_method != "predgen":
        from engine.config import ConfigError

        raise ConfigError(f"llm.answer_method must be 'predgen' or 'cascade', got {c.answer_method!r}")
    judge = rt.llm(instance="judge", n_ctx=1024) if c.predgen_verifier == "reflection" else None
    return PredGenAssistant(lm, tts, c.system_prompt, c.max_answer_tokens, emit=emit, verifier=c.predgen_verifier,
                            top_k=c.predgen_top_k, beta=cfg.caption.beta, tokens_per_update=c.predgen_tokens_per_update,
                            judge_lm=judge, speculation_threads=c.predgen_speculation_threads)


def cmd_assist(args, cfg, rt, printer) -> dict:
    from audio.io import write_wav
    from audio.playback import NullPlayer, open_player
    from engine.assistant import Conversation
    from engine.events import (AnswerAudio, AnswerDone, AnswerSentence, Error, FinalTranscript, PartialTranscript,
                               SpeechStarted)

    out = Path(args.out)
    answer_events: queue.Queue = queue.Queue()
    assistant = build_assistant(cfg, rt, answer_events.put)
    assistant.warm()
    tts = rt.tts()
    printer.line(f"models ready ({', '.join(f'{k} {v}s' for k, v in rt.load_times.seconds.items())}); "
                 f"answer method: {cfg.llm.answer_method}")
    player = NullPlayer() if args.no_play else open_player(tts.sample_rate, cfg.audio.output_device)
    if not player.available and not args.no_play:
        printer.line("no audio output device: the answer is written to a WAV only")
    results: list[dict] = []
    finals: dict[int, float] = {}
    audio_parts: list[np.ndarray] = []

    def on_metrics(utt, text, m):
        results.append({"utterance": utt, "user": text, "metrics": m})

    conv = Conversation(assistant, on_metrics)

    def handle(ev) -> None:
        if isinstance(ev, AnswerSentence):
            printer.line(f"assistant: {ev.text}")
        elif isinstance(ev, AnswerAudio):
            audio_parts.append(ev.samples)
            player.play(ev.samples, ev.sample_rate)
            conv.mark_heard()
        elif isinstance(ev, AnswerDone):
            if ev.interrupted:
                printer.line("(answer interrupted)")
            if len(results) and results[-1]["utterance"] == ev.utterance:
                results[-1]["answer"] = ev.text
        elif isinstance(ev, Error):
            printer.line(f"! {ev.where}: {ev.message}")

    # Answers are delivered the moment they are ready, by their own thread: never only on the next ASR event
    # (when the user is silent there is none).
    delivering = threading.Event()
    delivering.set()

    def deliver() -> None:
        while delivering.is_set() or not answer_events.empty():
            try:
                ev = answer_events.get(timeout=0.05)
            except queue.Empty:
                continue
            try:
                handle(ev)
            except Exception as e:  # a broken output device must not stop the answers
                printer.line(f"! playback: {e}")

    deliverer = threading.Thread(target=deliver, name="answer-delivery", daemon=True)
    deliverer.start()

    def on_event(ev):
        if isinstance(ev, SpeechStarted):
            if conv.on_speech_start():
                player.stop()
        elif isinstance(ev, PartialTranscript):
            conv.on_partial(ev.utterance, ev.text)
        elif isinstance(ev, FinalTranscript):
            finals[ev.utterance] = ev.wall
            conv.on_final(ev.utterance, ev.text)

    try:
        st = _run_transcriber(args, cfg, rt, on_event, printer)
        while not conv.wait_idle(timeout=0.05):
            pass
    finally:
        delivering.clear()
        deliverer.join(timeout=30)
        conv.close()
    player.wait(timeout=120)
    player.close()
    eos = {u.index: u.eos_wall for u in st.stats.utterances}
    wav = None
    if audio_parts:
        wav = write_wav(out / "answer.wav", np.concatenate(audio_parts), tts.sample_rate)
        printer.line(f"answer audio: {wav}")
    rep_answers = []
    for rec in results:
        m = rec["metrics"]
        e = eos.get(rec["utterance"])
        first_audio = player.first_sample_wall if player.available and player.first_sample_wall else m.first_audio_wall
        rep_answers.append({
            "user": rec["user"], "answer": rec.get("answer", ""),
            "eos_to_final_transcript_s": _r(finals[rec["utterance"]] - e) if e and rec["utterance"] in finals else None,
            "eos_to_first_token_s": _r(m.first_token_wall - e) if e and m.first_token_wall else None,
            "ttfs_s": _r(m.first_sentence_wall - e) if e and m.first_sentence_wall else None,
            "eos_to_first_audio_s": _r(first_audio - e) if e and first_audio else None,
            "final_transcript_to_first_audio_s": _r(first_audio - finals[rec["utterance"]])
            if first_audio and rec["utterance"] in finals else None,
            "nfetfs": m.nfetfs, "presynth_used": m.presynth_used, "speculative_updates": m.speculative_updates,
            "accepted_tokens": m.accepted_tokens,
            "updates": [{"partial": st.partial, "accepted": st.accepted, "previous_len": st.previous_len,
                         "generated": st.generated, "nfe": st.nfe, "compute_s": _r(st.compute_s),
                         "first_sentence": st.first_sentence, "cancelled": st.cancelled} for st in m.steps],
            "llm": {"prompt_tokens": m.gen.prompt_tokens, "new_tokens": m.gen.new_tokens,
                    "prefill_s": _r(m.gen.prefill_s), "decode_s": _r(m.gen.decode_s),
                    "tokens_per_s": _r(m.gen.tokens_per_s, 2)},
            "tts": {"sentences": m.sentences, "audio_s": _r(m.audio_s), "compute_s": _r(m.tts_compute_s),
                    "rtf": _r(m.tts_compute_s / m.audio_s if m.audio_s else None, 4)},
        })
    return {"asr": _asr_report(st, cfg), "answer_method": cfg.llm.answer_method,
            "predgen_verifier": cfg.llm.predgen_verifier if cfg.llm.answer_method == "predgen" else None,
            "answers": rep_answers, "answer_wav": str(wav) if wav else None, "played": bool(player.available)}


def build_translator(cfg, rt, target: str):
    """The live translator per ``cfg.caption.method`` (shared with the GUI)."""
    from engine.config import ConfigError
    from engine.ssbd import ARRetranslator, SSBDTranslator

    c = cfg.caption
    lm = rt.llm(c.model_role)
    if c.method == "ssbd":
        return SSBDTranslator(lm, target, c.max_tokens, beta=c.beta, mask_k=c.mask_k, display_only=c.display_only_mask)
    if c.method == "ar":
        return ARRetranslator(lm, target, c.max_tokens, mask_k=c.mask_k if c.display_only_mask else 0)
    raise ConfigError(f"caption.method must be 'ssbd' or 'ar', got {c.method!r}")


def cmd_caption(args, cfg, rt, printer) -> dict:
    from engine.caption import language_name
    from engine.events import Caption, FinalTranscript, PartialTranscript

    translator = build_translator(cfg, rt, args.to)
    printer.line(f"captioning into {language_name(args.to)} ({cfg.caption.method}, β={cfg.caption.beta}, "
                 f"mask-k={cfg.caption.mask_k}{' display-only' if cfg.caption.display_only_mask else ''})")
    latest: dict = {"job": None}
    cond = threading.Condition()
    per_utt: dict[int, dict] = {}
    captions: list[Caption] = []
    stop = threading.Event()
    out = Path(args.out)
    caption_file = out / "caption.txt"
    out.mkdir(parents=True, exist_ok=True)
    caption_file.write_text("")
    state = {"utt": None}

    def worker():
        while True:
            with cond:
                while latest["job"] is None and not stop.is_set():
                    cond.wait()
                job = latest["job"]
                latest["job"] = None
            if job is None:
                return
            utt, text, final, committed = job
            if state["utt"] != utt:
                translator.reset()  # a new utterance: no draft yet
                state["utt"] = utt
            u = translator.translate_ssbd(text, final=final)
            cap = Caption(utt, text, u.stable_text, u.tail_text, final, u.compute_s,
                          source_stable=text if final else committed)
            captions.append(cap)
            st = translator.stream
            per_utt[utt] = {"source": text, "translation": u.text, "updates": len(st.updates), "ne": round(st.ne, 4),
                            "acceptance_A_over_D": round(st.acceptance, 4),
                            "accepted_share_A_over_O": round(st.accepted_share, 4),
                            "output_tokens_per_s": round(st.tokens_per_s, 2),
                            "compute_s": round(sum(x.compute_s for x in st.updates), 3)}
            tail = f" ⟨{u.tail_text.strip()}⟩" if u.tail_text.strip() else ""
            printer.line(f"[{args.to}]{' (final)' if final else ''} {u.stable_text}{tail}")
            if final:
                with open(caption_file, "a") as f:
                    f.write(f"{text}\n\t{u.text}\n")

    th = threading.Thread(target=worker, name="caption", daemon=True)
    th.start()

    def submit(job):
        with cond:
            # stale partials are dropped: only the newest pending job survives; a pending final is never replaced
            if latest["job"] is None or not latest["job"][2] or job[2]:
                latest["job"] = job
            cond.notify()

    def on_event(ev):
        if isinstance(ev, PartialTranscript) and ev.text:
            submit((ev.utterance, ev.text, False, ev.committed.strip()))
        elif isinstance(ev, FinalTranscript) and ev.text:
            submit((ev.utterance, ev.text, True, ev.text))
            while True:  # the final must be taken before the next utterance's partials may replace it
                with cond:
                    if latest["job"] is None or latest["job"][2] is False:
                        break
                time.sleep(0.02)

    try:
        st = _run_transcriber(args, cfg, rt, on_event, printer)
    finally:
        with cond:
            while latest["job"] is not None and latest["job"][2]:
                cond.notify()
                cond.wait(timeout=0.05)
            stop.set()
            cond.notify()
    th.join()
    utts = [per_utt[k] for k in sorted(per_utt)]
    tps = [u["output_tokens_per_s"] for u in utts if u["output_tokens_per_s"]]
    return {"asr": _asr_report(st, cfg), "target_language": language_name(args.to),
            "caption": {"method": cfg.caption.method, "beta": cfg.caption.beta, "mask_k": cfg.caption.mask_k,
                        "display_only": cfg.caption.display_only_mask, "updates": len(captions),
                        "final": [c.translation for c in captions if c.final],
                        "ne_mean": _r(np.mean([u["ne"] for u in utts])) if utts else None,
                        "compute_s_mean": _r(np.mean([c.compute_s for c in captions])) if captions else None,
                        "tokens_per_s_mean": _r(np.mean(tps), 2) if tps else None, "utterances": utts}}


def cmd_models(args, cfg, rt, printer) -> dict:
    from engine.config import ROLES
    from engine.models import resolve

    roles = [r for r in args.roles.split(",") if r] or list(ROLES)
    rep = {}
    for role in roles:
        t0 = time.perf_counter()
        m = resolve(role, cfg, verify="full" if args.verify else "stamp", progress=not args.quiet)
        rep[role] = {"path": str(m.path), "source": m.source, "kind": m.kind, "sha256": m.sha256 or None,
                     "seconds": _r(time.perf_counter() - t0)}
        printer.line(f"{role:11s} ok  {m.path}")
    return {"models": rep}


COMMANDS = {"transcribe": cmd_transcribe, "assist": cmd_assist, "caption": cmd_caption, "models": cmd_models}


def main(argv: list[str] | None = None) -> int:
    from audio.io import AudioError
    from engine.config import ConfigError
    from engine.lm import ModelLoadError
    from engine.models import ModelError

    args = _parser().parse_args(argv)
    if args.cmd == "app":
        try:
            from app.main_window import run_app
        except ImportError as e:
            print(f"specvoice: error: the desktop app needs PySide6 (pip install 'specvoice[app]'): {e}",
                  file=sys.stderr)
            return EXIT_USAGE
        return run_app([sys.argv[0]])
    if args.cmd == "bench":
        if args.which == "asr":
            from bench.asr_bench import main as bench_main
        elif args.which == "asr-stream":
            from bench.asr_stream_bench import main as bench_main
        elif args.which == "tts":
            from bench.tts_bench import main as bench_main
        elif args.which == "predgen":
            from bench.predgen_bench import main as bench_main
        elif args.which == "ssbd":
            from bench.ssbd_bench import main as bench_main
        else:
            from bench.make_partial_streams import main as bench_main
        return bench_main(args.rest)
    printer = Printer(args.quiet)
    report: dict = {"command": args.cmd, "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    out = Path(args.out)
    code = 0
    try:
        cfg = _config(args)
        from engine.runtime import Runtime

        rt = Runtime(cfg, progress=not args.quiet)
        if args.cmd != "models":
            report["input"] = "microphone" if args.mic else str(args.audio or default_question())
            report["realtime"] = bool(args.mic or not args.fast)
        report.update(COMMANDS[args.cmd](args, cfg, rt, printer))
        report["models"] = report.get("models") or rt.describe()
        report["load_s"] = rt.load_times.seconds
    except (AudioError, ModelError, ConfigError, ModelLoadError, _UsageError) as e:
        print(f"specvoice: error: {e}", file=sys.stderr)
        report["error"] = str(e)
        code = EXIT_USAGE
    except KeyboardInterrupt:
        print("specvoice: interrupted", file=sys.stderr)
        report["error"] = "interrupted"
        code = 130
    except Exception as e:  # an unexpected failure: still one line, the report keeps the details
        import traceback

        print(f"specvoice: error: {type(e).__name__}: {e}", file=sys.stderr)
        report["error"] = f"{type(e).__name__}: {e}"
        report["traceback"] = traceback.format_exc()
        code = 1
    report_path = out / f"{args.cmd}-report.json"
    try:
        _write_json(report_path, report)
        if code == 0:
            _print_summary(args.cmd, report, report_path, printer)
    except OSError as e:
        print(f"specvoice: error: cannot write report {report_path}: {e}", file=sys.stderr)
        code = code or 1
    return code


def _print_summary(cmd: str, rep: dict, path: Path, printer: Printer) -> None:
    lines = []
    asr = rep.get("asr")
    if asr:
        lines.append(f"ASR ({asr['method']}, {asr['model_role']}): {asr['audio_s']} s audio, RTF {asr['rtf']}, "
                     f"end of speech → final transcript {asr['eos_to_final_s_mean']} s (mean)")
    for a in rep.get("answers", []):
        lines.append(f"answer ({rep.get('answer_method')}): TTFS {a['ttfs_s']} s, end of speech → first audio "
                     f"{a['eos_to_first_audio_s']} s (final transcript → first audio "
                     f"{a['final_transcript_to_first_audio_s']} s), NFETFS {a['nfetfs']}, "
                     f"pre-synthesised {a['presynth_used']}, LLM {a['llm']['tokens_per_s']} tok/s, TTS RTF {a['tts']['rtf']}")
    cap = rep.get("caption")
    if cap:
        lines.append(f"caption ({cap['method']}): {cap['updates']} updates, {cap['compute_s_mean']} s each (mean), "
                     f"{cap['tokens_per_s_mean']} output tok/s, NE {cap['ne_mean']}")
    lines.append(f"report: {path}")
    for line in lines:
        print(line)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
