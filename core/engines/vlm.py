"""The mlx-vlm engine: a vision-language model folder as a chat model that sees images.

mlx-vlm decodes one sequence at a time (its batch API is not in every release), so this
engine serves one request at a time, one token per `step`, and queues the others in
order; other models' text requests run in their own workers and never wait on it. Images
come in the messages as paths of stored files (`{"type": "image", "path": ...}` parts):
the worker reads them from disk, never from the pipe.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from core.engines.base import EngineLoadError, GenerationRequest, ModelSpec
from core.events import Done, Error, Event, TextDelta, Usage


class VlmEngine:
    name = "mlx-vlm"
    max_concurrency = 1

    def __init__(self, spec: ModelSpec) -> None:
        self._spec = spec
        try:
            self.model, self.processor = load_vlm(spec.path)
        except Exception as exc:  # noqa: BLE001 - any loader failure is a broken folder
            raise EngineLoadError("LOAD_FAILED", f"{Path(spec.path).name} could not be loaded "
                                  f"as a vision model ({type(exc).__name__}: {exc}).") from exc
        self._queue: deque[GenerationRequest] = deque()
        self._active: dict[str, Any] | None = None
        self._out: list[tuple[str, list[Event]]] = []

    def info(self) -> dict[str, Any]:
        return {"engine": self.name, "context_size": self._spec.context_size,
                "model_type": getattr(self.model.config, "model_type", "vlm"),
                "path": self._spec.path, "vision": True}

    def submit(self, request: GenerationRequest) -> None:
        request.sampling.validate()
        self._queue.append(request)

    def cancel(self, request_id: str) -> None:
        if self._active is not None and self._active["request"].request_id == request_id:
            self._out.append((request_id, [self._usage(), Done("cancelled")]))
            self._active = None
            return
        for request in list(self._queue):
            if request.request_id == request_id:
                self._queue.remove(request)
                self._out.append((request_id, [Usage(0, 0, 0, 0.0, 0.0), Done("cancelled")]))

    def has_work(self) -> bool:
        return bool(self._queue or self._active or self._out)

    def _usage(self) -> Usage:
        run = self._active or {}
        first, n = run.get("first_at"), run.get("tokens", 0)
        ttft = (first - run["started"]) * 1000 if first else 0.0
        elapsed = time.perf_counter() - first if first else 0.0
        return Usage(run.get("prompt_tokens", 0), 0, n, ttft,
                     (n - 1) / elapsed if n > 1 and elapsed > 0 else 0.0)

    def _cap(self, max_tokens: int) -> int:
        """No reply runs past the context (ROOM_LEFT asks for no other cap)."""
        return min(max_tokens, int(self._spec.context_size))

    def step(self) -> list[tuple[str, list[Event]]]:
        out, self._out = self._out, []
        if self._active is None and self._queue:
            request = self._queue.popleft()
            s = request.sampling
            self._active = {"request": request, "started": time.perf_counter(), "tokens": 0,
                            "gen": stream_chat(self.model, self.processor, request.messages,
                                               max_tokens=self._cap(s.max_tokens),
                                               temperature=s.temperature, top_p=s.top_p)}
        run = self._active
        if run is None:
            return out
        rid = run["request"].request_id
        try:
            result = next(run["gen"])
        except StopIteration:
            cap = self._cap(run["request"].sampling.max_tokens)
            finish = "length" if run["tokens"] >= cap else "stop"
            out.append((rid, [self._usage(), Done(finish)]))
            self._active = None
            return out
        except Exception as exc:  # noqa: BLE001 - a bad image or prompt fails this request only
            out.append((rid, [Error("BAD_REQUEST", f"The vision model could not read this "
                                    f"request: {type(exc).__name__}: {exc}"), Done("error")]))
            self._active = None
            return out
        # mlx-vlm counts for us (a last result may carry no new token, only the finish).
        run["tokens"] = getattr(result, "generation_tokens", 0) or run["tokens"] + 1
        run["prompt_tokens"] = getattr(result, "prompt_tokens", 0) or run.get("prompt_tokens", 0)
        run.setdefault("first_at", time.perf_counter())
        if result.text:
            out.append((rid, [TextDelta(result.text)]))
        return out

    def close(self) -> None:
        self._queue.clear()
        self._active = None


# -- mlx-vlm's loader (the vision worker's too) and its generator over a whole chat ------
# Inputs are prepared by the model's own processor and handed to stream_generate as
# tensors: mlx-vlm's input helper passes text-only options to the image processor, which
# transformers 5 refuses (as in core.vision.vlm's captions).

def load_vlm(model_dir: str | Path) -> tuple[Any, Any]:
    """(model, processor) from a local folder; no network (offline hub)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from mlx_vlm import load

    return load(str(model_dir))


def split_images(messages: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Chat messages for the model's template, and the image paths in the order they appear.

    Image parts arrive as `{"type": "image", "path": ...}` (the app's stored files; the API
    turns data URLs into such files first); the template sees `{"type": "image"}` where
    each goes, and the processor gets the files in the same order."""
    out: list[dict[str, Any]] = []
    paths: list[str] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            out.append(message)
            continue
        parts: list[dict[str, Any]] = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "image" and part.get("path"):
                paths.append(str(part["path"]))
                parts.append({"type": "image"})
            elif isinstance(part, dict) and part.get("type") == "text":
                parts.append({"type": "text", "text": str(part.get("text", ""))})
        out.append({**message, "content": parts})
    return out, paths


def stream_chat(model: Any, processor: Any, messages: Sequence[dict[str, Any]], *,
                max_tokens: int, temperature: float = 0.0, top_p: float = 1.0) -> Iterator[Any]:
    """mlx-vlm's results (text piece, token) for a whole chat with its images."""
    import mlx.core as mx
    from mlx_vlm import stream_generate
    from PIL import Image

    chat, paths = split_images(messages)
    images = []
    for path in paths:
        with Image.open(path) as img:
            images.append(img.convert("RGB"))
    tokenizer = getattr(processor, "tokenizer", processor)
    text = None
    for owner in (processor, tokenizer):
        try:
            text = owner.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
            break
        except (ValueError, AttributeError):
            continue
    if text is None:
        raise ValueError("the model folder has no chat template")
    inputs = processor(text=text, images=images or None)
    extra = {k: mx.array(v) for k, v in inputs.items()
             if k not in ("input_ids", "pixel_values", "attention_mask")}
    pixels = inputs.get("pixel_values")
    yield from stream_generate(
        model, processor, "", input_ids=mx.array(inputs["input_ids"]),
        pixel_values=mx.array(pixels) if pixels is not None else None,
        mask=mx.array(inputs["attention_mask"]) if "attention_mask" in inputs else None,
        max_tokens=max_tokens, temperature=temperature, top_p=top_p, **extra)
