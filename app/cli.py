"""``specvoice`` command line: transcribe, assist, caption, export, models, bench, app.

Live events print as they happen. Every final transcript, answer sentence, answer and caption is first appended
(fsynced) to the session journal (``--journal``, default ``OUT/journal.jsonl``, see :mod:`app.journal`), then
printed; nothing a session wrote is ever truncated by a later one. Each command also writes a JSON report of
its latest run (``--out DIR``, default ``./out``).

The input is opened and decoded before any model loads. Errors a user can cause (bad audio, missing/corrupt
model, bad config, no device) print one line on stderr and exit 2; an internal failure prints one line and exits 1
(the report keeps the traceback); Ctrl-C stops cleanly (exit 130) after journaling what was transcribed so far.
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
LOG_LEVELS = ("debug", "info", "warning", "error")
LIVE_COMMANDS = ("transcribe", "assist", "caption")
BENCHES = {  # name → module with main(argv)
    "asr": "bench.asr_bench", "asr-stream": "bench.asr_stream_bench", "asr-offline": "bench.asr_offline_bench",
    "tts": "bench.tts_bench",
    "predgen": "bench.predgen_bench", "ssbd": "bench.ssbd_bench", "partial-streams": "bench.make_partial_streams",
    "voice": "bench.voice_bench", "soak": "bench.soak_bench", "caption": "bench.caption_bench",
    "duplex": "bench.duplex_bench", "all": "bench.all", "verify-cost": "bench.gpu_verify_cost",
    "conversation": "bench.conversation_bench", "causal-final": "bench.causal_final_bench",
    "caption-prompt": "bench.caption_prompt_bench",
    "vad-gate": "bench.vad_gate", "gpu-codec-tts": "bench.gpu_codec_tts",
}


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
                        help=_set_help())
    common.add_argument("--out", default="out", help="directory for reports, WAVs and transcripts (default: out)")
    common.add_argument("--journal", default=None, metavar="FILE",
                        help="session journal, appended (default: OUT/journal.jsonl)")
    common.add_argument("--quiet", action="store_true", help="print only the final results")
    common.add_argument("--models", default=None, metavar="DIR",
                        help="a models folder (python -m engine.models export DIR) used before the model packages")

    p = argparse.ArgumentParser(prog="specvoice", description="Offline speculative voice assistant.")
    p.add_argument("--version", action="version", version=f"specvoice {_version()}")
    p.add_argument("--log-level", choices=LOG_LEVELS, default="warning",
                   help="messages logged on stderr from this level up, for every command (default: warning)")
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
    c.add_argument("--to", default=None, help="target language code or name (default: caption.target_language)")
    e = sub.add_parser("export", help="render the journal as TXT, SRT or VTT (one continuous clock)")
    e.add_argument("file", help="output file; the format follows its suffix: .txt, .srt or .vtt")
    e.add_argument("--journal", default=None, metavar="FILE", help="journal to read (default: OUT/journal.jsonl)")
    e.add_argument("--out", default="out", help="directory of the default journal (default: out)")
    e.add_argument("--session", default=None, help="only this session id, on its own clock")
    b = sub.add_parser("bench", help="benchmarks (method vs its AR baseline, JSON out)")
    b.add_argument("which", choices=list(BENCHES), help="which benchmark: " + ", ".join(BENCHES))
    b.add_argument("rest", nargs=argparse.REMAINDER, help="options of that benchmark (see --help after its name)")
    ap = sub.add_parser("app", help="the desktop app (Qt)")
    ap.add_argument("--config", help="TOML configuration file (the dialog's saved edits apply on top)")
    ap.add_argument("--models", default=None, metavar="DIR",
                    help="a models folder (python -m engine.models export DIR) used before the model packages")
    m = sub.add_parser("models", parents=[common], help="resolve, join and verify every model role")
    m.add_argument("--verify", action="store_true", help="re-hash every file even if it was verified before")
    m.add_argument("--roles", default="", help="comma-separated roles (default: all)")
    return p


def _version() -> str:
    """The installed package's version (its metadata), or "unknown" when running from a tree never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specvoice")
    except PackageNotFoundError:
        return "unknown"


def configure_logging(level: str) -> None:
    """Let log records from ``level`` ("debug", "info", "warning" or "error") up through, to stderr. A handler that
    an embedding program (or a test harness) put on the root logger is kept rather than doubled."""
    import logging

    root = logging.getLogger()
    root.setLevel(getattr(logging, level.upper()))
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("specvoice: %(levelname)s: %(name)s: %(message)s"))
        root.addHandler(handler)


def _set_help() -> str:
    from engine.config import SECTIONS, SETTINGS

    return (f"override any of the {len(SETTINGS)} settings, e.g. --set vad.min_silence_s=0.8 (repeatable); sections: "
            f"{', '.join(SECTIONS)}; each setting's default, range and meaning: python -m engine.config")


def _config(args):
    from engine.config import load_config

    models = {}
    for item in args.model:
        if "=" not in item:
            raise _UsageError(f"--model expects ROLE=SPEC, got {item!r}")
        k, v = item.split("=", 1)
        models[k.strip()] = v.strip()
    sets = list(args.set)
    if getattr(args, "models", None):
        sets.append(f"models.dir={_use_models_dir(args.models)}")
    return load_config(args.config, models, sets)


def _use_models_dir(path: str) -> str:
    """Make ``path`` the models folder of this process and of every process it starts (``$SPECVOICE_MODELS_DIR``,
    which :func:`engine.models.models_dir` reads: benchmarks and the codec voice load their own configuration).
    Returns the absolute path.

    Raises:
        _UsageError: the folder does not exist.
    """
    import os

    from engine.models import MODELS_DIR_ENV

    p = Path(path).expanduser().resolve()
    if not p.is_dir():
        raise _UsageError(f"--models {path}: no such folder")
    os.environ[MODELS_DIR_ENV] = str(p)
    return str(p)


def _pop_models_option(rest: list[str]) -> tuple[list[str], str | None]:
    """``rest`` without ``--models DIR`` / ``--models=DIR`` (a benchmark's own options are left), and DIR."""
    out, found, i = [], None, 0
    while i < len(rest):
        a = rest[i]
        if a == "--models" and i + 1 < len(rest):
            found, i = rest[i + 1], i + 2
            continue
        if a.startswith("--models="):
            found = a.split("=", 1)[1]
        else:
            out.append(a)
        i += 1
    return out, found


class _UsageError(Exception):
    """A command line that cannot run (missing input, bad option value)."""


class WorkerError(RuntimeError):
    """A worker stage (the caption translator) failed; the message is one line for the user."""


# -- output -----------------------------------------------------------------------------------------------------
class Printer:
    """Prints events as they arrive (one line each; partials overwrite on a TTY)."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.tty = sys.stdout.isatty()
        self.t0 = time.monotonic()
        self._partial = False
        self._lock = threading.Lock()  # the ASR loop and the answer/caption threads print

    def line(self, text: str, partial: bool = False) -> None:
        if self.quiet:
            return
        stamp = f"[{time.monotonic() - self.t0:6.2f}s] "
        with self._lock:
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
    path.write_text(json.dumps(data, indent=2, default=float), encoding="utf-8")


def _journal_path(args) -> Path:
    return Path(args.journal) if args.journal else Path(args.out) / "journal.jsonl"


class Live:
    """What a live command (transcribe, assist, caption) runs on: its opened input, output folder and journal
    session; ``transcriber`` is set once the stream runs."""

    def __init__(self, args, cfg):
        from app.journal import Journal

        self.source = _source(args, cfg)  # decodes a file now: bad input fails before any model loads
        self.out = Path(args.out)
        journal = _journal_path(args)
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            self.session = Journal(journal).start(args.cmd, "microphone" if args.mic else str(
                args.audio or default_question()))
        except OSError as e:
            raise _UsageError(f"cannot write the output folder {self.out} or the journal {journal}: "
                              f"{e.strerror or e}") from None
        self.transcriber = None
        self.t_end: dict[int, tuple[float, float]] = {}  # utterance → (t_start, t_end) on the session clock
        self.texts: dict[int, str] = {}  # utterance → its text, revisions applied

    def append_text(self, name: str, text: str) -> None:
        """Append ``text`` to ``OUT/name`` (UTF-8), after it was journaled."""
        with open(self.out / name, "a", encoding="utf-8") as f:
            f.write(text)

    def end(self, status: str) -> None:
        st = self.transcriber
        self.session.end(st.stats.audio_s if st is not None else None, status)


def _r(x, nd=3):
    return None if x is None else round(float(x), nd)


# -- commands ---------------------------------------------------------------------------------------------------
def _run_transcriber(args, cfg, rt, live: Live, on_event, printer, abort: threading.Event | None = None):
    """Run capture + streaming ASR on ``live.source``; journal, print and pass each event to ``on_event`` on this
    thread. ``abort`` (set by a failed stage) stops the stream. Returns the transcriber.

    Raises:
        KeyboardInterrupt: after the stream is stopped and what it finalised is journaled.
        Exception: what the ASR thread or ``on_event`` raised (the stream is stopped first).
    """
    from engine.core.events import Error, FinalTranscript, PartialTranscript, RevisedTranscript, SpeechEnded
    from engine.pipeline import Backlog, EventQueue

    events = EventQueue(maxsize=256)  # stale partials may be dropped; finals never
    st = rt.transcriber(live.source, events.put)
    detector = getattr(live.source, "barge_in", None)  # speaker on (assist --mic): audio.aec.EchoCancelledSource
    if detector is not None and st.vad is not None:
        from audio.aec import EchoGatedVAD

        st.vad = EchoGatedVAD(st.vad, detector)  # the answer's echo starts no utterance; a barge-in starts it
    live.transcriber = st
    result: dict = {}
    done = object()
    eos: dict[int, float] = {}
    offset = live.session.offset_s

    def worker():
        try:
            result["stats"] = st.run()
        except BaseException as e:  # surfaced on the main thread
            result["error"] = e
        finally:
            events.put(done)

    def handle(ev) -> None:
        if isinstance(ev, PartialTranscript):
            printer.line(f"… {ev.committed.strip()} ⟨{ev.tentative}⟩", partial=True)
        elif isinstance(ev, SpeechEnded):
            eos[ev.utterance] = ev.wall
        elif isinstance(ev, FinalTranscript):
            live.t_end[ev.utterance] = (ev.t_start, ev.t_end)
            if ev.text:  # journaled before it is shown: a crash loses nothing that was printed
                e = eos.get(ev.utterance)
                live.session.user(ev.utterance, ev.text, ev.t_start, ev.t_end, ev.wall - e if e else None,
                                  language=ev.language)
                live.append_text(f"{args.cmd}-transcript.txt",
                                 f"[{offset + ev.t_start:.2f}-{offset + ev.t_end:.2f}] {ev.text}\n")
            live.texts[ev.utterance] = ev.text
            printer.line(f"you: {ev.text}")
        elif isinstance(ev, RevisedTranscript):  # the second pass: journaled (the exports show it), then shown
            live.session.revision(ev.utterances, ev.texts, ev.t_start, ev.t_end, ev.language)
            live.texts.update(zip(ev.utterances, ev.texts))
            # the span it revised, unchanged utterances inside it included, so the line reads as what was said
            span = range(min(ev.utterances), max(ev.utterances) + 1) if ev.utterances else range(0)
            printer.line(f"you (revised): {' '.join(live.texts[i] for i in span if live.texts.get(i)) or ev.text}")
        elif isinstance(ev, Backlog):
            printer.line("(speech recognition is back in step)" if ev.caught_up else
                         f"(speech recognition is {ev.behind_s:.1f} s behind; catching up, no audio is dropped)")
        elif isinstance(ev, Error):
            live.session.error(ev.where, ev.message)
            printer.line(f"! {ev.where}: {ev.message}")
        on_event(ev)

    th = threading.Thread(target=worker, name="asr", daemon=True)
    th.start()
    try:
        while True:
            try:
                ev = events.get(timeout=0.1)
            except queue.Empty:
                if abort is not None and abort.is_set():
                    st.stop()
                continue
            if ev is done:
                break
            handle(ev)
    except KeyboardInterrupt:
        st.stop()
        deadline = time.monotonic() + 30  # the utterance in flight is finalised: journal it too
        while time.monotonic() < deadline:
            try:
                ev = events.get(timeout=0.1)
            except queue.Empty:
                if not th.is_alive():
                    break
                continue
            if ev is done:
                break
            if isinstance(ev, (FinalTranscript, Error, SpeechEnded)):
                handle(ev)
        raise
    except BaseException:
        st.stop()
        raise
    finally:
        events.close()
    th.join()
    if "error" in result:
        raise result["error"]
    return st


def _asr_report(st, cfg) -> dict:
    s = st.stats
    utts = []
    for u in s.utterances:
        utts.append({
            "text": u.text, "language": u.language, "revised_text": u.revised_text,
            "t_start": _r(u.t_start), "t_end": _r(u.t_end), "updates": u.updates, "asr_compute_s": _r(u.asr_compute_s),
            "eos_to_final_s": _r(u.final_wall - u.eos_wall) if u.final_wall and u.eos_wall else None,
            "vad_decision_s": _r(u.vad_end_wall - u.eos_wall) if u.vad_end_wall and u.eos_wall else None,
        })
    lat = [u["eos_to_final_s"] for u in utts if u["eos_to_final_s"] is not None]
    return {
        "method": cfg.asr.method, "model_role": cfg.asr.model_role, "audio_s": _r(s.audio_s),
        "compute_s": _r(s.asr_compute_s), "rtf": _r(s.rtf, 4), "updates": s.updates,
        "eos_to_final_s_mean": _r(np.mean(lat)) if lat else None, "utterances": utts,
        "text": " ".join(u.text for u in s.utterances if u.text),
        # the second pass (asr.revise_max_s): each utterance's latest text, and its share of compute_s
        "revised_text": " ".join(t for t in st.texts.values() if t), "revisions": s.revisions,
        "revise_compute_s": _r(s.revise_compute_s),
    }


def cmd_transcribe(args, cfg, rt, printer, live: Live) -> dict:
    st = _run_transcriber(args, cfg, rt, live, lambda ev: None, printer)
    rep = _asr_report(st, cfg)
    counts = getattr(rt.asr_backend(), "counts", None)
    if counts is not None:  # SSD: how each re-decode ended (Eq. 3 ctc / Eq. 5 verified / Eq. 6 fallback)
        rep["ssd_stages"] = dict(counts)
    return {"asr": rep}


def cmd_assist(args, cfg, rt, printer, live: Live) -> dict:
    from audio.io import write_wav
    from audio.playback import NullPlayer, open_player
    from engine.answer.assistant import Conversation
    from engine.core.events import (AnswerAudio, AnswerDelta, AnswerDone, AnswerSentence, Error, FinalTranscript, PartialTranscript,
        SpeechStarted)
    from engine.pipeline import EventQueue
    from engine.runtime import build_assistant

    out = live.out
    # answer text deltas are display-only (dropped when delivery falls behind); sentences, audio and ends never
    answer_events = EventQueue(maxsize=256, droppable=lambda ev: isinstance(ev, AnswerDelta))
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

    if args.mic and player.available:  # speaker on: cancel the assistant's own voice before VAD and ASR
        def on_barge_in(t: float) -> None:  # the user talks over the answer: stop it, keep what was heard
            conv.on_speech_start()
            conv.on_playback_cut(player.stop())

        live.source, sink = rt.echo_source(live.source, on_barge_in)
        if sink is not None:
            player.reference = sink
            printer.line("echo cancellation on (duplex.echo_cancellation)")

    def handle(ev) -> None:
        if isinstance(ev, AnswerSentence):
            live.session.answer_sentence(ev.utterance, ev.index, ev.text)  # journaled before it is shown
            printer.line(f"assistant: {ev.text}")
        elif isinstance(ev, AnswerAudio):
            audio_parts.append(ev.samples)
            player.play(ev.samples, ev.sample_rate)
            conv.mark_heard()
        elif isinstance(ev, AnswerDone):
            t = live.t_end.get(ev.utterance, (None, None))[1]
            live.session.answer(ev.utterance, ev.text, ev.interrupted, t, t)
            if ev.interrupted:
                printer.line("(answer interrupted)")
            if len(results) and results[-1]["utterance"] == ev.utterance:
                results[-1]["answer"] = ev.text
        elif isinstance(ev, Error):
            live.session.error(ev.where, ev.message)
            printer.line(f"! {ev.where}: {ev.message}")

    # Answers are delivered the moment they are ready, by their own thread: never only on the next ASR event
    # (when the user is silent there is none).
    delivering = threading.Event()
    delivering.set()

    def deliver() -> None:
        while delivering.is_set() or len(answer_events):
            try:
                ev = answer_events.get(timeout=0.05)
            except queue.Empty:
                continue
            try:
                handle(ev)
            except Exception as e:  # a broken output device must not stop the answers
                printer.line(f"! answer delivery: {type(e).__name__}: {e}")

    deliverer = threading.Thread(target=deliver, name="answer-delivery", daemon=True)
    deliverer.start()

    def on_event(ev):
        if isinstance(ev, SpeechStarted):
            conv.on_speech_start()  # the user speaks: the answer (generated or still playing) stops
            conv.on_playback_cut(player.stop())
        elif isinstance(ev, PartialTranscript):
            conv.on_partial(ev.utterance, ev.source(cfg.llm.predgen_source), ev.language)
        elif isinstance(ev, FinalTranscript):
            finals[ev.utterance] = ev.wall
            conv.on_final(ev.utterance, ev.text, ev.language)

    try:
        st = _run_transcriber(args, cfg, rt, live, on_event, printer)
        while not conv.wait_idle(timeout=0.05):
            pass
    finally:
        conv.close()
        delivering.clear()
        deliverer.join(timeout=30)
        answer_events.close()
    player.wait(timeout=120)
    player.close()
    eos = {u.index: u.eos_wall for u in st.stats.utterances}
    wav = None
    if audio_parts:
        wav = write_wav(out / f"answer-{live.session.id}.wav", np.concatenate(audio_parts), tts.sample_rate)
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


def cmd_caption(args, cfg, rt, printer, live: Live) -> dict:
    """Live captions through :class:`engine.translate.caption_loop.CaptionLoop` (every final transcript in order, then the newest
    partial), the translator built by :func:`engine.runtime.build_translator` — the GUI and the caption benchmark
    run the same two.

    Raises:
        WorkerError: the translator failed (the stream is stopped; the error is journaled and printed first).
    """
    from engine.translate.caption_loop import CaptionLoop
    from engine.translate.languages import language_name
    from engine.runtime import build_translator

    args.to = args.to or cfg.caption.target_language
    translator = build_translator(cfg, rt, args.to,
                                  on_trigger=lambda ev: printer.line(f"(caption re-translated: {', '.join(ev.reasons)})"))
    printer.line(f"captioning into {language_name(args.to)} ({cfg.caption.method}, β={cfg.caption.beta}, "
                 f"mask-k={cfg.caption.mask_k}{' display-only' if cfg.caption.display_only_mask else ''}, "
                 f"by {cfg.caption.segment})")
    abort = threading.Event()
    per_utt: dict[int, dict] = {}
    captions: list = []

    def on_caption(cap, u) -> None:
        captions.append(cap)
        st = translator.stream
        per_utt[cap.utterance] = {
            "source": cap.source, "translation": u.text, "updates": len(st.updates), "ne": round(st.ne, 4),
            "acceptance_A_over_D": round(st.acceptance, 4), "accepted_share_A_over_O": round(st.accepted_share, 4),
            "output_tokens_per_s": round(st.tokens_per_s, 2),
            "compute_s": round(sum(x.compute_s for x in st.updates), 3)}
        if cap.final:  # journaled before it is shown
            t0, t1 = live.t_end.get(cap.utterance, (None, None))
            live.session.caption(cap.utterance, cap.source, u.text, t0, t1)
            live.append_text("caption.txt", f"{cap.source}\n\t{u.text}\n")
        tail = f" ⟨{u.tail_text.strip()}⟩" if u.tail_text.strip() else ""
        printer.line(f"[{args.to}]{' (final)' if cap.final else ''} {u.stable_text}{tail}")

    def on_error(msg: str) -> None:  # the loop has stopped; the stream is stopped and the command fails with it
        try:
            live.session.error("caption", msg)
        finally:
            printer.line(f"! caption: {msg}")
            abort.set()

    loop = CaptionLoop(translator, on_caption, on_error=on_error, source=cfg.caption.source)
    try:
        st = _run_transcriber(args, cfg, rt, live, loop.on_event, printer, abort)
    finally:
        loop.close()  # the finals already queued are still translated
    if loop.error is not None:
        raise WorkerError(f"caption failed: {loop.error}")
    utts = [per_utt[k] for k in sorted(per_utt)]
    tps = [u["output_tokens_per_s"] for u in utts if u["output_tokens_per_s"]]
    return {"asr": _asr_report(st, cfg), "target_language": language_name(args.to),
            "caption": {"method": cfg.caption.method, "beta": cfg.caption.beta, "mask_k": cfg.caption.mask_k,
                        "display_only": cfg.caption.display_only_mask, "segment": cfg.caption.segment,
                        "updates": len(captions), "final": [c.translation for c in captions if c.final],
                        "ne_mean": _r(np.mean([u["ne"] for u in utts])) if utts else None,
                        "compute_s_mean": _r(np.mean([c.compute_s for c in captions])) if captions else None,
                        "tokens_per_s_mean": _r(np.mean(tps), 2) if tps else None, "utterances": utts,
                        "partials_cancelled": loop.cancelled, "guard": _guard_report(translator)}}


def _guard_report(translator) -> dict | None:
    g = getattr(translator, "guard_stats", None)
    if g is None:
        return None
    return {"checked": g.checked, "triggered": g.triggered, "replacement_failed": g.replacement_failed,
            "events": [getattr(e, "__dict__", str(e)) for e in g.events]}


def cmd_models(args, cfg, rt, printer, live=None) -> dict:
    """Resolve every model (or ``--roles``); ``--verify`` re-hashes each pinned file and opens every model the
    configuration can use — the six roles, the CTC draft head and the codec TTS — naming the one that fails.

    Raises:
        ModelError: the first model that fails, by name.
    """
    from engine.models import ASSET_MODELS, MODEL_NAMES, check_model, resolve

    names = [r for r in args.roles.split(",") if r] or list(MODEL_NAMES)
    unknown = [r for r in names if r not in MODEL_NAMES]
    if unknown:
        raise _UsageError(f"unknown model {unknown[0]!r}; models are {', '.join(MODEL_NAMES)}")
    rep = {}
    for name in names:
        t0 = time.perf_counter()
        if args.verify:
            info = check_model(name, cfg, progress=not args.quiet)
        elif name in ASSET_MODELS:  # small files in assets/: always opened
            info = check_model(name, cfg)
        else:
            m = resolve(name, cfg, verify="stamp", progress=not args.quiet)
            info = {"path": str(m.path), "source": m.source, "kind": m.kind, "sha256": m.sha256 or None}
        rep[name] = {**info, "seconds": _r(time.perf_counter() - t0)}
        printer.line(f"{name:11s} ok  {info['path']}")
    devices = rt.devices()
    for stage, d in devices.items():
        printer.line(f"{stage:11s} {d['device']:5s} {d['runs']} ({stage}.device = {d['setting']})")
    return {"models": rep, "devices": devices}


def cmd_export(args) -> int:
    """``specvoice export FILE``: render the journal as TXT/SRT/VTT (UTF-8). Returns the exit code."""
    from app.export import RENDER, export
    from app.journal import read_journal

    journal = _journal_path(args)
    target = Path(args.file)
    try:
        if target.suffix.lower() not in RENDER:
            raise _UsageError(f"export format must be .txt, .srt or .vtt, got {target.suffix or 'none'}")
        if target.exists() and target.resolve() == journal.resolve():
            raise _UsageError(f"refusing to write the export over the journal {journal}")
        records = read_journal(journal)
        if not records:
            raise _UsageError(f"no journal records in {journal}")
        if args.session and not any(r.get("session") == args.session for r in records):
            raise _UsageError(f"no session {args.session!r} in {journal}")
        export(records, target, args.session)
    except (_UsageError, OSError) as e:
        print(f"specvoice: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(f"exported {journal} → {target}")
    return 0


COMMANDS = {"transcribe": cmd_transcribe, "assist": cmd_assist, "caption": cmd_caption, "models": cmd_models}


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``). Returns the exit code: 0, 1 (internal
    failure), 2 (a problem the user can fix: input, model, configuration, device) or 130 (interrupted)."""
    from audio.io import AudioError
    from engine.config import ConfigError
    from engine.llm.protocol import ModelLoadError
    from engine.llm.remote import RemoteLMError
    from engine.models import ModelError

    args = _parser().parse_args(argv)
    configure_logging(args.log_level)
    for stream in (sys.stdout, sys.stderr):  # a transcript in any language must not crash a narrow console
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    if args.cmd == "app":
        from app.desktop_check import check_platform_libraries

        problem = check_platform_libraries()  # before Qt: a missing X11 library is one line here, not Qt's abort
        if problem:
            print(f"specvoice: error: {problem}", file=sys.stderr)
            return EXIT_USAGE
        try:
            from app.main_window import run_app
        except ImportError as e:
            print(f"specvoice: error: the desktop app needs PySide6 (pip install 'specvoice[app]'): {e}",
                  file=sys.stderr)
            return EXIT_USAGE
        try:  # the file and the environment the CLI reads: a bad one is one line here, not a window later
            from engine.config import load_config

            if args.models:  # the app's runtimes resolve models from DIR ($SPECVOICE_MODELS_DIR)
                _use_models_dir(args.models)
            load_config(args.config)
        except (ConfigError, _UsageError) as e:
            print(f"specvoice: error: {e}", file=sys.stderr)
            return EXIT_USAGE
        return run_app([sys.argv[0]], config_path=args.config)
    if args.cmd == "bench":
        import importlib

        module = BENCHES[args.which]
        rest, models_dir = _pop_models_option(list(args.rest))
        if models_dir:  # every benchmark, and every job of ``bench all``, resolves its models from DIR
            try:
                _use_models_dir(models_dir)
            except _UsageError as e:
                print(f"specvoice: error: {e}", file=sys.stderr)
                return EXIT_USAGE
        if args.which == "predgen" and ("--backend=remote" in rest or any(
                a == "--backend" and b == "remote" for a, b in zip(rest, rest[1:]))):
            module = "bench.remote_bench"  # the same streams over an LLM server vs in-process
        try:
            bench = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
            print(f"specvoice: error: benchmark {args.which!r} is not part of this installation", file=sys.stderr)
            return EXIT_USAGE
        return bench.main(rest)
    if args.cmd == "export":
        return cmd_export(args)
    printer = Printer(args.quiet)
    report: dict = {"command": args.cmd, "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    out = Path(args.out)
    code = 0
    live: Live | None = None
    status = "ok"
    try:
        cfg = _config(args)
        from engine.runtime import Runtime

        rt = Runtime(cfg, progress=not args.quiet)
        if args.cmd in LIVE_COMMANDS:
            report["input"] = "microphone" if args.mic else str(args.audio or default_question())
            report["realtime"] = bool(args.mic or not args.fast)
            live = Live(args, cfg)
            report["journal"] = str(live.session.journal.path)
            report["session"] = live.session.id
        report.update(COMMANDS[args.cmd](args, cfg, rt, printer, live))
        report["models"] = report.get("models") or rt.describe()
        report["devices"] = report.get("devices") or rt.devices()  # where each stage ran (engine/devices.py)
        report["load_s"] = rt.load_times.seconds
    except (AudioError, ModelError, ConfigError, ModelLoadError, RemoteLMError, _UsageError) as e:
        print(f"specvoice: error: {e}", file=sys.stderr)
        report["error"] = str(e)
        code, status = EXIT_USAGE, "error"
    except KeyboardInterrupt:
        print("specvoice: interrupted", file=sys.stderr)
        report["error"] = "interrupted"
        code, status = 130, "interrupted"
    except WorkerError as e:
        print(f"specvoice: error: {e}", file=sys.stderr)
        report["error"] = str(e)
        code, status = 1, "error"
    except Exception as e:  # an unexpected failure: still one line, the report keeps the details
        import traceback

        print(f"specvoice: error: {type(e).__name__}: {e}", file=sys.stderr)
        report["error"] = f"{type(e).__name__}: {e}"
        report["traceback"] = traceback.format_exc()
        code, status = 1, "error"
    if live is not None:
        try:
            live.end(status)
        except OSError as e:
            print(f"specvoice: error: cannot write the journal: {e}", file=sys.stderr)
            code = code or 1
    report_path = out / f"{args.cmd}-report.json"
    try:
        _write_json(report_path, report)
        if code == 0:
            _print_summary(args.cmd, report, report_path, printer)
    except OSError as e:
        if code == 0:  # after a failure its own error line is the one the user needs
            print(f"specvoice: error: cannot write report {report_path}: {e}", file=sys.stderr)
            code = 1
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
