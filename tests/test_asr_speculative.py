"""Speculative ASR decoders on real Whisper and real audio: CTC self-speculative decoding (Eq. 2/3/5/6) and SpecASR
(lossless greedy, tree attention, draft sync, recycling merge). Counters are checked against a spy on the real
decoder; each method's acceptance is broken once (engine.core.verify accepting every draft token) to show the output
then leaves greedy AR — i.e. the method's acceptance goes through the core."""

import contextlib
import json

import numpy as np
import pytest

from engine.core import verify as V
from engine.asr.ctc_draft import BLANK, N_CLASSES, decode_ids, encode_text, frame_entropy, greedy_path
from engine.asr.ctc_self_speculative import SSDDecoder, merge_drafts

from .conftest import JFK_TEXT, ROOT


@contextlib.contextmanager
def decoder_calls(whisper):
    """Spy on a TorchWhisper's real decoder module: the number of tokens fed, one entry per forward pass."""
    mod = whisper.model.model.decoder
    real = mod.forward
    calls: list[int] = []

    def spy(*a, **kw):
        calls.append(int(kw["input_ids"].shape[1]))
        return real(*a, **kw)

    mod.forward = spy
    try:
        yield calls
    finally:
        del mod.forward


def accept_everything(monkeypatch):
    """Break the core: every draft token (every node of a tree's first path) is accepted."""

    def tree(row0, rows, tokens, parents, pick=None):
        path, node = [], -1
        while (kids := [i for i, p in enumerate(parents) if p == node]):
            path.append(kids[0])
            node = kids[0]
        return path, (pick or (lambda r, d: int(np.argmax(r))))(rows[node] if path else row0, len(path))

    monkeypatch.setattr(V, "threshold_accepted", lambda p, tau: len(list(p)))
    monkeypatch.setattr(V, "greedy_tree", tree)


@pytest.fixture(scope="module")
def ws(runtime):
    return runtime.whisper_ssd()


@pytest.fixture(scope="module")
def jfk_enc(ws, jfk_audio):
    sv, enc = ws.encode(jfk_audio)
    return sv, enc, ws.prompt(), ws.whisper.greedy(enc, ws.prompt())


# ------------------------------------------------------------------------------------------------- CTC draft head
def test_eq2_greedy_path_merges_repeats_then_drops_blanks():
    ids = encode_text("aab")  # a a b
    a, b = ids[0], ids[2]
    path = [BLANK, a, a, BLANK, a, b, b, BLANK]  # → "a" "a" "b" (blank separates the two a's)
    lp = np.full((len(path), N_CLASSES), -20.0, np.float32)
    lp[np.arange(len(path)), path] = 0.0
    assert greedy_path(lp) == "aab"
    assert decode_ids(encode_text("Hello, world!")) == "Hello, world!"


def test_eq3_frame_entropy_in_nats():
    uniform = np.log(np.full((1, N_CLASSES), 1.0 / N_CLASSES))
    assert frame_entropy(uniform)[0] == pytest.approx(np.log(N_CLASSES), rel=1e-5)
    peaked = np.full((1, N_CLASSES), -1e4)
    peaked[0, 3] = 0.0
    assert frame_entropy(peaked)[0] == pytest.approx(0.0, abs=1e-6)


def test_trained_head_drafts_jfk_recognisably(ws, jfk_enc, jfk_audio):
    import jiwer

    d = ws.head.draft(jfk_enc[1], int(np.ceil(len(jfk_audio) / 320)))
    norm = lambda s: " ".join("".join(c for c in s.lower() if c.isalnum() or c == " ").split())  # noqa: E731
    cer = jiwer.cer(norm(JFK_TEXT), norm(d.text))
    assert cer < 0.45, (cer, d.text)  # the card reports the measured value
    assert d.entropies.shape == (int(np.ceil(len(jfk_audio) / 320)),) and d.max_entropy > 0


# ------------------------------------------------------------------------------------------------------ SSD steps
def test_eq3_low_entropy_draft_is_final_without_the_decoder(ws, jfk_enc, jfk_audio):
    d = ws.head.draft(jfk_enc[1], int(np.ceil(len(jfk_audio) / 320)))
    r = SSDDecoder(ws.whisper, tau_ctc=d.max_entropy + 1e-3, tau_slm=0.2).decode(
        jfk_enc[1], jfk_enc[2], d.text, d.max_entropy)
    assert r.stage == "ctc" and r.n_forward == 0 and r.text == d.text.strip()
    r = SSDDecoder(ws.whisper, tau_ctc=d.max_entropy - 1e-3, tau_slm=0.2).decode(
        jfk_enc[1], jfk_enc[2], d.text, d.max_entropy)
    assert r.stage != "ctc" and r.n_forward >= 1


def test_eq5_plausible_draft_is_accepted_in_one_decoder_pass(ws, jfk_enc):
    # in streaming the previous hypothesis is a draft; a correct one verifies in ONE pass
    ar = jfk_enc[3]
    r = SSDDecoder(ws.whisper, tau_ctc=0.0, tau_slm=0.2).decode(jfk_enc[1], jfk_enc[2], ar.text)
    assert r.stage == "verified" and r.n_forward == 1 and r.tokens == ar.tokens
    assert ar.n_forward == len(ar.tokens) + 1  # AR needs one pass per token (+ EOT)


def test_eq6_fallback_equals_ar_continued_from_the_verified_prefix(ws, jfk_enc, jfk_audio):
    d = ws.head.draft(jfk_enc[1], int(np.ceil(len(jfk_audio) / 320)))
    draft = d.text[: len(d.text) // 2] + " zzqx " + d.text[len(d.text) // 2:]  # make sure it cannot verify
    dec = SSDDecoder(ws.whisper, tau_ctc=0.0, tau_slm=0.2, rejoin=False)
    r = dec.decode(jfk_enc[1], jfk_enc[2], draft, d.max_entropy)
    assert r.stage == "fallback" and r.accepted < len(r.draft_tokens)
    ref = ws.whisper.greedy(jfk_enc[1], jfk_enc[2], prefix=r.draft_tokens[: r.accepted])
    assert r.tokens == ref.tokens
    # τ_SLM = 1 accepts nothing: SSD degenerates to exactly AR
    r1 = SSDDecoder(ws.whisper, tau_ctc=0.0, tau_slm=1.0, rejoin=False).decode(jfk_enc[1], jfk_enc[2], draft)
    assert r1.accepted == 0 and r1.tokens == jfk_enc[3].tokens


def _wrong_word(text: str, i: int = 4) -> str:
    words = text.split()
    words[i] = "zzqx"
    return " ".join(words)


def test_ssd_acceptance_goes_through_the_core(ws, jfk_enc, monkeypatch):
    ar = jfk_enc[3]
    draft = _wrong_word(ar.text)
    dec = SSDDecoder(ws.whisper, tau_ctc=0.0, tau_slm=0.2, rejoin=False)
    with decoder_calls(ws.whisper) as calls:
        r = dec.decode(jfk_enc[1], jfk_enc[2], draft)
    assert r.tokens == ar.tokens and r.stage == "fallback" and 0 < r.accepted < len(r.draft_tokens)
    assert r.n_forward == len(calls)  # one verification pass + one per AR token after the verified prefix
    assert calls[0] == len(jfk_enc[2]) + len(r.draft_tokens) and all(c == 1 for c in calls[1:])
    accept_everything(monkeypatch)
    broken = dec.decode(jfk_enc[1], jfk_enc[2], draft)
    assert broken.tokens != ar.tokens and "zzqx" in broken.text


def test_ct2_ssd_acceptance_goes_through_the_core(runtime, jfk_audio, monkeypatch):
    """The live SSD path: a wrong previous hypothesis is the draft; τ_SLM rejects the wrong word and the decode
    equals the same backend's greedy AR; accepting every draft token keeps it."""
    from engine.asr.ctc_self_speculative import SSDCT2Backend

    be = SSDCT2Backend(runtime.whisper_ssd(), 0.7, 0.2)
    nf = be.window.n_frames(len(jfk_audio))
    ar = be._decode_window(jfk_audio, "", nf, False)
    prev = _wrong_word(ar.text)

    def decode():
        be._prev = (jfk_audio[:1600].tobytes(), len(jfk_audio), prev)
        return be._decode_window(jfk_audio, "", nf, True)

    good = decode()
    assert good.stats["stage"] == "fallback" and good.tokens == ar.tokens
    accept_everything(monkeypatch)
    broken = decode()
    assert broken.tokens != ar.tokens and "zzqx" in broken.text


def test_rejoin_reuses_the_draft_after_a_correction(ws, jfk_enc):
    ar = jfk_enc[3]
    words = ar.text.split()
    words[3] = "Amerikans"  # one wrong word in an otherwise right draft
    draft = " ".join(words)
    plain = SSDDecoder(ws.whisper, 0.0, 0.2, rejoin=False).decode(jfk_enc[1], jfk_enc[2], draft)
    rj = SSDDecoder(ws.whisper, 0.0, 0.2, rejoin=True).decode(jfk_enc[1], jfk_enc[2], draft)
    assert rj.rejoins >= 1 and rj.n_forward < plain.n_forward
    assert rj.tokens == plain.tokens == ar.tokens


def test_merge_drafts_appends_the_ctc_tail_after_the_previous_hypothesis():
    assert merge_drafts("And so my fellow", "and so my felow americans ask not") == "And so my fellow americans ask not"
    assert merge_drafts("", "ask not") == "ask not"
    assert merge_drafts("ask not", "") == "ask not"


def test_ssd_streaming_backend_transcribes_jfk(runtime, jfk_audio):
    import jiwer

    from engine.asr.ctc_self_speculative import SSDBackend

    be = SSDBackend(runtime.whisper_ssd(), 0.7, 0.2)
    half = be.transcribe(jfk_audio[: len(jfk_audio) // 2])
    full = be.transcribe(jfk_audio)  # the previous hypothesis (same buffer start) joins the draft
    text = "".join(w.text for w in full.words)
    assert jiwer.wer(JFK_TEXT.lower(), text.strip().lower()) < 0.25
    assert full.words[-1].end <= len(jfk_audio) / 16000 + 0.5 and half.words
    assert full.stats["n_forward"] < full.stats["tokens"]


# -------------------------------------------------------------------------------------------------------- SpecASR
@pytest.fixture(scope="module")
def spec(runtime, ws):
    from engine.asr.draft_model_speculative import SpecASR

    return SpecASR(ws.whisper, runtime.whisper_ssd("asr_draft"), ctc_head=ws.head)


def test_tree_attention_equals_sequential_evaluation(ws, jfk_enc):
    enc, p, T = jfk_enc[1], jfk_enc[2], jfk_enc[3].tokens
    lm = ws.whisper.decoder(enc)
    lm.eval(p + T[:3])
    base = lm.n_past
    toks = [T[3], T[4], T[5], T[6], 220, 1000, T[5]]
    par = [-1, 0, 1, 2, 0, 4, 4]
    rows = lm.eval_tree(toks, par)
    for path in ([0, 1, 2, 3], [0, 4, 5], [0, 4, 6]):
        ref = ws.whisper.decoder(enc).eval(p + T[:3] + [toks[i] for i in path])[-len(path):]
        np.testing.assert_allclose(rows[path], ref, atol=2e-3)
    lm.keep_path(base, [0, 4, 6])
    nxt = lm.eval([T[7]])[-1]
    ref = ws.whisper.decoder(enc).eval(p + T[:3] + [toks[0], toks[4], toks[6], T[7]])[-1]
    np.testing.assert_allclose(nxt, ref, atol=2e-3)


@pytest.mark.parametrize("method", ["sd8", "sd8x2", "adaptive", "recycling", "tree", "ctc_draft"])
def test_specasr_greedy_is_lossless(spec, ws, jfk_enc, jfk_audio, method):
    with decoder_calls(spec.t) as target, decoder_calls(spec.d) as draft:
        r = spec.decode(jfk_audio, jfk_enc[1], jfk_enc[2], method)
    assert r["tokens"] == jfk_enc[3].tokens
    assert r["n_forward"] == len(target) < jfk_enc[3].n_forward  # fewer target passes than AR
    assert r["draft_steps"] == len(draft) and (method != "ctc_draft" or not draft)
    # the target saw the prompt once, then every drafted node (and each pending correction) in tree passes
    assert target[0] == len(jfk_enc[2]) and sum(target[1:]) >= r["predicted"] >= r["accepted"] > 0


@pytest.mark.parametrize("method", ["ctc_draft", "tree"])
def test_specasr_acceptance_goes_through_the_core(spec, ws, jfk_enc, jfk_audio, method, monkeypatch):
    """Breaking the core (every draft token accepted) changes SpecASR's output on at least one input whose draft
    errs (jfk.flac's tiny.en draft can be exactly right, so held-out utterances are tried too)."""
    from audio.io import load_audio

    accept_everything(monkeypatch)
    if spec.decode(jfk_audio, jfk_enc[1], jfk_enc[2], method)["tokens"] != jfk_enc[3].tokens:
        return
    d = ROOT / "bench" / "data" / "heldout_speech"
    for n in sorted(json.loads((d / "refs.json").read_text()))[:6]:
        a = load_audio(d / n)
        _, enc = ws.encode(a)
        if spec.decode(a, enc, ws.prompt(), method)["tokens"] != ws.whisper.greedy(enc, ws.prompt()).tokens:
            return
    pytest.fail("accepting every draft token changed no output: the core is not on SpecASR's path")


def test_specasr_lossless_on_held_out_speech(spec, ws):
    from audio.io import load_audio

    d = ROOT / "bench" / "data" / "heldout_speech"
    names = sorted(json.loads((d / "refs.json").read_text()))[:2]
    for n in names:
        a = load_audio(d / n)
        _, enc = ws.encode(a)
        ar = ws.whisper.greedy(enc, ws.prompt())
        for m in ("tree", "recycling"):
            assert spec.decode(a, enc, ws.prompt(), m)["tokens"] == ar.tokens


def test_draft_sync_crops_to_the_common_prefix(runtime, spec):
    from engine.asr.draft_model_speculative import SpecASRStats, _Draft

    dws = runtime.whisper_ssd("asr_draft")
    from audio.io import load_audio

    a = load_audio(ROOT / "tests" / "data" / "jfk.flac")
    enc = dws.encode(a)[1]
    st = SpecASRStats()
    d = _Draft(dws.whisper, enc, dws.whisper.prompt(), st)
    tok = dws.whisper.fw_tokenizer
    with decoder_calls(dws.whisper) as calls:
        d.sync(" And so my fellow Americans")
        d.sync(" And so my friends")  # shares " And so my": only " friends" is evaluated
        d.sync(" And so my friends")  # nothing new: no pass
        d.sync(" And so my")  # a strict prefix: its last token is fed again for its row
    shared = len(tok.encode(" And so my"))
    assert calls == [len(dws.whisper.prompt()) + len(tok.encode(" And so my fellow Americans")),
                     len(tok.encode(" And so my friends")) - shared, 1]
    assert st.draft_passes == len(calls)
    fresh = dws.whisper.decoder(enc).eval(dws.whisper.prompt() + tok.encode(" And so my friends"))
    np.testing.assert_allclose(d.lm.eval(tok.encode(" friends"))[-1], fresh[-1], atol=2e-3)


def test_recycling_merge_fires_where_the_regenerated_words_rejoin_sequence_1(spec):
    tok = spec.d.fw_tokenizer
    seq1 = "fellow Americans ask not what your country".split()  # rejected draft, after the verified point
    stop = spec._merge_stop("", seq1, branch_base=[])
    t = list(tok.encode(" fellows Americans ask"))
    calls = [stop(t[:i]) for i in range(1, len(t) + 1)]
    assert calls[-1] and not any(calls[:-1])  # fires once "Americans" is complete (same position as seq1[1])
    assert stop.merged == 1
    # the incomplete word after the merge point was dropped: seq1 supplies " ask not what ..."
    stop = spec._merge_stop("", seq1, branch_base=[])
    t2 = list(t)
    assert stop(t2) and tok.decode(t2).strip() == "fellows Americans"
    # a regenerated sequence that never matches never merges
    stop = spec._merge_stop("", seq1, branch_base=[])
    t3 = list(tok.encode(" quite different words here"))
    assert not any(stop(t3[:i]) for i in range(1, len(t3) + 1))


def test_ct2_ssd_backend_verifies_the_previous_hypothesis_in_one_pass(runtime, jfk_audio):
    import jiwer

    from engine.asr.ctc_self_speculative import SSDCT2Backend

    be = SSDCT2Backend(runtime.whisper_ssd(), 0.7, 0.2)
    first = be.transcribe(jfk_audio)
    text = "".join(w.text for w in first.words).strip()
    assert jiwer.wer(JFK_TEXT.lower(), text.lower()) < 0.25
    again = be.transcribe(jfk_audio)  # same buffer: the previous hypothesis is the draft
    assert again.stats["stage"] == "verified" and again.stats["accepted"] == again.stats["tokens"]
    assert again.stats["n_forward"] == 2  # one align (Eq. 5 + word times) + one step that ends
    assert "".join(w.text for w in again.words).strip() == text
    # word times from the verification pass (aligned after the full prompt) agree with the separate alignment
    assert max(abs(a.start - b.start) for a, b in zip(again.words, first.words)) <= 0.2


def test_ct2_ssd_backend_without_a_draft_is_its_greedy_ar_baseline(runtime, jfk_audio):
    """The benchmark's same-mode AR baseline: no CTC draft, no align pass; SSD's transcript equals it on jfk."""
    from engine.asr.ctc_self_speculative import SSDCT2Backend
    from engine.asr.whisper_ar import WhisperARBackend

    ws = runtime.whisper_ssd()
    ar = WhisperARBackend(ws).transcribe(jfk_audio)
    assert ar.stats["stage"] == "ar" and ar.stats["draft_tokens"] == 0 and ar.stats["accepted"] == 0
    assert ar.stats["n_forward"] == ar.stats["tokens"] + 1  # one decoder step per token + the end
    ssd = SSDCT2Backend(ws, 0.7, 0.2, use_previous=False).transcribe(jfk_audio)
    assert ssd.stats["stage"] in ("verified", "fallback") and ssd.stats["draft_tokens"] > 10
    assert [w.text for w in ssd.words] == [w.text for w in ar.words]
