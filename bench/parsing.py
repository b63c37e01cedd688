"""Throughput of StreamParser per family on a mixed stream fed in token-sized chunks.

The parser runs in the worker on every decoded token, so it must never be what limits
streaming: the target is >= 2 MB/s per family on one core. Each family gets a stream of
reasoning, Markdown prose with code (plenty of `<`, `[` and backticks that look like the
start of markup) and tool calls in its own format, cut into 3-6 character pieces.

Baseline, in the same run over the same pieces: the least a per-token parser can do in
Python, one precompiled regex search of the family's markers per piece plus appending the
piece (`raw_chunk_mb_s`); `vs_raw_chunk_ratio` is ours / that (higher is better). A
whole-text `re.finditer` pass is reported too, as the C-speed ceiling.

Usage: python bench/parsing.py [--quick]   (prints one JSON object)
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.events import ToolCall  # noqa: E402
from core.parsing import FAMILIES, StreamParser, family_markers  # noqa: E402

TARGET_MB_S = 2.0

PROSE = (
    "Here is how it works. The check `a < b` keeps items where x[i] > 0, and the result is "
    "a list like [1, 2, 3].\n\n```python\ndef keep(xs: list[int]) -> dict[str, int]:\n"
    "    return {str(k): v for k, v in enumerate(xs) if v > 0}  # <- note the <\n```\n\n"
    "The **result** is sorted; see <https://example.com/docs> and the <b>table</b> below.\n"
    "| name | value |\n|------|-------|\n| a    | 1     |\n\n"
)
THOUGHT = (
    "The user wants the weather in two cities. I should call get_weather for each, then "
    "compare: if t1 < t2 say the second is warmer. Arguments need {city, unit}.\n"
)

DS = {k: f"<｜{k}｜>" for k in ("tool▁calls▁begin", "tool▁calls▁end", "tool▁call▁begin",
                                "tool▁call▁end", "tool▁sep")}
_ARGS = '{"city": "Paris", "unit": "celsius"}'
_JSON_CALL = '{"name": "get_weather", "arguments": ' + _ARGS + "}"

CALLS = {
    "hermes": f"<tool_call>\n{_JSON_CALL}\n</tool_call>",
    "qwen3": f"<tool_call>\n{_JSON_CALL}\n</tool_call>",
    "qwen3-coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>",
    "llama3": '<|python_tag|>{"name": "get_weather", "parameters": ' + _ARGS + "}<|eom_id|>",
    "mistral": "[TOOL_CALLS]get_weather[ARGS]" + _ARGS,
    "glm": "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
    "<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n</tool_call>",
    "deepseek": DS["tool▁calls▁begin"] + DS["tool▁call▁begin"] + "get_weather" + DS["tool▁sep"]
    + _ARGS + DS["tool▁call▁end"] + DS["tool▁calls▁end"],
    "kimi": "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    "<|tool_call_argument_begin|>" + _ARGS + "<|tool_call_end|><|tool_calls_section_end|>",
    "gpt-oss": "<|start|>assistant<|channel|>commentary to=functions.get_weather "
    "<|constrain|>json<|message|>" + _ARGS + "<|call|>",
    "lfm2": '<|tool_call_start|>[get_weather(city="Paris", unit="celsius")]<|tool_call_end|>',
    "minimax": '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris'
    '</parameter>\n<parameter name="unit">celsius</parameter>\n</invoke>\n</minimax:tool_call>',
    "gemma": '```tool_code\nprint(get_weather(city="Paris", unit="celsius"))\n```\n',
    "plain": "",
}


def turn(family: str) -> str:
    """One turn of reasoning, prose and a tool call in the family's own markup."""
    if family == "gpt-oss":
        return (f"<|start|>assistant<|channel|>analysis<|message|>{THOUGHT}<|end|>"
                f"<|start|>assistant<|channel|>final<|message|>{PROSE}<|end|>{CALLS[family]}")
    if family == "mistral":
        # [TOOL_CALLS] runs to the end of the message, so the call closes with </s> here.
        return f"[THINK]{THOUGHT}[/THINK]{PROSE}{CALLS[family]}</s>"
    think = f"<think>\n{THOUGHT}</think>\n\n" if family not in ("llama3", "gemma") else ""
    return think + PROSE + CALLS[family] + "\n"


def stream_for(family: str, size: int) -> str:
    one = turn(family)
    return one * max(1, size // len(one))


def chunks(text: str, seed: int) -> list[str]:
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        n = rng.randint(3, 6)
        out.append(text[i : i + n])
        i += n
    return out


def run_parser(family: str, pieces: list[str]) -> tuple[float, int]:
    parser = StreamParser(family)
    calls = 0
    t0 = time.process_time()
    for piece in pieces:
        for ev in parser.feed(piece):
            if type(ev) is ToolCall:
                calls += 1
    for ev in parser.finish():
        if type(ev) is ToolCall:
            calls += 1
    return time.process_time() - t0, calls


def run_raw_chunk(pattern: re.Pattern[str], pieces: list[str]) -> float:
    out: list[str] = []
    append, search = out.append, pattern.search
    t0 = time.process_time()
    for piece in pieces:
        search(piece)
        append(piece)
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small streams, one repeat (CI)")
    args = ap.parse_args()
    size, repeats = (200_000, 2) if args.quick else (1_000_000, 3)

    results: dict[str, dict[str, float | int]] = {}
    whole_rates = []
    for family in FAMILIES:
        text = stream_for(family, size)
        nbytes = len(text.encode())
        pieces = chunks(text, seed=1)
        pattern = re.compile("|".join(map(re.escape, sorted(family_markers(family), key=len,
                                                           reverse=True))) or "$^")
        ours = min(run_parser(family, pieces)[0] for _ in range(repeats))
        _, calls = run_parser(family, pieces)
        raw = min(run_raw_chunk(pattern, pieces) for _ in range(repeats))
        t0 = time.process_time()
        sum(1 for _ in pattern.finditer(text))
        whole_rates.append(nbytes / (time.process_time() - t0) / 1e6)
        expected_calls = text.count(turn(family)) if CALLS[family] else 0
        results[family] = {
            "mb_s": round(nbytes / ours / 1e6, 2),
            "raw_chunk_mb_s": round(nbytes / raw / 1e6, 2),
            "vs_raw_chunk_ratio": round(raw / ours, 3),
            "bytes": nbytes,
            "feeds": len(pieces),
            "us_per_feed": round(ours / len(pieces) * 1e6, 3),
            "tool_calls": calls,
            "tool_calls_ok": calls == expected_calls,
        }
    min_mb_s = min(r["mb_s"] for r in results.values())
    print(json.dumps({
        "bench": "parsing",
        "quick": args.quick,
        "chunk_chars": "3-6",
        "target_mb_s": TARGET_MB_S,
        "min_mb_s": min_mb_s,
        "meets_target": min_mb_s >= TARGET_MB_S,
        "all_tool_calls_ok": all(r["tool_calls_ok"] for r in results.values()),
        "regex_whole_text_mb_s": round(min(whole_rates), 1),
        "families": results,
    }, indent=1))


if __name__ == "__main__":
    main()
