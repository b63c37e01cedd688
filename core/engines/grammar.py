"""Structured output for the MLX engine: a JSON schema enforced while decoding.

Why llguidance: bench/grammar.py measured it against xgrammar on the bundled Gemma's
262k-token vocabulary and one JSON schema (CPU): a schema compiles in about 1 ms against
xgrammar's 83 ms (every request brings its own schema, so this is paid per request), the
per-token bitmask costs about 20 us, and applying a mask to the logits costs the same
for both (about 0.2 ms on the CPU for 262k logits, which dominates there); and its wheel
brings no torch or triton. A constrained request can sit in a batch beside
unconstrained ones: only its own row is masked. Alone it is an mlx_lm logits processor;
in the batched decode step all constrained rows are masked together (`mask_rows`: one
shared bitmask, one fused op), while the forward pass runs.

The processor pairs calls with tokens the way core.engines.sampling's recorder does: each
call samples the request's next token, and (after the first) the last token of the
context it is given is the one sampled by the previous call, on either decode path.
"""

from __future__ import annotations

import json
import os
from typing import Any

import mlx.core as mx
import numpy as np

# Schemas the engine takes for OpenAI's response_format {"type": "json_object"}.
ANY_JSON_OBJECT = json.dumps({"type": "object"})


class MaskedProcessor:
    """A row's mlx_lm logits processor whose mask is an llguidance matcher's.

    Alone (the single-stream path, and a batch row's first token, which mlx_lm's own
    prefill step samples) it is called per row; the batched decode step instead masks
    every row whose last processor is one of these at once (`mask_rows`). Both go
    through `next_matcher` and the same packed bitmask, so a row gets the same mask on
    either path. Subclasses say how a sampled token moves them on (`consume`) and which
    matcher masks the next token (`active_matcher`: None leaves the row free).
    """

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.started = False
        self._row: np.ndarray | None = None  # its own one-row bitmask, for lone calls

    def consume(self, token: int) -> None:
        raise NotImplementedError

    def active_matcher(self) -> Any | None:
        raise NotImplementedError

    def next_matcher(self, token: int | None) -> Any | None:
        """Consume the token the previous call sampled (`token`; None on the first call,
        whose context ends in the prompt) and return the matcher that masks this call."""
        if self.started:
            self.consume(token)
        self.started = True
        return self.active_matcher()

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        matcher = self.next_matcher(int(tokens[-1].item()) if self.started else None)
        if matcher is None:
            return logits
        if self._row is None:
            self._row = _full_bitmask(1, self.vocab_size)
        matcher.unsafe_compute_mask_ptr(self._row.ctypes.data, self._row.nbytes)
        return _masked(logits, mx.array(self._row))


class GrammarProcessor(MaskedProcessor):
    """Masks every token the schema does not allow next (see the module docstring). Once
    the schema is complete the matcher allows only end-of-turn tokens, so the mask still
    applies then: it ends the reply."""

    def __init__(self, matcher: Any, vocab_size: int) -> None:
        super().__init__(vocab_size)
        self.matcher = matcher

    def consume(self, token: int) -> None:
        self.matcher.consume_token(token)

    def active_matcher(self) -> Any:
        return self.matcher


def mask_rows(logits: mx.array, rows: list[tuple[int, MaskedProcessor]],
              tokens: list[int]) -> mx.array:
    """Mask the constrained rows of a batch's [B, V] logits in one operation.

    `rows` pairs a row index with its processor (the last processor of that row: nothing
    after it may lift the mask) and `tokens` are the batch's input tokens of this step,
    the ones each row's previous call sampled. Each processor consumes its token, the
    masks of those that constrain this token are written into one shared bitmask (rows
    without one keep all bits set) and a single fused op applies it. This replaced a loop
    of per-row calls (a host sync for the token, a mask unpacked on the host and a where
    per row, then a concatenate of the rows): bench/grammar.py --quick (32 rows, tiny
    model, 2 loaded CPU cores, old and new run back to back) went from 0.48-0.56 of a
    plain decode step to 0.11-0.13 (0.09 on a quiet machine). On Gemma's 262k vocabulary
    the masks cost ~33 us a row on one core (llguidance), spread over cores by its pool
    and computed while the forward pass runs.
    """
    batch, vocab = logits.shape
    live: list[tuple[Any, int]] = []
    for e, proc in rows:
        matcher = proc.next_matcher(tokens[e] if proc.started else None)
        if matcher is not None:
            live.append((matcher, e))
    if not live:
        return logits
    words = _batch_bitmask(batch, vocab)
    if len(live) < batch:  # a row masked on an earlier step may be free now
        words.fill(-1)
    stride = words.shape[1] * 4
    executor = _executor()
    if executor is None:
        for matcher, e in live:
            matcher.unsafe_compute_mask_ptr(words.ctypes.data + e * stride, stride)
    else:
        executor.unsafe_compute_mask_ptr(live, words.ctypes.data, stride, batch)
    return _masked(logits, mx.array(words))


def _full_bitmask(rows: int, vocab: int) -> np.ndarray:
    """llguidance's packed layout: 32 tokens per int32 word, bit i of word w is token
    32w+i; all bits set (every token allowed)."""
    return np.full((rows, (vocab + 31) // 32), -1, dtype=np.int32)


_BITMASKS: dict[tuple[int, int], np.ndarray] = {}
_EXECUTOR: list[Any] = []


def _batch_bitmask(batch: int, vocab: int) -> np.ndarray:
    """A reused host buffer per batch shape (mx.array copies it, so reuse is safe)."""
    words = _BITMASKS.get((batch, vocab))
    if words is None:
        if len(_BITMASKS) > 64:
            _BITMASKS.clear()
        words = _BITMASKS[(batch, vocab)] = _full_bitmask(batch, vocab)
    return words


def _executor() -> Any:
    """llguidance's mask thread pool, made in the process that uses it (a worker); None
    on a machine of fewer than 4 cores, where handing the masks to its one thread made
    them slower than computing them here (tiny model, 32 rows, 2 cores: 250 against
    140 us a step), while on many cores the pool splits Gemma's ~24 us rows."""
    if not _EXECUTOR:
        import llguidance

        _EXECUTOR.append(llguidance.LLExecutor() if (os.cpu_count() or 1) >= 4 else None)
    return _EXECUTOR[0]


@mx.compile
def _masked(logits: mx.array, words: mx.array) -> mx.array:
    """`logits` where the packed bitmask `words` allows the token, -inf elsewhere: one
    fused kernel over [B, V] (compiled once per batch size)."""
    rows, vocab = logits.shape
    bits = (words[:, :, None] >> mx.arange(32, dtype=mx.int32)) & 1
    allowed = bits.reshape(rows, -1)[:, :vocab]
    return mx.where(allowed.astype(mx.bool_), logits, -mx.inf)


class Grammars:
    """Builds GrammarProcessors for one model (its llguidance tokenizer made once)."""

    def __init__(self, tokenizer: Any, vocab_size: int, eos_ids: list[int]) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._eos = eos_ids
        self._ll: Any = None

    def ll_tokenizer(self, purpose: str) -> Any:
        """The model's llguidance tokenizer, made on first use and shared by every grammar
        of this model (response formats and tool calls); ValueError naming `purpose` for
        a tokenizer that cannot drive one."""
        if self._ll is None:
            import llguidance
            import llguidance.hf

            hf = getattr(self._tokenizer, "_tokenizer", self._tokenizer)  # mlx_lm's wrapper
            try:
                backend = getattr(hf, "backend_tokenizer", None)  # a fast tokenizer's
                if backend is not None and backend.padding is None and backend.truncation is None:
                    # What llguidance.hf.from_tokenizer does, less its copy of the whole
                    # tokenizer (there to clear padding and truncation, unset here): ~2 of
                    # its ~7 CPU-s for Gemma 3's 262k vocabulary on a 2-core CPU.
                    self._ll = llguidance.LLTokenizer(backend.to_str(), n_vocab=self._vocab_size,
                                                      eos_token=self._eos)
                else:
                    self._ll = llguidance.hf.from_tokenizer(hf, n_vocab=self._vocab_size,
                                                            eos_token=self._eos)
            except ValueError as exc:  # a slow (Python) tokenizer
                raise ValueError(f"{purpose}: this model's tokenizer cannot drive a "
                                 f"grammar ({exc})") from None
        return self._ll

    def processor(self, schema: str) -> GrammarProcessor:
        """A fresh processor for `schema` (JSON text); ValueError for a schema it cannot use."""
        import llguidance

        ll = self.ll_tokenizer("response_format")
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                schema, defaults={"whitespace_flexible": False})
        except ValueError as exc:
            raise ValueError(f"response_format: the JSON schema is not valid JSON ({exc})") from None
        matcher = llguidance.LLMatcher(ll, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(f"response_format: this JSON schema cannot be enforced: "
                             f"{matcher.get_error()}")
        return GrammarProcessor(matcher, self._vocab_size)
