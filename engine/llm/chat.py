"""The conversation an answer is conditioned on, trimmed so that prompt + answer always fit the LM's context.

Oldest turns go first (a user turn and its answer together); the system prompt is always kept. Trimming has
hysteresis: when the prompt would overflow, turns are dropped until it uses at most ``refill`` of the budget, and
the first kept turn then stays fixed until the next overflow. Between overflows every prompt therefore starts with
the same tokens, so the KV cache of the earlier turns is reused (:class:`engine.llm.generate.LMSession` crops the cache
to the common prefix) instead of being re-evaluated on every turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ChatHistory:
    """Turns of one conversation and the window of them that is sent to the LM.

    Args:
        lm: the LM (``chat_prompt(messages, add_generation_prompt)``, ``tokenize(text, special)``,
            ``detokenize(ids)``; ``n_ctx`` in tokens if it has one — without it nothing is trimmed).
        max_tokens: tokens reserved for the answer.
        max_turns: at most this many (user, assistant) pairs are kept (0 = no limit besides the context).
        refill: after an overflow the prompt is trimmed to at most this share of ``n_ctx - max_tokens``.
    """

    lm: object
    max_tokens: int = 256
    max_turns: int = 0
    refill: float = 0.6
    turns: list[dict[str, str]] = field(default_factory=list)
    start: int = 0  # index in ``turns`` of the first message sent to the LM (always a user message)
    trimmed_user_text: bool = False  # the last prompt had to cut the user's own words (they alone overflow)

    def add(self, user: str, assistant: str) -> None:
        self.turns += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]

    @property
    def kept(self) -> list[dict[str, str]]:
        """The turns currently sent to the LM (oldest first)."""
        return self.turns[self.start:]

    def _budget(self) -> int | None:
        n_ctx = getattr(self.lm, "n_ctx", None)
        return None if not n_ctx else int(n_ctx) - self.max_tokens

    def _tokens(self, system: str, history: list[dict], user: str | None) -> list[int]:
        msgs = [{"role": "system", "content": system}, *history]
        if user is None:
            return self.lm.tokenize(self.lm.chat_prompt(msgs, add_generation_prompt=False), special=True)
        msgs.append({"role": "user", "content": user})
        return self.lm.tokenize(self.lm.chat_prompt(msgs), special=True)

    def prompt(self, system: str, user: str) -> tuple[list[dict[str, str]], list[int]]:
        """The messages and prompt token ids for an answer to ``user``.

        Guarantees ``len(tokens) + max_tokens <= n_ctx``: old turns are dropped first; if the user's words alone
        are too long, their beginning is cut (``trimmed_user_text`` is then True) — the most recent words are kept.

        Raises:
            ValueError: the system prompt alone leaves no room for an answer.
        """
        budget = self._budget()
        if self.max_turns and len(self.kept) > 2 * self.max_turns:
            self.start = len(self.turns) - 2 * self.max_turns
        toks = self._tokens(system, self.kept, user)
        self.trimmed_user_text = False
        if budget is None or len(toks) <= budget:
            return self._msgs(system, user), toks
        target = int(self.refill * budget)
        while self.start < len(self.turns) and len(toks) > target:
            self.start = min(len(self.turns), self.start + 2)
            toks = self._tokens(system, self.kept, user)
        if len(toks) <= budget:
            return self._msgs(system, user), toks
        # the user's words alone overflow the context: keep their most recent part
        base = len(self._tokens(system, [], ""))
        room = budget - base - 8
        if room <= 0:
            raise ValueError(f"the system prompt ({base} tokens) leaves no room for a {self.max_tokens}-token answer "
                             f"in a {budget + self.max_tokens}-token context")
        ids = self.lm.tokenize(user, special=False)
        while True:
            cut = "… " + self.lm.detokenize(ids[-room:]).lstrip()
            toks = self._tokens(system, [], cut)
            if len(toks) <= budget or room <= 1:
                break
            room -= max(1, len(toks) - budget)
        self.trimmed_user_text = True
        return self._msgs(system, cut), toks

    def _msgs(self, system: str, user: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": system}, *self.kept, {"role": "user", "content": user}]

    def prefix_tokens(self, system: str) -> list[int]:
        """System prompt + kept turns (no user turn): what can be pre-filled before the user speaks."""
        return self._tokens(system, self.kept, None)
