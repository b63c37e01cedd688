"""Vision's plain data as the chat shows it: a stored image and its captions, an image
as one conversation holds it, and which paths name an image.

Storing, scaling and captioning stay in core.vision, which re-exports these.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

IMAGE_SUFFIXES = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WebP",
                  ".heic": "HEIC", ".heif": "HEIC"}


def is_image(path: str | Path) -> bool:
    """Whether `path` names an image by its suffix (what /attach routes to this module)."""
    return Path(str(path)).suffix.lower() in IMAGE_SUFFIXES


@dataclass
class StoredImage:
    """An attached image: the stored copy and what the chat shows about it."""

    name: str  # the file name the person attached
    path: str  # the stored, upright, scaled PNG
    size_bytes: int  # of the original file
    width: int  # of the original, after EXIF rotation
    height: int
    stored_width: int
    stored_height: int
    sha256: str
    captions: dict[str, str] = field(default_factory=dict)  # vision model -> caption

    @property
    def label(self) -> str:
        """`photo.jpg · 2.4 MB · 4032×3024` (the chat card's first line)."""
        return f"{self.name} · {size_text(self.size_bytes)} · {self.width}×{self.height}"

    @property
    def sidecar(self) -> Path:
        return Path(self.path).with_suffix(".json")

    def save_sidecar(self) -> None:
        tmp = self.sidecar.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(asdict(self)), encoding="utf-8")
        tmp.replace(self.sidecar)


def size_text(n: int) -> str:
    if n >= 1024 * 1024:
        return f"{n / (1024 * 1024):.1f} MB"
    if n >= 1024:
        return f"{n / 1024:.0f} KB"
    return f"{n} B"


@dataclass(frozen=True, slots=True)
class AttachedImage:
    """An image as one conversation holds it: its alias there and when it was attached."""

    alias: str
    created_at: float
    image: StoredImage
