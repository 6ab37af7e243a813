"""``specvoice`` command line: transcribe, assist, caption, export, models, bench, app.

Live events print as they happen. Every final transcript, answer sentence, answer and caption is first appended
(fsynced) to the session journal (``--journal``, default ``OUT/journal.jsonl``, see :mod:`engine.journal`), then
printed; nothing a session wrote is ever truncated by a later one. Each command also writes a JSON report of
its latest run (``--out DIR``, default ``./out``).

The input is opened and decoded before any model loads. Errors a user can cause (bad audio, missing/corrupt
model, bad config, no device) print one line on stderr and exit 2; an internal failure prints one line and exits 1
(the report keeps the traceback); Ctrl-C stops cleanly (exit 130) after journaling what was transcribed so far.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from importlib import resources
from pathlib import Path

from .cli_options import BENCHES, LOG_LEVELS  # noqa: F401  (the command line's public tables)
from .cli_options import UsageError, config_from_args, configure_logging, parser, pop_models_option, use_models_dir

EXIT_USAGE = 2
CLOCK_REAL, CLOCK_FAST = "real time", "fast (not real time)"  # the report's "clock": how the input was fed
LIVE_COMMANDS = ("transcribe", "assist", "caption")


def default_question() -> Path:
    """The embedded spoken question (assets/question.wav)."""
    return Path(str(resources.files("assets").joinpath("question.wav")))


def _usage_error(message: str) -> int:
    """Print the one ``specvoice: error:`` line of a problem the user can fix; returns the exit code (2)."""
    print(f"specvoice: error: {message}", file=sys.stderr)
    return EXIT_USAGE


class WorkerError(RuntimeError):
    """A worker stage (the caption translator) failed; the message is one line for the user."""


# -- output -----------------------------------------------------------------------------------------------------
class Printer:
    """Prints events as they arrive (one line each, stamped with the seconds since the command started; partials
    overwrite on a TTY). ``quiet`` (``--quiet``): only the lines marked ``result`` — final transcripts, revisions,
    whole answers, final captions — are printed, without stamps."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.tty = sys.stdout.isatty()
        self.t0 = time.monotonic()
        self._partial = False
        self._lock = threading.Lock()  # the ASR loop and the answer/caption threads print

    def line(self, text: str, partial: bool = False, result: bool = False) -> None:
        if self.quiet and not result:
            return
        stamp = "" if self.quiet else f"[{time.monotonic() - self.t0:6.2f}s] "
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
    """The command's input, opened (a file is decoded now: bad input fails before any model loads)."""
    from engine.session import open_source

    if args.mic:
        return open_source("", cfg)
    path = args.audio
    if path is None:
        if args.cmd == "assist":
            path = default_question()
        else:
            raise UsageError(f"{args.cmd}: give an audio file or --mic")
    return open_source(Path(path), cfg, realtime=not args.fast)


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=float), encoding="utf-8")


def _journal_path(args) -> Path:
    return Path(args.journal) if args.journal else Path(args.out) / "journal.jsonl"


class Live:
    """A live command (transcribe, assist, caption) as an adapter over :class:`engine.session.Session`: it opens
    the input (a file is decoded now: bad input fails before any model loads), the output folder and the journal
    session, and prints the session's events — each journaled by the session before it arrives here — and appends
    the final ones to ``OUT/<command>-transcript.txt`` and ``OUT/caption.txt``: each session under a header line
    naming its source, each line timed in seconds from the start of that source's audio (as the journal is).

    Raises:
        UsageError: the output folder or the journal cannot be written.
        audio.io.AudioError: the input cannot be opened.
    """

    def __init__(self, args, cfg, rt, printer: Printer):
        from engine.session import Session, SessionOptions

        self.args, self.printer, self.out = args, printer, Path(args.out)
        self.texts: dict[int, str] = {}  # utterance → its text, revisions applied
        self.spans: dict[int, tuple[float, float]] = {}  # utterance → its final's audio span, s
        self._headed: set[str] = set()  # the files that have this session's header line
        source = _source(args, cfg)
        if args.cmd == "caption":  # --to went through caption.target_language's checks (config_from_args)
            args.to = cfg.caption.target_language
        options = SessionOptions(mode=args.cmd, play=not getattr(args, "no_play", False),
                                 wav_dir=self.out if args.cmd == "assist" else None,
                                 target_language=args.to if args.cmd == "caption" else "")
        journal = _journal_path(args)
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            self.session = Session(cfg, rt, options, self.show, journal=journal, source=source)
        except OSError as e:
            raise UsageError(f"cannot write the output folder {self.out} or the journal {journal}: "
                             f"{e.strerror or e}") from None
        self.journal = self.session.journal

    def run(self):
        """Run the session. Returns its :class:`engine.session.SessionResult`.

        Raises:
            KeyboardInterrupt: after what was said is journaled.
            WorkerError: a stage failed (the caption translator); the error was journaled and printed first.
        """
        result = self.session.run()
        if result.error is not None:
            raise WorkerError(result.error)
        return result

    def append_text(self, name: str, text: str) -> None:
        """Append ``text`` to ``OUT/name`` (UTF-8), after it was journaled; the session's first line in the file is
        preceded by its header (the session, its command and source, and the clock of its times)."""
        with open(self.out / name, "a", encoding="utf-8") as f:
            if name not in self._headed:
                self._headed.add(name)
                f.write(f"# session {self.journal.id} ({self.args.cmd}): {self.session.source.name}; "
                        f"[start-end] in seconds from its start\n")
            f.write(text)

    def end(self, status: str) -> None:
        """End the journal session (once: a session that ran has ended it already)."""
        self.journal.end(None, status)

    def show(self, ev) -> None:
        from engine.core.events import (AnswerDone, AnswerSaved, AnswerSentence, Caption, EchoCancelling, Error,
                                        FinalTranscript, PartialTranscript, RevisedTranscript, Status, WakeState)
        from engine.pipeline import Backlog

        line = self.printer.line
        if isinstance(ev, PartialTranscript):
            line(f"… {ev.committed.strip()} ⟨{ev.tentative}⟩", partial=True)
        elif isinstance(ev, FinalTranscript):
            if ev.text:  # on the journal's clock: seconds from the start of this session's audio
                self.append_text(f"{self.args.cmd}-transcript.txt", f"[{ev.t_start:.2f}-{ev.t_end:.2f}] {ev.text}\n")
            self.texts[ev.utterance] = ev.text
            self.spans[ev.utterance] = (ev.t_start, ev.t_end)
            if ev.text:
                line(f"you: {ev.text}", result=True)
        elif isinstance(ev, RevisedTranscript):
            self.texts.update(zip(ev.utterances, ev.texts))
            line(f"you (revised): {' '.join(self.texts[i] for i in self.revised_span(ev) if self.texts.get(i))}",
                 result=True)
        elif isinstance(ev, Backlog):
            line("(speech recognition is back in step)" if ev.caught_up else
                 f"(speech recognition is {ev.behind_s:.1f} s behind; catching up, no audio is dropped)")
        elif isinstance(ev, Error):
            line(f"! {ev.where}: {ev.message}")
        elif isinstance(ev, (Status, WakeState)):  # WakeState: "listening for '<phrase>'" / "in conversation"
            line(ev.text)
        elif isinstance(ev, EchoCancelling) and ev.on:
            line("echo cancellation on (duplex.echo_cancellation)")
        elif isinstance(ev, AnswerSentence):
            line(f"assistant: {ev.text}")
        elif isinstance(ev, AnswerDone):
            if self.printer.quiet and ev.text.strip():  # the whole answer, once
                line(f"assistant: {ev.text.strip()}", result=True)
            if ev.interrupted:
                line("(answer interrupted)", result=True)
        elif isinstance(ev, AnswerSaved):
            line(f"answer audio: {ev.path}")
        elif isinstance(ev, Caption):
            if ev.final:
                t0, t1 = self.spans.get(ev.utterance, (None, None))
                when = f"[{t0:.2f}-{t1:.2f}] " if t0 is not None else ""
                self.append_text("caption.txt", f"{when}{ev.source}\n\t{ev.translation}\n")
                if self.printer.quiet:
                    line(f"[{self.args.to}] {ev.translation}", result=True)
                    return
            tail = f" ⟨{ev.translation_tail.strip()}⟩" if ev.translation_tail.strip() else ""
            line(f"[{self.args.to}]{' (final)' if ev.final else ''} {ev.translation_stable}{tail}")

    def revised_span(self, ev) -> range:
        """The utterances a ``RevisedTranscript`` re-decoded, in order: those whose text changed (``ev.utterances``)
        and every utterance whose final lies in the audio it decoded (``ev.t_start``..``ev.t_end``), unchanged ones
        included — the line shows the whole revised span, as what was said."""
        inside = {u for u, (a, b) in self.spans.items() if ev.t_start <= (a + b) / 2 <= ev.t_end}
        utts = inside | set(ev.utterances)
        return range(min(utts), max(utts) + 1) if utts else range(0)


# -- commands ---------------------------------------------------------------------------------------------------
def cmd_transcribe(args, cfg, rt, printer, live: Live) -> dict:
    from engine.session_report import asr_report

    rep = asr_report(live.run(), cfg)
    counts = getattr(rt.asr_backend(), "counts", None)
    if counts is not None:  # SSD: how each re-decode ended (Eq. 3 ctc / Eq. 5 verified / Eq. 6 fallback)
        rep["ssd_stages"] = dict(counts)
    return {"asr": rep}


def cmd_assist(args, cfg, rt, printer, live: Live) -> dict:
    """Talk → transcript → spoken answer (played unless ``--no-play``; always written to ``OUT/answer-<session>.wav``);
    with ``--mic`` and a loudspeaker the microphone is echo-cancelled and talking over the answer stops it."""
    from engine.session_report import answers_report, asr_report

    result = live.run()
    return {"asr": asr_report(result, cfg), **answers_report(result, cfg)}


def cmd_caption(args, cfg, rt, printer, live: Live) -> dict:
    """Live captions into ``--to`` through the session's caption loop (the GUI and the caption benchmark run the
    same :class:`engine.translate.caption_loop.CaptionLoop` and :func:`engine.runtime.build_translator`).

    Raises:
        WorkerError: the translator failed (the stream is stopped; the error is journaled and printed first).
    """
    from engine.session_report import asr_report, caption_report
    from engine.translate.languages import language_name

    result = live.run()
    return {"asr": asr_report(result, cfg), "target_language": language_name(args.to),
            "caption": caption_report(result, cfg)}


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
        raise UsageError(f"unknown model {unknown[0]!r}; models are {', '.join(MODEL_NAMES)}")
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
        rep[name] = {**info, "seconds": round(time.perf_counter() - t0, 3)}
        printer.line(f"{name:11s} ok  {info['path']}")
    devices = rt.devices()
    for stage, d in devices.items():
        printer.line(f"{stage:11s} {d['device']:5s} {d['runs']} ({stage}.device = {d['setting']})")
    return {"models": rep, "devices": devices}


def cmd_export(args) -> int:
    """``specvoice export FILE``: render the latest session of the journal (``--session ID``: that one; ``all``:
    every session, on one clock) as TXT/SRT/VTT (UTF-8). Returns the exit code."""
    from app.export import RENDER, export, pick_session
    from engine.journal import read_journal

    journal = _journal_path(args)
    target = Path(args.file)
    try:
        if target.suffix.lower() not in RENDER:
            raise UsageError(f"export format must be .txt, .srt or .vtt, got {target.suffix or 'none'}")
        if target.exists() and target.resolve() == journal.resolve():
            raise UsageError(f"refusing to write the export over the journal {journal}")
        records = read_journal(journal)
        if not records:
            raise UsageError(f"no journal records in {journal}")
        try:
            session = pick_session(records, args.session)
        except ValueError as e:
            raise UsageError(f"{e} in {journal}") from None
        export(records, target, session)
    except (UsageError, OSError) as e:
        return _usage_error(f"{e}")
    print(f"exported {'every session' if session is None else 'session ' + session} of {journal} → {target}")
    return 0


def summary(report: dict) -> list[str]:
    """The lines printed at the end of a command (:func:`engine.session_report.summary_lines`); a ``--fast`` run's
    latency lines are marked as not real-time, and a line says why."""
    from engine.session_report import summary_lines

    lines = summary_lines(report)
    if report.get("clock") != CLOCK_FAST:
        return lines
    note = (f"clock: {CLOCK_FAST} — --fast fed the file as fast as it was consumed, so these latencies are not "
            f"comparable with real-time runs (run without --fast for real-time figures)")
    return [f"{ln} [{CLOCK_FAST}]" if "end of speech" in ln else ln for ln in lines] + [note]


COMMANDS = {"transcribe": cmd_transcribe, "assist": cmd_assist, "caption": cmd_caption, "models": cmd_models}


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``). Returns the exit code: 0, 1 (internal
    failure), 2 (a problem the user can fix: input, model, configuration, device) or 130 (interrupted)."""
    from audio.io import AudioError
    from engine.config import ConfigError
    from engine.llm.protocol import ModelLoadError
    from engine.llm.remote import RemoteLMError
    from engine.models import ModelError

    args = parser().parse_args(argv)
    configure_logging(args.log_level)
    for stream in (sys.stdout, sys.stderr):  # a transcript in any language must not crash a narrow console
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    if args.cmd == "app":
        from app.desktop_check import check_display, check_platform_libraries

        # before Qt: no display, or a missing X11 library, is one line here, not Qt's abort
        problem = check_display() or check_platform_libraries()
        if problem:
            return _usage_error(f"{problem}")
        try:
            from app.main_window import run_app
        except ImportError as e:
            return _usage_error(f"the desktop app needs PySide6 (pip install 'specvoice[app]'): {e}")
        try:  # the file and the environment the CLI reads: a bad one is one line here, not a window later
            from engine.config import load_config

            if args.models:  # the app's runtimes resolve models from DIR ($SPECVOICE_MODELS_DIR)
                use_models_dir(args.models)
            load_config(args.config)
        except (ConfigError, UsageError) as e:
            return _usage_error(f"{e}")
        return run_app([sys.argv[0]], config_path=args.config)
    if args.cmd == "bench":
        import importlib

        module = BENCHES[args.which]
        rest, models_dir = pop_models_option(list(args.rest))
        if models_dir:  # every benchmark, and every job of ``bench all``, resolves its models from DIR
            try:
                use_models_dir(models_dir)
            except UsageError as e:
                return _usage_error(f"{e}")
        if args.which == "predgen" and ("--backend=remote" in rest or any(
                a == "--backend" and b == "remote" for a, b in zip(rest, rest[1:]))):
            module = "bench.remote_bench"  # the same streams over an LLM server vs in-process
        try:
            bench = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
            return _usage_error(f"benchmark {args.which!r} is not part of this installation")
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
        cfg = config_from_args(args)
        from engine.runtime import Runtime

        rt = Runtime(cfg, progress=not args.quiet)
        if args.cmd in LIVE_COMMANDS:
            report["input"] = "microphone" if args.mic else str(args.audio or default_question())
            report["realtime"] = bool(args.mic or not args.fast)
            report["clock"] = CLOCK_REAL if report["realtime"] else CLOCK_FAST
            live = Live(args, cfg, rt, printer)
            report["journal"] = str(live.journal.journal.path)
            report["session"] = live.journal.id
        report.update(COMMANDS[args.cmd](args, cfg, rt, printer, live))
        report["models"] = report.get("models") or rt.describe()
        report["devices"] = report.get("devices") or rt.devices()  # where each stage ran (engine/devices.py)
        report["load_s"] = rt.load_times.seconds
    except (AudioError, ModelError, ConfigError, ModelLoadError, RemoteLMError, UsageError) as e:
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
        if code == 0 and not args.quiet:
            for line in summary(report) + [f"report: {report_path}"]:
                print(line)
    except OSError as e:
        if code == 0:  # after a failure its own error line is the one the user needs
            print(f"specvoice: error: cannot write report {report_path}: {e}", file=sys.stderr)
            code = 1
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
