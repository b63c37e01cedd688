"""llama.cpp's multimodal path: a GGUF chat model that sees images through its mmproj.

The projector (an mmproj-*.gguf beside the model, or the `mmproj` option) is loaded with
libmtmd against the model's own weights. Images reach the worker as stored files
(`{"type": "image", "path": ...}` parts, never pixels through the pipe); here each becomes
libmtmd's media marker in the rendered prompt, the prompt is split into text and image
chunks, and every chunk is evaluated straight into the Llama's context, after which
llama-cpp-python samples as for any prompt already in its cache.

Positions holding an image are tracked (`_spans`): they are reused only by a prompt that
has the same image at the same place, and a text-only prompt never matches them by
accident (llama-cpp-python's prefix match compares token ids, and an image position has
none). Whatever libmtmd logs (it echoes prompt text) is dropped; only its error lines are
kept, to explain a failure in the sentence the user sees.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.model_files import is_mmproj, pair_mmproj, sibling_mmprojs

MARKER = "<__media__>"  # libmtmd's default media marker
_DEFUSED = "<_media_>"  # what a marker typed in the conversation becomes
_PLACEHOLDER_ID = 0  # what an image position holds in Llama.input_ids (any valid id)
_GGML_LOG_ERROR = 4
_GGML_LOG_CONT = 5


class ProjectorError(Exception):
    """The vision projector cannot serve this model (a sentence for the user)."""


class ImageError(ValueError):
    """This request's image cannot be used; the request fails, the worker goes on."""


class ContextOverflow(ImageError):
    """The prompt with its images does not fit the context."""


def image_paths(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The stored files of the image parts in `messages`, in prompt order."""
    found: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            found += [str(p.get("path") or "") for p in content
                      if isinstance(p, Mapping) and p.get("type") == "image"]
    return found


def with_markers(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The messages with content parts flattened to text, each image part becoming the
    media marker on a line of its own. A marker typed by the user is defused first, so
    markers and images always pair up."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            out.append({**message, "content": content.replace(MARKER, _DEFUSED)})
            continue
        if not isinstance(content, list):
            out.append(dict(message))
            continue
        pieces: list[str] = []
        for part in content:
            if not isinstance(part, Mapping):
                continue
            if part.get("type") == "image":
                pieces.append(MARKER)
            elif part.get("type") == "text":
                pieces.append(str(part.get("text") or "").replace(MARKER, _DEFUSED))
        out.append({**message, "content": "\n".join(pieces)})
    return out


def find_mmproj(model: Path, explicit: str | None = None) -> Path | None:
    """The projector for `model`: the `mmproj` option, else the *mmproj*.gguf beside it
    (several: the one whose name shares most with the model's, f16 first, as the hub
    pairs them). Raises ProjectorError for an explicit path that is not there."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ProjectorError(f"The vision projector {path} does not exist; fix the "
                                 "mmproj option or remove it.")
        return path
    found, root = sibling_mmprojs(model), model.parent
    if not found and (snapshot := _hub_snapshot(model)) is not None:
        # A hub download keeps the repo's folders: a quant in a subfolder, the projector
        # at the top. Any projector of the same snapshot goes with it.
        root = snapshot
        found = sorted(p for p in snapshot.rglob("*.gguf") if is_mmproj(p.name))
    if len(found) <= 1:
        return found[0] if found else None
    names = [p.relative_to(root).as_posix() for p in found]
    chosen = pair_mmproj(model.relative_to(root).as_posix(), names)
    return root / chosen if chosen else found[0]


def _hub_snapshot(model: Path) -> Path | None:
    """The snapshot folder of the Hugging Face cache a model file lies in
    (models--owner--name/snapshots/<commit>/...), or None."""
    for folder in model.parents:
        if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
            return folder
    return None


class _Log:
    """libmtmd's log sink: drops everything but error lines, kept for the next message."""

    def __init__(self) -> None:
        import llama_cpp
        import llama_cpp.mtmd_cpp as mtmd

        self.errors: deque[str] = deque(maxlen=6)
        self._in_error = False

        def sink(level: int, text: bytes | None, _user: Any) -> None:
            if level == _GGML_LOG_ERROR or (level == _GGML_LOG_CONT and self._in_error):
                self._in_error = True
                line = (text or b"").decode("utf-8", "replace").strip()
                if line:
                    self.errors.append(line)
            else:
                self._in_error = False

        self._callback = llama_cpp.llama_log_callback(sink)  # kept alive with this object
        mtmd.mtmd_log_set(self._callback, None)
        mtmd.mtmd_helper_log_set(self._callback, None)

    def take(self) -> str:
        text = " ".join(self.errors)
        self.errors.clear()
        return text


_LOG: _Log | None = None


def _log() -> _Log:
    global _LOG
    if _LOG is None:
        _LOG = _Log()
    return _LOG


@dataclass(frozen=True, slots=True)
class Prefill:
    """A prompt with images, evaluated into the context."""

    tokens: list[int]  # Llama.input_ids of the prompt (image positions hold a placeholder)
    cached: int  # positions reused from the previous request
    image_tokens: int  # positions the images took
    started: float  # perf_counter() when the prefill began


class Projector:
    """An mmproj loaded for one llama_cpp.Llama (libmtmd's context)."""

    def __init__(self, llm: Any, path: Path, *, threads: int, use_gpu: bool) -> None:
        import llama_cpp.mtmd_cpp as mtmd

        self._mtmd = mtmd
        self.path = path
        log = _log()
        log.take()
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.print_timings = False
        params.n_threads = threads
        params.media_marker = MARKER.encode()
        self._ctx = mtmd.mtmd_init_from_file(str(path).encode(), llm.model, params)
        if not self._ctx:
            detail = log.take() or "libmtmd could not read it"
            raise ProjectorError(
                f"The vision projector {path.name} could not be loaded for this model "
                f"({detail}). Download it again if it is damaged, use the mmproj file "
                "published with this model if it belongs to another, or move it out of the "
                "folder to use the model without images.")
        if not mtmd.mtmd_support_vision(self._ctx):
            self.close()
            raise ProjectorError(f"{path.name} is not a vision projector (it has no image "
                                 "encoder); move it out of the model's folder.")
        # Image positions in the context: (start, length, image id), oldest first.
        self._spans: list[tuple[int, int, str]] = []

    def forget(self, llm: Any) -> None:
        """Before a prompt without images: the context keeps only what precedes the first
        image, so llama-cpp-python's prefix match never reuses an image's positions."""
        if not self._spans:
            return
        start = self._spans[0][0]
        if llm.n_tokens > start:
            llm._ctx.kv_cache_seq_rm(-1, start, -1)
            llm.n_tokens = start
        self._spans = []

    def _keys(self, llm: Any) -> list[Any]:
        """What each position of the context holds: a token id, or (image id, index)."""
        keys: list[Any] = llm.input_ids[: llm.n_tokens].tolist()
        for start, length, image_id in self._spans:
            for i in range(length):
                if start + i < len(keys):
                    keys[start + i] = (image_id, i)
        return keys

    def prefill(self, llm: Any, prompt: str, paths: Sequence[str], *, add_bos: bool,
                special: bool) -> Prefill:
        """Evaluate `prompt` (one marker per image, in order) with the images at `paths`
        into `llm`'s context, reusing the longest prefix it already holds.

        Raises ImageError (unreadable image, prompt longer than the context); the context is
        left consistent either way."""
        mtmd = self._mtmd
        started = time.perf_counter()
        bitmaps: list[Any] = []
        for path in paths:
            try:
                bitmaps.append(self._bitmap(path))
            except ImageError:
                for bitmap in bitmaps:
                    mtmd.mtmd_bitmap_free(bitmap)
                raise
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            text = mtmd.mtmd_input_text()
            data = prompt.encode("utf-8", "replace")
            text.text, text.text_len = data, len(data)
            text.add_special, text.parse_special = add_bos, special
            array = (mtmd.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
            status = mtmd.mtmd_tokenize(self._ctx, chunks, ctypes.byref(text), array,
                                        len(bitmaps))
            if status != 0:
                raise ImageError(f"The images could not be placed in the prompt "
                                 f"({_log().take() or f'libmtmd error {status}'}).")
            return self._evaluate(llm, chunks, started)
        finally:
            mtmd.mtmd_input_chunks_free(chunks)
            for bitmap in bitmaps:
                mtmd.mtmd_bitmap_free(bitmap)

    def _bitmap(self, path: str) -> Any:
        file = Path(path)
        name = file.name or path
        try:
            stat = file.stat()
        except OSError:
            raise ImageError(f"The image {name} is no longer on disk; attach it again.") from None
        bitmap = self._mtmd.mtmd_helper_bitmap_init_from_file(self._ctx, str(file).encode(),
                                                               False)
        if not bitmap:
            _log().take()
            raise ImageError(f"The image {name} could not be read: it is not a picture "
                             "llama.cpp can decode (damaged, or not PNG/JPEG/BMP/GIF).")
        # Same file, same content: the id lets a later turn reuse the image's positions.
        ident = f"{os.path.realpath(file)}:{stat.st_size}:{stat.st_mtime_ns}"
        self._mtmd.mtmd_bitmap_set_id(bitmap, ident.encode())
        return bitmap

    def _evaluate(self, llm: Any, chunks: Any, started: float) -> Prefill:
        import llama_cpp

        mtmd = self._mtmd
        parts: list[tuple[int, Any, list[Any]]] = []  # (type, chunk, keys)
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            kind = mtmd.mtmd_input_chunk_get_type(chunk)
            if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                n = ctypes.c_size_t()
                ptr = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                parts.append((kind, chunk, [ptr[j] for j in range(n.value)]))
            else:
                ident = (mtmd.mtmd_input_chunk_get_id(chunk) or b"").decode("utf-8", "replace")
                count = mtmd.mtmd_input_chunk_get_n_pos(chunk)
                parts.append((kind, chunk, [(ident, j) for j in range(count)]))
        total = sum(len(keys) for _, _, keys in parts)
        if total >= llm.n_ctx():
            raise ContextOverflow(f"The conversation with its images is {total} tokens, more than "
                             f"this model's context of {llm.n_ctx()}. Start a new chat or "
                             "raise the context size.")
        if not parts or parts[-1][0] != mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
            raise ImageError("A prompt cannot end with an image; add text after it.")
        # The longest prefix already in the context, never cutting into an image and
        # leaving the last token to evaluate (its logits start the reply).
        old = self._keys(llm)
        new = [key for _, _, keys in parts for key in keys]
        keep = 0
        while keep < min(len(old), len(new) - 1) and old[keep] == new[keep]:
            keep += 1
        pos = 0
        for kind, _, keys in parts:
            if kind != mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT and pos < keep < pos + len(keys):
                keep = pos
                break
            pos += len(keys)
        llm._ctx.kv_cache_seq_rm(-1, keep, -1)
        llm.n_tokens = keep
        self._spans = [s for s in self._spans if s[0] + s[1] <= keep]
        pos, images = 0, 0
        try:
            for kind, chunk, keys in parts:
                end = pos + len(keys)
                if end <= keep:
                    pos = end
                    continue
                if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                    llm.eval(keys[max(0, keep - pos):])
                else:
                    new_past = llama_cpp.llama_pos(0)
                    status = mtmd.mtmd_helper_eval_chunk_single(
                        self._ctx, llm._ctx.ctx, chunk, llama_cpp.llama_pos(llm.n_tokens),
                        llama_cpp.llama_seq_id(0), llm.n_batch, False, ctypes.byref(new_past))
                    if status != 0:
                        raise ImageError(f"The image could not be encoded "
                                         f"({_log().take() or f'libmtmd error {status}'}).")
                    llm.input_ids[pos:end] = _PLACEHOLDER_ID
                    llm.n_tokens = end
                    self._spans.append((pos, len(keys), keys[0][0]))
                    images += len(keys)
                pos = end
        except BaseException:
            llm._ctx.kv_cache_seq_rm(-1, 0, -1)
            llm.n_tokens = 0
            self._spans = []
            raise
        images += sum(s[1] for s in self._spans if s[0] + s[1] <= keep)
        return Prefill(llm.input_ids[: llm.n_tokens].tolist(), keep, images, started)

    def close(self) -> None:
        ctx, self._ctx = getattr(self, "_ctx", None), None
        if ctx:
            self._mtmd.mtmd_free(ctx)
