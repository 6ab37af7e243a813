"""``python -m app.screenshots OUTDIR``: the README's pictures of the desktop app, taken from a real session.

It opens the main window with the real models (the small 0.5B LLM answers, the answer audio is written to a WAV
rather than played), runs an assistant turn on the embedded spoken question and takes ``main.png`` while the answer
is being spoken, then runs a live-caption session of ``--caption-audio`` (default: the JFK clip of the test data)
and takes ``caption.png`` of the caption window, then ``settings.png`` of the settings dialog, and closes the window
as a user would. Run it under a display (X11, or Xvfb: ``xvfb-run python -m app.screenshots docs/screenshots``) or
without one (``QT_QPA_PLATFORM=offscreen``, the default when ``$DISPLAY`` is unset).

Exit status: 0 when the three PNGs were written and the app closed; 1 when a model failed to load or a step did
not happen within ``--timeout`` seconds; 2 when the desktop cannot run Qt (see :mod:`app.desktop_check`).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ("main.png", "caption.png", "settings.png")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m app.screenshots", description=__doc__.split("\n\n")[0])
    p.add_argument("outdir", help="folder for main.png, caption.png and settings.png (created)")
    p.add_argument("--config", default=None, help="TOML configuration file (default: the built-in defaults)")
    p.add_argument("--caption-audio", default=str(ROOT / "tests" / "data" / "jfk.flac"),
                   help="speech for the live-caption session (default: tests/data/jfk.flac)")
    p.add_argument("--keep", default=None, metavar="DIR",
                   help="keep the session's journal and answer WAVs in DIR (default: a temporary folder)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds each session may take (default: 900)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Take the three screenshots into ``OUTDIR``; returns the exit status (see the module docstring)."""
    args = _parser().parse_args(argv)
    if not os.environ.get("DISPLAY") and not os.environ.get("QT_QPA_PLATFORM"):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from .desktop_check import check_platform_libraries

    problem = check_platform_libraries()
    if problem:
        print(f"specvoice: error: {problem}", file=sys.stderr)
        return 2
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        return _take(args, out, Path(args.keep))
    with tempfile.TemporaryDirectory(prefix="specvoice-screenshots-") as tmp:
        return _take(args, out, Path(tmp))


def _take(args, out: Path, work: Path) -> int:
    from PySide6.QtCore import QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    from app.cli import default_question
    from engine.config import load_config
    from engine.runtime import Runtime

    from .controller import EngineController
    from .main_window import MainWindow

    base = load_config(args.config)
    small_lm = Runtime(base, progress=False).model("llm_draft").path  # the 0.5B LLM: an answer in seconds
    cfg = base.with_overrides({"models": {"llm_target": str(small_lm)}, "llm": {"max_answer_tokens": 40},
                               "audio": {"output_device": "none"}})
    app = QApplication.instance() or QApplication([sys.argv[0]])
    store = QSettings(str(work / "settings.ini"), QSettings.IniFormat)  # never the user's own settings
    w = MainWindow(EngineController(cfg), store, history_path=work / "history.jsonl")
    w.output_pick.setCurrentIndex(w.output_pick.findData("none"))
    state = {"step": "loading", "code": 0, "shot_main": False}
    watchdog = QTimer()
    watchdog.setSingleShot(True)

    def fail(msg: str) -> None:
        print(f"specvoice: error: screenshots: {msg}", file=sys.stderr)
        state["code"] = 1
        w.close()

    def arm(step: str) -> None:
        state["step"] = step
        watchdog.start(int(args.timeout * 1000))

    watchdog.timeout.connect(lambda: fail(f"no progress while {state['step']} after {args.timeout:.0f} s"))

    def save(widget, name: str) -> None:
        app.processEvents()
        if not widget.grab().save(str(out / name)):
            raise OSError(f"cannot write {out / name}")
        print(out / name, flush=True)

    def assistant() -> None:
        arm("answering the spoken question")
        w.mode_assistant.setChecked(True)
        w.add_file_input(str(default_question()))
        w.handsfree.setChecked(True)

    def shoot_main() -> None:
        try:
            save(w, "main.png")
        except OSError as e:
            fail(str(e))

    def on_audio(*_) -> None:  # the answer is being spoken: the window as a user sees it then
        if state["step"] == "answering the spoken question" and not state["shot_main"]:
            state["shot_main"] = True
            QTimer.singleShot(300, shoot_main)  # "Talking: assistant" is polled every 50 ms: let it show

    def caption() -> None:
        arm("captioning")
        w.mode_caption.setChecked(True)
        w.add_file_input(args.caption_audio)
        w.handsfree.setChecked(True)

    def finish() -> None:
        watchdog.stop()
        cw = w.caption_window
        try:
            cw.show()
            save(cw, "caption.png")
            dlg = w.open_settings()
            save(dlg, "settings.png")
            dlg.close()
        except Exception as e:  # a slot's exception would only be printed, and the app would stay open
            return fail(f"{type(e).__name__}: {e}")
        cw.close()
        w.close()  # as the user closes it

    def on_session_ended() -> None:
        if state["step"] == "answering the spoken question":
            if not state["shot_main"]:
                return fail("the assistant session ended without a spoken answer")
            QTimer.singleShot(0, caption)
        elif state["step"] == "captioning":
            QTimer.singleShot(0, finish)

    w.ctl.models_ready.connect(lambda _t: QTimer.singleShot(0, assistant))
    w.ctl.load_failed.disconnect(w._load_failed)  # its message box would wait for a click nobody makes
    w._links = [(sig, slot) for sig, slot in w._links if slot != w._load_failed]
    w.ctl.load_failed.connect(lambda msg: fail(f"model loading failed: {msg}"))
    w.ctl.answer_audio.connect(on_audio)
    w.ctl.session_ended.connect(on_session_ended)
    w.closed.connect(app.quit)
    arm("loading the models")
    w.show()
    app.exec()
    stopped = w.ctl.wait_stopped(timeout=30)
    if state["code"]:
        return state["code"]
    missing = [n for n in SHOTS if not (out / n).is_file()]
    if missing:
        print(f"specvoice: error: screenshots: not written: {', '.join(missing)}", file=sys.stderr)
        return 1
    for wav in w.answer_wavs:
        print(wav, flush=True)
    return 0 if stopped else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
