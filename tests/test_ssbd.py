"""SSBD on the real Qwen 0.5B: KV crop at divergence, β behaviour, mask-k vs display-only, NE by hand."""

import numpy as np
import pytest

from engine.llm.generate import LMSession
from engine.translate.biased_retranslation import ARRetranslator, SSBDTranslator
from engine.translate.stream_metrics import erasure, normalized_erasure, words

from .conftest import same_or_near_tie

SRC = "A man in an orange hat is looking at something."


def test_normalized_erasure_by_hand():
    shown = ["Ein Mann", "Ein Mann mit", "Ein Junge mit Hut", "Ein Junge mit einem Hut ."]
    # E: 0 ("Ein Mann" kept), 2 (Mann, mit → Junge ...; LCP 1 of 3), 1 (Hut → einem; LCP 3 of 4)
    assert [erasure(words(a), words(b)) for a, b in zip(shown, shown[1:])] == [0, 2, 1]
    assert normalized_erasure(shown) == pytest.approx(3 / 6)
    assert normalized_erasure(["Hallo", "Hallo Welt"]) == 0.0


@pytest.fixture(scope="module")
def qwen_small_2(runtime):
    """A second context on the small LLM's weights: two translators compared turn by turn each keep their own KV
    cache (on one context each would find it written by the other and pre-fill its whole prompt again)."""
    return runtime.llm("llm_draft", instance="ssbd_second")


@pytest.fixture(scope="module")
def qwen_small_3(runtime):
    return runtime.llm("llm_draft", instance="ssbd_third")


def _continue_ar(lm, prompt, prefix, max_tokens=96):
    s = LMSession(lm)
    row = s.prefill(prompt + prefix)
    out = list(prefix)
    while len(out) < max_tokens:
        t = int(np.argmax(row))
        if t in lm.eos_ids:
            break
        out.append(t)
        row = s.eval([t])[-1]
    return out


def test_crop_at_divergence_then_ar_equals_ar_from_that_prefix(qwen_small):
    tr = SSBDTranslator(qwen_small, "German", beta=0.0, mask_k=0)
    wrong = qwen_small.tokenize("Ein Mann mit einem orangefarbenen Hut schläft tief im Garten.")
    tr.prev = list(wrong)
    u = tr.translate_ssbd(SRC, final=True)
    assert u.draft == len(wrong) and u.accepted < len(wrong)  # the wrong draft diverges somewhere
    assert u.tokens[: u.accepted] == wrong[: u.accepted]
    # the cache was cropped at the divergence: continuing there is plain AR from the accepted prefix + correction
    ref = _continue_ar(qwen_small, tr.prompt_tokens(SRC), u.tokens[: u.accepted + 1])
    d = same_or_near_tie(qwen_small, tr.prompt_tokens(SRC), ref, u.tokens)
    assert d is None or d > u.accepted


def test_beta_zero_equals_ar_retranslation_and_beta_accepts_more(qwen_small, qwen_small_2, qwen_small_3):
    ar = ARRetranslator(qwen_small, "German")
    ssbd = SSBDTranslator(qwen_small_2, "German", beta=0.0, mask_k=0)
    biased = SSBDTranslator(qwen_small_3, "German", beta=0.4, mask_k=0)
    steps = ["A man in an", "A man in an orange hat", SRC]
    for i, src in enumerate(steps):
        final = i == len(steps) - 1
        a = ar.translate_ssbd(src, final)
        s = ssbd.translate_ssbd(src, final)
        biased.prev = list(s.tokens) if i else []
        if i:
            biased.prev = list(ssbd.stream.updates[-2].tokens)
            b = biased.translate_ssbd(src, final)
            assert b.accepted >= s.accepted  # Eq. 5 only ever helps the draft
        same_or_near_tie(qwen_small, ar.prompt_tokens(src), a.tokens, s.tokens)
    assert ssbd.stream.updates[-1].accepted > 0 and ssbd.stream.acceptance > 0
    assert ar.stream.acceptance == 0.0


def test_mask_k_trims_the_draft_display_only_hides_the_tail(qwen_small, qwen_small_2):
    trim = SSBDTranslator(qwen_small_2, "German", beta=0.2, mask_k=3, display_only=False)
    show = SSBDTranslator(qwen_small, "German", beta=0.2, mask_k=3, display_only=True)
    for tr in (trim, show):
        tr.translate_ssbd("A man in an orange")
    first_len = len(show.prev)
    u_trim = trim.translate_ssbd("A man in an orange hat is")
    u_show = show.translate_ssbd("A man in an orange hat is")
    assert u_trim.draft == max(0, first_len - 3) and u_show.draft == first_len
    # display-only: the last k tokens are hidden (kept in the draft), the rest shown; the final shows everything
    assert u_show.tail_text and (u_show.stable_text + u_show.tail_text).replace(" ", "") == u_show.text.replace(" ", "")
    fin = show.translate_ssbd(SRC, final=True)
    assert fin.tail_text == "" and fin.stable_text == fin.text


def test_ssbd_acceptance_goes_through_the_core(qwen_small, monkeypatch):
    """A wrong draft: the real Eq. 5 rule rejects it where it goes wrong (and the model's evaluations are one pass
    over prompt ⊕ draft, then one per new token); the core broken to accept every draft token keeps it all."""
    from engine.core import verify as V

    wrong = qwen_small.tokenize("Ein Mann mit einem orangefarbenen Hut schläft tief im Garten.")
    ar = ARRetranslator(qwen_small, "German").translate_ssbd(SRC, final=True)
    assert ar.tokens[: len(wrong)] != wrong
    tr = SSBDTranslator(qwen_small, "German", beta=0.2, mask_k=0)
    calls = []
    real_eval = qwen_small.eval

    def spy(tokens):
        calls.append(len(tokens))
        return real_eval(tokens)

    monkeypatch.setattr(qwen_small, "eval", spy)
    tr.prev = list(wrong)
    u = tr.translate_ssbd(SRC, final=True)
    assert u.accepted < len(wrong) and u.forward_passes == len(calls) == 1 + u.output - u.accepted
    assert calls[0] >= len(wrong) and all(c == 1 for c in calls[1:])
    assert tr.stream.spec.drafted == len(wrong) and tr.stream.spec.accepted == u.accepted
    same_or_near_tie(qwen_small, tr.prompt_tokens(SRC), ar.tokens, u.tokens)

    monkeypatch.setattr(V, "biased", lambda rows, draft, beta: V.Verdict(len(draft), int(np.argmax(rows[-1]))))
    tr.prev = list(wrong)
    broken = tr.translate_ssbd(SRC, final=True)
    assert broken.accepted == len(wrong) and broken.tokens[: len(wrong)] == wrong != ar.tokens[: len(wrong)]


@pytest.mark.parametrize("method", ["ssbd", "ar"])
def test_partial_updates_in_chunks_pause_and_cancel(qwen_small, qwen_small_2, monkeypatch, method):
    """A partial update's forward pass in VERIFY_CHUNK-token passes gives the one-pass rows (β = 0: AR's greedy
    output), calls ``pause`` before each pass, and stops at once when cancelled (the draft is kept)."""
    import threading

    import engine.translate.biased_retranslation as S

    monkeypatch.setattr(S, "VERIFY_CHUNK", 8)
    make = (lambda lm: SSBDTranslator(lm, "German", beta=0.0, mask_k=0)) if method == "ssbd" else (
        lambda lm: ARRetranslator(lm, "German"))
    one, chunked = make(qwen_small), make(qwen_small_2)
    steps = ["A man in an orange", SRC]
    pauses = []
    for src in steps:
        a = one.translate_ssbd(src)
        b = chunked.translate_ssbd(src, cancel=threading.Event(), pause=lambda: pauses.append(1))
        same_or_near_tie(qwen_small, one.prompt_tokens(src), a.tokens, b.tokens)
    assert b.forward_passes >= 2 and len(pauses) >= b.forward_passes
    stop = threading.Event()
    stop.set()
    prev = list(getattr(chunked, "prev", []))
    c = chunked.translate_ssbd(SRC + " It is raining.", cancel=stop, pause=lambda: None)
    assert c.tokens == [] and c.forward_passes == 0 and getattr(chunked, "prev", []) == prev


def test_a_partial_cancelled_while_decoding_keeps_the_rest_of_its_draft(qwen_small, monkeypatch):
    """An update cut short while decoding (a newer source waits) must not leave the next update — usually the final
    transcript — a draft of a few tokens: the rest of the draft it verified is kept after its output."""
    import threading

    import engine.translate.biased_retranslation as S

    monkeypatch.setattr(S, "VERIFY_CHUNK", 4096)  # the verification is one pass: pause() #1, then one per step
    tr = SSBDTranslator(qwen_small, "German", beta=0.0, mask_k=0)
    full = tr.translate_ssbd(SRC).tokens
    assert len(full) >= 8 and tr.prev == full
    stop, calls = threading.Event(), []

    def pause():
        calls.append(1)
        if len(calls) == 3:  # after the verification pass and one decode step
            stop.set()

    u = tr.translate_ssbd("Two women in blue dresses are dancing in the rain on a busy street.", cancel=stop,
                          pause=pause)
    assert stop.is_set() and 0 < len(u.tokens) < len(full)
    assert tr.prev == u.tokens + full[len(u.tokens):]
    done = tr.translate_ssbd("Two women in blue dresses are dancing in the rain on a busy street.")
    assert done.draft == len(full) and tr.prev == done.tokens  # an update that ran to its end: its own output
