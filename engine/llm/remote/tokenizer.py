"""The served model's tokenizer, loaded locally (:class:`LocalTokenizer`), so that the LLM-server adapter
(:mod:`engine.llm.remote.adapter`) tokenises, renders chat prompts and maps string-keyed log-probs to token ids
without a request."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .errors import RemoteLMError

END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<|eot_id|>")  # end-of-turn tokens of common templates


class LocalTokenizer:
    """The served model's tokenizer, loaded locally: a GGUF file (vocabulary only, no weights) or a transformers
    tokenizer (directory or hub id). Gives ids, text, the chat template and the end-of-turn ids without a request.

    Raises:
        RemoteLMError: the file cannot be loaded.
    """

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._hf = None
        self._llama = None
        try:
            if self.path.endswith(".gguf"):
                import llama_cpp

                self._llama = llama_cpp.Llama(model_path=self.path, vocab_only=True, verbose=False)
                self.n_vocab = self._llama.n_vocab()
                eos = {self._llama.token_eos()}
                for t in END_TOKENS:
                    ids = self._llama.tokenize(t.encode(), add_bos=False, special=True)
                    if len(ids) == 1:
                        eos.add(ids[0])
            else:
                from transformers import AutoTokenizer

                self._hf = AutoTokenizer.from_pretrained(self.path)
                self.n_vocab = len(self._hf)
                eos = {self._hf.eos_token_id} if self._hf.eos_token_id is not None else set()
                for t in END_TOKENS:
                    i = self._hf.convert_tokens_to_ids(t)
                    if isinstance(i, int) and i != self._hf.unk_token_id:
                        eos.add(i)
        except (ImportError, OSError, ValueError, RuntimeError) as e:
            raise RemoteLMError(f"cannot load the tokenizer {self.path}: {e}") from None
        self.eos_ids = frozenset(eos)
        self._pieces: list[str] | None = None

    def tokenize(self, text: str, special: bool = False) -> list[int]:
        if self._llama is not None:
            return self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=special)
        return self._hf.encode(text, add_special_tokens=False, split_special_tokens=not special)

    def detokenize_bytes(self, ids: Sequence[int], special: bool = False) -> bytes:
        if self._llama is not None:
            return self._llama.detokenize(list(ids), special=special)
        return self._hf.decode(list(ids), skip_special_tokens=not special,
                               clean_up_tokenization_spaces=False).encode("utf-8")

    def detokenize(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` with special tokens hidden (as :class:`engine.llm.llama_cpp_lm.LlamaCppLM`)."""
        return self.detokenize_bytes(ids).decode("utf-8", errors="replace")

    def render(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` with special tokens written out: a prompt that tokenises back to ``ids``."""
        return self.detokenize_bytes(ids, special=True).decode("utf-8", errors="replace")

    def pieces(self) -> list[str]:
        """Text of every single token as a server writes it in string-keyed log-probs (special tokens hidden,
        undecodable bytes dropped). Built once (~0.5 s for a 150k vocabulary)."""
        if self._pieces is None:
            self._pieces = [self.detokenize_bytes([i]).decode("utf-8", errors="ignore") for i in range(self.n_vocab)]
        return self._pieces

    def chat_prompt(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """``messages`` rendered with the model's chat template (a plain "Role: text" transcript without one)."""
        if self._hf is not None:
            if getattr(self._hf, "chat_template", None):
                return self._hf.apply_chat_template(messages, tokenize=False,
                                                    add_generation_prompt=add_generation_prompt)
            template = None
        else:
            template = self._llama.metadata.get("tokenizer.chat_template")
        if not template:
            text = "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages)
            return text + ("Assistant:" if add_generation_prompt else "")
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        eos = self.detokenize_bytes([self._llama.token_eos()]).decode("utf-8", errors="replace")
        bos = self.detokenize_bytes([self._llama.token_bos()]).decode("utf-8", errors="replace")
        fmt = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos,
                                  add_generation_prompt=add_generation_prompt)
        return fmt(messages=messages).prompt

