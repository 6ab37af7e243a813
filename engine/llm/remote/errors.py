"""Errors of the LLM-server client and adapter: every failure to reach a server or to understand it is a
:class:`RemoteLMError`."""

from __future__ import annotations


class RemoteLMError(RuntimeError):
    """The LLM server cannot be reached, fails, or answers in a way the adapter cannot use."""


class NoPromptLogprobsError(RemoteLMError):
    """The server returns no log-probabilities for prompt tokens (e.g. llama.cpp's ``llama-server``)."""


class TokenizerMismatchError(RemoteLMError):
    """The local tokenizer and the server's tokenise the same text differently."""


class HTTPStatusError(RemoteLMError):
    """The server answered with an error status (4xx/5xx).

    Attributes:
        status: the HTTP status code, e.g. 404 or 503.
    """

    def __init__(self, status: int, text: str, path: str):
        super().__init__(f"{path}: HTTP {status}: {text[:300]}")
        self.status = status
