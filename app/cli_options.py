"""``specvoice``'s command line: its arguments, the configuration they give, and the models folder option.

:func:`parser` is the whole command line; :func:`config_from_args` the :class:`engine.config.Config` a command runs
with (the configuration file, ``--model``, ``--set`` and ``--models`` on top of the defaults and the environment),
the same function the desktop app's settings start from (:func:`engine.config.load_config`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

LOG_LEVELS = ("debug", "info", "warning", "error")

BENCHES = {  # name → module with main(argv)
    "asr": "bench.asr_bench", "asr-stream": "bench.asr_stream_bench", "asr-offline": "bench.asr_offline_bench",
    "tts": "bench.tts_bench",
    "predgen": "bench.predgen_bench", "ssbd": "bench.ssbd_bench", "partial-streams": "bench.make_partial_streams",
    "voice": "bench.voice_bench", "soak": "bench.soak_bench", "caption": "bench.caption_bench",
    "duplex": "bench.duplex_bench", "all": "bench.all", "verify-cost": "bench.gpu_verify_cost",
    "conversation": "bench.conversation_bench", "causal-final": "bench.causal_final_bench",
    "caption-prompt": "bench.caption_prompt_bench",
    "vad-gate": "bench.vad_gate", "gpu-codec-tts": "bench.gpu_codec_tts", "gpu-replay": "bench.gpu_replay",
    "wake": "bench.wake_bench", "voices": "bench.voices_bench",
}


# -- arguments ---------------------------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help="TOML configuration file")
    common.add_argument("--model", action="append", default=[], metavar="ROLE=SPEC",
                        help="model for a role: embedded, a local path, or a hub id (repeatable)")
    common.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help=set_help())
    common.add_argument("--out", default="out", help="directory for reports, WAVs and transcripts (default: out)")
    common.add_argument("--journal", default=None, metavar="FILE",
                        help="session journal, appended (default: OUT/journal.jsonl)")
    common.add_argument("--quiet", action="store_true",
                        help="print only the results: each final transcript (and its revision, 'you (revised)'), "
                             "each whole answer and each final caption, without time stamps; no progress, status or "
                             "summary (the report and the journal are written as always)")
    common.add_argument("--models", default=None, metavar="DIR",
                        help="a models folder (python -m engine.models export DIR) used before the model packages")

    p = argparse.ArgumentParser(prog="specvoice", description="Offline speculative voice assistant.")
    p.add_argument("--version", action="version", version=f"specvoice {version()}")
    p.add_argument("--log-level", choices=LOG_LEVELS, default="warning",
                   help="messages logged on stderr from this level up, for every command (default: warning)")
    sub = p.add_subparsers(dest="cmd", required=True)

    def src_args(sp, audio_required: bool):
        sp.add_argument("audio", nargs=None if audio_required else "?", help="audio file (any format/rate)")
        sp.add_argument("--mic", action="store_true", help="use the microphone instead of a file")
        sp.add_argument("--fast", action="store_true",
                        help="feed the file as fast as it is consumed instead of at real-time pace; its latencies "
                             "are then not real-time figures (the report says \"clock\": \"fast (not real time)\" "
                             "and the summary marks them): compare latencies of real-time runs only")

    t = sub.add_parser("transcribe", parents=[common], help="live transcription of a file or the microphone")
    src_args(t, audio_required=False)
    a = sub.add_parser("assist", parents=[common], help="talk → transcript → spoken answer")
    src_args(a, audio_required=False)
    a.add_argument("--no-play", action="store_true", help="never play audio (it is always written to a WAV)")
    c = sub.add_parser("caption", parents=[common], help="live caption and translation")
    src_args(c, audio_required=False)
    c.add_argument("--to", default=None,
                   help="target language code or name, checked as caption.target_language is (the default)")
    e = sub.add_parser("export", help="render a session of the journal as TXT, SRT or VTT (default: the latest)")
    e.add_argument("file", help="output file; the format follows its suffix: .txt, .srt or .vtt")
    e.add_argument("--journal", default=None, metavar="FILE", help="journal to read (default: OUT/journal.jsonl)")
    e.add_argument("--out", default="out", help="directory of the default journal (default: out)")
    e.add_argument("--session", default=None, metavar="ID|all",
                   help="the session to export, on its own audio's clock (default: the latest session); 'all': "
                        "every session of the journal, one after the other on one clock")
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


def version() -> str:
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


def set_help() -> str:
    from engine.config import SECTIONS, SETTINGS

    return (f"override any of the {len(SETTINGS)} settings, e.g. --set vad.min_silence_s=0.8 (repeatable); sections: "
            f"{', '.join(SECTIONS)}; each setting's default, range and meaning: python -m engine.config")


# a command-line flag that sets a setting: attribute of the parsed arguments → (the flag, the setting it sets)
FLAG_SETTINGS = {"to": ("--to", "caption.target_language")}


def config_from_args(args):
    """The :class:`engine.config.Config` of ``args``: ``--config``, the environment, ``--model``, ``--set``, then
    every flag of :data:`FLAG_SETTINGS` and ``--models``, each checked as its setting is.

    Raises:
        engine.config.ConfigError: a bad file, setting, role or flag value (one line naming the flag).
        UsageError: a malformed ``--model`` or a ``--models`` folder that does not exist.
    """
    from engine.config import ConfigError, load_config, lookup

    models = {}
    for item in args.model:
        if "=" not in item:
            raise UsageError(f"--model expects ROLE=SPEC, got {item!r}")
        k, v = item.split("=", 1)
        models[k.strip()] = v.strip()
    sets = list(args.set)
    for attr, (flag, key) in FLAG_SETTINGS.items():
        value = getattr(args, attr, None)
        if value is None:
            continue
        try:
            lookup(key).parse(value)
        except ConfigError as e:
            raise ConfigError(f"{flag} {value}: {e}") from None
        sets.append(f"{key}={value}")
    if getattr(args, "models", None):
        sets.append(f"models.dir={use_models_dir(args.models)}")
    return load_config(args.config, models, sets)


def use_models_dir(path: str) -> str:
    """Make ``path`` the models folder of this process and of every process it starts (``$SPECVOICE_MODELS_DIR``,
    which :func:`engine.models.models_dir` reads: benchmarks and the codec voice load their own configuration).
    Returns the absolute path.

    Raises:
        UsageError: the folder does not exist.
    """
    import os

    from engine.models import MODELS_DIR_ENV

    p = Path(path).expanduser().resolve()
    if not p.is_dir():
        raise UsageError(f"--models {path}: no such folder")
    os.environ[MODELS_DIR_ENV] = str(p)
    return str(p)


def pop_models_option(rest: list[str]) -> tuple[list[str], str | None]:
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


class UsageError(Exception):
    """A command line that cannot run (missing input, bad option value)."""
