"""Sampling settings for llama.cpp: a request's SamplingParams as create_completion keywords.

llama.cpp samples natively (penalties, bias, seed, top-k/top-p/min-p in its sampler
chain), so this is a translation plus the checks for what it cannot do: its penalties
share one look-back window (penalty_last_n, read from Llama.last_n_tokens_size when the
sampler is built). Log-probabilities come from `logprob_stream`, which drives generation
token by token for the requests that ask for them. Structured
output uses llama.cpp's own grammar sampler (a JSON schema converted to GBNF).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from typing import Any

from core.engines.base import SamplingParams

# llama.cpp's "pick a random seed" value; its seeds are 32-bit.
RANDOM_SEED = 0xFFFFFFFF


class Unsupported(ValueError):
    """A setting llama.cpp cannot honour; the engine answers UNSUPPORTED with this sentence."""


def penalty_window(sp: SamplingParams, repetition_penalty: float) -> int:
    """The one look-back window of the active penalties (their common value)."""
    windows = {w for on, w in ((repetition_penalty != 1.0, sp.repetition_context_size),
                               (sp.presence_penalty != 0, sp.presence_context_size),
                               (sp.frequency_penalty != 0, sp.frequency_context_size)) if on}
    if len(windows) > 1:
        raise Unsupported("The llama.cpp engine applies one look-back window to all penalties; "
                          f"send the same context size for each (got {sorted(windows)}).")
    return windows.pop() if windows else sp.repetition_context_size


def completion_options(sp: SamplingParams, n_vocab: int, repetition_penalty: float) -> dict[str, Any]:
    """create_completion keywords for the settings beyond temperature/top-p/top-k/min-p.

    Raises Unsupported, or ValueError for a logit_bias id outside the vocabulary.
    """
    penalty_window(sp, repetition_penalty)
    return {
        "seed": RANDOM_SEED if sp.seed is None else sp.seed % RANDOM_SEED,
        "presence_penalty": sp.presence_penalty,
        "frequency_penalty": sp.frequency_penalty,
        "logit_bias": sp.logit_bias_for(n_vocab) or None,
        "grammar": json_grammar(sp.json_schema) if sp.json_schema is not None else None,
    }


def json_grammar(schema: str) -> Any:
    """llama.cpp's own GBNF grammar for a JSON schema, enforced by its sampler chain.

    llama-cpp-python's converter lets a string hold any character but a quote or a
    backslash: raw newlines and control characters too, which JSON forbids (the reply then
    fails to parse), and a newline inside a string let a base model's turn marker
    ("\nUser:") end the reply mid-JSON. Strings get llama.cpp's own character class."""
    from llama_cpp.llama_grammar import LlamaGrammar, json_schema_to_gbnf

    try:
        gbnf = _JSON_CHAR.sub(lambda m: m.group(1) + _STRICT_CHAR + " |", json_schema_to_gbnf(schema))
        return LlamaGrammar.from_string(gbnf, verbose=False)
    except Exception as exc:  # noqa: BLE001 - its converter raises whatever it meets
        raise ValueError(f"response_format: this JSON schema cannot be enforced: {exc}") from None


# The string-character rule of llama-cpp-python's JSON grammar (see json_grammar).
_JSON_CHAR = re.compile(r'^(char\S* ::= )\[\^"\\\\\] \|', re.M)
_STRICT_CHAR = r'[^"\\\x7F\x00-\x1F]'  # GBNF: no quote, backslash, DEL or control character


class _LogprobRecorder:
    """A llama.cpp logits processor that adds the logit bias and keeps the log-softmax of
    what it saw. It runs first in the sampler chain, on every token of the vocabulary in id
    order, once per sampled token; `generate` yields that token right after."""

    def __init__(self, bias: dict[int, float] | None) -> None:
        import numpy as np

        self._np = np
        self._bias = (np.array(list(bias), dtype=np.intp),
                      np.array(list(bias.values()), dtype=np.float32)) if bias else None
        self.logprobs: Any = None

    def __call__(self, _input_ids: Any, scores: Any) -> Any:
        np = self._np
        if self._bias is not None:
            scores = scores.copy()
            scores[self._bias[0]] += self._bias[1]
        top = float(scores.max())
        self.logprobs = scores - (top + float(np.log(np.exp(scores - top).sum())))
        return scores


def logprob_stream(llm: Any, tokens: list[int], *, top: int, max_tokens: int,
                   stop: list[str], sampling: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """create_completion's stream, driven token by token so each chunk can carry the
    sampled token's log-probability (in OpenAI's entry shape, under "entry").

    Why not create_completion(logprobs=...): llama-cpp-python refuses it unless the model
    was loaded with logits_all, which keeps every position's logits (context x vocabulary
    floats: gigabytes for a 262k vocabulary). This keeps one row, for these requests only.
    """
    import llama_cpp
    import numpy as np

    from core.parsing.stops import StopMatcher

    options = dict(sampling)
    seed = options.pop("seed")
    recorder = _LogprobRecorder(options.pop("logit_bias", None))
    processors = [recorder, *(options.pop("logits_processor", None) or ())]  # tool calls
    llm.set_seed(seed)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    stops = StopMatcher(tuple(stop))
    vocab = llm._model.vocab
    texts: dict[int, tuple[str, list[int]]] = {}

    def spelled(token: int) -> tuple[str, list[int]]:
        if token not in texts:
            raw = llm.detokenize([token], special=False)
            texts[token] = (raw.decode("utf-8", "replace"), list(raw))
        return texts[token]

    generated = 0
    for token in llm.generate(tokens, logits_processor=processors, **options):
        logprobs = recorder.logprobs
        if llama_cpp.llama_vocab_is_eog(vocab, token):
            break
        generated += 1
        text, raw = spelled(token)
        alternatives = []
        if top:
            ids = np.argpartition(-logprobs, top - 1)[:top]
            ids = ids[np.argsort(-logprobs[ids])]
            alternatives = [{"token": t, "logprob": float(logprobs[i]), "bytes": b}
                            for i in ids.tolist() for t, b in (spelled(i),)]
        entry = {"token": text, "logprob": float(logprobs[token]), "bytes": raw,
                 "top_logprobs": alternatives}
        shown, stopped = stops.feed(decoder.decode(bytes(raw)))
        done = stopped or generated >= max_tokens
        reason = "stop" if stopped else "length" if done else None
        yield {"choices": [{"text": shown, "finish_reason": reason, "entry": entry}]}
        if done:
            return
    yield {"choices": [{"text": stops.feed(decoder.decode(b"", final=True))[0] + stops.finish(),
                        "finish_reason": "stop"}]}
