"""The streaming sentence splitter that feeds TTS (engine.answer.sentences)."""

from engine.answer.sentences import SentenceSplitter


def feed(text: str, **kw) -> list[str]:
    sp = SentenceSplitter(**kw)
    out: list[str] = []
    for ch in text:  # one character at a time, as a token stream would
        out += sp.push(ch)
    return out + sp.flush()


def test_sentences_and_abbreviations():
    assert feed("Dr. Smith is 3.5 m tall. He waves! Right?") == ["Dr. Smith is 3.5 m tall.", "He waves!", "Right?"]


def test_first_piece_ends_at_a_long_enough_clause_only():
    text = "As an AI language model, I cannot travel; however, I can help. Then, more."
    assert feed(text, first_clause_words=4) == ["As an AI language model,", "I cannot travel; however, I can help.",
                                                "Then, more."]
    assert feed(text) == ["As an AI language model, I cannot travel; however, I can help.", "Then, more."]
    # a clause shorter than the minimum, numbers with thousands separators, and a sentence that ends first
    assert feed("Yes, it costs 1,000 dollars. Next, one.", first_clause_words=4) == [
        "Yes, it costs 1,000 dollars.", "Next, one."]
    assert feed("It is done. Well, that is all, thanks.", first_clause_words=2) == [
        "It is done.", "Well, that is all, thanks."]
    assert feed("Here is the plan \u2014 we start now and finish soon.", first_clause_words=4) == [
        "Here is the plan \u2014", "we start now and finish soon."]
