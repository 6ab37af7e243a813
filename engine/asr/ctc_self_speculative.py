"""CTC self-speculative decoding (SSD) of Whisper (§2, Eq. 2–7 of Saon et al., "Self-Speculative Decoding for
LLM-based ASR with CTC Encoder Drafts", 2026, https://arxiv.org/abs/2603.11243).

One window of audio is encoded once (CTranslate2 int8 encoder, as faster-whisper does); the CTC head on that
frozen encoder output drafts the transcript (:mod:`engine.asr.ctc_draft`), and the Whisper decoder (torch, as an
:class:`engine.llm.protocol.CausalLM`) only verifies it:

1. Eq. 3 — if every frame entropy of the CTC output is < τ_CTC, the draft ŷ is final (no decoder pass);
2. Eq. 5 — else ŷ, tokenised with the Whisper tokenizer after the prompt, is scored in ONE decoder pass and
   accepted if p(ŷ_i | ŷ_<i, x) > τ_SLM for every token;
3. Eq. 6 — else the longest verified prefix ŷ_<j (and its KV cache) is kept and greedy AR decoding continues
   from it (the logits for position j come from the same verification pass).

Eq. 7 is :meth:`SSDDecoder.decode`'s result. In streaming, the previous hypothesis of the same growing buffer is
merged into the draft (it is usually a prefix of the new transcript), see :func:`merge_drafts`.

Presets (paper Table 1): "high accuracy" τ_CTC = 0.7, τ_SLM = 0.2; "high RTFx" τ_CTC = 3.0, τ_SLM = 0.1.
"""

from __future__ import annotations

import difflib
import re
import time
from dataclasses import dataclass, field

import numpy as np

from audio.io import SAMPLE_RATE
from engine.asr.backend import ASRBackend, BackendResult
from engine.asr.whisper_ar import (
    WhisperARBackend,
    WindowDraft,
    segment_ends,
    transcribe_in_pieces,
)
from engine.asr.whisper_ssd import WhisperSSD
from engine.asr.window import DecodeGuard, WindowPolicy
from engine.core import verify as V

PRESETS = {"high_accuracy": (0.7, 0.2), "high_rtfx": (3.0, 0.1)}


@dataclass
class SSDResult:
    """One SSD decode.

    Attributes:
        tokens: final text tokens (Whisper vocabulary), no prompt, no EOT.
        text: their text.
        stage: "ctc" (Eq. 3 accepted), "verified" (Eq. 5: every draft token accepted; decoding continues after
            ŷ only if the decoder would not end there), "fallback" (Eq. 6), or "ar" (no draft).
        draft_tokens: ŷ tokenised; accepted: length of the accepted draft prefix (tokens).
        n_forward: decoder forward passes; decode_s: decoder wall time (s); ctc_s: CTC head wall time (s).
        max_entropy: max frame entropy (nats) of the CTC output.
    """

    tokens: list[int]
    text: str
    stage: str
    draft_tokens: list[int] = field(default_factory=list)
    accepted: int = 0
    n_forward: int = 0
    decode_s: float = 0.0
    ctc_s: float = 0.0
    max_entropy: float = 0.0
    ctc_text: str = ""
    rejoins: int = 0
    rejoined: int = 0


def _words(s: str) -> list[str]:
    return s.split()


def _nw(w: str) -> str:
    return re.sub(r"[^a-z0-9']", "", w.lower())


def merge_drafts(previous: str, ctc: str) -> str:
    """The streaming draft: the previous hypothesis of this buffer followed by the CTC draft's words after the
    point where the previous hypothesis ends (aligned on normalised words with difflib); either alone if the
    other is empty."""
    if not previous.strip():
        return ctc
    if not ctc.strip():
        return previous
    p, c = _words(previous), _words(ctc)
    pn, cn = [_nw(w) for w in p], [_nw(w) for w in c]
    blocks = [b for b in difflib.SequenceMatcher(None, pn, cn, autojunk=False).get_matching_blocks() if b.size]
    if blocks:
        last = blocks[-1]
        cut = last.b + last.size + (len(pn) - (last.a + last.size))
    else:
        cut = len(pn)
    return " ".join(p + c[cut:])


class SSDDecoder:
    """Eq. 3/5/6 over a :class:`engine.asr.whisper_torch.TorchWhisper` decoder (its
    :class:`engine.llm.protocol.CausalLM`), Eq. 5 by :func:`engine.core.verify.prob_threshold` on the suppressed
    verification rows.

    Args:
        whisper: TorchWhisper (decoder used for verification and AR).
        tau_ctc: τ_CTC in nats (Eq. 3); ≤ 0 disables CTC-only acceptance.
        tau_slm: τ_SLM probability (Eq. 5); > 1 never accepts a whole draft (prefix still used).
        max_new: token cap per window.
        rejoin: after an Eq. 6 correction, re-join the rest of the draft and verify it in one pass (the
            paper's footnote 1 "dynamically rejoin the CTC draft"; off = the paper's plain Eq. 6).
    """

    def __init__(self, whisper, tau_ctc: float = 0.7, tau_slm: float = 0.2, max_new: int = 224,
                 rejoin: bool = True):
        self.w = whisper
        self.rejoin = rejoin
        self.tau_ctc = float(tau_ctc)
        self.tau_slm = float(tau_slm)
        self.max_new = max_new

    def draft_tokens(self, text: str) -> list[int]:
        text = text.strip()
        return self.w.fw_tokenizer.encode(" " + text) if text else []

    def _suppressed(self, rows: np.ndarray, first: bool) -> np.ndarray:
        """A copy of verification rows (n, n_vocab) with Whisper's suppression; ``first``: row 0 is the first
        generated position."""
        rows = np.array(rows, np.float32)
        self.w.suppress_logits(rows, False)
        if first and len(rows):
            self.w.suppress_logits(rows[0], True)
        return rows

    def decode(self, encoder_out, prompt: list[int], draft_text: str, max_entropy: float = np.inf,
               ctc_text: str | None = None) -> SSDResult:
        """Eq. 7 for one window.

        Args:
            encoder_out: torch (1, 1500, d_model) encoder output.
            prompt: decoder prompt tokens (previous-text prompt + SOT sequence).
            draft_text: ŷ as text (the CTC draft, possibly merged with the previous hypothesis).
            max_entropy: max CTC frame entropy (nats) of the CTC draft ``ctc_text`` (Eq. 3).
            ctc_text: the CTC-only draft that Eq. 3 may accept (default ``draft_text``).
        """
        t0 = time.perf_counter()
        ctc_text = draft_text if ctc_text is None else ctc_text
        if ctc_text.strip() and max_entropy < self.tau_ctc:  # Eq. 3
            toks = self.draft_tokens(ctc_text)
            return SSDResult(toks, ctc_text.strip(), "ctc", toks, len(toks), 0, time.perf_counter() - t0,
                             max_entropy=max_entropy, ctc_text=ctc_text)
        draft = self.draft_tokens(draft_text)[: self.max_new]
        lm = self.w.decoder(encoder_out)
        eot = self.w.eot
        rows = lm.eval(list(prompt) + draft)[len(prompt) - 1 :]  # rows[i] predicts draft[i]; rows[-1] follows ŷ
        # Eq. 5: p(ŷ_i | ŷ_<i, x) > τ_SLM for every i; j = the longest verified prefix
        j = V.prob_threshold(self._suppressed(rows[: len(draft)], first=True), draft, self.tau_slm).accepted
        end_ok = bool(draft) and int(np.argmax(self.w.suppress_logits(rows[len(draft)].copy(), False))) == eot
        if j == len(draft) and draft and end_ok:
            return SSDResult(draft, lm.detokenize(draft), "verified", draft, j, lm.n_forward,
                             time.perf_counter() - t0, max_entropy=max_entropy, ctc_text=ctc_text)
        # Eq. 6: keep ŷ_<j and its KV cache, continue greedy AR (row j is already computed). A fully verified
        # draft the decoder would not end (a streaming prefix: the previous hypothesis) is continued the same way.
        lm.crop(len(prompt) + j)
        out = list(draft[:j])
        row = rows[j]
        n_rejoin = n_rejoined = 0
        dwords = [_nw(x) for x in draft_text.split()]
        while len(out) < self.max_new:
            logits = self.w.suppress_logits(row.copy(), first=not out)
            tok = int(np.argmax(logits))
            if tok == eot:
                break
            if self.rejoin and out and self.w.fw_tokenizer.decode([tok]).startswith(" "):
                cand = self._rejoin_candidate(lm.detokenize(out), dwords, draft_text)
                if cand and V.prob_threshold(self._suppressed(row[None], False), cand[:1], self.tau_slm).accepted:
                    # footnote 1: re-join the draft after the AR correction; verify its rest in one pass
                    cand = cand[: self.max_new - len(out)]
                    base = lm.n_past
                    r2 = lm.eval(cand)
                    k = 1 + V.prob_threshold(self._suppressed(r2[:-1], False), cand[1:], self.tau_slm).accepted
                    n_rejoin += 1
                    n_rejoined += k
                    lm.crop(base + k)
                    out += cand[:k]
                    row = r2[k - 1]
                    continue
            out.append(tok)
            row = lm.eval([tok])[-1]
        stage = "ar" if not draft else ("verified" if j == len(draft) else "fallback")
        return SSDResult(out, lm.detokenize(out), stage, draft, j, lm.n_forward,
                         time.perf_counter() - t0, max_entropy=max_entropy, ctc_text=ctc_text,
                         rejoins=n_rejoin, rejoined=n_rejoined)

    def _rejoin_candidate(self, out_text: str, dwords: list[str], draft_text: str) -> list[int]:
        """Tokens of the draft's words after the draft word that matches the last two complete output words
        (searched near the same word index); [] if none."""
        ow = [_nw(x) for x in out_text.split()]
        if len(ow) < 1:
            return []
        n = len(ow)
        raw = draft_text.split()
        for k in sorted(range(len(dwords)), key=lambda k: abs(k - (n - 1))):
            if abs(k - (n - 1)) > 4:
                break
            if dwords[k] == ow[-1] and (n < 2 or k < 1 or dwords[k - 1] == ow[-2] or len(ow[-1]) > 3):
                return self.draft_tokens(" ".join(raw[k + 1 :])) if k + 1 < len(raw) else []
        return []


class SSDBackend(ASRBackend):
    """Streaming ASR backend (:class:`engine.asr.backend.ASRBackend`) decoding every re-decode with SSD.

    The previous hypothesis of the same growing buffer (same first samples, longer audio) is merged into the
    draft (:func:`merge_drafts`); Eq. 3 still looks at the CTC draft alone.

    ``method`` "ssd" (default) or "ar_torch" (plain greedy on the same encoder output and decoder — the baseline).
    """

    def __init__(self, model: WhisperSSD, tau_ctc: float = 0.7, tau_slm: float = 0.2, method: str = "ssd",
                 use_previous: bool = True, rejoin: bool = True, guard: DecodeGuard | None = None):
        self.guard = guard or DecodeGuard()
        if method not in ("ssd", "ar_torch"):
            raise ValueError(f"SSDBackend method must be 'ssd' or 'ar_torch', not {method!r}")
        self.m = model
        self.name = method
        self.decoder = SSDDecoder(model.whisper, tau_ctc, tau_slm, rejoin=rejoin)
        self.use_previous = use_previous
        self._prev: tuple[bytes, int, str] | None = None
        self.counts = {"ctc": 0, "verified": 0, "fallback": 0, "ar": 0}

    def transcribe(self, audio: np.ndarray, prompt: str = "") -> BackendResult:
        """Decode ``audio`` (float32 16 kHz, any length; longer than one window: in pieces) after ``prompt``, in
        the model's encoder window, with the token cap of :attr:`guard`; a loop is cut at its first repetition."""
        audio = np.asarray(audio, np.float32)
        if len(audio) > self.m.window.max_audio_s * SAMPLE_RATE:
            self._prev = None
            return transcribe_in_pieces(self, audio, prompt, self.m.window.max_audio_s)
        t0 = time.perf_counter()
        sv, enc = self.m.encode(audio)
        t_enc = time.perf_counter() - t0
        p = self.m.prompt(prompt)
        n_frames = int(np.ceil(len(audio) / 320))
        cap = self.guard.token_cap(len(audio) / SAMPLE_RATE)
        self.decoder.max_new = cap
        if self.name == "ar_torch":
            t1 = time.perf_counter()
            r = self.m.whisper.greedy(enc, p, max_new=cap)
            res = SSDResult(r.tokens, r.text, "ar", n_forward=r.n_forward, decode_s=time.perf_counter() - t1)
        else:
            t1 = time.perf_counter()
            d = self.m.head.draft(enc, n_frames)
            ctc_s = time.perf_counter() - t1
            key = audio[:1600].tobytes()
            prev = ""
            if self.use_previous and self._prev and self._prev[0] == key and self._prev[1] <= len(audio):
                prev = self._prev[2]
            res = self.decoder.decode(enc, p, merge_drafts(prev, d.text), d.max_entropy, d.text)
            res.ctc_s = ctc_s
        verdict = self.guard.check(res.tokens, res.text, len(audio) / SAMPLE_RATE)
        if not verdict.ok:
            toks = self.guard.cut(res.tokens, len(audio) / SAMPLE_RATE)
            res = SSDResult(toks, self.m.whisper.tokenizer.decode(toks).strip(), res.stage, res.draft_tokens,
                            res.accepted, res.n_forward, res.decode_s, res.ctc_s, res.max_entropy)
        if self.name != "ar_torch":
            self._prev = (key, len(audio), res.text)
        self.counts[res.stage] += 1
        t2 = time.perf_counter()
        words = self.m.words(res.tokens, sv, len(audio))
        stats = {"tokens": len(res.tokens), "stage": res.stage, "n_forward": res.n_forward,
                 "accepted": res.accepted, "draft_tokens": len(res.draft_tokens), "encode_s": round(t_enc, 4),
                 "decode_s": round(res.decode_s, 4), "ctc_s": round(res.ctc_s, 4),
                 "align_s": round(time.perf_counter() - t2, 4), "max_entropy": round(res.max_entropy, 3),
                 "guard": verdict.reason, "window_s": self.m.window.n_frames(len(audio)) / 100}
        return BackendResult(words, segment_ends(words), stats)



class SSDCT2Backend(WhisperARBackend):
    """SSD for the live streaming path, on CTranslate2's int8 decoder (what faster-whisper runs): plain AR decoding
    (:class:`engine.asr.whisper_ar.WhisperARBackend`: the same encoder window, guards and re-decodes) with the CTC
    head's draft in every streaming update. The same three steps as :class:`SSDDecoder`, with the CTranslate2
    decoder behind :class:`engine.asr.whisper_ct2.CT2WhisperDecoder` instead of the torch decoder: Eq. 3 accepts the
    CTC draft alone; Eq. 5's per-token probabilities p(ŷ_i | ŷ_<i, x) come from ``Whisper.align`` — ONE batched
    decoder pass that also yields the word timestamps every update needs anyway — and are accepted by
    :func:`engine.core.verify.threshold_accepted`; Eq. 6 continues greedy AR from the longest verified prefix with
    ``generate`` (the prefix is re-read in one batched pass; CTranslate2 keeps no KV cache between calls). A fully
    verified draft costs one ``generate`` step that returns <|endoftext|> (or continues if the draft is a prefix,
    e.g. the previous hypothesis), and its alignment is reused. Same counters as :class:`SSDBackend`.

    The decode of an utterance's final text (:meth:`transcribe_final`) is greedy: speculation verifies against
    greedy decoding, so the partials' and the final's texts are greedy decoding's.

    Args:
        model: the :class:`WhisperSSD` (its CTC head drafts).
        tau_ctc: τ_CTC in nats (Eq. 3); tau_slm: τ_SLM probability (Eq. 5).
        use_previous: merge the previous hypothesis of the same growing buffer into the draft (:func:`merge_drafts`).
        window, guard, beam_size: as :class:`engine.asr.whisper_ar.WhisperARBackend` (``beam_size``: the decodes
            that are not drafted: a window in another language than English, one after a forced prefix).
    """

    name = "ssd"
    speculative = True

    def __init__(self, model: WhisperSSD, tau_ctc: float = 0.7, tau_slm: float = 0.2, use_previous: bool = True,
                 window: WindowPolicy | None = None, guard: DecodeGuard | None = None, beam_size: int = 1):
        super().__init__(model, window=window, guard=guard, beam_size=beam_size, final_beam_size=1)
        self.tau_ctc, self.tau_slm = float(tau_ctc), float(tau_slm)
        self.use_previous = use_previous
        self._prev: tuple[bytes, int, str] | None = None  # (first samples, length, text) of the latest decode

    def transcribe(self, audio: np.ndarray, prompt: str = "", beam_size: int | None = None,
                   draft: str | None = None, language=None, prefix: str = "",
                   padded_retry: bool = True, abandon=None) -> BackendResult:
        """:meth:`engine.asr.whisper_ar.WhisperARBackend.transcribe` with the CTC head's draft (merged with this
        buffer's previous hypothesis) verified first; the decode's text is the next update's previous
        hypothesis."""
        res = super().transcribe(audio, prompt, beam_size, draft, language, prefix, padded_retry, abandon)
        audio = np.asarray(audio, np.float32)
        if len(audio) <= self.window.max_audio_s * SAMPLE_RATE:
            self._prev = (audio[:1600].tobytes(), len(audio), "".join(w.text for w in res.words).strip())
        return res

    def _transcribe_long(self, audio: np.ndarray, prompt: str, language=None, prefix: str = "") -> BackendResult:
        self._prev = None  # the pieces start differently from the growing buffer
        res = super()._transcribe_long(audio, prompt, language, prefix)
        self._prev = None  # ... and so does the next update's buffer from the last piece
        return res

    def _draft(self, sv, audio: np.ndarray) -> WindowDraft:
        """The CTC head's draft of the window (Eq. 3's candidate), merged with the previous hypothesis of the same
        growing buffer for the decoder to verify."""
        import torch  # the CTC head is a torch module; plain AR stays on CTranslate2 alone

        n = len(audio)
        enc = torch.as_tensor(np.asarray(sv)) if self.m.device == "cpu" else torch.as_tensor(sv, device="cuda")
        d = self.m.head.draft(enc.float(), int(np.ceil(n / 320)))
        key = audio[:1600].tobytes()
        prev = ""
        if self.use_previous and self._prev and self._prev[0] == key and self._prev[1] <= n:
            prev = self._prev[2]
        return WindowDraft(merge_drafts(prev, d.text), d.text, bool(d.text.strip()) and d.max_entropy < self.tau_ctc,
                           d.max_entropy)

    def _accepted(self, probs: np.ndarray) -> int:
        """Eq. 5: the longest draft prefix whose every token has p(ŷ_i | ŷ_<i, x) > τ_SLM."""
        return V.threshold_accepted(probs, self.tau_slm)
