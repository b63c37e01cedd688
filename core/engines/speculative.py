"""Prompt-lookup speculative decoding: draft tokens from n-gram matches, verify them in
one forward pass, keep the greedy prefix that matches.

Why: a lone request decoding on a small model is bound by the cost of one pass, not by
its width, so a pass over the last token plus k guessed tokens costs little more than a
pass over one. Guesses come from the request's own history (prompt + reply): text that
repeats the prompt ("fix the typos", "repeat this code with one change") continues an
earlier n-gram. Only greedy requests without grammar or logprobs speculate: for them,
keeping each drafted token that equals the argmax the model gives at its position (after
that position's penalties, computed over the history as it would be there) and the
model's own token after the first mismatch yields exactly the tokens plain decoding
yields. Both engines use `NgramDrafter` and `Acceptance`; the
engines own the forward pass and the KV rewind (core.engines.mlx, core.engines.llamacpp).
"""

from __future__ import annotations

from core.engines.base import SamplingParams

# Longest and shortest n-gram looked up; the longest match wins (fewer false drafts).
MAX_NGRAM = 4
MIN_NGRAM = 2
# Tokens drafted per pass: past ~8 the pass stops being nearly free on a CPU.
MAX_DRAFT = 8
# Speculation turns itself off for a request whose drafts keep failing: after
# MIN_DRAFTED drafted tokens, when fewer than ACCEPT_FLOOR of them were accepted.
MIN_DRAFTED = 24
ACCEPT_FLOOR = 0.3
# ... or whose history keeps offering nothing to draft from (each lookup that finds no
# match costs a little, and on MLX it gives up one step of pipelining).
MAX_MISSES = 32


def speculable(sp: SamplingParams) -> bool:
    """Whether speculation keeps this request's output exactly as plain decoding's (a
    grammar's state and log-probabilities would have to be rewound with the drafts)."""
    return sp.temperature == 0 and not sp.logprobs and sp.json_schema is None


class NgramDrafter:
    """Proposes the tokens that followed the latest earlier occurrence of the history's
    last n tokens. The index is updated as tokens arrive, so a lookup is O(n), not a scan."""

    def __init__(self, history: list[int]) -> None:
        self.tokens: list[int] = []
        # n-gram -> the position right after its latest occurrence that has a follower
        self._index: dict[tuple[int, ...], int] = {}
        self.extend(history)

    def extend(self, tokens: list[int]) -> None:
        toks = self.tokens
        for token in tokens:
            toks.append(token)
            end = len(toks) - 1  # the n-grams ending just before `token` now have a follower
            for n in range(MIN_NGRAM, MAX_NGRAM + 1):
                if end >= n:
                    self._index[tuple(toks[end - n:end])] = end

    def draft(self, k: int = MAX_DRAFT) -> list[int]:
        toks = self.tokens
        for n in range(MAX_NGRAM, MIN_NGRAM - 1, -1):
            if len(toks) <= n:
                continue
            at = self._index.get(tuple(toks[-n:]))
            if at is not None:
                return toks[at:at + k]
        return []


def accepted(draft: list[int], predicted: list[int]) -> int:
    """How many drafted tokens the model's own greedy picks confirm (predicted[i] is the
    argmax after the token before draft[i])."""
    n = 0
    while n < len(draft) and draft[n] == predicted[n]:
        n += 1
    return n


class Acceptance:
    """A request's draft record; `on` turns False for good when drafts keep failing."""

    def __init__(self) -> None:
        self.on = True
        self.drafted = 0
        self.accepted = 0
        self.misses = 0  # lookups in a row that found nothing
        # Tokens to draft next: grows while whole drafts are accepted, shrinks to just past
        # what was accepted when one fails (a failed token still costs its share of a pass).
        self.k = MAX_DRAFT

    def record(self, drafted: int, accepted: int) -> None:
        self.drafted += drafted
        self.accepted += accepted
        self.misses = 0
        self.k = min(MAX_DRAFT, self.k + 2) if accepted == drafted else max(2, accepted + 1)
        if self.drafted >= MIN_DRAFTED and self.accepted < ACCEPT_FLOOR * self.drafted:
            self.on = False

    def miss(self) -> None:
        self.misses += 1
        if self.misses >= MAX_MISSES:
            self.on = False
