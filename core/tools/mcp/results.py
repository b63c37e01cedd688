"""An MCP tool result as a ToolResult: text for the model and the card, images saved as
files (attachments on disk, never pixels in the prompt), errors marked failed."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from pathlib import Path
from typing import Any

from core import paths
from core.tools.registry import ToolResult

MAX_RESULT_CHARS = 20_000  # what one tool result may put into the context
IMAGE_EXTENSIONS = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif",
                    "image/webp": ".webp", "image/svg+xml": ".svg"}


def files_dir(kind: str, server: str) -> Path:
    folder = paths.data_dir() / "mcp" / kind / server
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def save_image(server: str, data: str, mime: str) -> Path | str:
    """Write a base64 image to a file; a sentence instead when the data is not base64."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return f"[an image from {server} that could not be decoded]"
    path = files_dir("images", server) / f"{uuid.uuid4().hex[:12]}{IMAGE_EXTENSIONS.get(mime, '.bin')}"
    path.write_bytes(raw)
    return path


def to_tool_result(server: str, result: Any) -> ToolResult:
    """Convert an mcp CallToolResult (already validated by the SDK)."""
    parts: list[str] = []
    figures: list[str] = []
    for block in result.content or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "image":
            saved = save_image(server, block.data, block.mime_type)
            if isinstance(saved, Path):
                figures.append(str(saved))
                parts.append(f"[image {block.mime_type} saved as {saved}]")
            else:
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
    return ToolResult(text, ok=not result.is_error, figures=tuple(figures))


def resource_file(server: str, name: str, contents: list[Any]) -> Path:
    """Write a read resource to a file the documents layer can attach like any other."""
    stem = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name).strip("-.")[:60] or "resource"
    folder = files_dir("resources", server)
    texts = [c.text for c in contents if getattr(c, "text", None) is not None]
    if texts:
        suffix = ".md" if any((c.mime_type or "") == "text/markdown" for c in contents) else ".txt"
        path = folder / f"{stem}{'' if stem.endswith(suffix) else suffix}"
        path.write_text("\n\n".join(texts), encoding="utf-8")
        return path
    blob = next((c for c in contents if getattr(c, "blob", None) is not None), None)
    if blob is None:
        raise ValueError("the resource has no content")
    path = folder / stem
    path.write_bytes(base64.b64decode(blob.blob))
    return path
