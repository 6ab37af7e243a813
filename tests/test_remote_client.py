"""The LLM-server HTTP client (engine/llm/remote/client.py): each retry and time-out branch against a tiny real
``http.server`` on 127.0.0.1 (and ``httpx.MockTransport`` for the transport errors a local socket cannot produce on
demand). Back-off waits go through the client's ``sleep`` hook, so the tests count attempts and read the waits it
asked for instead of timing anything; time-outs are tiny and a stalled handler waits on an event, never a clock."""

from __future__ import annotations

import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from engine.llm.remote import RemoteLMError
from engine.llm.remote.client import HttpClient, HttpStats
from engine.llm.remote.errors import HTTPStatusError

KEY = "s3cret-key-0123"


class _Handler(BaseHTTPRequestHandler):
    """Answers with ``server.script[path]``: a list of actions, one per request (the last one repeats)."""

    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, as real LLM servers

    def log_message(self, *a):
        pass

    def _run(self):
        srv: FakeServer = self.server.owner
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else None
        with srv.lock:
            srv.requests.append((self.command, self.path, dict(self.headers), body))
            hits = srv.hits[self.path] = srv.hits.get(self.path, 0) + 1
        script = srv.script.get(self.path) or [("json", 404, {"error": "not found"})]
        action, *args = script[min(hits, len(script)) - 1]
        getattr(self, "_" + action)(*args)

    do_GET = do_POST = _run

    def _json(self, status, obj):
        self._raw(status, json.dumps(obj).encode(), "application/json")

    def _raw(self, status, data, ctype="text/plain"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stall(self):
        """Accept the request, then answer nothing until the test ends."""
        self.server.owner.release.wait(30)
        self.close_connection = True

    def _sse(self, chunks, then="end"):
        """A chunked event stream of ``chunks`` (bytes, sent as they are); then "end" (the terminating chunk),
        "drop" (close the connection mid-body), "stall" (wait for the test's end) or "until_gone" (keep sending
        pings until the client has closed the connection)."""
        srv: FakeServer = self.server.owner
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for c in chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(c), c))
            self.wfile.flush()
        if then == "end":
            self.wfile.write(b"0\r\n\r\n")
        elif then == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif then == "stall":
            srv.release.wait(30)
            self.close_connection = True
        elif then == "until_gone":
            srv.sent_first.set()
            srv.closed_by_client.wait(30)
            try:
                for _ in range(1000):  # the first write after a close may still succeed; a later one fails
                    self.wfile.write(b"9\r\n: ping\r\n\r\n\r\n")
                    self.wfile.flush()
                    srv.release.wait(0.01)
            except OSError:
                srv.gone.set()
            self.close_connection = True


class FakeServer:
    """A ThreadingHTTPServer on 127.0.0.1 (``port`` 0 = a free one) driven by ``script``."""

    def __init__(self, script: dict, port: int = 0):
        self.script = script
        self.requests: list = []
        self.hits: dict[str, int] = {}
        self.lock = threading.Lock()
        self.release = threading.Event()  # ends stalled handlers
        self.sent_first, self.closed_by_client, self.gone = threading.Event(), threading.Event(), threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        self.httpd.owner = self
        self.httpd.block_on_close = False  # stop() must not wait for keep-alive or stalled handler threads
        self.httpd.handle_error = lambda *a: None  # a client that hung up is expected here
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve():
    servers = []

    def start(script, port=0):
        servers.append(FakeServer(script, port))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


def _client(url, **kw):
    """A client whose back-off waits are recorded (not slept): ``client.waits``."""
    waits: list[float] = []
    kw = {"timeout_s": 5.0, "retries": 3, "backoff_s": 0.01, "sleep": waits.append, **kw}
    c = HttpClient(url, **kw)
    c.waits = waits
    return c


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _events(*objs) -> bytes:
    return b"".join(b"data: " + (o if isinstance(o, bytes) else json.dumps(o).encode()) + b"\n\n" for o in objs)


# --------------------------------------------------------------------------------------------- JSON requests
def test_json_request_round_trip_and_counters(serve):
    srv = serve({"/v1/completions": [("json", 200, {"choices": [{"text": "hi"}]})]})
    c = _client(srv.url + "/v1/")  # a trailing /v1 in the base URL: paths name it
    assert c.call("POST", "/v1/completions", {"prompt": [1, 2]}) == {"choices": [{"text": "hi"}]}
    method, path, headers, body = srv.requests[0]
    assert (method, path, body) == ("POST", "/v1/completions", {"prompt": [1, 2]})
    assert headers["Content-Type"] == "application/json" and "Authorization" not in headers
    assert c.stats.requests == 1 and c.stats.retries == 0 and c.waits == []
    assert c.stats.bytes_sent == len(json.dumps({"prompt": [1, 2]}))
    assert c.stats.bytes_received == len(json.dumps({"choices": [{"text": "hi"}]}))
    c.close()
    assert c.call("POST", "/v1/completions", {}) == {"choices": [{"text": "hi"}]}  # usable after close()
    c.close()


def test_connection_refused_is_retried_until_the_server_is_up(serve):
    port = _free_port()  # nothing listens there yet
    started = []

    def wait_then_start(s):  # the back-off wait: the server comes up during it
        started.append(s)
        if len(started) == 2:
            serve({"/v1/models": [("json", 200, {"data": [{"id": "m"}]})]}, port=port)

    c = HttpClient(f"http://127.0.0.1:{port}", timeout_s=5.0, retries=3, backoff_s=0.05, sleep=wait_then_start)
    assert c.call("GET", "/v1/models") == {"data": [{"id": "m"}]}
    assert started == [0.05, 0.1]  # two refused attempts, the third answered; exponential back-off
    assert c.stats.retries == 2 and c.stats.requests == 1  # a refused connect is not a request that was answered
    c.close()


@pytest.mark.parametrize("status", [503, 429, 500, 408])
def test_transient_status_is_retried_with_exponential_backoff(serve, status):
    srv = serve({"/generate": [("json", status, {"error": "busy"}), ("json", status, {"error": "busy"}),
                               ("json", 200, {"ok": True})]})
    c = _client(srv.url, backoff_s=0.02)
    assert c.call("POST", "/generate", {"x": 1}) == {"ok": True}
    assert srv.hits["/generate"] == 3
    assert c.waits == pytest.approx([0.02, 0.04])
    assert c.stats.retries == 2 and c.stats.requests == 3
    c.close()


def test_gives_up_after_the_retries_with_the_last_status(serve):
    srv = serve({"/generate": [("json", 503, {"error": "overloaded"})]})
    c = _client(srv.url, retries=2)
    with pytest.raises(HTTPStatusError, match=r"/generate: HTTP 503: .*overloaded") as e:
        c.call("POST", "/generate", {})
    assert isinstance(e.value, RemoteLMError) and e.value.status == 503
    assert srv.hits["/generate"] == 3 and c.waits == pytest.approx([0.01, 0.02])
    c.close()


def test_unreachable_after_the_retries_is_a_clear_error():
    c = _client(f"http://127.0.0.1:{_free_port()}", retries=2)
    with pytest.raises(RemoteLMError, match=r"LLM server at http://127\.0\.0\.1:\d+ is unreachable \(ConnectError: "
                                            r".*\) after 3 attempt\(s\)"):
        c.call("GET", "/v1/models")
    assert c.stats.retries == 2 and c.stats.requests == 0 and len(c.waits) == 2


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_client_error_status_is_not_retried(serve, status):
    srv = serve({"/v1/completions": [("json", status, {"error": "bad request"}), ("json", 200, {"ok": True})]})
    c = _client(srv.url)
    with pytest.raises(HTTPStatusError, match=f"HTTP {status}") as e:
        c.call("POST", "/v1/completions", {})
    assert e.value.status == status and srv.hits["/v1/completions"] == 1 and c.waits == [] and c.stats.retries == 0
    c.close()


def test_probe_without_retry_is_one_attempt(serve):
    srv = serve({"/get_model_info": [("json", 503, {}), ("json", 200, {"ok": True})]})
    c = _client(srv.url)
    with pytest.raises(HTTPStatusError):
        c.call("GET", "/get_model_info", retry=False)
    assert srv.hits["/get_model_info"] == 1 and c.waits == []
    c.close()


def test_read_timeout_raises_and_is_not_retried(serve):
    """The server accepted the request and is still busy with it: an error after ``timeout_s``, no hang, and no
    second copy of the request queued behind the first."""
    srv = serve({"/v1/completions": [("stall",)]})
    c = _client(srv.url, timeout_s=0.2, retries=3)
    with pytest.raises(RemoteLMError, match=r"did not answer /v1/completions within 0\.2 s"):
        c.call("POST", "/v1/completions", {"prompt": "x"})
    assert srv.hits["/v1/completions"] == 1 and c.waits == [] and c.stats.retries == 0
    c.close()


def test_non_json_answer_is_an_error(serve):
    srv = serve({"/v1/models": [("raw", 200, b"<html>a proxy page</html>")]})
    c = _client(srv.url)
    with pytest.raises(RemoteLMError, match="non-JSON.*proxy page"):
        c.call("GET", "/v1/models")
    assert c.waits == []
    c.close()


# ----------------------------------------------------------------------- transport errors (httpx.MockTransport)
def _mock(outcomes):
    """A transport that raises or answers ``outcomes`` in turn (the last repeats); ``.calls`` counts requests."""
    calls = []

    def handler(request: httpx.Request):
        calls.append(request)
        o = outcomes[min(len(calls), len(outcomes)) - 1]
        if isinstance(o, type) and issubclass(o, Exception):
            raise o("simulated", request=request)
        return httpx.Response(200, json=o)

    t = httpx.MockTransport(handler)
    t.calls = calls
    return t


@pytest.mark.parametrize("error", [httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout,
                                   httpx.RemoteProtocolError, httpx.ReadError])
def test_connection_failures_before_an_answer_are_retried(error):
    t = _mock([error, error, {"ok": 1}])
    c = _client("http://llm.invalid:8000", transport=t)
    assert c.call("POST", "/v1/completions", {}) == {"ok": 1}
    assert len(t.calls) == 3 and c.waits == pytest.approx([0.01, 0.02]) and c.stats.retries == 2


@pytest.mark.parametrize("error", [httpx.ReadTimeout, httpx.WriteTimeout])
def test_timeouts_of_a_sent_request_are_not_retried(error):
    t = _mock([error, {"ok": 1}])
    c = _client("http://llm.invalid:8000", transport=t, timeout_s=7)
    with pytest.raises(RemoteLMError, match="did not answer /tokenize within 7 s"):
        c.call("POST", "/tokenize", {})
    assert len(t.calls) == 1 and c.waits == []


def test_every_attempt_failing_names_the_last_error():
    t = _mock([httpx.ConnectTimeout])
    c = _client("http://llm.invalid:8000", transport=t, retries=4)
    with pytest.raises(RemoteLMError, match=r"unreachable \(ConnectTimeout: simulated\) after 5 attempt\(s\)"):
        c.call("GET", "/v1/models")
    assert len(t.calls) == 5 and c.waits == pytest.approx([0.01, 0.02, 0.04, 0.08])


def test_bad_settings_are_refused():
    with pytest.raises(RemoteLMError, match="base_url"):
        HttpClient("localhost:8000")
    with pytest.raises(ValueError, match="time-outs"):
        HttpClient("http://127.0.0.1:1", timeout_s=0)
    with pytest.raises(ValueError, match="retries"):
        HttpClient("http://127.0.0.1:1", retries=-1)


# ----------------------------------------------------------------------------------------------------- streams
def test_stream_yields_events_until_done(serve):
    body = (b": ping\n\nevent: completion\n" + _events({"i": 0}, {"i": 1}) + b"data:{\"i\": 2}\r\n\r\n"
            + _events(b"[DONE]", {"i": 99}))
    chunks = [body[i:i + 7] for i in range(0, len(body), 7)]  # events split across chunk boundaries
    srv = serve({"/v1/completions": [("sse", chunks)]})
    c = _client(srv.url)
    assert list(c.stream("/v1/completions", {"stream": True})) == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert srv.requests[0][2]["Accept"] == "text/event-stream"
    assert c.stats.requests == 1 and c.stats.bytes_received >= body.index(b"[DONE]") and c.waits == []
    c.close()


def test_stream_ends_at_the_end_of_the_body_without_done(serve):
    srv = serve({"/generate": [("sse", [_events({"a": 1})])]})
    c = _client(srv.url)
    assert list(c.stream("/generate", {})) == [{"a": 1}]  # the caller checks for a finish reason
    c.close()


def test_transient_status_before_the_stream_is_retried(serve):
    srv = serve({"/v1/completions": [("json", 503, {"error": "loading"}), ("sse", [_events({"a": 1}, b"[DONE]")])]})
    c = _client(srv.url)
    assert list(c.stream("/v1/completions", {})) == [{"a": 1}]
    assert srv.hits["/v1/completions"] == 2 and c.waits == [0.01] and c.stats.retries == 1
    c.close()


def test_client_error_before_the_stream_is_not_retried(serve):
    srv = serve({"/v1/completions": [("json", 400, {"error": "max_tokens too large"})]})
    c = _client(srv.url)
    with pytest.raises(HTTPStatusError, match="HTTP 400.*max_tokens too large"):
        list(c.stream("/v1/completions", {}))
    assert srv.hits["/v1/completions"] == 1 and c.waits == []
    c.close()


def test_stream_that_drops_midway_raises_after_its_events_and_is_not_repeated(serve):
    srv = serve({"/v1/completions": [("sse", [_events({"t": "Hel"}), _events({"t": "lo"})], "drop")]})
    c = _client(srv.url)
    got = []
    with pytest.raises(RemoteLMError, match="broke off the stream of /v1/completions"):
        for ev in c.stream("/v1/completions", {}):
            got.append(ev)
    assert got == [{"t": "Hel"}, {"t": "lo"}]
    assert srv.hits["/v1/completions"] == 1 and c.stats.retries == 0  # the tokens would repeat
    c.close()


def test_stream_that_stalls_times_out(serve):
    srv = serve({"/v1/completions": [("sse", [_events({"t": "Hel"})], "stall")]})
    c = _client(srv.url, timeout_s=0.2)
    got = []
    with pytest.raises(RemoteLMError, match=r"sent nothing on /v1/completions for 0\.2 s"):
        for ev in c.stream("/v1/completions", {}):
            got.append(ev)
    assert got == [{"t": "Hel"}] and srv.hits["/v1/completions"] == 1
    c.close()


def test_stream_that_never_answers_times_out_without_retry(serve):
    srv = serve({"/generate": [("stall",)]})
    c = _client(srv.url, timeout_s=0.2)
    with pytest.raises(RemoteLMError, match=r"did not answer /generate within 0\.2 s"):
        list(c.stream("/generate", {}))
    assert srv.hits["/generate"] == 1 and c.waits == []
    c.close()


def test_error_event_and_non_json_event_raise(serve):
    srv = serve({"/a": [("sse", [_events({"t": 1}, {"error": {"message": "CUDA out of memory"}})])],
                 "/b": [("sse", [_events(b"{not json")])]})
    c = _client(srv.url)
    got = []
    with pytest.raises(RemoteLMError, match="error mid-stream.*CUDA out of memory"):
        for ev in c.stream("/a", {}):
            got.append(ev)
    assert got == [{"t": 1}]
    with pytest.raises(RemoteLMError, match="streamed non-JSON"):
        list(c.stream("/b", {}))
    c.close()


def test_stream_answered_without_an_event_stream_is_an_error(serve):
    """A proxy or a server without streaming answers a stream request with plain JSON: named, not parsed."""
    srv = serve({"/v1/completions": [("json", 200, {"choices": [{"text": "hi"}]})]})
    c = _client(srv.url)
    with pytest.raises(RemoteLMError, match=r"/v1/completions: the server answered without an event stream "
                                            r".*application/json"):
        list(c.stream("/v1/completions", {}))
    assert srv.hits["/v1/completions"] == 1 and c.waits == []
    c.close()


def test_closing_a_stream_closes_its_connection(serve):
    """A cancelled answer closes the generator: the server sees the connection go (and stops generating)."""
    srv = serve({"/v1/completions": [("sse", [_events({"t": "Hel"})], "until_gone")]})
    c = _client(srv.url)
    events = c.stream("/v1/completions", {})
    assert next(events) == {"t": "Hel"}
    assert srv.sent_first.wait(30)
    events.close()
    srv.closed_by_client.set()
    assert srv.gone.wait(30)  # its writes fail: the socket was closed, not pooled
    c.close()


# ----------------------------------------------------------------------------------------------------- API key
def test_api_key_is_sent_but_never_shown(serve, caplog):
    srv = serve({"/v1/models": [("json", 503, {}), ("json", 200, {"data": []})],
                 "/s": [("sse", [_events({"a": 1})])],
                 "/denied": [("json", 401, {"error": "invalid key"})]})
    c = _client(srv.url, api_key=KEY)
    with caplog.at_level(logging.DEBUG, logger="engine.llm.remote"):
        assert c.call("GET", "/v1/models") == {"data": []}  # one retry: logged at debug level
        assert list(c.stream("/s", {})) == [{"a": 1}]
        with pytest.raises(HTTPStatusError) as e:
            c.call("GET", "/denied")
    assert [r[2]["Authorization"] for r in srv.requests] == [f"Bearer {KEY}"] * 4  # sent on every request
    assert caplog.records  # the retry was logged ...
    shown = [repr(c), str(c), repr(vars(c)), str(e.value), repr(e.value), caplog.text]
    assert not [s for s in shown if KEY in s]  # ... and the key appears nowhere
    assert isinstance(HttpClient("http://127.0.0.1:1").stats, HttpStats)
    c.close()
