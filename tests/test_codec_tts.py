"""The codec-token TTS (assets/codec_tts): latent-codec round trip through the voice's own generator, the prior as
conditioning, KV-cached sessions, a generative (not deterministic) LM, speculative samplers (counted by a spy on the
real model, and broken once to show their acceptance goes through engine.core.verify), and the intelligibility of
what it says (transcribed by the real Whisper target)."""

import contextlib

import numpy as np
import pytest

from engine.config import TtsConfig

from .conftest import normalized_wer


@pytest.fixture(scope="module")
def tts(runtime, tmp_path_factory):
    from engine.synthesis.codec_tts import CodecTTS

    return CodecTTS(TtsConfig(codec_method="pcg"), seed=0, cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def whisper(runtime):
    from faster_whisper import WhisperModel

    return WhisperModel(str(runtime.model("asr_target").path), device="cpu", compute_type="int8")


def _say(whisper, audio):
    return " ".join(s.text for s in whisper.transcribe(audio, language="en", beam_size=1)[0])


def test_codec_round_trip_stays_intelligible(runtime, tts, whisper):
    """The voice's own latent z (its noise seeded) → codes → centroids → its generator is still the sentence."""
    import onnxruntime

    from audio.io import resample

    # Piper samples VITS noise from ONNX Runtime's random ops, seeded at session creation unless set
    onnxruntime.set_seed(0)
    text = "A man in a red jacket is riding a bicycle down the street."
    t = tts.voice.parts.teacher(tts.phoneme_ids(text)[0])
    toks = tts.codec.encode(t["z"])
    assert toks.dtype == np.int64 and len(toks) == len(t["z"]) == int(t["dur"].sum())
    assert toks.min() >= 0 and toks.max() < tts.codec.K
    y = tts.voice.decode(toks)
    assert len(y) == 256 * len(toks) == len(t["audio"])
    assert normalized_wer(text, _say(whisper, resample(y, 22050, 16000))) < 0.25


def test_codec_quantises_to_the_nearest_centroid():
    from engine.synthesis.codec import LatentCodec
    from engine.synthesis.codec_lm import ASSET_DIR

    c = LatentCodec.load(ASSET_DIR / "codec.npz")
    assert c.centroids.shape == (c.K, 192)
    assert np.array_equal(c.encode(c.centroids), np.arange(c.K))
    z = np.random.default_rng(0).standard_normal((50, 192)).astype(np.float32)
    brute = ((z[:, None] - c.centroids[None]) ** 2).sum(-1).argmin(1)
    assert np.array_equal(c.encode(z), brute)


def test_frame_conditioning_expands_the_prior_by_the_durations():
    from engine.synthesis.codec_lm import frame_conditioning

    m = np.arange(3 * 192, dtype=np.float32).reshape(3, 192)
    cond = frame_conditioning(m, -m, np.array([2, 0, 3]))
    assert cond.shape == (5, 385) and cond.dtype == np.float32
    assert (cond[:2, :192] == m[0]).all() and (cond[2:, :192] == m[2]).all() and (cond[2:, 192:384] == -m[2]).all()
    assert cond[:, -1].tolist() == pytest.approx([0, 0.5, 0, 1 / 3, 2 / 3])


def test_session_kv_cache_matches_a_full_forward(tts):
    import torch

    from engine.llm.protocol import CausalLM
    from engine.synthesis.codec_lm_session import CodecLMSession

    ids = tts.phoneme_ids("Two dogs play in the snow.")[0]
    cond = tts.voice.conditioning(ids)
    n = len(cond)
    assert n > 40
    rng = np.random.default_rng(0)
    toks = [tts.lm.bos] + list(rng.integers(0, tts.codec.K, n - 1))
    with torch.inference_mode():  # the whole utterance at once (the conditioning convolutions see all of it)
        full = tts.lm(torch.tensor([toks]), torch.from_numpy(cond)[None])[0].numpy()
        full_draft = tts.lm(torch.tensor([toks]), torch.from_numpy(cond)[None], draft=True)[0].numpy()
    for backend, threads in (("onnx", 1), ("onnx", 2), ("torch", 1)):
        s = CodecLMSession(tts.lm, cond, backend=backend, threads=threads)
        assert isinstance(s, CausalLM) and s.n_vocab == tts.codec.K
        inc = np.concatenate([s.eval(toks[:7]), s.eval(toks[7:8]), s.eval(toks[8:40])])
        np.testing.assert_allclose(inc, full[:40], atol=2e-4)
        s.crop(5)
        np.testing.assert_allclose(s.eval(toks[5:40]), full[5:40], atol=2e-4)
        s.crop(12)  # a verification-sized pass (4 tokens) after a crop, then single steps
        np.testing.assert_allclose(np.concatenate([s.eval(toks[12:16]), s.eval(toks[16:17])]), full[12:17],
                                   atol=2e-4)
        d = CodecLMSession(tts.lm, cond, draft=True, backend=backend, threads=threads)
        np.testing.assert_allclose(np.concatenate([d.eval(toks[:30]), d.eval(toks[30:31])]), full_draft[:31],
                                   atol=2e-4)
        assert s.n_forward == 6 and sum(n for n, _ in s.pass_time.values()) == 6 and s.pass_time[4][0] == 1


def test_self_speculative_rounds_give_the_targets_own_distributions(tts):
    """The fast path (sampling in the graphs, the draft's layers' KV cache shared with the target's): its target
    distributions must be those of a plain full target pass over the same tokens, round after round (with
    rejections cropping the cache), and its draft distributions those of the plain draft."""
    from engine.core import verify as V
    from engine.synthesis.codec_lm_session import CodecLMSession, SelfSpeculativeSession

    cond = tts.voice.conditioning(tts.phoneme_ids("A man in a blue shirt is standing on a ladder.")[0])
    T = 0.7
    s = SelfSpeculativeSession(tts.lm, cond, T, np.random.default_rng(0))
    ctx = [tts.lm.bos]
    rounds = []
    for L, acc in [(3, 1), (2, 2), (1, 0), (3, 3), (2, 0), (4, 2)]:
        xs, ps = [], []
        tok = ctx[-1]
        for _ in range(L):
            tok, p = s.draft_step(tok)
            xs.append(tok)
            ps.append(p.copy())
        qs, bonus = s.verify(ctx[-1], xs)
        rounds.append((len(ctx), xs, ps, qs.copy()))
        ctx += xs[:acc] + [bonus if acc == L else (xs[acc] + 1) % tts.lm.bos]  # a rejection's correction differs
        s.commit(acc)
    assert s.n == len(ctx) - 1
    full_t = V.softmax(CodecLMSession(tts.lm, cond).eval(ctx), T)
    for n0, xs, ps, qs in rounds:
        fed = ctx[: n0] + xs  # what the round saw: the context, then its drafts
        ref_t = V.softmax(CodecLMSession(tts.lm, cond).eval(fed), T)
        np.testing.assert_allclose(qs, ref_t[n0 - 1 :], atol=1e-4)
        ref_d = V.softmax(CodecLMSession(tts.lm, cond, draft=True).eval(fed[:-1]), T)
        np.testing.assert_allclose(np.array(ps), ref_d[n0 - 1 :], atol=1e-4)
    # after the rounds, the committed context's distributions are the full passes' (the caches were cropped right)
    qs, tok = s.verify(ctx[-1], [])  # a round without drafts: the target's own step
    assert 0 <= tok < tts.lm.bos
    np.testing.assert_allclose(qs[0], full_t[len(ctx) - 1], atol=1e-4)


def test_onnx_runtime_follows_the_modules_weights(tts):
    """The ONNX Runtime sessions are built from the module's weights as they are: a weight changed in place gives
    a new runtime (and new logits), restoring it gives back the original logits."""
    import torch

    from engine.synthesis.codec_lm_onnx import runtime_for
    from engine.synthesis.codec_lm_session import CodecLMSession

    cond = np.random.default_rng(0).standard_normal((8, 385)).astype(np.float32)
    cond[:, -1] = np.linspace(0, 0.9, 8)
    before = CodecLMSession(tts.lm, cond).eval([tts.lm.bos, 3])
    rt = runtime_for(tts.lm)
    with torch.no_grad():
        tts.lm.head.bias += 1.0
    try:
        assert runtime_for(tts.lm) is not rt
        np.testing.assert_allclose(CodecLMSession(tts.lm, cond).eval([tts.lm.bos, 3]), before + 1.0, atol=1e-4)
    finally:
        with torch.no_grad():
            tts.lm.head.bias -= 1.0
    np.testing.assert_allclose(CodecLMSession(tts.lm, cond).eval([tts.lm.bos, 3]), before, atol=1e-5)


def test_the_lm_is_a_generative_model_of_the_codes(tts):
    """At the shipped temperature the target's next-code distribution is not a copy of the prior: its per-frame
    entropy is well above zero, and two samples of the same sentence differ."""
    from engine.core import verify as V
    from engine.synthesis.codec_lm_session import CodecLMSession

    ids = tts.phoneme_ids("A woman is cutting vegetables.")[0]
    cond = tts.voice.conditioning(ids)
    tts.rng = np.random.default_rng(0)
    toks, _ = tts.tokens(ids, method="ar", cond=cond)
    s = CodecLMSession(tts.lm, cond)
    q = V.softmax(s.eval([tts.lm.bos, *toks[:-1]]), tts.temperature)
    entropy = -(q * np.log(np.maximum(q, 1e-30))).sum(-1)
    assert entropy.mean() > 0.3  # nats per frame
    again, _ = tts.tokens(ids, method="ar", cond=cond)
    assert (again != toks).mean() > 0.1


@contextlib.contextmanager
def forward_spy():
    """Counts the model passes (:meth:`engine.synthesis.codec_lm_session.CodecLMSession._forward`, whichever backend
    runs them, and ``SelfSpeculativeSession._run``) and the positions each evaluates, target and draft apart."""
    from engine.synthesis.codec_lm_session import CodecLMSession, SelfSpeculativeSession

    seen = {"target": [], "draft": []}
    real, real_run = CodecLMSession._forward, SelfSpeculativeSession._run

    def spy(self, x, n0):
        seen["draft" if self.draft else "target"].append(int(x.shape[1]))
        return real(self, x, n0)

    def spy_run(self, part, tokens, pos):
        seen[part].append(len(tokens))
        return real_run(self, part, tokens, pos)

    CodecLMSession._forward = spy
    SelfSpeculativeSession._run = spy_run
    try:
        yield seen
    finally:
        CodecLMSession._forward = real
        SelfSpeculativeSession._run = real_run


@contextlib.contextmanager
def step_spy(monkeypatch, name, replace=None):
    """Wraps engine.core.verify.<name> (or replaces it with ``replace(real)``) and logs (argmax q, result)."""
    from engine.core import verify as V

    real = getattr(V, name)
    fn = replace(real) if replace else real
    log = []

    def spy(x, p, q, *a, **kw):
        r = fn(x, p, q, *a, **kw)
        log.append((int(np.argmax(q)), r))
        return r

    monkeypatch.setattr(V, name, spy)
    yield log
    monkeypatch.setattr(V, name, real)


@pytest.mark.parametrize("method", ["sd", "ssd", "pcg"])
def test_speculative_sampler_counts_match_what_the_model_evaluated(tts, method, monkeypatch):
    ids = tts.phoneme_ids("The girl is reading a book.")[0]
    cond = tts.voice.conditioning(ids)
    tts.rng = np.random.default_rng(1)
    with forward_spy() as seen, step_spy(monkeypatch, "pcg_step" if method == "pcg" else "sd_step") as log:
        toks, st = tts.tokens(ids, method=method, cond=cond)
    n = len(cond)
    assert len(toks) == n and st.tokens == n
    # each draft forward samples one draft token; each round is one target pass
    assert st.target_passes == len(seen["target"]) == st.rounds < n  # AR needs one target pass per frame
    assert st.draft_passes == len(seen["draft"]) == st.drafted
    # every acceptance decision went through engine.core.verify, and the counters are its decisions
    assert st.accepted == sum(r.accepted for _, r in log) and len(log) == st.accepted + sum(
        1 for _, r in log if not r.accepted)
    assert len(st.accepted_lengths) == st.rounds and sum(st.accepted_lengths) == st.accepted
    # the target evaluates each frame's input once, plus the draft tokens it rejected (re-fed after a crop)
    assert sum(seen["target"]) >= n


def _greedy_tts(tts, cond, method):
    tts.rng = np.random.default_rng(0)
    t = tts.temperature
    tts.temperature = 1e-5  # q and p one-hot: sampling is greedy
    try:
        return tts.tokens(None, method=method, cond=cond)[0]
    finally:
        tts.temperature = t


def test_sd_is_greedy_ar_at_zero_temperature_and_breaking_its_rule_changes_the_output(tts, monkeypatch):
    from engine.core import verify as V

    cond = tts.voice.conditioning(tts.phoneme_ids("Two dogs play in the snow.")[0])
    ar = _greedy_tts(tts, cond, "ar")
    assert np.array_equal(_greedy_tts(tts, cond, "sd"), ar)
    monkeypatch.setattr(V, "sd_step", lambda x, p, q, rng, bias=0.0: V.StepResult(x, True))  # accept every draft
    broken = _greedy_tts(tts, cond, "sd")
    assert len(broken) == len(ar) and not np.array_equal(broken, ar)


def test_pcg_emits_a_group_of_the_targets_choice_and_breaking_its_rule_does_not(tts, monkeypatch):
    """At temperature → 0, Q_c is uniform over the groups holding the target's argmax t*: PCG's emitted group must
    hold t* (the Proposition). Accepting every draft token instead breaks that."""
    from engine.core import verify as V

    cond = tts.voice.conditioning(tts.phoneme_ids("Two dogs play in the snow.")[0])
    G = tts.groups

    def violations(log):
        return sum(1 for t_star, r in log if t_star not in G.groups[r.group])

    with step_spy(monkeypatch, "pcg_step") as log:
        good = _greedy_tts(tts, cond, "pcg")
    assert log and violations(log) == 0

    def accept_all(real):
        return lambda x, p, q, G, rng: V.StepResult(x, True, G.sample_group(x, rng))

    with step_spy(monkeypatch, "pcg_step", accept_all) as log:
        broken = _greedy_tts(tts, cond, "pcg")
    assert violations(log) > 0 and not np.array_equal(broken, good)


def test_codec_tts_speech_is_recognisably_the_text(tts, whisper):
    import jiwer
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    n = EnglishTextNormalizer({})
    text = "A little boy is playing with a ball in the park."
    other = "Several women are waiting for the train at the station."
    from audio.io import resample

    tts.rng = np.random.default_rng(0)
    audio = tts.synthesize(text)
    assert 1.0 < len(audio) / tts.sample_rate < 8.0
    assert tts.last_stats.drafted > 0  # PCG drafted and verified
    heard = n(_say(whisper, resample(audio, tts.sample_rate, 16000)))
    # what it was asked to say (one sentence: the 100-sentence CER is in assets/codec_tts/card.md), and far
    # closer to it than to another sentence of the same kind
    assert jiwer.cer(n(text), heard) < 0.3
    assert jiwer.cer(n(text), heard) < jiwer.cer(n(other), heard) / 2


def test_runtime_selects_the_codec_engine(tmp_path):
    from engine.config import Config
    from engine.runtime import Runtime
    from engine.synthesis.codec_tts import CodecTTS

    cfg = Config().with_overrides({"tts": {"engine": "codec", "codec_method": "pcg", "theta": 0.42}})
    t = Runtime(cfg, progress=False).tts()
    assert isinstance(t, CodecTTS) and t.sample_rate == 22050 and t.theta == 0.42


def test_assist_speaks_its_answer_with_the_codec_tts(tmp_path, small_gguf, whisper):
    """``tts.engine=codec`` end to end: ``specvoice assist`` hears the embedded question, answers (the 0.5B stands in
    for the 1.5B), and the answer audio (22.05 kHz, the voice's rate) is speech Whisper recognises as that answer."""
    import json

    import soundfile as sf

    from .conftest import run_cli

    r = run_cli(["assist", "--fast", "--out", str(tmp_path), "--model", f"llm_target={small_gguf}",
                 "--set", "llm.max_answer_tokens=40", "--set", "tts.engine=codec"])
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "assist-report.json").read_text())
    (ans,) = rep["answers"]
    assert len(ans["answer"].split()) >= 5
    assert ans["eos_to_first_audio_s"] is not None and ans["eos_to_first_audio_s"] >= ans["ttfs_s"] > 0
    from audio.io import resample

    audio, sr = sf.read(rep["answer_wav"], dtype="float32")
    assert sr == 22050 and len(audio) / sr == pytest.approx(ans["tts"]["audio_s"], rel=0.01)
    heard = _say(whisper, resample(audio, sr, 16000))
    assert normalized_wer(ans["answer"], heard) < 0.5  # the answer (noise or silence: ≈ 1)


@pytest.mark.parametrize("rank", [None, 8])
def test_onnx_graphs_are_valid_and_compute_the_modules_pass(rank):
    """engine.synthesis.codec_lm_onnx (a small random module, full-rank or low-rank draft head): each graph passes
    onnx.checker, its logits are the module's over new tokens after cached ones (GroupQueryAttention writing the KV
    buffers), and the sampling graph's probs are softmax(logits / T) and its token the inverse-CDF draw with u."""
    import onnx
    import onnxruntime as ort
    import torch

    from engine.core import verify as V
    from engine.synthesis.codec_lm import CodecLM
    from engine.synthesis.codec_lm_onnx import codec_lm_onnx

    torch.manual_seed(0)
    lm = CodecLM(n_codes=64, d=32, layers=3, heads=4, ff=64, draft_layers=2, draft_rank=rank).eval()
    rng = np.random.default_rng(0)
    cond = rng.standard_normal((9, 385)).astype(np.float32)
    cond[:, -1] = np.linspace(0, 0.9, 9)
    x = np.concatenate([[lm.bos], rng.integers(0, 64, 8)]).astype(np.int64)[None]
    with torch.inference_mode():
        ce = lm.cond_embed(torch.from_numpy(cond)[None])
        for part, n_layers in (("target", 3), ("draft", 2)):
            ref = lm(torch.from_numpy(x), ce=ce, draft=part == "draft")[0].numpy()
            model = codec_lm_onnx(lm, part, sample=True)
            onnx.checker.check_model(onnx.load_from_string(model))
            sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
            kv = {f"past_{k}{i}": np.zeros((1, 4, 10, 8), np.float32) for i in range(n_layers) for k in "kv"}
            logits = []
            for a, b in ((0, 5), (5, 9)):  # five positions, then four more over the cached five
                feed = {"x": x[:, a:b], "ce": ce[:, a:b].numpy(), "seqlens_k": np.array([b - 1], np.int32),
                        "total_len": np.array(b, np.int32), "temperature": np.array(0.7, np.float32),
                        "uniform": np.array([0.3], np.float32), **kv}
                out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))
                kv = {f"past_{k}{i}": out[f"present_{k}{i}"] for i in range(n_layers) for k in "kv"}
                logits.append(out["logits"][0])
                np.testing.assert_allclose(out["probs"][0], V.softmax(out["logits"][0], 0.7), atol=1e-5)
                cdf = np.cumsum(out["probs"][0, -1])  # float32, summed in order as the graph does
                assert out["token"].shape == (1, 1)
                assert out["token"][0, 0] == min(np.searchsorted(cdf, np.float32(0.3) * cdf[-1], side="right"), 63)
            np.testing.assert_allclose(np.concatenate(logits), ref, atol=1e-4)


def test_low_rank_draft_head_is_the_truncated_svd_of_the_head():
    """engine.synthesis.training.low_rank_draft_head (a small random module: the factorisation's algebra only): at
    full rank the factored head is the head itself; at rank r its error is the tail of the singular values
    (Eckart–Young), and the bias is kept."""
    import torch

    from engine.synthesis.codec_lm import CodecLM
    from engine.synthesis.training import low_rank_draft_head

    torch.manual_seed(0)
    lm = CodecLM(n_codes=64, d=16, layers=2, heads=2, ff=32)
    W, b = lm.draft_head.weight.detach().clone(), lm.draft_head.bias.detach().clone()
    s = torch.linalg.svdvals(W)
    low_rank_draft_head(lm, 16)
    np.testing.assert_allclose((lm.draft_head[1].weight @ lm.draft_head[0].weight).detach(), W, atol=1e-5)
    low_rank_draft_head(lm, 4)
    err = torch.linalg.matrix_norm(lm.draft_head[1].weight @ lm.draft_head[0].weight - W).detach()
    np.testing.assert_allclose(err, torch.sqrt((s[4:] ** 2).sum()), rtol=1e-4)
    assert torch.equal(lm.draft_head[1].bias.detach(), b)
    x = torch.zeros(1, 3, dtype=torch.long)
    assert lm(x, torch.randn(1, 3, 385), draft=True).shape == (1, 3, 64)
