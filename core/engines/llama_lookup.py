"""Greedy decoding with prompt-lookup drafts on llama.cpp (core.engines.speculative).

Why not llama-cpp-python's own `Llama(draft_model=LlamaPromptLookupDecoding())`: it is
fixed when the model is constructed (so every request of the worker would pay for it,
sampled ones included, with no way to turn it off per request), and it forces
`logits_all`, which keeps context x vocabulary floats (4 GiB for the bundled Gemma's
262k vocabulary at 4,096 tokens). This drives the context directly instead: a pass over
the last token plus the drafted ones asks llama.cpp for those rows' logits only, the
greedy argmax of each row checks the drafts, and rejected drafts leave the KV cache
(the next pass removes everything past `n_tokens`, as Llama.eval does).

Exactness: greedy output is identical to plain decoding only if a verifying pass gives
each row the logits a one-token pass gives it. llama.cpp's CPU kernels do that only with
flash attention on (without it a 2-token pass already differs by up to ~0.8 in a logit,
and the KV it writes carries the difference on) and for passes of at most EXACT_ROWS
tokens (8 or more take other kernels), or of at most EXACT_ROWS_REPACKED where the
weights are repacked at load (core.engines.llama_params.repack_weights: on wherever the
CPU has no AMX): the repacked matrix product takes a pass's rows four at a time through
a many-row kernel and only the rest through the one-row kernel a one-token pass uses, so
a 4-token pass already differs by up to ~0.7 in a logit (measured on an AMD EPYC). The
engine turns flash attention on for speculation (core.engines.llamacpp), picks the bound
with exact_rows and drafts fit in it here.

The stream yields chunks in create_completion's shape, one token each, and keeps
`llm.n_tokens` at "every yielded token but the last is in the context", which the
engine's token count and prefix reuse read.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from typing import Any

from core.engines.speculative import Acceptance, NgramDrafter, accepted

# Most tokens one verifying pass may hold (the last token + its drafts) and still give
# each row bit-for-bit the logits of a one-token pass: measured on llama.cpp 0.3.36's CPU
# kernels with flash attention over the bundled Gemma, 2..7 exact, 8+ not; with repacked
# weights 2..3 exact, 4+ not.
EXACT_ROWS = 7
EXACT_ROWS_REPACKED = 3


def exact_rows(repacked: bool) -> int:
    """The bound on a verifying pass for a model loaded with or without repacked weights."""
    return EXACT_ROWS_REPACKED if repacked else EXACT_ROWS


def _decode(llm: Any, tokens: list[int], all_rows: bool) -> Any:
    """Feed `tokens` after the first `llm.n_tokens`; the logits of the last token, or of
    every token of the last chunk when `all_rows` (a draft fits one chunk)."""
    import numpy as np

    ctx, batch = llm._ctx, llm._batch
    ctx.kv_cache_seq_rm(-1, llm.n_tokens, -1)
    rows = 1
    for i in range(0, len(tokens), llm.n_batch):
        chunk = tokens[i:i + llm.n_batch]
        rows = len(chunk) if all_rows else 1
        batch.set_batch(batch=chunk, n_past=llm.n_tokens, logits_all=all_rows)
        ctx.decode(batch)
        llm.input_ids[llm.n_tokens:llm.n_tokens + len(chunk)] = chunk
        llm.n_tokens += len(chunk)
    return np.ctypeslib.as_array(ctx.get_logits(), shape=(rows, llm.n_vocab()))


class Penalties:
    """llama.cpp's penalties sampler, replayed on a row of logits so each drafted position
    is judged as the sampler would judge it there. Its window is the last `last_n`
    generated tokens: create_completion's sampler accepts sampled tokens only, not the
    prompt. Same float32 arithmetic and `<= 0` test as llama_sampler_penalties."""

    def __init__(self, last_n: int, repeat: float, freq: float, present: float) -> None:
        import numpy as np

        self.np = np
        self.last_n = last_n
        self.repeat, self.freq, self.present = (np.float32(x) for x in (repeat, freq, present))
        self.neutral = last_n == 0 or (repeat == 1.0 and freq == 0.0 and present == 0.0)

    def pick(self, row: Any, generated: list[int]) -> int:
        """The greedy token of `row` after the penalties over `generated`."""
        if self.neutral or not generated:
            return int(row.argmax())
        np = self.np
        ids, counts = np.unique(np.asarray(generated[-self.last_n:]), return_counts=True)
        vals = row[ids]
        vals = np.where(vals <= 0, vals * self.repeat, vals / self.repeat)
        vals = vals - (counts.astype(np.float32) * self.freq
                       + np.float32(1) * self.present)  # every id here has count > 0
        row = row.copy()
        row[ids] = vals
        return int(row.argmax())


def lookup_stream(llm: Any, tokens: list[int], *, max_tokens: int, stop: list[str],
                  penalties: Penalties | None = None, speculate: bool = True,
                  acceptance: Acceptance | None = None,
                  max_rows: int = EXACT_ROWS, history: list[int] | None = None,
                  ) -> Iterator[dict[str, Any]]:
    """create_completion(temperature=0)'s stream for `tokens`, drafting from the history;
    a verifying pass holds at most `max_rows` tokens (exact_rows). Each chunk with a token
    carries it ("token"); `history`: the reply's tokens before `tokens` ends (a reply
    resumed as its continuation: core.engines.llama_pause), which the penalties count."""
    import llama_cpp

    from core.parsing.stops import StopMatcher

    vocab = llm._model.vocab
    acceptance = acceptance or Acceptance()
    acceptance.on = speculate
    # Reuse the context's common prefix, keeping at least one token to feed.
    held = llm.input_ids[:llm.n_tokens].tolist()
    keep = 0
    while keep < min(len(held), len(tokens) - 1) and held[keep] == tokens[keep]:
        keep += 1
    llm.n_tokens = keep
    penalties = penalties or Penalties(0, 1.0, 0.0, 0.0)
    out: list[int] = list(history or ())  # the reply's tokens, which the penalties count
    ready = [penalties.pick(_decode(llm, tokens[keep:], False)[-1], out)]
    drafter = NgramDrafter(tokens) if speculate else None
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    stops = StopMatcher(tuple(stop))
    generated = 0
    while True:
        token = ready.pop(0)
        if llama_cpp.llama_vocab_is_eog(vocab, token):
            llm.n_tokens = len(tokens) + generated  # the end token itself is not kept
            text = stops.feed(decoder.decode(b"", final=True))[0]
            yield {"choices": [{"text": text + stops.finish(), "finish_reason": "stop"}]}
            return
        generated += 1
        out.append(token)
        llm.n_tokens = len(tokens) + generated - 1
        text, stopped = stops.feed(decoder.decode(llm.detokenize([token], special=False)))
        if stopped:
            yield {"choices": [{"text": text, "finish_reason": "stop", "token": token}]}
            return
        if generated >= max_tokens:
            tail = stops.feed(decoder.decode(b"", final=True))[0] + stops.finish(cut=True)
            yield {"choices": [{"text": text + tail, "finish_reason": "length",
                                "token": token}]}
            return
        yield {"choices": [{"text": text, "finish_reason": None, "token": token}]}
        if ready:
            continue
        draft: list[int] = []
        if drafter is not None and acceptance.on:
            drafter.extend([token])
            draft = drafter.draft(min(acceptance.k, max_rows - 1, max_tokens - generated))
            if not draft:
                acceptance.miss()
        if not draft:
            ready = [penalties.pick(_decode(llm, [token], False)[-1], out)]
            continue
        rows = _decode(llm, [token, *draft], True)
        predicted = [penalties.pick(rows[j], out + draft[:j]) for j in range(len(draft) + 1)]
        n = accepted(draft, predicted)
        acceptance.record(len(draft), n)
        llm.n_tokens -= len(draft) - n  # rejected drafts leave the context on the next pass
        ready = [*draft[:n], predicted[n]]
        drafter.extend(draft[:n])  # type: ignore[union-attr]
