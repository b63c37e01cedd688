"""Structured output for the MLX engine: a JSON schema enforced while decoding.

Why llguidance: bench/grammar.py measured it against xgrammar on the bundled Gemma's
262k-token vocabulary and one JSON schema (CPU): a schema compiles in about 1 ms against
xgrammar's 83 ms (every request brings its own schema, so this is paid per request), the
per-token bitmask costs about 20 us, and applying a mask to the logits costs the same
for both (about 0.2 ms on the CPU for 262k logits, which dominates there); and its wheel
brings no torch or triton. It is driven row by row as an mlx_lm logits processor, so a
constrained request can sit in a batch beside unconstrained ones: only its own row is
masked.

The processor pairs calls with tokens the way core.engines.sampling's recorder does: each
call samples the request's next token, and (after the first) the last token of the
context it is given is the one sampled by the previous call, on either decode path.
"""

from __future__ import annotations

import json
from typing import Any

import mlx.core as mx
import numpy as np

# Schemas the engine takes for OpenAI's response_format {"type": "json_object"}.
ANY_JSON_OBJECT = json.dumps({"type": "object"})


class GrammarProcessor:
    """Masks every token the schema does not allow next (see the module docstring)."""

    def __init__(self, matcher: Any, vocab_size: int) -> None:
        self.matcher = matcher
        self.vocab_size = vocab_size
        self.started = False

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        if self.started:
            self.matcher.consume_token(int(tokens[-1].item()))
        self.started = True
        bits = np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint8)
        allowed = np.unpackbits(bits, bitorder="little")[: self.vocab_size].astype(bool)
        if allowed.shape[0] < self.vocab_size:
            allowed = np.pad(allowed, (0, self.vocab_size - allowed.shape[0]))
        return mx.where(mx.array(allowed), logits, -mx.inf)


class Grammars:
    """Builds GrammarProcessors for one model (its llguidance tokenizer made once)."""

    def __init__(self, tokenizer: Any, vocab_size: int, eos_ids: list[int]) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._eos = eos_ids
        self._ll: Any = None

    def processor(self, schema: str) -> GrammarProcessor:
        """A fresh processor for `schema` (JSON text); ValueError for a schema it cannot use."""
        import llguidance
        import llguidance.hf

        if self._ll is None:
            hf = getattr(self._tokenizer, "_tokenizer", self._tokenizer)  # mlx_lm's wrapper
            try:
                self._ll = llguidance.hf.from_tokenizer(hf, n_vocab=self._vocab_size,
                                                        eos_token=self._eos)
            except ValueError as exc:  # a slow (Python) tokenizer
                raise ValueError(f"response_format: this model's tokenizer cannot drive a "
                                 f"grammar ({exc})") from None
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                schema, defaults={"whitespace_flexible": False})
        except ValueError as exc:
            raise ValueError(f"response_format: the JSON schema is not valid JSON ({exc})") from None
        matcher = llguidance.LLMatcher(self._ll, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(f"response_format: this JSON schema cannot be enforced: "
                             f"{matcher.get_error()}")
        return GrammarProcessor(matcher, self._vocab_size)
