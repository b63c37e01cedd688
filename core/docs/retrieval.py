"""Ingest documents and pick what of them goes into a prompt, with citations.

A small document (under `whole_threshold` tokens) goes into the prompt whole: retrieval
could only lose information there. A large one is chunked, embedded with MiniLM and
searched by cosine similarity; the top-k chunks go in with their source label so the
model can cite "[report.pdf p.3]".

Vectors are unit-normalised float32 rows of one matrix per index, so a query is one
matrix-vector product plus an `argpartition`: 10,000 chunks take well under a
millisecond, far inside the 50 ms budget, without an ANN library. `ingest` is a plain
synchronous function with picklable results, so a utility worker can run it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.docs.budget import ReadBounds
from core.docs.chunking import (
    DEFAULT_CHUNK_TOKENS,
    DEFAULT_OVERLAP_TOKENS,
    Chunk,
    chunk_sections,
    count_tokens,
)
from core.docs.embeddings import DIMENSIONS, Embedder, shared_embedder
from core.docs.errors import DocError
from core.docs.extract import DEFAULT_MAX_BYTES, Progress, Section, extract
from core.lazy_numpy import np  # numpy loads on first use (start-up)

DEFAULT_WHOLE_THRESHOLD = 1500
DEFAULT_TOP_K = 5
EMBED_BATCH = 32  # chunks per encode call: the unit of progress, and all that is tokenised at once

CONTEXT_HEADER = (
    "The user attached documents. Answer from the excerpts below and cite each source "
    "in square brackets exactly as it is written above its excerpt."
)


@dataclass(frozen=True, slots=True)
class IngestResult:
    """One attached document ready for prompts: whole text or chunks with vectors."""

    alias: str
    path: str
    kind: str
    size_bytes: int
    units: int  # pages, slides or sheets (1 for flat formats)
    tokens: int
    whole: bool
    sections: tuple[Section, ...]
    chunks: tuple[Chunk, ...] = ()
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, DIMENSIONS), np.float32))
    extract_seconds: float = 0.0
    embed_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Hit:
    chunk: Chunk
    score: float
    row: int = -1  # position in the index (ties a hit to a stored chunk row)


def ingest(
    path: str | Path,
    *,
    alias: str | None = None,
    embedder: Embedder | None = None,
    whole_threshold: int = DEFAULT_WHOLE_THRESHOLD,
    max_bytes: int = DEFAULT_MAX_BYTES,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    overlap: int = DEFAULT_OVERLAP_TOKENS,
    progress: Progress | None = None,
    bounds: ReadBounds | None = None,
) -> IngestResult | DocError:
    """Extract, and for a large document chunk and embed; a `DocError` for bad input.
    `bounds` limits the extraction's memory and time (the documents worker passes them).

    Synchronous and self-contained on purpose: a utility worker calls it and sends the
    result back; nothing here touches the UI loop or the store. Every step is linear in
    the document's size; embedding (70-90 ms a chunk on a busy 2-core CPU) dominates,
    so it goes in batches and reports each one through `progress`.
    """
    t0 = time.perf_counter()
    doc = extract(path, max_bytes=max_bytes, progress=progress, bounds=bounds)
    if isinstance(doc, DocError):
        return doc
    extract_seconds = time.perf_counter() - t0
    name = alias or doc.name
    tokens = sum(count_tokens(s.text) for s in doc.sections)
    common = dict(
        alias=name,
        path=doc.path,
        kind=doc.kind,
        size_bytes=doc.size_bytes,
        units=doc.units,
        tokens=tokens,
        sections=doc.sections,
        extract_seconds=extract_seconds,
    )
    if tokens <= whole_threshold:
        return IngestResult(whole=True, **common)
    chunks = chunk_sections(name, doc.sections, chunk_tokens, overlap)
    t1 = time.perf_counter()
    vectors = _embed_batches(embedder or shared_embedder(), [c.text for c in chunks], progress)
    return IngestResult(
        whole=False,
        chunks=tuple(chunks),
        vectors=vectors,
        embed_seconds=time.perf_counter() - t1,
        **common,
    )


def _embed_batches(embedder: Embedder, texts: list[str], progress: Progress | None) -> np.ndarray:
    """Stream `texts` through the embedder EMBED_BATCH at a time into one preallocated
    matrix: what is held at once is one batch's tokens and activations plus the result,
    never every passage tokenised or a second copy of the vectors (np.vstack)."""
    out = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
    for start in range(0, len(texts), EMBED_BATCH):
        end = min(start + EMBED_BATCH, len(texts))
        out[start:end] = embedder.encode(texts[start:end])
        if progress is not None:
            progress("embedding", end, len(texts))
    return out


class VectorIndex:
    """Chunks and their unit vectors as one float32 matrix; top-k by cosine."""

    def __init__(self) -> None:
        self.chunks: list[Chunk] = []
        self._parts: list[np.ndarray] = []
        self._matrix = np.zeros((0, DIMENSIONS), dtype=np.float32)
        self._doc_of_row = np.zeros(0, dtype=np.int32)
        self._doc_ids: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.chunks)

    @property
    def matrix(self) -> np.ndarray:
        if self._parts:
            self._matrix = np.vstack([self._matrix, *self._parts]).astype(np.float32, copy=False)
            self._parts = []
        return self._matrix

    def add(self, chunks: list[Chunk] | tuple[Chunk, ...], vectors: np.ndarray) -> None:
        if len(chunks) != len(vectors):
            raise ValueError(f"{len(chunks)} chunks but {len(vectors)} vectors")
        if len(chunks) == 0:
            return
        self.chunks.extend(chunks)
        self._parts.append(np.asarray(vectors, dtype=np.float32))
        ids = [self._doc_ids.setdefault(c.doc, len(self._doc_ids)) for c in chunks]
        self._doc_of_row = np.concatenate([self._doc_of_row, np.asarray(ids, dtype=np.int32)])

    def add_result(self, result: IngestResult) -> None:
        self.add(result.chunks, result.vectors)

    def docs(self) -> list[str]:
        return list(self._doc_ids)

    def search(
        self, query: np.ndarray, k: int = DEFAULT_TOP_K, docs: list[str] | None = None
    ) -> list[Hit]:
        """The `k` chunks most similar to unit vector `query`, best first.

        `docs` limits the search to those aliases (the `@doc` mentions of a turn).
        """
        matrix = self.matrix
        if len(matrix) == 0 or k < 1:
            return []
        scores = matrix @ np.asarray(query, dtype=np.float32)
        if docs is not None:
            wanted = [self._doc_ids[d] for d in docs if d in self._doc_ids]
            mask = np.isin(self._doc_of_row, wanted)
            scores = np.where(mask, scores, -np.inf)
            k = min(k, int(mask.sum()))
            if k == 0:
                return []
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top])]
        return [Hit(self.chunks[i], float(scores[i]), int(i)) for i in top]

    # Persistence hooks: the store keeps chunks in SQLite; until then (and for the bench)
    # an index saves to a folder as vectors.npy + chunks.json.
    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "vectors.npy", self.matrix)
        rows = [[c.doc, c.label, c.text, c.tokens] for c in self.chunks]
        (folder / "chunks.json").write_text(json.dumps(rows), encoding="utf-8")

    @classmethod
    def load(cls, folder: str | Path) -> VectorIndex:
        folder = Path(folder)
        index = cls()
        rows = json.loads((folder / "chunks.json").read_text(encoding="utf-8"))
        vectors = np.load(folder / "vectors.npy")
        index.add([Chunk(*row) for row in rows], vectors)
        return index


def format_excerpt(source: str, text: str) -> str:
    return f"[{source}]\n{text.strip()}"


def whole_excerpts(result: IngestResult) -> list[str]:
    """A small document, section by section, each under its own citation."""
    out = []
    for section in result.sections:
        source = f"{result.alias} {section.label}" if section.label else result.alias
        out.append(format_excerpt(source, section.text))
    return out


def build_context(
    question: str,
    docs: list[IngestResult],
    *,
    embedder: Embedder | None = None,
    k: int = DEFAULT_TOP_K,
    index: VectorIndex | None = None,
) -> str:
    """The document block to put before the user's question ("" without documents).

    Whole documents are included in full; chunked ones contribute their top-k chunks for
    `question` (from `index` when the caller keeps one, else one built here).
    """
    if not docs:
        return ""
    parts: list[str] = []
    for result in docs:
        if result.whole:
            parts.extend(whole_excerpts(result))
    chunked = [d for d in docs if not d.whole]
    if chunked:
        if index is None:
            index = VectorIndex()
            for result in chunked:
                index.add_result(result)
        query = (embedder or shared_embedder()).encode_one(question)
        hits = index.search(query, k, docs=[d.alias for d in chunked])
        parts.extend(format_excerpt(h.chunk.source, h.chunk.text) for h in hits)
    return CONTEXT_HEADER + "\n\n" + "\n\n".join(parts)
