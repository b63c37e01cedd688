"""Keep ingested documents in the store's attachments and chunks tables, and load them back.

Extraction and embedding are the slow part of attaching a file, so a reopened
conversation rebuilds its index from SQLite instead of re-reading the file. A whole
(small) document keeps its sections as chunks without embeddings, so its page and slide
labels survive too. The store is taken by duck type (`add_attachment`, `add_chunks`,
`attachments`, `chunks`), which keeps core.docs free of a hard dependency on its schema.
"""

from __future__ import annotations

from typing import Any

from core.docs.chunking import Chunk, count_tokens
from core.docs.embeddings import DIMENSIONS
from core.docs.extract import Section
from core.docs.retrieval import IngestResult
from core.lazy_numpy import np  # numpy loads on first use (start-up)

MIME: dict[str, str] = {
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "html": "text/html",
    "csv": "text/csv",
    "md": "text/markdown",
    "txt": "text/plain",
}
_KIND = {v: k for k, v in MIME.items()}


def save_result(store: Any, conversation_id: str, result: IngestResult) -> str:
    """Write one ingested document; returns the store's attachment id."""
    text = "\n\n".join(s.text for s in result.sections)
    attachment_id = store.add_attachment(
        conversation_id,
        result.alias,
        result.path,
        mime=MIME.get(result.kind),
        size=result.size_bytes,
        text=text,
    )
    if result.whole:
        rows = [(s.text, s.label or None, None) for s in result.sections]
    else:
        vectors = np.asarray(result.vectors, dtype=np.float32)
        rows = [
            (c.text, c.label or None, vectors[i].tobytes()) for i, c in enumerate(result.chunks)
        ]
    store.add_chunks(attachment_id, rows)
    return attachment_id


def load_results(store: Any, conversation_id: str) -> list[IngestResult]:
    """Every stored document of a conversation, ready for `DocsService.add_result`."""
    results = []
    for attachment in store.attachments(conversation_id):
        if (attachment.mime or "").startswith("image/"):
            continue  # images are core.vision's: a stored picture, no chunks
        stored = store.chunks(attachment.id)
        kind = _KIND.get(attachment.mime or "", "txt")
        embedded = [c for c in stored if c.embedding is not None]
        if not embedded:
            sections = tuple(Section(c.source or "", c.text) for c in stored)
            results.append(
                IngestResult(
                    alias=attachment.alias,
                    path=attachment.path,
                    kind=kind,
                    size_bytes=attachment.size or 0,
                    units=max(1, len(sections)),
                    tokens=sum(count_tokens(s.text) for s in sections),
                    whole=True,
                    sections=sections,
                )
            )
            continue
        chunks = tuple(
            Chunk(attachment.alias, c.source or "", c.text, count_tokens(c.text)) for c in embedded
        )
        vectors = np.vstack(
            [np.frombuffer(c.embedding, dtype=np.float32, count=DIMENSIONS) for c in embedded]
        )
        labels = {c.label for c in chunks}
        results.append(
            IngestResult(
                alias=attachment.alias,
                path=attachment.path,
                kind=kind,
                size_bytes=attachment.size or 0,
                units=max(1, len(labels)),
                tokens=count_tokens(attachment.text),
                whole=False,
                sections=(Section("", attachment.text),),
                chunks=chunks,
                vectors=vectors,
            )
        )
    return results
