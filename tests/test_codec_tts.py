"""The codec-token TTS (assets/codec_tts): codec round trip, KV-cached sessions, speculative samplers, and the
intelligibility of what it says (transcribed by the real Whisper target)."""

import numpy as np
import pytest

from .conftest import ROOT

pytestmark = pytest.mark.skipif(not (ROOT / "assets" / "codec_tts" / "lm.safetensors").exists(),
                                reason="codec TTS not trained")


@pytest.fixture(scope="module")
def tts(runtime):
    from tts.codec_lm import CodecTTS

    return CodecTTS(seed=0)


@pytest.fixture(scope="module")
def whisper(runtime):
    from faster_whisper import WhisperModel

    return WhisperModel(str(runtime.model("asr_target").path), device="cpu", compute_type="int8")


def _wer(ref, hyp):
    import jiwer
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    n = EnglishTextNormalizer({})
    return jiwer.wer(n(ref), n(hyp))


def _say(whisper, audio):
    return " ".join(s.text for s in whisper.transcribe(audio, language="en", beam_size=1)[0])


def test_codec_round_trip_stays_intelligible(runtime, tts, whisper):
    from audio.io import resample

    piper = runtime.tts()
    text = "A man in a red jacket is riding a bicycle down the street."
    a = resample(piper.synthesize(text), piper.sample_rate, 16000)
    toks = tts.codec.encode(a)
    assert toks.dtype == np.int64 and len(toks) == pytest.approx(len(a) / 320, abs=2)
    assert toks.min() >= 0 and toks.max() < tts.codec.K
    y = tts.codec.decode(toks)
    assert _wer(text, _say(whisper, y)) < 0.25


def test_session_kv_cache_matches_a_full_forward(tts):
    import torch

    from tts.codec_lm import CodecLMSession, frame_conditioning

    ids = tts.phoneme_ids("Two dogs play in the snow.")[0]
    cond = frame_conditioning(ids, tts.durations(ids))
    rng = np.random.default_rng(0)
    toks = [tts.lm.bos] + list(rng.integers(0, 512, 39))
    with torch.inference_mode():
        full = tts.lm(torch.tensor([toks]), torch.from_numpy(cond[:40])[None])[0].numpy()
    s = CodecLMSession(tts.lm, cond)
    inc = np.concatenate([s.eval(toks[:7]), s.eval(toks[7:8]), s.eval(toks[8:40])])
    np.testing.assert_allclose(inc, full, atol=1e-3)
    s.crop(5)
    np.testing.assert_allclose(s.eval(toks[5:40]), full[5:], atol=1e-3)


@pytest.mark.parametrize("method", ["sd", "ssd", "pcg"])
def test_speculative_samplers_emit_every_frame_with_fewer_target_passes(tts, method):
    ids = tts.phoneme_ids("The girl is reading a book.")[0]
    tts.rng = np.random.default_rng(1)
    toks, st = tts.tokens(ids, method=method)
    n = int(tts.durations(ids).sum())
    assert len(toks) == n and st.tokens == n
    assert st.accepted <= st.drafted and st.rounds == st.target_passes
    assert st.target_passes < n  # AR would need one target pass per frame
    assert 0 <= st.acceptance_rate <= 1


def test_codec_tts_speech_is_recognisably_the_text(tts, whisper):
    import jiwer
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    n = EnglishTextNormalizer({})
    text = "A little boy is playing with a ball in the park."
    other = "Several women are waiting for the train at the station."
    tts.rng = np.random.default_rng(0)
    audio = tts.synthesize(text)
    assert 1.0 < len(audio) / 16000 < 8.0
    assert tts.last_stats.drafted > 0  # PCG drafted and verified
    heard = n(_say(whisper, audio))
    # far from Piper's clarity (assets/codec_tts/card.md), but closer to what it was asked to say than to
    # another sentence of the same kind
    assert jiwer.cer(n(text), heard) < 0.8
    assert jiwer.cer(n(text), heard) < jiwer.cer(n(other), heard)


def test_runtime_selects_the_codec_engine(tmp_path):
    from engine.config import Config
    from engine.runtime import Runtime
    from tts.codec_lm import CodecTTS

    cfg = Config().with_overrides({"tts": {"engine": "codec", "codec_method": "pcg", "theta": 0.42}})
    t = Runtime(cfg, progress=False).tts()
    assert isinstance(t, CodecTTS) and t.sample_rate == 16000 and t.theta == 0.42
