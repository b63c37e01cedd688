"""DocsService: what the runtime holds for attachments, per conversation.

It ties aliases, ingestion and retrieval together and keeps one vector index per
conversation, so a turn costs one query embedding plus a matrix product. Heavy work
(`ingest`: markitdown + MiniLM) is handed to an `Executor` the runtime supplies (the
utility worker pool, or a thread pool in tests); without one it runs inline, which is
only right off the UI loop.
"""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from core.docs.attachments import AttachmentRegistry, MentionResolution
from core.docs.embeddings import Embedder, shared_embedder
from core.docs.errors import DocError
from core.docs.extract import DEFAULT_MAX_BYTES
from core.docs.retrieval import (
    DEFAULT_TOP_K,
    DEFAULT_WHOLE_THRESHOLD,
    Hit,
    IngestResult,
    VectorIndex,
    build_context,
    ingest,
)


@dataclass
class _Conversation:
    registry: AttachmentRegistry = field(default_factory=AttachmentRegistry)
    results: dict[str, IngestResult] = field(default_factory=dict)
    index: VectorIndex = field(default_factory=VectorIndex)


class DocsService:
    """Attachments, mentions and prompt context for every open conversation."""

    def __init__(
        self,
        embedder: Embedder | None = None,
        *,
        whole_threshold: int = DEFAULT_WHOLE_THRESHOLD,
        top_k: int = DEFAULT_TOP_K,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self._embedder = embedder
        self.whole_threshold = whole_threshold
        self.top_k = top_k
        self.max_bytes = max_bytes
        self._conversations: dict[str, _Conversation] = {}

    @property
    def embedder(self) -> Embedder:
        return self._embedder or shared_embedder()

    def _conv(self, conversation_id: str) -> _Conversation:
        return self._conversations.setdefault(conversation_id, _Conversation())

    def registry(self, conversation_id: str) -> AttachmentRegistry:
        return self._conv(conversation_id).registry

    def index(self, conversation_id: str) -> VectorIndex:
        """The conversation's vector index (a caller that embeds queries elsewhere searches it)."""
        return self._conv(conversation_id).index

    def _ingest_call(self, path: str | Path, alias: str):
        # The embedder is not passed when work leaves the process: a worker uses its own.
        return partial(
            ingest,
            path,
            alias=alias,
            whole_threshold=self.whole_threshold,
            max_bytes=self.max_bytes,
        )

    def attach(self, conversation_id: str, path: str | Path) -> IngestResult | DocError:
        """Ingest `path` here and now (call off the UI loop); errors change nothing."""
        conv = self._conv(conversation_id)
        alias = conv.registry.add(path).alias
        result = self._ingest_call(path, alias)(embedder=self.embedder)
        return self._settle(conv, alias, result)

    async def attach_many(
        self,
        conversation_id: str,
        paths: list[str | Path],
        executor: Executor | None = None,
    ) -> list[IngestResult | DocError]:
        """Attach several files concurrently through `executor`; one result per path.

        Aliases are reserved in the order given before any work starts, so attaching
        `a.pdf` twice always yields `a.pdf` then `a.pdf #2`.
        """
        conv = self._conv(conversation_id)
        loop = asyncio.get_running_loop()
        aliases = [conv.registry.add(p).alias for p in paths]
        # A process pool cannot take our embedder (a worker uses its own); threads share it.
        extra = {} if isinstance(executor, ProcessPoolExecutor) else {"embedder": self.embedder}
        futures = [
            loop.run_in_executor(executor, partial(self._ingest_call(p, a), **extra))
            for p, a in zip(paths, aliases, strict=True)
        ]
        results = await asyncio.gather(*futures)
        return [self._settle(conv, a, r) for a, r in zip(aliases, results, strict=True)]

    def add_result(self, conversation_id: str, result: IngestResult) -> None:
        """Take an `IngestResult` produced elsewhere (a worker, or loaded from the store)."""
        conv = self._conv(conversation_id)
        if result.alias in conv.results:
            self.detach(conversation_id, result.alias)
        conv.registry.add(result.path, alias=result.alias)
        self._settle(conv, result.alias, result)

    def _settle(
        self, conv: _Conversation, alias: str, result: IngestResult | DocError
    ) -> IngestResult | DocError:
        if isinstance(result, DocError):
            conv.registry.remove(alias)
            return result
        conv.results[alias] = result
        conv.index.add_result(result)
        return result

    def detach(self, conversation_id: str, alias: str) -> bool:
        conv = self._conv(conversation_id)
        if conv.registry.remove(alias) is None:
            return False
        conv.results.pop(alias, None)
        rebuilt = VectorIndex()
        for result in conv.results.values():
            rebuilt.add_result(result)
        conv.index = rebuilt
        return True

    def check_mentions(self, conversation_id: str, text: str) -> MentionResolution:
        """For the composer: which `@doc(...)` mentions resolve and which to flag."""
        return self._conv(conversation_id).registry.resolve(text)

    def selected(self, conversation_id: str, text: str) -> list[IngestResult]:
        """Documents feeding this turn: those mentioned, or all when none is mentioned."""
        conv = self._conv(conversation_id)
        resolution = conv.registry.resolve(text)
        if resolution.mentions:
            return [conv.results[a.alias] for a in resolution.resolved if a.alias in conv.results]
        return list(conv.results.values())

    def context_for(self, conversation_id: str, text: str) -> str:
        """The document block for a user message ("" when nothing is attached)."""
        docs = self.selected(conversation_id, text)
        if not docs:
            return ""
        return build_context(
            text,
            docs,
            embedder=self.embedder,
            k=self.top_k,
            index=self._conv(conversation_id).index,
        )

    def retrieve(self, conversation_id: str, question: str, k: int | None = None) -> list[Hit]:
        """Top chunks for `question` over every attachment (memory rehydration uses it)."""
        conv = self._conv(conversation_id)
        if len(conv.index) == 0:
            return []
        return conv.index.search(self.embedder.encode_one(question), k or self.top_k)

    def facts_for(
        self, conversation_id: str, question: str, k: int = 3, chunks: int = 3
    ) -> list[str]:
        """The `k` sentences that best answer `question`, each with its citation.

        This is the `retrieve` callable memory rollover takes: a rollover has room for a
        few facts, not for page-sized chunks, so the sentences of the top `chunks` chunks
        are embedded (one small batch) and ranked against the question.
        """
        hits = self.retrieve(conversation_id, question, chunks)
        candidates = [
            (sentence, hit.chunk.source) for hit in hits for sentence in _sentences(hit.chunk.text)
        ]
        if not candidates:
            return []
        vectors = self.embedder.encode([c[0] for c in candidates])
        scores = vectors @ self.embedder.encode_one(question)
        best = sorted(range(len(candidates)), key=lambda i: -scores[i])[:k]
        return [f"{candidates[i][0]} [{candidates[i][1]}]" for i in best]

    def close(self) -> None:
        self.embedder.unload()


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _sentences(text: str) -> list[str]:
    flat = " ".join(text.split())
    return [s for s in _SENTENCE_END.split(flat) if len(s) > 3]
