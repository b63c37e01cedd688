"""Vision: image attachments (stored upright and scaled on disk), terminal previews,
captions by the "vision" role worker, and images in prompts for models that can see.
This `__init__` is the face the UI imports."""

from core.vision.images import (
    IMAGE_MIME,
    IMAGE_SUFFIXES,
    AttachedImage,
    StoredImage,
    is_image,
    load_stored,
    prepare_image,
)
from core.vision.preview import (
    half_block_cells,
    iterm_sequence,
    kitty_delete,
    kitty_placeholder_rows,
    kitty_sequences,
    sixel_sequence,
)

__all__ = [
    "IMAGE_MIME",
    "IMAGE_SUFFIXES",
    "AttachedImage",
    "StoredImage",
    "half_block_cells",
    "is_image",
    "iterm_sequence",
    "kitty_delete",
    "kitty_placeholder_rows",
    "kitty_sequences",
    "load_stored",
    "prepare_image",
    "sixel_sequence",
]
