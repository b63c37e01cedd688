"""The state the MLX engine's rooms hand each other.

A request from admission to Done, the lone request on the single-stream path, and the
rows a batch step retired. Kept in a room of its own so that admission, the single and
batch paths, speculative decoding and the prefix saves can all name them without
importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx

from core.engines.base import GenerationRequest
from core.engines.reply_tail import ReplyTail
from core.engines.speculative import Acceptance, NgramDrafter
from core.events import Error


@dataclass
class Request:
    """One request's state from admission to Done."""

    req: GenerationRequest
    prompt: list[int]
    max_tokens: int
    sampler: Any
    processors: list[Any]
    detok: Any
    tail: ReplyTail  # stops, a base model's leading space (core.engines.reply_tail)
    submitted: float
    cached: int = 0
    generated: list[int] = field(default_factory=list)
    first_token_at: float | None = None
    last_token_at: float | None = None
    uid: int | None = None
    error: Error | None = None
    new_tokens: int | None = None  # uncached prompt tokens when first queued for prefill
    text: str | None = None  # the rendered prompt (None for raw-token requests)
    raw: str = ""  # everything generated, stop strings and end-of-turn included
    marks: tuple[tuple[int, int], ...] = ()  # exact text/token boundaries in the prompt
    spec: Acceptance | None = None  # prompt-lookup drafting (alone and greedy only)
    draft_cache: list[Any] | None = None  # the draft model's KV (when one is loaded) ...
    draft_fed: int = 0  # ... holding this many tokens of prompt + generated
    drafter: NgramDrafter | None = None
    alone: bool = False  # prefilled on the single path: its TTFT is a prefill's time


@dataclass
class FinishedRows:
    """Requests that left the batch on one step, with their rows of every KV layer."""

    acts: list[Request]
    tokens: list[list[int]]
    kv: list[tuple[mx.array, mx.array, int]]  # keys, values, end column


@dataclass
class SingleStream:
    """The request decoding alone, generate_step style: `y` is queued, not yet read."""

    act: Request
    cache: list[Any]
    y: mx.array  # None while `at` is set
    context: mx.array | None
    emitted: bool = False  # y was read and handed out, but not yet fed to the model
    at: int | None = None  # a long prompt read so far, a chunk per step (core.engines.mlx.chunked)
    # work beside a conversation prefills a chunk a step (SinglePath._start_single): the
    # prompt tokens still to go, None once `y` is its first token, queued
    rest: mx.array | None = None
