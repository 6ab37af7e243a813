"""The HTTP client of the LLM-server adapter (:mod:`engine.llm.remote.adapter`), on httpx.

JSON requests on a keep-alive connection pool, and server-sent-event (SSE) streams (parsed by httpx-sse), with

    * a connect time-out (``connect_timeout_s``) and a read/write time-out (``timeout_s``: the longest wait for the
      answer, or, in a stream, for the next bytes);
    * retries with exponential back-off (``backoff_s``, 2·``backoff_s``, 4·``backoff_s``, …) of connection failures
      and 408/429/5xx answers — but never of a request the server may still be processing: a read or write
      time-out raises at once (a retry would only queue behind the same work), and a stream that broke off after
      its first byte is not repeated (the tokens would repeat);
    * an API key sent as a bearer token, never logged nor shown in ``repr``.

No proxy, ``.netrc`` or other environment settings are read (``trust_env=False``): the server is addressed
directly, as configured. HTTPS verifies against the system's certificate store.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
import urllib.parse
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator

import httpx
from httpx_sse import EventSource, SSEError

from .errors import HTTPStatusError, RemoteLMError

log = logging.getLogger(__name__)

KEEPALIVE_S = 2.0  # servers drop idle keep-alive connections (uvicorn after 5 s): do not reuse one idle longer


class _Secret:
    """A string that ``repr`` and ``str`` do not show (the API key: not in ``vars()``, logs or tracebacks)."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<secret>"

    __str__ = __repr__


def _unsent(e: httpx.TimeoutException) -> bool:
    """Whether a time-out came before the request left (no connection opened or free): retrying it is safe."""
    return isinstance(e, (httpx.ConnectTimeout, httpx.PoolTimeout))


def retryable_status(status: int) -> bool:
    """Whether an answer with HTTP ``status`` is transient (408, 429, 5xx) and worth a retry."""
    return status in (408, 429) or status >= 500


@dataclass
class HttpStats:
    """Counters of one :class:`HttpClient` (:class:`engine.llm.remote.stream.RemoteStats` extends them).

    Attributes:
        requests: requests that got an answer (any status); retries count again, failed connects do not.
        retries: requests repeated after a transient failure.
        bytes_sent / bytes_received: HTTP bodies, bytes (received: as sent over the wire, SSE streams included).
        http_s: wall time spent in HTTP round trips and stream reads, seconds.
    """

    requests: int = 0
    retries: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    http_s: float = 0.0

    def snapshot(self) -> dict:
        return asdict(self)


class HttpClient:
    """A JSON and SSE client of one LLM server, with time-outs and retries (see the module docstring).

    Args:
        base_url: "http(s)://host[:port][/prefix]"; a trailing "/v1" is dropped from the prefix (paths name it).
        api_key: sent as ``Authorization: Bearer …`` (None = none).
        timeout_s: read/write time-out, seconds (> 0).
        retries: retries of a transient failure (≥ 0). backoff_s: the first wait before a retry, seconds (≥ 0).
        stats: where to count (default: a new :class:`HttpStats`; the adapter passes its RemoteStats).
        connect_timeout_s: time-out of opening a connection, seconds (default: ``min(timeout_s, 10)``).
        transport: an httpx transport to send through instead of the network (e.g. ``httpx.MockTransport``).
        sleep: how to wait between attempts (``time.sleep``).

    Raises:
        RemoteLMError: ``base_url`` is not an http(s) URL with a host.
        ValueError: a non-positive time-out, or negative ``retries`` / ``backoff_s``.
    """

    def __init__(self, base_url: str, api_key: str | None = None, timeout_s: float = 30.0, retries: int = 2,
                 backoff_s: float = 0.25, stats: HttpStats | None = None, connect_timeout_s: float | None = None,
                 transport: httpx.BaseTransport | None = None, sleep: Callable[[float], None] = time.sleep):
        u = urllib.parse.urlsplit(base_url.rstrip("/"))
        if u.scheme not in ("http", "https") or not u.hostname:
            raise RemoteLMError(f"llm.base_url must be http(s)://host[:port][/prefix], got {base_url!r}")
        connect_timeout_s = min(timeout_s, 10.0) if connect_timeout_s is None else connect_timeout_s
        if timeout_s <= 0 or connect_timeout_s <= 0:
            raise ValueError(f"time-outs must be > 0 s, got {timeout_s} and {connect_timeout_s}")
        if retries < 0 or backoff_s < 0:
            raise ValueError(f"retries and backoff_s must be >= 0, got {retries} and {backoff_s}")
        self.url = base_url.rstrip("/")
        host = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
        self.origin = f"{u.scheme}://{host}:{u.port or (443 if u.scheme == 'https' else 80)}"
        path = u.path.rstrip("/")
        self.prefix = path[:-3] if path.endswith("/v1") else path
        self._key = _Secret(api_key) if api_key else None
        self.timeout_s, self.connect_timeout_s = float(timeout_s), float(connect_timeout_s)
        self.retries, self.backoff_s = int(retries), float(backoff_s)
        self.stats = stats if stats is not None else HttpStats()
        self._transport = transport
        self._sleep = sleep
        self._https = u.scheme == "https"
        self._lock = threading.Lock()  # one JSON request at a time: the servers work on one sequence anyway
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()

    def __repr__(self) -> str:  # never shows the key
        return f"HttpClient({self.url!r})"

    # -- plumbing ------------------------------------------------------------------------------------------------
    def _pool(self) -> httpx.Client:
        with self._client_lock:
            if self._client is None:
                kw: dict[str, Any] = {}
                if self._transport is not None:
                    kw["transport"] = self._transport
                elif self._https:
                    kw["verify"] = ssl.create_default_context()  # the system's store, as the OS's own tools
                self._client = httpx.Client(
                    timeout=httpx.Timeout(self.timeout_s, connect=self.connect_timeout_s),
                    limits=httpx.Limits(max_keepalive_connections=4, keepalive_expiry=KEEPALIVE_S),
                    trust_env=False, follow_redirects=False, **kw)
            return self._client

    def close(self) -> None:
        """Close the pooled connections (an open stream stays open until it is closed). The client stays usable:
        the next request opens a new connection."""
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _headers(self, accept: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": accept}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key.reveal()}"
        return headers

    def _backoff(self, attempt: int, path: str, why: object) -> None:
        """Wait before retry ``attempt`` (1, 2, …): ``backoff_s`` · 2^(attempt − 1) seconds."""
        self.stats.retries += 1
        wait = self.backoff_s * 2 ** (attempt - 1)
        log.debug("LLM server %s, %s: %s; retry %d/%d in %.3g s", self.url, path, why, attempt, self.retries, wait)
        self._sleep(wait)

    def _timed_out(self, path: str) -> RemoteLMError:
        return RemoteLMError(f"LLM server at {self.url} did not answer {path} within {self.timeout_s:g} s")

    def _unreachable(self, last: BaseException | None, attempts: int) -> RemoteLMError:
        if isinstance(last, HTTPStatusError):
            return last
        return RemoteLMError(f"LLM server at {self.url} is unreachable ({type(last).__name__}: {last}) after "
                             f"{attempts} attempt(s)")

    # -- requests ------------------------------------------------------------------------------------------------
    def _send(self, method: str, path: str, data: bytes | None, accept: str, *, stream: bool,
              retry: bool = True) -> httpx.Response:
        """One request of ``data`` to ``path``, with the retries of the module docstring (``retry`` False = one
        attempt). Returns the first answer with a status below 400; a ``stream`` answer's body is left unread.

        Raises:
            RemoteLMError: unreachable after the retries, or no answer within ``timeout_s`` (not retried);
                :class:`HTTPStatusError`: a 4xx answer (not retried), or a 408/429/5xx answer after the retries.
        """
        headers = self._headers(accept)
        full = self.prefix + path
        attempts = 1 + (self.retries if retry else 0)
        last: BaseException | None = None
        for a in range(attempts):
            if a:
                self._backoff(a, path, last)
            t0 = time.perf_counter()
            try:
                client = self._pool()
                resp = client.send(client.build_request(method, self.origin + full, content=data, headers=headers),
                                   stream=stream)
            except httpx.TimeoutException as e:
                if not _unsent(e):  # the server is still busy with it:
                    raise self._timed_out(path) from None  # a retry would only queue behind the same work
                last = e
                continue
            except httpx.RequestError as e:  # refused, reset, closed before an answer: nothing was processed
                last = e
                continue
            finally:
                self.stats.http_s += time.perf_counter() - t0
            self.stats.requests += 1
            self.stats.bytes_sent += len(data or b"")
            if resp.status_code < 400:
                return resp
            try:
                raw = resp.read()
            except httpx.RequestError:
                raw = b""  # the error body broke off: the status says enough
            finally:
                resp.close()
            self.stats.bytes_received += len(raw)
            last = HTTPStatusError(resp.status_code, raw.decode("utf-8", "replace"), full)
            if not retryable_status(resp.status_code):
                raise last
        raise self._unreachable(last, attempts) from None

    def call(self, method: str, path: str, body: dict | None = None, retry: bool = True) -> Any:
        """One JSON request: ``method`` on ``path`` (below the base URL's prefix) with ``body`` as JSON.

        Args:
            retry: False = one attempt (a probe whose failure means "not supported").

        Returns:
            The decoded JSON answer (usually a dict).

        Raises:
            RemoteLMError: unreachable after the retries, no answer within ``timeout_s`` (not retried), or a
                non-JSON answer; :class:`HTTPStatusError` (a RemoteLMError): a 4xx answer (not retried), or a
                408/429/5xx answer after the retries.
        """
        data = None if body is None else json.dumps(body).encode()
        with self._lock:
            raw = self._send(method, path, data, "application/json", stream=False, retry=retry).content
            self.stats.bytes_received += len(raw)
        try:
            return json.loads(raw)
        except ValueError:
            raise RemoteLMError(f"{self.prefix + path}: the server answered with non-JSON: {raw[:200]!r}") from None

    def stream(self, path: str, body: dict) -> Iterator[dict]:
        """One streamed (server-sent events) POST of ``body`` as JSON: yields each event's ``data`` object until
        ``[DONE]`` or the end of the body (the caller checks that it saw a finish reason). Closing the generator
        closes the connection (the server stops generating at its next token). Connection failures and
        408/429/5xx answers before the body are retried with back-off; a failure after its first byte is not.

        Raises:
            RemoteLMError: unreachable after the retries, no answer or no data within ``timeout_s``, an error
                status (:class:`HTTPStatusError`), an answer that is no event stream, a non-JSON event, an error
                event, or the stream broke off.
        """
        resp = self._send("POST", path, json.dumps(body).encode(), "text/event-stream", stream=True)
        try:
            yield from self._events(resp, path)
        finally:
            resp.close()  # unread body: the connection is closed, not pooled, and the server stops

    def _events(self, resp: httpx.Response, path: str) -> Iterator[dict]:
        full = self.prefix + path
        events = EventSource(resp).iter_sse()
        seen = 0
        while True:
            t0 = time.perf_counter()
            try:
                sse = next(events, None)
            except httpx.TimeoutException:
                raise RemoteLMError(f"LLM server at {self.url} sent nothing on {path} for "
                                    f"{self.timeout_s:g} s") from None
            except SSEError as e:  # the Content-Type is not text/event-stream (an httpx.RequestError, so first)
                raise RemoteLMError(f"{full}: the server answered without an event stream ({e})") from None
            except httpx.RequestError as e:
                raise RemoteLMError(f"LLM server at {self.url} broke off the stream of {path} "
                                    f"({type(e).__name__}: {e}): unreachable now?") from None
            finally:
                self.stats.http_s += time.perf_counter() - t0
                self.stats.bytes_received += resp.num_bytes_downloaded - seen
                seen = resp.num_bytes_downloaded
            if sse is None:
                return  # end of body without [DONE]
            payload = sse.data.strip()
            if not payload:
                continue  # an event without data (a name or id only)
            if payload == "[DONE]":
                return
            try:
                ev = json.loads(payload)
            except ValueError:
                raise RemoteLMError(f"{full}: the server streamed non-JSON: {payload[:200]!r}") from None
            if isinstance(ev, dict) and ev.get("error"):
                raise RemoteLMError(f"{full}: the server reported an error mid-stream: {str(ev['error'])[:300]}")
            yield ev
