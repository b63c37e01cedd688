"""Recommended models, read from recommended.toml, in the build that suits this machine.

A person who has just installed llmdeck should not have to know which repo, file and
quantisation to pick: the hub opens on this short list (offline too: it is data in the
package), says whether each model fits this machine's memory at the configured context,
and downloads and loads one with one key. The list is data so that keeping it current is
editing a TOML file, not code.
"""

from __future__ import annotations

import platform
import tomllib
from pathlib import Path
from typing import Any

import psutil

from core.hub.errors import HubError
from core.wire.hub import Fit, Recommendation
from core.workers import memory_budget

RECOMMENDED_TOML = Path(__file__).with_name("recommended.toml")
KV_BYTES_PER_VALUE = memory_budget.KV_DTYPE_BYTES  # fp16/bf16, as llama.cpp and mlx-lm keep it




def machine_format(system: str | None = None, machine: str | None = None) -> str:
    """"mlx" on Apple silicon (MLX runs on its GPU), "gguf" everywhere else."""
    system = system or platform.system()
    machine = machine or platform.machine()
    return "mlx" if system == "Darwin" and machine in ("arm64", "aarch64") else "gguf"


def total_memory_bytes() -> int:
    return int(psutil.virtual_memory().total)


def fit(rec: Recommendation, context: int, total: int | None = None) -> Fit:
    """The pool's own admission arithmetic (core.workers.memory_budget): ok when model + KV
    cache fit the memory budget, tight when only the whole memory holds them (the pool
    refuses such a load unless the budget is raised), too_big beyond."""
    budget = memory_budget.current_budget(physical=total_memory_bytes() if total is None else total)
    need = rec.needed_bytes(context)
    return Fit(memory_budget.fit_verdict(need, budget), need, budget.physical_bytes,
               budget.total_bytes)


def load_recommended(fmt: str | None = None, path: Path | None = None) -> list[Recommendation]:
    """The list in the build for `fmt` ("mlx" | "gguf"; this machine's when None).

    Raises HubError (BAD_REQUEST) naming the file and entry when the data is malformed.
    """
    fmt = fmt or machine_format()
    path = path or RECOMMENDED_TOML
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise HubError("BAD_REQUEST", f"Cannot read the recommended models ({path}): {exc}") from exc
    out: list[Recommendation] = []
    for i, entry in enumerate(data.get("model", [])):
        try:
            out.append(_entry(entry, fmt))
        except (KeyError, TypeError, ValueError) as exc:
            raise HubError("BAD_REQUEST", f"{path}: model #{i + 1} "
                           f"({entry.get('name', '?')}) is malformed: {exc!r}") from exc
    return out


def _entry(entry: dict[str, Any], fmt: str) -> Recommendation:
    build = entry[fmt]
    file = build.get("file")
    if fmt == "gguf" and not file:
        raise ValueError("a gguf build names its file")
    kv_per_token = memory_budget.kv_cache_bytes(int(entry["layers"]), int(entry["kv_heads"]),
                                                int(entry["head_dim"]), 1, KV_BYTES_PER_VALUE)
    return Recommendation(
        name=str(entry["name"]), family=str(entry["family"]), good_at=str(entry["good_at"]),
        licence=str(entry["licence"]), format=fmt, repo=str(build["repo"]),
        file=str(file) if file else None, size_bytes=int(build["size_bytes"]),
        kv_bytes_per_token=kv_per_token,
    )
