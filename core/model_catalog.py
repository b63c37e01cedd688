"""The local models by id (core.model_ids), and what a name in a request means.

`llmdeck serve` answers every local model by its id, an alias from config.toml, its
display name, the hub's own id, or (as Ollama's clients send it) its family alone
(`gemma3`, `gemma3:latest`) when one model of that family is here. Listing the disk
walks the Hugging Face cache and reads GGUF headers, so the list is kept for a few
seconds and read again when a name is not found in it (a model downloaded a moment ago).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from core import model_ids
from core.bundled import BUNDLED_CHAT_LABEL

if TYPE_CHECKING:
    from core.hub import LocalModel

FRESH_S = 5.0  # how long a listing answers before the disk is read again
RECHECK_S = 1.0  # a name not found re-reads the disk if the listing is older than this


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One local model under its id."""

    id: str
    name: str  # the display name people see
    path: Path
    engine: str | None
    format: str  # gguf | mlx
    size_bytes: int
    quant: str | None
    modified: float  # the file's or folder's mtime (0 when unknown)
    bundled: bool
    vision: bool  # a GGUF with its projector beside it
    hub_id: str  # the hub's own handle ("owner/repo:file.gguf", "local:name", ...)

    @property
    def family(self) -> str:
        return model_ids.family_of(self.id)


class AmbiguousModel(LookupError):
    """A name that matches several models; the message lists their ids."""


class ModelCatalog:
    """The valid local models by id; `lookup` reads a name from a request."""

    def __init__(self) -> None:
        self._entries: list[CatalogEntry] = []
        self._read_at = -1e9
        self._reading = threading.Lock()  # one disk read at a time; the others use its result

    def entries(self, *, fresh_s: float = FRESH_S) -> list[CatalogEntry]:
        """Every valid local model (reads the disk when the listing is older than `fresh_s`:
        call it in a thread)."""
        asked = time.monotonic()
        with self._reading:
            if asked - self._read_at > fresh_s:  # (a read that began after we asked will do)
                self._entries = _read()
                self._read_at = time.monotonic()
            return list(self._entries)

    def invalidate(self) -> None:
        """The disk changed (a model deleted): the next listing reads it again."""
        self._read_at = -1e9

    def cached(self) -> list[CatalogEntry]:
        """The last listing, without touching the disk."""
        return list(self._entries)

    def lookup(self, name: str, aliases: dict[str, str] | None = None) -> CatalogEntry | None:
        """The model `name` means, or None; AmbiguousModel when it means several. Reads
        the disk again when the name is unknown and the listing is not brand new."""
        found = self._match(name, aliases or {}, self.entries())
        if found is None and time.monotonic() - self._read_at > RECHECK_S:
            found = self._match(name, aliases or {}, self.entries(fresh_s=0))
        return found

    def by_path(self, path: str | Path) -> CatalogEntry | None:
        """The listed model at `path` (the last listing; no disk read)."""
        target = Path(path).expanduser()
        return next((e for e in self._entries if e.path == target), None)

    @staticmethod
    def _match(name: str, aliases: dict[str, str], entries: list[CatalogEntry]) -> CatalogEntry | None:
        name = aliases.get(name, name)
        for key in (lambda e: e.id, lambda e: e.name, lambda e: str(e.path),
                    lambda e: BUNDLED_CHAT_LABEL if e.bundled else ""):
            exact = [e for e in entries if key(e) == name]
            if exact:
                return exact[0]
        bare = name.removesuffix(":latest")
        if ":" not in bare:  # Ollama's `gemma3` / `gemma3:latest`: the one of that family
            family = [e for e in entries if e.family == bare]
            if len(family) > 1:
                ids = ", ".join(e.id for e in family)
                raise AmbiguousModel(f"{name!r} matches several local models; name one of "
                                     f"them: {ids}.")
            if family:
                return family[0]
        return next((e for e in entries if e.hub_id == name), None)


_SHARED: dict[tuple[Path, Path], ModelCatalog] = {}


def shared() -> ModelCatalog:
    """The process's one catalog per home: the app's model lifecycle and the API read the
    same listing, so the id the header shows is the id /v1/models lists and answers."""
    from core import paths

    key = (paths.models_dir(), paths.hf_cache_dir())
    catalog = _SHARED.get(key)
    if catalog is None:
        catalog = _SHARED[key] = ModelCatalog()
    return catalog


def id_for_path(path: str | Path) -> str:
    """The id of the model at `path` (reads the disk: call it in a thread). A file the
    listing does not hold (outside the models folder and the HF cache) gets the id its
    name gives, the same rule."""
    target = Path(path).expanduser()
    catalog = shared()
    catalog.entries()
    entry = catalog.by_path(target)
    if entry is None:
        entry = next((e for e in catalog.entries(fresh_s=0) if e.path == target), None)
    return entry.id if entry is not None else model_ids.base_id(target.name)


def _read() -> list[CatalogEntry]:
    from core.hub import list_local_models

    return [_entry(m, m.model_id) for m in list_local_models() if m.valid]


def _entry(model: LocalModel, ident: str) -> CatalogEntry:
    try:
        modified = model.path.stat().st_mtime
    except OSError:
        modified = 0.0
    return CatalogEntry(id=ident, name=model.name, path=model.path, engine=model.engine,
                        format=model.format, size_bytes=model.size_bytes, quant=model.quant,
                        modified=modified, bundled=model.source == "bundled",
                        vision=model.mmproj is not None, hub_id=model.id)
