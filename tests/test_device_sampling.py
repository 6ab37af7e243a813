"""engine/synthesis/device_sampling.py: the codec LM's rounds resident on the device (here run eagerly on the CPU; on
CUDA the same functions are replayed as graphs). Real model, real voice prior."""

import numpy as np
import pytest

from engine.config import TtsConfig


@pytest.fixture(scope="module")
def tts(runtime, tmp_path_factory):
    from engine.synthesis.codec_tts import CodecTTS

    return CodecTTS(TtsConfig(codec_method="pcg"), seed=0, cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def cond(tts):
    return tts.voice.conditioning(tts.phoneme_ids("Two dogs play in the snow.")[0])


def _not_greedy(lm, cond, codes) -> int:
    """Positions where ``codes`` is not the module's own greedy choice given the codes before it (one full forward
    over the emitted prefix); a code whose logit is within float rounding (1e-4) of the maximum counts as greedy."""
    import torch

    x = torch.from_numpy(np.concatenate([[lm.bos], codes[:-1]]).astype(np.int64))[None]
    with torch.no_grad():
        logits = lm(x, torch.from_numpy(cond)[None])[0].numpy()
    return int((logits.max(-1) - logits[np.arange(len(codes)), codes] > 1e-4).sum())


def test_ar_and_exact_sd_rounds_at_zero_temperature_are_the_modules_greedy_decode(tts, cond):
    from engine.synthesis.device_sampling import DeviceRoundSampler

    ar = DeviceRoundSampler(tts.lm, 1e-4, 1, "ar", capacity=16)  # too small: grows to the utterance
    codes, st = ar.sample(cond, 0)
    assert ar.capacity > len(cond) and st.tokens == len(cond) == st.target_passes
    assert len(codes) == len(cond) and _not_greedy(tts.lm, cond, codes) == 0
    sd = DeviceRoundSampler(tts.lm, 1e-4, 3, "sd")
    codes_sd, st = sd.sample(cond, 1)
    assert _not_greedy(tts.lm, cond, codes_sd) == 0 and np.mean(codes_sd == codes) > 0.95
    assert st.rounds and st.accepted + st.rounds >= len(cond) - 1 and st.drafted >= st.accepted
    ssd = DeviceRoundSampler(tts.lm, 1e-4, 3, "ssd", bias=0.3)  # the biased rule is not greedy
    assert _not_greedy(tts.lm, cond, ssd.sample(cond, 1)[0]) > 0


def test_pcg_rounds_emit_a_group_of_the_targets_choice_and_a_residual_that_ignores_it_does_not(tts, cond,
                                                                                               monkeypatch):
    """At temperature → 0, Q_c is uniform over the groups holding the target's argmax t*: each emitted code must
    share a group with t* (the Proposition), t* taken from the target's own pass over the emitted prefix. Rounds
    that reject every draft and emit a residual token drawn without the target do not."""
    import torch

    from engine.synthesis.device_sampling import DeviceRoundSampler

    G = tts.groups
    member = G._uniq  # (M, V)

    def violations(codes):
        x = torch.from_numpy(np.concatenate([[tts.lm.bos], codes[:-1]]).astype(np.int64))[None]
        with torch.no_grad():
            t_star = tts.lm(x, torch.from_numpy(cond)[None]).argmax(-1)[0].numpy()
        return int(sum(not (member[:, t] & member[:, z]).any() for t, z in zip(t_star, codes)))

    s = DeviceRoundSampler(tts.lm, 1e-4, 3, "pcg", groups=G)
    codes, st = s.sample(cond, 0)
    assert len(codes) == len(cond) and st.rounds and violations(codes) == 0
    g = torch.Generator().manual_seed(0)
    monkeypatch.setattr(DeviceRoundSampler, "_decide", lambda self, X, P, Q, *u: (
        torch.zeros(len(X)), torch.randint(0, self.V, (len(X),), generator=g)))
    assert violations(s.sample(cond, 0)[0]) > 0


def _chi2(a: np.ndarray, b: np.ndarray, bins: int = 6) -> float:
    """Two-sample chi-square statistic over the ``bins`` commonest values of a ∪ b and one bin for the rest."""
    vals, counts = np.unique(np.concatenate([a, b]), return_counts=True)
    top = vals[np.argsort(-counts)][:bins]
    table = np.array([[np.sum(x == t) for t in top] + [np.sum(~np.isin(x, top))] for x in (a, b)], float)
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    keep = expected.min(0) > 0
    return float(((table[:, keep] - expected[:, keep]) ** 2 / expected[:, keep]).sum())


@pytest.mark.parametrize("method", ["sd", "pcg"])
def test_first_round_draws_follow_the_host_samplers_distribution(tts, cond, method):
    """A two-frame utterance is one round of one draft: its first code, over 300 seeds, has the distribution the
    host sampler's (engine.core.verify's sd_step / pcg_step) has: chi-square with 6 degrees of freedom below its
    0.1 % critical value 22.46. A sampler that rejects every draft (emits only the residual) does not pass."""
    from engine.core import verify as V
    from engine.synthesis.coarse_grained_sampling import speculative_generate
    from engine.synthesis.device_sampling import DeviceRoundSampler

    c2 = cond[:2]
    G = tts.groups
    acc = (lambda x, p, q, rng: V.pcg_step(x, p, q, G, rng)) if method == "pcg" else V.sd_step
    n = 300
    host = np.array([speculative_generate(tts.lm, c2, np.random.default_rng(i), acc, 3, 0.8)[0][0] for i in range(n)])
    dev = DeviceRoundSampler(tts.lm, 0.8, 3, method, groups=G)
    device = np.array([dev.sample(c2, i)[0][0] for i in range(n)])
    assert _chi2(host, device) < 22.46
    real = dev._decide
    dev._decide = lambda X, P, Q, *u: (dev.torch.zeros(len(X)), real(X, P, Q, *u)[1])
    residual = np.array([dev.sample(c2, i)[0][0] for i in range(n)])
    assert _chi2(host, residual) > 22.46


def test_bad_arguments_are_refused(tts):
    from engine.synthesis.device_sampling import DeviceRoundSampler

    with pytest.raises(ValueError, match="unknown"):
        DeviceRoundSampler(tts.lm, 0.8, 3, "beam")
    with pytest.raises(ValueError, match="groups"):
        DeviceRoundSampler(tts.lm, 0.8, 3, "pcg")
    with pytest.raises(ValueError, match="lookahead"):
        DeviceRoundSampler(tts.lm, 0.8, 0, "sd")


def test_the_codec_voice_samples_whole_rounds_on_the_device_when_its_lm_is_not_on_the_cpu(tts, cond, monkeypatch):
    """CodecTTS.tokens takes the device path for a module off the CPU (simulated here: the module stays on the CPU
    and the rounds run eagerly): one sampler per method and θ, kept, and codes for every frame."""
    from engine.synthesis import codec_tts as C

    monkeypatch.setattr(C, "uses_onnx", lambda lm: False)
    codes, st = tts.tokens(None, method="pcg", cond=cond)
    assert len(codes) == len(cond) == st.tokens and st.rounds and 0 <= codes.min() and codes.max() < tts.lm.bos
    s = tts.device_sampler("pcg")
    assert s.method == "pcg" and s.L == tts.lookahead and tts.device_sampler("pcg") is s
    codes_ar, st = tts.tokens(None, method="ar", cond=cond)
    assert len(codes_ar) == len(cond) and st.rounds == 0 and tts.device_sampler("ar") is not s
    with pytest.raises(ValueError, match="unknown"):
        tts.tokens(None, method="beam", cond=cond)
