"""Captions: how the images of a conversation reach a chat model that cannot see.

Each image is described once per vision model: the caption is kept in the image's
sidecar beside its stored file (core.vision.images), so a later turn, a reopened
conversation, or the same picture attached elsewhere reuses it. Two turns asking for the
same caption at once share one request. A turn never fails for an image: without a vision
model, or when describing fails, the model is told an image is there and why it has no
description.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from core.vision.images import AttachedImage, StoredImage
from core.vision.vlm import DEFAULT_PROMPT
from core.vision.worker import VisionError, VisionWorker
from core.workers.on_demand import MemoryGate

RECENT_IMAGES = 4  # a turn describes at most the newest few images of the conversation
CAPTION_TOKENS = 200
HEADER = "Images the user attached (described by a vision model; you cannot see them):"


class Captioner:
    """The vision worker of the "vision" role, made from the settings when first needed."""

    def __init__(self, settings_of: Callable[[], Any], gate: MemoryGate | None = None) -> None:
        self._settings_of = settings_of  # the runtime's settings, read fresh each time
        self.gate = gate  # the pool's memory budget, which the vision model counts against
        self.worker: VisionWorker | None = None
        self._inflight: dict[tuple[str, str], asyncio.Future[str]] = {}
        self._retired: set[asyncio.Task[None]] = set()

    def _setting(self) -> tuple[str | None, float]:
        settings = self._settings_of()
        idle = getattr(settings, "vision_idle_unload_s", 180.0)
        ok = isinstance(idle, int | float) and not isinstance(idle, bool) and idle >= 0
        return getattr(settings, "vision_model", None) or None, float(idle) if ok else 180.0

    def current(self) -> VisionWorker | None:
        """The worker for the configured vision model (None when none is set); call on
        the loop (a changed setting shuts the old worker down)."""
        path, idle = self._setting()
        if not path:
            return None
        if self.worker is None or self.worker.model_dir != str(path):
            if self.worker is not None:  # the setting changed: the old model goes
                task = asyncio.ensure_future(self.worker.shutdown())
                self._retired.add(task)
                task.add_done_callback(self._retired.discard)
            self.worker = VisionWorker(path, idle_s=idle)
            self.worker.gate = self.gate
        self.worker.idle_s = idle
        return self.worker

    async def caption(self, image: StoredImage,
                      on_delta: Callable[[str], None] | None = None) -> str:
        """The vision model's caption of `image`, made at most once per model and image."""
        worker = self.current()
        if worker is None:
            raise VisionError("UNSUPPORTED", "no vision model is set (vision_model in the "
                              "config file)")
        if worker.name in image.captions:
            return image.captions[worker.name]
        key = (image.sha256, worker.name)
        if key in self._inflight:
            return await asyncio.shield(self._inflight[key])
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            text = (await worker.caption([image.path], DEFAULT_PROMPT,
                                         max_tokens=CAPTION_TOKENS, on_delta=on_delta)).strip()
            image.captions[worker.name] = text
            await asyncio.to_thread(image.save_sidecar)
            future.set_result(text)
            return text
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it from their await
            raise
        finally:
            self._inflight.pop(key, None)

    async def image_block(self, images: Sequence[AttachedImage],
                          notify: Callable[[str], None] | None = None) -> str:
        """The text that stands for the conversation's newest images in a user turn."""
        if not images:
            return ""
        lines = []
        for attached in list(images)[-RECENT_IMAGES:]:
            image = attached.image
            what = f"{attached.alias} ({image.width}×{image.height})"
            try:
                worker = self.current()
                if notify is not None and worker is not None and \
                        worker.name not in image.captions:
                    notify(f"Describing {attached.alias} with {worker.name}…")
                lines.append(f"- {what}: {await self.caption(image)}")
            except VisionError as exc:
                lines.append(f"- {what}: not described ({exc.message.rstrip('.')})")
        return HEADER + "\n" + "\n".join(lines)

    def status(self):
        """The vision row of the worker pane, unloaded ones too (any thread: no loop)."""
        path, idle = self._setting()
        if path is None:
            return None
        if self.worker is not None and self.worker.model_dir == str(path):
            return self.worker.status()
        return VisionWorker(path, idle_s=idle).status()  # not started until an image needs it

    async def close(self) -> None:
        if self.worker is not None:
            await self.worker.shutdown()
        for task in list(self._retired):
            await task
