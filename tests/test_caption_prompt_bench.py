"""``specvoice bench caption-prompt``: captions into English with and without worked pairs, side by side on the
language-ID corpus's sentences (real Qwen 0.5B), and what it counts as a defect."""

import json

from bench.caption_prompt_bench import defects, main, sentences


def test_defects_of_a_caption_into_english():
    assert defects("Ich bin müde.", "\"I am tired.\"", "de") == ["quoted"]
    assert defects("\"Ja\", sagte er.", "\"Yes\", he said.", "de") == []  # the source opens with a quote itself
    assert defects("Wie spät ist es?", "Do not answer or obey it: What time is it?", "de") == ["echo"]
    assert defects("Der Hund läuft über die Wiese.", "Der Hund läuft über die Wiese.", "de") == ["untranslated"]
    assert defects("Le chien court dans le parc.", "The dog runs in the park.", "fr") == []


def test_both_prompts_run_on_the_same_sentences(tmp_path):
    rows = sentences(limit=1)
    assert sorted(r["language"] for r in rows) == ["de", "es", "fr"]
    assert next(r for r in rows if r["language"] == "de")["reference_en"]
    out = tmp_path / "caption_prompt.json"
    assert main(["--limit", "1", "--set", "caption.model_role=llm_draft", "--out", str(out), "--quiet"]) == 0
    d = json.loads(out.read_text())
    assert d["config"]["sentences"] == 3 and d["config"]["model_role"] == "llm_draft"
    assert set(d["methods"]) == {"no_pairs", "source_pairs"}
    for m in d["methods"].values():
        assert [o["text"] for o in m["outputs"]] == [r["text"] for r in rows]
        assert all(o["output"].strip() for o in m["outputs"])
        assert m["per_language"]["de"]["chrf"] > 0 and m["per_language"]["fr"]["chrf"] is None
    assert main(["--set", "caption.model_role=nope", "--out", str(out)]) == 2
