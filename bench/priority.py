"""The person's turn first: the app's time to first token with 16 API streams running.

Prints one JSON object. One pool, the bundled Gemma GGUF in two llama.cpp workers (as
the app and `serve` share it). The app's turn (an interactive request, as the Runtime
marks a person's turn) is timed from send to first token:
- `app_ttft_ms_idle`: nothing else running;
- `app_ttft_ms_api16`: 16 API streams sent just before it (each `--api-tokens` long);
- `app_ttft_ms_api16_fifo`: the same, the turn not marked interactive (first come, first
  served: what the pool did before issue 45).
`app_ttft_slowdown` = api16 / idle (lower is better; the issue's goal is <= 1.5;
`app_ttft_slowdown_paired`: the median of each round's own ratio) and
`app_ttft_priority_ratio` = fifo / api16 (ours over theirs: higher is better). Medians
of `--rounds` rounds, each round measuring all three (paired: the same load on the box).
llama.cpp runs one sequence per worker: the person's turn sets the running API reply
aside at its next token (core.engines.turn_order), and once a person has sent a turn one
replica is kept for the person's turns while the others hold, their step in flight cut
short (core.workers.turn_hold, core.engines.llama_abort), so the "fifo" app
request, not interactive, queues behind the 16 on the API replicas.

The app's turn is what the app sends for a typed question: the Runtime's request (no
system prompt by default) rendered by the engine; the bundled Gemma is a base model, so
that is its transcript (core.engines.base_prompt: a preamble and three example
exchanges, ~120 tokens) and the question, 131 tokens in all. As in the app, the kept
replica's context already holds the person's last turn, so the shared transcript is
reused and only the question is prefilled (`app_prompt_tokens`, `app_cached_tokens`
say so). `--prompt-tokens N` makes the question longer, ~N tokens in all (a pasted
paragraph); `app_engine_ttft_ms_*` is the worker's own time to first token (prefill and
first step), the rest is the pool's and the pipes'.

    python bench/priority.py --quick                      # CPU, under 3 minutes
    python bench/priority.py --quick --prompt-tokens 600  # a turn with a long question
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams  # noqa: E402
from core.events import TextDelta, Usage  # noqa: E402
from core.workers.pool import WorkerPool  # noqa: E402

API_STREAMS = 16
TRANSCRIPT_TOKENS = 125  # the base transcript and a short question's line, about
FILLER = "The quick brown fox jumps over the lazy dog near the old river bank. "  # ~15 tokens


def _request(rid: str, tokens: int, interactive: bool = False,
             prompt_tokens: int = 0) -> GenerationRequest:
    question = f"Tell me about {rid}."
    if prompt_tokens > TRANSCRIPT_TOKENS:  # a longer question: text before it, its own
        question = f"{rid}: " + FILLER * ((prompt_tokens - TRANSCRIPT_TOKENS) // 15) + question
    return GenerationRequest(rid, ({"role": "user", "content": question},),
                             SamplingParams(temperature=0.0, max_tokens=tokens),
                             session_id=rid, interactive=interactive)


@dataclass
class Turn:
    """One app turn as measured: from send to its first token, and the worker's view."""

    ttft_ms: float
    engine_ttft_ms: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0


async def _ttft(pool: WorkerPool, request: GenerationRequest) -> Turn:
    sent = time.perf_counter()
    first = None
    usage: Usage | None = None
    async for event in pool.generate("m", request):
        if first is None and isinstance(event, TextDelta):
            first = time.perf_counter() - sent
        if isinstance(event, Usage):
            usage = event
    turn = Turn((first if first is not None else time.perf_counter() - sent) * 1000)
    if usage is not None:
        turn.engine_ttft_ms, turn.prompt_tokens = usage.ttft_ms, usage.prompt_tokens
        turn.cached_tokens = usage.cached_tokens
    return turn


async def _drain(pool: WorkerPool, request: GenerationRequest) -> None:
    async for _ in pool.generate("m", request):
        pass


async def _round(pool: WorkerPool, tag: str, api_tokens: int, load: bool,
                 interactive: bool, prompt_tokens: int = 0) -> Turn:
    api = [asyncio.ensure_future(_drain(pool, _request(f"{tag}-api-{i}", api_tokens)))
           for i in range(API_STREAMS if load else 0)]
    if load:  # two run, the rest wait for a slot (short replies may end first: 2 s at most)
        deadline = time.monotonic() + 2.0
        while pool.queued("m") < API_STREAMS - 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
    ttft = await _ttft(pool, _request(f"{tag}-app", 8, interactive, prompt_tokens))
    await asyncio.gather(*api)
    return ttft


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few rounds, short API replies")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--api-tokens", type=int, default=None)
    parser.add_argument("--prompt-tokens", type=int, default=0,
                        help="the app's prompt, ~N tokens in all (default: a short question, "
                             f"~{TRANSCRIPT_TOKENS + 6} with the base transcript)")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 5)
    api_tokens = args.api_tokens or (16 if args.quick else 64)
    with tempfile.TemporaryDirectory() as home:
        os.environ.setdefault("LLMDECK_HOME", home)
        from core.bundled import provision_bundled_chat

        model = provision_bundled_chat()
        pool = WorkerPool()
        try:
            await pool.load("m", ModelSpec(path=str(model), engine="llamacpp",
                                           context_size=1024), replicas=2)
            await _round(pool, "warm", 4, load=False, interactive=True)
            idle, api16, fifo = [], [], []
            size = args.prompt_tokens
            for r in range(rounds):
                idle.append(await _round(pool, f"i{r}", api_tokens, False, True, size))
                api16.append(await _round(pool, f"p{r}", api_tokens, True, True, size))
                fifo.append(await _round(pool, f"f{r}", api_tokens, True, False, size))
        finally:
            await pool.shutdown()

    def med(turns: list[Turn], field: str = "ttft_ms") -> float:
        return round(statistics.median(getattr(t, field) for t in turns), 1)

    out = {"app_ttft_ms_idle": med(idle), "app_ttft_ms_api16": med(api16),
           "app_ttft_ms_api16_fifo": med(fifo),
           "app_engine_ttft_ms_idle": med(idle, "engine_ttft_ms"),
           "app_engine_ttft_ms_api16": med(api16, "engine_ttft_ms"),
           "app_prompt_tokens": med(idle, "prompt_tokens"),
           "app_cached_tokens": med(idle, "cached_tokens"),
           "rounds": rounds, "api_tokens": api_tokens, "api_streams": API_STREAMS,
           "cpus": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 2)}
    out["app_ttft_slowdown"] = round(out["app_ttft_ms_api16"] / out["app_ttft_ms_idle"], 2)
    out["app_ttft_priority_ratio"] = round(out["app_ttft_ms_api16_fifo"]
                                           / out["app_ttft_ms_api16"], 2)
    # each round's own ratio (its idle and loaded turns seconds apart), their median:
    # steadier than the ratio of medians on a box whose load comes and goes
    out["app_ttft_slowdown_paired"] = round(statistics.median(
        a.ttft_ms / i.ttft_ms for a, i in zip(api16, idle, strict=True)), 2)
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
