"""mlx_lm's GenerationBatch without the per-row work an engine that reads only tokens
never needs (see LeanGenerationBatch): the batch path's decode step."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.generate import GenerationBatch
from mlx_lm.models.cache import BatchKVCache

from core.engines.grammar import MaskedProcessor, mask_rows
from core.engines.sampling import greedy


class LeanGenerationBatch(GenerationBatch):
    """GenerationBatch whose step does not split log-probabilities per row.

    The engine reads only tokens; splitting a (B, vocab) array into B lazy rows and
    evaluating them every step is pure overhead at large batch sizes. Its `next` returns
    bare (uid, token) pairs: the engine itself decides when a request ends (end-of-turn
    tokens, stop strings, max_tokens) and removes it, so the per-row stop matchers,
    counters, Response objects and eager cache extraction of GenerationBatch.next are
    skipped too.
    """

    def next(self) -> list[tuple[int, int]]:  # type: ignore[override]
        if not self.uids:
            return []
        tokens, _ = self._step()
        return list(zip(self.uids, tokens, strict=True))

    def filter(self, keep: list[int]) -> None:
        """Keep rows `keep`, without reading the cache back to the host.

        BatchKVCache.filter reads every layer's left padding (a host sync per layer, the
        first waiting for the step in flight) to drop padding columns no row needs; that
        made the step that removed finished rows several times slower than the rest.
        Here the common padding is worked out from the rows' token counts, which the
        batch already holds on the host (every row ends at the cache's write index).
        """
        layers = self.prompt_cache
        if not (keep and layers and all(type(c) is BatchKVCache for c in layers)):
            super().filter(keep)
            return
        longest = max(len(self.tokens[i]) for i in keep)
        idx = mx.array(keep)
        for c in layers:
            if c.keys is not None:
                c.keys = c.keys[idx]
                c.values = c.values[idx]
            c.offset = c.offset[idx]
            c.left_padding = c.left_padding[idx]
            # One column of margin: a count that was off by one would otherwise cut a
            # real position; a spare padded column costs nothing.
            shift = c._idx - longest - 1
            if shift > 0 and c.keys is not None:
                c.keys = c.keys[..., shift:, :]
                c.values = c.values[..., shift:, :]
                c._idx -= shift
                c.left_padding = c.left_padding - shift
        self.prompt_cache = []  # GenerationBatch.filter would filter the layers again
        try:
            super().filter(keep)
        finally:
            self.prompt_cache = layers

    def _step(self) -> tuple[list[int], list[Any]]:
        self._current_tokens = self._next_tokens
        inputs = self._current_tokens
        logits = self.model(inputs[:, None], cache=self.prompt_cache)[:, -1, :]
        contexts = []
        tokens: list[int] | None = None
        if any(self.logits_processors):
            logits, contexts, grammar_rows = self._process_rows(inputs, logits)
            if grammar_rows:
                # The forward pass runs while the host computes the masks, which need
                # this step's input tokens (the previous step's, read back here).
                mx.async_eval(logits)
                tokens = inputs.tolist()
                logits = mask_rows(logits, grammar_rows, tokens)
        samplers = self.samplers or [self.fallback_sampler] * len(self.uids)
        first = samplers[0] if samplers else self.fallback_sampler
        shared = all(s is first for s in samplers)
        if shared and first is greedy:  # see greedy: no normalisation needed
            sampled = greedy(logits)
        else:
            logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
            if shared:
                sampled = first(logprobs)
            else:
                sampled = mx.concatenate(
                    [s(logprobs[e : e + 1]) for e, s in enumerate(samplers)], axis=0
                )
        self._next_tokens = sampled
        self._next_logprobs = [None] * len(self.uids)
        mx.async_eval(sampled, contexts)
        if tokens is None:
            tokens = inputs.tolist()
        for seq, tok in zip(self.tokens, tokens, strict=True):
            seq.append(tok)
        return tokens, self._next_logprobs

    def _process_rows(
        self, inputs: mx.array, logits: mx.array
    ) -> tuple[mx.array, list[mx.array], list[tuple[int, MaskedProcessor]]]:
        """Run the per-row processors (penalties, bias) on the rows that have them, and
        collect the rows whose last processor is a grammar: those are masked together
        (core.engines.grammar.mask_rows), not row by row. Rows without processors are
        not touched, and a batch with only grammars is neither split nor joined."""
        contexts: list[mx.array] = []
        grammar_rows: list[tuple[int, MaskedProcessor]] = []
        rows: list[mx.array] | None = None
        for e, processors in enumerate(self.logits_processors):
            if not processors:
                continue
            if isinstance(processors[-1], MaskedProcessor):
                grammar_rows.append((e, processors[-1]))
                processors = processors[:-1]
                if not processors:
                    continue
            if rows is None:
                rows = [logits[i : i + 1] for i in range(logits.shape[0])]
            context = self._token_context[e].update_and_fetch(inputs[e : e + 1])
            contexts.append(context)
            row = rows[e]
            for processor in processors:
                row = processor(context, row)
            rows[e] = row
        if rows is not None:
            logits = mx.concatenate(rows, axis=0)
        return logits, contexts, grammar_rows
