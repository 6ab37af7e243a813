"""Decodes of a whole utterance (``asr.final_piece_s`` > 0, with ``asr.final_full``): the final text of an utterance
whose streaming buffer was trimmed comes from one decode of all its audio since its last finished piece, with the
streaming hypothesis as a draft verified exactly (greedy decoding of the whole utterance; beam search where the
backend decodes finals with it), and speech longer than ``final_piece_s`` is finished in pieces while it is spoken,
each cut at a word end (at a sentence end where there is one), as an offline decode moves through 30 s windows.
"""

from __future__ import annotations

import time

import numpy as np

from audio.io import SAMPLE_RATE
from engine.asr.backend import UpdateStats
from engine.asr.local_agreement import HypothesisBuffer
from engine.asr.words import join_words, word_mid
from engine.core.events import Word


class WholeUtteranceDecodes:
    """The whole-utterance decodes of :class:`engine.asr.online_processor.OnlineASRProcessor` (a mixin of it: these
    methods read and move its buffer state). ``whole`` (float32 16 kHz) is the utterance's audio from
    ``whole_offset`` (audio time, seconds) on; ``final_words`` are the final words of the finished pieces, all
    before ``whole_offset``."""

    PIECE_TAIL_S = 3.0  # a piece ends at least this long before the audio that has arrived (its last word may be cut)
    PIECE_MIN_S = 5.0  # ... and at least this long after its start, seconds

    @property
    def _needs_whole(self) -> bool:
        """The buffer no longer starts where the unfinished part of the utterance does (it was trimmed): its
        decodes do not see the whole utterance, so the final text needs a decode of ``whole``."""
        return self._whole_on and self.left_until > self.whole_offset + 1e-6

    def _hypothesis_words(self) -> list[Word]:
        """The streaming hypothesis after the final words: the words that left the buffer after the last piece, then
        the latest decode of the buffer (committed + tentative words if it was doubtful)."""
        full = self._full_final() if self.updates and not self.updates[-1].stats.get("doubtful") else None
        if full is None:
            full = [w for w in self.committed if word_mid(w) >= self.left_until] + self.hyp.complete()
        return self._before_buffer()[len(self.final_words):] + full

    def _decode_whole_audio(self, audio: np.ndarray) -> tuple[list[Word], bool]:
        """Decode ``whole``'s audio ``audio`` (a prefix of it) after the earlier utterances and the final words,
        with the streaming hypothesis as the draft. Returns (words in audio time, without the words of earlier
        utterances, doubtful)."""
        t0 = time.perf_counter()
        prompt = (self.context + join_words(self.final_words))[-200:]
        res = self._decode(audio, final=True, prompt=prompt, draft=join_words(self._hypothesis_words()),
                           at=self.whole_offset)
        h = HypothesisBuffer()
        h.last_committed_time = max(self.context_end, self.whole_offset)
        h.committed_in_buffer = (self._dedup_words + self.final_words)[-5:]
        h.insert(res.words, self.whole_offset, align_text=self.align_final)
        self.updates.append(UpdateStats(time.perf_counter() - t0, len(audio) / SAMPLE_RATE, 0,
                                        {**res.stats, "whole": True}))
        self.whole_decodes += 1
        return list(h.new), bool(res.stats.get("doubtful"))

    def _decode_whole(self, until: float) -> None:
        """Decode the unfinished part of the utterance up to the audio time ``until`` (seconds): the final text."""
        n = int(round((until - self.whole_offset) * SAMPLE_RATE))
        audio = self.whole[: max(n, int(SAMPLE_RATE * 0.1))]
        words, doubtful = self._decode_whole_audio(audio)
        self._whole = (self.whole_offset + len(audio) / SAMPLE_RATE, words, doubtful)
        self._whole_update = len(self.updates)

    def _finish_piece(self) -> None:
        """Speech has gone on past ``final_piece_s`` since the last piece: decode it whole and make its words final
        up to a sentence end (else a word end) between ``PIECE_MIN_S`` and ``PIECE_TAIL_S`` before the audio's end;
        the audio after that cut starts the next piece. When no such word passes, the words that left the buffer
        (:meth:`_trim_at`) become final instead."""
        words, doubtful = self._decode_whole_audio(self.whole)
        end = self.audio_end
        cands = [i for i, w in enumerate(words)
                 if w.end <= end - self.PIECE_TAIL_S and w.end >= self.whole_offset + self.PIECE_MIN_S]
        if doubtful or not cands:
            cut = self.left_until
            if cut <= self.whole_offset + 1e-6:
                return
            self.final_words = self._before_buffer()
        else:
            ends = [i for i in cands if words[i].text.rstrip().endswith((".", "?", "!"))]
            i = ends[-1] if ends else cands[-1]
            cut = words[i].end if i + 1 == len(words) else min(words[i].end, words[i + 1].start)
            cut = max(cut, self.whole_offset + 0.01)
            self.final_words = self.final_words + words[: i + 1]
        self.whole = self.whole[int(round((cut - self.whole_offset) * SAMPLE_RATE)):]
        self.whole_offset = cut
        self._whole = None
        self.pieces += 1
        if self.left_until < cut:  # the partials' buffer starts at the piece's cut too
            self._chunk_at(cut)
            self.hyp.last_committed_time = max(self.hyp.last_committed_time, cut)
