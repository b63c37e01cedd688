"""How much memory a model needs, how much llmdeck may use, and the sentences about both.

One arithmetic for three places: the pool's admission before every load, the sentence a
worker killed by the system while loading is reported with, and the hub's "fits" column.
A model needs its weights (the bytes of its files: safetensors tensors, or the GGUF file
and its vision projector) plus its KV cache at the configured context (2 x layers x KV
heads x head size x bytes a value x tokens, as mlx-lm and llama.cpp allocate it). Runtime
buffers are not counted per model: the budget's headroom below physical memory is for them.

The budget: a share of physical memory that leaves the system room. Apple's Metal lets the
GPU wire about three quarters of memory on a Mac by default (recommendedMaxWorkingSetSize;
iogpu.wired_limit_mb raises it), and macOS itself with a terminal and a browser wants
~2 GiB. So: 75% of memory, but never less than 2 GiB left over, and never under half of a
small machine. `memory_budget_gb` in config.toml sets it; LLMDECK_MEMORY_BUDGET_MB (decimal
megabytes) overrides both, for tests.
"""

from __future__ import annotations

import functools
import os
import re
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core import json_text

SHARE = 0.75  # of physical memory: what Metal lets the GPU wire by default on larger Macs
SYSTEM_ROOM = 2 * 2**30  # always left to the system, whatever the share says
MIN_SHARE = 0.5  # a small machine still gets half: below that nothing useful would load
ENV_BUDGET_MB = "LLMDECK_MEMORY_BUDGET_MB"
KV_DTYPE_BYTES = 2  # fp16/bf16: the KV cache type of llama.cpp and of mlx-lm's usual models
# A sliding-window layer holds its window plus the chunk being prefilled (mlx-lm's rotating
# cache trims only between chunks): mlx-lm's and our engine's default prefill step.
PREFILL_CHUNK = 2048
_FLOAT_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}
_HEADER_LIMIT = 100 * 2**20  # a safetensors header past this is not one we read
_SPLIT_GGUF = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)  # model-00001-of-00003.gguf


# -- what a model needs ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class KvShape:
    """The attention shape that sets a model's KV cache per token."""

    layers: int  # layers whose cache grows with the context
    kv_heads: int
    key_dim: int
    value_dim: int
    dtype_bytes: int = KV_DTYPE_BYTES
    sliding_layers: int = 0  # layers whose cache stops at `window` tokens (Gemma 3, gpt-oss)
    window: int = 0  # the most tokens a sliding layer holds at once

    def bytes_at(self, context: int) -> int:
        """Bytes of keys and values for `context` tokens across all layers."""
        per_layer_token = self.kv_heads * (self.key_dim + self.value_dim) * self.dtype_bytes
        tokens = max(context, 0)
        return per_layer_token * (self.layers * tokens + self.sliding_layers * min(tokens, self.window))


def kv_cache_bytes(layers: int, kv_heads: int, head_dim: int, context: int,
                   dtype_bytes: int = KV_DTYPE_BYTES) -> int:
    """The plain case: every layer keeps keys and values of `head_dim` for each token."""
    return KvShape(layers, kv_heads, head_dim, head_dim, dtype_bytes).bytes_at(context)


@dataclass(frozen=True, slots=True)
class Need:
    """The memory a model takes once loaded: weights plus KV cache at `context` tokens.

    `known` is False when the artifact could not be read (a scripted test engine, a path
    that is gone): such a load is admitted and counts as nothing, since refusing it would
    name numbers we do not have; the engine's own load then says what is wrong."""

    weights_bytes: int
    kv_bytes: int
    context: int
    workers: int = 1
    known: bool = True
    draft_bytes: int = 0  # of the total, what a draft model loaded beside it takes

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes

    def describe(self) -> str:
        """'17.2 GB (15.1 GB weights + 2.1 GB context cache at 8,192 tokens)'."""
        if not self.known:
            return "an unknown amount of memory (its files could not be measured)"
        each = f", for {self.workers} workers" if self.workers > 1 else ""
        draft = f", {gb(self.draft_bytes)} of it the draft model" if self.draft_bytes else ""
        if not self.kv_bytes and not self.context:
            return f"{gb(self.total_bytes)} (its weights)"
        return (f"{gb(self.total_bytes)} ({gb(self.weights_bytes)} weights + "
                f"{gb(self.kv_bytes)} context cache at {self.context:,} tokens{each}{draft})")


UNKNOWN = Need(0, 0, 0, known=False)


def model_need(path: str | Path, context: int, *, engine: str = "", replicas: int = 1,
               prefill_chunk: int = PREFILL_CHUNK) -> Need:
    """What loading the model at `path` with `replicas` workers takes (`prefill_chunk`: the
    MLX engine's prefill step, which a sliding-window layer holds beyond its window).

    llama.cpp memory-maps a GGUF, so its workers share the weights' pages and each adds
    only its own KV cache; an MLX worker loads its own copy of everything."""
    p = Path(path).expanduser()
    workers = max(1, replicas)
    try:
        if p.is_file() and p.suffix.lower() == ".gguf":
            weights, shape = _gguf_weights(p), _gguf_kv_shape(p)
        elif p.is_dir():
            weights, shape = _folder_weights(p), _folder_kv_shape(p, prefill_chunk)
        else:
            return UNKNOWN
    except (OSError, ValueError, KeyError, TypeError, IndexError, struct.error):
        return UNKNOWN
    kv = shape.bytes_at(context) if shape is not None else 0
    if engine == "llamacpp":
        return Need(weights, kv * workers, context, workers)
    return Need(weights * workers, kv * workers, context, workers)


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".npz", ".pt", ".pth")


def weights_need(path: str | Path, context: int = 0) -> Need:
    """What a model whose cache we cannot shape needs: the bytes of its weight files (a
    sentence-transformers folder, an unusual vision model). model_need first where it knows
    the layout; UNKNOWN when there are no weight files to count."""
    need = model_need(path, context)
    if need.known:
        return need
    p = Path(path).expanduser()
    try:
        files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
        total = sum(f.stat().st_size for f in files if f.suffix.lower() in WEIGHT_SUFFIXES)
    except OSError:
        return UNKNOWN
    return Need(total, 0, 0) if total else UNKNOWN


def _folder_weights(p: Path) -> int:
    """The tensors' bytes of an MLX/HF folder, from the safetensors headers."""
    from core.engines.select import check_mlx_dir, safetensors_extent

    return sum(safetensors_extent(shard)[0] for shard in check_mlx_dir(p))


def _folder_kv_shape(p: Path, prefill_chunk: int) -> KvShape | None:
    from core.engines.select import check_mlx_dir
    from core.model_files import json_object

    config = json_object(p / "config.json")
    return kv_shape_from_config(config, _float_bytes(check_mlx_dir(p)[0]), prefill_chunk)


def kv_shape_from_config(config: dict[str, Any], dtype_bytes: int = KV_DTYPE_BYTES,
                         prefill_chunk: int = PREFILL_CHUNK) -> KvShape | None:
    """The KV shape a config.json describes (a vision model's text_config first), or None
    when it names no attention shape."""
    text = config.get("text_config")
    c = {**config, **text} if isinstance(text, dict) else config
    layers = _int(c, "num_hidden_layers", "n_layer", "num_layers")
    heads = _int(c, "num_attention_heads", "n_head")
    if not layers or not heads:
        return None
    kv_heads = _int(c, "num_key_value_heads") or heads
    if isinstance(c.get("num_key_value_heads"), list):  # per layer (some hybrids): the largest
        kv_heads = max(int(h) for h in c["num_key_value_heads"])
    head_dim = _int(c, "head_dim") or int(c.get("hidden_size", 0)) // heads
    key_dim = value_dim = head_dim
    if c.get("qk_nope_head_dim") is not None:  # MLA (DeepSeek, Kimi), counted uncompressed
        key_dim = int(c["qk_nope_head_dim"]) + int(c.get("qk_rope_head_dim") or 0)
        value_dim = int(c.get("v_head_dim") or key_dim)
    window = _int(c, "sliding_window") or 0
    full, sliding = layers, 0
    kinds = c.get("layer_types")
    if isinstance(kinds, list) and kinds:
        full = sum(k == "full_attention" for k in kinds)
        sliding = sum(k == "sliding_attention" for k in kinds) if window else 0
        full += 0 if window else sum(k == "sliding_attention" for k in kinds)
    elif window and _int(c, "sliding_window_pattern"):  # Gemma 3: every n-th layer is global
        full = layers // int(c["sliding_window_pattern"])
        sliding = layers - full
    return KvShape(full, int(kv_heads), key_dim, value_dim, dtype_bytes, sliding,
                   window + max(prefill_chunk, 0) if sliding else 0)


def _int(c: dict[str, Any], *keys: str) -> int:
    for key in keys:
        value = c.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _float_bytes(shard: Path) -> int:
    """The bytes of the float type most of a safetensors file's float tensors use: mlx-lm
    computes (and caches) keys and values in the model's own float type."""
    with shard.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        if length > _HEADER_LIMIT:
            raise ValueError("safetensors header too large")
        header = json_text.loads(f.read(length))
    if not isinstance(header, dict):
        raise ValueError("unreadable safetensors header")
    kinds = Counter(v.get("dtype") for k, v in header.items()
                    if k != "__metadata__" and isinstance(v, dict) and v.get("dtype") in _FLOAT_BYTES)
    return _FLOAT_BYTES[kinds.most_common(1)[0][0]] if kinds else KV_DTYPE_BYTES


def _gguf_weights(p: Path) -> int:
    """The GGUF file (memory-mapped whole; every part of a split one, which llama.cpp loads
    from the first) plus the vision projector llama.cpp loads beside it."""
    from core.engines.select import sibling_mmprojs

    split = _SPLIT_GGUF.search(p.name)
    parts = [p]
    if split:
        total = split.group(2)
        stem = p.name[: split.start()]
        parts = [p.with_name(f"{stem}-{i:05d}-of-{total}.gguf") for i in range(1, int(total) + 1)]
    projectors = sibling_mmprojs(p) if "mmproj" not in p.name.lower() else []
    return sum(f.stat().st_size for f in parts) + (projectors[0].stat().st_size if projectors else 0)


def _gguf_kv_shape(p: Path) -> KvShape | None:
    """From the GGUF's metadata; llama.cpp keeps an f16 cache for every layer. Remembered per
    file version: reading the header walks the whole vocabulary (a second for 262k tokens)."""
    st = p.stat()
    return _gguf_kv_shape_of(str(p), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _gguf_kv_shape_of(path: str, size: int, mtime_ns: int) -> KvShape | None:
    from core.engines.gguf_import.reader import GGUFFile

    g = GGUFFile(Path(path))
    layers = g.arch_get("block_count")
    heads = g.arch_get("attention.head_count")
    if isinstance(heads, list):
        heads = max(heads)
    if not layers or not heads:
        return None
    kv_heads = g.arch_get("attention.head_count_kv") or heads
    if isinstance(kv_heads, list):
        kv_heads = max(kv_heads)
    head_dim = int(g.arch_get("embedding_length", 0)) // int(heads)
    key_dim = int(g.arch_get("attention.key_length") or head_dim)
    value_dim = int(g.arch_get("attention.value_length") or key_dim)
    return KvShape(int(layers), int(kv_heads), key_dim, value_dim)


# -- what llmdeck may use ----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Budget:
    """The memory loaded models may take together, and where the figure came from."""

    total_bytes: int  # the budget
    physical_bytes: int  # the machine's memory
    source: str  # "automatic" | "memory_budget_gb" | ENV_BUDGET_MB

    def describe(self) -> str:
        if self.source == "automatic":
            return (f"{gb(self.total_bytes)} (automatic: {SHARE:.0%} of {gb(self.physical_bytes)}, "
                    f"at least {gb(SYSTEM_ROOM)} left to the system)")
        return f"{gb(self.total_bytes)} (set by {self.source}; the machine has {gb(self.physical_bytes)})"


def physical_memory_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


def automatic_budget_bytes(physical: int) -> int:
    return int(max(min(physical * SHARE, physical - SYSTEM_ROOM), physical * MIN_SHARE))


def current_budget(setting_gb: float | None = None, *, physical: int | None = None) -> Budget:
    """The budget in force: the environment's, else `setting_gb` (read from config.toml when
    None), else the automatic share. Read at each load, so a changed setting counts at once."""
    physical = physical_memory_bytes() if physical is None else physical
    env = os.environ.get(ENV_BUDGET_MB, "").strip()
    if env:
        try:
            mb = float(env)
        except ValueError:
            mb = 0.0
        if 0 < mb < float("inf"):
            return Budget(int(mb * 10**6), physical, ENV_BUDGET_MB)
    if setting_gb is None:
        setting_gb = _configured_gb()
    if setting_gb and setting_gb > 0:
        return Budget(int(setting_gb * 10**9), physical, "memory_budget_gb")
    return Budget(automatic_budget_bytes(physical), physical, "automatic")


def _configured_gb() -> float:
    from core.config import Settings

    try:
        return float(getattr(Settings.load(), "memory_budget_gb", 0) or 0)
    except (OSError, ValueError, TypeError):
        return 0.0


def fit_verdict(need_bytes: int, budget: Budget) -> str:
    """The hub's word for a model: ok (admission takes it, nothing else loaded), tight (it
    fits the machine but not the budget: admission refuses it unless the budget is
    raised), too_big (more than the machine's memory)."""
    if need_bytes <= budget.total_bytes:
        return "ok"
    return "tight" if need_bytes <= budget.physical_bytes else "too_big"


# -- the sentences -----------------------------------------------------------------------------

RAISE = ("Pick a smaller quant or context size, unload another model, or raise memory_budget_gb "
         "in the config file.")


def refusal(label: str, need: Need, free: int, budget: Budget, busy_bytes: int = 0) -> str:
    """Why a load is refused before it starts, with the numbers."""
    held = f" ({gb(busy_bytes)} is held by models answering now)" if busy_bytes else ""
    return (f"{label} needs {need.describe()}; {gb(max(free, 0))} of the "
            f"{gb(budget.total_bytes)} memory budget is free{held}. {RAISE}")


def killed_while_loading(label: str, need: Need, free: int, budget: Budget) -> str:
    """Why a load ended with the worker killed by the system (SIGKILL): memory, almost always."""
    if not need.known:
        return (f"{label} was killed by the system while loading, most likely because memory ran "
                "out. Close other programs or pick a smaller model.")
    return (f"{label} ran out of memory while loading (the system killed its worker): it needs "
            f"{need.describe()}; {gb(max(free, 0))} of the {gb(budget.total_bytes)} memory budget "
            "was free, but other programs hold part of that memory. Close other programs, pick "
            "a smaller quant or context size, or lower memory_budget_gb in the config file.")


def gb(n: float) -> str:
    """Decimal gigabytes with one decimal, as the hub shows sizes ('0.3 GB')."""
    return f"{n / 10**9:.1f} GB"
