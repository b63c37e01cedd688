"""/v1/embeddings backing: the bundled MiniLM, run in its own process off the event loop.

The app process never imports torch for this (a ~90 MB, seconds-long import that would
freeze the TUI); one spawned utility process holds the model, started on the first
embedding request and stopped with the server.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
from concurrent.futures import Executor, ProcessPoolExecutor

import numpy as np

from core.docs.embeddings import MODEL_NAME, enter_offline_mode, shared_embedder

EMBEDDING_MODELS = (MODEL_NAME, f"sentence-transformers/{MODEL_NAME}")


def _encode(texts: list[str]) -> np.ndarray:
    """Runs in the utility process."""
    return shared_embedder().encode(texts)


class EmbeddingService:
    """Encodes texts in an executor: a spawned process by default, any Executor in tests."""

    def __init__(self, executor: Executor | None = None) -> None:
        self._executor = executor
        self._owned = executor is None

    def _pool(self) -> Executor:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(
                max_workers=1, mp_context=mp.get_context("spawn"), initializer=enter_offline_mode)
        return self._executor

    async def encode(self, texts: list[str]) -> np.ndarray:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool(), _encode, list(texts))

    def close(self) -> None:
        if self._owned and self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
