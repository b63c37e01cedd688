"""Attachments: extraction (markitdown), aliases and mentions, chunking, MiniLM
embeddings and retrieval. This package re-exports the API the runtime uses (the
function `extract` stays in core.docs.extract so the submodule name is not shadowed)."""

from core.docs.attachments import (
    Attachment,
    AttachmentRegistry,
    Mention,
    MentionResolution,
    parse_mentions,
    resolve_mentions,
)
from core.docs.errors import DocError
from core.docs.extract import ExtractedDoc, Section
from core.docs.retrieval import Hit, IngestResult, VectorIndex, build_context, ingest
from core.docs.service import DocsService

__all__ = [
    "Attachment",
    "AttachmentRegistry",
    "DocError",
    "DocsService",
    "ExtractedDoc",
    "Hit",
    "IngestResult",
    "Mention",
    "MentionResolution",
    "Section",
    "VectorIndex",
    "build_context",
    "ingest",
    "parse_mentions",
    "resolve_mentions",
]
