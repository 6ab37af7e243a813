"""Whisper with full decoder control: the CTranslate2 weights in torch decode exactly like faster-whisper."""

import numpy as np
import pytest

from engine.asr.whisper_torch import TorchWhisper


@pytest.fixture(scope="module")
def whisper_base(runtime):
    return TorchWhisper(runtime.model("asr_target").path, device="cpu")


def test_torch_greedy_equals_faster_whisper_greedy_on_jfk(whisper_base, runtime, jfk_audio):
    from faster_whisper import WhisperModel

    ours = whisper_base.transcribe_greedy(jfk_audio)
    fw = WhisperModel(str(runtime.model("asr_target").path), device="cpu", compute_type="float32")
    segs, _ = fw.transcribe(jfk_audio, beam_size=1, language="en", without_timestamps=True, temperature=0.0,
                            condition_on_previous_text=False, vad_filter=False)
    segs = list(segs)
    assert len(segs) == 1
    assert ours.tokens == list(segs[0].tokens)
    assert ours.text == segs[0].text
    assert "ask not what your country can do for you" in ours.text.lower()


def test_decoder_protocol_batch_equals_sequential_and_crop(whisper_base, jfk_audio):
    enc = whisper_base.encode(jfk_audio)
    prompt = whisper_base.prompt()
    ref = whisper_base.greedy(enc)
    lm = whisper_base.decoder(enc)
    seq_rows = [lm.eval(prompt)[-1]]
    for t in ref.tokens[:8]:
        seq_rows.append(lm.eval([t])[-1])
    assert lm.n_past == len(prompt) + 8
    # crop back to the prompt and evaluate the same 8 tokens in ONE pass
    lm.crop(len(prompt))
    batch = lm.eval(ref.tokens[:8])
    np.testing.assert_allclose(batch, np.stack(seq_rows[1:]), atol=2e-3)
    assert [int(np.argmax(r)) for r in batch[:-1]] == ref.tokens[1:8]
    # prefix-forced greedy continues exactly like plain greedy
    cont = whisper_base.greedy(enc, prefix=ref.tokens[:5])
    assert cont.tokens == ref.tokens
    with pytest.raises(ValueError):
        lm.crop(lm.n_past + 1)
