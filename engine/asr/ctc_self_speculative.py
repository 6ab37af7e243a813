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
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.core import verify as V
from engine.asr.whisper_ct2 import CT2WhisperDecoder
from engine.asr.ctc_draft import CTCDraft
from engine.core.events import Word
from engine.asr.streaming import SAMPLE_RATE, BackendResult, DecodeAbandoned, _key, _takes
from engine.asr.tokenizer import repair_model_tokenizer
from engine.asr.window import DecodeGuard, WindowPolicy, log_mel, skipped_regions, split_point

PRESETS = {"high_accuracy": (0.7, 0.2), "high_rtfx": (3.0, 0.1)}


def echoes_prompt(words, prompt: str) -> bool:
    """Whether a decode's ``words`` (:class:`Word`) mostly repeat its prompt's text: at least two words and at least
    60 % of them in one run of words the prompt also has. Whisper, prompted with the text before a stretch of audio
    it is unsure of (babble, a mumble), can answer with that text again; such a decode is the prompt's echo, not the
    stretch's words."""
    new = [k for k in (_key(w.text) for w in words) if k]
    if len(new) < 2:
        return False
    old = [k for k in (_key(t) for t in prompt.split()) if k]
    m = difflib.SequenceMatcher(None, old, new, autojunk=False).find_longest_match(0, len(old), 0, len(new))
    return m.size >= 2 and m.size >= 0.6 * len(new)


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
    """Eq. 3/5/6 over a :class:`engine.asr.whisper_torch.TorchWhisper` decoder (its :class:`engine.llm.protocol.CausalLM`), Eq. 5
    by :func:`engine.core.verify.prob_threshold` on the suppressed verification rows.

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


class WhisperSSD:
    """Encoder (CTranslate2 via faster-whisper), CTC head and torch decoder of one Whisper model, shared by the
    SSD backend, the AR-torch baseline and the benchmark.

    Args:
        model_dir: CTranslate2 Whisper directory (the ``asr_target`` role).
        head_dir: trained CTC head (default ``assets/ctc_head``).
        lid_head, lid_head_dir: with language "auto", Whisper's language identification is multiplied by the trained
            language-ID head's (engine.asr.language_head.fuse) raised to ``lid_head`` (0 = Whisper's alone); the head
            in ``lid_head_dir`` (default ``assets/lid_head``; Whisper's alone when none is shipped).
        device: "cpu" or "cuda" (None: CUDA when available); compute_type: CTranslate2 type (int8 on CPU).

    Raises:
        FileNotFoundError: no CTC head.
    """

    def __init__(self, model_dir: str | Path, head_dir: str | Path | None = None, device: str | None = None,
                 compute_type: str = "int8", cpu_threads: int = 0, language: str = "en",
                 window: WindowPolicy | None = None, lid_head: float = 2.0,
                 lid_head_dir: str | Path | None = None):
        import ctranslate2
        from faster_whisper import WhisperModel

        # CTranslate2 runs the encoder (and the live decoder): ask it, so the default AR path never imports torch
        device = device or ("cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu")
        if device == "cuda" and compute_type == "int8":
            compute_type = "float16"
        self.device = device
        self.model_dir = model_dir
        self.fw = WhisperModel(str(model_dir), device=device, compute_type=compute_type, cpu_threads=cpu_threads)
        repair_model_tokenizer(self.fw, model_dir)  # the packaged base tokenizer.json lacks a BPE merge
        self._whisper = None
        self._head_dir = head_dir
        self._head = None
        self.lid_head_weight = float(lid_head)
        self._use_lid_head, self._lid_head_dir, self._lid_head = self.lid_head_weight > 0, lid_head_dir, None
        self.window = window or WindowPolicy()
        # "auto": each decode identifies its language (language_for); the default tokenizer says English
        self.language = language if self.fw.model.is_multilingual else None
        self._toks: dict = {}
        self.tok = self.tokenizer()

    @property
    def whisper(self):
        """The torch port of the same weights (decoder with KV-cache control), loaded on first use."""
        if self._whisper is None:
            from engine.asr.whisper_torch import TorchWhisper

            self._whisper = TorchWhisper(self.model_dir, device=self.device)
        return self._whisper

    @property
    def head(self):
        """The CTC head (loaded on first use; FileNotFoundError if none was trained/shipped)."""
        if self._head is None:
            from engine.asr.ctc_draft import CTCHead

            self._head = CTCHead(self._head_dir, device=self.device)
        return self._head

    @property
    def suppressed_ids(self) -> frozenset[int]:
        """Token ids CTranslate2's ``generate`` never emits (the model's ``config.json`` ``suppress_ids``, what its
        default ``suppress_tokens=[-1]`` reads; the tokenizer's non-speech tokens when there is no such file)."""
        if getattr(self, "_suppressed_ids", None) is None:
            import json

            cfg = Path(str(self.model_dir)) / "config.json"
            try:
                ids = json.loads(cfg.read_text()).get("suppress_ids") or []
            except (OSError, ValueError):
                ids = list(self.tok.non_speech_tokens)
            self._suppressed_ids = frozenset(int(i) for i in ids)
        return self._suppressed_ids

    def head_matches(self) -> bool:
        """Whether the CTC head was trained on an encoder of this model's width (it is tied to the encoder it was
        trained on: Whisper base, d_model 512). False also when no head is available."""
        try:
            return int(self.head.config["d_model"]) == int(self.whisper.model.config.d_model)
        except FileNotFoundError:
            return False

    def encode(self, audio: np.ndarray, n_frames: int | None = None):
        """Encode float32 16 kHz audio (n ≤ 480000 samples) in a window of ``n_frames`` mel frames (default: this
        model's :class:`~engine.asr.window.WindowPolicy`; 3000 = the padded 30 s window).

        Returns:
            (CTranslate2 StorageView (1, n_frames / 2, d_model), torch float tensor of the same values).
        """
        import torch

        audio = np.asarray(audio, np.float32)
        n_frames = self.window.n_frames(len(audio)) if n_frames is None else n_frames
        sv = self.fw.encode(log_mel(self.fw.feature_extractor, audio, n_frames))
        if self.device == "cuda":
            t = torch.as_tensor(sv, device="cuda").half()  # the torch port runs in fp16 on CUDA
        else:
            t = torch.from_numpy(np.asarray(sv)).float()
        return sv, t

    @property
    def lid_head(self):
        """The language-ID head (engine.asr.language_head) combined with Whisper's identification, or None: turned
        off (``lid_head=0``) or none shipped. Loaded on first use."""
        if self._lid_head is None and self._use_lid_head:
            from engine.asr.language_head import LanguageIdHead

            try:
                self._lid_head = LanguageIdHead(self._lid_head_dir)
            except FileNotFoundError:
                self._use_lid_head = False
        return self._lid_head

    def tokenizer(self, language: str | None = None):
        """The faster-whisper tokenizer whose SOT sequence names ``language`` (ISO 639-1; default this model's,
        English for "auto"; an English-only model has none). Built once per language."""
        from faster_whisper.tokenizer import Tokenizer

        lang = (language or self.language) if self.fw.model.is_multilingual else None
        lang = "en" if lang == "auto" else lang
        if lang not in self._toks:
            self._toks[lang] = Tokenizer(self.fw.hf_tokenizer, self.fw.model.is_multilingual, task="transcribe",
                                         language=lang)
        return self._toks[lang]

    def language_for(self, sv, language, audio_s: float) -> tuple[str | None, list[tuple[str, float]] | None]:
        """The language to decode a window in: ``language`` None = this model's (a multilingual model set to "auto"
        identifies it on ``sv``, the window's encoder output, and takes the most probable); a code = that one; a
        callable ``choose(probs, audio_s[, whisper_probs]) -> code`` = identification on ``sv``
        (:func:`engine.asr.language_head.identify_with_whisper`: ``probs`` fused with the language-ID head,
        ``whisper_probs`` Whisper's own, passed where the callable takes it) and the caller's choice
        (engine.asr.streaming.SessionLanguage).
        Returns (code or None for an English-only model, the identified (code, probability) pairs best first, or None
        when nothing was identified)."""
        if not self.fw.model.is_multilingual:
            return None, None
        if isinstance(language, str):
            return language, None
        if language is None and self.language != "auto":
            return self.language, None
        from engine.asr.language_head import identify_with_whisper

        probs, own = identify_with_whisper(self.fw.model, sv, int(round(audio_s * SAMPLE_RATE)), self.lid_head,
                                           self.lid_head_weight)
        if language is None:
            return probs[0][0], probs
        return (language(probs, audio_s, whisper_probs=own) if _takes(language, "whisper_probs")
                else language(probs, audio_s)), probs

    @staticmethod
    def prompt_fits(language, lang: str | None) -> bool:
        """Whether a decode in ``lang`` may use its text prompt: a ``language`` callable may say which language its
        caller's prompt text is in (``prompt_language``); prompted with text in one language, Whisper translates
        speech in another into it, so such a window is decoded without the prompt."""
        pl = getattr(language, "prompt_language", None)
        return not pl or lang is None or pl == lang

    def prompt(self, previous_text: str = "", language: str | None = None) -> list[int]:
        """faster-whisper's prompt: [<|startofprev|>, previous tokens (≤ 223)] + SOT sequence (naming ``language``,
        default this model's) + <|notimestamps|>."""
        tok = self.tokenizer(language)
        seq: list[int] = []
        if previous_text.strip():
            prev = tok.encode(" " + previous_text.strip())
            seq = [tok.sot_prev] + prev[-223:]
        return seq + list(tok.sot_sequence) + [tok.no_timestamps]

    def words(self, tokens: list[int], sv, n_samples: int, language: str | None = None,
              forced: Sequence[int] = ()) -> list[Word]:
        """Word timestamps (s, relative to the window) by cross-attention DTW (CTranslate2 ``align``, the same
        path faster-whisper's ``word_timestamps`` uses), for tokens decoded in ``language`` (default this model's).
        ``forced``: text tokens forced before ``tokens`` (a decode's ``prefix``): aligned with them, so that
        ``tokens`` get their times after the words the audio begins with, and not returned."""
        if not tokens:
            return []
        from faster_whisper.transcribe import merge_punctuations

        forced = list(forced)
        al = self.fw.find_alignment(self.tokenizer(language), [forced + list(tokens)], sv, n_samples // 160)[0]
        starts = np.cumsum([0] + [len(a["tokens"]) for a in al])[:-1]
        # as faster-whisper's word_timestamps: punctuation joins its word (no "." word with its own time)
        merge_punctuations(al, "\"'“¿([{-", "\"'.。,，!！?？:：”)]}、")
        return [Word(float(a["start"]), float(a["end"]), a["word"]) for a, i in zip(al, starts)
                if a["word"] and i >= len(forced)]


def transcribe_in_pieces(backend, audio: np.ndarray, prompt: str, max_s: float, **kw) -> BackendResult:
    """Decode audio longer than one window with ``backend.transcribe``: cut at the quietest moment before
    ``max_s`` seconds (:func:`engine.asr.window.split_point`), decode the first piece, then the rest (split
    again if needed) prompted with the text so far (``kw``: more arguments of every ``transcribe``). Word times are
    relative to the start of ``audio``; numeric stats are summed, ``pieces`` counts the windows."""
    cut = split_point(audio, max_s)
    prefix = kw.pop("prefix", "")
    first = backend.transcribe(audio[:cut], prompt, **kw, **({"prefix": prefix} if prefix else {}))
    text = "".join(w.text for w in first.words).strip()
    rest = backend.transcribe(audio[cut:], " ".join(t for t in (prompt, prefix, text) if t).strip()[-400:], **kw)
    off = cut / SAMPLE_RATE
    words = list(first.words) + [Word(w.start + off, w.end + off, w.text) for w in rest.words]
    stats = {k: (v + rest.stats.get(k, 0) if isinstance(v, (int, float)) and not isinstance(v, bool)
                 and isinstance(rest.stats.get(k, 0), (int, float)) else v) for k, v in first.stats.items()}
    stats["pieces"] = first.stats.get("pieces", 1) + rest.stats.get("pieces", 1)
    return BackendResult(words, segment_ends(words), stats)


def segment_ends(words: list[Word]) -> list[float]:
    """Sentence ends (words ending in . ? !) and the last word end, for the streaming buffer trimming."""
    ends = [w.end for w in words if w.text.rstrip().endswith((".", "?", "!"))]
    if words and (not ends or ends[-1] != words[-1].end):
        ends.append(words[-1].end)
    return ends


class SSDBackend:
    """Streaming ASR backend (:class:`engine.asr.streaming.ASRBackend`) decoding every re-decode with SSD.

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


class SSDCT2Backend:
    """SSD for the live streaming path, on CTranslate2's int8 decoder (what faster-whisper runs).

    With ``speculate=False`` it is the plain greedy AR backend (``asr.method=ar``): the same encoder window, guards
    and calls without a draft. The same three steps as :class:`SSDDecoder`, with the CTranslate2 decoder behind
    :class:`engine.asr.whisper_ct2.CT2WhisperDecoder` instead of the torch decoder:
    Eq. 5's per-token probabilities p(ŷ_i | ŷ_<i, x) come from ``Whisper.align`` — ONE batched decoder pass that
    also yields the word timestamps every update needs anyway — and are accepted by
    :func:`engine.core.verify.threshold_accepted`; Eq. 6 continues greedy AR from the longest verified prefix with
    ``generate`` (the prefix is re-read in one batched pass; CTranslate2 keeps no KV cache between calls). A fully verified draft costs one ``generate`` step that returns <|endoftext|> (or continues if
    the draft is a prefix, e.g. the previous hypothesis), and its alignment is reused. Same counters as
    :class:`SSDBackend`.
    """

    def __init__(self, model: WhisperSSD, tau_ctc: float = 0.7, tau_slm: float = 0.2, use_previous: bool = True,
                 speculate: bool = True, window: WindowPolicy | None = None, guard: DecodeGuard | None = None,
                 beam_size: int = 1, final_beam_size: int = 1):
        self.m = model
        self.beam_size = beam_size  # plain AR only (speculation verifies against greedy)
        self.final_beam_size = final_beam_size  # the decode of an utterance's final text (transcribe_final)
        self.name = "ssd" if speculate else "ar"
        self.redecode_gaps = True  # decode stretches of loud audio the decoder skipped (skipped_regions)
        self.window = window or WindowPolicy()
        self.guard = guard or DecodeGuard()
        self.tau_ctc, self.tau_slm = float(tau_ctc), float(tau_slm)
        self.use_previous = use_previous
        self.speculate = speculate  # False: the same calls without a draft = its greedy AR baseline (benchmark)
        self._prev: tuple[bytes, int, str] | None = None
        self._bad_prompt = ""  # a prompt under which a decode collapsed and the decode without it passed
        self.counts = {"ctc": 0, "verified": 0, "fallback": 0, "ar": 0}

    @property
    def language(self) -> str | None:
        """``asr.language``: an ISO 639-1 code, "auto" (identified per decode), or None (an English-only model)."""
        return self.m.language

    def _words_from(self, res, tokens: list[int], language: str | None = None) -> list[Word]:
        """Word timestamps from an ``align`` result (faster-whisper's find_alignment arithmetic)."""
        from faster_whisper.transcribe import merge_punctuations

        tok = self.m.tokenizer(language)
        words, word_tokens = tok.split_to_word_tokens(tokens + [tok.eot])
        if len(word_tokens) <= 1:
            return []
        text_idx = np.array([p[0] for p in res.alignments])
        time_idx = np.array([p[1] for p in res.alignments])
        bounds = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
        jumps = np.pad(np.diff(text_idx), (1, 0), constant_values=1).astype(bool)
        jt = time_idx[jumps] / self.m.fw.tokens_per_second
        if len(jt) < bounds[-1] + 1:
            return []
        al = [dict(word=w, tokens=t, start=float(jt[i]), end=float(jt[j]), probability=0.0)
              for w, t, i, j in zip(words, word_tokens, bounds[:-1], bounds[1:])]
        merge_punctuations(al, "\"'“¿([{-", "\"'.。,，!！?？:：”)]}、")
        return [Word(a["start"], a["end"], a["word"]) for a in al if a["word"]]

    def transcribe_final(self, audio: np.ndarray, prompt: str = "", draft: str = "",
                         language=None, prefix: str = "", padded_retry: bool = True) -> BackendResult:
        """:meth:`transcribe` for the decode that gives an utterance's final text (the streaming processor calls it
        at a VAD pause and at the end of speech): plain AR decodes it with beam search of width
        ``final_beam_size`` (``asr.final_beam_size``); SSD decodes it as any other update.

        ``draft``: text the caller expects (the streaming hypothesis of a whole utterance): verified in one
        decoder pass and accepted by :func:`engine.core.verify.majority_accepted`, then greedy decoding continues from
        the accepted prefix, so the text is exactly greedy decoding's (for every method: the final decode of a
        whole utterance does not use SSD's relaxed τ_SLM); ignored under beam search. ``language``, ``prefix``,
        ``padded_retry``: as in :meth:`transcribe`."""
        beam = self.final_beam_size if not self.speculate and self.final_beam_size > 1 else None
        kw = {"draft": draft} if draft.strip() and beam is None else {"beam_size": beam}
        return self.transcribe(audio, prompt, language=language, prefix=prefix, padded_retry=padded_retry, **kw)

    def transcribe(self, audio: np.ndarray, prompt: str = "", beam_size: int | None = None,
                   draft: str | None = None, language=None, prefix: str = "",
                   padded_retry: bool = True, abandon=None) -> BackendResult:
        """Decode ``audio`` (float32 16 kHz, any length) after the text ``prompt`` (``beam_size``: this decode's
        beam width for plain AR, default ``self.beam_size``; ``draft``: see :meth:`transcribe_final`, no CTC
        draft then; ``language``: None = the model's ``asr.language``, an ISO 639-1 code, or a callable
        ``choose(probs, audio_s[, whisper_probs]) -> code`` that picks it from the language identified on this
        window's encoder output (:meth:`WhisperSSD.language_for`); every re-decode of the window keeps the language
        picked, and a window not in English is never drafted by the CTC head, which was trained on English).
        ``prefix``: the text of the words the audio begins with (an earlier utterance kept as acoustic context),
        forced as the decoder's first text tokens, as in one long-form window where Whisper has already written
        them: the decode continues after them, its words are only the new ones, and no word of the context is
        decoded again.
        ``padded_retry``: False = a decode that fails the guards is not redone on the padded window (a streaming
        update's partial, replaced by the next update); the prompt reset still applies, on the scaled window.
        ``abandon``: a callable checked once the encoder pass is done (audio up to one window long): True raises
        :class:`engine.asr.streaming.DecodeAbandoned` before the decoder runs (a streaming update that a decode
        about to start supersedes, e.g. at the VAD's pause).

        The encoder sees the audio in a window of ``self.window`` (length-scaled by default); the decode passes
        :attr:`guard` or is redone greedily on the padded 30 s window, and, when the best decode so far collapsed
        (below the log-prob floor with fewer than 0.5 tokens per second) or echoes its prompt (:func:`echoes_prompt`)
        and had a prompt, once more without the prompt, which is then not used again (Whisper can answer a lone "."
        or the prompt's own text under its prompt); the best decode by
        guard verdict and mean log-prob is kept. A loop that survives is cut at its first repetition and a silent
        window gives no words. Audio longer than ``window.max_audio_s`` is cut at its
        quietest moment and decoded piece by piece, the next piece prompted with the previous piece's text.

        Returns:
            words (seconds from the start of ``audio``), segment ends, and ``stats`` (``encode_s``, ``decode_s``,
            ``ctc_s``, ``align_s``, ``stage``, ``accepted``, ``draft_tokens``, ``n_forward``, ``window_s``,
            ``guard`` (the failed check or ""), ``fallback`` (re-decodes), ``prompt_reset`` (re-decodes without the
            prompt), ``doubtful`` (the kept decode still fails a guard or the log-prob floor), ``pieces``,
            ``language`` (the code decoded in, None for an English-only model) and, when it was identified,
            ``language_probs`` (the three most probable (code, probability) pairs)).
        """
        audio = np.asarray(audio, np.float32)
        if len(audio) > self.window.max_audio_s * SAMPLE_RATE:
            return self._transcribe_long(audio, prompt, language, prefix)
        n = len(audio)
        audio_s = n / SAMPLE_RATE
        if prompt and prompt == self._bad_prompt:
            prompt = ""  # the buffer's earlier decodes collapsed under this prompt: it is not tried again
        if draft is not None:
            r = self._decode_window(audio, prompt, self.window.n_frames(n), False, draft_text=draft, language=language,
                                    prefix=prefix)
        else:
            r = self._decode_window(audio, prompt, self.window.n_frames(n), self.speculate, beam_size,
                                    language=language, prefix=prefix, abandon=abandon)
        lang = r.stats.get("language")
        if not self.m.prompt_fits(language, lang):
            prompt = ""  # nor for its re-decodes
        stats = dict(r.stats)
        verdict = self.guard.check(r.tokens, r.text, audio_s, r.avg_logprob, r.no_speech_prob)
        stats["guard"] = verdict.reason
        stats["fallback"] = 0

        def collapsed(v, d) -> bool:  # next to nothing over seconds of audio, below the log-prob floor
            return v.reason == "logprob" and len(d.tokens) < max(2.0, 0.5 * audio_s)

        def echoed(d) -> bool:  # the prompt's text again: Whisper's answer to audio it is unsure of
            return bool(prompt.strip()) and echoes_prompt([Word(0.0, 0.0, t) for t in d.text.split()], prompt)

        retries = []  # (prompt, whether it is the prompt reset)
        if not verdict.ok and verdict.reason != "no_speech":
            if self.window.mode == "scaled" and padded_retry:
                retries.append((prompt, False))  # Whisper was trained on 30 s windows: redo it padded, greedily
            if prompt.strip():
                retries.append(("", True))  # Whisper can collapse under its prompt (a lone "."): once more without
        for p_retry, reset in retries:
            if reset and not (collapsed(verdict, r) or echoed(r)):
                break  # no collapse and no echo (babble, music, a loop): the prompt is not to blame
            # without padded_retry the prompt reset stays on the scaled window: no decode pays a 30 s encoder pass
            frames = 3000 if padded_retry else self.window.n_frames(n)
            r2 = self._decode_window(audio, p_retry, frames, False, language=lang, prefix=prefix)
            stats["fallback"] += 1
            stats["prompt_reset"] = stats.get("prompt_reset", 0) + reset
            for k in ("encode_s", "decode_s", "align_s", "n_forward"):
                stats[k] = round(stats[k] + r2.stats[k], 4) if isinstance(stats[k], float) else stats[k] + r2.stats[k]
            v2 = self.guard.check(r2.tokens, r2.text, audio_s, r2.avg_logprob, r2.no_speech_prob)
            stats["guard_after_fallback"] = v2.reason
            if _rank(v2, r2) < _rank(verdict, r):
                r, verdict = r2, v2
                if reset and v2.ok:
                    self._bad_prompt = prompt
            if verdict.ok or verdict.reason == "no_speech":
                break
        if verdict.reason == "no_speech":
            r = _WindowDecode([], "", [], None, r.stats, r.avg_logprob, r.no_speech_prob)
        elif verdict.reason in ("cap", "loop", "compression"):
            toks = self.guard.cut(r.tokens, audio_s)
            r = _WindowDecode(toks, self.m.tok.decode(toks).strip(), None, r.sv, r.stats, r.avg_logprob,
                              r.no_speech_prob, r.forced)
        t3 = time.perf_counter()
        words = r.words if r.words is not None else self.m.words(r.tokens, r.sv, n, lang, r.forced)
        stats["align_s"] = round(stats.get("align_s", 0.0) + time.perf_counter() - t3, 4)
        stats["tokens"] = len(r.tokens)
        stats["pieces"] = 1
        stats["gaps_redecoded"] = 0
        confident = verdict.ok and (r.avg_logprob is None or r.avg_logprob >= self.guard.logprob)
        stats["doubtful"] = not confident
        if self.redecode_gaps and words and confident:  # not on doubtful windows (babble, music): nothing to find
            words = self._fill_skipped(audio, words, prompt, stats, after=prefix)
        self._prev = (audio[:1600].tobytes(), n, "".join(w.text for w in words).strip())
        return BackendResult(words, segment_ends(words), stats)

    def _fill_skipped(self, audio: np.ndarray, words: list[Word], prompt: str, stats: dict,
                      after: str = "") -> list[Word]:
        """Whisper can skip a whole sentence (no word, or one stretched word, over seconds of loud audio): decode
        such a stretch alone, greedily, prompted with the words before it, and put its words in place (at most two
        per window; :func:`engine.asr.window.skipped_regions`). ``after``: the text of a forced prefix (the
        acoustic context the audio begins with, whose words are not in ``words``): only stretches after the first
        word are looked at."""
        regions = skipped_regions(audio, words)
        if after.strip():
            regions = [(a, b, k) for a, b, k in regions if words and a >= words[0].start - 1e-6]
        for a, b, k in reversed(regions[:2]):  # from the end, so earlier indices stay valid
            i = k if k is not None else sum(1 for w in words if w.end <= a + 1e-6)
            head = prompt + (" " + after.strip() if after.strip() else "")
            before = (head + "".join(w.text for w in words[:i])).strip()[-400:]
            lo, hi = int(a * SAMPLE_RATE), int(b * SAMPLE_RATE)
            r = self._decode_window(audio[lo:hi], before, self.window.n_frames(hi - lo), False,
                                    language=stats.get("language"))
            stats["decode_s"] = round(stats["decode_s"] + r.stats["decode_s"], 4)
            stats["encode_s"] = round(stats["encode_s"] + r.stats["encode_s"], 4)
            stats["gaps_redecoded"] += 1
            if not r.tokens or not self.guard.check(r.tokens, r.text, (hi - lo) / SAMPLE_RATE, r.avg_logprob,
                                                    r.no_speech_prob).ok:
                continue
            new = [Word(w.start + a, w.end + a, w.text)
                   for w in self.m.words(r.tokens, r.sv, hi - lo, stats.get("language"))]
            if echoes_prompt(new, before):
                stats["gaps_echo"] = stats.get("gaps_echo", 0) + 1
                continue
            words = words[:i] + new + words[i + (k is not None):]  # a stretched word is replaced
        return words

    def _transcribe_long(self, audio: np.ndarray, prompt: str, language=None, prefix: str = "") -> BackendResult:
        self._prev = None  # the pieces start differently from the growing buffer
        res = transcribe_in_pieces(self, audio, prompt, self.window.max_audio_s, language=language, prefix=prefix)
        self._prev = None  # ... and so does the next update's buffer from the last piece
        return res

    def _decode_window(self, audio: np.ndarray, prompt: str, n_frames: int, speculate: bool,
                       beam_size: int | None = None, draft_text: str | None = None,
                       language=None, prefix: str = "", abandon=None) -> "_WindowDecode":
        """One encoder window and one decode (SSD Eq. 3/5/6, or AR when ``speculate`` is False: beam search of
        width ``beam_size``, default ``self.beam_size``). ``draft_text`` (with ``speculate`` False): a caller's
        draft, verified exactly (:func:`engine.core.verify.majority_accepted`) before greedy decoding continues.
        ``language``, ``prefix``, ``abandon``: see :meth:`transcribe` (a prefix's tokens are ``forced``, not in
        ``tokens``)."""
        exact = draft_text is not None and not speculate
        n = len(audio)
        t0 = time.perf_counter()
        sv = self.m.fw.encode(log_mel(self.m.fw.feature_extractor, audio, n_frames))
        t_enc = time.perf_counter() - t0
        if abandon is not None and abandon():
            raise DecodeAbandoned(f"abandoned after the encoder pass ({t_enc:.3f} s)")
        t_lid = time.perf_counter()
        lang, lang_probs = self.m.language_for(sv, language, n / SAMPLE_RATE)
        t_lid = time.perf_counter() - t_lid
        # the CTC head drafts English, and all of the window: not after a forced prefix (its words would come again)
        speculate = speculate and lang in (None, "en") and not prefix.strip()
        if not self.m.prompt_fits(language, lang):
            prompt = ""
        t1 = time.perf_counter()
        if speculate:
            import torch  # the CTC head is a torch module; plain AR stays on CTranslate2 alone

            enc = torch.as_tensor(np.asarray(sv)) if self.m.device == "cpu" else torch.as_tensor(sv, device="cuda")
            d = self.m.head.draft(enc.float(), int(np.ceil(n / 320)))
        else:
            d = CTCDraft("", 0.0, np.zeros(0, np.float32), np.zeros((0, 0), np.float32))
        ctc_s = time.perf_counter() - t1
        key = audio[:1600].tobytes()
        prev = ""
        if speculate and self.use_previous and self._prev and self._prev[0] == key and self._prev[1] <= n:
            prev = self._prev[2]
        t2 = time.perf_counter()
        tok = self.m.tokenizer(lang)
        forced = tok.encode(" " + prefix.strip())[-223:] if prefix.strip() else []
        p = self.m.prompt(prompt, lang) + forced
        cap = self.guard.token_cap(n / SAMPLE_RATE)
        n_forward = 0
        words = None
        avg_lp = no_speech = None
        if d.text.strip() and d.max_entropy < self.tau_ctc:  # Eq. 3 (no draft text without speculation)
            stage, toks, draft = "ctc", tok.encode(" " + d.text.strip())[:cap], []
            acc = len(toks)
        else:
            dec = CT2WhisperDecoder(self.m.fw.model, sv, n // 160)
            if not exact:
                draft_text = merge_drafts(prev, d.text) if speculate else ""
            draft = tok.encode(" " + draft_text.strip())[:cap] if draft_text.strip() else []
            j = 0
            res = None
            lp_prefix = 0.0
            if draft:
                # Eq. 5 in one pass, in the context generate() decodes in (previous text, SOT, no timestamps)
                probs = dec.token_probs(p, draft)
                res = dec.alignment
                n_forward += 1
                if exact:  # greedy's own tokens only: p > 1/2 and never a token generate() suppresses
                    sup = self.m.suppressed_ids
                    j = V.majority_accepted(probs, [t not in sup for t in draft])
                else:
                    j = V.threshold_accepted(probs, self.tau_slm)
                lp_prefix = float(np.sum(np.log(np.maximum(probs[:j], 1e-12))))
            # Eq. 6: greedy AR from the longest verified prefix (ends at once when the prefix is complete)
            prefix = p + draft[:j]
            # the token cap: CTranslate2's max_length does not count new tokens one for one, so ask for enough
            # (never past Whisper's 448 positions) and cut the continuation at the cap here
            g = dec.generate(prefix, beam_size=1 if speculate or exact else (beam_size or self.beam_size),
                             max_length=min(448, 2 * (len(prefix) + max(1, cap - j)) + 2),
                             suppress_blank=j == 0, return_scores=True, return_no_speech_prob=True)
            cont = [t for t in g.sequences_ids[0] if t < tok.eot]
            if forced and cont[:len(forced)] == forced:  # CTranslate2 returns the forced prefix too
                cont = cont[len(forced):]
            if j and cont[:j] == draft[:j]:
                cont = cont[j:]
            cont = cont[: max(0, cap - j)]
            n_forward += len(cont) + 1
            toks = draft[:j] + cont
            acc = j
            stage = "ar" if not draft else ("verified" if j == len(draft) else "fallback")
            if res is not None and not cont and j == len(draft) and not forced:
                words = self._words_from(res, toks, lang)
            n_gen = len(cont) + 1
            avg_lp = (lp_prefix + float(g.scores[0]) * n_gen) / (j + n_gen)
            no_speech = float(g.no_speech_prob)
        decode_s = time.perf_counter() - t2
        self.counts[stage] += 1
        stats = {"stage": stage, "n_forward": n_forward, "accepted": acc, "draft_tokens": len(draft),
                 "encode_s": round(t_enc, 4), "decode_s": round(decode_s, 4), "ctc_s": round(ctc_s, 4),
                 "align_s": 0.0, "max_entropy": round(d.max_entropy, 3), "window_s": n_frames / 100,
                 "avg_logprob": None if avg_lp is None else round(avg_lp, 3),
                 "no_speech_prob": None if no_speech is None else round(no_speech, 3), "language": lang}
        if lang_probs is not None:
            stats.update(language_probs=[(c, round(q, 3)) for c, q in lang_probs[:3]], lid_s=round(t_lid, 4))
        return _WindowDecode(toks, tok.decode(toks).strip(), words, sv, stats, avg_lp, no_speech, forced)


def _rank(verdict, r: "_WindowDecode") -> tuple:
    """Order of preference between decodes of the same audio: one that passes the guards, then one judged silent,
    then one only below the log-prob floor (the higher mean log-prob first), then a cap/loop/compression failure."""
    order = {"": 0, "no_speech": 1, "logprob": 2}.get(verdict.reason, 3)
    return order, -(r.avg_logprob if r.avg_logprob is not None else -np.inf)


@dataclass
class _WindowDecode:
    tokens: list[int]
    text: str
    words: list[Word] | None  # from the verification pass when it covered every token, else None
    sv: object  # the encoder output (for word alignment)
    stats: dict
    avg_logprob: float | None
    no_speech_prob: float | None
    forced: list[int] = field(default_factory=list)  # text tokens forced before ``tokens`` (a prefix)
