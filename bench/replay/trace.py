"""Acceptance traces of a causal LM's forward passes, and their replay on a model with placeholder weights.

A speculative decoder reads its models only through :class:`engine.llm.protocol.CausalLM` (``eval``, and the
Whisper decoder's ``eval_tree``): every accept/reject decision, every greedy token and every draft length is a
function of the logits rows those calls return. :class:`RecordingLM` wraps a model with real weights and keeps, for
every call, the tokens fed (as a CRC-32) and a summary of each logits row that pins down every decision the
product's rules take on it; :class:`ScriptedLM` wraps a model of the same architecture with placeholder weights,
runs the same forward pass (same shapes, same KV cache, same host copy) and then overwrites the returned rows with
rows rebuilt from the summary. The decode loop above it is the product's own, unchanged: it takes the same
decisions, so it issues the same sequence of passes, and the replay costs what the real run would cost on the
device it runs on.

Row summary (:func:`summarize`), for a row ``l`` of shape (V,):

    * the ``top`` largest logits and every token with probability ≥ ``p_min`` (default 0.01), with their logits;
    * one filler logit for the other tokens, chosen so the row's log-sum-exp is the real one — so the stored
      tokens' probabilities are exact (to the rounding of the stored logits, 1e-4);
    * with a ``mask`` (a fixed token set a decoder suppresses, e.g. Whisper's timestamp and special tokens), a
      separate filler inside the mask, so the probabilities after suppression are exact too.

Every rule in :mod:`engine.core.verify` therefore decides the same on a rebuilt row as on the real one: argmax and
second best (greedy, greedy_tree, top-k ranks < ``top``), p(draft) > τ for τ ≥ p_min (τ_SLM, SpecASR's
normalised-logit threshold), and SSBD's biased argmax except where p(draft) < p_min and p(top) − β/(1 − β) falls
between the draft's real and rebuilt probability (both below p_min). A replayed call whose tokens differ from the
recorded ones is counted in :attr:`ScriptedLM.diverged` (its rows are still rebuilt from the recorded call when the
lengths agree): a replay is exact when no call diverged and it produced the recorded tokens.

The text calls a loop makes (tokenize, detokenize, the chat template; the Whisper tokenizer's encode/decode) go
through a :class:`Tape`: recorded with the real tokenizer, answered from the recording in the replay, so the replay
needs no tokenizer files (its tokenizer calls cost a dictionary lookup instead of the real call).

Trace format (JSON-ready lists): a stream is a list of calls, each ``{"n": tokens fed, "crc": CRC-32 of them,
"kind": "eval" | "tree", "rows": [row, ...]}`` with row = ``[filler, filler_in_mask, id₀, logit₀, id₁, logit₁, …]``
(``filler_in_mask`` = 0 without a mask).
"""

from __future__ import annotations

import time
import zlib
from typing import Sequence

import numpy as np

P_MIN = 0.01
TOP = 4
_DIGITS = 4
TAPED = ("tokenize", "detokenize", "chat_prompt")  # the text calls of an LM a tape answers


def crc(tokens: Sequence[int]) -> int:
    """CRC-32 of a token-id sequence (int32 little-endian bytes)."""
    return zlib.crc32(np.asarray(list(tokens), np.int32).tobytes())


def _lse(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return (np.log(np.exp(x - m).sum(axis=-1, keepdims=True)) + m)[..., 0]


def summarize(rows: np.ndarray, mask: np.ndarray | None = None, p_min: float = P_MIN, top: int = TOP) -> list[list]:
    """Row summaries of ``rows`` (float (n, V) logits) in the module's format.

    Args:
        rows: logits, float32/64 (n, V).
        mask: bool (V,) tokens with their own filler (None: one filler for the whole row).
        p_min: keep every token whose probability (among the tokens outside ``mask``) is ≥ p_min.
        top: keep the ``top`` largest logits of every row.

    Returns:
        one list per row: [filler, filler_in_mask, id, logit, id, logit, ...] (ids ascending).
    """
    x = np.asarray(rows, np.float64)
    n, V = x.shape
    if mask is None:
        lse_u = _lse(x)
        lse_m = None
    else:
        lse_u = _lse(x[:, ~mask])
        lse_m = _lse(x[:, mask]) if mask.any() else None
    k = min(top, V - 1)
    top_idx = np.argpartition(-x, k, axis=1)[:, :k] if k > 0 else np.zeros((n, 0), int)
    big = (x - lse_u[:, None]) >= np.log(p_min)
    out = []
    for i in range(n):
        ids = np.union1d(top_idx[i], np.flatnonzero(big[i]))
        vals = np.round(x[i, ids], _DIGITS)
        if mask is None:
            in_u = np.ones(len(ids), bool)
        else:
            in_u = ~mask[ids]
        fill_u = _filler(lse_u[i], vals[in_u], (V if mask is None else int((~mask).sum())) - int(in_u.sum()), vals)
        fill_m = 0.0
        if lse_m is not None:
            fill_m = _filler(lse_m[i], vals[~in_u], int(mask.sum()) - int((~in_u).sum()), vals)
        row = [round(float(fill_u), _DIGITS), round(float(fill_m), _DIGITS)]
        for t, v in zip(ids.tolist(), vals.tolist()):
            row += [int(t), float(v)]
        out.append(row)
    return out


def _filler(lse: float, stored: np.ndarray, n_rest: int, all_vals: np.ndarray) -> float:
    """The logit each of ``n_rest`` unstored tokens gets so that their total mass is what the real row had left."""
    if not np.isfinite(lse):
        return float(all_vals.min() - 60.0) if len(all_vals) else -60.0
    rest = 1.0 - float(np.exp(stored - lse).sum()) if len(stored) else 1.0
    floor = (float(all_vals.min()) if len(all_vals) else lse) - 60.0
    if n_rest <= 0 or rest <= 1e-12:
        return floor
    return max(lse + float(np.log(rest / n_rest)), floor)


def rebuild(out: np.ndarray, rows: list[list], mask_ids: np.ndarray | None = None) -> None:
    """Write the rows a summary describes into ``out`` (float (n, V), in place)."""
    fill = np.array([r[0] for r in rows], out.dtype)
    out[:] = fill[:, None]
    if mask_ids is not None and len(mask_ids):
        out[:, mask_ids] = np.array([r[1] for r in rows], out.dtype)[:, None]
    for i, r in enumerate(rows):
        if len(r) > 2:
            out[i, r[2::2]] = r[3::2]


class _WrappedLM:
    """A causal LM that forwards every attribute to ``lm`` (the wrapped model), except ``hide``'s, and answers the
    text calls (:data:`TAPED`) through ``tape`` when one is given. Subclasses intercept ``eval`` / ``eval_tree`` via
    :meth:`_pass`."""

    def __init__(self, lm, stream: list, hide: Sequence[str] = (), tape: "Tape | None" = None):
        object.__setattr__(self, "_lm", lm)
        object.__setattr__(self, "_stream", stream)
        object.__setattr__(self, "_hide", frozenset(hide))
        object.__setattr__(self, "_tape", tape)

    def __getattr__(self, name):
        if name in self._hide:
            raise AttributeError(name)
        if self._tape is not None and name in TAPED:
            return self._tape.method("lm." + name, getattr(self._lm, name, None))
        return getattr(self._lm, name)

    def __setattr__(self, name, value):
        setattr(self._lm, name, value)

    def _pass(self, kind: str, tokens, logits: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def eval(self, tokens):
        tokens = list(tokens)
        return self._pass("eval", tokens, self._lm.eval(tokens))

    def eval_tree(self, tokens, parents):
        tokens = list(tokens)
        return self._pass("tree", tokens, self._lm.eval_tree(tokens, parents))


class RecordingLM(_WrappedLM):
    """A causal LM (the wrapped one answers) whose every ``eval`` / ``eval_tree`` is appended to ``stream``.

    Everything else is the wrapped model's (attribute access is forwarded). ``hide`` names attributes to hide, so a
    loop takes the per-pass path (e.g. ``("generate",)`` for an LM that can also decode a whole answer in one call).

    Args:
        lm: the model with real weights (:class:`engine.llm.protocol.CausalLM`).
        stream: the list calls are appended to.
        mask_ids: int token ids with their own filler (:func:`summarize`).
    """

    def __init__(self, lm, stream: list, mask_ids: Sequence[int] | None = None, hide: Sequence[str] = (),
                 tape: "Tape | None" = None):
        super().__init__(lm, stream, hide, tape)
        m = None
        if mask_ids is not None:
            m = np.zeros(int(lm.n_vocab), bool)
            m[np.asarray(list(mask_ids), int)] = True
        object.__setattr__(self, "_mask", m)

    def _pass(self, kind: str, tokens, logits: np.ndarray) -> np.ndarray:
        self._stream.append({"n": len(tokens), "crc": crc(tokens), "kind": kind,
                             "rows": summarize(logits, self._mask)})
        return logits


class ReplayDiverged(RuntimeError):
    """A replayed call has another length than the recorded one: the replay cannot go on."""


class ScriptedLM(_WrappedLM):
    """A causal LM with placeholder weights whose logits rows are rebuilt from a recorded stream.

    The wrapped model runs every pass as the product runs it; then its rows are overwritten (:func:`rebuild`). Time
    spent rebuilding rows is not the product's and is summed in :attr:`overhead_s`, for the caller to subtract.

    Args:
        lm: the placeholder model (same architecture, same dtype and device as the real one).
        stream: the recorded calls of this model (consumed in order).
        mask_ids: as recorded.
        hide: attributes to hide (as :class:`RecordingLM`).

    Attributes:
        calls: calls replayed; diverged: calls whose tokens differ from the recorded ones; overhead_s: seconds.

    Raises (from ``eval``/``eval_tree``):
        ReplayDiverged: more calls than recorded, or a call of another length.
    """

    def __init__(self, lm, stream: list, mask_ids: Sequence[int] | None = None, hide: Sequence[str] = (),
                 counters: dict | None = None, tape: "Tape | None" = None):
        super().__init__(lm, stream, hide, tape)
        object.__setattr__(self, "_mask_ids", None if mask_ids is None else np.asarray(list(mask_ids), np.int64))
        object.__setattr__(self, "_c", counters if counters is not None else
                           new_counters())

    @property
    def counters(self) -> dict:
        return self._c

    def _pass(self, kind: str, tokens, logits: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        c = self._c
        if c["cursor"] >= len(self._stream):
            raise ReplayDiverged(f"call {c['cursor'] + 1} was not recorded ({len(self._stream)} were)")
        rec = self._stream[c["cursor"]]
        c["cursor"] += 1
        c["calls"] += 1
        if rec["n"] != len(tokens) or len(rec["rows"]) != len(logits):
            raise ReplayDiverged(f"call {c['cursor']}: {len(tokens)} tokens, recorded {rec['n']}")
        if rec["crc"] != crc(tokens) or rec.get("kind", "eval") != kind:
            c["diverged"] += 1
        rebuild(logits, rec["rows"], self._mask_ids)
        c["overhead_s"] += time.perf_counter() - t0
        return logits


def new_counters() -> dict:
    """Counters a family of :class:`ScriptedLM` (one per decoder instance of a role) can share."""
    return {"cursor": 0, "calls": 0, "diverged": 0, "overhead_s": 0.0}


class Tape:
    """Recorded answers of the deterministic text calls a decode loop makes (tokenize, detokenize, chat template),
    so a replay needs no tokenizer files: with ``recording`` each call runs and its answer is kept; otherwise the
    answer is read back (a call never recorded raises :class:`ReplayDiverged`).

    ``entries``: {key: answer}, JSON-ready (keys are the call's name and its JSON-encoded arguments).
    """

    def __init__(self, entries: dict | None = None, recording: bool = False):
        self.entries = entries if entries is not None else {}
        self.recording = recording

    def call(self, name: str, fn, *args, **kwargs):
        import json

        key = name + " " + json.dumps([args, kwargs] if kwargs else args, sort_keys=True, ensure_ascii=False)
        if self.recording:
            v = fn(*args, **kwargs)
            self.entries[key] = list(v) if isinstance(v, (list, tuple)) else v
            return v
        try:
            return self.entries[key]
        except KeyError:
            raise ReplayDiverged(f"{name}{args!r:.80} was not recorded") from None

    def method(self, name: str, fn):
        """``fn`` (or, replaying, no function at all) answered through the tape under ``name``."""
        def taped(*args, **kwargs):
            return self.call(name, fn, *[list(a) if isinstance(a, (tuple, range)) else a for a in args], **kwargs)
        return taped


class TapedTokenizer:
    """A tokenizer whose ``encode`` / ``decode`` go through a :class:`Tape` (``tok`` = the real one when recording,
    None when replaying). Other attributes are read from ``fixed`` ({name: value}, e.g. special-token ids)."""

    def __init__(self, tok, tape: Tape, prefix: str, fixed: dict | None = None):
        self._tok, self._fixed = tok, dict(fixed or {})
        self.encode = tape.method(prefix + ".encode", None if tok is None else lambda text: tok.encode(text))
        self.decode = tape.method(prefix + ".decode", None if tok is None else lambda ids: tok.decode(ids))

    def __getattr__(self, name):
        if name in self._fixed:
            return self._fixed[name]
        if self._tok is None:
            raise AttributeError(name)
        return getattr(self._tok, name)
