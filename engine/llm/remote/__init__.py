"""The causal-LM protocol over an LLM server (vLLM, SGLang, llama-cpp-python's server): :class:`RemoteLM`.

Modules: ``adapter`` (:class:`RemoteLM`), ``stream`` (streamed greedy decoding, :class:`RemoteStats`), ``client``
(the HTTP/SSE client on httpx, with time-outs and retries), ``tokenizer`` (:class:`LocalTokenizer`), ``logits``
(lazily fetched rows), ``errors``.
"""

from .adapter import RemoteLM, RemoteStats
from .errors import NoPromptLogprobsError, RemoteLMError, TokenizerMismatchError
from .tokenizer import LocalTokenizer

__all__ = ["RemoteLM", "RemoteStats", "RemoteLMError", "NoPromptLogprobsError", "TokenizerMismatchError",
           "LocalTokenizer"]
