"""The bad-input corpus (tests/make_bad_audio.py) through ``transcribe``, ``caption`` and ``assist``.

Every case gives either the right output (exit 0, the speech transcribed) or exactly one ``specvoice: error:`` line
on stderr naming the input and exit 2: no traceback, no hang (a time limit per case), and no earlier output
overwritten (the journal, transcripts and answer WAVs of an earlier session are kept byte for byte).
"""

import hashlib
import json
import signal
from pathlib import Path

import jiwer
import pytest

from app.cli import main

from .conftest import JFK_TEXT, run_cli
from .make_bad_audio import make_corpus

ASR = ["--set", "asr.model_role=asr_draft", "--fast"]  # tiny.en: the input path is under test here
EARLIER = {  # an earlier session's outputs in the same --out folder
    "journal.jsonl": '{"type": "session", "session": "earlier", "wall": 1.0, "command": "transcribe"}\n'
                     '{"type": "user", "session": "earlier", "wall": 2.0, "utterance": 0, "text": "Früher gesagt.", '
                     '"t_start": 0.5, "t_end": 1.5}\n',
    "transcribe-transcript.txt": "[0.50-1.50] Früher gesagt.\n",
    "caption-transcript.txt": "[0.50-1.50] Früher gesagt.\n",
    "caption.txt": "Früher gesagt.\n\tSaid earlier.\n",
    "answer-earlier.wav": "RIFF-not-really-a-wav",
}


NORM = jiwer.Compose([jiwer.ToLowerCase(), jiwer.RemovePunctuation(), jiwer.RemoveMultipleSpaces(), jiwer.Strip()])


class Hang(BaseException):
    """A case ran past its time limit (BaseException: the CLI's own handlers must not swallow it)."""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return {c.name: c for c in make_corpus(tmp_path_factory.mktemp("corpus"))}


def _digest(p: Path) -> str | None:
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None


def _seed(out: Path) -> None:
    out.mkdir(parents=True)
    for name, text in EARLIER.items():
        (out / name).write_text(text, encoding="utf-8")


def _check_kept(out: Path, appended_ok: bool) -> None:
    """The earlier outputs are unchanged, or (after a successful run) only appended to."""
    for name, text in EARLIER.items():
        now = (out / name).read_text(encoding="utf-8")
        if appended_ok:
            assert now.startswith(text), name
        else:
            assert now == text, name


def _run(capfd, argv: list[str], limit_s: float) -> tuple[int, str, str]:
    """``main(argv)`` in this process under a wall-clock limit; returns (code, stdout, stderr) at the fd level."""
    def alarm(*_):
        raise Hang(f"{argv[:2]} ran past {limit_s} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        code = main(argv)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    out, err = capfd.readouterr()
    return code, out, err


def _assert_one_error_line(code: int, err: str, path: Path) -> None:
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("specvoice: error:") and "Traceback" not in err
    assert str(path) in lines[0] or path.name in lines[0], lines[0]


TRANSCRIBE_CASES = ["empty_file", "zero_bytes", "header_only", "truncated_header", "random_bytes", "text_file",
                    "directory", "missing", "pcm_8bit", "pcm_24bit", "float64", "float_nan", "rate_8k", "rate_96k",
                    "six_channels", "silence_10min", "white_noise", "clipped", "façade 語"]


@pytest.mark.parametrize("name", TRANSCRIBE_CASES)
def test_transcribe_every_case(tmp_path, capfd, corpus, name):
    case = corpus[name]
    out = tmp_path / "out"
    _seed(out)
    before = _digest(case.path)
    code, stdout, err = _run(capfd, ["transcribe", str(case.path), "--out", str(out), *ASR], limit_s=180)
    assert _digest(case.path) == before  # the input is never written
    if case.expect == "error":
        _assert_one_error_line(code, err, case.path)
        _check_kept(out, appended_ok=False)
        assert json.loads((out / "transcribe-report.json").read_text())["error"]
        return
    assert code == 0 and "Traceback" not in err, err
    rep = json.loads((out / "transcribe-report.json").read_text(encoding="utf-8"))
    text = rep["asr"]["text"].lower()
    if case.expect == "speech":  # 8 kHz and clipped speech are harder: a bound, not the exact words
        assert jiwer.wer(NORM(JFK_TEXT), NORM(text)) <= 0.3, (text, stdout, rep["asr"]["utterances"])
    else:
        assert len(text.split()) <= 3, (text, stdout)  # silence or noise: no invented speech
    _check_kept(out, appended_ok=True)
    journal = [json.loads(x) for x in (out / "journal.jsonl").read_text(encoding="utf-8").splitlines()]
    assert journal[-1]["type"] == "session_end" and journal[-1]["status"] == "ok"
    said = " ".join(r["text"] for r in journal if r["type"] == "user" and r["session"] == rep["session"])
    assert said.lower() == " ".join(u["text"] for u in rep["asr"]["utterances"] if u["text"]).lower()


@pytest.mark.parametrize("cmd", ["caption", "assist"])
@pytest.mark.parametrize("name", ["zero_bytes", "random_bytes", "directory", "missing"])
def test_caption_and_assist_refuse_bad_input_before_loading_models(tmp_path, capfd, corpus, cmd, name):
    case = corpus[name]
    out = tmp_path / "out"
    _seed(out)
    # a model that does not exist: the input must be refused before any model is looked at
    code, _, err = _run(capfd, [cmd, str(case.path), "--out", str(out), "--model", "llm_target=/nonexistent.gguf",
                                *ASR], limit_s=30)
    _assert_one_error_line(code, err, case.path)
    _check_kept(out, appended_ok=False)


@pytest.mark.parametrize("cmd", ["caption", "assist"])
def test_caption_and_assist_on_noise(tmp_path, capfd, corpus, small_gguf, cmd):
    """No speech: the LLM loads, nothing is answered or captioned, exit 0, earlier outputs kept."""
    out = tmp_path / "out"
    _seed(out)
    extra = ["--no-play"] if cmd == "assist" else []
    code, stdout, err = _run(capfd, [cmd, str(corpus["white_noise"].path), "--out", str(out), "--model",
                                     f"llm_target={small_gguf}", *extra, *ASR], limit_s=240)
    assert code == 0 and "Traceback" not in err, err
    _check_kept(out, appended_ok=True)


def test_out_folder_that_is_a_file(tmp_path, capfd, corpus):
    out = tmp_path / "out"
    out.write_text("a file, not a folder", encoding="utf-8")
    code, _, err = _run(capfd, ["transcribe", str(corpus["pcm_24bit"].path), "--out", str(out), *ASR], limit_s=30)
    assert code == 2 and len(err.strip().splitlines()) == 1 and str(out) in err and "Traceback" not in err
    assert out.read_text(encoding="utf-8") == "a file, not a folder"


def test_subprocess_bad_and_non_ascii_input(tmp_path, corpus):
    """The installed entry point, as a user runs it: a random-bytes .wav and a non-ASCII file name."""
    out = tmp_path / "out"
    _seed(out)
    bad = corpus["random_bytes"].path
    r = run_cli(["transcribe", str(bad), "--out", str(out), *ASR], timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert line.startswith("specvoice: error:") and str(bad) in line
    _check_kept(out, appended_ok=False)
    r = run_cli(["transcribe", str(corpus["façade 語"].path), "--out", str(out), *ASR], timeout=180)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    rep = json.loads((out / "transcribe-report.json").read_text(encoding="utf-8"))
    assert rep["input"].endswith("façade 語.wav") and "country" in rep["asr"]["text"].lower()
    _check_kept(out, appended_ok=True)


@pytest.mark.slow
def test_one_hour_of_speech(tmp_path, capfd, tmp_path_factory):
    case = next(c for c in make_corpus(tmp_path_factory.mktemp("long"), long=True) if c.slow)
    out = tmp_path / "out"
    code, _, err = _run(capfd, ["transcribe", str(case.path), "--out", str(out), *ASR], limit_s=3 * 3600)
    assert code == 0 and "Traceback" not in err, err
    rep = json.loads((out / "transcribe-report.json").read_text(encoding="utf-8"))
    assert rep["asr"]["audio_s"] > 3500 and rep["asr"]["text"].lower().count("country") > 500
