"""End of turn from what the user said: the answering LLM's verdict, handed to the VAD.

PredGen pre-fills each hypothesis of the user's turn into the LLM (engine.answer.predictive); the row before the chat
template's end-of-turn token (``<|im_end|>`` after the user's words) gives p(turn complete | words) at no extra
forward pass — what a transcript-based turn detector (LiveKit's) is trained to estimate, "because VAD models lack
language understanding". The VAD (:class:`audio.vad.StreamingVAD`, its ``verdict``) asks for it during a silence and
ends the turn after a short pause when it is complete-sounding, after a long one when it is not.
"""

from __future__ import annotations

import threading


class EndOfTurnVerdicts:
    """The latest end-of-turn verdict, written by the answer thread, read by the VAD on the capture thread.

    A verdict judges a transcript that covers the audio up to ``t_audio`` (seconds, the stream's clock): it stands for
    a silence that started at or before that time (the transcript heard all the speech before the silence) and for
    no later one (speech the transcript has not heard may follow).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: tuple[int, float, float] | None = None  # (utterance, t_audio, p)

    def put(self, utterance: int, t_audio: float, p: float) -> None:
        """A verdict: probability ``p`` (0–1) that utterance ``utterance``'s turn is complete, judged on its
        transcript up to audio time ``t_audio`` (seconds)."""
        with self._lock:
            if self._latest is None or t_audio >= self._latest[1]:
                self._latest = (int(utterance), float(t_audio), float(p))

    def __call__(self, silence_start: float) -> float | None:
        """The probability that the turn is complete, for a silence that started at audio time ``silence_start``
        (seconds): the latest verdict on a transcript covering the speech before it, else None."""
        with self._lock:
            v = self._latest
        return v[2] if v is not None and v[1] >= silence_start else None


def complete_threshold(duplex, rule: str) -> float:
    """The probability at or above which end-of-turn rule ``rule`` (``duplex.end_of_turn``) finds a turn complete:
    ``duplex.eot_threshold`` for the LLM's verdict, ``duplex.turn_threshold`` for Smart Turn's. ``duplex``: the
    configuration's :class:`engine.config.DuplexConfig`."""
    return duplex.eot_threshold if rule == "llm" else duplex.turn_threshold
