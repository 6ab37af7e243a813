"""bench/gpu_codec_tts.py, the codec-TTS sampler benchmark split around a GPU machine without the voice's packages:
``prepare`` writes the voice's prior, ``run`` samples from it alone (here on the CPU) and ``score`` renders and
transcribes what was sampled. One sentence per split, one PCG setting: the steps fit together and count right."""

import json

import numpy as np


def test_prepare_run_score_on_the_cpu(runtime, tmp_path):
    from bench import gpu_codec_tts as G

    d = tmp_path / "gct"
    assert G.main(["prepare", "--n", "1", "--val", "1", "--out", str(d)]) == 0
    texts = json.loads((d / "texts.json").read_text())
    assert len(texts["test"]) == len(texts["val"]) == 1 and texts["test"] != texts["val"]
    z = np.load(d / "inputs.npz")
    frames = int(z["test_0_dur"].sum())
    assert z["test_0_m"].shape == z["test_0_logs"].shape and z["test_0_m"].shape[1] == 192
    assert G.main(["run", "--inputs", str(d), "--device", "cpu", "--thetas", "0.5", "--lookaheads", "2",
                   "--cost-reps", "10"]) == 0
    run = json.loads((d / "run.json").read_text())
    codes = np.load(d / "codes.npz")
    for m in ("ar", "sd", "ssd", "pcg0.5L2"):
        r = run["splits"]["test"][m]
        assert r["tokens"] == frames == len(codes[f"test_0_{m}"])
        assert (r["rounds"] == 0) == (m == "ar") and r["drafted"] >= r["accepted"]
    assert run["splits"]["test"]["ar"]["target_passes"] == frames
    assert set(run["verification_cost"]["target_ratio"]) == {"1", "2", "4", "8"}
    out = tmp_path / "tts_cpu.json"
    assert G.main(["score", "--inputs", str(d), "--out", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["selection"]["chosen"] == "pcg0.5L2" and 0 <= rep["results"]["ar"]["cer"] <= 100


def test_run_with_device_rounds_on_the_cpu(runtime, tmp_path):
    """``run --sampler graphs`` (DeviceRoundSampler; eager here, graphs on CUDA): every method samples every frame,
    with the round-cost curve per speculative method; ``--max-seconds`` spent, no further test sentence is taken."""
    from bench import gpu_codec_tts as G

    d = tmp_path / "gct"
    assert G.main(["prepare", "--n", "2", "--val", "1", "--out", str(d)]) == 0
    frames = int(np.load(d / "inputs.npz")["test_0_dur"].sum())
    assert G.main(["run", "--inputs", str(d), "--device", "cpu", "--sampler", "graphs", "--thetas", "0.5",
                   "--lookaheads", "2,3", "--pcg-only", "0.5L2", "--cost-reps", "10", "--max-seconds", "1e-9"]) == 0
    run = json.loads((d / "run.json").read_text())
    assert run["sentences"] == {"val": 1, "test": 1}
    assert run["backend"] == "torch (DeviceRoundSampler)" and set(run["splits"]["test"]) == {"ar", "sd", "ssd",
                                                                                            "pcg0.5L2"}
    codes = np.load(d / "codes.npz")
    for m, r in run["splits"]["test"].items():
        assert r["tokens"] == frames == len(codes[f"test_0_{m}"]) and r["drafted"] >= r["accepted"]
    assert set(run["round_cost"]["pcg0.5L2"]["ms"]) == {"0", "1", "2"} and set(run["round_cost"]["ar"]["ms"]) == {"0"}
