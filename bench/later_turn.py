"""Where a later turn's time to first token goes (issue 49): bench/chat.py's scenario b
(8 conversations in lock-step, 4 turns, the same prompts and reply lengths) on MlxEngine in
this process, no HTTP, no worker, so what is left is the engine's own path.

Prints one JSON object. Per arrival pattern (`--spread-ms`: request i of a turn is
submitted i x spread ms after the first, as HTTP requests reach the worker one by one; 0:
all before the first step) and per turn kind (turn1, later): the engine's TTFT p50/p95
(submit to the first token) and `text_ttft` (submit to the first non-blank text, what
bench/chat.py's client times), and where the later turns' time goes: each wrapped engine
stage's total ms inside the window from a turn's first submit to its last first token
(`stages_ms`, median over the later turns; stages nest, so a parent includes its
children), with `--sync` (default) synchronising the device at each stage's end so GPU
work is charged to the stage that queued it. `raw_batch_ms` is the floor the peer's path
has: the same later turns' new tokens through a bare BatchGenerator over copies of the
same caches.

    python bench/later_turn.py --quick                 # tiny random qwen3 on the CPU
    python bench/later_turn.py                         # Qwen3-0.6B shape, bf16, on the GPU
    python bench/later_turn.py --option kv_disk_gb=0   # engine options (repeatable)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.chat import Plan, system_prompt, untied, words  # noqa: E402
from bench.stats import pct  # noqa: E402


class Stages:
    """Wraps engine stages to time them: (name, start, end) per call."""

    def __init__(self, sync: bool) -> None:
        import mlx.core as mx

        self.mx = mx
        self.sync = sync
        from mlx_lm.generate import generation_stream

        self.streams = [None, generation_stream]  # the engine's work runs on the latter
        self.spans: list[tuple[str, float, float]] = []

    def wrap(self, owner: Any, attr: str, name: str | None = None) -> None:
        fn = getattr(owner, attr, None)
        if fn is None:
            return
        label = name or attr.lstrip("_")
        spans, mx, sync, streams = self.spans, self.mx, self.sync, self.streams

        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                if sync:
                    for stream in streams:
                        mx.synchronize(stream)
                spans.append((label, t, time.perf_counter()))

        setattr(owner, attr, timed)

    def totals(self, start: float, end: float) -> dict[str, float]:
        """Each stage's ms over the calls that began inside the window (a step that hands
        out the last first token ends just after it)."""
        out: dict[str, float] = {}
        for name, a, b in self.spans:
            if start <= a <= end:
                out[name] = out.get(name, 0.0) + (b - a) * 1000
        return out

    def sequence(self, start: float, end: float, limit: int = 120) -> list[list[Any]]:
        """The calls that began inside the window in order: [stage, start ms, ms]."""
        rows = sorted((a, name, b) for name, a, b in self.spans if start <= a <= end)
        return [[name, round((a - start) * 1000, 2), round((b - a) * 1000, 2)]
                for a, name, b in rows[:limit]]


def instrument(engine: Any, sync: bool) -> Stages:
    import mlx_lm.generate  # noqa: F401 - the module (the package exports a function of that name)

    gen = sys.modules["mlx_lm.generate"]
    st = Stages(sync)
    for attr in ("step", "submit", "_schedule", "_start_single", "_insert_batch",
                 "_single_to_batch", "_step_single", "_step_batch", "_save_rows", "_retire",
                 "_compact", "_batch_to_single", "_apply_cancels", "_join_prefilled",
                 "_cache_for", "_prefill_alone", "_group_first_tokens", "_sample_rows",
                 "_next_group", "_remember"):
        st.wrap(engine, attr)
    batch_mod = sys.modules["core.engines.mlx.batch"]
    st.wrap(batch_mod, "group_pass", "group_pass")
    st.wrap(sys.modules["core.engines.mlx.single"], "to_bucketed", "to_bucketed")
    st.wrap(engine._prefix, "fetch", "prefix.fetch")
    st.wrap(engine._prefix, "settle", "prefix.settle")
    st.wrap(engine._prefix, "tokens_for", "prefix.tokens_for")
    if engine._kv is not None:
        st.wrap(engine._kv, "idle_step", "kv.idle_step")
        st.wrap(engine._kv, "lookup", "kv.lookup")
        st.wrap(engine._kv, "finished", "kv.finished")
        st.wrap(engine._kv, "engine_busy", "kv.engine_busy")
    st.wrap(engine._bg, "next", "bg.next")
    st.wrap(engine._bg, "remove", "bg.remove")
    st.wrap(engine._bg, "insert", "bg.insert")
    # mlx_lm internals, by module/class attribute (looked up at call time)
    st.wrap(gen, "_merge_caches", "bg.merge_caches")
    st.wrap(gen, "_extend_cache", "bg.extend_cache")
    st.wrap(gen.PromptProcessingBatch, "prompt", "bg.prompt")
    st.wrap(gen.PromptProcessingBatch, "split", "bg.split")
    st.wrap(gen.PromptProcessingBatch, "generate", "bg.generate")
    st.wrap(type(engine._bg._generation_batch), "next", "bg.decode")
    return st


def run_turns(engine: Any, st: Stages, plan: Plan, spread_ms: float, salt: int,
              gap_ms: float) -> dict[str, Any]:
    """Scenario b on the engine; per turn kind the TTFT rows and the later turns' stages."""
    from core.engines.base import GenerationRequest, SamplingParams
    from core.events import Done, TextDelta, Usage

    convs = [[{"role": "system", "content": system_prompt(plan.b_system[i], salt * 10 + i)}]
             for i in range(plan.b_convs)]
    rows: dict[str, list[dict[str, Any]]] = {"turn1": [], "later": []}
    stage_rows: list[dict[str, float]] = []
    sequence: list[list[Any]] = []
    windows: list[float] = []
    for t in range(plan.b_turns):
        for i, msgs in enumerate(convs):
            msgs.append({"role": "user", "content": f"Turn {t}: " + words(15 + 9 * i, salt + i + t)})
        reqs = [GenerationRequest(f"s{salt}-t{t}-c{i}", tuple(dict(m) for m in msgs),
                                  SamplingParams(temperature=0.0, max_tokens=plan.b_replies[t]),
                                  session_id=f"s{salt}-c{i}")
                for i, msgs in enumerate(convs)]
        # the client's gap between turns: the engine runs its idle steps meanwhile
        gap_end = time.perf_counter() + gap_ms / 1000
        while time.perf_counter() < gap_end:
            if engine.has_work():
                engine.step()
            else:
                time.sleep(0.0005)
        t0 = time.perf_counter()
        submitted: dict[str, float] = {}
        first_text: dict[str, float] = {}
        text: dict[str, list[str]] = {r.request_id: [] for r in reqs}
        usage: dict[str, Usage] = {}
        done: set[str] = set()
        nxt = 0
        while len(done) < len(reqs):
            now = time.perf_counter()
            while nxt < len(reqs) and now >= t0 + nxt * spread_ms / 1000:
                submitted[reqs[nxt].request_id] = time.perf_counter()
                engine.submit(reqs[nxt])
                nxt += 1
            if not engine.has_work():
                time.sleep(0.0002)
                continue
            for rid, events in engine.step():
                for e in events:
                    if isinstance(e, TextDelta):
                        text[rid].append(e.text)
                        if rid not in first_text and e.text.strip():
                            first_text[rid] = time.perf_counter()
                    elif isinstance(e, Usage):
                        usage[rid] = e
                    elif isinstance(e, Done):
                        done.add(rid)
        kind = "turn1" if t == 0 else "later"
        last_first = max(submitted[r.request_id] + usage[r.request_id].ttft_ms / 1000
                         for r in reqs)
        for r in reqs:
            u = usage[r.request_id]
            rows[kind].append({
                "ttft_ms": u.ttft_ms,
                "text_ttft_ms": ((first_text.get(r.request_id, time.perf_counter())
                                  - submitted[r.request_id]) * 1000),
                "prompt": u.prompt_tokens, "cached": u.cached_tokens})
        if t > 0:
            stage_rows.append(st.totals(t0, last_first))
            sequence = st.sequence(t0, last_first)
            windows.append((last_first - t0) * 1000)
        for msgs, r in zip(convs, reqs, strict=True):
            msgs.append({"role": "assistant", "content": "".join(text[r.request_id])})
    out: dict[str, Any] = {}
    for kind, rs in rows.items():
        ttfts = [r["ttft_ms"] for r in rs]
        texts = [r["text_ttft_ms"] for r in rs]
        out[kind] = {"n": len(rs), "ttft_p50_ms": round(statistics.median(ttfts), 1),
                     "ttft_p95_ms": round(pct(ttfts, 0.95), 1),
                     "text_ttft_p50_ms": round(statistics.median(texts), 1),
                     "prompt_p50": statistics.median(r["prompt"] for r in rs),
                     "cached_p50": statistics.median(r["cached"] for r in rs)}
    names = sorted({k for s in stage_rows for k in s})
    out["later_window_ms"] = [round(w, 1) for w in windows]
    out["later_stages_ms"] = {k: round(statistics.median(s.get(k, 0.0) for s in stage_rows), 2)
                              for k in names}
    out["later_steps"] = [round(s.get("step", 0.0), 1) for s in stage_rows]
    out["last_later_sequence"] = sequence  # the last later turn's calls, in order
    return out


def raw_batch(model: Any, prompts: list[list[int]], caches: list[list[Any]],
              cached: list[int]) -> float:
    """ms until every prompt has its first token through a bare BatchGenerator, each
    over a copy of its cache (what the peer does with its own prompt cache)."""
    import copy

    import mlx.core as mx
    from mlx_lm.generate import BatchGenerator

    bg = BatchGenerator(model, stop_tokens=[], completion_batch_size=64, prefill_batch_size=8)
    copies = [copy.deepcopy(c) for c in caches]
    mx.eval([c.state for cs in copies for c in cs])
    mx.synchronize()
    t0 = time.perf_counter()
    uids = bg.insert([p[n:] for p, n in zip(prompts, cached, strict=True)],
                     max_tokens=[4] * len(prompts), caches=copies,
                     all_tokens=[p[:n] for p, n in zip(prompts, cached, strict=True)])
    seen: set[int] = set()
    while len(seen) < len(uids):
        _, gen = bg.next()
        seen.update(r[0] if isinstance(r, tuple) else r.uid for r in gen)
    ms = (time.perf_counter() - t0) * 1000
    bg.close()
    return ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny random qwen3 on the CPU")
    ap.add_argument("--spread-ms", default="0,3", help="arrival spreads to run, comma-separated")
    ap.add_argument("--gap-ms", type=float, default=5.0, help="client time between turns")
    ap.add_argument("--no-sync", action="store_true", help="do not synchronise at stage ends")
    ap.add_argument("--rounds", type=int, default=2, help="scenario runs per spread")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out")
    args = ap.parse_args()
    import mlx.core as mx

    if args.quick:
        mx.set_default_device(mx.cpu)
    from core.engines.base import ModelSpec
    from core.engines.mlx import MlxEngine
    from tests.fixtures.mlx_models import QWEN3_0_6B_SHAPE, QWEN3_SHAPE, build_model_dir

    work = Path(tempfile.mkdtemp(prefix="llmdeck-later-turn-"))
    os.environ["LLMDECK_HOME"] = str(work / "home")
    shape = QWEN3_SHAPE if args.quick else untied(QWEN3_0_6B_SHAPE)
    dtype = "float32" if args.quick else "bfloat16"
    model_dir = build_model_dir(work / "model", shape, dtype=dtype)
    options: list[tuple[str, Any]] = [("max_concurrency", 64)]
    for kv in args.option:
        key, _, value = kv.partition("=")
        try:  # numbers, true/false as JSON; anything else as text
            options.append((key, json.loads(value)))
        except ValueError:
            options.append((key, value))
    if not any(k == "kv_disk_gb" for k, _ in options):
        options.append(("kv_disk_gb", 8))
    t = time.perf_counter()
    engine = MlxEngine(ModelSpec(str(model_dir), "mlx", context_size=8192, options=tuple(options)))
    result: dict[str, Any] = {"bench": "later_turn", "device": str(mx.default_device()),
                              "model": f"{shape['model_type']} hidden {shape['hidden_size']} "
                                       f"x{shape['num_hidden_layers']} {dtype}",
                              "options": [f"{k}={v}" for k, v in options],
                              "load_s": round(time.perf_counter() - t, 1), "runs": {}}
    plan = Plan(args.quick)
    st = instrument(engine, not args.no_sync)
    # one untimed round: shapes compile, the caches settle
    run_turns(engine, st, plan, 0.0, 999, args.gap_ms)
    for spread in [float(s) for s in args.spread_ms.split(",") if s]:
        for r in range(args.rounds):
            st.spans.clear()
            got = run_turns(engine, st, plan, spread, 100 * r + int(spread * 10) + 1, args.gap_ms)
            result["runs"][f"spread_{spread:g}ms_round{r}"] = got
    result["seconds"] = round(time.perf_counter() - t, 1)
    engine.close()
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
