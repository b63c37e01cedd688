"""Vision: image attachments (stored upright and scaled on disk), captions by the "vision"
role worker, and images in prompts for models that can see.
This `__init__` is the face; the plain data lives in core.wire.vision, and the terminal
previews (half-block cells, Kitty, Sixel, iTerm2) in tui/picture_codes.py: drawing is UI."""

from core.vision.images import (
    IMAGE_MIME,
    IMAGE_SUFFIXES,
    AttachedImage,
    StoredImage,
    is_image,
    load_stored,
    prepare_image,
)

__all__ = [
    "IMAGE_MIME",
    "IMAGE_SUFFIXES",
    "AttachedImage",
    "StoredImage",
    "is_image",
    "load_stored",
    "prepare_image",
]
