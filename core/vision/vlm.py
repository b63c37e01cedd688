"""mlx-vlm in the vision worker: load a vision-language model folder, stream a caption.

Runs only inside the vision worker process (core.vision.worker). The inputs are prepared
here (chat template, image processor, image-token expansion) by the model's own
processor and handed to mlx-vlm's generator as tensors: mlx-vlm's own input helper passes
text-only options (padding) to the image processor, which transformers 5 refuses.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

CONFIG_BYTES = 64 << 20  # a config.json past this is not one
DEFAULT_PROMPT = ("Describe this image in detail for someone who cannot see it: "
                  "what it shows, any text in it, and notable details.")


def is_vlm_dir(path: str | Path) -> bool:
    """Whether `path` is a model folder mlx-vlm can load as a vision model (its config
    names a vision tower); a text-only MLX folder is not. The config came from the Hub:
    read bounded in size and nesting, so a hostile one is "not a vision model", not a crash."""
    from core import json_text

    config = Path(path) / "config.json"
    try:
        if config.stat().st_size > CONFIG_BYTES:
            return False
        data = json_text.loads(config.read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and isinstance(data.get("vision_config"), dict)


def load_vlm(model_dir: str | Path) -> tuple[Any, Any]:
    """(model, processor) from a local folder; no network (offline hub)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from mlx_vlm import load

    return load(str(model_dir))


def _prompt(processor: Any, text: str, images: int) -> str:
    content: list[dict[str, str]] = [{"type": "image"} for _ in range(images)]
    content.append({"type": "text", "text": text})
    tokenizer = getattr(processor, "tokenizer", processor)
    messages = [{"role": "user", "content": content}]
    for owner in (processor, tokenizer):
        try:
            return owner.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except (ValueError, AttributeError):
            continue
    raise ValueError("the model folder has no chat template for images")


def stream_caption(model: Any, processor: Any, image_paths: list[str], prompt: str,
                   max_tokens: int = 200) -> Iterator[str]:
    """Text pieces of the model's answer to `prompt` about the images (greedy)."""
    import mlx.core as mx
    from mlx_vlm import stream_generate
    from PIL import Image

    images = []
    for path in image_paths:
        with Image.open(path) as img:
            images.append(img.convert("RGB"))
    text = _prompt(processor, prompt, len(images))
    inputs = processor(text=text, images=images)
    input_ids = mx.array(inputs["input_ids"])
    pixel_values = mx.array(inputs["pixel_values"])
    mask = mx.array(inputs["attention_mask"]) if "attention_mask" in inputs else None
    extra = {k: mx.array(v) for k, v in inputs.items()
             if k not in ("input_ids", "pixel_values", "attention_mask")}
    for result in stream_generate(model, processor, "", input_ids=input_ids,
                                  pixel_values=pixel_values, mask=mask, max_tokens=max_tokens,
                                  temperature=0.0, **extra):
        if result.text:
            yield result.text


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
