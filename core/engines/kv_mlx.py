"""The MLX engine's side of the KV caches on disk (core.engines.kv_store): what it keeps
after a reply, and what it loads instead of prefilling.

The engine calls four things (each a marked line in core/engines/mlx/): `finished` when
a request's cache is remembered, `idle_step` while it has nothing else to do, `lookup`
when a prompt is admitted, `tokens_for` when a prompt is tokenised; and `hint` when the
runtime says a conversation was opened (core.engines.mlx.prefix `warm`): its stored
chain is loaded into the in-memory prefix cache in an idle step, before the person sends.

After a chat reply the cache is not written as generated but as the next turn will need
it (core.engines.kv_next_turn): the previous prompt's cache plus the reply rendered the
way the template renders history, prefilled here in idle steps. It goes to the in-memory
prefix cache too, so a thinking model's next turn reuses its whole history even without a
restart. Everything else (raw prompts, tool calls, templates that re-render history) is
written as generated; a next prompt that forks inside it reuses up to the fork.

Device work stays on the engine's thread: keys and values are sliced (views) and queued
for evaluation here, and the writer thread only copies evaluated buffers to numpy and
writes them. A turn that extends a stored cache writes only its new tokens' keys and
values, as a link of that cache's chain (core.engines.kv_store picks the parent on the
writer's thread, where earlier writes have landed; the token axis is 2); a lookup loads
the chain's links and joins them on the device.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import KVCache, make_prompt_cache

from core.engines import kv_mlx_load
from core.engines.kv_cost import LoadCost
from core.engines.kv_file import BadKvFile
from core.engines.kv_mlx_load import COPIES, on_device, probe_read
from core.engines.kv_next_turn import next_turn_prefix, reply_content
from core.engines.kv_store import (
    KvDiskStore,
    KvWriter,
    Match,
    disk_budget_bytes,
    kv_root,
    model_identity,
)

log = logging.getLogger(__name__)

Marks = tuple[tuple[int, int], ...]
_STORED = {mx.float32: "float32", mx.float16: "float16", mx.bfloat16: "bfloat16"}
# 8-bit files (kv_disk_bits = 8): keys and values quantised in groups of this many.
_GROUP = 64
# Finished requests' caches waiting for an idle step to be copied out for the writer.
_MAX_WRITES = 4
# Follow-ups waiting for an idle step; older ones go first when replies come faster.
_MAX_FOLLOW_UPS = 4
# Shorter prompts are not worth a file: prefilling this many tokens costs about what
# reading and checking a file does.
MIN_TOKENS = 256
# Conversations opened but not yet warmed; an older hint gives way to a newer one.
_MAX_HINTS = 2


@dataclass
class _FollowUp:
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...]
    prompt: list[int]
    text: str
    marks: Marks
    raw: str
    layers: list[tuple[mx.array, mx.array]]  # the prompt's keys and values (views)
    tokens: list[int]  # what the cache held at the end (prompt + reply as generated)
    full: list[tuple[mx.array, mx.array]]
    thinking: bool | None = None  # the template's switch, rendered the same on the next turn


@dataclass
class _Write:
    """A finished cache waiting for an idle step (its layers are lazy views)."""

    tokens: list[int]
    layers: list[tuple[mx.array, mx.array]]
    text: str | None
    marks: Marks


class MlxKvKeeper:
    """Disk caches for one loaded MLX model (see the module docstring)."""

    def __init__(self, store: KvDiskStore, model: Any, tokenizer: Any, family: str,
                 render: Callable[[list[dict[str, Any]], tuple[dict[str, Any], ...], bool | None],
                                  str] | None,
                 remember: Callable[[list[int], list[Any], str, Marks], None],
                 stream: Any, eos: set[int], bits: int = 16, read: str = "auto",
                 copy: str = "stream",
                 discard: Callable[[list[int]], None] | None = None,
                 prefill: Callable[[list[int], list[Any]], None] | None = None) -> None:
        self.store = store
        self.writer = KvWriter()
        self._model = model
        self._tokenizer = tokenizer
        self._family = family
        self._render = render
        self._remember = remember
        self._discard = discard  # drops an in-memory entry by its exact tokens
        self._prefill = prefill  # the engine's pass over a cache (its shapes), else plain
        self._disk_only = False  # the last next-turn cache: for the disk only (_next_turn)
        self._stream = stream
        self._eos = eos
        self._follow_ups: deque[_FollowUp] = deque()
        self._hints: deque[list[int]] = deque(maxlen=_MAX_HINTS)
        self._writes: deque[_Write] = deque(maxlen=_MAX_WRITES)
        self.n_layers = len(make_prompt_cache(model))
        self.bits = 8 if bits == 8 else 16
        self.cost = LoadCost.load(store.folder)
        self.always_read = read == "always"  # kv_disk_read: "auto" asks the cost model
        self.last_load: dict[str, float] = {}  # the last lookup's read, step by step (benches)
        # kv_disk_copy: "stream" (mx.load fills its own buffer from the hashing threads,
        # prefetched to a CUDA GPU as it fills: core.engines.kv_mlx_load); for benches
        # "device" (mx.load on the GPU), "parallel" (the hashing threads copy into a
        # zeroed device buffer), "single" (one copy; the mapped file hashed meanwhile)
        self.copy = copy if copy in COPIES else "stream"
        self._per_token = _per_token_bound(model, self.n_layers)
        # a file the writer wrote, to time a read of in an idle step (once a process)
        self._probe_path: Path | None = None
        self._probed = False
        self._served: set[int] = set()  # prompts (by id) whose history a lookup read

    @classmethod
    def open(cls, option: Any, model_dir: Path, **kwargs: Any) -> MlxKvKeeper | None:
        """The keeper for this model, or None when the store is off (kv_disk_gb = 0) or
        its folder cannot be made."""
        budget = disk_budget_bytes(option)
        if budget <= 0:
            return None
        files = [p for p in model_dir.iterdir() if p.suffix in (".safetensors", ".json")]
        try:
            store = KvDiskStore(kv_root(), model_identity("mlx", files), budget)
        except OSError as exc:
            log.debug("kv cache on disk off: %s", exc.strerror or exc)
            return None
        return cls(store, **kwargs)

    # -- after a reply -------------------------------------------------------------------

    def finished(self, request: Any, prompt: list[int], text: str | None, marks: Marks,
                 raw: str, tokens: list[int], cache: list[Any],
                 prefill: tuple[int, float, int] | None = None) -> None:
        """A request's cache was remembered: queue it for disk (cheap; no device sync).
        `prefill`: (prompt tokens prefilled, seconds to the first token, tokens already
        cached) of a lone request, for the cost model (core.engines.kv_cost); a request
        whose history this keeper read from disk is no pass (its time holds the read)."""
        from_disk = id(prompt) in self._served
        self._served.discard(id(prompt))
        if prefill is not None:
            new, seconds, cached = prefill
            changed = self.cost.prefilled(new, seconds)
            if not from_disk and self.cost.passed(cached, new, seconds):
                changed = True
            if changed:
                self._save_rates()
        if not _plain(cache) or request.request_id.startswith("__"):
            return
        full = _views(cache, len(tokens))
        if full is None:
            return
        if (text is not None and self._render is not None and request.prompt is None
                and not request.tools and len(tokens) > len(prompt)):
            layers = [(k[..., : len(prompt), :], v[..., : len(prompt), :]) for k, v in full]
            self._follow_ups.append(_FollowUp(request.messages, request.tools, list(prompt), text,
                                              marks, raw, layers, list(tokens), full,
                                              request.thinking))
            while len(self._follow_ups) > _MAX_FOLLOW_UPS:
                self._follow_ups.popleft()
            return
        if text is None:
            self._write(list(tokens), full, None, ())
        else:  # the prompt's ids are exact up to its end; the reply's as generated
            self._write(list(tokens), full, text, (*marks, (len(text), len(prompt))))

    def busy(self) -> bool:
        return bool(self._follow_ups or self._hints or self._writes or self._probe_path)

    def engine_busy(self, busy: bool) -> None:
        """The engine has (True) or has no (False) prompt or request in hand: the writer
        pauses between pieces while it has."""
        self.writer.busy(busy)

    def idle_step(self) -> None:
        """Turn one finished reply into its next-turn cache (or write it as generated);
        with none waiting, hand one queued write to the writer; then warm one opened
        conversation."""
        if not self._follow_ups:
            if self._writes:
                self._hand_over(self._writes.popleft())
            elif self._hints:
                self._warm(self._hints.popleft())
            elif self._probe_path is not None:
                self._probe()
            return
        f = self._follow_ups.popleft()
        made = self._next_turn(f)
        if made is None:
            self._write(f.tokens, f.full, f.text, (*f.marks, (len(f.text), len(f.prompt))))
            return
        tokens, cache, text, marks = made
        if not self._disk_only:
            self._remember(tokens, cache, text, marks)
            if self._discard is not None:  # the as-generated entry: its prompt is in this one
                self._discard(f.tokens)
        views = _views(cache, len(tokens))
        if views is not None:
            self._write(tokens, views, text, marks)

    def _next_turn(self, f: _FollowUp) -> tuple[list[int], list[Any], str, Marks] | None:
        visible = f.raw
        for eos in self._eos:  # the end-of-turn token's text is no part of the reply
            end = self._tokenizer.decode([eos])
            if end and visible.endswith(end):
                visible = visible[: -len(end)]
        content = reply_content(visible, self._family)
        if content is None or self._render is None:
            return None
        render = self._render
        text = next_turn_prefix(lambda msgs: render(msgs, f.tools, f.thinking), f.messages, content,
                                f.text)
        if text is None:
            return None
        # the history renders as it was generated: the in-memory cache as generated serves
        # the next turn, and this one goes to disk only (a second copy of the conversation
        # in memory would only evict others)
        self._disk_only = text.startswith(f.text + visible)
        suffix = list(self._tokenizer.encode(text[len(f.text):], add_special_tokens=False))
        if not suffix:
            return None
        cache = []
        for k, v in f.layers:
            c = KVCache()
            c.keys, c.values, c.offset = k, v, k.shape[2]
            cache.append(c)
        if self._prefill is not None:
            self._prefill(suffix, cache)
        else:
            with mx.stream(self._stream):
                for start in range(0, len(suffix), 2048):
                    self._model(mx.array(suffix[start:start + 2048])[None], cache=cache)
                    mx.eval([c.state for c in cache])
        tokens = f.prompt + suffix
        marks = (*f.marks, (len(f.text), len(f.prompt)), (len(text), len(tokens)))
        return tokens, cache, text, marks

    def _write(self, tokens: list[int], layers: list[tuple[mx.array, mx.array]],
               text: str | None, marks: Marks) -> None:
        """Queue a cache for disk: nothing runs now, on the device or the disk; an idle
        step copies it out (_hand_over) and the writer writes it while the engine is idle."""
        if _STORED.get(layers[0][0].dtype) is None or len(tokens) < MIN_TOKENS:
            return
        self._writes.append(_Write(tokens, layers, text, marks))

    def _hand_over(self, w: _Write) -> None:
        """An idle step: copy a queued cache's new tokens (past the longest stored prefix
        it extends) into fresh buffers, in the KV's own dtype or 8-bit, and queue the
        write. Fresh buffers: the writer reads them on the host, and reading the live
        cache there would move its pages off a GPU that still needs them."""
        base = self.store.stored_prefix(w.tokens)
        made = self._prepare(w.layers, base)
        if made is None:
            return
        sections, bits = made
        store, writer = self.store, self.writer
        meta = {"engine": "mlx", "layers": len(w.layers), "kv_bits": bits}

        def job() -> None:  # the writer's thread: buffers evaluated above
            arrays = [(name, dtype, np.asarray(a)) for name, dtype, a in sections]
            path = store.put(w.tokens, arrays, meta, w.text, w.marks, axis=2, held_from=base,
                             pace=writer.wait_idle)
            if path is not None and not self._probed and _size(path) >= kv_mlx_load.PROBE_MIN_BYTES:
                self._probe_path = path  # an idle step times a read of it (_probe)

        writer.submit(job)

    def _prepare(self, layers: list[tuple[mx.array, mx.array]], base: int,
                 ) -> tuple[list[tuple[str, str, mx.array]], int] | None:
        """The sections of a file holding positions [base, end) of `layers`, evaluated."""
        dtype = _STORED.get(layers[0][0].dtype)
        if dtype is None:
            return None
        bits = 8 if self.bits == 8 and layers[0][0].shape[-1] % _GROUP == 0 else 16
        out: list[tuple[str, str, mx.array]] = []
        with mx.stream(self._stream):
            for i, (k, v) in enumerate(layers):
                for part, a in (("keys", k[:, :, base:, :]), ("values", v[:, :, base:, :])):
                    if bits == 8:
                        q, scales, biases = mx.quantize(a, group_size=_GROUP, bits=8)
                        out += [(f"{i}.{part}", "uint32", q),
                                (f"{i}.{part}.scales", dtype, _raw(scales)),
                                (f"{i}.{part}.biases", dtype, _raw(biases))]
                    else:
                        out.append((f"{i}.{part}", dtype, _raw(_fresh(a))))
            mx.eval([a for _, _, a in out])
        return out, bits

    def _probe(self) -> None:
        """Time a read of the file the writer just wrote, through a lookup's load path, so
        the cost model has a read rate before a restart needs one: a rate was only measured
        when a file was read, so a fresh home assumed DEFAULT_READ_BPS and, on a fast GPU,
        prefilled for good. An idle step, once a process, a bounded part of the file
        (core.engines.kv_mlx_load.probe_read: about one step's time)."""
        path, self._probe_path = self._probe_path, None
        if path is None:
            return
        got = probe_read(path, self.store.identity, self.store.max_bytes, self.copy)
        if got is not None:
            self._probed = True
            self.cost.read(*got)
            self._save_rates()

    def _save_rates(self) -> None:
        cost, folder = self.cost, self.store.folder
        self.writer.submit(lambda: cost.save(folder))

    # -- an opened conversation ------------------------------------------------------------

    def hint(self, prompt: list[int]) -> None:
        """A conversation was opened: `prompt` (its history rendered) is likely the start
        of the next request. Warmed in an idle step; dropped once a request comes."""
        if len(prompt) >= MIN_TOKENS:
            self._hints.append(prompt)

    def _warm(self, prompt: list[int]) -> None:
        """Load the stored chain that best matches the start of `prompt` into the in-memory
        cache, whole: the history rendered with a generation prompt stops a few tokens
        short of what the next turn shares with the file (its next user message's
        frame), and the prefix cache trims an entry to whatever a prompt shares."""
        match = self.store.best(prompt)
        if match is None or match.covered < MIN_TOKENS:
            return
        header = match.header
        layers = self._read(match, len(header.tokens))
        if layers is not None:
            self._remember(header.tokens.tolist(), layers, header.text, header.marks)

    # -- before a prompt -----------------------------------------------------------------

    def tokens_for(self, text: str) -> tuple[list[int], int, Marks] | None:
        return self.store.tokens_for(text)

    def lookup(self, prompt: Sequence[int], cache: list[Any] | None, cached: int,
               ) -> tuple[list[Any] | None, int]:
        """A cache from disk when one covers more of `prompt` than the in-memory one."""
        self._hints.clear()  # a request came: this lookup serves it, warming is moot
        match = self.store.best(prompt)
        if match is None or match.covered <= max(cached, MIN_TOKENS - 1):
            return cache, cached
        nbytes = self.store.chain_bytes(match)
        if not self.always_read and not self.cost.worth_reading(nbytes, match.covered - cached):
            return cache, cached  # prefilling is estimated faster than reading
        layers = self._read(match, match.covered)
        if layers is None:
            return cache, cached
        if len(self._served) > 64:  # requests cancelled before they finished
            self._served.clear()
        self._served.add(id(prompt))
        return layers, match.covered

    def _read(self, match: Match, n: int) -> list[Any] | None:
        """The first n tokens' keys and values of `match`'s chain on the device, every
        checksum passed (None: a bad chain, removed, or one that does not fit this model).
        The read is timed step by step (last_load) and feeds the cost model."""
        started = time.perf_counter()
        # each link's bytes are hashed as they are copied to the device; nothing of them
        # reaches the model unless every checksum matches (store.verify)
        chain = self.store.load_chain(match, self._per_token, wait=False,
                                      hash=self.copy == "single")
        if chain is None:
            return None
        chain = [link for link in chain if link[0].base < n]  # a fork before a link: unread
        mapped = time.perf_counter()
        try:
            layers = _layers(chain, n, self.copy)
        except BadKvFile as exc:  # MLX could not load it: the file may be fine, kept
            log.debug("kv cache chain of %s not loaded: %s", match.path.name, exc)
            return None
        if layers is None or len(layers) != self.n_layers:
            self.store.verify(match, chain)
            log.debug("kv cache file %s does not fit this model; removed", match.path.name)
            match.path.unlink(missing_ok=True)
            return None
        arrays = [a for c in layers for a in (c.keys, c.values)]
        mx.async_eval(arrays)
        copied = time.perf_counter()
        if not self.store.verify(match, chain):
            return None
        checked = time.perf_counter()
        mx.eval(arrays)
        mx.synchronize()  # the copy to the device is done, not only queued
        done = time.perf_counter()
        nbytes = sum(h.nbytes for h, _ in chain)
        self.last_load = {"bytes": nbytes, "map_ms": (mapped - started) * 1000,
                          "copy_ms": (copied - mapped) * 1000, "checksums_ms": (checked - copied) * 1000,
                          "device_ms": (done - checked) * 1000, "total_ms": (done - started) * 1000}
        self.cost.read(nbytes, done - started)
        self._save_rates()
        return layers

    def close(self) -> None:
        """Finish what a reply left (a worker stopped right after a turn keeps that turn),
        within the pool's shutdown grace (3 s before it kills the worker)."""
        self.writer.busy(False)
        while self._follow_ups or self._writes:
            self.idle_step()
        self.writer.close(timeout=2.0)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # evicted already
        return 0


def _plain(cache: list[Any]) -> bool:
    return bool(cache) and all(type(c) is KVCache and c.keys is not None for c in cache)


def _views(cache: list[Any], n: int) -> list[tuple[mx.array, mx.array]] | None:
    """The first n positions of every layer's keys and values (lazy slices)."""
    if not _plain(cache) or any(c.offset < n for c in cache):
        return None
    return [(c.keys[..., :n, :], c.values[..., :n, :]) for c in cache]


def _layers(chain: list[tuple[Any, dict[str, np.ndarray]]], n: int,
            copy: str = "stream") -> list[Any] | None:
    """KV layers holding the first n tokens of a chain (its links' positions joined along
    the token axis, parent first); None when a link's sections are not a consistent set
    of (1, heads, its tokens, dim) keys and values. Each link reaches the device in one
    copy (its mapped payload) and is cut into sections there."""
    meta = chain[-1][0].meta
    count, bits = meta.get("layers"), meta.get("kv_bits", 16)
    if type(count) is not int or count < 1 or bits not in (8, 16):
        return None
    per_layer = 6 if bits == 8 else 2
    parts: list[list[tuple[mx.array, mx.array]]] = [[] for _ in range(count)]
    for header, sections in chain:
        base, held = header.base, len(header.tokens)
        if (header.meta.get("layers") != count or header.meta.get("kv_bits", 16) != bits
                or len(sections) != per_layer * count):
            return None
        if base >= n:  # the prompt forks before this link: its tokens are not needed
            break
        arrays = on_device(header, sections, copy)
        take = min(n, held) - base
        for i in range(count):
            k, v = (_part(arrays, f"{i}.{p}", bits) for p in ("keys", "values"))
            if k is None or v is None or k.ndim != 4 or v.ndim != 4:
                return None
            if k.shape[0] != 1 or k.shape[2] != held - base or v.shape[:3] != k.shape[:3]:
                return None
            if take < held - base:
                k, v = k[:, :, :take, :], v[:, :, :take, :]
            parts[i].append((k, v))
    out = []
    for links in parts:
        c = KVCache()
        if len(links) == 1:
            c.keys, c.values = links[0]
        else:
            c.keys = mx.concatenate([k for k, _ in links], axis=2)
            c.values = mx.concatenate([v for _, v in links], axis=2)
        c.offset = n
        out.append(c)
    return out


def _part(arrays: dict[str, mx.array], name: str, bits: int) -> mx.array | None:
    """One layer's keys or values, dequantised from an 8-bit file."""
    a = arrays.get(name)
    if a is None or bits == 16:
        return a
    scales, biases = arrays.get(f"{name}.scales"), arrays.get(f"{name}.biases")
    if (scales is None or biases is None or a.dtype != mx.uint32 or a.ndim != 4
            or scales.shape != biases.shape or scales.shape[:3] != a.shape[:3]
            or scales.shape[3] * _GROUP != a.shape[3] * 4):
        return None
    return mx.dequantize(a, scales, biases, group_size=_GROUP, bits=8)


def _raw(a: mx.array) -> mx.array:
    """bfloat16 travels as its bits (numpy has no bfloat16)."""
    return a.view(mx.uint16) if a.dtype == mx.bfloat16 else a


def _fresh(a: mx.array) -> mx.array:
    """A copy of `a` in a buffer of its own (a slice may share the live cache's)."""
    if a.shape[2] < 2:
        return mx.contiguous(a * 1)
    return mx.concatenate([a[:, :, :1], a[:, :, 1:]], axis=2)


def _per_token_bound(model: Any, layers: int) -> int | None:
    """The most bytes one token's cache can take for this model (float32 keys and
    values, twice over for per-layer shapes), or None when its shape is not known."""
    args = getattr(model, "args", None)
    heads = getattr(args, "num_attention_heads", None)
    kv = getattr(args, "num_key_value_heads", None) or heads
    dim = getattr(args, "head_dim", None)
    hidden = getattr(args, "hidden_size", None)
    if not isinstance(dim, int) and isinstance(hidden, int) and isinstance(heads, int) and heads:
        dim = hidden // heads
    if not (isinstance(kv, int) and isinstance(dim, int) and kv > 0 and dim > 0):
        return None
    return 2 * layers * 2 * kv * dim * 4
