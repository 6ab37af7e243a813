"""A voice per language (tts.voices): parsing and validation, resolving voices, and the assistant speaking an answer
only in a voice of its language — on the real Piper voice and the real Qwen 0.5B."""

import time

import numpy as np
import pytest

from engine.core.events import AnswerAudio, AnswerDone, AnswerSentence, Status
from engine.synthesis.voices import VoiceSet, parse_voices

from .conftest import run_cli

SYSTEM = "You are a helpful voice assistant. Answer in one short sentence."


def test_parse_voices_pairs():
    assert parse_voices("") == {}
    assert parse_voices(" FR = /v/fr.onnx , de=org/voices:de.onnx,") == {"fr": "/v/fr.onnx", "de": "org/voices:de.onnx"}


@pytest.mark.parametrize("value, says", [("fr", "not a language=voice pair"), ("fr=", "not a language=voice pair"),
                                         ("=x.onnx", "not a language=voice pair"),
                                         ("xx=/v/x.onnx", "'xx' is not a Whisper language code"),
                                         ("en=/v/en.onnx", "models.tts_voice"),
                                         ("fr=a.onnx,fr=b.onnx", "fr is given twice")])
def test_a_malformed_value_is_one_line_naming_the_setting(value, says):
    from engine.config import Config, ConfigError, validate

    with pytest.raises(ValueError, match=says):
        parse_voices(value)
    with pytest.raises(ConfigError) as e:
        validate(Config().with_overrides({"tts": {"voices": value}}))
    assert str(e.value).startswith("tts.voices: ") and "\n" not in str(e.value)


def test_cli_refuses_a_bad_tts_voices_with_exit_2(tmp_path):
    r = run_cli(["transcribe", "x.wav", "--set", "tts.voices=xx=/v/x.onnx", "--out", str(tmp_path)], timeout=120)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert len(err) == 1 and err[0].startswith("specvoice: error: tts.voices: 'xx'") and "Traceback" not in r.stderr


def test_resolving_names_the_voice_that_cannot_be(tmp_path, monkeypatch):
    import huggingface_hub.constants

    from engine.models import ModelError
    from engine.synthesis.voices import resolve_voice

    with pytest.raises(ModelError, match=r"^tts\.voices: fr=/nope/fr\.onnx: path /nope/fr\.onnx does not exist$"):
        resolve_voice("fr", "/nope/fr.onnx", tmp_path)
    with pytest.raises(ModelError, match=r"^tts\.voices: fr=frenchvoice: neither a path"):
        resolve_voice("fr", "frenchvoice", tmp_path)
    # a hub id is fetched when resolved; offline that is one line naming it (no wait for a network timeout)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelError) as e:
        resolve_voice("de", "rhasspy/piper-voices:de/de_DE-thorsten-medium.onnx", tmp_path)
    msg = str(e.value)
    assert msg.startswith("tts.voices: de=rhasspy/piper-voices:") and "cannot fetch" in msg and "\n" not in msg


def test_a_piper_voice_by_path_speaks_its_language_at_the_sets_rate(runtime, tmp_path):
    from engine.synthesis.voices import resolve_voice

    m = runtime.model("tts_voice")
    voice_dir = tmp_path / "es_voice"  # a directory holding a Piper voice is a voice too
    voice_dir.mkdir()
    (voice_dir / "v.onnx").symlink_to(m.path)
    (voice_dir / "v.onnx.json").symlink_to(m.config)
    spec = resolve_voice("es", str(voice_dir), tmp_path)
    assert spec.kind == "piper" and spec.path == voice_dir / "v.onnx"
    loads = []

    def load(v):
        loads.append(v.language)
        from engine.synthesis.voices import load_voice

        return load_voice(v)

    vs = VoiceSet(runtime.tts(), {"es": spec}, load)
    assert vs.voice("") is vs.voice("en") is runtime.tts() and vs.voice("fr") is None
    es = vs.voice("es")
    assert vs.voice("ES") is es and loads == ["es"]  # loaded once, on first use
    audio = es.synthesize("Hola.")
    assert audio.dtype == np.float32 and len(audio) > 0.2 * es.sample_rate and es.sample_rate == vs.sample_rate


def test_runtime_voices_follow_tts_voices(cfg, runtime, tmp_path):
    from engine.runtime import Runtime

    m = runtime.model("tts_voice")
    rt = Runtime(cfg.with_overrides({"tts": {"voices": f"de={m.path}"}}), progress=False)
    assert rt.voice_for("en") is rt.tts() and rt.voice_for("") is rt.tts()
    assert rt.voice_for("de") is not None and rt.voice_for("de") is rt.voice_for("de")
    assert rt.voice_for("fr") is None
    assert rt.voices().languages() == ("de",)


def _events_of(conv, events, utt, lang, text):
    n0 = len(events)
    conv.on_final(utt, text, lang)
    assert conv.wait_idle(timeout=120)
    return events[n0:]


@pytest.mark.parametrize("kind", ["cascade", "predgen"])
def test_a_turn_without_a_voice_is_shown_not_spoken_and_told_once(qwen_small, runtime, kind):
    from engine.answer.assistant import Assistant, Conversation, PredGenAssistant

    events, metrics = [], []
    tts = runtime.tts()
    calls = []

    class Counting:  # the English voice, counting what it is asked to say
        sample_rate = tts.sample_rate

        def synthesize(self, text):
            calls.append(text)
            return tts.synthesize(text)

    voice = Counting()
    if kind == "cascade":
        a = Assistant(qwen_small, voice, SYSTEM, max_tokens=24, emit=events.append)
    else:
        a = PredGenAssistant(qwen_small, voice, SYSTEM, max_tokens=24, emit=events.append, tokens_per_update=6,
                             speculation_threads=1)
    a.warm()
    conv = Conversation(a, lambda u, t, m: metrics.append(m))
    if kind == "predgen":  # a French partial is speculated on without pre-synthesis in the English voice
        conv.on_partial(0, "Quelle est la capitale", "fr")
        deadline = time.monotonic() + 60
        while a.updates_this_turn < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
    fr = _events_of(conv, events, 0, "fr", "Quelle est la capitale de la France ?")
    assert not calls and not any(isinstance(e, AnswerAudio) for e in fr)
    done = [e for e in fr if isinstance(e, AnswerDone)]
    assert len(done) == 1 and done[0].text.strip() and any(isinstance(e, AnswerSentence) for e in fr)
    told = [e for e in events if isinstance(e, Status)]  # PredGen: told at the French partial already
    assert len(told) == 1 and told[0].text.startswith("no fr voice:") and "tts.voices=fr=" in told[0].text
    assert metrics[-1].no_voice == "fr" and metrics[-1].audio_s == 0
    fr2 = _events_of(conv, events, 1, "fr", "Et de l'Italie ?")
    assert not any(isinstance(e, (Status, AnswerAudio)) for e in fr2) and not calls  # told once per session
    en = _events_of(conv, events, 2, "en", "What is the capital of Spain?")
    conv.close()
    audio = [e for e in en if isinstance(e, AnswerAudio)]
    assert calls and audio and all(e.sample_rate == tts.sample_rate and len(e.samples) for e in audio)
    assert metrics[-1].no_voice == "" and metrics[-1].audio_s > 0
