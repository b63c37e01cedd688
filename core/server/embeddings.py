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


MAX_INPUTS = 2048  # OpenAI's own limit per request
# MiniLM reads its first 256 tokens and no tokenizer packs more than 64 characters into
# one (core.server.limits): text past this many characters is never seen, so it is cut
# before tokenising rather than tokenised and thrown away.
MAX_INPUT_CHARS = 256 * 64


def _encode(texts: list[str]) -> tuple[np.ndarray, int]:
    """Runs in the utility process: the vectors, and the tokens the model read (exact:
    its own tokenizer, truncated as the model truncates, special tokens included)."""
    embedder = shared_embedder()
    vectors = embedder.encode(texts)
    model = embedder._model  # loaded by encode(); its tokenizer is what counts
    if model is None:
        return vectors, 0
    ids = model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)["input_ids"]
    return vectors, sum(len(x) for x in ids)


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

    async def encode(self, texts: list[str]) -> tuple[np.ndarray, int]:
        """Unit vectors for `texts` and the number of tokens read."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool(), _encode, [t[:MAX_INPUT_CHARS] for t in texts])

    def close(self) -> None:
        if self._owned and self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
