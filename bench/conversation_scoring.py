"""How the conversation benchmark (:mod:`bench.conversation_bench`) scores a run: the text WER compares (fillers
removed from both sides, Whisper's normaliser), WER and order-free missed words, the multilingual file's parts by
spoken language, each method's pooled summary, language-ID accuracy per utterance, and the issue's acceptance figures
next to the measured values (:func:`done_when`)."""

from __future__ import annotations

import re
from collections import Counter

from bench.stats import rnd as _r


# --------------------------------------------------------------------------------------------- normalisation and WER
# non-lexical fillers and backchannels, as Whisper and people spell them; hyphenated forms first
FILLERS = ("mm-hmm", "mm-hm", "mhm-hmm", "uh-huh", "uh-uh", "um-hmm", "uh", "uhh", "um", "umm", "uhm", "uhmm", "er",
           "erm", "err", "ah", "ahh", "eh", "hm", "hmm", "hmmm", "mm", "mmm", "mhm", "mmhmm")
_FILLER_RE = re.compile(r"(?<![\w'-])(?:" + "|".join(re.escape(f) for f in sorted(FILLERS, key=len, reverse=True))
                        + r")(?![\w'-])", re.IGNORECASE)
# filler words left after the normaliser split a hyphenated form or a hum spelled out ("M-M-M" → "m m m")
_FILLER_WORDS = frozenset([w for f in FILLERS for w in f.split("-")] + ["m"])
SPELLINGS = {"ok": "okay"}


class Normaliser:
    """:meth:`__call__` = :func:`normalise` with the normalisers built once."""

    def __init__(self) -> None:
        from transformers.models.whisper.english_normalizer import BasicTextNormalizer, EnglishTextNormalizer

        self.english = EnglishTextNormalizer({})
        self.basic = BasicTextNormalizer()

    def __call__(self, text: str | None, english: bool = True) -> str:
        s = _FILLER_RE.sub(" ", (text or "").replace("’", "'"))
        s = self.english(s) if english else self.basic(s)
        words = [SPELLINGS.get(w, w) for w in s.split()]
        return " ".join(w for w in words if w not in _FILLER_WORDS)


_NORM: Normaliser | None = None


def normalise(text: str | None, english: bool = True) -> str:
    """The text WER compares: fillers removed, then Whisper's normaliser, then spellings unified.

    1. Non-lexical fillers and backchannels (:data:`FILLERS`: uh, um, er, erm, ah, eh, hm, hmm, mm, mhm, mm-hmm,
       uh-huh, …; any case, with their punctuation) are removed — the reference says them, a transcript may or may
       not, and neither is an error.
    2. Whisper's ``EnglishTextNormalizer`` (``english``; else ``BasicTextNormalizer``, for other languages):
       lowercase, punctuation and hyphens to spaces, numbers and British spellings standardised, contractions
       expanded; then "ok" → "okay", and filler words left after splitting (the "mm" of "mm hmm") are dropped.
    Lexical backchannels ("yeah", "okay") and both halves of a restart ("we could— we should") stay.

    Args:
        text: any transcript or reference (None counts as "").
        english: True for English text.
    Returns:
        Space-separated words ("" when nothing is left).
    """
    global _NORM
    if _NORM is None:
        _NORM = Normaliser()
    return _NORM(text, english)


class ConversationWER:
    """jiwer WER over :func:`normalise`d texts; None when the normalised reference is empty. Same interface as
    :class:`bench.asr_stream_bench.WER` (``wer``, ``detail``, ``pairs``), so its metrics functions take it."""

    def __init__(self, english: bool = True):
        import jiwer

        self.jiwer = jiwer
        self.english = english

    def norm(self, text: str | None) -> str:
        return normalise(text, self.english)

    def pairs(self, refs: list[str], hyps: list[str]) -> tuple[list[str], list[str]]:
        R, H = [], []
        for r, h in zip(refs, hyps):
            nr = self.norm(r)
            if nr:
                R.append(nr)
                H.append(self.norm(h))
        return R, H

    def wer(self, refs: list[str] | str | None, hyps: list[str] | str | None) -> float | None:
        if refs is None:
            return None
        if isinstance(refs, str):
            refs, hyps = [refs], [hyps or ""]
        R, H = self.pairs(refs, hyps)
        return _r(self.jiwer.wer(R, H), 4) if R else None

    def detail(self, ref: str | None, hyp: str | None) -> dict | None:
        R, H = self.pairs([ref or ""], [hyp or ""])
        if not R:
            return None
        o = self.jiwer.process_words(R, H)
        return {"wer": _r(o.wer, 4), "sub": o.substitutions, "del": o.deletions, "ins": o.insertions,
                "ref_words": o.hits + o.substitutions + o.deletions}


def words_missed(ref_words: list[str], hyp: str) -> dict:
    """Order-free count of reference words a transcript lacks (for references without an order, such as the
    meeting's words per speaker): Σ_w max(0, n_ref(w) − n_hyp(w)) over normalised words, and its share of the
    reference words; ``extra``: the words it has more often than the reference (Σ_w max(0, n_hyp(w) − n_ref(w)),
    repeated or made-up words among them) and ``error``: (missed + extra) ÷ reference words, the order-free
    counterpart of WER against the human words (a substitution counts as one missed and one extra word)."""
    r = Counter(w for t in ref_words for w in normalise(t).split())
    h = Counter(normalise(hyp).split())
    missed = sum(max(0, n - h[w]) for w, n in r.items())
    extra = sum(max(0, n - r[w]) for w, n in h.items())
    total = sum(r.values())
    return {"missed": missed, "ref_words": total, "share": _r(missed / total, 4) if total else None,
            "extra": extra, "error": _r((missed + extra) / total, 4) if total else None}


# ----------------------------------------------------------------------------------------- repeated n-grams
REPEAT_MAX_N = 4  # n-grams of 1 to 4 words


def repeated_ngrams(text: str | None, max_n: int = REPEAT_MAX_N, english: bool = True) -> Counter:
    """The n-grams (n = 1..``max_n`` words of the :func:`normalise`d text) said twice back to back, and how often:
    {n-gram: times}; "i will i will tell you" has "i will" once. A loop repeats its n-grams many times."""
    w = normalise(text, english).split()
    c: Counter = Counter()
    for n in range(1, max_n + 1):
        for i in range(len(w) - 2 * n + 1):
            if w[i:i + n] == w[i + n:i + 2 * n]:
                c[" ".join(w[i:i + n])] += 1
    return c


def repeats(text: str | None, others: dict[str, str | None], english: bool = True) -> dict:
    """Back-to-back repeated n-grams of ``text`` (:func:`repeated_ngrams`): ``count`` (all of them), ``ngrams``
    ({n-gram: times}) and, for ``others`` ({name: transcript}, e.g. the offline transcripts), ``beyond_<name>``:
    the repeats ``text`` has more often than that transcript (Σ_g max(0, n_text(g) − n_other(g))) and
    ``beyond_offline``: more often than every one of ``others`` (the repeats no offline transcript has)."""
    mine = repeated_ngrams(text, english=english)
    theirs = {k: repeated_ngrams(t, english=english) for k, t in others.items()}
    out = {"count": sum(mine.values()), "ngrams": dict(mine.most_common())}
    for k, c in theirs.items():
        out[f"beyond_{k}"] = sum(max(0, n - c[g]) for g, n in mine.items())
    if theirs:
        beyond = {g: n - max(c[g] for c in theirs.values()) for g, n in mine.items()}
        beyond = {g: n for g, n in beyond.items() if n > 0}
        out["beyond_offline"] = sum(beyond.values())
        out["beyond_offline_ngrams"] = beyond
    return out


def file_repeats(offline: dict, stream: dict | None, english: bool = True) -> dict:
    """Per file: the back-to-back repeated n-grams (n = 1..4, :func:`repeats`) of the offline transcripts (each
    against the other) and of the stream's final and revised text (each against both offline transcripts:
    ``beyond_offline`` counts the repeats neither offline transcript has)."""
    off = {"greedy": offline.get("greedy") or "", "beam5": offline.get("beam5") or ""}
    out = {f"offline_{k}": repeats(t, {j: u for j, u in off.items() if j != k}, english) for k, t in off.items()}
    if stream is not None:
        out["final"] = repeats(stream.get("text"), off, english)
        if "text_revised" in stream:
            out["revised"] = repeats(stream["text_revised"], off, english)
    return out


# ------------------------------------------------------------------------------------------------- multilingual
def span_language(spans: list, t0: float, t1: float) -> str | None:
    """The language of the span ([start, end, language], seconds) holding the midpoint of [t0, t1]."""
    mid = (t0 + t1) / 2
    for s, e, lang in spans:
        if s <= mid < e:
            return lang
    return None


def part_text(utterances: list[dict], spans: list, lang: str, key: str = "text") -> str:
    """Texts (``key``: "text", or "text_revised" for the second pass's) of ``utterances`` ({"t_start", "t_end",
    "text", ...}) whose midpoint lies in a span of ``lang``."""
    return " ".join(u.get(key, u["text"]) for u in utterances
                    if u.get(key, u["text"]) and span_language(spans, u["t_start"], u["t_end"]) == lang)


def multilingual_metrics(offline: dict, spans: list, stream: dict | None) -> dict:
    """Per spoken language and for the whole file: WER of offline greedy and of the stream against offline beam 5
    (:func:`bench.conversation_bench.offline_spans`), Whisper's basic normaliser (fillers removed) for every
    language; the stream's detected language per utterance against the spoken one (``right`` None where the event
    carries no language)."""
    W = ConversationWER(english=False)
    parts = {}
    for lang in list(offline["parts"]) + ["all"]:
        src = offline if lang == "all" else offline["parts"][lang]
        p = {"offline_greedy_wer_vs_beam5": W.wer(src["beam5"], src["greedy"])}
        if stream:
            st = stream["text"] if lang == "all" else part_text(stream["utterance_detail"], spans, lang)
            p["stream_wer_vs_beam5"] = W.wer(src["beam5"], st)
            p["stream_text"] = st
            if p["stream_wer_vs_beam5"] is not None and p["offline_greedy_wer_vs_beam5"] is not None:
                p["wer_delta_vs_offline_greedy"] = _r(p["stream_wer_vs_beam5"] - p["offline_greedy_wer_vs_beam5"], 4)
            if any("text_revised" in u for u in stream["utterance_detail"]):  # after the second pass
                sr = stream.get("text_revised", stream["text"]) if lang == "all" else \
                    part_text(stream["utterance_detail"], spans, lang, "text_revised")
                p["stream_wer_vs_beam5_revised"] = W.wer(src["beam5"], sr)
                p["stream_text_revised"] = sr
                if p["stream_wer_vs_beam5_revised"] is not None and p["offline_greedy_wer_vs_beam5"] is not None:
                    p["revised_wer_delta_vs_offline_greedy"] = _r(
                        p["stream_wer_vs_beam5_revised"] - p["offline_greedy_wer_vs_beam5"], 4)
        parts[lang] = p
    out = {"parts": parts}
    if stream:
        utts = []
        for u in stream["utterance_detail"]:
            want = span_language(spans, u["t_start"], u["t_end"])
            utts.append({"t_start": u["t_start"], "t_end": u["t_end"], "spoken": want, "detected": u["language"],
                         "right": (u["language"] == want) if u["language"] is not None else None,
                         "text": u["text"]})
        judged = [u for u in utts if u["right"] is not None and u["text"]]
        out["utterances"] = utts
        out["language_accuracy"] = _r(sum(u["right"] for u in judged) / len(judged), 4) if judged else None
        out["utterances_judged"] = len(judged)
    return out


# ------------------------------------------------------------------------------------------------------ summaries
def summarize_group(name: str, rows: list[dict], W: ConversationWER) -> dict:
    """:func:`bench.asr_stream_bench.summarize` of ``rows`` for method ``name`` (+ pooled revised WERs)."""
    from bench.asr_stream_bench import summarize

    s = summarize(name, rows, W)
    ok = [(f, f["methods"][name]) for f in rows if "error" not in f["methods"].get(name, {"error": 1})]
    if any("text_revised" in m for _, m in ok):
        hyp = [m.get("text_revised", m["text"]) for _, m in ok]
        s["wer_vs_beam5_revised"] = W.wer([f["offline"]["beam5"] for f, _ in ok], hyp)
        s["wer_vs_ref_revised"] = W.wer([f["ref"] or "" for f, _ in ok], hyp)
    if any("repeats" in m for _, m in ok):  # back-to-back repeated n-grams, summed over the files
        rs = [(f["offline"].get("repeats", {}), m["repeats"]) for f, m in ok if "repeats" in m]
        s["repeats"] = {
            "offline_greedy": sum(o["offline_greedy"]["count"] for o, _ in rs if o),
            "offline_beam5": sum(o["offline_beam5"]["count"] for o, _ in rs if o),
            "offline_greedy_beyond_beam5": sum(o["offline_greedy"]["beyond_beam5"] for o, _ in rs if o),
            "final": sum(r["final"]["count"] for _, r in rs),
            "final_beyond_offline": sum(r["final"]["beyond_offline"] for _, r in rs),
            "revised": sum(r["revised"]["count"] for _, r in rs if "revised" in r),
            "revised_beyond_offline": sum(r["revised"]["beyond_offline"] for _, r in rs if "revised" in r),
        }
    free = [(f, m) for f, m in ok if m.get("words_missed") and f["offline"].get("words_missed")]
    if free:  # files scored order-free against human words (the meeting), pooled: (missed + extra) ÷ human words
        def pooled(get):
            ws = [get(f, m) for f, m in free]
            n = sum(w["ref_words"] for w in ws)
            return _r(sum(w["missed"] + w.get("extra", 0) for w in ws) / n, 4) if n else None
        s["words_error"] = {"final": pooled(lambda f, m: m["words_missed"]),
                            "revised": pooled(lambda f, m: m.get("words_missed_revised") or m["words_missed"]),
                            "offline_greedy": pooled(lambda f, m: f["offline"]["words_missed"]["greedy"]),
                            "offline_beam5": pooled(lambda f, m: f["offline"]["words_missed"]["beam5"])}
    return s


LANGID_MIN_UTTERANCE_S = 2.0  # the bar: language ID per utterance of at least 2 s


def accuracy(pairs: list[tuple[str | None, str]]) -> dict:
    """{"accuracy", "utterances"} of (detected, spoken) pairs; an utterance without a detected language is wrong."""
    return {"accuracy": _r(sum(d == t for d, t in pairs) / len(pairs), 4) if pairs else None, "utterances": len(pairs)}


def langid_utterances(detail: list[dict], spoken) -> list[dict]:
    """Each utterance of a stream with its detected and spoken language (``spoken(utterance) -> code``), its length
    (VAD start to end, seconds) and whether its final text is empty."""
    return [{"index": u["index"], "t_start": u["t_start"], "t_end": u["t_end"],
             "seconds": _r(u["t_end"] - u["t_start"], 2), "language": u["language"], "spoken": spoken(u),
             "empty_text": not u["text"]} for u in detail]


def langid_summary(rows: list[dict], name: str) -> dict:
    """Per-utterance language-ID accuracy of the language-ID corpus, each file streamed alone: ``utterance_accuracy``
    over the utterances with a final text (as first reported), ``all_utterances`` over every utterance the VAD
    found (an empty final text keeps the language it was decoded in) and ``utterances_2s`` over those of at least
    :data:`LANGID_MIN_UTTERANCE_S` (the issue's bar); per language too."""
    per_lang: dict[str, list] = {}
    utt_right = utt_n = 0
    every: list[tuple[str | None, str]] = []
    long: list[tuple[str | None, str]] = []
    for r in rows:
        m = r["methods"].get(name, {})
        if "error" in m:
            continue
        detail = m.get("utterance_detail", [])
        langs = [u["language"] for u in detail if u["text"]]
        right = [lang == r["language"] for lang in langs if lang is not None]
        utt_right += sum(right)
        utt_n += len(right)
        per_lang.setdefault(r["language"], []).append(right)
        every += [(u["language"], r["language"]) for u in detail]
        long += [(u["language"], r["language"]) for u in detail if u["t_end"] - u["t_start"] >= LANGID_MIN_UTTERANCE_S]
    return {
        "utterance_accuracy": _r(utt_right / utt_n, 4) if utt_n else None, "utterances": utt_n,
        "all_utterances": accuracy(every), "utterances_2s": accuracy(long),
        "per_language": {k: {"utterance_accuracy": _r(sum(map(sum, v)) / max(1, sum(map(len, v))), 4),
                             "utterances": sum(map(len, v)), "files": len(v),
                             "utterances_2s": accuracy([x for x in long if x[1] == k])}
                         for k, v in per_lang.items()},
    }


def spoken_at(spans: list[dict], t: float) -> str | None:
    """The language of the clip of ``spans`` that holds time ``t`` (seconds)."""
    for s in spans:
        if s["start"] <= t < s["end"]:
            return s["language"]
    return None


def done_when(report: dict) -> dict:
    """The issue's acceptance figures next to the measured values (True/False where measurable, else None)."""
    out = {}
    conv = report.get("conversation", {}).get("per_method", {})
    for m, s in conv.items():
        d = {"wer_vs_beam5_delta": s.get("wer_delta_vs_offline_greedy"),
             "wer_vs_ref_delta": s.get("wer_delta_vs_offline_greedy_ref"),
             "final_latency_p90_s": s["final_latency_s"]["p90"], "compute_ratio": s["compute_ratio"]}
        d["ok"] = (None if None in d.values() else
                   d["wer_vs_beam5_delta"] <= 0.02 and d["wer_vs_ref_delta"] <= 0.02
                   and d["final_latency_p90_s"] <= 1.0 and d["compute_ratio"] <= 0.5)
        if s.get("wer_vs_beam5_revised") is not None:  # after the second pass: within 0.01 of offline greedy
            rb = _r(s["wer_vs_beam5_revised"] - s["offline_greedy_wer_vs_beam5"], 4)
            rr = None
            if s.get("wer_vs_ref_revised") is not None and s.get("offline_greedy_wer_vs_ref") is not None:
                rr = _r(s["wer_vs_ref_revised"] - s["offline_greedy_wer_vs_ref"], 4)
            d.update(revised_wer_vs_beam5_delta=rb, revised_wer_vs_ref_delta=rr,
                     revised_ok=None if rr is None else rb <= 0.01 and rr <= 0.01)
        if s.get("live_compute_ratio") is not None:  # the updates and finals; the second pass's part apart
            d.update(live_compute_ratio=s["live_compute_ratio"],
                     second_pass_compute_ratio=s["second_pass_compute_ratio"])
        out[f"conversation/{m}"] = d
    real = report.get("real", {})
    for m in real.get("per_method", {}):
        # each real recording: the revised text within 0.01 of offline greedy against the human transcript (WER where
        # it has an order, else the order-free error against the human words), and no n-gram repeated back to back
        # that neither offline transcript repeats
        files = {}
        for f in real.get("per_file", []):
            x = f["methods"].get(m, {})
            rv = x.get("revised_vs_offline_greedy")
            if rv is None:
                continue
            delta = rv["delta_wer_vs_ref"] if rv["delta_wer_vs_ref"] is not None else rv["delta_words_error"]
            files[f["file"]] = {"revised_vs_human_delta": delta,
                                "how": "WER" if rv["delta_wer_vs_ref"] is not None else "order-free error",
                                "repeats_beyond_offline": x["repeats"]["revised"]["beyond_offline"]}
        if files:
            d = {"per_file": files, "repeats_beyond_offline": sum(v["repeats_beyond_offline"] for v in files.values())}
            d["revised_ok"] = all(v["revised_vs_human_delta"] is not None and v["revised_vs_human_delta"] <= 0.01
                                  for v in files.values()) and d["repeats_beyond_offline"] == 0
            out[f"real/{m}"] = d
    ml = report.get("multilingual", {})
    for m, r in ml.get("per_method", {}).items():
        de = r.get("parts", {}).get("de", {})
        d = {"language_accuracy": r.get("language_accuracy"), "de_wer_delta": de.get("wer_delta_vs_offline_greedy")}
        d["ok"] = None if None in d.values() else d["language_accuracy"] == 1.0 and d["de_wer_delta"] <= 0.03
        if de.get("revised_wer_delta_vs_offline_greedy") is not None:  # after the second pass
            d["de_revised_wer_delta"] = de["revised_wer_delta_vs_offline_greedy"]
            d["revised_ok"] = d["language_accuracy"] == 1.0 and d["de_revised_wer_delta"] <= 0.03
        out[f"multilingual/{m}"] = d
    li = report.get("langid", {})
    if li.get("supported"):
        acc = li.get("summary", {}).get("utterances_2s", {}).get("accuracy")
        conv = li.get("conversation", {}).get("summary", {}).get("utterances_2s", {}).get("accuracy")
        out["langid"] = {"utterance_2s_accuracy": acc, "ok": None if acc is None else acc >= 0.95,
                         "conversation_utterance_2s_accuracy": conv,
                         "conversation_ok": None if conv is None else conv >= 0.95}
        for name in ("languages_named", "last_window"):
            v = li.get(name)
            if v:
                out["langid"][f"{name}_utterance_2s_accuracy"] = v["summary"]["utterances_2s"]["accuracy"]
                out["langid"][f"{name}_conversation_utterance_2s_accuracy"] = (
                    v.get("conversation", {}).get("summary", {}).get("utterances_2s", {}).get("accuracy"))
    return out
