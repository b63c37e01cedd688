"""The batched grammar mask (core.engines.grammar.mask_rows) against the per-row processor
and a plain numpy reading of llguidance's packed bitmask, on a real trained tokenizer
whose vocabulary (500) is not a multiple of the 32 tokens a bitmask word holds."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.utils import load_tokenizer

from core.engines import grammar
from core.engines.grammar import Grammars, _masked, mask_rows
from tests.fixtures.mlx_models import write_tokenizer

VOCAB = 500
SCHEMA = json.dumps({"type": "object", "properties": {
    "name": {"type": "string"}, "n": {"type": "integer"}}, "required": ["name", "n"],
    "additionalProperties": False})
REPLY = '{"name":"fox jumps","n":42}'


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    folder: Path = tmp_path_factory.mktemp("tok500")
    assert write_tokenizer(folder, VOCAB) == VOCAB
    return load_tokenizer(folder)


def reference(logits: np.ndarray, words: np.ndarray) -> np.ndarray:
    bits = np.unpackbits(words.view(np.uint8), axis=1, bitorder="little")[:, : logits.shape[1]]
    return np.where(bits.astype(bool), logits, -np.inf)


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
def test_the_fused_mask_reads_llguidances_packed_bits(dtype):
    rng = np.random.default_rng(0)
    for rows in (1, 3):
        words = rng.integers(-(2**31), 2**31 - 1, size=(rows, (VOCAB + 31) // 32), dtype=np.int32)
        logits = mx.array(rng.normal(size=(rows, VOCAB)).astype(np.float32)).astype(dtype)
        out = _masked(logits, mx.array(words))
        assert out.dtype == dtype and out.shape == (rows, VOCAB)
        want = reference(np.array(logits.astype(mx.float32)), words)
        assert np.array_equal(np.array(out.astype(mx.float32)), want)


@pytest.mark.parametrize("pool", [False, True], ids=["here", "llguidance-pool"])
def test_batched_masks_equal_the_per_row_processor_and_leave_free_rows_alone(
        tokenizer, monkeypatch, pool):
    # The pool fills the masks on a machine of 4+ cores, the caller's thread on fewer.
    import llguidance

    monkeypatch.setattr(grammar, "_EXECUTOR", [llguidance.LLExecutor(2) if pool else None])
    grammars = Grammars(tokenizer, VOCAB, [tokenizer.eos_token_id])
    ids = tokenizer.encode(REPLY, add_special_tokens=False) + [tokenizer.eos_token_id]
    batched = {0: grammars.processor(SCHEMA), 2: grammars.processor(SCHEMA)}
    alone = grammars.processor(SCHEMA)
    rng = np.random.default_rng(1)
    context = mx.array([7])  # the prompt's last token: the first call consumes nothing
    masked_somewhere = False
    for step, token in enumerate(ids):
        first, free = rng.normal(size=(2, VOCAB)).astype(np.float32)
        logits = mx.array(np.stack([first, free, first]))  # rows 0 and 2 alike
        inputs = [ids[step - 1] if step else 7] * 3
        out = np.array(mask_rows(logits, sorted(batched.items()), inputs))
        want = np.array(alone(context, logits[0:1]))[0]
        assert np.array_equal(out[0], want) and np.array_equal(out[2], want)
        assert np.array_equal(out[1], np.array(logits[1]))  # no grammar on row 1
        assert np.isfinite(want[token])  # the valid reply's next token is allowed
        masked_somewhere |= bool(np.isinf(want).any())
        context = mx.array([token])
    assert masked_somewhere
    for proc in (*batched.values(), alone):
        assert not proc.matcher.is_error() and proc.matcher.is_stopped()


def test_the_llguidance_tokenizer_is_built_without_copying_the_vocabulary(tokenizer, monkeypatch):
    """llguidance.hf.from_tokenizer copies the whole tokenizer first (~1.6 CPU-s of ~5 for
    a 262k vocabulary on a 2-core CPU, at every model's first grammar); with no padding or
    truncation set there is nothing for the copy to clear, so none is made, and the
    grammar it drives allows the same tokens."""
    import llguidance
    import llguidance.hf

    reference_ll = llguidance.hf.from_tokenizer(tokenizer._tokenizer, n_vocab=VOCAB,
                                                eos_token=[tokenizer.eos_token_id])

    def copy_refused_mock(obj):
        raise AssertionError("the tokenizer was copied")

    monkeypatch.setattr(llguidance.hf, "copy", copy_refused_mock)
    ll = Grammars(tokenizer, VOCAB, [tokenizer.eos_token_id]).ll_tokenizer("test")
    grammar_text = llguidance.LLMatcher.grammar_from_json_schema(SCHEMA)
    masks = []
    for each in (reference_ll, ll):
        matcher = llguidance.LLMatcher(each, grammar_text)
        assert matcher.consume_tokens(each.tokenize_str('{"name":"fox')), matcher.get_error()
        masks.append(bytes(matcher.compute_bitmask()))
    assert ll.vocab_size == VOCAB and masks[0] == masks[1]
