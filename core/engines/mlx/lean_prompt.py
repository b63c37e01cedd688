"""mlx_lm's PromptProcessingBatch without two costs a later turn paid on a GPU (issue 49).

When every row of the prompt batch has reached its last token (a group of cached turns
always does at once), BatchGenerator splits them all off with `split`, which deep-copies
the whole merged cache first (8 conversations of ~3k tokens: ~3 GB copied for nothing)
and then filters both halves. Here taking every row moves the batch's state instead.

Its `prompt` also empties MLX's whole buffer cache after every chunk, so the steps that
follow allocate every buffer afresh (slow on CUDA); here the buffer cache is trimmed by
size instead, as the rest of the engine does (core.engines.mlx.single).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.generate import PromptProcessingBatch, _right_pad_prompts

from core.engines.mlx.single import trim_buffer_cache

_STATE = ("uids", "prompt_cache", "tokens", "samplers", "logits_processors", "max_tokens",
          "stop_sequences")


class LeanPromptBatch(PromptProcessingBatch):
    """PromptProcessingBatch whose whole-batch split moves rather than copies."""

    def split(self, indices: list[int]) -> PromptProcessingBatch:
        if sorted(indices) != list(range(len(self.uids))):
            return super().split(indices)
        taken = self.__class__.__new__(self.__class__)
        taken.__dict__.update(self.__dict__)
        for name in _STATE:  # fresh lists: filter() clears some in place
            setattr(self, name, [])
        return taken

    def prompt(self, tokens: list[list[int]]) -> None:
        """PromptProcessingBatch.prompt, trimming MLX's buffer cache by size instead of
        emptying it after every chunk."""
        if len(self.uids) != len(tokens):
            raise ValueError("The batch length doesn't match the number of inputs")
        if not tokens:
            return
        for held, new in zip(self.tokens, tokens, strict=True):
            held += new
        lengths = [len(p) for p in tokens]
        longest = max(lengths)
        padding = [longest - n for n in lengths]
        if max(padding) > 0:
            batch = _right_pad_prompts(tokens, max_length=longest)
            for c in self.prompt_cache:
                c.prepare(lengths=lengths, right_padding=padding)
        else:
            batch = mx.array(tokens)
        while batch.shape[1] > 0:
            n = min(self.prefill_step_size, batch.shape[1])
            self.model(batch[:, :n], cache=self.prompt_cache)
            mx.eval([c.state for c in self.prompt_cache])
            batch = batch[:, n:]
        if max(padding) > 0:
            for c in self.prompt_cache:
                c.finalize()
            mx.eval([c.state for c in self.prompt_cache])
        trim_buffer_cache()


def lean_prompt_batch(model: Any, sampler: Any, prefill_step_size: int) -> LeanPromptBatch:
    """An empty LeanPromptBatch (BatchGenerator's starting prompt batch)."""
    return LeanPromptBatch.empty(model, sampler, prefill_step_size=prefill_step_size)
