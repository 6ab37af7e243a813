"""The streaming ASR benchmark: its metrics on hand-made strings, and one fast run on jfk.flac."""

import inspect
import json

import pytest

from audio.io import load_audio
from audio.sources import FileSource
from bench.asr_stream_bench import (compression_ratio, erasure, erasure_counts, is_loop, normalized_erasure,
                                    repeated_ngram)


def test_loop_detector_by_hand():
    assert repeated_ngram("a b c d".split()) is None
    assert repeated_ngram("yes yes yes".split()) is None  # three words are speech ("no, no, no")
    assert repeated_ngram("the words the n n n2".split()) is None
    assert repeated_ngram("yeah yeah yeah yeah yeah yeah".split()) == (1, 0)  # six: the guard's loop
    assert repeated_ngram("no no".split()) is None  # twice is speech
    assert repeated_ngram("so i said thank you thank you thank you".split()) == (2, 3)
    six = "we will go to the park " * 3
    assert repeated_ngram(six.split()) == (6, 0)
    assert repeated_ngram(("one two three four five six seven " * 3).split()) is None  # 7-grams are not counted
    assert is_loop("Thank you. Thank you. Thank you.")  # punctuation and case do not hide a repeat
    assert not is_loop("No, no, no.")
    assert not is_loop("And so my fellow Americans, ask not what your country can do for you.")
    loop = "the cat sat on the mat and then " * 8  # an 8-word period: caught by the compression ratio only
    assert repeated_ngram(loop.split()) is None and compression_ratio(loop) > 2.4 and is_loop(loop)
    short = "a" * 28  # 28 characters: compression is not tested below 30
    assert compression_ratio(short) > 2.4 and not is_loop(short)
    assert not is_loop("")


def test_normalised_erasure_by_hand():
    shown = ["I think", "I think we", "I thing we should", "I think we should move it", "I think we should move it."]
    # E: 0; "I think we" → "I thing ...": LCP 1 of 3 → 2; "thing we should" erased → 3; "it" → "it." → 1
    assert [erasure(a.split(), b.split()) for a, b in zip(shown, shown[1:])] == [0, 2, 3, 1]
    assert erasure_counts(shown) == (6, 6)
    assert normalized_erasure(shown) == pytest.approx(1.0)
    assert normalized_erasure(["I think", "I think we should", "I think we should go."]) == 0.0  # appends only
    assert normalized_erasure(["hello", "hello world", "hello world"]) == 0.0
    assert normalized_erasure(["hello"]) == 0.0
    assert normalized_erasure(["uh huh", ""]) == 2.0  # everything erased, nothing final: the erasures themselves
    assert normalized_erasure([]) == 0.0


def test_fast_run_on_jfk(tmp_path, jfk_path):
    from bench.asr_stream_bench import main

    out = tmp_path / "asr_stream.json"
    assert main(["--fast", "--quiet", "--methods", "ar", str(jfk_path), "--out", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["config"]["realtime"] is False and rep["config"]["machine"]["cpu_count"] >= 1
    s = rep["per_method"]["ar"]
    for key in ("compute_ratio", "encoder_s", "decoder_s", "final_latency_s", "first_partial_s", "ne",
                "wer_vs_beam5", "wer_vs_greedy", "wer_delta_vs_offline_greedy", "wer_vs_ref", "loops",
                "nonspeech_words"):
        assert key in s, key
    assert 0 < s["compute_ratio"] < 5
    assert s["encoder_s"] > 0 and s["decoder_s"] > 0
    assert s["wer_vs_beam5"] < 0.2 and s["wer_vs_ref"] < 0.2
    assert s["ne"] >= 0 and s["loops"] == 0
    f = rep["per_file"][0]
    assert f["file"].endswith("jfk.flac") and f["ref"] and "ask not what your country" in f["offline"]["beam5"]
    m = f["methods"]["ar"]
    assert m["words_emitted"] >= 15 and m["updates"] >= 1 and m["backend_totals"]["decodes"] >= 1

    # The stream's clock: the file plus the silence FileSource appends, to within a block; every utterance (VAD start
    # to end of speech) lies inside it.
    block_s, min_silence_s = rep["config"]["audio"]["block_s"], rep["config"]["vad"]["min_silence_s"]
    trailing_s = inspect.signature(FileSource).parameters["trailing_silence_s"].default
    duration_s = len(load_audio(jfk_path)) / 16000
    assert m["audio_s"] == pytest.approx(duration_s + trailing_s, abs=block_s)
    detail = m["utterance_detail"]
    assert detail and all(0 <= u["t_start"] < u["t_end"] <= m["audio_s"] for u in detail)
    # Final latency = the final's wall time − the end of speech's, which is the wall time of the block in which the
    # VAD called it less the audio in between (at most min_silence_s and a block). So a final comes after its end of
    # speech and, with the file read as fast as it is decoded, no later than the file's whole run plus that audio.
    lat = [u["final_latency_s"] for u in detail]
    assert all(x is not None and 0 <= x <= m["wall_s"] + min_silence_s + block_s for x in lat)
    fl = s["final_latency_s"]
    assert fl["n"] == len(lat) and 0 <= fl["p50"] <= fl["p90"] <= fl["max"] == max(lat)


def test_the_cpu_model_is_read_for_the_results(tmp_path):
    """The benchmark's JSON names the CPU its timings come from (``model name`` in /proc/cpuinfo)."""
    from bench.asr_stream_bench import cpu_model

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n"
                    "flags\t: fpu\n")
    assert cpu_model(info) == "Intel(R) Xeon(R) Processor"
    assert cpu_model(tmp_path / "missing") == ""
