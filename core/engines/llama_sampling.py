"""Sampling settings for llama.cpp: a request's SamplingParams as create_completion keywords.

llama.cpp samples natively (penalties, bias, seed, top-k/top-p/min-p in its sampler
chain), so this is a translation plus the checks for what it cannot do: its penalties
share one look-back window (penalty_last_n, read from Llama.last_n_tokens_size when the
sampler is built), and it keeps only the last position's logits, so it has no log-
probabilities to report unless the whole model was loaded with logits_all. Structured
output uses llama.cpp's own grammar sampler (a JSON schema converted to GBNF).
"""

from __future__ import annotations

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
    if sp.logprobs:
        raise Unsupported("logprobs are not available on the llama.cpp engine (it keeps only "
                          "the last token's logits); use an MLX model for log-probabilities.")
    penalty_window(sp, repetition_penalty)
    return {
        "seed": RANDOM_SEED if sp.seed is None else sp.seed % RANDOM_SEED,
        "presence_penalty": sp.presence_penalty,
        "frequency_penalty": sp.frequency_penalty,
        "logit_bias": sp.logit_bias_for(n_vocab) or None,
        "grammar": json_grammar(sp.json_schema) if sp.json_schema is not None else None,
    }


def json_grammar(schema: str) -> Any:
    """llama.cpp's own GBNF grammar for a JSON schema, enforced by its sampler chain."""
    from llama_cpp.llama_grammar import LlamaGrammar

    try:
        return LlamaGrammar.from_json_schema(schema, verbose=False)
    except Exception as exc:  # noqa: BLE001 - its converter raises whatever it meets
        raise ValueError(f"response_format: this JSON schema cannot be enforced: {exc}") from None
