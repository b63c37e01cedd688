"""Should the person's turn take every core while the other replicas hold? (issue 45)

A model's llama.cpp replicas share the cores (core.engines.llama_params: two replicas on
2 cores run a thread each), and while a person's turn is prefilled the other replicas
hold, their step in flight cut short (core.workers.turn_hold, core.engines.llama_abort):
the cores they leave are idle. This times the app's turn (the base transcript reused,
the question new, as bench/priority.py sends it) on one replica's context at its share
of threads and at every usable core, alternating, in this process: if every core is
clearly faster on a quiet box, the kept replica should switch its thread count for a
turn's prefill (llama_set_n_threads). Prints one JSON object of medians.

    python bench/turn_threads.py                      # the short question
    python bench/turn_threads.py --prompt-tokens 600  # a long one

Measured on the shared 2-core box under load 4 (other engineers' tests running):
every core was slower, 112 against 77 ms (short) and 3,070 against 1,606 ms (600
tokens): a thread that waits for a busy core stalls every barrier of the graph.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FILLER = "The quick brown fox jumps over the lazy dog near the old river bank. "  # ~15 tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompt-tokens", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ.setdefault("LLMDECK_HOME", home)
        import llama_cpp

        from core.bundled import provision_bundled_chat
        from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
        from core.engines.llama_params import usable_cores
        from core.engines.llamacpp import LlamaCppEngine
        from core.events import Usage

        engine = LlamaCppEngine(ModelSpec(str(provision_bundled_chat()), "llamacpp",
                                          context_size=2048,
                                          options=(("replicas", 2), ("replica", 0))))
        pad = max(0, (args.prompt_tokens - 125) // 15)

        def turn(i: int) -> Usage:
            question = (f"q{i}: " + FILLER * pad if pad else "") + f"Tell me about item {i}."
            engine.submit(GenerationRequest(f"r{i}", ({"role": "user", "content": question},),
                                            SamplingParams(temperature=0.0, max_tokens=2),
                                            interactive=True))
            usage = None
            while engine.has_work():
                for _, events in engine.step():
                    usage = next((e for e in events if isinstance(e, Usage)), usage)
            assert usage is not None
            return usage

        counts = sorted({engine.threads, usable_cores()})
        times: dict[int, list[float]] = {n: [] for n in counts}
        usage = turn(-1)
        for i in range(args.rounds):
            for n in counts:
                llama_cpp.llama_set_n_threads(engine._llm._ctx.ctx, n, n)
                usage = turn(i * len(counts) + n)
                times[n].append(usage.ttft_ms)
        engine.close()
    print(json.dumps({
        **{f"ttft_ms_threads_{n}": round(statistics.median(v), 1) for n, v in times.items()},
        "prompt_tokens": usage.prompt_tokens, "cached_tokens": usage.cached_tokens,
        "rounds": args.rounds, "cpus": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
    main()
