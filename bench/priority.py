"""The person's turn first: the app's time to first token with 16 API streams running.

Prints one JSON object. One pool, the bundled Gemma GGUF in two llama.cpp workers (as
the app and `serve` share it). The app's turn (an interactive request, as the Runtime
marks a person's turn) is timed from send to first token:
- `app_ttft_ms_idle`: nothing else running;
- `app_ttft_ms_api16`: 16 API streams sent just before it (each `--api-tokens` long);
- `app_ttft_ms_api16_fifo`: the same, the turn not marked interactive (first come, first
  served: what the pool did before issue 45).
`app_ttft_slowdown` = api16 / idle (lower is better; the issue's goal is <= 1.5) and
`app_ttft_priority_ratio` = fifo / api16 (ours over theirs: higher is better). Medians
of `--rounds` rounds, each round measuring all three (paired: the same load on the box).
llama.cpp runs one sequence per worker: the person's turn sets the running API reply
aside at its next token (core.engines.turn_order), and once a person has sent a turn one
replica is kept for the person's turns (core.workers.turn_hold), so the "fifo" app
request, not interactive, queues behind the 16 on the API replicas.

    python bench/priority.py --quick     # CPU, under 3 minutes
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams  # noqa: E402
from core.events import TextDelta  # noqa: E402
from core.workers.pool import WorkerPool  # noqa: E402

API_STREAMS = 16


def _request(rid: str, tokens: int, interactive: bool = False) -> GenerationRequest:
    return GenerationRequest(rid, ({"role": "user", "content": f"Tell me about {rid}."},),
                             SamplingParams(temperature=0.0, max_tokens=tokens),
                             session_id=rid, interactive=interactive)


async def _ttft(pool: WorkerPool, request: GenerationRequest) -> float:
    sent = time.perf_counter()
    first = None
    async for event in pool.generate("m", request):
        if first is None and isinstance(event, TextDelta):
            first = time.perf_counter() - sent
    return (first if first is not None else time.perf_counter() - sent) * 1000


async def _drain(pool: WorkerPool, request: GenerationRequest) -> None:
    async for _ in pool.generate("m", request):
        pass


async def _round(pool: WorkerPool, tag: str, api_tokens: int, load: bool,
                 interactive: bool) -> float:
    api = [asyncio.ensure_future(_drain(pool, _request(f"{tag}-api-{i}", api_tokens)))
           for i in range(API_STREAMS if load else 0)]
    if load:  # two run, the rest wait for a slot (short replies may end first: 2 s at most)
        deadline = time.monotonic() + 2.0
        while pool.queued("m") < API_STREAMS - 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
    ttft = await _ttft(pool, _request(f"{tag}-app", 8, interactive))
    await asyncio.gather(*api)
    return ttft


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few rounds, short API replies")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--api-tokens", type=int, default=None)
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
            for r in range(rounds):
                idle.append(await _round(pool, f"i{r}", api_tokens, False, True))
                api16.append(await _round(pool, f"p{r}", api_tokens, True, True))
                fifo.append(await _round(pool, f"f{r}", api_tokens, True, False))
        finally:
            await pool.shutdown()
    out = {"app_ttft_ms_idle": round(statistics.median(idle), 1),
           "app_ttft_ms_api16": round(statistics.median(api16), 1),
           "app_ttft_ms_api16_fifo": round(statistics.median(fifo), 1),
           "rounds": rounds, "api_tokens": api_tokens, "api_streams": API_STREAMS,
           "cpus": os.cpu_count()}
    out["app_ttft_slowdown"] = round(out["app_ttft_ms_api16"] / out["app_ttft_ms_idle"], 2)
    out["app_ttft_priority_ratio"] = round(out["app_ttft_ms_api16_fifo"]
                                           / out["app_ttft_ms_api16"], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
