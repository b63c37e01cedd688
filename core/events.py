"""Typed stream events: the only vocabulary between the core and the UI.

Every engine (llama.cpp, MLX, a remote backend) produces these, so the UI renders one
shape of data and never parses raw model text. They are frozen dataclasses so they pickle
cheaply across worker pipes and can be shared without copying.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

FinishReason = Literal["stop", "length", "tool_calls", "cancelled", "error"]

ERROR_CODES = frozenset(
    {
        "OOM",
        "MODEL_CORRUPT",
        "UNSUPPORTED",
        "LOAD_FAILED",
        "CONTEXT_OVERFLOW",
        "CANCELLED",
        "TIMEOUT",
        "WORKER_CRASHED",
        "BAD_REQUEST",
        "INTERNAL",
        "STORE_FAILED",  # the reply streamed but could not be saved (disk full, ...)
    }
)


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the visible answer."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """A piece of the model's thinking, shown in its own collapsible block."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A structured tool call parsed out of the stream.

    `error` is set (and `raw` keeps the original text) when the arguments could not be
    parsed: the call is still shown, never dropped.
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A tool call as it is being written, for clients that stream (the API's
    `tool_calls` deltas). The first delta of a call carries its id and name, later ones
    the next piece of its arguments' JSON text as decoded. The whole call still follows
    as a ToolCall with the same id; the UI shows that and may ignore these."""

    id: str
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts and timings of one generation."""

    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    ttft_ms: float
    decode_tps: float


@dataclass(frozen=True, slots=True)
class Logprobs:
    """Log-probabilities of sampled tokens, sent only when a request asks for them (the
    API's `logprobs`). Each entry is in OpenAI's shape, so the server passes it on as is:
    {"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}, ...]}.
    Text is held back by stop matching and parsing, so an entry may arrive before the
    text delta that carries its token."""

    content: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class PromptRead:
    """The prompt's token count and how much of it the cache holds, sent as soon as the
    engine has tokenized it (before the prefill), only when a request asks for it
    (GenerationRequest.report_prompt): Anthropic's stream opens with the real input count."""

    prompt_tokens: int
    cached_tokens: int


@dataclass(frozen=True, slots=True)
class Done:
    """The end of one generation; always the last event of a stream."""

    finish_reason: FinishReason
    # The stop string that ended it (finish "stop" only): one of the request's, or a turn
    # marker the engine watches itself; None for an end-of-turn token or a backend that
    # does not tell. The Anthropic route answers stop_reason "stop_sequence" with it.
    stop_sequence: str | None = None


@dataclass(frozen=True, slots=True)
class Error:
    """Something went wrong; `message` is a sentence a person can act on."""

    code: str
    message: str

    def __post_init__(self) -> None:
        if self.code not in ERROR_CODES:
            raise ValueError(f"unknown error code {self.code!r}")


Event = (TextDelta | ReasoningDelta | ToolCall | ToolCallDelta | Usage | Logprobs | PromptRead
         | Done | Error)
