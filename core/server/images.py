"""`image_url` content parts at the API's edge: stored files for a model that sees, a
clear 400 for one that does not.

wire.py keeps image parts as they came; here, before any tokenising (and before the
prompt-size check, which would count a data URL's base64 as text), each becomes a stored
image (core.vision: decoded, turned upright, scaled, saved as a file) and the part a
`{"type": "image", "path": ...}` the mlx-vlm engine reads from disk. Data URLs are always
taken; `file://` URLs only when `serve_allow_file_urls` is set (a client must not read
the server's disk by default); web URLs never (this server fetches nothing).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from core.docs.errors import DocError
from core.engines.base import GenerationRequest
from core.server.wire import ApiError

_DATA_URL = re.compile(r"^data:(image/[a-zA-Z0-9.+-]+)?(;[^,]*)?,", re.ASCII)
_SUFFIX = {"image/png": ".png", "image/jpeg": ".jpg", "image/jpg": ".jpg",
           "image/webp": ".webp", "image/heic": ".heic", "image/heif": ".heif"}


def has_images(request: GenerationRequest) -> bool:
    return any(isinstance(m.get("content"), list)
               and any(p.get("type") == "image_url" for p in m["content"])
               for m in request.messages)


def _bad(message: str, param: str, code: str = "invalid_image") -> ApiError:
    return ApiError(400, message, param=param, code=code)


async def resolve_images(request: GenerationRequest, *, model: str, sees: bool,
                         allow_file_urls: bool, max_bytes: int) -> GenerationRequest:
    """The request with every image_url part made a stored-file part; ApiError(400) when
    the model cannot see or an image is refused (the message says which and why)."""
    if not has_images(request):
        return request
    messages: list[dict[str, Any]] = []
    for i, message in enumerate(request.messages):
        content = message.get("content")
        if not isinstance(content, list):
            messages.append(message)
            continue
        parts = []
        for j, part in enumerate(content):
            if part.get("type") != "image_url":
                parts.append(part)
                continue
            where = f"messages[{i}].content[{j}].image_url"
            if not sees:
                raise _bad(f"The model {model!r} cannot see images: it is a text-only model. "
                           "Send text only, or serve a vision model (an MLX folder with a "
                           "vision tower, run by mlx-vlm).", where, "model_not_vision")
            path = await _stored(part["image_url"]["url"], where, allow_file_urls, max_bytes)
            parts.append({"type": "image", "path": path})
        messages.append({**message, "content": parts})
    return replace(request, messages=tuple(messages))


async def _stored(url: str, where: str, allow_file_urls: bool, max_bytes: int) -> str:
    from core.vision import prepare_image
    from core.vision.images import images_dir

    scheme = url.split(":", 1)[0].lower() if ":" in url[:12] else ""
    temp: Path | None = None
    if scheme == "data":
        match = _DATA_URL.match(url)
        if match is None or match.group(1) is None or ";base64" not in (match.group(2) or ""):
            raise _bad("An image data URL must look like data:image/png;base64,<data>.", where)
        mime = match.group(1).lower()
        if mime not in _SUFFIX:
            raise _bad(f"Images of type {mime} are not supported; send PNG, JPEG or WebP.",
                       where)
        encoded = url[match.end():]
        if len(encoded) * 3 // 4 > max_bytes:
            raise _bad(f"The image is over the {max_bytes // (1024 * 1024)} MiB limit for "
                       "images (attach_max_mb in the server's config file); send a smaller "
                       "one.", where, "image_too_large")
        try:
            data = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise _bad("The image data URL is not valid base64.", where) from None
        temp = images_dir() / f"incoming-{uuid.uuid4().hex}{_SUFFIX[mime]}"
        await asyncio.to_thread(temp.write_bytes, data)
        source = temp
    elif scheme == "file":
        if not allow_file_urls:
            raise _bad("file:// image URLs are turned off on this server; send the image as "
                       "a data URL, or set serve_allow_file_urls = true in its config file.",
                       where, "file_urls_disabled")
        source = Path(unquote(urlparse(url).path))
    elif scheme in ("http", "https"):
        raise _bad("This server does not fetch images from the web; send the image as a "
                   "data URL (data:image/png;base64,...).", where, "remote_images_unsupported")
    else:
        raise _bad("An image URL must be a data: URL (or a file:// URL where the server "
                   "allows them).", where)
    try:
        result = await asyncio.to_thread(prepare_image, source, max_bytes=max_bytes)
    finally:
        if temp is not None:
            temp.unlink(missing_ok=True)
    if isinstance(result, DocError):  # its sentence names the file
        message = result.message.replace(source.name, "The image") if temp else result.message
        code = "image_too_large" if result.code == "TOO_LARGE" else "invalid_image"
        raise _bad(message, where, code)
    return result.path
