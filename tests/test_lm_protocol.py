"""The causal-LM protocol: llama.cpp adapter on the real Qwen 0.5B, torch adapter exactness on a tiny model."""

import numpy as np
import pytest

from engine.llm.generate import LMSession, TextStreamer, greedy_stream
from engine.llm.protocol import CausalLM
from engine.llm.torch_lm import TorchCausalLM


def _prompt(lm, text="Name three primary colors."):
    return lm.tokenize(lm.chat_prompt([{"role": "user", "content": text}]), special=True)


def test_llama_adapter_protocol_and_greedy(qwen_small):
    lm = qwen_small
    assert isinstance(lm, CausalLM)
    s = LMSession(lm)
    prompt = _prompt(lm)
    out = list(greedy_stream(s, prompt, 24, lm.eos_ids))
    text = lm.detokenize(out).lower()
    assert len(out) > 3 and any(c in text for c in ("red", "blue", "yellow", "green"))
    # one batched pass over the greedy continuation predicts the same next tokens (verification = 1 pass)
    s.crop(len(prompt))
    assert lm.n_past == len(prompt)
    rows = s.eval(out)
    assert rows.shape == (len(out), lm.n_vocab) and rows.dtype == np.float32
    agree = np.mean([int(np.argmax(r)) == t for r, t in zip(rows[:-1], out[1:])])
    assert agree >= 0.9  # llama.cpp batched logits differ slightly from one-at-a-time (MODELS.md)
    # crop then re-evaluate the same batch reproduces the logits (nothing stale is left in the KV cache)
    s.crop(len(prompt))
    np.testing.assert_allclose(s.eval(out), rows, atol=1e-4)
    # a crop inside the sequence: same next-token choices (batch shape changes llama.cpp's numerics slightly)
    s.crop(len(prompt) + 3)
    again = s.eval(out[3:6])
    assert [int(np.argmax(r)) for r in again] == [int(np.argmax(r)) for r in rows[3:6]]
    np.testing.assert_allclose(again, rows[3:6], atol=1.0)
    with pytest.raises(ValueError):
        lm.crop(lm.n_past + 5)
    with pytest.raises(ValueError):
        lm.eval([])


def test_session_prefix_reuse_counts_only_new_tokens(qwen_small):
    s = LMSession(qwen_small)
    p1 = _prompt(qwen_small, "Say hello.")
    s.prefill(p1)
    n = s.n_eval_tokens
    p2 = p1 + qwen_small.tokenize(" More text here.")
    s.prefill(p2)
    assert s.n_eval_tokens - n == len(p2) - len(p1)
    assert s.tokens == p2 and qwen_small.n_past == len(p2)


def test_torch_adapter_crop_is_exact():
    """A tiny random Qwen2 is fine here: this checks the adapter's cache arithmetic, not a model."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    model = Qwen2ForCausalLM(cfg)

    class Tok:
        def encode(self, text, **kw):
            return [ord(c) % 64 for c in text]

        def decode(self, ids):
            return "".join(chr(65 + i % 26) for i in ids)

    lm = TorchCausalLM(model, Tok(), device="cpu")
    assert isinstance(lm, CausalLM)
    toks = [1, 5, 9, 3, 7, 2, 8, 4]
    full = lm.eval(toks)
    lm.crop(3)
    part = lm.eval(toks[3:])
    np.testing.assert_allclose(part, full[3:], atol=1e-5)
    lm.crop(0)
    np.testing.assert_allclose(lm.eval(toks[:2]), full[:2], atol=1e-5)


def test_text_streamer_holds_back_partial_utf8(qwen_small):
    ids = qwen_small.tokenize("Grüße aus München 🎉")
    st = TextStreamer(qwen_small.detokenize)
    pieces = [st.push(i) for i in ids]
    assert "".join(pieces) == "Grüße aus München 🎉"
    assert all("\ufffd" not in p for p in pieces)


def test_whisper_decoders_sit_behind_the_protocol(runtime, jfk_audio):
    """The torch Whisper decoder is a CausalLM; CTranslate2's (no logits, no cache) is a TokenScorer whose one-pass
    probabilities of a transcript agree with the torch port's rows (same weights, int8 vs float32)."""
    from engine.core import verify as V
    from engine.asr.whisper_ct2 import CT2WhisperDecoder
    from engine.llm.protocol import TokenScorer

    ws = runtime.whisper_ssd()
    sv, enc = ws.encode(jfk_audio)
    prompt = ws.prompt()
    lm = ws.whisper.decoder(enc)
    assert isinstance(lm, CausalLM)
    toks = ws.whisper.greedy(enc, prompt).tokens
    rows = lm.eval(prompt + toks)[len(prompt) - 1 : -1]
    rows = ws.whisper.suppress_logits(rows, False)
    p_torch = V.softmax(rows)[np.arange(len(toks)), toks]
    dec = CT2WhisperDecoder(ws.fw.model, sv, len(jfk_audio) // 160)
    assert isinstance(dec, TokenScorer)
    p_ct2 = dec.token_probs(prompt, toks)
    assert p_ct2.shape == (len(toks),) and dec.n_forward == 1 and dec.alignment is not None
    assert np.abs(p_ct2 - p_torch).mean() < 0.05
    assert V.threshold_accepted(p_ct2, 0.2) == V.prob_threshold(rows, toks, 0.2).accepted


def test_llama_cpp_eval_is_cancelled_within_the_pass_and_leaves_the_cache_as_it_was(qwen_small, capfd):
    """LlamaCppLM.eval_cancellable: a cancel set while llama.cpp evaluates a long pass stops it (abort callback)
    within a node or two, long before the pass would end (counted in the callback's checks, one per graph node: a
    fifth of a whole pass's); n_past and the cache are as before, so what follows equals an uncancelled run; eval()
    itself is never aborted."""
    import threading

    import numpy as np

    class Counted:
        """A cancel event that sets itself at its ``at``-th check (None: never) and counts every check."""

        def __init__(self, at=None):
            self.at, self.checks, self.event = at, 0, threading.Event()

        def is_set(self) -> bool:
            self.checks += 1
            if self.at is not None and self.checks >= self.at:
                self.event.set()
            return self.event.is_set()

        def set(self):
            self.event.set()

    lm = qwen_small
    head = lm.tokenize("The quick brown fox jumps over the lazy dog. " * 2)
    long = lm.tokenize(" ".join(f"word{i}" for i in range(400)))[:384]
    lm.crop(0)
    lm.eval(head)
    whole = Counted()
    full = lm.eval_cancellable(long, whole)  # never set: the whole pass, one check per graph node
    assert full is not None and full.shape[0] == len(long) and whole.checks > 100
    lm.crop(len(head))
    stop = Counted(at=whole.checks // 5)
    assert lm.eval_cancellable(long, stop) is None
    assert stop.at <= stop.checks <= stop.at + 3  # it stopped at the check that saw the cancel
    assert lm.n_past == len(head)
    assert "decode" not in capfd.readouterr().err  # an expected abort prints nothing
    stop.set()
    a = lm.eval(long[:16])  # after an aborted pass: the same logits as without it
    lm.crop(0)
    lm.eval(head)
    b = lm.eval(long[:16])
    assert np.allclose(a, b, atol=1e-3)
    lm.crop(len(head))
    ok = lm.eval_cancellable(long[:16], threading.Event())
    assert np.allclose(ok, b, atol=1e-3) and lm.n_past == len(head) + 16


def test_amx_is_read_from_the_cpu_flags(tmp_path):
    """engine.llm.llama_cpp_lm.cpu_has_amx reads the ``amx_tile`` flag (llama.cpp's AMX weight buffers are then not used)."""
    from engine.llm.llama_cpp_lm import cpu_has_amx

    amx, plain = tmp_path / "amx", tmp_path / "plain"
    amx.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f amx_bf16 amx_tile amx_int8\n")
    plain.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f\n")
    assert cpu_has_amx(amx) and not cpu_has_amx(plain)
    assert not cpu_has_amx(tmp_path / "missing")
