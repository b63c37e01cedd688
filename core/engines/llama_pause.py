"""A llama.cpp reply set aside at a token boundary, and resumed as its own continuation.

llama.cpp holds one sequence per worker, so a person's turn that arrives while an API
reply runs takes the context over (core.engines.turn_order says when). What the reply
needs to go on is kept here: its tokens so far and, when small enough, a copy of its KV
cells (llama_state_seq_get_data, as core.engines.kv_llama stores them). Resumed, the
cells go back, and a new stream is started over prompt + reply so far: llama.cpp's prefix
reuse then feeds only the last sampled token, exactly the pass the reply would have made
next, so a greedy reply comes out token for token as it would have unpaused. Where the
copy would be too big the kept part is prefilled again (same text; the logits of a long
pass may differ in the last bits from one-token passes on repacked CPU weights).

A reply is only set aside where no character is half written (a UTF-8 sequence split
across tokens), so the text streamed so far is exactly the text of its tokens.
"""

from __future__ import annotations

import codecs
import ctypes
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

STATE_MAX_BYTES = 256 * 1024 * 1024  # a larger KV copy is not kept: the reply is re-prefilled
_SEQ = 0  # llama-cpp-python's one sequence


class SampleTap:
    """Keeps the token llama-cpp-python's sampler picked last (create_completion's chunks
    carry text only, and the token sampled last is not in the context yet), and hands a
    resumed reply's tokens to its new sampler before its first pick, so its penalties
    count them as the sampler that was set aside did."""

    def __init__(self, llm: Any) -> None:
        self.last: int | None = None
        self._prime: list[int] | None = None
        sample = llm.sample

        def tapped(*args: Any, **kwargs: Any) -> int:
            prime, self._prime = self._prime, None
            if prime and llm._sampler is not None:
                for token in prime:
                    llm._sampler.accept(token)
            token = sample(*args, **kwargs)
            self.last = int(token)
            return token

        llm.sample = tapped

    def prime(self, reply: list[int]) -> None:
        """The next stream's sampler first accepts these tokens (a reply resumed)."""
        self._prime = list(reply)


@dataclass
class Snapshot:
    """What a reply set aside needs to go on."""

    ids: list[int]  # the context's tokens: the prompt and the reply but its last token
    last: int  # the reply's last sampled token (not yet in the context)
    seq: bytes | None  # the context's KV cells; None when too big to keep

    @property
    def tokens(self) -> list[int]:
        """The continuation's prompt: the request's prompt and every reply token so far."""
        return [*self.ids, self.last]


def at_token_boundary(llm: Any, prompt_len: int, last: int | None) -> bool:
    """True when every reply token's text is whole: none ends half a character."""
    if last is None:
        return False
    tail = [*llm.input_ids[max(prompt_len, llm.n_tokens - 4):llm.n_tokens].tolist(), last]
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    decoder.decode(llm.detokenize(tail, special=False), final=False)
    return not decoder.getstate()[0]


def take(llm: Any, prompt: list[int], last: int) -> Snapshot | None:
    """The reply's state now (None when the context no longer starts with its prompt)."""
    ids = llm.input_ids[:llm.n_tokens].tolist()
    if ids[:len(prompt)] != list(prompt):
        return None
    seq: bytes | None = None
    try:
        import llama_cpp

        size = int(llama_cpp.llama_state_seq_get_size(llm._ctx.ctx, _SEQ))
        if 0 < size <= STATE_MAX_BYTES:
            buf = (ctypes.c_uint8 * size)()
            got = int(llama_cpp.llama_state_seq_get_data(llm._ctx.ctx, buf, size, _SEQ))
            if 0 < got <= size:
                seq = bytes(buf)[:got]
    except (OSError, ValueError, RuntimeError, AttributeError) as exc:
        log.debug("the reply's KV copy failed (it is prefilled again): %s", exc)
    return Snapshot(ids, last, seq)


def restore(llm: Any, snap: Snapshot) -> int:
    """Put the reply's KV cells back (when kept); the context tokens now shared with
    the continuation's prompt (its prefix reuse feeds the rest)."""
    if snap.seq is not None:
        import llama_cpp

        buf = (ctypes.c_uint8 * len(snap.seq)).from_buffer_copy(snap.seq)
        # An empty cache first, so the cells go back where they were (from the first
        # cell on): attention over cells laid out otherwise sums in another order, and a
        # near tie between two tokens could then go the other way.
        llm._ctx.kv_cache_clear()
        if int(llama_cpp.llama_state_seq_set_data(llm._ctx.ctx, buf, len(snap.seq), _SEQ)):
            llm.input_ids[:len(snap.ids)] = snap.ids
            llm.n_tokens = len(snap.ids)
            return len(snap.ids)
        llm.n_tokens = 0  # refused: the context is empty now
    held = llm.input_ids[:llm.n_tokens].tolist()
    n = 0
    for a, b in zip(held, snap.ids, strict=False):
        if a != b:
            break
        n += 1
    return n


Restart = Callable[[list[int], int, list[int]], Any]  # (prompt, max_tokens, reply so far)
