"""mlx-vlm in the vision worker: stream a caption of stored images.

Runs only inside the vision worker process (core.vision.worker), which loads the model
with core.engines.vlm.load_vlm, as the mlx-vlm chat engine does. The inputs are prepared
here (chat template, image processor, image-token expansion) by the model's own
processor and handed to mlx-vlm's generator as tensors: mlx-vlm's own input helper passes
text-only options (padding) to the image processor, which transformers 5 refuses.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

DEFAULT_PROMPT = ("Describe this image in detail for someone who cannot see it: "
                  "what it shows, any text in it, and notable details.")


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
