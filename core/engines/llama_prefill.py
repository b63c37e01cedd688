"""A long prompt fed to llama.cpp a chunk per engine step, so a cancel is heard between.

llama-cpp-python evaluates a whole prompt inside the first `next()` of its stream: for an
agent's 28,000-token prompt that is minutes on a small machine during which the worker
reads no message, so a client that went away kept the worker busy to the end. Here the
prompt (past what the context already shares with it) is evaluated in chunks, one per
`step()`; the worker loop reads its pipe between steps (core.workers.worker_main), so a
cancel ends the request after the chunk in hand. The last prompt token is left for the
stream itself: every stream the engine uses (create_completion, lookup_stream,
logprob_stream) reuses the context's common prefix and evaluates the rest, so the reply
starts from logits of a live decode.

A chunk is llama.cpp's own batch (n_batch, 512): the same batches its eval of the whole
prompt would decode, so the prefill costs what it did (smaller chunks cost more on a CPU:
941 tokens of the bundled Gemma took 1.5x as long in 128-token chunks, 2.5x in 64s, on a
busy 2-core box), and a cancel waits at most one batch. What a cancelled prefill evaluated
stays in the context, so the same prompt sent again (an agent's retry) starts where it was
cut.
"""

from __future__ import annotations

from typing import Any

BATCH = 512  # llama-cpp-python's n_batch when the model's does not say


class ChunkedPrefill:
    """The prompt's tokens still to evaluate, from `at` to the last but one."""

    def __init__(self, llm: Any, tokens: list[int], at: int) -> None:
        self.llm = llm
        self.tokens = tokens
        self.at = at
        self.end = len(tokens) - 1
        self.size = max(1, int(getattr(llm, "n_batch", BATCH) or BATCH))
        self.chunks = 0

    @classmethod
    def plan(cls, llm: Any, tokens: list[int]) -> ChunkedPrefill | None:
        """A chunked prefill for `tokens`, or None when no more than a batch is new."""
        held = llm.input_ids[: llm.n_tokens].tolist()
        n = min(len(held), len(tokens) - 1)
        at = 0
        while at < n and held[at] == tokens[at]:
            at += 1
        if len(tokens) - 1 - at <= int(getattr(llm, "n_batch", BATCH) or BATCH):
            return None  # one batch: fed whole by the stream, as before
        return cls(llm, tokens, at)

    def step(self) -> bool:
        """Evaluate one chunk; True once all but the last token are in the context."""
        llm = self.llm
        n = min(self.size, self.end - self.at)
        if n > 0:
            llm.n_tokens = self.at  # eval drops every cell past n_tokens first
            llm.eval(self.tokens[self.at:self.at + n])
            self.at += n
            self.chunks += 1
        return self.at >= self.end
