"""Short, stable ids for local models, in Ollama's `name:tag` style: `gemma3:270m-q4_k_m`.

API clients name a model by id (Ollama's clients send `gemma3:270m`, an editor's config
holds `qwen3:4b-q4_k_m`); people keep seeing the display name. An id is made from what
the model's own name says: its family (the words before the size, a version glued on:
`gemma-3` -> `gemma3`, `Llama-3.2` -> `llama3.2`), its size (`270m`, `4b`, `8x7b`), a
variant word that tells two builds apart (`it`, `instruct`, ...) and its quant. Nothing is
read from disk here, so the same file always gets the same id; `unique_ids` settles the
rare clash (an MLX and a GGUF build of one model with the same quant) the same way each
time. Pure string work: no imports from the rest of llmdeck.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

MAX_LEN = 80
_EXTENSIONS = re.compile(r"\.(gguf|safetensors|bin)$", re.IGNORECASE)
_SIZE = re.compile(r"^(\d+x)?\d+(\.\d+)?[bmk]$")  # 4b, 0.6b, 270m, 8x7b
_ACTIVE = re.compile(r"^a\d+(\.\d+)?b$")  # the active parameters of a MoE: 30b-a3b
_VERSION = re.compile(r"^v?\d+(\.\d+)*$")
_VARIANTS = ("it", "instruct", "chat", "base", "thinking", "reasoning", "vl", "vision")
_QUANT = re.compile(r"(?i)(?:^|[-_.\s])((?:i?q\d(?:_[a-z0-9]+)*)|(?:[bf]f?16|f32)|(?:\d+-?bit)|"
                    r"(?:mxfp4))(?=$|[-_.\s])")
_UNSAFE = re.compile(r"[^a-z0-9._-]+")


def normalise_quant(quant: str | None) -> str | None:
    """'Q4_K_M' -> 'q4_k_m', '4bit' -> '4bit'; None for no quant."""
    if not quant:
        return None
    q = _UNSAFE.sub("", quant.strip().lower().replace("-", ""))
    return q or None


def base_id(name: str, quant: str | None = None) -> str:
    """The id a model named `name` (a file or folder name, a repo's last part) gets."""
    stem = _EXTENSIONS.sub("", name.rsplit("/", 1)[-1]).strip()
    q = normalise_quant(quant)
    found = _QUANT.search(stem)
    if found is not None:
        q = q or normalise_quant(found.group(1))
        stem = (stem[: found.start(1)] + stem[found.end(1):])
    words = [w for w in re.split(r"[-_\s]+", stem.lower()) if w]
    size_at = next((i for i, w in enumerate(words) if _SIZE.match(w)), None)
    if size_at is None:
        family_words, tag = words, []
    else:
        family_words = words[:size_at]
        tag = [words[size_at]] + [w for w in words[size_at + 1:]
                                  if w in _VARIANTS or _ACTIVE.match(w)]
    family = _join(family_words) or "model"
    if q:
        tag.append(q)
    return _clean(family) + ":" + (_clean("-".join(tag)) or "latest")


def _join(words: list[str]) -> str:
    """Family words joined with '-', a version number glued to the word before it."""
    out = ""
    for word in words:
        if out and _VERSION.match(word) and out[-1].isalpha() and not word.startswith("v"):
            out += word
        else:
            out += ("-" if out else "") + word
    return out


def _clean(text: str) -> str:
    text = _UNSAFE.sub("-", text.lower()).strip("-.")
    return re.sub(r"-{2,}", "-", text)[:MAX_LEN] or ""


def unique_ids(models: Sequence[tuple[str, str | None, str, str]]) -> list[str]:
    """Ids for (name, quant, format, path) entries, one each and all different.

    A clash gets the format on the MLX build's tag (`qwen3:4b-4bit-mlx`), then a number in
    the order of the paths, so the first keeps the plain id and every id stays the same
    while the same files are on disk."""
    ids = [base_id(name, quant) for name, quant, _, _ in models]
    counts = Counter(ids)
    ids = [i + "-mlx" if counts[i] > 1 and m[2] == "mlx" else i for i, m in zip(ids, models, strict=True)]
    out = list(ids)
    seen: dict[str, int] = {}
    for index in sorted(range(len(models)), key=lambda k: models[k][3]):
        n = seen.get(ids[index], 0) + 1
        seen[ids[index]] = n
        if n > 1:
            out[index] = f"{ids[index]}-{n}"
    return out


def family_of(model_id: str) -> str:
    """'gemma3:270m-q4_k_m' -> 'gemma3' (what Ollama's `gemma3` or `gemma3:latest` asks)."""
    return model_id.split(":", 1)[0]


def same_id(asked: str, model_id: str) -> bool:
    """True when a request naming `asked` means the model listed as `model_id`: the same
    id, or the two differ only by Ollama's default tag (`scripted` is `scripted:latest`)."""
    def full(name: str) -> str:
        return name if ":" in name else f"{name}:latest"

    return asked == model_id or full(asked) == full(model_id)


def id_of(path: object, models: list) -> str | None:
    """The one id of the model at `path` (a GGUF file or an MLX folder), from a listing of
    the local models; None when it is not listed."""
    if not path:
        return None
    want = Path(str(path)).expanduser()
    return next((m.model_id or m.id for m in models if Path(m.path).expanduser() == want), None)


def id_line(ident: str) -> str:
    """What a pull says last: the name to use the model by (issue 45: one id everywhere),
    so an API client or a script needs no guess from the file name."""
    return f"its id: {ident} (as `llmdeck models list` and the API name it)"
