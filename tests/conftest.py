"""Shared fixtures: real models (the small ones) and real audio."""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("SPECVOICE_SHARED", ROOT.parent / "shared"))
JFK = ROOT / "tests" / "data" / "jfk.flac"  # from openai/whisper (MIT), as in ../shared/data/speech
JFK_TEXT = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
QUESTION = ROOT / "assets" / "question.wav"

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(autouse=True)
def _journal_in_tmp(tmp_path, monkeypatch):
    """A desktop session started without a window journals into the test's folder, never the user's."""
    monkeypatch.setenv("SPECVOICE_JOURNAL", str(tmp_path / "journal-default.jsonl"))


@pytest.fixture(scope="session")
def jfk_path() -> Path:
    assert JFK.is_file(), f"{JFK} is committed to the repository; it is missing from this checkout"
    return JFK


@pytest.fixture(scope="session")
def jfk_audio(jfk_path):
    from audio.io import load_audio

    return load_audio(jfk_path)


@pytest.fixture(scope="session")
def cfg():
    from engine.config import Config

    return Config()


@pytest.fixture(scope="session")
def runtime(cfg):
    from engine.runtime import Runtime

    return Runtime(cfg, progress=False)


@pytest.fixture(scope="session")
def qwen_small(runtime):
    """Qwen2.5-Coder-0.5B-Instruct through llama-cpp-python (the small real LLM)."""
    return runtime.llm("llm_draft")


@pytest.fixture(scope="session")
def small_gguf(runtime) -> Path:
    return Path(runtime.model("llm_draft").path)


def run_cli(args, env_extra=None, timeout=600, **kw):
    import subprocess

    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=kw.get("cwd", ROOT), env=env,
                          capture_output=True, text=True, timeout=timeout)


def normalized_wer(ref: str, hyp: str) -> float:
    """Word error rate of ``hyp`` against ``ref`` after Whisper's English text normaliser."""
    import jiwer
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    n = EnglishTextNormalizer({})
    return jiwer.wer(n(ref), n(hyp))


def same_or_near_tie(lm, prompt, a, b, tol=0.5):
    """Greedy outputs ``a`` and ``b`` for ``prompt`` are equal, or first differ where the two tokens' logits are within
    ``tol`` (llama.cpp's batched logits differ slightly from one-at-a-time logits, ../shared/MODELS.md).
    Returns the first differing position (None if equal)."""
    from engine.llm.generate import LMSession

    if a == b:
        return None
    d = next(i for i, (x, y) in enumerate(zip(list(a) + [-1], list(b) + [-2])) if x != y)
    assert d < min(len(a), len(b)), f"one output is a strict prefix of the other at {d}"
    row = LMSession(lm).prefill(list(prompt) + list(a[:d]))
    gap = abs(float(row[a[d]]) - float(row[b[d]]))
    assert gap < tol, f"outputs differ at {d} with logit gap {gap:.3f}: not a near-tie"
    return d


# -- --results-json: what a run of the suite (or of its slow tests) recorded, one JSON -----------------------------
def pytest_addoption(parser):
    parser.addoption("--results-json", metavar="FILE", default=None,
                     help="write every test's outcome and duration, the counts and the exit status to FILE (JSON); "
                          "`specvoice bench all --only tests-slow` runs the slow-marked tests with it")


_OUTCOMES: dict[str, dict] = {}  # node id → {"outcome", "seconds", "reason"}, in the order the tests ran
_STARTED: dict = {}  # "at": local time the session started (ISO), "t0": its time.monotonic()


def pytest_runtest_logreport(report):
    rec = _OUTCOMES.setdefault(report.nodeid, {"outcome": "passed", "seconds": 0.0, "reason": ""})
    rec["seconds"] = round(rec["seconds"] + report.duration, 3)
    if report.failed:  # a failed setup or teardown is an error; a failed call a failure
        rec["outcome"] = "failed" if report.when == "call" else "error"
        crash = getattr(report.longrepr, "reprcrash", None)  # "AssertionError: ..." rather than the traceback
        text = (crash.message if crash is not None else str(report.longrepr)).strip()
        rec["reason"] = rec["reason"] or (text.splitlines()[0][:500] if text else "")
    elif report.skipped and rec["outcome"] == "passed":
        rec["outcome"] = "skipped"
        rec["reason"] = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)


def pytest_sessionstart(session):
    import time

    _STARTED.update(at=time.strftime("%Y-%m-%dT%H:%M:%S"), t0=time.monotonic())


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("results_json")
    if not path:
        return
    import json
    import platform
    import time

    args = list(session.config.invocation_params.args)
    for i, arg in reversed(list(enumerate(args))):  # the command without where its record went (a scratch path)
        if arg == "--results-json":
            del args[i:i + 2]
        elif arg.startswith("--results-json="):
            del args[i]
    tests = [{"id": k, **v} for k, v in _OUTCOMES.items()]
    counts = {o: sum(t["outcome"] == o for t in tests) for o in ("passed", "failed", "error", "skipped")}
    doc = {
        "command": " ".join(["python -m pytest", *args]),
        "markers": session.config.getoption("markexpr") or "",
        "started": _STARTED.get("at"),
        "seconds": round(time.monotonic() - _STARTED.get("t0", time.monotonic()), 1),
        "exit_status": int(exitstatus),
        "passed": int(exitstatus) == 0 and counts["passed"] > 0,
        "counts": counts,
        "tests": tests,
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "processor": platform.processor() or platform.machine(), "python": platform.python_version()},
    }
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
