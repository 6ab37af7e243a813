"""SpecASR: speculative Whisper decoding specialised for ASR (§IV of Wei et al., "SpecASR: Accelerating LLM-based
Automatic Speech Recognition via Speculative Decoding", DAC 2025, https://arxiv.org/abs/2507.18181), greedy and
lossless.

Whisper tiny.en (draft) proposes, Whisper base (target) verifies with greedy acceptance
(:func:`engine.core.verify.greedy_tree`) — every emitted token is the target's argmax, so the output equals the
target's own greedy decoding token for token (tested).

Methods (``SPEC_METHODS``; the paper's Fig. 11 / Table II rows):
  * ``sd8``, ``sd16`` — plain speculative decoding, fixed draft length 8 / 16, one sequence;
  * ``sd8x2`` — plain SD with two draft sequences (the two most probable first tokens, each continued greedily to
    8 tokens), verified together as a 2-branch tree;
  * ``adaptive`` — §IV-A adaptive single-sequence prediction: draft up to 24 tokens, truncate right after a token
    whose normalised logit (its softmax probability under the draft) is below the threshold (0.4);
  * ``recycling`` — + §IV-B draft sequence recycling: the rejected draft is kept as sequence 1; the draft
    regenerates from the verified point (sequence 2) and, as soon as a regenerated word matches sequence 1 at the
    same or an adjacent position, the branches merge and sequence 1's rest is reused without drafting it again;
  * ``tree`` — + §IV-C two-pass sparse tree: pass 1 drafts the greedy trunk (24 tokens, no truncation) and marks
    uncertain positions (normalised logit < threshold) with the draft's second-best token; pass 2 expands only
    there, each branch stopping as soon as it re-joins the trunk (recycling); the target verifies the whole tree in
    one pass with a tree attention mask and per-node position ids (``WhisperDecoderLM.eval_tree``);
  * ``ctc_draft`` — the same lossless verification with a draft that shares the target's encoder and tokenizer:
    the CTC head's transcript (engine.asr.ctc_draft), re-aligned after every correction (no draft decoder at all).

Tokenizer bridge: tiny.en (GPT-2 English vocabulary) and base (multilingual) tokenizers differ, so drafts cross
through text — the draft's context is the target's accepted text re-tokenised for tiny.en (its KV cache is
cropped to the common prefix and only the difference is evaluated), and the draft's new text is re-tokenised for
the target. Merging in recycling is therefore at word granularity.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import numpy as np

from audio.io import SAMPLE_RATE
from engine.asr.backend import ASRBackend
from engine.core import verify as V

SPEC_METHODS = {
    "sd8": dict(k=8, beams=1, adaptive=False, recycle=False, tree=False),
    "sd16": dict(k=16, beams=1, adaptive=False, recycle=False, tree=False),
    "sd8x2": dict(k=8, beams=2, adaptive=False, recycle=False, tree=False),
    "adaptive": dict(k=24, beams=1, adaptive=True, recycle=False, tree=False),
    "recycling": dict(k=24, beams=1, adaptive=True, recycle=True, tree=False),
    "tree": dict(k=24, beams=1, adaptive=False, recycle=True, tree=True),
    "ctc_draft": dict(k=24, beams=1, adaptive=False, recycle=False, tree=False, ctc=True),
}


def _nw(w: str) -> str:
    return re.sub(r"[^a-z0-9']", "", w.lower())


@dataclass
class SpecASRStats(V.SpecStats):
    """Counters of one decode (the paper's Table II quantities): :class:`engine.core.verify.SpecStats` (``drafted`` =
    draft tokens sent to verification, tree nodes; ``draft_passes`` = draft decoder steps; ``target_passes`` =
    target decoder passes) plus ``draft_s`` / ``target_s``, wall time in the draft (encoder + decoder steps) / the
    target decoder (s), and ``merges``, §IV-B recycling merges."""

    draft_s: float = 0.0
    target_s: float = 0.0
    merges: int = 0


class _Draft:
    """Draft Whisper decoder state kept in sync with the target's accepted text (the tokenizer bridge).

    ``cached``: draft tokens in the KV cache after the prompt; ``row``: draft logits after them."""

    def __init__(self, whisper, enc, prompt: list[int], stats: SpecASRStats):
        self.w = whisper
        self.lm = whisper.decoder(enc)
        self.prompt = prompt
        self.tok = whisper.fw_tokenizer
        self.cached: list[int] = []
        self.row: np.ndarray | None = None
        self.stats = stats

    def _eval(self, toks: list[int]) -> np.ndarray:
        self.stats.draft_passes += 1
        return self.lm.eval(toks)

    def sync(self, text: str) -> list[int]:
        """Make the draft context the tokenisation of ``text``: crop the KV cache to the common prefix with what
        is cached (:func:`engine.core.verify.sync_cache`), evaluate the difference in one pass. Returns the context
        tokens."""
        want = self.tok.encode(text) if text else []
        if self.row is not None and want == self.cached:
            return want
        held = self.prompt + self.cached if self.row is not None else []
        self.row = self._eval(V.sync_cache(self.lm, held, self.prompt + want))[-1]
        self.cached = list(want)
        return want

    def probs(self, first: bool) -> np.ndarray:
        return V.softmax(self.w.suppress_logits(self.row.astype(np.float64), first))

    def step(self, tok: int) -> None:
        self.row = self._eval([tok])[-1]
        self.cached.append(tok)

    def greedy(self, k: int, threshold: float | None = None, stop=None,
               mark: list | None = None) -> tuple[list[int], bool]:
        """Up to ``k`` greedy draft tokens from the cached context.

        ``threshold``: stop right after a token whose normalised logit (draft probability) is below it (§IV-A);
        with ``mark`` given, record (index, second-best token) there instead of stopping (§IV-C pass 1);
        ``stop(tokens)``: ends drafting when it returns True (§IV-B merge; it may shorten ``tokens``).
        The last proposed token is not evaluated (``sync`` does it if drafting continues from there).
        Returns (tokens, ended_with_eot)."""
        out: list[int] = []
        for i in range(k):
            p = self.probs(first=not self.cached and not out)
            order = np.argsort(p)[::-1][:2]
            tok = int(order[0])
            if tok == self.w.eot:
                return out, True
            out.append(tok)
            low = threshold is not None and p[tok] < threshold
            if mark is not None and low:
                mark.append((i, int(order[1])))
            if (mark is None and low) or i == k - 1 or (stop is not None and stop(out)):
                break
            self.step(tok)
        return out, False


class SpecASR:
    """SpecASR decoder: ``decode(audio, target_encoder_out, prompt, method)``.

    Args:
        target: TorchWhisper (base) — its decoder verifies; draft: the tiny.en model, a
            :class:`engine.asr.whisper_ssd.WhisperSSD` (int8 CTranslate2 encoder, torch decoder) or a TorchWhisper.
        threshold: normalised-logit threshold (§IV-A, default 0.4); max_draft: longest draft (24).
        ctc_head: a :class:`engine.asr.ctc_draft.CTCHead` for the ``ctc_draft`` method (optional).
    """

    def __init__(self, target, draft, threshold: float = 0.4, max_draft: int = 24, ctc_head=None):
        self.t = target
        # draft: a WhisperSSD (CTranslate2 int8 encoder + torch decoder) or a bare TorchWhisper
        if hasattr(draft, "whisper"):
            self.d = draft.whisper
            self.d_enc = lambda audio: draft.encode(audio)[1]
        else:
            self.d = draft
            self.d_enc = draft.encode
        self.threshold = threshold
        self.max_draft = max_draft
        self.ctc_head = ctc_head

    # -------------------------------------------------------------------------------------------- verification
    def _verify(self, lm, tree_tokens: list[int], parents: list[int], row0: np.ndarray, first: bool,
                st: SpecASRStats):
        """Greedy tree verification (:func:`engine.core.verify.greedy_tree`, the target's choice under Whisper's
        suppression). ``row0``: target logits after the accepted context. Returns (accepted path node indices, next
        token = target argmax after the path, row after the path's last node)."""
        t0 = time.perf_counter()
        base = lm.n_past
        rows = lm.eval_tree(tree_tokens, parents) if tree_tokens else None
        st.target_passes += 1 if tree_tokens else 0

        def pick(row: np.ndarray, depth: int) -> int:
            return int(np.argmax(self.t.suppress_logits(row.copy(), first=first and depth == 0)))

        path, tok = V.greedy_tree(row0, rows, tree_tokens, parents, pick)
        row = rows[path[-1]] if path else row0
        if tree_tokens:
            lm.keep_path(base, path)
        st.target_s += time.perf_counter() - t0
        return path, tok, row

    # ---------------------------------------------------------------------------------------------- proposals
    def _to_target(self, text: str) -> list[int]:
        return self.t.fw_tokenizer.encode(text) if text else []

    def decode(self, audio: np.ndarray, enc, prompt: list[int], method: str, draft_prompt: list[int] | None = None,
               max_new: int = 224, draft_enc: tuple | None = None) -> dict:
        """Decode one window. ``enc``: target encoder output (1, 1500, d); ``prompt``: target prompt tokens;
        ``draft_enc``: (draft encoder output, its seconds) when already computed — its time still counts as draft.
        Returns a dict: tokens, text, stage, n_forward, decode_s, draft_s, target_s, rounds, draft_steps,
        predicted, accepted, merges."""
        cfg = SPEC_METHODS[method]
        st = SpecASRStats()
        t_start = time.perf_counter()
        k = min(cfg["k"], self.max_draft) if cfg["k"] == 24 else cfg["k"]
        thr = self.threshold if (cfg["adaptive"] or cfg["tree"]) else None
        tlm = self.t.decoder(enc)
        t0 = time.perf_counter()
        row = tlm.eval(prompt)[-1]
        st.target_passes += 1
        st.target_s += time.perf_counter() - t0
        eot_t = self.t.eot
        out: list[int] = []
        pending: int | None = None  # accepted target token not yet in the target KV cache
        draft = None
        ctc_words: list[str] = []
        draft_encode_s = 0.0
        if cfg.get("ctc"):
            if self.ctc_head is None:
                raise ValueError("ctc_draft needs a CTC head")
            t0 = time.perf_counter()
            ctc_text = self.ctc_head.draft(enc, int(np.ceil(len(audio) / 320))).text
            ctc_words = ctc_text.split()
            st.draft_s += time.perf_counter() - t0
        else:
            if draft_enc is not None:  # (encoder output, seconds it took) computed once for several methods
                denc, st.draft_s = draft_enc
            else:
                t0 = time.perf_counter()
                denc = self.d_enc(audio)
                st.draft_s += time.perf_counter() - t0
            draft_encode_s = st.draft_s
            draft = _Draft(self.d, denc, draft_prompt or self.d.prompt(), st)
        seq1_words: list[str] = []  # rejected draft words kept for recycling (absolute word positions)
        done = False
        while not done and len(out) + (pending is not None) < max_new:
            acc_tokens = out + ([pending] if pending is not None else [])
            acc_text = self.t.fw_tokenizer.decode(acc_tokens)
            # ---- draft ------------------------------------------------------------------------------------
            t0 = time.perf_counter()
            seqs: list[list[int]] = []  # target-token sequences proposed after acc_tokens
            eot_flags: list[bool] = []
            if cfg.get("ctc"):
                seqs = [self._ctc_proposal(acc_text, ctc_words, k)]
                eot_flags = [False]
            else:
                seqs, eot_flags = self._draft_proposals(draft, acc_text, cfg, k, thr, seq1_words, st)
            st.draft_s += time.perf_counter() - t0
            # ---- tree of target tokens (a trie over the proposals), rooted after `pending` --------------------
            toks: list[int] = []
            parents: list[int] = []
            root = -1
            if pending is not None:
                toks.append(pending)
                parents.append(-1)
                root = 0
            trie: dict[tuple[int, int], int] = {}
            for s, is_eot in zip(seqs, eot_flags):
                node = root
                for tok in s + ([eot_t] if is_eot else []):
                    key = (node, tok)
                    if key not in trie:
                        toks.append(tok)
                        parents.append(node)
                        trie[key] = len(toks) - 1
                    node = trie[key]
            n_prop = len(toks) - (1 if pending is not None else 0)
            # ---- verify -----------------------------------------------------------------------------------
            if not toks:  # nothing to verify: one plain AR step
                t0 = time.perf_counter()
                tok = int(np.argmax(self.t.suppress_logits(row.copy(), first=not out)))
                st.target_s += time.perf_counter() - t0
                if tok == eot_t:
                    break
                pending = tok
                continue
            path, nxt, last_row = self._verify(tlm, toks, parents, row, not out, st)
            if pending is not None:
                if not path or path[0] != 0:  # cannot happen: the root is the pending token
                    raise RuntimeError("tree verification lost the accepted root")
                out.append(pending)
                path = path[1:]
                pending = None
            acc = [toks[i] for i in path]
            st.record(n_prop, len(path))
            if eot_t in acc:
                acc = acc[: acc.index(eot_t)]
                done = True
            out += acc
            row = last_row
            if done:
                break
            if nxt == eot_t:
                break
            pending = nxt
            if cfg["recycle"] and seqs:
                # §IV-B: keep the proposal's words as sequence 1 (absolute word positions of the full text)
                seq1_words = (acc_text + self.t.fw_tokenizer.decode(seqs[0])).split()
        if pending is not None and len(out) < max_new:
            out.append(pending)
        text = self.t.fw_tokenizer.decode(out)
        dec = time.perf_counter() - t_start + (draft_enc[1] if draft_enc is not None else 0.0)
        return {"tokens": out, "text": text, "stage": method, "n_forward": st.target_passes, "decode_s": dec,
                "draft_s": st.draft_s, "draft_encode_s": draft_encode_s, "target_s": st.target_s, "rounds": st.rounds,
                "draft_steps": st.draft_passes, "predicted": st.drafted, "accepted": st.accepted, "merges": st.merges}

    def _ctc_proposal(self, acc_text: str, ctc_words: list[str], k: int) -> list[int]:
        """CTC draft words after the position where the accepted text ends (matched near the same word index)."""
        ow = acc_text.split()
        if not ow:
            return self._to_target(" " + " ".join(ctc_words))[:k] if ctc_words else []
        n = len(ow)
        nw = [_nw(w) for w in ctc_words]
        for j in sorted(range(len(nw)), key=lambda j: abs(j - (n - 1))):
            if abs(j - (n - 1)) > 4:
                break
            if nw[j] == _nw(ow[-1]) and j + 1 < len(ctc_words):
                return self._to_target(" " + " ".join(ctc_words[j + 1 :]))[:k]
        return []

    def _draft_proposals(self, draft: _Draft, acc_text: str, cfg: dict, k: int, thr, seq1_words: list[str],
                         st: SpecASRStats) -> tuple[list[list[int]], list[bool]]:
        ctx = draft.sync(acc_text)
        first = not ctx
        n_acc_words = len(acc_text.split())

        def to_target(draft_tokens: list[int]) -> list[int]:
            return self._to_target(self.d.fw_tokenizer.decode(draft_tokens))

        if cfg["tree"]:
            marks: list = []
            trunk, eot = draft.greedy(k, thr, mark=marks)
            seqs, flags = [to_target(trunk)], [eot]
            trunk_words = self.d.fw_tokenizer.decode(trunk).split()
            for pos, second in marks[:3]:  # pass 2: expand only the uncertain positions
                draft.sync(acc_text + self.d.fw_tokenizer.decode(trunk[:pos]))
                branch = [second]
                draft.step(second)
                stop = self._merge_stop(self.d.fw_tokenizer.decode(trunk[:pos]), trunk_words, branch_base=[second])
                more, beot = draft.greedy(6, stop=stop)
                branch += more
                text = self.d.fw_tokenizer.decode(trunk[:pos] + branch)
                if stop.merged is not None:  # re-joined the trunk: reuse its rest (recycling)
                    text = text.rstrip() + " " + " ".join(trunk_words[stop.merged + 1 :])
                    st.merges += 1
                seqs.append(self._to_target(text))
                flags.append(beot if stop.merged is None else eot)
            return seqs, flags
        if cfg["beams"] == 2:
            p = draft.probs(first)
            top2 = [int(t) for t in np.argsort(p)[::-1][:2]]
            seqs, flags = [], []
            for t in top2:
                if t == self.d.eot:
                    seqs.append([])
                    flags.append(True)
                    continue
                draft.sync(acc_text)
                draft.step(t)
                more, eot = draft.greedy(k - 1)
                seqs.append(to_target([t] + more))
                flags.append(eot)
            return seqs, flags
        stop = None
        if cfg["recycle"] and len(seq1_words) > n_acc_words + 1:
            stop = self._merge_stop("", seq1_words[n_acc_words:], branch_base=[], word_offset=0)
        toks, eot = draft.greedy(k, thr, stop=stop)
        text = self.d.fw_tokenizer.decode(toks)
        if stop is not None and stop.merged is not None:
            text = text.rstrip() + " " + " ".join(seq1_words[n_acc_words + stop.merged + 1 :])
            st.merges += 1
            eot = False
        return [self._to_target(text)], [eot]

    def _merge_stop(self, prefix_text: str, seq1: list[str], branch_base: list[int], word_offset: int = 0):
        """A stop callback for draft regeneration: fires when the last complete regenerated word equals the
        sequence-1 word at the same or an adjacent word position (§IV-B merge). ``stop.merged`` is the sequence-1
        word index merged at."""
        d = self.d
        n_prefix = len(prefix_text.split())

        class Stop:
            merged = None

            def __call__(self, toks: list[int]) -> bool:
                words = d.fw_tokenizer.decode(branch_base + toks).split()
                if len(words) < 2:  # the last word may still be growing
                    return False
                i = n_prefix + len(words) - 2  # index of the last complete word in seq1 coordinates
                w = _nw(words[-2])
                for j in (i, i - 1, i + 1):
                    # merge only where sequence 1 still has ≥ 2 words to give
                    if 0 <= j < len(seq1) - 2 and _nw(seq1[j]) == w and len(w) > 1:
                        self.merged = j
                        # drop the incomplete last word; seq1 supplies the rest
                        while toks and len(d.fw_tokenizer.decode(branch_base + toks).split()) > len(words) - 1:
                            toks.pop()
                        return True
                return False

        return Stop()


class SpecASRBackend(ASRBackend):
    """Streaming ASR backend (:class:`engine.asr.backend.ASRBackend`) decoding every re-decode with SpecASR.

    Args:
        target: :class:`engine.asr.whisper_ssd.WhisperSSD` of the target (base): encoder, decoder, word alignment.
        draft: :class:`engine.asr.whisper_ssd.WhisperSSD` of the draft (tiny.en).
        threshold / max_draft: §IV-A; tree: §IV-C on (method "tree") or off ("recycling").
    """

    name = "specasr"
    supports_language = True

    def __init__(self, target, draft, threshold: float = 0.4, max_draft: int = 24, tree: bool = True,
                 method: str | None = None, guard=None):
        from engine.asr.whisper_ar import WhisperARBackend
        from engine.asr.window import DecodeGuard, WindowPolicy

        self.target = target
        self.draft = draft
        self.spec = SpecASR(target.whisper, draft, threshold, max_draft)
        self.method = method or ("tree" if tree else "recycling")
        if self.method not in SPEC_METHODS or self.method == "ctc_draft":
            raise ValueError(f"unknown SpecASR method {self.method!r}")
        self.guard = guard or DecodeGuard()
        # a decode that fails a guard is redone greedily on the padded 30 s window (as the SSD/AR backend does)
        self._padded = WhisperARBackend(target, window=WindowPolicy("padded"), guard=self.guard)
        # a window in another language than English is decoded by the target alone (the draft is English-only)
        self._target_only = WhisperARBackend(target, window=target.window, guard=self.guard)

    @property
    def language(self):
        return self.target.language

    def transcribe(self, audio: np.ndarray, prompt: str = "", language=None):
        """Decode ``audio`` (float32 16 kHz, any length; longer than one window: in pieces) after ``prompt``:
        the target's encoder window (length-scaled by default), SpecASR with the guard's token cap, and the
        padded-window fallback when a guard fails. ``language``: as in
        :meth:`engine.asr.whisper_ar.WhisperARBackend.transcribe`; a window in another language than
        English is decoded by the target alone (plain greedy AR: the draft model is English-only)."""
        from engine.asr.backend import BackendResult
        from engine.asr.whisper_ar import segment_ends, transcribe_in_pieces

        audio = np.asarray(audio, np.float32)
        if len(audio) > self.target.window.max_audio_s * SAMPLE_RATE:
            return transcribe_in_pieces(self, audio, prompt, self.target.window.max_audio_s, language=language)
        audio_s = len(audio) / SAMPLE_RATE
        t0 = time.perf_counter()
        sv, enc = self.target.encode(audio)
        t_enc = time.perf_counter() - t0
        lang, probs = self.target.language_for(sv, language, audio_s)
        if lang not in (None, "en"):
            res = self._target_only.transcribe(audio, prompt if self.target.prompt_fits(language, lang) else "",
                                               language=lang)
            res.stats.update(encode_s=round(res.stats.get("encode_s", 0.0) + t_enc, 4), target_only=True)
            if probs is not None:
                res.stats["language_probs"] = [(c, round(q, 3)) for c, q in probs[:3]]
            return res
        if not self.target.prompt_fits(language, lang):
            prompt = ""
        r = self.spec.decode(audio, enc, self.target.prompt(prompt, lang), self.method,
                             draft_prompt=self.draft.prompt(prompt), max_new=self.guard.token_cap(audio_s))
        verdict = self.guard.check(r["tokens"], r["text"], audio_s)
        stats = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items() if k not in ("tokens", "text")}
        stats.update(tokens=len(r["tokens"]), encode_s=round(t_enc, 4), guard=verdict.reason, fallback=0,
                     window_s=self.target.window.n_frames(len(audio)) / 100, language=lang)
        if probs is not None:
            stats["language_probs"] = [(c, round(q, 3)) for c, q in probs[:3]]
        if not verdict.ok and self.target.window.mode == "scaled":
            fb = self._padded.transcribe(audio, prompt, language=lang)
            stats.update(fallback=1, guard_after_fallback=fb.stats.get("guard", ""),
                         encode_s=round(t_enc + fb.stats["encode_s"], 4),
                         decode_s=round(stats.get("decode_s", 0.0) + fb.stats["decode_s"], 4))
            return BackendResult(fb.words, fb.segment_ends, stats)
        toks = r["tokens"] if verdict.ok else self.guard.cut(r["tokens"], audio_s)
        t1 = time.perf_counter()
        words = self.target.words(toks, sv, len(audio), lang)
        stats.update(align_s=round(time.perf_counter() - t1, 4))
        return BackendResult(words, segment_ends(words), stats)
