"""MlxEngine against raw mlx_lm BatchGenerator and generate_step, same model, same run.

Prints one JSON object. Per batch size (1, 4, 16, 64): tokens/s of both and
`tokens_per_s_ratio` (ours/raw, best run of each, higher is better) with
`paired_tokens_per_s_ratio` (median of back-to-back raw/ours pairs: the GPU machine's
speed drifts by +-20% between runs, which a best-of comparison does not cancel), TTFT
p50/p95 of both, and `max_step_over_median` (slowest engine step after warm-up over the
median step). Both clocks stop at the last token; `idle_after_ms` is what the engine then
does while idle before it has no work (caches saved for the next turn, the disk cache's
writes and next-turn prefills), which raw BatchGenerator never does and no token waits
for (issue 49: timed inside the run it made B=4 look 20-30% slower). Per model: `batch1_vs_generate_step_ratio` (our single-stream decode tok/s
over generate_step's; `_paired_ratio` likewise) and `cached_ttft_fraction` (median
second-turn TTFT with a ~2,000-token cached history over the median cold first-turn
TTFT, three conversations; lower is better), split into admission and first step.

Both sides start from the same chat messages inside their timed window: the raw side
renders and tokenises them with the tokenizer's chat template, as any user of
BatchGenerator must, so the ratio compares serving, not who got pre-tokenised input.

    python bench/engine.py --quick                  # tiny qwen3 on CPU, under 2 minutes
    python bench/engine.py --shape qwen3-0.6b --variants bf16,4bit   # GPU machine
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import mlx.core as mx  # noqa: E402

if "--quick" in sys.argv:  # before mlx_lm makes its generation stream on the default device
    mx.set_default_device(mx.cpu)  # (on a GPU machine: the GPU, which CPU arrays cannot use)
from mlx_lm.generate import BatchGenerator, generate_step  # noqa: E402

from bench.stats import pct  # noqa: E402
from core.engines.base import GenerationRequest, ModelSpec, SamplingParams  # noqa: E402
from core.engines.mlx import MlxEngine  # noqa: E402
from core.events import Usage  # noqa: E402
from tests.fixtures.mlx_models import QWEN3_0_6B_SHAPE, QWEN3_SHAPE, build_model_dir  # noqa: E402

_WORDS = "the quick brown fox jumps over a lazy dog while local models count to ten".split()


def _text(n_words: int, salt: int) -> str:
    return " ".join(_WORDS[(i * 7 + salt) % len(_WORDS)] for i in range(n_words))


def _requests(batch: int, words: int, max_tokens: int, tag: str) -> list[GenerationRequest]:
    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    return [
        GenerationRequest(f"{tag}-{i}", ({"role": "user", "content": f"{i}: " + _text(words, i)},), sp)
        for i in range(batch)
    ]


_GEN2 = [0]  # full collections seen (gc.callbacks), to tell a collector pause from ours


def _count_gen2(phase: str, info: dict) -> None:
    if phase == "start" and info.get("generation") == 2:
        _GEN2[0] += 1


def _settled() -> None:
    """Both sides start a timed run with the previous run's garbage collected and the
    GPU idle, so neither pays for the other's leftovers mid-run."""
    gc.collect()
    mx.synchronize()


def run_ours(eng: MlxEngine, reqs: list[GenerationRequest]) -> dict:
    eng._prefix.clear()
    _settled()
    gen2 = _GEN2[0]
    t0 = time.perf_counter()
    for r in reqs:
        eng.submit(r)
    usages: list[Usage] = []
    steps: list[float] = []
    decode_steps: list[float] = []
    started: set[str] = set()
    worst = (0.0, 0, 0)  # (seconds, step index, requests decoding) of the slowest decode step
    # The clock stops at the last request's last token, as raw's does: what the engine
    # does after that while idle (caches saved for the next turn, the disk cache's writes
    # and next-turn prefills) delays no token; it is timed apart (idle_after_ms).
    while eng.has_work() and len(usages) < len(reqs):
        s = time.perf_counter()
        out = eng.step()
        dt = time.perf_counter() - s
        steps.append(dt)
        if len(started) == len(reqs):  # every request is decoding: steady state
            decode_steps.append(dt)
            if dt > worst[0]:
                worst = (dt, len(steps) - 1, len(eng._batch) + (eng._single is not None))
        for rid, events in out:
            started.add(rid)
            usages += [e for e in events if isinstance(e, Usage)]
    total = time.perf_counter() - t0
    idle = time.perf_counter()
    while eng.has_work():
        eng.step()
    idle_ms = (time.perf_counter() - idle) * 1000
    tokens = sum(u.completion_tokens for u in usages)
    med = statistics.median(decode_steps or steps)
    return {
        "tokens": tokens,
        "tokens_per_s": tokens / total,
        "ttft_p50_ms": pct([u.ttft_ms for u in usages], 0.5),
        "ttft_p95_ms": pct([u.ttft_ms for u in usages], 0.95),
        "max_step_over_median": max(decode_steps or steps) / med if med else 0.0,
        "max_step_over_median_with_admission": max(steps) / med if med else 0.0,
        "decode_tps_p50": pct([u.decode_tps for u in usages], 0.5),
        "median_step_ms": med * 1000,
        "max_step_ms": worst[0] * 1000,
        "max_step_index": worst[1],
        "max_step_active": worst[2],
        "full_gc_during_run": _GEN2[0] - gen2,
        "idle_after_ms": idle_ms,
    }


def run_raw(model, tokenizer, eos: set[int], reqs: list[GenerationRequest],
            max_tokens: int) -> dict:
    bg = BatchGenerator(
        model,
        stop_tokens=[[t] for t in sorted(eos)],
        completion_batch_size=max(len(reqs), 8),
        prefill_batch_size=8,
    )
    _settled()
    t0 = time.perf_counter()
    prompts = []
    for r in reqs:
        text = tokenizer.apply_chat_template(
            [dict(m) for m in r.messages], tokenize=False, add_generation_prompt=True
        )
        prompts.append(tokenizer.encode(text, add_special_tokens=False))
    uids = bg.insert(prompts, max_tokens=[max_tokens] * len(prompts))
    first: dict[int, float] = {}
    tokens = done = 0
    while done < len(uids):
        _, responses = bg.next()
        now = time.perf_counter()
        for r in responses:
            tokens += 1
            first.setdefault(r.uid, now - t0)
            done += r.finish_reason is not None
    total = time.perf_counter() - t0
    bg.close()
    ttfts = [v * 1000 for v in first.values()]
    return {
        "tokens": tokens,
        "tokens_per_s": tokens / total,
        "ttft_p50_ms": pct(ttfts, 0.5),
        "ttft_p95_ms": pct(ttfts, 0.95),
    }


def generate_step_tps(model, prompt: list[int], max_tokens: int) -> float:
    _settled()
    times = []
    for _, _ in generate_step(mx.array(prompt), model, max_tokens=max_tokens):
        times.append(time.perf_counter())
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0


def cached_ttft(eng: MlxEngine, history_words: int) -> dict:
    def turn(messages: tuple, rid: str) -> tuple[Usage, str, float, float]:
        """(usage, reply, ms to render and tokenise, ms of the first step: the cache
        lookup, the new tokens' pass and the first token read back)."""
        # A person takes longer than one decode step to reply: let the work the previous
        # turn left queued finish, so neither TTFT includes it.
        mx.synchronize()
        t = time.perf_counter()
        eng.submit(GenerationRequest(rid, messages, SamplingParams(temperature=0.0, max_tokens=8)))
        admit_ms = (time.perf_counter() - t) * 1000
        text, usage, first_step_ms = "", None, None
        while eng.has_work():
            t = time.perf_counter()
            stepped = eng.step()
            if first_step_ms is None:
                first_step_ms = (time.perf_counter() - t) * 1000
            for _, events in stepped:
                for e in events:
                    if isinstance(e, Usage):
                        usage = e
                    elif hasattr(e, "text"):
                        text += e.text
        assert usage is not None and first_step_ms is not None
        return usage, text, admit_ms, first_step_ms

    colds: list[float] = []
    cacheds: list[float] = []
    cached_admit: list[float] = []
    cached_first_step: list[float] = []
    for salt in (96, 97, 98, 99):  # the first pair meets the long-prefill shapes: untimed
        eng._prefix.clear()
        first = ({"role": "user", "content": f"{salt} " + _text(history_words, salt)},)
        u1, reply, _, _ = turn(first, f"turn-1-{salt}")
        second = first + (
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "and then?"},
        )
        u2, _, admit_ms, first_step_ms = turn(second, f"turn-2-{salt}")
        if salt != 96:
            colds.append(u1.ttft_ms)
            cacheds.append(u2.ttft_ms)
            cached_admit.append(admit_ms)
            cached_first_step.append(first_step_ms)
    cold, cached = statistics.median(colds), statistics.median(cacheds)
    return {
        "history_tokens": u1.prompt_tokens,
        "cold_ttft_ms": cold,
        "cached_ttft_ms": cached,
        "cached_tokens": u2.cached_tokens,
        "cached_ttft_fraction": cached / cold if cold else 0.0,
        "cold_ttft_runs_ms": colds,
        "cached_ttft_runs_ms": cacheds,
        # Where a cached turn's time goes: rendering and tokenising the history, then
        # the one step that runs the new tokens' pass.
        "cached_admit_ms": cached_admit,
        "cached_first_step_ms": cached_first_step,
    }


def _rounded(d: dict) -> dict:
    return {k: [round(x, 2) for x in v] if isinstance(v, list) else round(v, 3) for k, v in d.items()}


def bench_model(path: Path, label: str, batches: list[int], words: int, max_tokens: int,
                repeats: int, history_words: int) -> dict:
    spec = ModelSpec(str(path), "mlx", context_size=8192,
                     options=(("max_concurrency", max(batches)),))
    t = time.perf_counter()
    eng = MlxEngine(spec)
    load_s = time.perf_counter() - t
    result: dict = {"model": label, "load_and_warmup_s": round(load_s, 2), "batches": {}}
    for b in batches:
        reqs = _requests(b, words, max_tokens, f"b{b}")
        tok = eng._tokenizer
        run_raw(eng._model, tok, eng._eos, reqs, 4)  # first meeting of these shapes: untimed
        run_ours(eng, _requests(b, words, 4, f"w{b}"))
        best_raw, best_ours = None, None
        paired: list[float] = []
        for i in range(repeats):
            raw = run_raw(eng._model, tok, eng._eos, reqs, max_tokens)
            ours = run_ours(eng, _requests(b, words, max_tokens, f"b{b}r{i}"))
            paired.append(ours["tokens_per_s"] / raw["tokens_per_s"])
            if best_raw is None or raw["tokens_per_s"] > best_raw["tokens_per_s"]:
                best_raw = raw
            if best_ours is None or ours["tokens_per_s"] > best_ours["tokens_per_s"]:
                best_ours = ours
        result["batches"][str(b)] = {
            "tokens_per_s_ratio": round(best_ours["tokens_per_s"] / best_raw["tokens_per_s"], 3),
            # Median over back-to-back (raw, ours) pairs: robust to a machine whose speed
            # drifts between runs (seen on the GPU machine: +-20% within one process).
            "paired_tokens_per_s_ratio": round(statistics.median(paired), 3),
            "paired_ratios": [round(r, 3) for r in paired],
            "ours": {k: round(v, 3) for k, v in best_ours.items()},
            "raw": {k: round(v, 3) for k, v in best_raw.items()},
        }
    prompt = eng.render_prompt(_requests(1, words, max_tokens, "gs")[0])
    gs_runs, ours_runs = [], []
    for i in range(repeats + 2):  # alternate, so drift in the machine hits both alike
        gs_runs.append(generate_step_tps(eng._model, prompt, max_tokens))
        ours_runs.append(run_ours(eng, _requests(1, words, max_tokens, f"one{i}"))["decode_tps_p50"])
    gs, ours1 = max(gs_runs), max(ours_runs)
    result["batch1_runs"] = {"generate_step": [round(v, 1) for v in gs_runs],
                             "ours": [round(v, 1) for v in ours_runs]}
    result["generate_step_decode_tps"] = round(gs, 2)
    result["ours_batch1_decode_tps"] = round(ours1, 2)
    result["batch1_vs_generate_step_ratio"] = round(ours1 / gs, 3) if gs else 0.0
    result["batch1_vs_generate_step_paired_ratio"] = round(
        statistics.median(o / g for o, g in zip(ours_runs, gs_runs, strict=True) if g), 3)
    result["cached_turn"] = _rounded(cached_ttft(eng, history_words))
    result["cached_ttft_fraction"] = result["cached_turn"]["cached_ttft_fraction"]
    result["max_step_over_median"] = max(
        v["ours"]["max_step_over_median"] for v in result["batches"].values()
    )
    eng.close()
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny model on CPU, < 2 minutes")
    ap.add_argument("--shape", default="qwen3-0.6b", choices=("qwen3-0.6b", "tiny"))
    ap.add_argument("--variants", default="bf16,4bit")
    ap.add_argument("--batches", default="1,4,16,64")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None, help="also write the JSON here")
    args = ap.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    if args.quick:
        mx.set_default_device(mx.cpu)
        shape, variants, max_tokens, repeats, words, history = QWEN3_SHAPE, ["float32"], 48, 5, 12, 1400
    else:
        shape = QWEN3_0_6B_SHAPE if args.shape == "qwen3-0.6b" else QWEN3_SHAPE
        variants = args.variants.split(",")
        max_tokens, repeats, words, history = args.max_tokens, args.repeats, 40, 1400
    report: dict = {
        "bench": "engine",
        "device": str(mx.default_device()),
        "mlx": mx.__version__,
        "shape": "tiny-qwen3" if shape is QWEN3_SHAPE else "qwen3-0.6b (random weights)",
        "batches": batches,
        "max_tokens": max_tokens,
        "runs": [],
    }
    gc.callbacks.append(_count_gen2)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["LLMDECK_HOME"] = str(Path(tmp) / "home")  # its disk cache, not the person's
        for v in variants:
            bits = 4 if v == "4bit" else 8 if v == "8bit" else None
            dtype = "bfloat16" if v in ("bf16", "4bit", "8bit") else v
            path = build_model_dir(Path(tmp) / v, shape, dtype=dtype, quantize_bits=bits)
            report["runs"].append(bench_model(path, v, batches, words, max_tokens, repeats, history))
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
