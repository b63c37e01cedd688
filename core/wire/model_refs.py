"""How a conversation remembers its model, so opening it can select that model again.

A reference is the settings' model string (a local path, or "remote:<endpoint>/<model>"),
prefixed with "<engine>:" when an engine was chosen for a local path, e.g.
"llamacpp:/models/gemma.gguf". Conversations saved before references existed hold the
model's display label instead; `parse` reads those as labels to match by name.
"""

from __future__ import annotations

from dataclasses import dataclass

from core import model_ids

# How settings name a remote model: "remote:<endpoint>/<model>" in settings.model (kept
# apart from the HTTP client, so the Runtime tells local from remote without aiohttp).
REMOTE_PREFIX = "remote:"
ENGINES = ("llamacpp", "mlx", "scripted")


def remote_ref(model: str | None) -> tuple[str, str] | None:
    """Split "remote:<endpoint>/<model>" into (endpoint, model); None for a local model."""
    if not model or not model.startswith(REMOTE_PREFIX):
        return None
    name, _, remote_model = model[len(REMOTE_PREFIX):].partition("/")
    return (name, remote_model) if name and remote_model else None


def remote_model_string(endpoint: str, model: str) -> str:
    return f"{REMOTE_PREFIX}{endpoint}/{model}"


@dataclass(frozen=True)
class ModelRef:
    """A parsed reference: `model` is a path or a remote string, or a bare label."""

    model: str
    engine: str | None = None
    is_label: bool = False

    @property
    def remote(self) -> tuple[str, str] | None:
        return remote_ref(self.model)


def make(model: str | None, engine: str | None) -> str | None:
    """The reference for settings' (model, engine); None when no model is configured."""
    if not model:
        return None
    if engine and remote_ref(model) is None:
        return f"{engine}:{model}"
    return model


def parse(ref: str) -> ModelRef:
    """Split a stored reference; anything that is neither a path nor a remote is a label."""
    if remote_ref(ref) is not None:
        return ModelRef(ref)
    engine, sep, rest = ref.partition(":")
    if sep and engine in ENGINES and rest:
        return ModelRef(rest, engine)
    if ref.startswith(("/", "~", "./", "../")):
        return ModelRef(ref)
    return ModelRef(ref, is_label=True)


def display(ref: str) -> str:
    """The model's id for notices, as the header and the API name it (core.model_ids):
    `gemma3:270m-q4_k_m` for a local file or folder, "endpoint/model" for a remote."""
    parsed = parse(ref)
    if parsed.remote is not None:
        endpoint, model = parsed.remote
        return f"{endpoint}/{model}"
    if parsed.is_label:
        return parsed.model
    name = parsed.model.rstrip("/").rsplit("/", 1)[-1] or parsed.model
    return model_ids.base_id(name)
