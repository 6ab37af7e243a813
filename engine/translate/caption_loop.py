"""The caption thread's job policy: every final transcript is translated in order, then only the newest partial.

:class:`CaptionLoop` consumes transcript events (:mod:`engine.core.events`) and emits ``Caption`` events; a
partial re-translation yields the CPU to the streaming ASR (:mod:`engine.core.cpu`) and is cancelled when a newer
job is waiting, so captions never hold back the transcript. Each transcript is translated from the language it was
decoded in (the event's ``language``, identified per utterance under ``asr.language = "auto"``); speech already in
the target language is its own caption.
"""

from __future__ import annotations

import threading
import time

from engine.translate.languages import language_code, language_name
from engine.translate.stream_metrics import SSBDUpdate
from engine.translate.translator import same_source


def set_source_language(translator, language: str) -> None:
    """Tell ``translator`` (and every translator it wraps: the fidelity guard, the sentence splitter) that its
    source text is in ``language`` (an ISO 639-1 code or a name; "" = English)."""
    name = language_name(language) if language else "English"
    obj = translator
    while obj is not None:
        obj.source_language = name
        obj = vars(obj).get("inner")


def untranslated(text: str, final: bool) -> SSBDUpdate:
    """The update of a caption that needs no translation (the speech is in the target language): the text itself."""
    return SSBDUpdate(source=text, tokens=[], text=text, stable_text=text, tail_text="", draft=0, accepted=0,
                      output=0, forward_passes=0, compute_s=0.0, final=final)


class CaptionLoop:
    """The caption thread of ``specvoice caption``: every final transcript is translated, in order, before the
    newest partial (older partials are stale and replaced); the translator is reset at each new utterance. A final
    transcript cancels the partial translation in flight (its update is not shown), so the final caption does not
    wait for a stale partial — unless that partial is the final's own text (the ASR's decode at the pause usually
    is): then it runs on, and the final reuses its output (:func:`engine.translate.biased_retranslation.reuse_final`). The end of speech
    (``SpeechEnded``) already cancels an older partial in flight when a newer one of the utterance waits: the last
    partial, usually the final's text, starts while the ASR still decodes the final transcript.

    CPU sharing (engine.core.cpu): while the utterance is spoken, a partial update waits out every streaming-ASR decode
    before each forward pass (``yield_to_asr``); after its end of speech and for finals it never waits.

    ``specvoice caption``, the GUI's caption mode and ``specvoice bench caption`` all run their captions through
    this loop (:func:`engine.runtime.build_translator` builds the translator).

    Args:
        translator: a live translator (``translate_ssbd``, ``reset``), e.g. :func:`guarded` SSBD.
        on_caption: called as ``on_caption(caption, update)`` after each update (on the caption thread):
            ``caption`` the :class:`engine.core.events.Caption` to show (``source_stable`` = the ASR's committed words
            of a partial, the whole source of a final), ``update`` the translator's
            :class:`engine.translate.stream_metrics.SSBDUpdate`.
        yield_to_asr: partial updates of an utterance still spoken pause during ASR decodes.
        on_error: called once with a one-line message (on the caption thread) when the translator raises; the
            loop then stops (``error`` holds the message; later events are ignored).
        source: what a partial update translates — "hypothesis" (default, ``caption.source``;
            ``PartialTranscript.hypothesis``: what the final transcript would be if speech ended now, so a correction
            the final decode makes to earlier words is already in the draft) or "partial" (the partial transcript:
            committed + tentative words; bench/results/caption.json has both).

    Raises:
        ValueError: an unknown ``source``.
    """

    def __init__(self, translator, on_caption, yield_to_asr: bool = True, on_error=None, source: str = "hypothesis"):
        import collections

        from engine.core.events import PARTIAL_SOURCES

        if source not in PARTIAL_SOURCES:
            raise ValueError(f"caption source must be one of {PARTIAL_SOURCES}, got {source!r}")
        self.source = source
        self.translator = translator
        self.on_caption = on_caption
        self.on_error = on_error
        self.error: str | None = None
        self._cond = threading.Condition()
        self._finals: collections.deque = collections.deque()
        self._partial = None
        self._stop = False
        self._utt = None
        self._running = None  # (utterance, text) of the partial being translated
        self._job = None  # the job being translated
        self._cancel = threading.Event()
        self._ended: set = set()  # utterances whose end of speech was seen
        self._language = ""  # the source language the translator was last told ("" = English, its default)
        self.yield_to_asr = yield_to_asr
        self.cancelled = 0  # partial translations cut short by a final transcript or the end of speech
        self._thread = threading.Thread(target=self._run, name="caption", daemon=True)
        self._thread.start()

    def on_event(self, ev) -> None:
        """Feed a transcriber event (:class:`engine.core.events.PartialTranscript` / ``FinalTranscript``; a
        ``RevisedTranscript`` is not re-captioned: the caption of the final stays)."""
        from engine.core.events import FinalTranscript, PartialTranscript, SpeechEnded

        if self.error is not None:
            return
        if isinstance(ev, SpeechEnded):
            with self._cond:
                self._ended.add(ev.utterance)
                run, new = self._running, self._partial
                if (run is not None and new is not None and run[0] == ev.utterance == new[0]
                        and not same_source(run[1], new[1])):
                    self._cancel.set()  # the newer partial is the one the final will most likely equal
        elif isinstance(ev, PartialTranscript) and ev.text:
            text = ev.source(self.source)
            with self._cond:
                self._partial = (ev.utterance, text, False, time.monotonic(), ev.committed.strip(),
                                 getattr(ev, "language", ""))
                self._cond.notify()
        elif isinstance(ev, FinalTranscript) and ev.text:
            with self._cond:
                self._finals.append((ev.utterance, ev.text, True, time.monotonic(), ev.text,
                                     getattr(ev, "language", "")))
                self._partial = None
                self._ended.discard(ev.utterance)
                run = self._running
                if run is None or run[0] != ev.utterance or not same_source(run[1], ev.text):
                    self._cancel.set()
                self._cond.notify()

    def _pause(self) -> None:
        from engine.core.cpu import ASR

        ASR.wait_idle(cancel=self._cancel)

    def close(self, timeout: float | None = None) -> None:
        """Translate the finals already queued, then end the thread (waits at most ``timeout`` seconds)."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout)

    def abort(self) -> None:
        """Drop the queued jobs, cut a partial in flight short, and end the thread without waiting."""
        with self._cond:
            self._finals.clear()
            self._partial = None
            self._stop = True
            self._cancel.set()
            self._cond.notify()

    @property
    def busy(self) -> bool:
        """A job is queued or being translated."""
        with self._cond:
            return bool(self._finals) or self._partial is not None or self._job is not None

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._finals and self._partial is None and not self._stop:
                    self._cond.wait()
                if self._finals:
                    job = self._finals.popleft()
                elif self._partial is not None and not self._stop:
                    job, self._partial = self._partial, None
                else:
                    return
                self._cancel.clear()
                self._running = None if job[2] else (job[0], job[1])
                self._job = job
            utt, text, final, wall, committed, language = job
            try:
                if self._utt != utt:
                    self.translator.reset()
                    self._utt = utt
                if language != self._language:  # translate from the language the speech was decoded in
                    set_source_language(self.translator, language)
                    self._language = language
                target = language_code(getattr(self.translator, "target", "") or "")
                if language and target == language:
                    u = untranslated(text, final)
                elif final:
                    u = self.translator.translate_ssbd(text, final=True)
                elif self.yield_to_asr and utt not in self._ended:
                    u = self.translator.translate_ssbd(text, final=False, cancel=self._cancel, pause=self._pause)
                else:
                    u = self.translator.translate_ssbd(text, final=False, cancel=self._cancel)
                with self._cond:
                    self._running = None
                if not final and self._cancel.is_set():
                    self.cancelled += 1
                    continue
                from engine.core.events import Caption

                self.on_caption(Caption(utt, text, u.stable_text, u.tail_text, final, u.compute_s,
                                        source_stable=committed), u)
            except Exception as e:
                self.error = f"{type(e).__name__}: {e}"
                with self._cond:
                    self._finals.clear()
                    self._job = None
                if self.on_error is not None:
                    self.on_error(self.error)
                return
            finally:
                with self._cond:
                    self._job = None
