"""End of turn from what the user said (issue 67, item 1): the answering LLM's probability of the end-of-turn token
after the user's words, read from PredGen's own pass, sets the silence the VAD waits for.

* The probability is the one a fresh full pass over the prompt gives (the row before the user's ``<|im_end|>``),
  read without an extra pass, and kept while the user's words are unchanged (real Qwen 0.5B).
* A complete question sounds complete, a sentence broken off at "in, um," does not (real Qwen 0.5B).
* The VAD's rule on real speech (Silero): a complete verdict ends the utterance at the pause, an incomplete one after
  the longest pause, no verdict after the ordinary silence; a verdict on words that did not hear the whole
  utterance is not used.
* A whole assist session with ``duplex.end_of_turn = llm`` (real Whisper, Qwen, Piper) ends the turn on the model's
  verdict and answers as the default does.
"""

import numpy as np
import pytest

from audio.io import SAMPLE_RATE
from audio.sources import ArraySource
from engine.answer.turn import EndOfTurnVerdicts, complete_threshold
from engine.config import Config

from .conftest import QUESTION

SYSTEM = "You are a helpful voice assistant. Answer briefly."


@pytest.fixture()
def pg(qwen_small):
    from engine.answer.predictive import PredGen

    p = PredGen(qwen_small, None, SYSTEM, max_tokens=24)
    p.warm()
    return p


def _fresh_eot(lm, prompt, end):
    """p(prompt[end] | prompt[:end]) from one pass over the whole prompt in an empty cache."""
    lm.crop(0)
    lm._session_owner = None  # the PredGen session must start over after this
    row = np.asarray(lm.eval(prompt[:end])[-1], np.float64)
    row -= row.max()
    return float(np.exp(row[prompt[end]]) / np.exp(row).sum())


def test_the_end_of_turn_probability_is_read_from_the_updates_own_pass(pg, qwen_small):
    text = "What is the capital of France?"
    n0 = pg.session.n_eval
    info = pg.update(text)
    assert info.p_eot is not None and 0.0 < info.p_eot <= 1.0
    prompt = pg.prompt_tokens(text)
    end = pg._user_end(prompt)
    assert qwen_small.detokenize([prompt[end]]).strip() == "<|im_end|>" or prompt[end] in qwen_small.eos_ids
    passes = pg.session.n_eval - n0
    assert passes == info.nfe  # no pass beyond the update's own
    # the same words again: the cache holds them, the probability is kept, not re-read
    again = pg.update(text)
    assert again.p_eot == info.p_eot
    assert _fresh_eot(qwen_small, prompt, end) == pytest.approx(info.p_eot, rel=0.05, abs=1e-3)


def test_a_complete_question_sounds_complete_and_a_broken_off_one_does_not(pg):
    done = pg.judge_turn("What is the weather going to be like in Paris tomorrow?")
    broken = pg.judge_turn("What is the weather going to be like in, um,")
    assert done is not None and broken is not None
    assert done > 0.5 > broken


def test_verdicts_stand_only_for_silences_their_words_heard():
    v = EndOfTurnVerdicts()
    assert v(1.0) is None
    v.put(0, 2.4, 0.9)  # a transcript of the audio up to 2.4 s
    assert v(2.0) == 0.9  # a silence from 2.0 s: every word before it was heard
    assert v(2.6) is None  # speech the transcript has not heard came before this silence
    v.put(0, 1.5, 0.1)  # an older transcript arriving late does not replace a newer one
    assert v(2.0) == 0.9
    cfg = Config()
    assert complete_threshold(cfg.duplex, "llm") == cfg.duplex.eot_threshold
    assert complete_threshold(cfg.duplex, "smart_turn") == cfg.duplex.turn_threshold


def _speech_then_silence(jfk_audio, seconds=3.0):
    """The first sentence of jfk (to its first long pause) followed by ``seconds`` of silence."""
    a = jfk_audio[: int(3.3 * SAMPLE_RATE)]
    return np.concatenate([a, np.zeros(int(seconds * SAMPLE_RATE), np.float32)])


def _ends(vad, x, block=480):
    out = []
    for pos in range(0, len(x) - block + 1, block):
        for ev in vad(x[pos:pos + block]):
            out.append((ev.kind, ev.t, (pos + block) / SAMPLE_RATE, getattr(ev, "p", None)))
    return out


@pytest.mark.parametrize("p, waits", [(0.9, "pause"), (0.05, "longest"), (None, "unknown")])
def test_the_vad_waits_the_silence_the_verdict_asks_for(runtime, jfk_audio, p, waits):
    from audio.vad import StreamingVAD

    x = _speech_then_silence(jfk_audio)
    vad = StreamingVAD(runtime.model("vad").path, min_silence_s=2.0, pause_s=0.2, verdict=lambda t: p,
                       turn_threshold=0.5, unknown_silence_s=0.6)
    evs = _ends(vad, x)
    pause = next(e for e in evs if e[0] == "pause")
    end = [e for e in evs if e[0] == "end"]
    assert len(end) == 1
    waited = end[0][2] - pause[1]  # audio time from the pause (the silence's start + pad) to the decision
    expect = {"pause": 0.0, "unknown": 0.4, "longest": 1.8}[waits]
    assert expect - 0.1 <= waited <= expect + 0.15
    turns = [e for e in evs if e[0] == "turn"]
    assert (turns[0][3] == p) if p is not None else not turns


def test_a_verdict_that_comes_late_ends_the_turn_when_it_comes(runtime, jfk_audio):
    from audio.vad import StreamingVAD

    x = _speech_then_silence(jfk_audio)
    clock = {}

    def verdict(t):
        now = vad.n / SAMPLE_RATE
        clock.setdefault("asked", now)
        return 0.9 if now >= clock["asked"] + 0.25 else None  # ready 0.25 s of audio after the question

    vad = StreamingVAD(runtime.model("vad").path, min_silence_s=2.0, pause_s=0.2, verdict=verdict,
                       turn_threshold=0.5, unknown_silence_s=0.6)
    evs = _ends(vad, x)
    end = next(e for e in evs if e[0] == "end")
    assert clock["asked"] + 0.25 <= end[2] <= clock["asked"] + 0.25 + 0.1


def test_an_assist_session_ends_the_turn_on_the_llms_verdict(small_gguf):
    """The embedded question played in real time through the whole session (real Whisper, Qwen 0.5B, Piper) with
    the LLM rule: the transcriber reports the verdict PredGen's pass read, the turn is ended by the model at the
    pause, and the question is answered."""
    from audio.io import load_audio
    from engine.config import load_config
    from engine.core.events import AnswerDone, SpeechEnded, TurnDecision, TurnMetrics
    from engine.runtime import Runtime
    from engine.session import Session, SessionOptions

    # a turn not judged yet waits 5 s here (not the ordinary 0.6 s), so a busy test machine still gets the verdict
    cfg = load_config(None, sets=["duplex.end_of_turn=llm", "duplex.eot_wait_s=5.0", "duplex.turn_max_silence_s=5.0",
                                  f"models.llm_target={small_gguf}"])
    audio = load_audio(QUESTION)
    evs = []
    src = ArraySource(audio, cfg.audio.block_s, realtime=True, trailing_silence_s=6.0)
    Session(cfg, Runtime(cfg, progress=False), SessionOptions(mode="assist", play=False), evs.append,
            source=src).run()
    decisions = [e for e in evs if isinstance(e, TurnDecision)]
    turns = [e for e in evs if isinstance(e, TurnMetrics) and e.by]
    ends = [e for e in evs if isinstance(e, SpeechEnded)]
    assert decisions and turns and ends
    last = turns[-1]
    assert last.rule == "llm" and last.by == "model" and last.p_complete >= cfg.duplex.eot_threshold
    assert ends[-1].t == pytest.approx(decisions[-1].t, abs=1e-6)  # ended where the verdict was asked: the pause
    answers = [e.text for e in evs if isinstance(e, AnswerDone)]
    assert answers and answers[-1].strip()
