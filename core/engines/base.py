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


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One chat turn to generate.

    `messages` are OpenAI-style dicts ({"role": ..., "content": ...}); the engine renders
    them with the model's chat template. `session_id` lets a worker keep the
    conversation's KV cache (prefix reuse, affinity).
    """

    request_id: str
    messages: tuple[dict[str, Any], ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    tools: tuple[dict[str, Any], ...] = ()
    session_id: str | None = None


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
