"""PredGen on the real Qwen 0.5B and the real Piper voice: verifiers, losslessness, KV reuse, cancellation,
the pre-synthesised-audio path, and the conversation worker."""

import threading
import time

import numpy as np
import pytest

from engine.answer.predictive import PredGen, first_sentence

from .conftest import same_or_near_tie

SYSTEM = "You are a helpful voice assistant. Answer briefly."
QUESTION = "What are three good ways to stay healthy during a busy work week?"


def partials(text):
    words = text.split()
    return [" ".join(words[:i]) for i in range(2, len(words))]


@pytest.fixture()
def pg_factory(qwen_small, runtime):
    def make(verifier="greedy", tts=False, **kw):
        pg = PredGen(qwen_small, runtime.tts() if tts else None, SYSTEM, verifier=verifier, max_tokens=40, **kw)
        pg.warm()
        return pg
    return make


def test_greedy_predgen_is_lossless(qwen_small, pg_factory):
    pg = pg_factory("greedy")
    for p in partials(QUESTION):
        pg.update(p)
    prompt = pg.prompt_tokens(QUESTION)  # before finish() adds the turn to the history
    got = pg.finish(QUESTION)
    ref = pg_factory("greedy").finish(QUESTION)  # no updates = the plain cascade, same system prompt
    assert len(got.answer_tokens) > 5
    same_or_near_tie(qwen_small, prompt, ref.answer_tokens, got.answer_tokens)
    assert ref.nfetfs > 1  # the cascade needs a pass per token of the first sentence


def test_verification_reuses_kv_and_accepted_tokens_are_not_recomputed(qwen_small, pg_factory):
    pg = pg_factory("greedy", tokens_per_update=6)
    pg.update("What are three good ways to stay")
    cand = list(pg.cand.response)
    assert len(cand) >= 1
    s = pg.session
    prompt = pg.prompt_tokens("What are three good ways to stay healthy")
    common = next(i for i, (a, b) in enumerate(zip(s.tokens + [-1], prompt)) if a != b)
    n0, e0 = s.n_eval_tokens, s.n_eval
    k, nxt, nfe, _ = pg.verify("…", prompt, cand, None, "")
    assert nfe == 1 and s.n_eval - e0 == 1  # ONE forward pass
    assert s.n_eval_tokens - n0 == (len(prompt) - common) + len(cand)  # only the uncached part + R
    assert s.tokens == prompt + cand[:k] and qwen_small.n_past == len(prompt) + k  # KV of P ⊕ R[:k] kept
    e1 = s.n_eval_tokens
    out, nfe2, _ = pg._extend(list(cand[:k]), nxt, 3, None, stop_at_first=False)
    assert s.n_eval_tokens - e1 == nfe2 == len(out) - k  # one token per step, nothing re-evaluated


def test_top_k_accepts_at_least_as_much_as_greedy(pg_factory):
    g, t = pg_factory("greedy"), pg_factory("top_k", top_k=3)
    g.update("Tell me a fun fact about")
    t.cand = g.cand
    g_k = g.verify("x", g.prompt_tokens("Tell me a fun fact about the"), g.cand.response, None, "")[0]
    t_k = t.verify("x", t.prompt_tokens("Tell me a fun fact about the"), g.cand.response, None, "")[0]
    assert t_k >= g_k


def test_cancelled_update_stops_early(pg_factory):
    pg = pg_factory("greedy", tokens_per_update=30)
    cancel = threading.Event()
    cancel.set()
    st = pg.update("Explain how a rainbow forms", cancel)
    assert st.cancelled and st.generated <= 1


def test_presynthesised_first_sentence_is_played_as_is(pg_factory):
    pg = pg_factory("greedy", tts=True, tokens_per_update=40)
    pg.update(QUESTION)  # the user has said everything; they just have not stopped yet
    assert pg.cand.first_len and pg.cand.audio is not None and len(pg.cand.audio) > 1000
    audio_obj = pg.cand.audio
    got = []
    info = pg.finish(QUESTION, on_sentence=lambda i, t, a, p: got.append((i, t, a, p)))
    assert info.presynth_used and info.nfetfs == 0  # the candidate's own prompt: nothing to verify
    assert got[0][0] == 0 and got[0][2] is audio_obj and got[0][3] is True
    assert len(got) >= 1 and info.answer.startswith(got[0][1])


def test_reflection_paths(pg_factory, monkeypatch):
    pg = pg_factory("reflection", tokens_per_update=40)
    pg.update("Give me one tip for better sleep")
    c = pg.cand
    assert c.first_len
    # the judge's verdict on cases with a known answer (one real forward pass each)
    assert pg._judge_yes("What is the capital of France", "The capital of France is Paris.")
    assert not pg._judge_yes("What is the capital of France", "Bananas are rich in potassium.")
    monkeypatch.setattr(pg, "_judge_yes", lambda p, a: True)
    k, nxt, nfe, _ = pg.verify("x", pg.prompt_tokens("Give me one tip for better sleep at night"), c.response,
                               c.first_len, c.first_text)
    assert k == c.first_len and nfe == 2  # judge + one pass filling the KV cache
    monkeypatch.setattr(pg, "_judge_yes", lambda p, a: False)
    k2, _, nfe2, _ = pg.verify("x", pg.prompt_tokens("Give me one tip for better sleep at night"), c.response,
                               c.first_len, c.first_text)
    assert nfe2 == 2  # judge, then the greedy fallback


def test_first_sentence_boundary(qwen_small):
    ids = qwen_small.tokenize("Sure thing! Here is more")
    n, s = first_sentence(qwen_small.detokenize, ids)
    assert s == "Sure thing!" and qwen_small.detokenize(ids[:n]).strip() == "Sure thing!"
    assert first_sentence(qwen_small.detokenize, qwen_small.tokenize("No boundary yet")) is None


def test_first_piece_may_be_a_clause(qwen_small):
    ids = qwen_small.tokenize("As a language model, I cannot travel. Sorry.")
    n, s = first_sentence(qwen_small.detokenize, ids, first_clause_words=4)
    assert s == "As a language model," and qwen_small.detokenize(ids[:n]).strip() == s
    # too short a clause, or clause splitting off: the whole sentence
    assert first_sentence(qwen_small.detokenize, ids, first_clause_words=5)[1] == "As a language model, I cannot travel."
    assert first_sentence(qwen_small.detokenize, ids)[1] == "As a language model, I cannot travel."
    # the clause needs the space after its comma: not complete yet
    assert first_sentence(qwen_small.detokenize, qwen_small.tokenize("As a language model,"), 4) is None


def test_conversation_speculates_then_answers(qwen_small, runtime):
    from engine.answer.assistant import Conversation, PredGenAssistant
    from engine.core.events import AnswerAudio, AnswerDone

    events = []
    a = PredGenAssistant(qwen_small, runtime.tts(), SYSTEM, max_tokens=30, emit=events.append,
                         tokens_per_update=6, speculation_threads=1)
    a.warm()
    metrics = []
    conv = Conversation(a, lambda u, t, m: metrics.append(m))
    for i, p in enumerate(partials("Name a planet in our solar system")[:3]):
        conv.on_partial(0, p)
        if i == 0:  # the worker thread takes the first partial up (however loaded the machine is)
            deadline = time.monotonic() + 60
            while a.updates_this_turn < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
        time.sleep(0.3)
    conv.on_final(0, "Name a planet in our solar system.")
    assert conv.wait_idle(timeout=120)
    conv.close()
    assert metrics and metrics[0].speculative_updates >= 1 and metrics[0].nfetfs >= 1
    assert any(isinstance(e, AnswerAudio) for e in events)
    done = [e for e in events if isinstance(e, AnswerDone)]
    assert done and done[0].text and not done[0].interrupted
    assert a.history[-2]["content"] == "Name a planet in our solar system."  # multi-turn memory


TOPICS = ["the moon", "bread", "rain", "chess", "music", "a bicycle", "the ocean", "coffee", "trees", "snow"]


@pytest.mark.parametrize("kind", ["cascade", "predgen"])
def test_a_long_conversation_fits_context_and_reuses_kv_exactly(runtime, kind):
    """History is trimmed oldest-first so prompt + answer fit n_ctx; every answer equals a fresh prefill of the
    same trimmed prompt (the reused KV cache of the kept turns is exact)."""
    from engine.answer.assistant import Assistant, PredGenAssistant
    from engine.llm.generate import LMSession, greedy_stream

    from .conftest import same_or_near_tie

    lm = runtime.llm("llm_draft", instance="ctx320", n_ctx=320)
    fresh = runtime.llm("llm_draft", instance="ctx320_fresh", n_ctx=320)
    cls = PredGenAssistant if kind == "predgen" else Assistant
    a = cls(lm, None, SYSTEM, max_tokens=20)
    a.warm()
    starts, reuse = [], []
    turns = 9  # more than n_ctx = 320 holds (about 5 turns): the history is trimmed, the kept prefix moves
    for turn in range(turns):
        q = f"Say one short thing about {TOPICS[turn % len(TOPICS)]}."
        if kind == "predgen":
            a.speculate(turn, " ".join(q.split()[:4]))
        sys_prompt = a.pg.system_prompt if kind == "predgen" else a.system_prompt
        msgs, prompt = a.chat.prompt(sys_prompt, q)
        assert len(prompt) + 20 <= 320
        assert msgs[0]["role"] == "system" and msgs[0]["content"] == sys_prompt  # the system prompt is kept
        assert msgs[1]["role"] in ("user", "assistant") and (len(msgs) == 2 or msgs[1]["role"] == "user")
        starts.append(a.chat.start)
        session = a.pg.session if kind == "predgen" else a.session
        cached = list(session.tokens)
        reuse.append(next((i for i, (x, y) in enumerate(zip(cached, prompt)) if x != y), min(len(cached), len(prompt))))
        text, m = a.answer(turn, q)
        assert text
        if turn % 5 == 4 or turn == turns - 1:
            ref = list(greedy_stream(LMSession(fresh), prompt, 20, fresh.eos_ids, threading.Event()))
            if fresh.detokenize(ref).strip() != text:
                same_or_near_tie(fresh, prompt, ref, lm.tokenize(text))
    assert len(a.history) == 2 * turns  # everything said is remembered, only the LM's window is trimmed
    assert starts[-1] > 0  # trimming happened
    assert len(set(starts)) < turns // 2  # with hysteresis: the kept prefix changes rarely, so the KV cache is reused
    assert sum(r > 50 for r in reuse) >= turns * 3 // 4  # most turns reuse the cached conversation


def test_odd_partial_streams_give_a_result_or_a_clear_skip(tmp_path, pg_factory):
    """Empty streams, one partial, punctuation-only and non-English partials, rewrites: never a traceback."""
    import json

    from bench.predgen_bench import load_streams, simulate

    data = {"empty": [], "dots": [["...", 0.5]], "bad": [[1, "x"], None],
            "one": [["What is two plus two?", 1.2]],
            "odd": [["...", 0.3], ["Wie spät", 0.8], ["What time", 1.0], ["What time is it in Tokyo?", 2.0]],
            "rewrite": [["Tell me about the see", 0.6], ["Tell me about the sea.", 1.4], ["Tell me about the sea.", 1.3]]}
    path = tmp_path / "streams.json"
    path.write_text(json.dumps(data))
    streams, skipped = load_streams(str(path), 10)
    assert {s["prompt"] for s in skipped} == {"empty", "dots", "bad"}
    assert [len(s) for s in streams] == [1, 4, 2]  # the out-of-order final is dropped, its earlier twin kept
    for stream in streams:
        r = simulate(pg_factory("greedy"), stream, speculate=True)
        assert r["answer"] and r["final"] == stream[-1][0]
    with pytest.raises(SystemExit, match="cannot read"):
        load_streams(str(tmp_path / "missing.json"), 10)


def test_update_gives_the_cpu_back_within_one_prefill_chunk(pg_factory):
    """A newer partial arriving mid-update stops it after the pre-fill chunk in flight: the candidate is kept, the
    cache holds a prefix of the new prompt, and the next update continues from there."""
    from engine.answer.predictive import PREFILL_CHUNK

    pg = pg_factory("greedy", tokens_per_update=4)
    pg.update("Tell me")
    before = list(pg.cand.response)
    long_partial = "Tell me " + "about the long history of the small harbour town and its fishing boats " * 3
    cancel = threading.Event()
    passes = []
    real_prefill = pg.session.prefill

    def spy(prompt):
        passes.append(len(prompt))
        cancel.set()  # the newer partial arrives while the first chunk is evaluated
        return real_prefill(prompt)

    pg.session.prefill = spy
    st = pg.update(long_partial, cancel)
    pg.session.prefill = real_prefill
    prompt = pg.prompt_tokens(long_partial)
    assert len(prompt) > 4 * PREFILL_CHUNK
    assert st.cancelled and st.generated == 0 and len(passes) == 1 and st.nfe == 1
    assert pg.cand.response == before  # R_{i-1} kept for the next verification
    assert pg.session.tokens == prompt[: passes[0]]
    n0 = pg.session.n_eval_tokens
    pg.update(long_partial)  # continues from the cached chunk, nothing before it re-evaluated
    assert pg.session.n_eval_tokens - n0 <= (len(prompt) - passes[0] + 1) + len(before) + 4  # rest, R, new tokens


def test_speculation_waits_while_an_asr_decode_runs(pg_factory):
    """engine.core.cpu policy: no speculative forward pass starts while a streaming-ASR decode is in flight."""
    from engine.core.cpu import ASR

    pg = pg_factory("greedy", tokens_per_update=3)
    starts = []
    real_eval = pg.session.eval

    def spy(tokens):
        starts.append(ASR.busy)  # was an ASR decode in flight as this pass started?
        return real_eval(tokens)

    pg.session.eval = spy
    hold = threading.Event()

    def asr_decode():
        with ASR.decoding():
            hold.set()
            time.sleep(0.6)  # the decode's length (speculation waits up to 2 s for one to end)

    th = threading.Thread(target=asr_decode)
    th.start()
    hold.wait(5)
    st = pg.update("Name three colours of the", threading.Event())
    th.join()
    assert st.nfe >= 1 and starts and not any(starts)  # every pass started after the decode
    starts.clear()
    pg.update("Name three colours of the rainbow")  # no decode in flight: no waiting
    assert starts


def test_predgen_acceptance_goes_through_the_core(pg_factory, monkeypatch):
    """Break engine.core.verify's greedy rule once (accept every draft token): PredGen's final answer then keeps a stale
    candidate that greedy decoding of the final prompt rejects — so PredGen's acceptance is the core's."""
    import engine.core.verify as V

    partial, final = "Name one fruit that is red", "Name one vegetable that is green."
    ref = pg_factory("greedy").finish(final).answer_tokens  # the cascade's answer
    pg = pg_factory("greedy", tokens_per_update=12)
    pg.update(partial)
    stale = list(pg.cand.response)
    assert stale and stale != ref[: len(stale)]  # the candidate for the partial is not the final's answer
    monkeypatch.setattr(V, "greedy", lambda rows, draft: V.Verdict(len(draft), int(np.argmax(rows[len(draft)]))))
    broken = pg.finish(final).answer_tokens
    assert broken[: len(stale)] == stale and broken != ref


def test_conversation_holds_a_queued_final_when_the_user_goes_on():
    """The user speaks again before the previous final transcript was answered: that final is held and answered
    together with the next one (one turn), never answered over the user; an answer already heard is not repeated."""
    from engine.answer.assistant import Conversation

    class Recorder:  # the job policy only: Conversation calls answer/speculate/emit
        def __init__(self):
            self.answers, self.gate, self.entered = [], threading.Event(), threading.Event()

        def answer(self, utterance, text, cancel):
            self.entered.set()
            self.gate.wait(60)  # the test opens it; the timeout only bounds a hang
            self.answers.append((utterance, text, cancel.is_set()))
            return text, None

        def speculate(self, utterance, text, cancel):
            pass

        def emit(self, ev):
            pass

    a = Recorder()
    conv = Conversation(a)
    conv.on_final(0, "What is the capital")  # taken at once: the answer waits on the gate
    assert a.entered.wait(10)
    conv.on_final(1, "of France")  # queued behind it
    assert conv.on_speech_start()  # the user goes on: the answer in flight is stopped, nothing was heard
    conv.on_final(2, "and of Spain?")
    a.gate.set()
    assert conv.wait_idle(10)
    conv.close()
    assert a.answers == [(0, "What is the capital", True), (2, "What is the capital of France and of Spain?", False)]
    # heard answers are not held again
    b = Recorder()
    b.gate.set()
    conv = Conversation(b)
    conv.on_final(0, "Hello")
    assert conv.wait_idle(10)
    conv.mark_heard()
    assert not conv.on_speech_start() and conv.pending_text == ""
    conv.close()


@pytest.mark.parametrize("kind", ["cascade", "predgen"])
def test_barge_in_keeps_only_what_was_heard_in_the_history(qwen_small, runtime, kind):
    """Playback stopped by a barge-in with the second sentence's audio (and later ones) never played: the history's
    answer is the first sentence only; with nothing dropped, or all of it, the history keeps the answer as
    generated (real Qwen 0.5B and Piper)."""
    from engine.answer.assistant import Assistant, Conversation, PredGenAssistant
    from engine.core.events import AnswerAudio

    events = []
    cls = Assistant if kind == "cascade" else PredGenAssistant
    a = cls(qwen_small, runtime.tts(), "Answer in three short sentences.", max_tokens=60, emit=events.append)
    conv = Conversation(a)
    conv.on_final(0, "Tell me three facts about the moon.")
    assert conv.wait_idle(timeout=120)
    full = a.history[-1]["content"]
    audio = [e for e in events if isinstance(e, AnswerAudio)]
    assert len(a.spoken) == len(audio) >= 2, (full, a.spoken)
    first, d0 = a.spoken[0]
    rest = sum(d for _, d in a.spoken[1:])
    conv.on_playback_cut(0.0)  # all of it was heard
    assert a.history[-1]["content"] == full
    conv.on_playback_cut(rest + d0)  # none of it: kept as generated
    assert a.history[-1]["content"] == full
    conv.on_playback_cut(rest)  # the first sentence played, the rest dropped
    assert a.history[-1]["content"] == first.strip() and a.history[-2]["content"].startswith("Tell me")
    conv.close()
