"""The language-ID head (engine/asr/language_head.py): its product-of-experts fusion with Whisper's identification,
its numpy forward against the trained torch module, and what it says of real and generated speech through the
Whisper-base encoder the decode already ran."""

import dataclasses
import json

import numpy as np
import pytest

from engine.asr.language_head import ASSET_DIR, LanguageIdHead, fuse

from .conftest import ROOT

MIXED = ROOT / "tests" / "data" / "lang_en_fr_okay_de.flac"  # en, fr, a short "Okay.", de (espeak-ng)
GERMAN = ROOT / "tests" / "data" / "de_mit_licence.flac"  # real German read speech
HESITATION = ROOT / "tests" / "data" / "hesitation_en.flac"  # espeak-ng English, a hesitation pause after "to"


# -- fusion --------------------------------------------------------------------------------------------------------
WHISPER = [("ja", 0.45), ("fr", 0.2), ("en", 0.2), ("th", 0.1), ("ko", 0.05)]


def test_fusion_is_a_product_of_experts_over_every_whisper_language():
    fused = fuse(WHISPER, {"fr": 0.9, "en": 0.05, "other": 0.05})
    assert fused[0][0] == "fr"  # Whisper's runner-up, the head's choice
    assert {c for c, _ in fused} == {c for c, _ in WHISPER}
    assert sum(p for _, p in fused) == pytest.approx(1.0)
    q = dict(fused)
    # fr/en = (0.2·0.9)/(0.2·0.05); outside the head's list Whisper's odds are kept: ja/th = 0.45²/0.1²
    assert q["fr"] / q["en"] == pytest.approx(18.0, rel=1e-6)
    assert q["ja"] / q["th"] == pytest.approx((0.45 / 0.1) ** 2, rel=1e-6)


def test_a_head_that_hears_another_language_leaves_the_choice_to_whisper():
    fused = fuse(WHISPER, {"fr": 0.02, "en": 0.03, "other": 0.95})
    assert fused[0][0] == "ja"


def test_weight_zero_is_whisper_alone():
    fused = fuse(WHISPER, {"fr": 0.9, "en": 0.05, "other": 0.05}, weight=0.0)
    assert [c for c, _ in fused] == [c for c, _ in WHISPER]
    assert dict(fused)["fr"] == pytest.approx(0.2)


# -- the shipped head -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def head():
    return LanguageIdHead()


def test_the_numpy_head_computes_what_the_trained_torch_module_does(head):
    import torch
    from safetensors.torch import load_file

    from engine.training.lid_head import build_net

    cfg = json.loads((ASSET_DIR / "config.json").read_text())
    state = {k: v.float() for k, v in load_file(str(ASSET_DIR / "head.safetensors")).items()}
    frames = np.random.default_rng(0).standard_normal((120, cfg["d_model"])).astype(np.float32)
    refs = []
    for name, arch in cfg["nets"].items():
        net = build_net(cfg["d_model"], len(cfg["classes"]), arch).eval()
        net.load_state_dict({k[len(name) + 1:]: v for k, v in state.items() if k.startswith(name + ".")})
        with torch.no_grad():
            ref = torch.softmax(net(torch.from_numpy(frames)[None], torch.ones(1, 120, dtype=torch.bool))[0], -1)
        got = head.probs_from_frames(frames, nets=[name])
        assert list(got) == cfg["classes"]
        np.testing.assert_allclose(list(got.values()), ref.numpy(), atol=1e-4)
        refs.append(np.log(ref.numpy()))
    both = np.exp(np.mean(refs, axis=0))  # the head: the networks' normalised geometric mean
    np.testing.assert_allclose(list(head.probs_from_frames(frames).values()), both / both.sum(), atol=1e-4)


def test_frames_of_another_width_are_refused(head):
    with pytest.raises(ValueError, match="encoder frames"):
        head.probs_from_frames(np.zeros((10, 384), np.float32))
    with pytest.raises(ValueError, match="encoder frames"):
        head.probs_from_frames(np.zeros((0, head.d_model), np.float32))


def test_a_missing_head_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="lid_head"):
        LanguageIdHead(tmp_path)


# -- real Whisper base ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rt():
    from engine.config import Config
    from engine.runtime import Runtime

    cfg = Config()
    return Runtime(dataclasses.replace(cfg, asr=dataclasses.replace(cfg.asr, language="auto")), progress=False)


def _encode(m, audio):
    from engine.asr.window import log_mel

    return m.fw.encode(log_mel(m.fw.feature_extractor, audio, m.window.n_frames(len(audio))))


# the head was trained on synthetic voices, English also on one natural (Piper) voice: of natural German it is unsure
# and leans to English, so there the fusion must leave the choice to Whisper, which is sure (asr.language_head)
@pytest.mark.parametrize("name, span, language, head_alone", [
    ("jfk", None, "en", True),                   # real English
    ("german", None, "de", False),               # real German
    ("mixed", (5.8, 11.9), "fr", True),          # espeak-ng French
    ("mixed", (15.0, 21.0), "de", True),         # espeak-ng German
])
def test_the_head_names_the_language_spoken_from_the_decodes_encoder_output(rt, head, jfk_path, name, span,
                                                                             language, head_alone):
    from audio.io import load_audio
    from engine.asr.whisper_ct2 import detect_language

    path = {"jfk": jfk_path, "german": GERMAN, "mixed": MIXED}[name]
    audio = load_audio(path)
    if span:
        audio = audio[int(span[0] * 16000): int(span[1] * 16000)]
    m = rt.whisper_ssd()
    sv = _encode(m, audio)
    hp = head.probs(sv, len(audio))
    top2 = sorted(hp, key=hp.get, reverse=True)[: 1 if head_alone else 2]
    assert language in top2, sorted(hp.items(), key=lambda x: -x[1])[:3]
    fused = fuse(detect_language(m.fw.model, sv), hp, rt.cfg.asr.language_head)
    assert fused[0][0] == language
    # what the streaming backend identifies with (WhisperSSD.language_for) is this fusion
    lang, probs = m.language_for(sv, None, len(audio) / 16000)
    assert lang == language and probs[0] == pytest.approx(fused[0])


class _SureOfGerman:
    """A language-ID head that is sure of German whatever it hears: what a head trained on other voices can say of
    noisy or telephone-band English (the real head's forward, its probabilities replaced)."""

    def __init__(self, head):
        self.head, self.d_model = head, head.d_model

    def probs(self, encoder_output, n_samples):
        p = self.head.probs(encoder_output, n_samples)
        return {c: (0.99 if c == "de" else 0.01 / (len(p) - 1)) for c in p}


def test_english_a_head_hears_as_german_is_decoded_in_english(rt, head):
    """A window of espeak-ng English after its hesitation pause, with a head that is sure it is German: Whisper's own
    identification still ranks English first, so an English session does not switch to German (SessionLanguage's
    veto); a chooser that is not given Whisper's own identification would switch."""
    from audio.io import load_audio
    from engine.asr.whisper_ssd import WhisperSSD
    from engine.asr.language_id import SessionLanguage
    from engine.asr.whisper_ct2 import detect_language

    audio = load_audio(HESITATION)[6 * 16000: 9 * 16000]
    m = WhisperSSD(rt.model("asr_target").path, language="auto", lid_head=rt.cfg.asr.language_head)
    m._lid_head = _SureOfGerman(head)
    sv = _encode(m, audio)
    assert detect_language(m.fw.model, sv)[0][0] == "en"  # Whisper itself hears English
    session = SessionLanguage(rt.cfg.asr, "en")
    lang, probs = m.language_for(sv, session.choose, len(audio) / 16000)
    assert probs[0][0] == "de" and probs[0][1] >= session.switch_p  # the fused identification alone would switch
    assert lang == "en"
    assert m.language_for(sv, lambda p, a, whisper_probs=None: session.choose(p, a), len(audio) / 16000)[0] == "de"


def test_the_head_can_be_turned_off(rt):
    from audio.io import load_audio
    from engine.asr.whisper_ssd import WhisperSSD
    from engine.asr.whisper_ct2 import detect_language

    audio = load_audio(MIXED)[int(5.8 * 16000): int(11.9 * 16000)]
    off = WhisperSSD(rt.model("asr_target").path, language="auto", lid_head=0.0)
    assert off.lid_head is None
    sv = _encode(off, audio)
    _, probs = off.language_for(sv, None, len(audio) / 16000)
    assert probs == detect_language(off.fw.model, sv)
    missing = WhisperSSD(rt.model("asr_target").path, language="auto", lid_head_dir=ROOT / "no_such_head")
    assert missing.lid_head is None  # none shipped: Whisper's identification alone
