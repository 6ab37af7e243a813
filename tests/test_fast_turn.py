"""The end of a turn without work that cannot change its result (issue 67, items 2 and 3).

* The final transcript is the latest hypothesis, with no decode at the end of speech, only when that hypothesis was
  decoded with the final's settings (the decode at the VAD's pause) up to the end of speech; on real audio the finals
  are exactly those of a decode at the end (scripted backends check the rule, real Whisper and VAD the result).
* PredGen skips its final verification when the final prompt is the one its candidate was generated from: the
  candidate is then greedy's answer as it is (real Qwen 0.5B and Piper: the answer's tokens are plain greedy
  decoding's, NFETFS 0); with another prompt it verifies as before.
"""

import dataclasses
import threading
import time

import numpy as np
import pytest

from audio.sources import ArraySource
from engine.asr.backend import BackendResult
from engine.asr.online_processor import OnlineASRProcessor
from engine.config import Config
from engine.core.events import FinalTranscript, PartialTranscript, Word
from engine.pipeline import AudioQueue

from .conftest import QUESTION, same_or_near_tie

ASR = Config().asr


def asr(**overrides):
    """The product's ``asr`` settings with ``overrides`` (each test that overrides one says why)."""
    return dataclasses.replace(ASR, **overrides)


def W(words, t0=0.0, step=0.5):
    return [Word(t0 + i * step, t0 + i * step + 0.4, " " + w) for i, w in enumerate(words.split())]


# -- the final transcript: the rule -------------------------------------------------------------------------------
class BeamFinals:
    """A scripted backend whose streaming decodes (``transcribe``: greedy) and final decodes (``transcribe_final``:
    beam search) give different words, as Whisper base can; it counts the decodes of each kind."""

    name = "scripted-beam"

    def __init__(self, greedy="turn the music town", beam="turn the music down"):
        self.greedy, self.beam = W(greedy), W(beam)
        self.calls: list[str] = []

    def transcribe(self, audio, prompt=""):
        self.calls.append("greedy")
        return BackendResult(self.greedy, [self.greedy[-1].end], {})

    def transcribe_final(self, audio, prompt=""):
        self.calls.append("beam")
        return BackendResult(self.beam, [self.beam[-1].end], {})


class GreedyFinals(BeamFinals):
    """The same backend declaring that its final decode is its streaming decode (greedy finals:
    :attr:`engine.asr.whisper_ar.WhisperARBackend.final_is_partial`)."""

    final_is_partial = True


def _grow(p, seconds):
    p.insert_audio_chunk(np.zeros(int(16000 * seconds), np.float32))


def test_a_greedy_hypothesis_of_all_the_speech_is_not_the_final_of_a_beam_search_final():
    """A streaming (greedy) update that heard all the speech and the silence after it is not the final when the final
    decodes with beam search: the end of speech decodes it with the final's settings. When the backend's final decode
    is its streaming decode (greedy finals), that update is the final, with no decode."""
    be = BeamFinals()
    p = OnlineASRProcessor(be, ASR)
    _grow(p, 2.5)
    p.process_iter()  # a streaming update: its audio reaches past the end of speech (1.9 s)
    assert not p.final_covers(1.9) and p.hypothesis == "turn the music town"
    p.finish(speech_end=1.9)
    assert be.calls == ["greedy", "beam"] and p.text == "turn the music down"
    assert not p.final_reused and p.final_decodes_skipped == 0

    be = GreedyFinals()
    p = OnlineASRProcessor(be, ASR)
    _grow(p, 2.5)
    p.process_iter()
    assert p.final_covers(1.9)
    p.finish(speech_end=1.9)
    assert be.calls == ["greedy"] and p.text == "turn the music town" and p.final_reused


def test_the_decode_at_the_pause_is_the_final_when_the_speech_ends_there():
    """The decode up to the VAD's pause uses the final's settings; when the VAD confirms the end of speech at the
    pause, it is the final text (not decoded again); speech after it (a later end) is decoded again."""
    be = BeamFinals()
    p = OnlineASRProcessor(be, ASR)
    _grow(p, 1.5)
    p.process_iter()
    _grow(p, 1.0)
    p.process_iter(until=2.2)  # the pause: silence since 2.0 s plus the VAD's pad
    assert be.calls == ["greedy", "beam"] and p.final_covers(2.2) and not p.final_covers(2.4)
    p.finish(speech_end=2.2)
    assert be.calls == ["greedy", "beam"] and p.final_reused and p.text == "turn the music down"

    be = BeamFinals()
    p = OnlineASRProcessor(be, ASR)
    _grow(p, 2.5)
    p.process_iter(until=1.2)  # a pause, then the speaker went on
    p.finish(speech_end=2.4)
    assert be.calls == ["beam", "beam"] and not p.final_reused


def test_a_streaming_decode_is_the_final_only_with_the_same_padded_retry():
    """A backend without a final decode of its own decodes partials and finals alike, except for the padded re-decode
    of a decode that fails the guards (``partial_retry`` / ``final_retry``): a partial is the final's decode only when
    both ask for the same."""

    class Plain:
        name = "plain"
        supports_padded_retry = True

        def transcribe(self, audio, prompt="", padded_retry=True):
            return BackendResult(W("hello there"), [0.9], {})

    for partial_retry, final_retry, same in ((False, False, True), (True, True, True), (False, True, False)):
        p = OnlineASRProcessor(Plain(), asr(partial_retry=partial_retry, final_retry=final_retry))
        _grow(p, 2.0)
        p.process_iter()
        assert p.final_covers(1.5) is same


def test_whisper_ar_declares_its_final_decode_the_partial_one_only_for_greedy_finals():
    from engine.asr.whisper_ar import WhisperARBackend

    assert WhisperARBackend(None, final_beam_size=1).final_is_partial
    assert not WhisperARBackend(None, final_beam_size=3).final_is_partial


# -- the final transcript on real audio ---------------------------------------------------------------------------
class LockstepQueue(AudioQueue):
    """The capture → ASR queue of a transcriber made deterministic: each audio block reaches the ASR thread together
    with the VAD's boundaries in it, and the next block only once the ASR thread has done all its work on them (it
    waits for more). A source that says it is real time is then transcribed as by an ASR infinitely faster than real
    time: every decision (an update due, held in a silence, the pause's decode) depends on the audio alone."""

    def __init__(self):
        super().__init__()
        self.held: list = []
        self.idle = threading.Event()

    def put(self, item, seconds=0.0, timeout=None):
        if item[0] in ("audio", "eof") and self.held:
            self._publish(wait=item[0] == "audio")
        self.held.append((item, seconds))
        if item[0] == "eof":
            self._publish(wait=False)
        return True

    def _publish(self, wait):
        self.idle.clear()
        with self._cv:
            for item, seconds in self.held:
                self._items.append((item, seconds))
                self._seconds += seconds
            self._cv.notify_all()
        self.held = []
        if wait:
            assert self.idle.wait(300), "the ASR thread did not come back for more audio"

    def get(self, timeout=None):
        with self._cv:
            if not self._items:
                self.idle.set()
        return super().get(timeout)


def _transcribe(runtime, audio, monkeypatch, decode_at_end: bool):
    """Stream ``audio`` through the product's transcriber (its VAD, Whisper backend and ``asr`` settings; no second
    pass, whose revisions would change later prompts with the machine's timing) in lockstep; ``decode_at_end``: every
    final is decoded at the end of speech, as if no hypothesis were the final's. Returns (finals, last hypothesis of
    each utterance, stats, final decodes at the end of speech)."""
    from engine.asr.transcriber import StreamingTranscriber
    from engine.asr.whisper_ar import WhisperARBackend

    a = runtime.cfg.asr
    backend = WhisperARBackend(runtime.whisper_ssd(), window=runtime.window_policy(), guard=runtime.decode_guard(),
                               beam_size=a.beam_size, final_beam_size=a.final_beam_size)  # fresh: no state kept
    assert a.final_beam_size > 1 and not backend.final_is_partial  # partials greedy, finals beam search
    end_decodes = []
    real_finish = OnlineASRProcessor._finish

    def finish(self, speech_end=None, cut=False):
        if decode_at_end:
            self.decoded_as_final = False  # no hypothesis is taken as the final: today's decode at the end
        n = len(self.updates)
        out = real_finish(self, speech_end, cut)
        end_decodes.append(len(self.updates) - n)
        return out

    monkeypatch.setattr(OnlineASRProcessor, "_finish", finish)
    events = []
    source = ArraySource(audio, Config().audio.block_s, realtime=False, trailing_silence_s=1.0)  # not paced
    st = StreamingTranscriber(source, backend, runtime.vad(), events.append, asr(revise_max_s=0.0))
    # transcribed as live (an update waits while the VAD hears a silence), paced by the lockstep queue
    st.realtime, st.q = True, LockstepQueue()
    stats = st.run()
    monkeypatch.setattr(OnlineASRProcessor, "_finish", real_finish)
    finals = [e for e in events if isinstance(e, FinalTranscript)]
    hyps = {}
    for e in events:
        if isinstance(e, PartialTranscript):
            hyps[e.utterance] = e.hypothesis
    return finals, hyps, stats, end_decodes


@pytest.mark.parametrize("recording", ["jfk", "question"])
def test_finals_taken_from_the_pause_decode_are_exactly_the_finals_decoded_at_the_end(runtime, jfk_audio,
                                                                                      monkeypatch, recording):
    """jfk.flac (four utterances, with acoustic context between them) and the assistant's embedded question through
    the real VAD and Whisper base (greedy partials, beam-3 finals): every final that is the pause's decode (no
    decode at the end of speech) has exactly the text and words the decode at the end gives on the same audio, and
    it is the last hypothesis the partials showed (what PredGen speculated on)."""
    from audio.io import load_audio

    audio = jfk_audio if recording == "jfk" else load_audio(QUESTION)
    fast, hyps, stats, end_fast = _transcribe(runtime, audio, monkeypatch, decode_at_end=False)
    slow, _, slow_stats, end_slow = _transcribe(runtime, audio, monkeypatch, decode_at_end=True)
    assert len(fast) == len(slow) == len(stats.utterances) >= (4 if recording == "jfk" else 1)
    for f, s in zip(fast, slow):
        assert f.text == s.text and f.words == s.words and (f.t_start, f.t_end) == (s.t_start, s.t_end)
    reused = [u for u in stats.utterances if u.final_reused]
    # as live, every utterance of these two was decoded at its pause, where its speech then ended
    assert len(reused) == stats.final_reused == len(stats.utterances) and slow_stats.final_reused == 0
    assert all(n == 0 for n, u in zip(end_fast, stats.utterances) if u.final_reused)
    assert sum(end_slow) >= sum(end_fast) + len(reused)  # each reused final is a decode the end did not repeat
    for u in reused:
        assert hyps[u.index] == fast[u.index].text
    text = " ".join(f.text for f in fast).lower()
    assert ("fellow americans" in text and "for your country" in text) if recording == "jfk" else (
        "quick tip for staying focused" in text)


# -- PredGen: no verification on the candidate's own prompt -------------------------------------------------------
SYSTEM = "You are a helpful voice assistant. Answer briefly."
Q = "What are three good ways to stay healthy during a busy work week?"


@pytest.fixture()
def pg_factory(qwen_small, runtime):
    from engine.answer.predictive import PredGen

    def make(tts=False, **kw):
        pg = PredGen(qwen_small, runtime.tts() if tts else None, SYSTEM, max_tokens=40, **kw)
        pg.warm()
        return pg
    return make


def _greedy(pg_factory, text):
    """Plain greedy decoding (engine.llm.generate.greedy_stream) of PredGen's prompt for ``text``, after the same
    warm-up (the system prompt in the cache): the cascade's answer. Returns (prompt, tokens)."""
    from engine.llm.generate import greedy_stream

    ref = pg_factory()
    prompt = ref.prompt_tokens(text)
    return prompt, list(greedy_stream(ref.session, prompt, ref.max_tokens, ref.lm.eos_ids))


def test_the_final_on_the_candidates_own_prompt_plays_its_audio_at_once_and_is_greedys_answer(pg_factory,
                                                                                              monkeypatch):
    """The user has said everything and the last update ran on it: the final is that prompt, so the candidate is
    greedy's answer — no verification pass, the pre-synthesised first sentence played at once (NFETFS 0), and the
    answer's tokens are plain greedy decoding's, token for token, the rest decoded from the cache the update left."""
    from engine.answer.predictive import PredGen

    _, ref = _greedy(pg_factory, Q)
    pg = pg_factory(tts=True, tokens_per_update=40)
    pg.update(Q)
    c = pg.cand
    assert c.first_len and c.audio is not None and c.prompt == pg.prompt_tokens(Q)
    def no_refill(self, *args):
        raise AssertionError("the cache the update left is used as it is")

    monkeypatch.setattr(PredGen, "_refill", no_refill)
    n0 = pg.session.n_eval
    got = []
    info = pg.finish(Q, on_sentence=lambda i, t, a, p: got.append((i, t, a, p)))
    assert not info.verified and info.nfetfs == 0 and info.presynth_used and info.accepted == len(c.response)
    assert got[0][2] is c.audio and got[0][3] is True and info.answer.startswith(got[0][1])
    assert info.answer_tokens == ref and len(ref) > len(c.response)
    assert pg.session.n_eval - n0 == info.gen_tokens  # one pass per token after the candidate, none before


def test_a_candidate_cut_by_its_budget_continues_from_its_next_token(pg_factory):
    """An update that spent its token budget before the first sentence leaves all of P ⊕ R in the cache and the
    greedy token after R: the final on the same prompt goes on from there (no verification, no pass re-reading R),
    and the answer is greedy decoding's."""
    _, ref = _greedy(pg_factory, Q)
    pg = pg_factory(tokens_per_update=3)
    pg.update(Q)
    c = pg.cand
    assert len(c.response) == 3 and c.first_len is None and c.next_token is not None
    assert pg.session.tokens == c.prompt + c.response
    n0, t0 = pg.session.n_eval, pg.session.n_eval_tokens
    info = pg.finish(Q)
    assert not info.verified and not info.presynth_used and info.answer_tokens == ref
    # every pass evaluates one new token (none re-reads the candidate): those up to the first sentence are NFETFS
    assert pg.session.n_eval_tokens - t0 == pg.session.n_eval - n0 == info.nfetfs + info.gen_tokens


def test_a_cache_moved_on_is_refilled_after_the_first_audio(pg_factory, qwen_small):
    """Something else used the LLM between the update and the final (its cache no longer holds the candidate): the
    first sentence is still played at once (NFETFS 0), and one pass refills the cache before the rest."""
    from engine.llm.generate import LMSession

    prompt, ref = _greedy(pg_factory, Q)
    pg = pg_factory(tts=True, tokens_per_update=40)
    pg.update(Q)
    LMSession(qwen_small).prefill(qwen_small.tokenize("Something else entirely."))
    info = pg.finish(Q)
    assert not info.verified and info.nfetfs == 0 and info.presynth_used
    same_or_near_tie(qwen_small, prompt, ref, info.answer_tokens)  # the refill re-reads R in one batched pass


def test_a_final_that_differs_from_the_candidates_prompt_is_verified(pg_factory, qwen_small):
    """The final transcript is not what the last update ran on (its last words came after it): the verification
    runs (at least one pass before the first sentence) and the answer is greedy decoding's of the final prompt."""
    final = Q
    partial = " ".join(Q.split()[:-2])
    prompt, ref = _greedy(pg_factory, final)
    pg = pg_factory(tts=True, tokens_per_update=40)
    pg.update(partial)
    assert pg.cand.prompt != prompt
    info = pg.finish(final)
    assert info.verified and info.nfetfs >= 1
    same_or_near_tie(qwen_small, prompt, ref, info.answer_tokens)


def test_the_assistant_answers_the_last_partials_text_without_verifying(qwen_small, runtime, pg_factory):
    """The conversation worker (what ``specvoice assist`` drives): a partial whose text the final transcript then
    repeats (the pause's decode is the final) — the answer plays the pre-synthesised first sentence with NFETFS 0, and
    its text is greedy decoding's."""
    from engine.answer.assistant import Conversation, PredGenAssistant
    from engine.core.events import AnswerAudio, AnswerDone

    _, ref = _greedy(pg_factory, Q)
    events, metrics = [], []
    a = PredGenAssistant(qwen_small, runtime.tts(), SYSTEM, max_tokens=40, emit=events.append, tokens_per_update=40)
    a.warm()
    conv = Conversation(a, lambda u, t, m: metrics.append(m))
    conv.on_partial(0, Q)
    deadline = time.monotonic() + 120
    while a.updates_this_turn < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert conv.wait_idle(timeout=120)  # the update ran to its end (first sentence generated and synthesised)
    conv.on_final(0, Q)
    assert conv.wait_idle(timeout=120)
    conv.close()
    m = metrics[0]
    assert m.verified is False and m.nfetfs == 0 and m.presynth_used and m.speculative_updates == 1
    done = [e for e in events if isinstance(e, AnswerDone)]
    assert done and done[0].text == qwen_small.detokenize(ref).strip() and not done[0].interrupted
    assert any(isinstance(e, AnswerAudio) for e in events)
