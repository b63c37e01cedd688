"""An MCP tool result as a ToolResult: text for the model and the card, images stored the
way /attach stores them (core.vision: upright, scaled, with a sidecar; their paths are the
result's `figures`, which the turn makes attachments of the conversation), errors marked
failed. A malformed image fails the call with a sentence, never the chat."""

from __future__ import annotations

import base64
import binascii
import json
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core import paths
from core.tools.registry import ToolResult

if TYPE_CHECKING:
    from core.vision import StoredImage

MAX_RESULT_CHARS = 20_000  # what one tool result may put into the context
IMAGE_EXTENSIONS = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif",
                    "image/webp": ".webp", "image/svg+xml": ".svg"}
MAX_IMAGE_BYTES = 20 * 1024 * 1024  # one image in a tool result, before it is scaled down


def files_dir(kind: str, server: str) -> Path:
    folder = paths.data_dir() / "mcp" / kind / server
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def save_image(server: str, tool: str, data: str, mime: str) -> StoredImage | str:
    """Store a base64 image as an attached image is stored (call off the UI loop); a
    sentence instead when it is not base64 or not a picture the app reads."""
    from core.vision import StoredImage, prepare_image  # the vision layer: only for images

    shown = f"{server}.{tool}"
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return f"{shown} returned an image that is not valid base64 data; it was not shown."
    if len(raw) > MAX_IMAGE_BYTES:
        return f"{shown} returned an image of {len(raw) // (1024 * 1024)} MB, over the 20 MB limit."
    scratch = files_dir("images", server) / uuid.uuid4().hex[:12]
    scratch.mkdir()
    try:  # named for the tool, so the chat card reads "fixture.picture.png"
        source = scratch / f"{safe_stem(shown, 'picture')}{IMAGE_EXTENSIONS.get(mime, '.bin')}"
        source.write_bytes(raw)
        stored = prepare_image(source, max_bytes=MAX_IMAGE_BYTES)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if isinstance(stored, StoredImage):
        return stored
    return f"{shown} returned an image ({mime}) that could not be shown: {stored.message}"


def to_tool_result(server: str, result: Any, tool: str = "tool") -> ToolResult:
    """Convert an mcp CallToolResult (already validated by the SDK); images are decoded
    here, so call it in a thread."""
    parts: list[str] = []
    figures: list[str] = []
    broken = False
    for block in result.content or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "image":
            saved = save_image(server, tool, block.data, block.mime_type)
            if not isinstance(saved, str):
                figures.append(saved.path)
                parts.append(f"[image {saved.name}, {saved.width}×{saved.height}, "
                             "attached to the chat]")
            else:
                broken = True
                parts.append(saved)
        elif kind == "audio":
            parts.append(f"[audio {block.mime_type}: not shown]")
        elif kind == "resource":
            res = block.resource
            text = getattr(res, "text", None)
            parts.append(text if text is not None else f"[binary resource {res.uri} ({res.mime_type or 'unknown type'})]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}: {block.name}]")
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts) if parts else "(no output)"
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n… cut at {MAX_RESULT_CHARS} characters of {len(text)}."
    return ToolResult(text, ok=not (result.is_error or broken), figures=tuple(figures))


MAX_URI_CHARS = 2000


def resource_uri_problem(uri: str) -> str | None:
    """Why a resource URI a server listed is refused for /attach (None when it is fine):
    one that climbs with `..` (plain or percent-encoded) names something outside what
    the server offers, and is refused before it is asked for."""
    from urllib.parse import unquote

    if len(uri) > MAX_URI_CHARS:
        return f"its URI is longer than {MAX_URI_CHARS} characters"
    decoded = unquote(unquote(uri))
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in decoded):
        return "its URI holds control characters"
    after_scheme = decoded.split(":", 1)[-1]
    if ".." in after_scheme.replace("\\", "/").split("/"):
        return "its URI climbs out of its folder with '..'"
    return None


def safe_stem(name: str, fallback: str) -> str:
    """A file name made of `name`'s letters, digits, - _ and inner dots: no separator,
    no `..`, nothing a terminal would obey."""
    stem = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name)
    while ".." in stem:
        stem = stem.replace("..", ".")
    return stem.strip("-.")[:60] or fallback


def resource_file(server: str, name: str, contents: list[Any]) -> Path:
    """Write a read resource to a file the documents layer can attach like any other;
    the path is checked to sit in the server's resources folder before any byte."""
    stem = safe_stem(name, "resource")
    folder = files_dir("resources", server)
    texts = [c.text for c in contents if getattr(c, "text", None) is not None]
    if texts:
        suffix = ".md" if any((c.mime_type or "") == "text/markdown" for c in contents) else ".txt"
        path = _inside(folder, f"{stem}{'' if stem.endswith(suffix) else suffix}")
        path.write_text("\n\n".join(texts), encoding="utf-8")
        return path
    blob = next((c for c in contents if getattr(c, "blob", None) is not None), None)
    if blob is None:
        raise ValueError("the resource has no content")
    path = _inside(folder, stem)
    path.write_bytes(base64.b64decode(blob.blob))
    return path


def _inside(folder: Path, name: str) -> Path:
    """`folder / name`, refused unless it resolves inside `folder` (a link planted there
    is not followed out either)."""
    path = folder / name
    if path.is_symlink() or path.resolve().parent != folder.resolve():
        raise ValueError(f"the file name {name!r} would land outside {folder}")
    return path
