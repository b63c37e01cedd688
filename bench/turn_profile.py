"""Where a chat turn's time to first token goes inside the worker, against raw mlx_lm.

Prints one JSON object. For prompts of many lengths (each length met twice, with other
words the second time, so a per-shape first-time cost shows as first-minus-again) and for
the turns of a conversation whose history grows past 1,000 tokens, it times MlxEngine's
stages — admission (chat template, tokenising, cached-prefix lookup), prefix-cache fetch,
prefill up to the first token — and the same prompts through raw mlx_lm: generate_step
over a kept prompt cache (what mlx_lm.server's single path does) and BatchGenerator (its
batched path). `*_vs_raw` is ours over raw (lower is better).

    python bench/turn_profile.py --quick          # tiny random qwen3 on the CPU
    python bench/turn_profile.py                  # Qwen3-0.6B shape, bf16, on the GPU
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

_WORDS = ("the quick brown fox jumps over a lazy dog while local models count to ten and "
          "a conversation has a user an assistant").split()


_ONE_TOKEN: list[str] = list(_WORDS)


def one_token_words(tokenizer: Any) -> None:
    """Keep the words that are one token each (with their space): then n words are n
    tokens whatever their order, and a length can be met again with other words."""
    global _ONE_TOKEN
    _ONE_TOKEN = [w for w in dict.fromkeys(_WORDS) if len(tokenizer.encode(" " + w)) == 1]


def text_of(n: int, salt: int) -> str:
    pool = _ONE_TOKEN
    return "go " + " ".join(pool[(i * 5 + salt * 11 + i * i * salt) % len(pool)] for i in range(n))


class Timed:
    """Wraps engine internals to time them; the GPU is synchronised at stage ends."""

    def __init__(self, engine: Any) -> None:
        import mlx.core as mx

        self.mx = mx
        self.engine = engine
        self.marks: dict[str, float] = {}
        fetch = engine._prefix.fetch
        schedule = engine._schedule

        def timed_fetch(prompt: Any) -> Any:
            t = time.perf_counter()
            out = fetch(prompt)
            self.marks["fetch_ms"] = (time.perf_counter() - t) * 1000
            return out

        def timed_schedule(out: Any) -> Any:
            t = time.perf_counter()
            schedule(out)
            mx.synchronize()
            self.marks["schedule_ms"] = (time.perf_counter() - t) * 1000

        engine._prefix.fetch = timed_fetch
        engine._schedule = timed_schedule

    def turn(self, messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
        from core.engines.base import GenerationRequest, SamplingParams
        from core.events import TextDelta, Usage

        eng = self.engine
        self.marks = {}
        t0 = time.perf_counter()
        eng.submit(GenerationRequest(f"p-{time.perf_counter_ns()}", tuple(messages),
                                     SamplingParams(temperature=0.0, max_tokens=max_tokens)))
        admit = (time.perf_counter() - t0) * 1000
        first = None
        text, usage = [], None
        while eng.has_work():
            for _, events in eng.step():
                for e in events:
                    if isinstance(e, TextDelta):
                        if first is None:
                            first = (time.perf_counter() - t0) * 1000
                        text.append(e.text)
                    elif isinstance(e, Usage):
                        usage = e
        return {"admit_ms": admit, **self.marks, "first_token_ms": first or 0.0,
                "engine_ttft_ms": usage.ttft_ms, "prompt": usage.prompt_tokens,
                "cached": usage.cached_tokens, "text": "".join(text)}


def raw_generate_step(model: Any, tokenizer: Any, prompt: list[int], cache: Any,
                      max_tokens: int) -> tuple[float, list[int]]:
    """TTFT of mlx_lm's generate_step over `cache` (which it extends); the tokens made."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    t0 = time.perf_counter()
    ttft = 0.0
    out = []
    for i, (tok, _) in enumerate(generate_step(mx.array(prompt), model, prompt_cache=cache,
                                               max_tokens=max_tokens)):
        if i == 0:
            ttft = (time.perf_counter() - t0) * 1000
        out.append(int(tok))
    return ttft, out


def raw_batch(model: Any, prompt: list[int], max_tokens: int) -> float:
    """TTFT of a lone prompt through BatchGenerator (mlx_lm.server's batched path)."""
    from mlx_lm.generate import BatchGenerator

    bg = BatchGenerator(model, stop_tokens=[], completion_batch_size=8, prefill_batch_size=8)
    t0 = time.perf_counter()
    bg.insert([prompt], max_tokens=[max_tokens])
    ttft = 0.0
    while True:
        _, gen = bg.next()
        if gen:
            ttft = (time.perf_counter() - t0) * 1000
            break
    bg.close()
    return ttft


def shape_costs(model: Any) -> dict[str, list[float]]:
    """Raw MLX: ms of one forward pass (to the last position's logits) over a 1,500-token
    cache, for new-token counts and cache lengths met for the first time and again. A
    pass that is slow only the first time it meets a shape is paying for compilation."""
    import copy

    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    base = make_prompt_cache(model)
    model(mx.array([[5 + i % 50 for i in range(1500)]]), cache=base)
    mx.eval([c.state for c in base])

    def one(n: int, extra: int = 0) -> float:
        cache = copy.deepcopy(base)
        if extra:
            model(mx.array([[7] * extra]), cache=cache)
        mx.eval([c.state for c in cache])
        mx.synchronize()
        t = time.perf_counter()
        logits = model(mx.array([[9 + i % 40 for i in range(n)]]), cache=cache)[:, -1, :]
        mx.eval(mx.argmax(logits, axis=-1))
        return round((time.perf_counter() - t) * 1000, 2)

    out: dict[str, list[float]] = {}
    for n in (1, 20, 37, 64, 130, 300):
        out[f"new_{n}_x3"] = [one(n) for _ in range(3)]
    out["new_20_cache_plus_1_to_6"] = [one(20, k) for k in range(1, 7)]
    out["new_20_cache_plus_1_to_6_again"] = [one(20, k) for k in range(1, 7)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--bits", type=int, default=0)
    parser.add_argument("--out")
    args = parser.parse_args()
    import mlx.core as mx

    if args.quick:
        mx.set_default_device(mx.cpu)
    from mlx_lm.models.cache import make_prompt_cache
    from mlx_lm.utils import load

    from core.engines.base import ModelSpec
    from core.engines.mlx import MlxEngine
    from tests.fixtures.mlx_models import QWEN3_0_6B_SHAPE, QWEN3_SHAPE, build_model_dir

    work = Path(tempfile.mkdtemp(prefix="llmdeck-turn-profile-"))
    # An own output head, as bench/chat.py uses (a tied random head echoes newlines).
    shape = QWEN3_SHAPE if args.quick else dict(QWEN3_0_6B_SHAPE, tie_word_embeddings=False)
    dtype = "float32" if args.quick else "bfloat16"
    model_dir = build_model_dir(work / "model", shape, dtype=dtype, quantize_bits=args.bits or None)
    t = time.perf_counter()
    engine = MlxEngine(ModelSpec(str(model_dir), "mlx", context_size=8192,
                                 options=(("max_concurrency", 32),)))
    load_s = time.perf_counter() - t
    timed = Timed(engine)
    model, tokenizer = load(str(model_dir))
    one_token_words(tokenizer)
    result: dict[str, Any] = {"bench": "turn_profile", "device": str(mx.default_device()),
                              "model": f"{shape['model_type']} hidden {shape['hidden_size']} "
                                       f"x{shape['num_hidden_layers']} {dtype}"
                                       + (f" {args.bits}-bit" if args.bits else ""),
                              "engine_load_and_warmup_s": round(load_s, 1)}

    # 1. Fresh prompts of many lengths, each length twice (other words the second time).
    lengths = [12, 20, 27, 45, 70, 130, 260, 540, 1100, 1700]
    fresh = []
    for n in lengths:
        for again in (0, 1):
            msgs = [{"role": "user", "content": text_of(n, n * 3 + again)}]
            ours = timed.turn(msgs, 4)
            ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True)
            raw, _ = raw_generate_step(model, tokenizer, ids, make_prompt_cache(model), 4)
            batch = raw_batch(model, ids, 4)
            fresh.append({"words": n, "again": again, "prompt": ours["prompt"],
                          "ours_ms": round(ours["first_token_ms"], 1),
                          "ours_admit_ms": round(ours["admit_ms"], 2),
                          "ours_schedule_ms": round(ours.get("schedule_ms", 0), 1),
                          "raw_generate_step_ms": round(raw, 1), "raw_batch_ms": round(batch, 1)})
    result["fresh"] = fresh

    # 2. A conversation: history past 1,000 tokens, new turns of varied length.
    system = {"role": "system", "content": "You are helpful. " + text_of(1100, 7)}
    msgs: list[dict[str, str]] = [system]
    raw_cache = make_prompt_cache(model)
    raw_ids: list[int] = []
    turns = []
    for t, (n, reply) in enumerate(zip([15, 60, 8, 120, 30, 200, 12, 45],
                                       [40, 90, 20, 60, 120, 30, 80, 50], strict=True)):
        msgs.append({"role": "user", "content": f"turn {t}: " + text_of(n, 100 + t)})
        ours = timed.turn(msgs, reply)
        # Raw mlx_lm over a kept cache: only the tokens past the cache are fed.
        ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True)
        common = 0
        for a, b in zip(raw_ids, ids, strict=False):
            if a != b:
                break
            common += 1
        if common < len(raw_ids):  # re-tokenised history diverged: trim like the peer does
            for c in raw_cache:
                c.trim(len(raw_ids) - common)
            raw_ids = raw_ids[:common]
        if common == len(ids):
            common -= 1
            for c in raw_cache:
                c.trim(1)
            raw_ids = raw_ids[:-1]
        raw, made = raw_generate_step(model, tokenizer, ids[common:], raw_cache, reply)
        raw_ids = ids + made[:-1]
        turns.append({"turn": t, "prompt": ours["prompt"], "cached": ours["cached"],
                      "new_tokens": ours["prompt"] - ours["cached"],
                      "ours_ms": round(ours["first_token_ms"], 1),
                      "ours_admit_ms": round(ours["admit_ms"], 2),
                      "ours_fetch_ms": round(ours.get("fetch_ms", 0), 2),
                      "ours_schedule_ms": round(ours.get("schedule_ms", 0), 1),
                      "raw_cached": common, "raw_generate_step_ms": round(raw, 1)})
        msgs.append({"role": "assistant", "content": ours["text"]})
    result["conversation"] = turns

    result["shapes"] = shape_costs(model)

    def med(rows: list[dict[str, Any]], key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 1)

    first = [r for r in fresh if not r["again"]]
    again = [r for r in fresh if r["again"]]
    later = turns[1:]
    result["summary"] = {
        "fresh_first_ours_p50_ms": med(first, "ours_ms"),
        "fresh_again_ours_p50_ms": med(again, "ours_ms"),
        "fresh_first_raw_p50_ms": med(first, "raw_generate_step_ms"),
        "fresh_again_raw_p50_ms": med(again, "raw_generate_step_ms"),
        "fresh_again_batch_p50_ms": med(again, "raw_batch_ms"),
        "later_turn_ours_p50_ms": med(later, "ours_ms"),
        "later_turn_raw_p50_ms": med(later, "raw_generate_step_ms"),
        "later_turn_vs_raw": round(med(later, "ours_ms") / med(later, "raw_generate_step_ms"), 3),
        "turn1_ours_ms": turns[0]["ours_ms"],
    }
    engine.close()
    text = json.dumps(result)
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
