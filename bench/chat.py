"""Chat-turn latency end to end: `llmdeck serve` against `mlx_lm.server`, same run.

Both servers load the same model folder, are driven by the same streaming openai clients
and are warmed up the same way first; every scenario runs on ours, then on the peer (with
--repeat, alternately first), so drift on a shared box hits both. Scenarios:

  lone  one-shot requests of about 20 words, one at a time, never cached
  a     one conversation of 8 turns, replies of varied length, a long system prompt
  b     8 conversations in lock-step (each turn sent by all 8 at once), 4 turns
  c32   32 concurrent one-shot requests (also c64): tok/s and TTFT
  d     conversations of 3 turns, then regenerate and edit-and-resend of the last turn

TTFT is the client's: from sending the request to the first streamed text that is not
whitespace (what a person sees; ours drops a reply's leading blank lines, the peer streams
them, so counting them would time different things). Per scenario
and turn kind (turn1, later, regenerate, edit) it reports TTFT p50/p95, the prompt and
cached token counts the server reported, `new_tokens_p50` (what had to be prefilled:
mlx_lm.server re-tokenises the replies a client sends back, we keep the ids they were
generated as; with the random models' padded vocabulary that gap is wide, with a real
tokenizer far narrower, so regenerate and edit, where both prefill the same few tokens,
are the like-for-like rows), and ours/peer figures: `*_vs_peer` for
latencies (lower is better), `*_ratio` for tok/s (higher is better). (a) and (b) run
through the in-process Runtime too (the TUI's path: store, pool, worker), where the
engine's own TTFT shows what the pool and HTTP add. `targets` checks issue 20's goals.

    python bench/chat.py --quick                          # tiny random qwen3 on the CPU
    python bench/chat.py --quick --repeat 3               # alternate, pool: a noisy CPU
    python bench/chat.py --shape qwen3-0.6b               # GPU, bf16 (add --bits 4)
    python bench/chat.py --shape qwen3-0.6b --scenarios b --no-runtime --kv-disk-pair
                                                          # issue 49: the disk cache on/off
    python bench/chat.py --shape qwen3-0.6b --scenarios b --no-runtime --kv-disk-pair \
        --ab-option prefill_alone_tokens=0 --trace        # and an engine option's A/B, and
                                                          # the engine's own view (worker trace)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.stats import pct  # noqa: E402

_WORDS = (
    "the quick brown fox jumps over a lazy dog while local models count to ten and "
    "a conversation has a user an assistant and sometimes a system prompt about code"
).split()


def words(n: int, salt: int) -> str:
    """n words, different for every salt (so no two prompts share more than chance)."""
    return " ".join(_WORDS[(i * 7 + salt * 13 + i * i * salt) % len(_WORDS)] for i in range(n))


def system_prompt(tokens: int, salt: int) -> str:
    """About `tokens` tokens of system prompt (the fixture tokenizers give ~1.3 per word)."""
    return f"System {salt}. You are a helpful assistant. " + words(max(1, int(tokens / 1.3)), salt)


def untied(shape: dict[str, Any]) -> dict[str, Any]:
    """The shape with its own output head. With random weights a tied head makes the model
    echo its last prompt token: Qwen3-0.6B's shape then writes nothing but newlines, which
    a chat view (and our stream) never shows, so no turn would ever show text."""
    return dict(shape, tie_word_embeddings=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- one streamed request ---------------------------------------------------------------


async def stream_chat(client: Any, model: str, messages: list[dict[str, str]],
                      max_tokens: int) -> dict[str, Any]:
    """Stream one chat completion; TTFT, text and the usage the server reported."""
    start = time.perf_counter()
    ttft = None
    text: list[str] = []
    usage = None
    stream = await client.chat.completions.create(
        model=model, messages=messages, stream=True, max_tokens=max_tokens, temperature=0.0,
        stream_options={"include_usage": True})
    async for chunk in stream:
        if chunk.choices:
            delta = chunk.choices[0].delta
            piece = delta.content or getattr(delta, "reasoning_content", None) or ""
            if ttft is None and piece.strip():
                ttft = (time.perf_counter() - start) * 1000.0
            if delta.content:
                text.append(delta.content)
        if chunk.usage:
            usage = chunk.usage
    wall = time.perf_counter() - start
    details = getattr(usage, "prompt_tokens_details", None) if usage else None
    return {
        "ttft_ms": ttft if ttft is not None else wall * 1000.0,
        "text": "".join(text),
        "completion_tokens": usage.completion_tokens if usage else 0,
        "prompt_tokens": usage.prompt_tokens if usage else 0,
        "cached_tokens": (getattr(details, "cached_tokens", 0) or 0) if details else 0,
        "wall_s": wall,
    }


# -- the servers ------------------------------------------------------------------------


class Server:
    """A server process (ours or the peer) and an openai client for it."""

    def __init__(self, name: str, argv: list[str], port: int, model: str, env: dict[str, str],
                 log: Path) -> None:
        self.name = name
        self.port = port
        self.model = model
        self.log = log
        self.proc = subprocess.Popen(argv, env=env, stdout=log.open("wb"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.client: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def ready(self, timeout: float) -> float:
        """Wait until a chat request succeeds (loading answers errors until then)."""
        from openai import AsyncOpenAI

        # The openai default of 2 retries: mlx_lm.server (a ThreadingHTTPServer with a listen
        # backlog of 5) resets some connections of a 32-64 request burst; a client retries.
        self.client = AsyncOpenAI(base_url=self.url, api_key="bench", max_retries=2, timeout=900)
        start = time.perf_counter()
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log.read_text()[-2000:]}")
            try:
                await stream_chat(self.client, self.model, [{"role": "user", "content": "hi"}], 2)
                return time.perf_counter() - start
            except Exception:  # noqa: BLE001 - not up yet (refused, 503 while loading)
                if time.perf_counter() - start > timeout:
                    raise
                await asyncio.sleep(0.25)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_ours(model_dir: Path, work: Path, context: int, concurrency: int,
               options: tuple[str, ...] = (), name: str = "serve",
               trace: Path | None = None) -> Server:
    from core.config import Settings

    home = work / f"home-{name}"
    home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, LLMDECK_HOME=str(home), PYTHONUNBUFFERED="1")
    if trace is not None:  # bench.engine_trace: the worker logs its engine's view
        from bench.engine_trace import install

        site = install(work / "trace-site")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
        env["LLMDECK_BENCH_TRACE"] = str(trace)
    Settings(context_size=context).save(home / "config.toml")
    port = free_port()
    argv = [sys.executable, "-m", "core.server.cli", "--host", "127.0.0.1", "--port", str(port),
            "--engine", "mlx", "--model", str(model_dir), "--served-model-name", "bench",
            "--option", f"max_concurrency={concurrency}", "--option", "label=bench"]
    for option in options:  # engine options to compare (e.g. prefill_order=fifo)
        argv += ["--option", option]
    return Server("llmdeck", argv, port, "bench", env, work / f"{name}.log")


def start_peer(model_dir: Path, work: Path, concurrency: int) -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "mlx_lm.server", "--model", str(model_dir), "--host",
            "127.0.0.1", "--port", str(port), "--decode-concurrency", str(concurrency),
            "--log-level", "WARNING"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return Server("mlx_lm.server", argv, port, "default_model", env, work / "peer.log")


# -- scenarios over an async "send" (HTTP or Runtime) ------------------------------------


class Plan:
    """Sizes of every scenario (quick on the CPU, full on the GPU)."""

    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.a_system = 1200 if quick else 1600
        self.a_replies = [24, 64, 12, 40, 80, 16, 48, 32] if quick else [48, 160, 24, 96, 200, 32, 128, 64]
        self.a_user_words = [12, 60, 20, 110, 8, 40, 150, 25]
        self.a_reps = 1 if quick else 2
        self.b_convs = 8
        self.b_turns = 4
        self.b_system = [300 + i * (120 if quick else 380) for i in range(8)]  # GPU: 300..~3000
        self.b_replies = [16, 40, 24, 32] if quick else [64, 128, 48, 96]
        self.c_sizes = (32, 64)
        self.c_tokens = 32 if quick else 256
        self.c_rounds = 1 if quick else 3
        self.d_convs = 2 if quick else 4
        self.d_system = 600 if quick else 1200
        self.lone = 12 if quick else 10  # the CPU is noisier: more samples, cheap there
        self.lone_tokens = 8 if quick else 32


Send = Any  # async (messages, max_tokens) -> result dict


def summarise(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, rows in samples.items():
        if not rows:
            continue
        ttfts = [r["ttft_ms"] for r in rows]
        out[kind] = {
            "n": len(rows),
            "ttft_p50_ms": round(statistics.median(ttfts), 1),
            "ttft_p95_ms": round(pct(ttfts, 0.95), 1),
            "prompt_tokens_p50": statistics.median(r["prompt_tokens"] for r in rows),
            "cached_tokens_p50": statistics.median(r["cached_tokens"] for r in rows),
            # What had to be prefilled: the peer re-tokenises replies, we keep their ids.
            "new_tokens_p50": statistics.median(r["prompt_tokens"] - r["cached_tokens"] for r in rows),
        }
        engine = [r["engine_ttft_ms"] for r in rows if r.get("engine_ttft_ms") is not None]
        if engine:
            out[kind]["engine_ttft_p50_ms"] = round(statistics.median(engine), 1)
    return out


async def scenario_lone(send: Send, plan: Plan, salt: int) -> dict[str, list]:
    rows = []
    for i in range(plan.lone):
        msgs = [{"role": "user", "content": f"#{salt}-{i} " + words(20, salt * 100 + i)}]
        rows.append(await send(msgs, plan.lone_tokens))
    return {"turn1": rows}


async def conversation(send: Send, system: str, user_words: list[int], replies: list[int],
                       salt: int, rows: dict[str, list]) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": system}]
    for t, (n, m) in enumerate(zip(user_words, replies, strict=True)):
        msgs.append({"role": "user", "content": f"Turn {t}: " + words(n, salt * 10 + t)})
        r = await send(list(msgs), m)
        rows["turn1" if t == 0 else "later"].append(r)
        msgs.append({"role": "assistant", "content": r["text"]})
    return msgs


async def scenario_a(send: Send, plan: Plan, salt: int) -> dict[str, list]:
    rows: dict[str, list] = {"turn1": [], "later": []}
    for rep in range(plan.a_reps):
        s = salt * 10 + rep
        await conversation(send, system_prompt(plan.a_system, s), plan.a_user_words,
                           plan.a_replies, s, rows)
    return rows


async def scenario_b(send: Send, plan: Plan, salt: int) -> dict[str, list]:
    rows: dict[str, list] = {"turn1": [], "later": []}
    convs = [[{"role": "system", "content": system_prompt(plan.b_system[i], salt * 10 + i)}]
             for i in range(plan.b_convs)]
    for t in range(plan.b_turns):
        for i, msgs in enumerate(convs):
            msgs.append({"role": "user", "content": f"Turn {t}: " + words(15 + 9 * i, salt + i + t)})
        results = await asyncio.gather(*(send(list(m), plan.b_replies[t]) for m in convs))
        for msgs, r in zip(convs, results, strict=True):
            rows["turn1" if t == 0 else "later"].append(r)
            msgs.append({"role": "assistant", "content": r["text"]})
    return rows


async def scenario_c(send: Send, plan: Plan, n: int, salt: int) -> dict[str, Any]:
    rounds = []
    ttfts: list[float] = []
    for r in range(plan.c_rounds):
        prompts = [[{"role": "user", "content": f"#{salt}-{r}-{i} " + words(24, salt + r * n + i)}]
                   for i in range(n)]
        start = time.perf_counter()
        results = await asyncio.gather(*(send(p, plan.c_tokens) for p in prompts))
        wall = time.perf_counter() - start
        rounds.append(sum(x["completion_tokens"] for x in results) / wall)
        ttfts.extend(x["ttft_ms"] for x in results)
    return {"rounds": rounds, "ttfts": ttfts}


async def scenario_d(send: Send, plan: Plan, salt: int) -> dict[str, list]:
    rows: dict[str, list] = {"turn1": [], "later": [], "regenerate": [], "edit": []}
    for k in range(plan.d_convs):
        s = salt * 10 + k
        msgs = await conversation(send, system_prompt(plan.d_system, s), [30, 50, 20],
                                  [32, 48, 40], s, rows)
        last_prompt = msgs[:-1]
        rows["regenerate"].append(await send(list(last_prompt), 40))
        edited = last_prompt[:-1] + [{"role": "user", "content": "Edited: " + words(24, s + 99)}]
        rows["edit"].append(await send(edited, 40))
    return rows


async def warm_up(send: Send, plan: Plan) -> None:
    """The same warm-up for both servers: varied prompt lengths, a follow-up turn, bursts."""
    for i, n in enumerate((5, 40, 300, 900)):
        await send([{"role": "user", "content": words(n, 900 + i)}], 8)
    await conversation(send, system_prompt(400, 901), [20, 30], [16, 16], 902,
                       {"turn1": [], "later": []})
    for size in (8, *plan.c_sizes):
        await asyncio.gather(*(send([{"role": "user", "content": words(12, 950 + i)}], 4)
                               for i in range(size)))


def http_sender(server: Server) -> Send:
    async def send(messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
        return await stream_chat(server.client, server.model, messages, max_tokens)
    return send


# -- the in-process Runtime (the TUI's path) ------------------------------------------------


async def run_runtime(model_dir: Path, work: Path, plan: Plan, context: int,
                      concurrency: int) -> dict[str, Any]:
    """(a) and (b) through Runtime.start_turn: store, pool, worker, engine, as the TUI does.

    The Runtime has one system prompt (a setting), so (b)'s conversations share one here.
    """
    from core.config import Settings
    from core.engines.base import ModelSpec
    from core.events import ReasoningDelta, TextDelta, Usage
    from core.runtime import Runtime

    os.environ["LLMDECK_HOME"] = str(work / "home-runtime")
    settings = Settings(context_size=context)
    settings.sampling.temperature = 0.0
    settings.tools_enabled = False
    spec = ModelSpec(str(model_dir), "mlx", context_size=context,
                     options=(("max_concurrency", concurrency), ("label", "bench")))
    runtime = Runtime(settings, model_spec=spec)
    await runtime.start(preload=True)
    assert await runtime.ensure_model(), runtime.model.error

    async def turn(cid: str | None, text: str, max_tokens: int) -> tuple[str, dict[str, Any]]:
        settings.sampling.max_tokens = max_tokens
        start = time.perf_counter()
        t = await runtime.start_turn(cid, text)
        ttft, reply, usage = None, [], None
        async for event in t.events():
            if isinstance(event, TextDelta | ReasoningDelta) and ttft is None:
                ttft = (time.perf_counter() - start) * 1000.0
            if isinstance(event, TextDelta):
                reply.append(event.text)
            elif isinstance(event, Usage):
                usage = event
        return t.conversation_id, {
            "ttft_ms": ttft if ttft is not None else (time.perf_counter() - start) * 1000.0,
            "prompt_tokens": usage.prompt_tokens if usage else 0,
            "cached_tokens": usage.cached_tokens if usage else 0,
            "engine_ttft_ms": usage.ttft_ms if usage else None,
        }

    out: dict[str, Any] = {}
    try:
        # Warm-up as for the servers: varied lengths, then a follow-up turn.
        for i, n in enumerate((5, 40, 300, 900)):
            await turn(None, words(n, 900 + i), 8)
        cid, _ = await turn(None, words(20, 903), 8)
        await turn(cid, words(30, 904), 8)

        rows: dict[str, list] = {"turn1": [], "later": []}
        for rep in range(plan.a_reps):
            s = 20 + rep
            settings.system_prompt = system_prompt(plan.a_system, s)
            cid = None
            for t, (n, m) in enumerate(zip(plan.a_user_words, plan.a_replies, strict=True)):
                cid, r = await turn(cid, f"Turn {t}: " + words(n, s * 10 + t), m)
                rows["turn1" if t == 0 else "later"].append(r)
        out["a"] = summarise(rows)

        settings.system_prompt = system_prompt(plan.b_system[3], 31)
        rows = {"turn1": [], "later": []}
        cids: list[str | None] = [None] * plan.b_convs
        for t in range(plan.b_turns):
            settings.sampling.max_tokens = plan.b_replies[t]
            results = await asyncio.gather(*(
                turn(cids[i], f"Turn {t}: " + words(15 + 9 * i, 30 + i + t), plan.b_replies[t])
                for i in range(plan.b_convs)))
            for i, (cid, r) in enumerate(results):
                cids[i] = cid
                rows["turn1" if t == 0 else "later"].append(r)
        out["b"] = summarise(rows)
    finally:
        await runtime.close()
    return out


# -- report ---------------------------------------------------------------------------------


def compare(ours: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any]:
    """ours/peer per scenario and kind: TTFT (lower is better), tok/s (higher is better)."""
    out: dict[str, Any] = {}
    for name, mine in ours.items():
        theirs = peer.get(name)
        if not theirs:
            continue
        if "tokens_per_s" in mine:
            out[f"{name}_tokens_per_s_ratio"] = round(mine["tokens_per_s"] / theirs["tokens_per_s"], 3)
            out[f"{name}_ttft_p50_vs_peer"] = round(mine["ttft_p50_ms"] / theirs["ttft_p50_ms"], 3)
            continue
        for kind, row in mine.items():
            if isinstance(row, dict) and kind in theirs:
                out[f"{name}_{kind}_ttft_p50_vs_peer"] = round(
                    row["ttft_p50_ms"] / theirs[kind]["ttft_p50_ms"], 3)
                out[f"{name}_{kind}_ttft_p95_vs_peer"] = round(
                    row["ttft_p95_ms"] / theirs[kind]["ttft_p95_ms"], 3)
    return out


def targets(ours: dict[str, Any], peer: dict[str, Any], vs: dict[str, Any]) -> dict[str, Any]:
    """Issue 20's goals, each with the figure it was judged on."""
    out: dict[str, Any] = {}

    def check(name: str, value: float | None, limit: float, higher: bool = False) -> None:
        if value is None:
            return
        ok = value >= limit if higher else value <= limit
        out[name] = {"value": round(value, 3), "limit": limit, "holds": ok}

    a = ours.get("a", {})
    check("a_later_vs_peer_le_0.8", vs.get("a_later_ttft_p50_vs_peer"), 0.8)
    if "later" in a and "turn1" in a:
        check("a_later_vs_own_turn1_le_0.5", a["later"]["ttft_p50_ms"] / a["turn1"]["ttft_p50_ms"], 0.5)
    check("b_later_vs_peer_le_0.8", vs.get("b_later_ttft_p50_vs_peer"), 0.8)
    # issue 49 item 1: later turns with the disk KV cache on
    check("b_later_vs_peer_le_0.45", vs.get("b_later_ttft_p50_vs_peer"), 0.45)
    b = ours.get("b", {})
    if "later" in b and "turn1" in b:
        check("b_later_vs_own_turn1_le_0.6", b["later"]["ttft_p50_ms"] / b["turn1"]["ttft_p50_ms"], 0.6)
    check("lone_turn1_vs_peer_le_1", vs.get("lone_turn1_ttft_p50_vs_peer"), 1.0)
    check("a_turn1_vs_peer_le_1", vs.get("a_turn1_ttft_p50_vs_peer"), 1.0)
    check("b_turn1_vs_peer_le_1", vs.get("b_turn1_ttft_p50_vs_peer"), 1.0)
    d = ours.get("d", {})
    if "later" in d:
        for kind in ("regenerate", "edit"):
            if kind in d:
                check(f"d_{kind}_vs_own_later_le_1.25",
                      d[kind]["ttft_p50_ms"] / d["later"]["ttft_p50_ms"], 1.25)
    for n in ("c32", "c64"):
        check(f"{n}_tokens_per_s_ratio_ge_1.5", vs.get(f"{n}_tokens_per_s_ratio"), 1.5, higher=True)
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    import mlx.core as mx

    from tests.fixtures.mlx_models import QWEN3_0_6B_SHAPE, QWEN3_SHAPE, build_model_dir

    plan = Plan(args.quick)
    work = Path(tempfile.mkdtemp(prefix="llmdeck-bench-chat-"))
    os.environ["LLMDECK_HOME"] = str(work / "home")
    tiny = args.shape == "tiny"
    shape = QWEN3_SHAPE if tiny else untied(QWEN3_0_6B_SHAPE)
    dtype = "float32" if tiny else args.dtype
    model_dir = build_model_dir(work / "model", shape, dtype=dtype, quantize_bits=args.bits or None)
    context = 8192
    concurrency = max(plan.c_sizes)
    which = [s for s in args.scenarios.split(",") if s]
    result: dict[str, Any] = {
        "bench": "chat",
        "model": f"random {args.shape} ({shape['model_type']}, hidden {shape['hidden_size']}, "
                 f"{shape['num_hidden_layers']} layers, {dtype}"
                 + (f", {args.bits}-bit" if args.bits else "") + ")",
        "device": str(mx.default_device()),
        "scenarios": which,
    }
    servers: list[Server] = []
    traces = {side: (work / f"trace-{side}.jsonl" if args.trace else None)
              for side in ("ours", "ours_kv_off", "ours_ab")}
    try:
        t0 = time.perf_counter()
        ours = start_ours(model_dir, work, context, concurrency, tuple(args.option),
                          trace=traces["ours"])
        if args.option:
            result["ours_options"] = list(args.option)
        servers.append(ours)
        peer = start_peer(model_dir, work, concurrency)
        servers.append(peer)
        off = None
        if args.kv_disk_pair:  # issue 49: ours again with the disk KV cache off
            off = start_ours(model_dir, work, context, concurrency,
                             (*args.option, "kv_disk_gb=0"), name="serve-kv-off",
                             trace=traces["ours_kv_off"])
            servers.append(off)
        ab = None
        if args.ab_option:  # ours again with other engine options (an A/B on one run)
            ab = start_ours(model_dir, work, context, concurrency,
                            (*args.option, *args.ab_option), name="serve-ab",
                            trace=traces["ours_ab"])
            servers.append(ab)
            result["ab_options"] = list(args.ab_option)
        result["ours_ready_s"] = round(await ours.ready(900), 1)
        result["peer_ready_s"] = round(await peer.ready(900), 1)
        for extra in (off, ab):
            if extra is not None:
                await extra.ready(900)
                await warm_up(http_sender(extra), plan)
        result["ours"], result["peer"] = {}, {}
        # Warm both, then each scenario on both, in turn. With --repeat the runs alternate
        # (ours first, then the peer first, ...) and the samples are pooled, so a burst of
        # load on a shared box lands on both sides; each repetition's ratios are kept too.
        await warm_up(http_sender(ours), plan)
        await warm_up(http_sender(peer), plan)
        raw: dict[str, dict[str, Any]] = {"ours": {}, "peer": {}, "ours_kv_off": {},
                                          "ours_ab": {}}
        per_rep: list[dict[str, Any]] = []
        for rep in range(args.repeat):
            this_rep: dict[str, dict[str, Any]] = {"ours": {}, "peer": {}, "ours_kv_off": {},
                                                   "ours_ab": {}}
            for name in which:
                sides = [("ours", ours), ("peer", peer)]
                if off is not None:
                    sides.append(("ours_kv_off", off))
                if ab is not None:
                    sides.append(("ours_ab", ab))
                for side, server in sides if rep % 2 == 0 else sides[::-1]:
                    got = await run_http_raw(server, plan, name, rep)
                    this_rep[side][name] = got
                    merge(raw[side], name, got)
            per_rep.append(compare(finish(this_rep["ours"]), finish(this_rep["peer"])))
            result["ours"], result["peer"] = finish(raw["ours"]), finish(raw["peer"])
            if off is not None:
                result["ours_kv_off"] = finish(raw["ours_kv_off"])
            if ab is not None:
                result["ours_ab"] = finish(raw["ours_ab"])
            if args.out:  # what is done so far survives a run cut short
                Path(args.out).write_text(json.dumps(result))
        if args.repeat > 1:
            result["vs_peer_each_repeat"] = per_rep
        result["http_seconds"] = round(time.perf_counter() - t0, 1)
    finally:
        for s in servers:
            await s.close()
    result["vs_peer"] = compare(result["ours"], result["peer"])
    if "ours_kv_off" in result:  # the disk KV cache's cost: on / off (1.0: none)
        result["kv_disk_on_vs_off"] = {k.replace("_vs_peer", "_on_vs_off"): v for k, v in
                                       compare(result["ours"], result["ours_kv_off"]).items()}
        result["kv_off_vs_peer"] = compare(result["ours_kv_off"], result["peer"])
    if "ours_ab" in result:  # the A/B's options against ours: ab / ours (1.0: no change)
        result["ab_vs_ours"] = {k.replace("_vs_peer", "_ab_vs_ours"): v for k, v in
                                compare(result["ours_ab"], result["ours"]).items()}
        result["ab_vs_peer"] = compare(result["ours_ab"], result["peer"])
    if args.trace:  # the engine's view of each burst of 8 (warm-up's first, then b's turns)
        from bench.engine_trace import summarise

        result["engine_trace"] = {side: summarise(path) for side, path in traces.items()
                                  if path is not None and list(work.glob(path.name + ".*"))}
    if not args.no_runtime:
        t0 = time.perf_counter()
        try:
            result["runtime"] = await run_runtime(model_dir, work, plan, context, concurrency)
        except Exception as exc:  # noqa: BLE001 - report it with the rest
            result["runtime"] = {"error": f"{type(exc).__name__}: {exc}"}
        result["runtime_seconds"] = round(time.perf_counter() - t0, 1)
    result["targets"] = targets(result["ours"], result["peer"], result["vs_peer"])
    return result


async def run_http_raw(server: Server, plan: Plan, name: str, rep: int) -> dict[str, Any]:
    """One scenario's samples (TTFT rows per turn kind; tok/s rounds for c32/c64)."""
    send = http_sender(server)
    start = time.perf_counter()
    salt = {"lone": 1, "a": 2, "b": 3, "c32": 4, "c64": 6, "d": 5}[name] + 1000 * rep
    if name == "lone":
        out: dict[str, Any] = await scenario_lone(send, plan, salt)
    elif name == "a":
        out = await scenario_a(send, plan, salt)
    elif name == "b":
        out = await scenario_b(send, plan, salt)
    elif name in ("c32", "c64"):
        out = await scenario_c(send, plan, int(name[1:]), salt)
    elif name == "d":
        out = await scenario_d(send, plan, salt)
    else:
        raise SystemExit(f"bench/chat.py: unknown scenario {name!r}")
    out["seconds"] = time.perf_counter() - start
    return out


def merge(into: dict[str, Any], name: str, got: dict[str, Any]) -> None:
    """Pool a repetition's samples with the earlier ones of the same scenario."""
    have = into.setdefault(name, {})
    for key, value in got.items():
        if isinstance(value, list):
            have.setdefault(key, []).extend(value)
        else:
            have[key] = have.get(key, 0) + value


def finish(raw: dict[str, Any]) -> dict[str, Any]:
    """Pooled samples -> the per-scenario summary the report prints."""
    out: dict[str, Any] = {}
    for name, got in raw.items():
        if "rounds" in got:
            rounds, ttfts = got["rounds"], got["ttfts"]
            summary = {"tokens_per_s": round(statistics.median(rounds), 1),
                       "tokens_per_s_rounds": [round(x, 1) for x in rounds],
                       "ttft_p50_ms": round(statistics.median(ttfts), 1),
                       "ttft_p95_ms": round(pct(ttfts, 0.95), 1)}
        else:
            summary = summarise({k: v for k, v in got.items() if isinstance(v, list)})
        summary["seconds"] = round(got["seconds"], 1)
        out[name] = summary
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny model on the CPU, under 3 minutes")
    parser.add_argument("--shape", choices=["tiny", "qwen3-0.6b"], default=None)
    parser.add_argument("--dtype", default="bfloat16", help="weights dtype of the GPU shape")
    parser.add_argument("--bits", type=int, default=0, help="quantise the weights (4 = 4-bit)")
    parser.add_argument("--scenarios", default="lone,a,b,c32,c64,d")
    parser.add_argument("--no-runtime", action="store_true", help="skip the in-process Runtime runs")
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="an engine option for our server (repeatable), e.g. prefill_order=fifo")
    parser.add_argument("--kv-disk-pair", action="store_true",
                        help="also run ours with the disk KV cache off (kv_disk_gb=0): "
                             "kv_disk_on_vs_off shows what the cache costs each turn kind")
    parser.add_argument("--ab-option", action="append", default=[], metavar="KEY=VALUE",
                        help="also run ours with these engine options added (repeatable): "
                             "ab_vs_ours is that server over ours, per turn kind")
    parser.add_argument("--trace", action="store_true",
                        help="log our engines' steps in their workers (bench.engine_trace): "
                             "engine_trace gives each burst's arrival spread and engine TTFT")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every scenario this many times, alternating which server goes "
                             "first, and pool the samples (a noisy shared CPU: use 3)")
    args = parser.parse_args()
    args.shape = args.shape or ("tiny" if args.quick else "qwen3-0.6b")
    if args.quick:
        import mlx.core as mx

        mx.set_default_device(mx.cpu)
    result = asyncio.run(main_async(args))
    text = json.dumps(result)
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
