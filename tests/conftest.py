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


@pytest.fixture(scope="session")
def jfk_path() -> Path:
    if not JFK.exists():
        pytest.skip(f"{JFK} not available")
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


def same_or_near_tie(lm, prompt, a, b, tol=0.5):
    """Greedy outputs ``a`` and ``b`` for ``prompt`` are equal, or first differ where the two tokens' logits are within
    ``tol`` (llama.cpp's batched logits differ slightly from one-at-a-time logits, ../shared/MODELS.md).
    Returns the first differing position (None if equal)."""
    import numpy as np

    from engine.llm.generate import LMSession

    if a == b:
        return None
    d = next(i for i, (x, y) in enumerate(zip(list(a) + [-1], list(b) + [-2])) if x != y)
    assert d < min(len(a), len(b)), f"one output is a strict prefix of the other at {d}"
    row = LMSession(lm).prefill(list(prompt) + list(a[:d]))
    gap = abs(float(row[a[d]]) - float(row[b[d]]))
    assert gap < tol, f"outputs differ at {d} with logit gap {gap:.3f}: not a near-tie"
    return d
