"""Image attachments: read a picture once, store a model-ready copy on disk, describe it.

A photo from a phone is a 12-megapixel JPEG whose pixels are stored sideways with an EXIF
note saying how to turn them; a vision model wants an upright RGB image of a few hundred
pixels a side. So attaching an image does the work once, off the UI loop: decode (PNG,
JPEG, WebP, HEIC where pillow-heif is installed), apply the EXIF rotation, scale down to
`max_side`, and save a PNG named by the source's SHA-256 under the data folder. Every
later step (the preview, the vision worker, the API) reads that file by path; pixels never
travel through a pipe. A JSON sidecar beside it keeps what the chat shows (name, size,
original dimensions) and the captions vision models made, so a caption is made once per
image and model. Refusals are `AttachError` values with a sentence a person can act on.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path

from core import json_text
from core.attach_errors import AttachError
from core.wire.vision import IMAGE_SUFFIXES, AttachedImage, StoredImage, is_image  # noqa: F401
from core.wire.vision import size_text as _size

IMAGE_MIME = "image/png"  # the stored copy is always a PNG
MAX_SIDE = 1024  # longest side a model sees; larger images are scaled down to it
MAX_PIXELS = 100_000_000  # a decoded image past this is refused (decompression bombs)
_READ_CHUNK = 1 << 20
_ORIENTATION = 0x0112  # the EXIF tag saying how the pixels are turned


def _heif_opener() -> bool:
    try:
        from pillow_heif import register_heif_opener  # optional: HEIC from iPhones
    except ImportError:
        return False
    register_heif_opener()
    return True


def images_dir() -> Path:
    from core import paths

    folder = paths.data_dir() / "images"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def load_stored(path: str | Path) -> StoredImage | None:
    """The stored image at `path` with its sidecar (None when either is gone)."""
    sidecar = Path(path).with_suffix(".json")
    try:
        data = json_text.loads(sidecar.read_text(encoding="utf-8"))
        image = StoredImage(**data)
        return image if Path(image.path).is_file() else None
    except (OSError, ValueError, TypeError):
        return None  # a damaged sidecar: the picture is shown as gone, not a crash


def prepare_image(path: str | Path, *, max_bytes: int, max_side: int = MAX_SIDE,
                  folder: Path | None = None) -> StoredImage | AttachError:
    """Read, check, rotate, scale and store the image at `path` (call off the UI loop).

    The same picture attached twice is stored once (named by its hash) and keeps its
    captions. A missing, huge, corrupt or unsupported file is an AttachError; nothing is
    written then.
    """
    p = Path(str(path)).expanduser()
    shown = str(path)
    kind = IMAGE_SUFFIXES.get(p.suffix.lower())
    if not p.exists():
        return AttachError("NOT_FOUND", f"{shown} does not exist; check the path and try again.",
                           shown)
    if p.is_dir() or kind is None:
        return AttachError("UNSUPPORTED_TYPE", f"{p.name} is not an image this app reads "
                           "(PNG, JPEG, WebP or HEIC).", shown)
    if not os.access(p, os.R_OK):
        return AttachError("UNREADABLE", f"{p.name} cannot be read with your permissions; "
                           "check who owns it (ls -l).", shown)
    size = p.stat().st_size
    if size > max_bytes:
        return AttachError("TOO_LARGE", f"{p.name} is {_size(size)}, over the {_size(max_bytes)} "
                           "limit for attachments (attach_max_mb in the config file); "
                           "export a smaller copy and attach that.", shown)
    if size == 0:
        return AttachError("EMPTY", f"{p.name} is empty; there is no picture in it.", shown)
    if kind == "HEIC" and not _heif_opener():
        return AttachError("UNSUPPORTED_TYPE", f"{p.name} is HEIC, which needs the pillow-heif "
                           "package (pip install pillow-heif); or export it as JPEG.", shown)
    digest = hashlib.sha256()
    with p.open("rb") as fh:
        while chunk := fh.read(_READ_CHUNK):
            digest.update(chunk)
    sha = digest.hexdigest()
    folder = folder or images_dir()
    target = folder / f"{sha}.png"
    known = load_stored(target)
    if known is not None:
        known.name = p.name
        return known

    from PIL import Image, ImageOps

    Image.MAX_IMAGE_PIXELS = MAX_PIXELS  # past 2x this Pillow raises DecompressionBombError
    try:
        with warnings.catch_warnings():  # past MAX_PIXELS it warns; the check below refuses
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(p)
        with img:
            if img.width * img.height > MAX_PIXELS:
                return AttachError("TOO_LARGE", f"{p.name} is {img.width}×{img.height} pixels, "
                                   f"over the {MAX_PIXELS // 1_000_000} megapixel limit; "
                                   "export a smaller copy and attach that.", shown)
            width, height = img.size
            if img.getexif().get(_ORIENTATION, 1) in (5, 6, 7, 8):
                width, height = height, width  # stored sideways: shown a quarter turned
            img.draft("RGB", (max_side, max_side))  # JPEG: decode at a reduced scale
            upright = ImageOps.exif_transpose(img)
            rgb = upright.convert("RGB")
            rgb.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
            tmp = target.with_suffix(".png.tmp")
            rgb.save(tmp, format="PNG")
            tmp.replace(target)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        return AttachError("TOO_LARGE", f"{p.name} has too many pixels to open safely; export "
                           "a smaller copy and attach that.", shown)
    except Exception as exc:  # noqa: BLE001 - any decoder failure is a broken file to the user
        return AttachError("CORRUPT", f"{p.name} could not be read as {kind} "
                           f"({type(exc).__name__}); the file may be damaged or not really an "
                           "image.", shown)
    image = StoredImage(p.name, str(target), size, width, height, rgb.width, rgb.height, sha)
    image.save_sidecar()
    return image
