"""The LLM family of the replay (bench/replay/llm.py): a trace recorded with the real 0.5B (llama.cpp) replays on
placeholder weights with every decision and every produced token the recorded ones; a tampered trace is caught.

The placeholder keeps the real vocabulary but only 2 narrow decoder layers (``layers=2``): exactness does not depend on
the size, and the test stays fast. No wall-clock assertions."""

import copy

import pytest

from bench.replay import llm

# one short spoken question: two partial transcripts, then the final one (seconds since the start)
STREAM = [["What is", 0.4], ["What is the capital of", 0.9], ["What is the capital of France?", 1.5]]


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """One torch thread for the placeholder's small passes while this module runs; the decisions replayed do not
    depend on it."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def predgen_trace(qwen_small, tmp_path_factory):
    trace = llm.record("predgen", "0.5b", lm=qwen_small, items=[{"stream": STREAM}], max_tokens=16)
    path = tmp_path_factory.mktemp("replay") / "predgen.json.gz"
    llm.save(trace, path)
    return llm.load(path)  # as committed: through gzip JSON


@pytest.fixture(scope="module")
def ssbd_trace(qwen_small):
    return llm.record("ssbd", "0.5b", lm=qwen_small, limit=1, max_tokens=20)


@pytest.fixture(scope="module")
def placeholder(predgen_trace):
    return llm._placeholder_for(predgen_trace, "cpu", layers=2)


def test_predgen_trace_holds_every_method_and_its_outputs(predgen_trace):
    assert predgen_trace["family"] == "predgen" and predgen_trace["model"] == "qwen2.5-coder-0.5b"
    assert set(predgen_trace["methods"]) == {"cascade", "cascade_prefill", "predgen"}
    for m, d in predgen_trace["methods"].items():
        (item,) = d["items"]
        assert item["calls"] == len(d["calls"]) > 0
        assert item["output"]["answer_tokens"] and item["output"]["first_sentence"], m
    assert predgen_trace["tape"]  # the text calls, so a replay needs no tokenizer


def test_predgen_replays_exactly_on_placeholder_weights(predgen_trace, placeholder):
    res = llm.replay(predgen_trace, "cpu", lm=placeholder)
    assert res["replayed"] and res["weights"] == "placeholder" and res["baseline"] == "cascade"
    assert res["code_matches_trace"]
    for m, r in res["methods"].items():
        assert r["exact"], (m, r)
        assert r["diverged"] == 0 and r["error"] is None and r["outputs_match_trace"] == 1
        assert r["calls"] == r["passes"] == len(predgen_trace["methods"][m]["calls"])
        assert r["seconds"] > 0 and r["overhead_s"] >= 0
    assert set(res["speedups"]) == {"cascade_prefill", "predgen"}
    assert res["methods"]["predgen"]["nfetfs_mean"] <= res["methods"]["cascade"]["nfetfs_mean"]


def test_tampered_predgen_trace_is_reported_diverged(predgen_trace, placeholder):
    bad = copy.deepcopy(predgen_trace)
    calls = bad["methods"]["predgen"]["calls"]
    calls[len(calls) // 2]["crc"] ^= 1  # as if the recorded run had fed other tokens there
    res = llm.replay(bad, "cpu", lm=placeholder)
    assert res["methods"]["predgen"]["diverged"] >= 1 and not res["methods"]["predgen"]["exact"]
    assert res["methods"]["cascade"]["exact"]  # the other methods' streams are untouched


def test_ssbd_replays_exactly_and_a_changed_row_is_caught(ssbd_trace, placeholder):
    assert set(ssbd_trace["methods"]) == {"ar", "ssbd"} and len(ssbd_trace["items"]) == 1
    ar = [it["output"]["final"] for it in ssbd_trace["methods"]["ar"]["items"]]
    assert all(ar)
    res = llm.replay(ssbd_trace, "cpu", lm=placeholder)
    for m, r in res["methods"].items():
        assert r["exact"], (m, r)
        assert r["outputs_match_trace"] == 1 and r["calls"] == len(ssbd_trace["methods"][m]["calls"])
    assert res["methods"]["ssbd"]["accepted_tokens"] > 0
    assert res["methods"]["ssbd"]["passes"] < res["methods"]["ar"]["passes"]
    # a decode row whose best token is pushed to the bottom: the AR loop takes another token
    bad = copy.deepcopy(ssbd_trace)
    calls = bad["methods"]["ar"]["calls"]
    k = next(i for i, c in enumerate(calls) if c["n"] == 1 and i > 3)
    row = calls[k]["rows"][0]
    vals = row[3::2]
    row[3 + 2 * vals.index(max(vals))] = min(vals + [row[0]]) - 30.0
    r = llm.replay(bad, "cpu", lm=placeholder)["methods"]["ar"]
    assert not r["exact"]
    assert r["diverged"] > 0 or r["error"] or r["outputs_match_trace"] < 1
