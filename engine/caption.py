"""Caption path (AR baseline): live re-translation of each partial transcript, from scratch each time.

Each update renders the instruction + source text with the chat template and decodes the translation greedily.
The unchanged instruction prefix is reused from the KV cache (prefix caching); the translation itself is always
regenerated — the baseline that SSBD (ssbd_live_translation.txt) is measured against.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from .generate import GenStats, LMSession, greedy_stream

LANGUAGES = {"de": "German", "fr": "French", "es": "Spanish", "it": "Italian", "pt": "Portuguese", "nl": "Dutch",
             "zh": "Chinese", "ja": "Japanese", "ru": "Russian", "en": "English", "pl": "Polish", "tr": "Turkish"}


def language_name(code_or_name: str) -> str:
    return LANGUAGES.get(code_or_name.lower(), code_or_name)


@dataclass
class TranslationResult:
    text: str
    tokens: list[int]
    compute_s: float
    stats: GenStats


class Translator:
    """Translate English text into ``target`` with a chat LLM (:class:`engine.lm.LlamaCppLM`).

    Args:
        lm: CausalLM with ``chat_prompt``.
        target: language name or code ("de" → German).
    """

    def __init__(self, lm, target: str = "German", max_tokens: int = 96):
        self.lm = lm
        self.session = LMSession(lm)
        self.target = language_name(target)
        self.max_tokens = max_tokens

    def prompt_tokens(self, source: str) -> list[int]:
        messages = [
            {"role": "system", "content": f"You are a professional translator. Translate the user's English text "
                                          f"into {self.target}. Output only the {self.target} translation."},
            {"role": "user", "content": source},
        ]
        return self.lm.tokenize(self.lm.chat_prompt(messages), special=True)

    def translate(self, source: str, cancel: threading.Event | None = None) -> TranslationResult:
        """AR re-translation from scratch: greedy decoding of the whole translation."""
        t0 = time.perf_counter()
        stats = GenStats()
        toks = list(greedy_stream(self.session, self.prompt_tokens(source), self.max_tokens, self.lm.eos_ids,
                                  cancel, stats))
        return TranslationResult(self.lm.detokenize(toks).strip(), toks, time.perf_counter() - t0, stats)
