"""Throughput and TTFT through `llmdeck serve` against the same pool in-process, same run.

Prints one JSON object: tokens/s of N concurrent streaming HTTP clients (in a separate
client process, parsing SSE as any client must) and of N concurrent in-process streams
over the same Runtime backend (what the TUI gets), `http_vs_inprocess_ratio` (HTTP over
in-process, higher is better, target >= 0.9), and TTFT p50/p95 of both. Rounds alternate
the two modes after a warm-up; each mode's best round is reported (the box is shared, so
the best round is the one least disturbed by neighbours). CPU microseconds per token in
the app process (both modes) and the client process say what HTTP itself costs, a
figure that does not depend on how busy the machine is. Clients keep their connections
alive across rounds (as the openai SDK's pool does). Engine tokens per step and steps
per round, per mode, show whether both modes got the same batching.

    python bench/serve.py --quick                       # tiny qwen3 on CPU, under 2 minutes
    python bench/serve.py --shape qwen3-0.6b            # GPU machine
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.stats import pct  # noqa: E402
from core.engines.base import GenerationRequest, ModelSpec, SamplingParams  # noqa: E402
from core.events import ReasoningDelta, TextDelta, Usage  # noqa: E402

_WORDS = "the quick brown fox jumps over a lazy dog while local models count to ten".split()


def _prompt(salt: int, words: int = 24) -> str:
    return " ".join(_WORDS[(i * 7 + salt) % len(_WORDS)] for i in range(words)) + f" #{salt}"


# -- HTTP clients (run in their own process) -----------------------------------------------


def http_round(url: str, model: str, prompts: list[str],
               max_tokens: int) -> tuple[float, int, list[float], float]:
    """N concurrent streaming requests; (wall s, completion tokens, TTFTs ms, client CPU s)."""
    import aiohttp

    async def one(session: aiohttp.ClientSession, prompt: str) -> tuple[int, float]:
        body = {"model": model, "messages": [{"role": "user", "content": prompt}], "stream": True,
                "stream_options": {"include_usage": True}, "max_tokens": max_tokens,
                "temperature": 0.0}
        start = time.perf_counter()
        ttft = 0.0
        tokens = 0
        async with session.post(f"{url}/chat/completions", json=body) as response:
            assert response.status == 200, await response.text()
            # Read what the socket has and split SSE lines here: aiohttp's line iterator
            # costs an await per line (two per event, with the blank separator). Every
            # data: line is still parsed as JSON, as any client must.
            rest = b""
            async for data in response.content.iter_any():
                lines = (rest + data).split(b"\n")
                rest = lines.pop()
                for raw in lines:
                    if not raw.startswith(b"data: {"):
                        continue
                    chunk = json.loads(raw[6:])
                    if not ttft and chunk["choices"] and (
                            chunk["choices"][0]["delta"].get("content")
                            or chunk["choices"][0]["delta"].get("reasoning_content")):
                        ttft = (time.perf_counter() - start) * 1000.0
                    if chunk.get("usage"):
                        tokens = chunk["usage"]["completion_tokens"]
        return tokens, ttft

    async def run() -> tuple[float, int, list[float], float]:
        global _SESSION
        if _SESSION is None:  # one keep-alive pool for the process, as a long-lived client has
            _SESSION = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        cpu = time.process_time()
        start = time.perf_counter()
        results = await asyncio.gather(*(one(_SESSION, p) for p in prompts))
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu
        return wall, sum(t for t, _ in results), [f for _, f in results], cpu

    global _LOOP
    if _LOOP is None:
        _LOOP = asyncio.new_event_loop()
    return _LOOP.run_until_complete(run())


_LOOP: asyncio.AbstractEventLoop | None = None
_SESSION: Any = None


def close_http_client() -> None:
    """Close the client process's keep-alive pool (run in that process at the end)."""
    if _LOOP is not None and _SESSION is not None:
        _LOOP.run_until_complete(_SESSION.close())


# -- in-process ----------------------------------------------------------------------------


async def inprocess_round(runtime, prompts: list[str], max_tokens: int) -> tuple[float, int, list[float]]:
    async def one(i: int, prompt: str) -> tuple[int, float]:
        request = GenerationRequest(f"bench-{time.perf_counter_ns()}-{i}",
                                    ({"role": "user", "content": prompt},),
                                    SamplingParams(temperature=0.0, max_tokens=max_tokens))
        start = time.perf_counter()
        ttft, tokens = 0.0, 0
        async for event in runtime.backend.generate(request):
            if not ttft and isinstance(event, TextDelta | ReasoningDelta):
                ttft = (time.perf_counter() - start) * 1000.0
            elif isinstance(event, Usage):
                tokens = event.completion_tokens
        return tokens, ttft

    start = time.perf_counter()
    results = await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    return time.perf_counter() - start, sum(t for t, _ in results), [f for _, f in results]


async def main_async(args: argparse.Namespace) -> dict:
    from core.config import Settings
    from core.runtime import Runtime
    from core.server import ServerHandle
    from tests.fixtures.mlx_models import QWEN3_0_6B_SHAPE, QWEN3_SHAPE, build_model_dir

    shape = QWEN3_SHAPE if args.shape == "tiny" else QWEN3_0_6B_SHAPE
    work = Path(tempfile.mkdtemp(prefix="llmdeck-bench-serve-"))
    os.environ["LLMDECK_HOME"] = str(work / "home")
    model_dir = build_model_dir(work / "model", shape, dtype="float32" if args.shape == "tiny" else "bfloat16")
    spec = ModelSpec(str(model_dir), "mlx", context_size=2048,
                     options=(("max_concurrency", args.clients), ("label", "bench")))
    runtime = Runtime(Settings(), model_spec=spec)
    await runtime.start(preload=True)
    assert await runtime.ensure_model(), runtime.model.error
    handle = await ServerHandle.start(runtime, "127.0.0.1", 0, served_name="bench")
    loop = asyncio.get_running_loop()
    clients = ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"))
    salt = 0

    def prompts() -> list[str]:
        nonlocal salt
        salt += args.clients
        return [_prompt(salt + i) for i in range(args.clients)]

    rounds: dict[str, list[tuple[float, int, list[float]]]] = {"http": [], "inprocess": []}
    cpu_us: dict[str, list[float]] = {"server_http": [], "server_inprocess": [], "client_http": []}
    # Engine side: output tokens per worker step message (how full the batch was) and
    # steps per round, read from the pool's own per-step token log.
    per_step: dict[str, list[float]] = {"http": [], "inprocess": []}
    steps: dict[str, list[int]] = {"http": [], "inprocess": []}
    workers = [w for g in runtime.pool._groups.values() for w in g.workers]

    def engine_mark() -> None:
        for w in workers:
            w.token_times.clear()

    def engine_read(mode: str) -> None:
        log = [n for w in workers for _, n in w.token_times]
        steps[mode].append(len(log))
        per_step[mode].append(sum(log) / max(1, len(log)))
    try:
        # Warm-up: every client opens its connection (kept alive for the rounds, as the
        # openai SDK's pool keeps them) and the engine sees the batch size once.
        await loop.run_in_executor(clients, http_round, handle.url, "bench", prompts(), 4)
        await inprocess_round(runtime, prompts(), args.max_tokens)
        for _ in range(args.rounds):
            engine_mark()
            cpu = time.process_time()
            wall, tokens, ttfts = await inprocess_round(runtime, prompts(), args.max_tokens)
            cpu_us["server_inprocess"].append((time.process_time() - cpu) * 1e6 / max(1, tokens))
            engine_read("inprocess")
            rounds["inprocess"].append((wall, tokens, ttfts))
            engine_mark()
            cpu = time.process_time()
            wall, tokens, ttfts, client_cpu = await loop.run_in_executor(
                clients, http_round, handle.url, "bench", prompts(), args.max_tokens)
            cpu_us["server_http"].append((time.process_time() - cpu) * 1e6 / max(1, tokens))
            engine_read("http")
            cpu_us["client_http"].append(client_cpu * 1e6 / max(1, tokens))
            rounds["http"].append((wall, tokens, ttfts))
    finally:
        await loop.run_in_executor(clients, close_http_client)
        clients.shutdown()
        await handle.stop()
        await runtime.close()

    def best(mode: str) -> tuple[float, list[float]]:
        tps = [tokens / wall for wall, tokens, _ in rounds[mode]]
        i = max(range(len(tps)), key=tps.__getitem__)
        return tps[i], rounds[mode][i][2]

    http_tps, http_ttft = best("http")
    inproc_tps, inproc_ttft = best("inprocess")
    return {
        "bench": "serve",
        "model": f"random {args.shape} ({shape['model_type']}, hidden {shape['hidden_size']}, "
                 f"{shape['num_hidden_layers']} layers)",
        "clients": args.clients,
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        "http_tokens_per_s": round(http_tps, 1),
        "inprocess_tokens_per_s": round(inproc_tps, 1),
        "http_vs_inprocess_ratio": round(http_tps / inproc_tps, 3),
        "ttft_p50_ms": round(statistics.median(http_ttft), 1),
        "ttft_p95_ms": round(pct(http_ttft, 0.95), 1),
        "inprocess_ttft_p50_ms": round(statistics.median(inproc_ttft), 1),
        "inprocess_ttft_p95_ms": round(pct(inproc_ttft, 0.95), 1),
        # Where HTTP costs CPU (app process and client process), per streamed token: on a
        # box with few cores this is what the model's worker loses to the HTTP path.
        "app_cpu_us_per_token_inprocess": round(statistics.median(cpu_us["server_inprocess"]), 1),
        "app_cpu_us_per_token_http": round(statistics.median(cpu_us["server_http"]), 1),
        "client_cpu_us_per_token_http": round(statistics.median(cpu_us["client_http"]), 1),
        "engine_tokens_per_step_http": round(statistics.median(per_step["http"]), 1),
        "engine_tokens_per_step_inprocess": round(statistics.median(per_step["inprocess"]), 1),
        "engine_steps_per_round_http": statistics.median(steps["http"]),
        "engine_steps_per_round_inprocess": statistics.median(steps["inprocess"]),
        "cpu_count": os.cpu_count(),
        "http_tokens_per_round": [t for _, t, _ in rounds["http"]],
        "inprocess_tokens_per_round": [t for _, t, _ in rounds["inprocess"]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny model on CPU, under 2 minutes")
    parser.add_argument("--shape", choices=["tiny", "qwen3-0.6b"], default=None)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    args.shape = args.shape or ("tiny" if args.quick else "qwen3-0.6b")
    args.max_tokens = args.max_tokens or (48 if args.quick else 256)
    args.rounds = args.rounds or (3 if args.quick else 3)
    print(json.dumps(asyncio.run(main_async(args))))


if __name__ == "__main__":
    main()
