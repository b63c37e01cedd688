"""The engine protocol every back end implements, and the request it serves.

Engines run inside a worker process and are driven step by step by the worker's loop:
`submit` queues a request, `step` advances every active request by one engine step and
returns the new events per request, `cancel` frees a request's slot at the next step.
Engines know nothing of SQLite, pipes or the UI.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from core.events import Event

# Penalty look-back when a request names none (llama.cpp's default); the bound keeps a
# window a user typed from meaning "scan a million tokens every step".
DEFAULT_PENALTY_WINDOW = 64
MAX_PENALTY_WINDOW = 32_768
MAX_LOGIT_BIAS = 1024
MAX_TOP_LOGPROBS = 20
# max_tokens meaning "no cap of its own": every engine ends a reply when the context is
# full (context size minus the prompt), as OpenAI's API and Ollama do when not told.
ROOM_LEFT = 1 << 30


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Per-request sampling settings; defaults are the app's defaults."""

    temperature: float = 0.7
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    max_tokens: int = 512
    stop: tuple[str, ...] = ()
    # OpenAI's additive penalties; each penalty looks back over its own window of tokens
    # (prompt included), as mlx_lm's processors do.
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_context_size: int = DEFAULT_PENALTY_WINDOW
    presence_context_size: int = DEFAULT_PENALTY_WINDOW
    frequency_context_size: int = DEFAULT_PENALTY_WINDOW
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit)
    logprobs: bool = False  # report each sampled token's log-probability
    top_logprobs: int = 0  # ... and this many most likely alternatives (0-20)
    # The reply must be JSON matching this JSON schema (given as JSON text), enforced while
    # decoding (OpenAI's response_format json_object / json_schema).
    json_schema: str | None = None

    def validate(self) -> None:
        """Raise ValueError with a sentence a user can act on when out of range."""
        if not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"temperature must be between 0 and 2 (got {self.temperature})")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be above 0 and at most 1 (got {self.top_p})")
        if self.top_k < 0:
            raise ValueError(f"top_k must be 0 (off) or at least 1 (got {self.top_k})")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be between 0 and 1 (got {self.min_p})")
        if self.repetition_penalty <= 0:
            raise ValueError(
                f"repetition_penalty must be above 0 (got {self.repetition_penalty})"
            )
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1 (got {self.max_tokens})")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not -2.0 <= value <= 2.0:
                raise ValueError(f"{name} must be between -2 and 2 (got {value})")
        for name in ("repetition_context_size", "presence_context_size", "frequency_context_size"):
            value = getattr(self, name)
            if not 1 <= value <= MAX_PENALTY_WINDOW:
                raise ValueError(f"{name} must be between 1 and {MAX_PENALTY_WINDOW} tokens "
                                 f"(got {value})")
        if len(self.logit_bias) > MAX_LOGIT_BIAS:
            raise ValueError(f"logit_bias may name at most {MAX_LOGIT_BIAS} tokens "
                             f"(got {len(self.logit_bias)})")
        for token, bias in self.logit_bias:
            if token < 0:
                raise ValueError(f"logit_bias token ids must be 0 or more (got {token})")
            if not -100.0 <= bias <= 100.0:
                raise ValueError(f"logit_bias values must be between -100 and 100 "
                                 f"(got {bias} for token {token})")
        if not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS} "
                             f"(got {self.top_logprobs})")
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs set to true")
        if self.seed is not None and not -(2**63) <= self.seed < 2**64:
            raise ValueError(f"seed must fit in 64 bits (got {self.seed})")

    def logit_bias_for(self, vocab_size: int) -> dict[int, float]:
        """The bias as a dict, refusing ids the model's vocabulary does not have."""
        bias = dict(self.logit_bias)
        bad = sorted(t for t in bias if t >= vocab_size)
        if bad:
            raise ValueError(f"logit_bias names token ids {bad[:5]} but this model's "
                             f"vocabulary has {vocab_size} tokens (ids 0-{vocab_size - 1})")
        return bias


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One chat turn to generate.

    `messages` are OpenAI-style dicts ({"role": ..., "content": ...}); the engine renders
    them with the model's chat template. `session_id` lets a worker keep the
    conversation's KV cache (prefix reuse, affinity).

    `prompt` set (the API's /v1/completions) means raw text instead: tokenised as is
    (with the model's BOS), no chat template, no base-model transcript, and its output
    is not parsed for reasoning or tool calls; `messages` is then empty.

    `tool_choice` "required", or `tool_name` (the one tool named by the API's
    tool_choice), makes the reply start with a tool call (core.engines.tool_grammar).

    `thinking` (None: the model's own default) is the chat template's thinking switch
    (Qwen3's enable_thinking), passed only to templates that have it (template_switches).

    `reply_prefix` is the start of the assistant's reply, already written (a reply cut at
    its length limit, continued): it goes after the generation prompt, so the model goes on
    from it, and the stream carries only what follows. The previous turn's KV cache holds
    exactly that prefix, so only the few tokens after it are prefilled.

    `report_prompt` asks for a PromptRead event (core.events) before the prefill, from the
    engines that tokenize ahead of it (llama.cpp, scripted); others send none.

    `aside` marks a request made beside a conversation (its summary, written ahead from
    its cached history): it must leave the conversation's KV cache where it is.
    """

    request_id: str
    messages: tuple[dict[str, Any], ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    tools: tuple[dict[str, Any], ...] = ()
    session_id: str | None = None
    tool_choice: str = "auto"  # "auto" | "required"
    tool_name: str | None = None
    prompt: str | None = None
    thinking: bool | None = None
    reply_prefix: str = ""
    aside: bool = False
    interactive: bool = False  # a person's turn in the app: first for a slot (workers.slots)
    report_prompt: bool = False  # a PromptRead event once tokenized (engines that can)


def template_switches(template: str | None, thinking: bool | None) -> dict[str, Any]:
    """The extra variables a chat template is rendered with: enable_thinking when the
    request sets it and the template reads it (a template without the switch, or a
    request that leaves it unset, renders exactly as before)."""
    if thinking is None or not template or "enable_thinking" not in template:
        return {}
    return {"enable_thinking": thinking}


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What to load: a path plus the engine chosen for it and engine options."""

    path: str
    engine: str  # "llamacpp" | "mlx" | "scripted" ...
    context_size: int = 4096
    options: tuple[tuple[str, Any], ...] = ()

    def option(self, name: str, default: Any = None) -> Any:
        return dict(self.options).get(name, default)


class Engine(Protocol):
    """A loaded model that generates for one or more requests at a time."""

    name: str
    max_concurrency: int

    def submit(self, request: GenerationRequest) -> None: ...

    def cancel(self, request_id: str) -> None: ...

    def has_work(self) -> bool: ...

    def step(self) -> list[tuple[str, list[Event]]]:
        """Advance every active request one step; return (request_id, new events)."""
        ...

    def info(self) -> dict[str, Any]:
        """Static facts for status (context size, family, chat template presence)."""
        ...

    def close(self) -> None: ...


class EngineLoadError(Exception):
    """Load failed for a reason the user can act on; `code` is an events.Error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
