"""RemoteLM against a REAL llama-cpp-python server (``python -m llama_cpp.server --logits_all true``) on 127.0.0.1,
with the embedded 0.5B GGUF, one thread, niced (skipped without the server extra). Negative cases (no prompt
log-probs, another tokenizer) and streaming use a tiny real ``http.server`` and run without it. The HTTP client's
retry and time-out branches: tests/test_remote_client.py.

llama-cpp-python's server computes echoed prompt log-probs with a Python sort of the whole vocabulary per prompt
position (≈0.2–0.5 s per prompt token here), so the fast tests use short prompts; the PredGen/SSBD equality runs
(chat prompts of ~60 tokens, several verifications) are marked slow.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from tests.conftest import same_or_near_tie

from engine.core.verify import log_softmax
from engine.llm.generate import LMSession, greedy_stream
from engine.llm.remote import LocalTokenizer, NoPromptLogprobsError, RemoteLM, RemoteLMError, TokenizerMismatchError

N_CTX = 2048


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """``python -m llama_cpp.server`` on a free port of 127.0.0.1 (niced, one thread); stopped by :meth:`stop`.
    A test that starts one is skipped without the server extra (``pip install 'specvoice[server]'``); the fake-server
    tests below run without it."""

    def __init__(self, gguf, timeout_s: float = 180.0):
        pytest.importorskip("llama_cpp.server.app",
                            reason="llama-cpp-python's server extras (fastapi, uvicorn, ...) missing")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = ["nice", "-n", "19", sys.executable, "-m", "engine.llm.llama_server", "--model", str(gguf),
               "--logits_all", "true", "--n_threads", "1", "--n_threads_batch", "1", "--n_ctx", str(N_CTX),
               "--port", str(self.port), "--host", "127.0.0.1", "--verbose", "false"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        t_end = time.monotonic() + timeout_s
        while time.monotonic() < t_end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited: {self.proc.stderr.read().decode()[-2000:]}")
            try:
                urllib.request.urlopen(self.url + "/v1/models", timeout=2).read()
                return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"llama_cpp.server not ready within {timeout_s} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def server(small_gguf):
    s = LlamaServer(small_gguf)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def remote(server, small_gguf):
    lm = RemoteLM(server.url, tokenizer=small_gguf, n_ctx=N_CTX, timeout_s=600)
    yield lm
    lm.close()


@pytest.fixture(scope="module")
def local(small_gguf):
    from engine.llm.llama_cpp_lm import LlamaCppLM

    return LlamaCppLM(small_gguf, n_ctx=N_CTX, n_threads=1)


def test_connect_detects_the_server(remote, local):
    assert remote.api == "openai" and remote.prompt_logprobs
    assert remote.layout == "shifted"  # llama-cpp-python: echoed entry k follows token k
    assert not remote.ids_prompt and remote.tokenize_path == "/extras/tokenize"
    assert remote.n_vocab == local.n_vocab and remote.eos_ids == local.eos_ids
    msgs = [{"role": "user", "content": "Hi there"}]
    assert remote.tokenize(remote.chat_prompt(msgs), special=True) == local.tokenize(local.chat_prompt(msgs),
                                                                                     special=True)


def test_verification_rows_match_in_process_and_cost_one_request(remote, local):
    prompt = local.tokenize("The capital of Italy is")
    draft = local.tokenize(" Rome. The capital of")
    rs, ls = LMSession(remote), LMSession(local)
    rs.prefill(prompt)
    ls.prefill(prompt)
    before = remote.stats.snapshot()
    rows = rs.eval_draft(prompt, draft)
    got = np.asarray(rows)
    after = remote.stats.snapshot()
    assert after["eval_requests"] - before["eval_requests"] == 1  # ONE request per verification
    assert after["echo_requests"] - before["echo_requests"] == 1
    want = ls.eval_draft(prompt, draft)
    assert got.shape == want.shape == (len(draft) + 1, local.n_vocab)
    for j in range(len(want)):
        a, b = int(np.argmax(got[j])), int(np.argmax(want[j]))
        if a != b:  # batched vs incremental numerics: only a near-tie may differ
            assert abs(float(want[j][a] - want[j][b])) < 0.5
    # the returned entries are log-probabilities of the full distribution (up to batched-vs-incremental numerics)
    lp = log_softmax(want)
    top = np.argmax(want, 1)
    assert np.max(np.abs(got[np.arange(len(top)), top] - lp[np.arange(len(top)), top])) < 0.25
    assert np.allclose(np.exp(log_softmax(got))[np.arange(len(top)), top], np.exp(got[np.arange(len(top)), top]),
                       atol=1e-4)  # and softmax of a row reproduces them


def test_prefill_uses_last_rows_only(remote, local):
    prompt = local.tokenize(local.chat_prompt([{"role": "user", "content": "Name a colour."}]), special=True)
    before = remote.stats.snapshot()
    row = LMSession(remote).prefill(prompt)
    after = remote.stats.snapshot()
    assert after["echo_requests"] == before["echo_requests"]  # no prompt log-probs needed
    assert after["eval_requests"] - before["eval_requests"] == 1
    want = LMSession(local).prefill(prompt)
    assert int(np.argmax(row)) == int(np.argmax(want)) or abs(float(want[np.argmax(row)] - want.max())) < 0.5


def test_streamed_decoding_is_one_request_with_in_process_tokens(remote, local):
    """greedy_stream over a server (the cascade answer, captions): ONE streamed /v1/completions request, the same
    tokens as in-process greedy; a cancel stops it and the server serves the next request at once."""
    prompt = local.tokenize(local.chat_prompt([{"role": "user", "content": "Why is the sky blue?"}]), special=True)
    want = list(greedy_stream(LMSession(local), prompt, 24, local.eos_ids))
    before = remote.stats.snapshot()
    got = list(greedy_stream(LMSession(remote), prompt, 24, remote.eos_ids))
    after = remote.stats.snapshot()
    if got != want:
        same_or_near_tie(local, prompt, want, got)
    assert len(got) == len(want) == 24
    assert after["requests"] - before["requests"] == 1 and after["stream_requests"] - before["stream_requests"] == 1
    assert after["eval_requests"] == before["eval_requests"] and after["retries"] == before["retries"]
    assert remote.n_past == len(prompt) + len(got)

    cancel = threading.Event()
    out = []
    for tok in greedy_stream(LMSession(remote), prompt, 200, remote.eos_ids, cancel):
        out.append(tok)
        if len(out) == 3:
            cancel.set()
    assert out == got[:3]  # stopped before the 4th token
    again = list(greedy_stream(LMSession(remote), prompt, 4, remote.eos_ids))
    assert again == got[:4]  # (that a cancel closes the connection: tests/test_remote_client.py)


def test_predgen_final_decode_is_one_request(remote, local):
    """After the final verification, the whole answer is ONE streamed request (not one request per token), and
    it is the in-process answer."""
    from engine.answer.predictive import PredGen

    def run(lm):
        pg = PredGen(lm, None, "Answer in two short sentences.", verifier="greedy", max_tokens=32)
        stats = getattr(lm, "stats", None)
        s0 = stats.snapshot() if stats else None
        fi = pg.finish("What is the capital of France?")
        return pg, fi, ({k: v - s0[k] for k, v in stats.snapshot().items() if isinstance(v, (int, float))}
                        if stats else None)

    _, want, _ = run(local)
    pg, got, d = run(remote)
    assert d["stream_requests"] == 1  # the decoding after verification
    assert d["eval_requests"] == 1  # the verification (no candidate: the pre-fill's last row)
    assert d["requests"] == 2
    if got.answer_tokens != want.answer_tokens:
        same_or_near_tie(local, pg.prompt_tokens("What is the capital of France?"), want.answer_tokens,
                         got.answer_tokens)
    else:
        assert got.answer == want.answer and got.first_sentence == want.first_sentence
        assert got.nfetfs == want.nfetfs  # forward passes to the first sentence, counted alike


def test_killed_server_raises_and_assistant_reports_an_error(small_gguf):
    from engine.answer.assistant import Assistant
    from engine.core.events import AnswerDone, Error

    srv = LlamaServer(small_gguf)
    try:
        lm = RemoteLM(srv.url, tokenizer=small_gguf, n_ctx=N_CTX, timeout_s=120, retries=1, backoff_s=0.05)
        events = []
        a = Assistant(lm, None, "Answer in three words.", max_tokens=4, emit=events.append)
        text, _ = a.answer(1, "What is red?")
        assert text and not [e for e in events if isinstance(e, Error)]
    finally:
        srv.stop()
    events.clear()
    text, _ = a.answer(2, "And blue?")  # the server went away mid-conversation
    errors = [e for e in events if isinstance(e, Error)]
    assert errors and errors[0].where == "llm" and "RemoteLMError" in errors[0].message
    assert "unreachable" in errors[0].message
    assert any(isinstance(e, AnswerDone) for e in events)  # the turn ends; the app keeps listening
    with pytest.raises(RemoteLMError, match="unreachable"):
        lm.eval(lm.tokenize(" again"))[-1]


def test_server_killed_mid_answer_is_an_error_event(small_gguf):
    """The server dies while it streams the answer: a RemoteLMError → Error event, the turn ends, no hang."""
    from engine.answer.assistant import Assistant
    from engine.core.events import AnswerDelta, AnswerDone, Error

    srv = LlamaServer(small_gguf)
    try:
        lm = RemoteLM(srv.url, tokenizer=small_gguf, n_ctx=N_CTX, timeout_s=120, retries=1, backoff_s=0.05)
        events = []

        def emit(e):
            events.append(e)
            if isinstance(e, AnswerDelta) and srv.proc.poll() is None:
                srv.proc.kill()  # mid-answer
                srv.proc.wait()

        a = Assistant(lm, None, "Answer at length.", max_tokens=200, emit=emit)
        text, _ = a.answer(1, "Count from one to one hundred in words.")  # no hang: timeout_s bounds each read
    finally:
        srv.stop()
    errors = [e for e in events if isinstance(e, Error)]
    assert errors and errors[0].where == "llm" and "RemoteLMError" in errors[0].message
    assert any(isinstance(e, AnswerDelta) for e in events) and any(isinstance(e, AnswerDone) for e in events)
    assert lm.stats.stream_requests == 1


# ---------------------------------------------------------------- a tiny real HTTP server for the negative cases
class _Fake(BaseHTTPRequestHandler):
    """/v1/models, /extras/tokenize (optionally wrong) and a /v1/completions that, like llama.cpp's llama-server,
    gives log-probs for the generated token only; a streamed /v1/completions sends ``stream_pieces`` as text events
    (llama-cpp-python's form), all of them and a finish reason, or (``drop_stream``) the first two, then the
    connection closes."""

    tok = None
    wrong_tokens = False
    seen_auth: list = []
    stream_pieces = [" Rome", " is", " the", " capital", "."]
    drop_stream = False
    stream_bodies: list = []

    def log_message(self, *a):
        pass

    def _send(self, obj, status=200):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        _Fake.seen_auth.append(self.headers.get("Authorization"))
        if self.path == "/v1/models":
            return self._send({"data": [{"id": "fake"}]})
        self._send({"error": "not found"}, 404)

    def do_POST(self):
        _Fake.seen_auth.append(self.headers.get("Authorization"))
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/extras/tokenize":
            ids = self.tok.tokenize(body["input"], special=True)
            return self._send({"tokens": ids[::-1] if self.wrong_tokens else ids})
        if self.path == "/v1/completions":
            if not isinstance(body.get("prompt"), str):
                return self._send({"error": "prompt must be a string"}, 422)
            if body.get("stream"):
                return self._stream(body)
            return self._send({"choices": [{"text": " Rome", "index": 0, "finish_reason": "length", "logprobs": {
                "tokens": [" Rome"], "token_logprobs": [-0.1], "text_offset": [0],
                "top_logprobs": [{" Rome": -0.1, " Milan": -2.5}]}}],
                "usage": {"prompt_tokens": len(self.tok.tokenize(body["prompt"], special=True)),
                          "completion_tokens": 1}})
        self._send({"error": "not found"}, 404)

    def _stream(self, body):
        _Fake.stream_bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()  # HTTP/1.0 without a length: the body ends when the connection closes
        pieces = self.stream_pieces[:2] if self.drop_stream else self.stream_pieces
        for i, p in enumerate(pieces):
            last = i == len(pieces) - 1 and not self.drop_stream
            ev = {"choices": [{"text": p, "index": 0, "finish_reason": "length" if last else None}]}
            self.wfile.write(b": ping\r\n\r\n" if i == 1 else b"")
            self.wfile.write(f"data: {json.dumps(ev)}\r\n\r\n".encode())
            self.wfile.flush()
        if not self.drop_stream:
            self.wfile.write(b"data: [DONE]\r\n\r\n")


@pytest.fixture
def fake_server(small_gguf):
    _Fake.tok = LocalTokenizer(small_gguf)
    _Fake.wrong_tokens = False
    _Fake.seen_auth = []
    _Fake.drop_stream = False
    _Fake.stream_bodies = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_server_without_prompt_logprobs_is_refused(fake_server, small_gguf, monkeypatch):
    monkeypatch.setenv("SPECVOICE_TEST_KEY", "s3cret-key")
    with pytest.raises(NoPromptLogprobsError, match="cascade"):
        RemoteLM(fake_server, tokenizer=small_gguf, api_key_env="SPECVOICE_TEST_KEY", retries=0)
    assert "Bearer s3cret-key" in _Fake.seen_auth  # the key is sent ...
    lm = RemoteLM(fake_server, tokenizer=small_gguf, api_key_env="SPECVOICE_TEST_KEY", retries=0,
                  require_prompt_logprobs=False)
    assert "s3cret" not in repr(lm) and "s3cret" not in repr(lm.__dict__)  # ... and never shown
    # the cascade still works on it: the last row of a pre-fill / an AR step
    prompt = lm.tokenize("The capital of Italy is")
    row = LMSession(lm).prefill(prompt)
    assert int(np.argmax(row)) == lm.tokenize(" Rome")[0]
    with pytest.raises(NoPromptLogprobsError):  # but a draft cannot be verified
        LMSession(lm).eval_draft(prompt, lm.tokenize(" Rome."))[0]


def test_streamed_text_is_retokenised_and_a_dropped_stream_is_an_error(fake_server, small_gguf):
    """generate() over a text-only stream (llama-cpp-python's form): ONE request, the ids of the streamed text; a
    stream that ends without a finish reason (the server went away) raises after the tokens it did send."""
    lm = RemoteLM(fake_server, tokenizer=small_gguf, retries=0, require_prompt_logprobs=False)
    prompt = lm.tokenize("The capital of Italy is")
    r0 = lm.stats.requests
    got = list(lm.generate(prompt, 16))
    assert lm.detokenize(got) == "".join(_Fake.stream_pieces) and got == lm.tokenize(lm.detokenize(got))
    assert lm.finish_reason == "length" and lm.n_past == len(prompt) + len(got)
    assert lm.stats.requests - r0 == 1 and lm.stats.stream_requests == 1 and lm.stats.retries == 0
    sent = _Fake.stream_bodies[-1]
    assert sent["stream"] and sent["temperature"] == 0.0 and sent["repeat_penalty"] == 1.0  # llama-cpp-python
    assert lm.tokenize(sent["prompt"], special=True) == prompt and sent["max_tokens"] == 16

    _Fake.drop_stream = True
    out = []
    with pytest.raises(RemoteLMError, match="without a finish reason"):
        for t in lm.generate(prompt, 16):
            out.append(t)
    assert lm.detokenize(out) == _Fake.stream_pieces[0]  # the word that the next piece's space closed
    assert lm.stats.stream_requests == 2 and lm.stats.retries == 0  # a broken stream is not repeated


def test_tokenizer_mismatch_is_refused(fake_server, small_gguf):
    _Fake.wrong_tokens = True
    with pytest.raises(TokenizerMismatchError, match="same model"):
        RemoteLM(fake_server, tokenizer=small_gguf, retries=0)


def test_unreachable_server_is_a_clear_error(small_gguf):
    with pytest.raises(RemoteLMError, match="unreachable"):
        RemoteLM(f"http://127.0.0.1:{_free_port()}", tokenizer=small_gguf, retries=1, backoff_s=0.01,
                 timeout_s=2)
    with pytest.raises(RemoteLMError, match="API key variable"):
        RemoteLM("http://127.0.0.1:1", tokenizer=small_gguf, api_key_env="SPECVOICE_SURELY_UNSET_KEY")


# ------------------------------------------------------------------------------ PredGen / SSBD equality (slow)
@pytest.mark.slow
def test_predgen_greedy_same_answer_as_in_process(remote, local):
    from engine.answer.predictive import PredGen

    stream = ["What is the", "What is the capital of", "What is the capital of France?"]

    def run(lm):
        pg = PredGen(lm, None, "Answer in one short sentence.", verifier="greedy", tokens_per_update=4,
                     max_tokens=16)
        per_update = []
        stats = getattr(lm, "stats", None)
        for partial in stream[:-1]:
            n0 = stats.echo_requests if stats else 0
            pg.update(partial)
            per_update.append(stats.echo_requests - n0 if stats else 0)
        r0 = stats.requests if stats else 0
        fi = pg.finish(stream[-1])
        return pg, fi, per_update, (stats.requests - r0 if stats else 0)

    _, want, _, _ = run(local)
    pg, got, per_update, final_requests = run(remote)
    assert all(n <= 1 for n in per_update)  # at most one verification request per update
    assert final_requests <= 2  # the final verification, then the rest of the answer in ONE streamed request
    if got.answer_tokens != want.answer_tokens:
        same_or_near_tie(local, pg.prompt_tokens(stream[-1]), want.answer_tokens, got.answer_tokens)
    else:
        assert got.answer == want.answer


@pytest.mark.slow
def test_ssbd_greedy_same_translation_as_in_process(remote, local):
    from engine.translate.biased_retranslation import SSBDTranslator

    sources = ["The weather", "The weather is nice", "The weather is nice today."]

    def run(lm):
        tr = SSBDTranslator(lm, "German", max_tokens=16, beta=0.0, mask_k=0)
        return tr, [tr.translate_ssbd(s, final=i == len(sources) - 1) for i, s in enumerate(sources)]

    _, want = run(local)
    tr, got = run(remote)
    for s, w, g in zip(sources, want, got):
        if w.tokens != g.tokens:
            same_or_near_tie(local, tr.prompt_tokens(s), w.tokens, g.tokens)
    assert all(u.forward_passes >= 1 for u in got)


def test_cli_with_a_server_that_is_down_is_one_error_line(tmp_path, capsys):
    """``llm.backend=remote`` through the same Runtime the CLI and GUI use: a dead server is one clear line, exit 2."""
    from app.cli import main

    rc = main(["assist", "--fast", "--no-play", "--set", "llm.backend=remote", "--set",
               f"llm.base_url=http://127.0.0.1:{_free_port()}", "--set", "llm.remote_retries=0",
               "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("specvoice: error: LLM server at http://127.0.0.1:")
    assert "Traceback" not in "\n".join(err)
