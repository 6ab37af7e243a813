"""One re-translation update and the streaming metrics of live translation.

From "Self-Speculative Biased Decoding for Faster Live Translation" (Zeng et al., Zoom, 2025;
../shared/papers/ssbd_live_translation.txt): erasure E(i) = |Y^{i−1}| − |LCP(Y^{i−1}, Y^i)| (Eq. 3) over the
displayed outputs (sacrebleu 13a words), normalised erasure NE = Σ E(i) / |Y^N| (Eq. 4), draft acceptance A/D,
accepted share of output A/O, output tokens/s (:class:`StreamStats`). :class:`SSBDUpdate` is the record every
live translator (SSBD or AR re-translation) returns for one update.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.core import verify as V


@dataclass
class SSBDUpdate:
    """One update. Token counts are LLM tokens: ``draft`` D, ``accepted`` A, ``output`` O."""

    source: str
    tokens: list[int]
    text: str
    stable_text: str  # what the caption shows (display-only mask-k hides the tail)
    tail_text: str
    draft: int
    accepted: int
    output: int
    forward_passes: int
    compute_s: float
    final: bool


def words(text: str) -> list[str]:
    """Tokens for erasure counting: sacrebleu's 13a tokenisation (words and punctuation)."""
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    return Tokenizer13a()(text.strip()).split()


def erasure(prev: list[str], cur: list[str]) -> int:
    """Eq. 3: E(i) = |Y^{i-1}| − |LCP(Y^{i-1}, Y^i)|."""
    return len(prev) - V.common_prefix(prev, cur)


def normalized_erasure(displayed: list[str]) -> float:
    """Eq. 4: NE = Σ_i E(i) / |Y^N| over a sequence of displayed outputs (the last one is final)."""
    seqs = [words(t) for t in displayed]
    if not seqs or not seqs[-1]:
        return 0.0
    return sum(erasure(a, b) for a, b in zip(seqs, seqs[1:])) / len(seqs[-1])


@dataclass
class StreamStats:
    """Running metrics of one source stream (a sentence or an utterance)."""

    updates: list[SSBDUpdate] = field(default_factory=list)

    @property
    def ne(self) -> float:
        return normalized_erasure([u.stable_text if not u.final else u.text for u in self.updates])

    @property
    def spec(self) -> V.SpecStats:
        """The updates' counters as :class:`engine.core.verify.SpecStats` (a round = an update that had a draft)."""
        st = V.SpecStats(tokens=sum(u.output for u in self.updates),
                         target_passes=sum(u.forward_passes for u in self.updates),
                         seconds=sum(u.compute_s for u in self.updates))
        for u in self.updates:
            if u.draft:
                st.record(u.draft, u.accepted)
        return st

    @property
    def acceptance(self) -> float:
        """Draft acceptance A/D over the stream."""
        return self.spec.acceptance_rate

    @property
    def accepted_share(self) -> float:
        o = sum(u.output for u in self.updates)
        return sum(u.accepted for u in self.updates) / o if o else 0.0

    @property
    def tokens_per_s(self) -> float:
        t = sum(u.compute_s for u in self.updates)
        return sum(u.output for u in self.updates) / t if t else 0.0
