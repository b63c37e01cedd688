r"""Image paths pasted into the composer, as terminals paste a dragged-in file.

Dropping a file on a terminal types its path: quoted ('/a b.png'), with backslash-escaped
spaces (/a\ b.png), or as a file:// URL (some Linux terminals), several separated by
spaces. A message that is nothing but such paths, each an existing image, is an attach,
not a question; anything else is sent as written.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from urllib.parse import unquote, urlparse


def dropped_image_paths(text: str) -> list[str]:
    """The image paths `text` consists of, or [] when it is anything else."""
    text = text.strip()
    if not text.startswith(("/", "~", "'", '"', "file://", "./", "../")):
        return []  # not a path: an ordinary message costs nothing here
    from core.wire.vision import is_image

    if "\n" in text and not all(line.strip() for line in text.splitlines()):
        return []
    try:
        words = shlex.split(text.replace("\n", " "))
    except ValueError:
        return []
    paths = []
    for word in words:
        if word.startswith("file://"):
            word = unquote(urlparse(word).path)
        path = Path(word).expanduser()
        if not (is_image(path) and path.is_file()):
            return []
        paths.append(str(path))
    return paths
