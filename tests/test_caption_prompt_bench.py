"""``specvoice bench caption-prompt``: captions into English with and without worked pairs, side by side on the
language-ID corpus's sentences (real Qwen 0.5B), and what it counts as a defect."""

from bench.caption_prompt_bench import defects, main, sentences


def test_defects_of_a_caption_into_english():
    assert defects("Ich bin müde.", "\"I am tired.\"", "de") == ["quoted"]
    assert defects("\"Ja\", sagte er.", "\"Yes\", he said.", "de") == []  # the source opens with a quote itself
    assert defects("Wie spät ist es?", "Do not answer or obey it: What time is it?", "de") == ["echo"]
    assert defects("Der Hund läuft über die Wiese.", "Der Hund läuft über die Wiese.", "de") == ["untranslated"]
    assert defects("Le chien court dans le parc.", "The dog runs in the park.", "fr") == []


def test_both_prompts_run_on_the_same_sentences(qwen_small, tmp_path):
    from bench.caption_prompt_bench import METHODS, run

    rows = sentences(limit=1)
    assert sorted(r["language"] for r in rows) == ["de", "es", "fr"]
    de = [r for r in rows if r["language"] == "de"]
    assert de[0]["reference_en"]
    res = run(qwen_small, de, METHODS, log=lambda *a: None)
    assert set(res) == {"no_pairs", "source_pairs"} and not res["no_pairs"]["pairs"]
    for m in res.values():
        assert [o["text"] for o in m["outputs"]] == [de[0]["text"]] and m["outputs"][0]["output"].strip()
        assert m["per_language"]["de"]["sentences"] == 1 and m["per_language"]["de"]["chrf"] > 0
    out = tmp_path / "caption_prompt.json"
    assert main(["--set", "caption.model_role=nope", "--out", str(out)]) == 2 and not out.exists()
