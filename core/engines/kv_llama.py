"""The llama.cpp engine's side of the KV caches on disk (core.engines.kv_store).

llama.cpp keeps one sequence in its context; after a reply that sequence's state
(llama_state_seq_get_data: its KV cells, nothing of the sampler) goes to disk with the
token ids it covers, in our own checked file (core.engines.kv_file: llama.cpp's bytes are
checked against the model identity, their length and a SHA-256 before llama.cpp sees
them). A prompt whose start a file covers better than the live context does is loaded
with llama_state_seq_set_data; llama-cpp-python's own prefix logic then feeds the rest.

As on MLX (core.engines.kv_mlx), a chat reply is first re-rendered the way the next
turn's prompt will carry it (core.engines.kv_next_turn) and those tokens are evaluated
into the context on top of the prompt, so a thinking model's next turn reuses the whole
history. That work and the state copy happen in the engine's idle step, after Done went
out; only the file write runs on the writer thread.

Unlike MLX's, these files are always whole (no chain links, core.engines.kv_store): the
sequence state is llama.cpp's own serialisation (cell metadata, then each layer's keys
and values, values transposed or not, a second cache for sliding-window layers) whose
layout changes between llama.cpp versions, and the API only restores a whole sequence.
Cutting it at a token boundary would mean parsing that layout; a file llama.cpp refuses
is removed, which is safe, but a wrong cut it might accept is not.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.engines.kv_next_turn import next_turn_prefix, reply_content
from core.engines.kv_store import KvDiskStore, KvWriter, disk_budget_bytes, kv_root, model_identity

log = logging.getLogger(__name__)

MIN_TOKENS = 256
_SEQ = 0


@dataclass
class _Finished:
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...]
    text: str | None  # the rendered chat prompt (None: raw, base transcript, images)
    prompt: list[int]
    reply: str  # the reply as streamed (before the family parser)
    thinking: bool | None = None  # the template's switch, rendered the same on the next turn


class LlamaKvKeeper:
    """Disk caches for one llama.cpp model (see the module docstring)."""

    def __init__(self, store: KvDiskStore, llm: Any, family: str,
                 render: Callable[[list[dict[str, Any]], tuple[dict[str, Any], ...], bool | None],
                                  str],
                 tokenize: Callable[[str], list[int]]) -> None:
        self.store = store
        self.writer = KvWriter()
        self._llm = llm
        self._family = family
        self._render = render
        self._tokenize = tokenize
        self._pending: _Finished | None = None

    @classmethod
    def open(cls, option: Any, model_path: Path, **kwargs: Any) -> LlamaKvKeeper | None:
        budget = disk_budget_bytes(option)
        if budget <= 0:
            return None
        n_ctx = kwargs["llm"].n_ctx()
        try:
            store = KvDiskStore(kv_root(), model_identity("llamacpp", [model_path], f"n_ctx={n_ctx}"),
                                budget)
        except OSError as exc:
            log.debug("kv cache on disk off: %s", exc.strerror or exc)
            return None
        return cls(store, **kwargs)

    def finished(self, request: Any, text: str | None, prompt: list[int], reply: str) -> None:
        """A reply ended: keep it for the next idle step (its Done goes out first)."""
        self._pending = _Finished(request.messages, request.tools, text, list(prompt), reply,
                                  request.thinking)

    def busy(self) -> bool:
        return self._pending is not None

    def idle_step(self) -> None:
        """Evaluate the reply as the next turn renders it, then queue the state for disk."""
        f, self._pending = self._pending, None
        if f is None:
            return
        llm = self._llm
        if f.text is not None and not f.tools:
            self._next_turn(f)
        tokens = llm.input_ids[: llm.n_tokens].tolist()
        if len(tokens) < MIN_TOKENS:
            return
        try:
            size = int(_lib().llama_state_seq_get_size(llm._ctx.ctx, _SEQ))
            buf = (ctypes.c_uint8 * size)()
            got = int(_lib().llama_state_seq_get_data(llm._ctx.ctx, buf, size, _SEQ))
        except (OSError, ValueError, RuntimeError) as exc:
            log.debug("kv cache state copy failed: %s", exc)
            return
        if got <= 0 or got > size:
            return
        data = np.frombuffer(buf, dtype=np.uint8, count=got)
        store = self.store
        self.writer.submit(lambda: store.put(
            tokens, [("seq", "uint8", data)], {"engine": "llamacpp"}))

    def _next_turn(self, f: _Finished) -> None:
        content = reply_content(f.reply, self._family)
        if content is None or f.text is None:
            return
        render = self._render
        text = next_turn_prefix(lambda msgs: render(msgs, f.tools, f.thinking), f.messages, content,
                                f.text)
        if text is None:
            return
        suffix = self._tokenize(text[len(f.text):])
        llm = self._llm
        held = llm.input_ids[: llm.n_tokens].tolist()
        if not suffix or held[: len(f.prompt)] != f.prompt:
            return
        if len(f.prompt) + len(suffix) >= llm.n_ctx():
            return
        llm.n_tokens = len(f.prompt)  # eval drops every cell past n_tokens first
        try:
            llm.eval(suffix)
        except (RuntimeError, ValueError) as exc:
            log.debug("kv cache next-turn evaluation failed: %s", exc)

    def lookup(self, tokens: Sequence[int], held: int) -> int:
        """Load a stored state covering more of `tokens` than the `held` tokens the live
        context shares with them; returns the tokens now shared."""
        match = self.store.best(tokens)
        if match is None or match.covered <= max(held, MIN_TOKENS - 1):
            return held
        sections = self.store.load(match)
        data = None if sections is None else sections.get("seq")
        if data is None or data.ndim != 1:
            return held
        llm = self._llm
        stored = match.header.tokens
        if len(stored) > llm.n_ctx():
            return held
        buf = (ctypes.c_uint8 * data.nbytes).from_buffer_copy(data.tobytes())
        ok = int(_lib().llama_state_seq_set_data(llm._ctx.ctx, buf, data.nbytes, _SEQ))
        if ok == 0:  # llama.cpp refused it (another layout): the context is empty now
            log.debug("kv cache file %s refused by llama.cpp; removed", match.path.name)
            match.path.unlink(missing_ok=True)
            llm.n_tokens = 0
            return 0
        llm.input_ids[: len(stored)] = stored
        llm.n_tokens = match.covered  # the next eval drops the cells past the prompt's start
        return match.covered

    def close(self) -> None:
        if self._pending is not None:
            self.idle_step()
        self.writer.close(timeout=2.0)


def _lib() -> Any:
    import llama_cpp

    return llama_cpp
