"""The README's model-override examples, run as written (a local path for the file the README names; a hub id needs
a network, so offline it must fail with one clear line), and a setting from its generated environment variable."""

from pathlib import Path

import pytest

from app.cli import main


def test_cli_model_flag_with_a_local_gguf(tmp_path, small_gguf, capsys):
    # README: specvoice assist --model llm_target=/models/qwen2.5-7b-instruct-q4_k_m.gguf
    rc = main(["assist", "--fast", "--no-play", "--model", f"llm_target={small_gguf}",
               "--set", "llm.max_answer_tokens=24", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and "assistant:" in out


def test_environment_override_with_a_local_whisper(tmp_path, runtime, jfk_path, monkeypatch, capsys):
    # README: SPECVOICE_MODEL_ASR_TARGET=Systran/faster-whisper-small specvoice transcribe talk.wav
    monkeypatch.setenv("SPECVOICE_MODEL_ASR_TARGET", str(runtime.model("asr_draft").path))  # tiny.en as the target
    rc = main(["transcribe", str(jfk_path), "--fast", "--out", str(tmp_path)])
    out = capsys.readouterr().out.lower()
    assert rc == 0 and "your country" in out


def test_environment_sets_any_setting(tmp_path, jfk_path, monkeypatch, capsys):
    # SPECVOICE_<SECTION>_<KEY> for every setting: SPECVOICE_ASR_MODEL_ROLE=asr_draft specvoice transcribe talk.wav
    import json

    monkeypatch.setenv("SPECVOICE_ASR_MODEL_ROLE", "asr_draft")
    rc = main(["transcribe", str(jfk_path), "--fast", "--out", str(tmp_path)])
    out = capsys.readouterr().out.lower()
    report = json.loads((tmp_path / "transcribe-report.json").read_text())
    assert rc == 0 and report["asr"]["model_role"] == "asr_draft" and "your country" in out


def test_config_file_models_section(tmp_path, small_gguf, jfk_path, capsys, monkeypatch):
    # README: specvoice caption talk.wav --config my.toml    # [models] llm_target = "..."
    import json

    import engine.runtime

    built = []  # the configuration the command built its translator from
    build = engine.runtime.build_translator

    def recording(cfg, *a, **kw):
        built.append(cfg)
        return build(cfg, *a, **kw)

    monkeypatch.setattr(engine.runtime, "build_translator", recording)
    cfg = tmp_path / "my.toml"
    cfg.write_text(f'[models]\nllm_target = "{small_gguf}"\n[caption]\nmax_tokens = 24\nmask_k = 2\n')
    rc = main(["caption", str(jfk_path), "--fast", "--config", str(cfg), "--out", str(tmp_path)])
    assert rc == 0 and capsys.readouterr().out.strip()
    # every value of the file reached the command: the configuration it ran, the model it loaded, its report
    assert len(built) == 1
    ran = built[0]
    assert (ran.models.llm_target, ran.caption.max_tokens, ran.caption.mask_k) == (str(small_gguf), 24, 2)
    assert ran.caption.model_role == "llm_target"  # the caption LLM is the role the file replaced
    report = json.loads((tmp_path / "caption-report.json").read_text())
    assert report["caption"]["mask_k"] == 2
    llm = report["models"]["llm_target"]
    assert llm["source"] == "path" and Path(llm["path"]).resolve() == small_gguf.resolve()


@pytest.mark.parametrize("spec", ["Systran/faster-whisper-small", "org/repo:file.gguf"])
def test_a_hub_id_offline_is_one_clear_error(tmp_path, jfk_path, monkeypatch, capsys, spec):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub reads the variable when first imported, which an earlier test may have done: without this
    # the download would try the network and fail only when it times out
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    role = "ASR_TARGET" if "whisper" in spec else "LLM_TARGET"
    monkeypatch.setenv(f"SPECVOICE_MODEL_{role}", spec)
    cmd = "transcribe" if role == "ASR_TARGET" else "assist"
    rc = main([cmd, str(jfk_path), "--fast", "--no-play", "--out", str(tmp_path)] if cmd == "assist"
              else [cmd, str(jfk_path), "--fast", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("specvoice: error:") and "Traceback" not in "\n".join(err)
