"""GGUF -> MLX import: the bundled Gemma imports, runs, and agrees with llama.cpp."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.engines.gguf_import import GGUFImportError, import_gguf, main
from tests.fixtures.bundled_engines import bundled_mlx  # noqa: F401

# Two prompts (38 and 32 tokens), each position checked twice: its greedy token, and its
# whole logit row's correlation with llama.cpp's. Argmax agreement alone needed five
# prompts (~200 positions: one near-tied position moved it by more than a point); the
# correlation catches a wrong weight at every position, tie or not (0.9987 at the worst
# of ~200 positions in float32; a misread tensor or norm falls far below 0.99).
PROMPTS = [
    "The capital of France is Paris, and the capital of Germany is Berlin. Both cities are "
    "known for their museums, their long histories and their food; many visitors come every "
    "summer to see",
    "The three primary colours are red, yellow and blue. Mixing red and yellow gives orange, "
    "mixing yellow and blue gives green, and mixing blue and red gives",
]


@pytest.fixture(scope="module")
def gemma_gguf(bundled_gguf: Path) -> Path:
    """The bundled GGUF, assembled once per run (tests/conftest.py)."""
    return bundled_gguf


@pytest.fixture(scope="module")
def gemma_mlx(bundled_mlx: Path) -> Path:  # noqa: F811
    """Its import by import_gguf, made once per run and shared with the other files that
    run the import (tests/fixtures/bundled_engines.py): ~12 CPU-s each time."""
    return bundled_mlx


@pytest.mark.slow
def test_import_agrees_with_llamacpp_on_greedy_next_token(gemma_gguf, gemma_mlx):
    import mlx.core as mx
    from mlx_lm.utils import load

    from core.engines.llama_params import load_llama

    llm = load_llama(model_path=str(gemma_gguf), n_ctx=256, logits_all=True, verbose=False,
                     seed=0)
    model, _ = load(str(gemma_mlx))
    # Checked in float32: this compares the imported weights (names, layout, dequantised
    # values), not bf16 activations, whose rounding flips near-tied positions (against
    # llama-cpp-python 0.3.36's plain CPU kernels, themselves quantised: 96.3% in bf16,
    # 98.1% in float32 over five prompts).
    model.set_dtype(mx.float32)
    agree = total = 0
    for prompt in PROMPTS:
        tokens = llm.tokenize(prompt.encode(), add_bos=True)
        llm.reset()
        llm.eval(tokens)
        ref = np.asarray(llm.scores[: len(tokens)])
        ours = _logits(model, tokens)
        agree += int((ref.argmax(-1) == ours.argmax(-1)).sum())
        total += len(tokens)
        worst = min(np.corrcoef(r, o)[0, 1] for r, o in zip(ref, ours, strict=True))
        assert worst >= 0.99, f"a position's logits correlate {worst:.4f} with llama.cpp's"
    assert agree / total >= 0.95, f"{agree}/{total} positions agree"


def _logits(model, tokens: list[int]) -> np.ndarray:
    """The import's next-token logits at every position, in float32.

    Gemma 3 ties its output head to the token embeddings (the import writes no lm_head),
    so the logits are the final-normed hidden states times the embedding matrix, which is
    what mlx_lm's Model does (`embed_tokens.as_linear`). That one product is taken in
    numpy on the same weights (a view, no copy): MLX's CPU wheel multiplies through the
    reference BLAS, and this [~50 x 640] x [640 x 262k] product was ~60% of the test's
    CPU (8 of 13 CPU-s for a 61-token prompt; numpy's OpenBLAS takes 0.5)."""
    import mlx.core as mx

    assert "lm_head" not in model  # tied: the embeddings are the head
    hidden = model.model(mx.array(tokens)[None])[0]
    mx.eval(hidden)
    head = np.asarray(model.model.embed_tokens.weight)
    return np.asarray(hidden) @ head.T


@pytest.mark.slow
def test_imported_gemma_chats_through_the_engine(gemma_mlx):
    from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
    from core.engines.mlx import MlxEngine
    from core.events import Done, TextDelta

    eng = MlxEngine(ModelSpec(str(gemma_mlx), "mlx", options=(("warmup_batch_sizes", (1,)),)))
    # the bundled GGUF has no chat template, so neither has its import: a base model
    assert eng.info()["chat_template"] is None and eng.info()["base_model"] is True
    eng.submit(
        GenerationRequest(
            "g", ({"role": "user", "content": "Say hello."},), SamplingParams(temperature=0.0, max_tokens=3)
        )
    )
    events = []  # three tokens: "Hello! I" (the cost is the load and the prompt)
    while eng.has_work():
        for _, evs in eng.step():
            events += evs
    assert "".join(e.text for e in events if isinstance(e, TextDelta)).strip()
    assert isinstance(events[-1], Done)
    eng.close()


def test_unsupported_architecture_is_refused_clearly(tmp_path):
    import gguf

    path = tmp_path / "rwkv.gguf"
    w = gguf.GGUFWriter(str(path), "rwkv6")
    w.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GGUFImportError) as err:
        import_gguf(path, tmp_path / "out")
    assert err.value.code == "UNSUPPORTED"
    assert "'rwkv6'" in err.value.message and "gemma3, llama, qwen2, qwen3" in err.value.message
    assert main([str(path), "--out", str(tmp_path / "out")]) == 2


def test_not_a_gguf_is_model_corrupt(tmp_path):
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(GGUFImportError) as err:
        import_gguf(path, tmp_path / "out")
    assert err.value.code == "MODEL_CORRUPT"
