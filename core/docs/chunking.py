"""Split extracted sections into overlapping, token-sized chunks that keep their source.

Token counts here are an approximation, on purpose: a "token" is a run of word
characters or a single punctuation mark (`\\w+|[^\\w\\s]`). That is how BERT-style
tokenizers (MiniLM's WordPiece) pre-split text before cutting rare words into pieces, so
it tracks MiniLM's count closely for prose (it undercounts only rare long words) while
needing no tokenizer, no model files and no load time: chunking runs anywhere, and
counting the tokens of a 500-page document costs one regex pass. The default chunk size
(200) leaves room under MiniLM's 256-token window for that undercount.

Chunks never cross a section boundary, so every chunk cites one page, slide or sheet.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

from core.docs.extract import Section

_TOKEN = re.compile(r"\w+|[^\w\s]")

DEFAULT_CHUNK_TOKENS = 200
DEFAULT_OVERLAP_TOKENS = 40


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of a document with the place it came from."""

    doc: str  # the attachment alias or file name shown in citations
    label: str  # "p.3", "slide 2", "sheet Sales" or "" for the whole file
    text: str
    tokens: int

    @property
    def source(self) -> str:
        """The citation text: "report.pdf p.3" (without brackets)."""
        return f"{self.doc} {self.label}" if self.label else self.doc


def count_tokens(text: str) -> int:
    """Approximate token count (see the module docstring for why approximate)."""
    return sum(1 for _ in _TOKEN.finditer(text))


def chunk_sections(
    doc: str,
    sections: list[Section] | tuple[Section, ...],
    max_tokens: int = DEFAULT_CHUNK_TOKENS,
    overlap: int = DEFAULT_OVERLAP_TOKENS,
) -> list[Chunk]:
    """Chunk every section of one document; labels are carried onto the chunks."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1 (got {max_tokens})")
    if not 0 <= overlap < max_tokens:
        raise ValueError(f"overlap must be at least 0 and below max_tokens (got {overlap})")
    chunks: list[Chunk] = []
    for section in sections:
        chunks.extend(chunk_text(doc, section.label, section.text, max_tokens, overlap))
    return chunks


def chunk_text(
    doc: str,
    label: str,
    text: str,
    max_tokens: int = DEFAULT_CHUNK_TOKENS,
    overlap: int = DEFAULT_OVERLAP_TOKENS,
) -> list[Chunk]:
    """Windows of `max_tokens` tokens stepping by `max_tokens - overlap`.

    Chunk text is sliced from the original string (token start to token end), so
    formatting inside a chunk (table pipes, line breaks) is kept as the model will see it.
    Tokens are streamed through a window of `max_tokens` spans: memory is one chunk's,
    not one tuple per token of the document (a file of punctuation is one token a byte).
    """
    step = max_tokens - overlap
    chunks: list[Chunk] = []
    window: deque[tuple[int, int]] = deque()
    fresh = 0  # tokens in the window that no chunk holds yet
    for match in _TOKEN.finditer(text):
        window.append(match.span())
        fresh += 1
        if len(window) == max_tokens:
            chunks.append(Chunk(doc, label, text[window[0][0] : window[-1][1]], max_tokens))
            for _ in range(step):
                window.popleft()
            fresh = 0
    if fresh:
        chunks.append(Chunk(doc, label, text[window[0][0] : window[-1][1]], len(window)))
    return chunks
