"""Exactness of the speculative algorithms on the torch adapter, where batched and one-at-a-time logits agree to
float32 precision (unlike llama.cpp): greedy PredGen and SSBD with β = 0 must reproduce plain AR token for token.

A tiny random Qwen2 is used on purpose: this checks the algorithms' bookkeeping (verification rows, KV crops,
continuation), not a model's quality."""

import pytest
import torch

from engine.llm.torch_lm import TorchCausalLM
from engine.answer.predictive import PredGen
from engine.translate.biased_retranslation import ARRetranslator, SSBDTranslator


class CharTok:
    """Printable ASCII ↔ ids 3..97; 1 = EOS."""

    chat_template = None

    def encode(self, text, **kw):
        return [min(max(ord(c) - 29, 3), 97) for c in text]

    def decode(self, ids):
        return "".join(chr(i + 29) for i in ids if i >= 3)


@pytest.fixture(scope="module")
def tiny_lm():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(1)
    cfg = Qwen2Config(vocab_size=98, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, eos_token_id=1)
    model = Qwen2ForCausalLM(cfg).to(torch.float64)  # float64: batched == sequential beyond doubt
    return TorchCausalLM(model, CharTok(), device="cpu")


def test_greedy_predgen_equals_cascade_exactly(tiny_lm):
    final = "what is the best way to learn to play the piano"
    pg = PredGen(tiny_lm, None, "sys", verifier="greedy", tokens_per_update=5, max_tokens=24)
    words = final.split()
    for i in range(1, len(words)):
        pg.update(" ".join(words[:i]))
    got = pg.finish(final)
    ref = PredGen(tiny_lm, None, "sys", verifier="greedy", max_tokens=24).finish(final)
    assert got.answer_tokens == ref.answer_tokens and len(ref.answer_tokens) == 24


def test_ssbd_beta0_equals_ar_retranslation_exactly(tiny_lm):
    ar = ARRetranslator(tiny_lm, "German", max_tokens=16)
    ss = SSBDTranslator(tiny_lm, "German", max_tokens=16, beta=0.0, mask_k=0)
    src = "a dog runs across the green grass near the fence"
    w = src.split()
    steps = [" ".join(w[:i]) for i in range(3, len(w), 3)] + [src]
    for i, s in enumerate(steps):
        a = ar.translate_ssbd(s, i == len(steps) - 1)
        b = ss.translate_ssbd(s, i == len(steps) - 1)
        assert a.tokens == b.tokens
    assert ss.stream.acceptance > 0  # the drafts were actually used
