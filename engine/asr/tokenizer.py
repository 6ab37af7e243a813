"""Whisper's byte-level BPE tokenizer, checked and repaired on load.

Whisper's vocabulary comes from tiktoken ranks: byte tokens have ids 0–255 and the merge of rank k produces the token
with id 256 + k. A ``tokenizer.json`` whose merge list lost an entry still loads, but every word that needs the lost
merge is split differently from the tokens the model was trained on and generates. The packaged Whisper base lacks
its rank-0 merge ``Ġ t``, so " the", " to", " think" were encoded as [" ", "the"], ...: every previous-text prompt and
every draft handed to the decoder was out of distribution, and a draft whose words the model had itself generated
could not be accepted past its first " the".

:func:`load_hf_tokenizer` restores such merges (the only split of the token into two earlier vocabulary tokens, at the
rank its id gives) and :func:`repair_model_tokenizer` puts the result into a faster-whisper ``WhisperModel``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)

N_BYTES = 256
_warned: set[str] = set()


def _pair(m) -> tuple[str, str]:
    return tuple(m.split(" ", 1)) if isinstance(m, str) else (m[0], m[1])


def repair_bpe_merges(data: dict) -> list[str]:
    """Insert, in place, the merges missing from a tiktoken-ordered BPE ``tokenizer.json`` (``data``, parsed).

    A merge is missing at rank k when the token with id 256 + k is produced by no merge while the merges around it
    follow the id order; it is restored when that token has exactly one split into two vocabulary tokens with smaller
    ids. Tokenizers whose merges do not follow the id order (not tiktoken-derived) are left alone.

    Returns:
        the inserted merges as "left right" strings (empty when nothing was missing).
    """
    model = data.get("model") or {}
    merges, vocab = model.get("merges"), model.get("vocab")
    if model.get("type") != "BPE" or not merges or not isinstance(vocab, dict):
        return []
    as_str = isinstance(merges[0], str)
    pairs = [_pair(m) for m in merges]
    ids = [vocab.get(a + b) for a, b in pairs]
    # tiktoken order: merge k makes id 256 + k, up to a small shift where merges are missing
    in_order = sum(1 for k, i in enumerate(ids) if i is not None and 0 <= i - N_BYTES - k <= 8)
    if in_order < 0.9 * len(pairs):
        return []
    produced = {a + b for a, b in pairs}
    id2tok = {i: t for t, i in vocab.items()}
    out: list[tuple[str, str]] = []
    inserted: list[str] = []
    for pair, rid in zip(pairs, ids):
        while rid is not None and rid > N_BYTES + len(out):
            want = N_BYTES + len(out)
            tok = id2tok.get(want)
            if tok is None or tok in produced:
                break
            splits = [(tok[:c], tok[c:]) for c in range(1, len(tok))
                      if vocab.get(tok[:c], want) < want and vocab.get(tok[c:], want) < want]
            if len(splits) != 1:
                break
            out.append(splits[0])
            produced.add(tok)
            inserted.append(" ".join(splits[0]))
        out.append(pair)
    if inserted:
        model["merges"] = [" ".join(p) if as_str else list(p) for p in out]
    return inserted


def load_hf_tokenizer(model_dir: str | Path):
    """``tokenizers.Tokenizer`` from ``model_dir/tokenizer.json``, with missing BPE merges restored
    (:func:`repair_bpe_merges`; logged once per file and process at debug level: the packaged model always needs
    the repair, so it is nothing a user can act on). Raises FileNotFoundError when there is no tokenizer.json."""
    import tokenizers

    path = Path(model_dir) / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    fixed = repair_bpe_merges(data)
    if fixed and str(path) not in _warned:
        _warned.add(str(path))
        log.debug("%s lacks %d BPE merge(s) (%s): restored in memory", path, len(fixed), ", ".join(fixed[:3]))
    return tokenizers.Tokenizer.from_str(json.dumps(data))


def repair_model_tokenizer(fw_model, model_dir: str | Path) -> None:
    """Replace a faster-whisper ``WhisperModel``'s ``hf_tokenizer`` by :func:`load_hf_tokenizer`'s, when
    ``model_dir`` is a local directory with a tokenizer.json (a hub id is left to faster-whisper)."""
    p = Path(str(model_dir))
    if (p / "tokenizer.json").is_file():
        fw_model.hf_tokenizer = load_hf_tokenizer(p)
