"""Start-up benchmark for `llmdeck` as the engine service's client (issue 30, item 4).

Three ways to open the app, each a fresh Python running the app as the `llmdeck` command
builds it (tui.cli.build_app, headless Textual), timed from just before its exec:

- cold: no service runs; the app starts one, which loads the model (the bundled Gemma
  GGUF in a llama.cpp worker).
- warm: the service runs with the model loaded and has answered a few replies (each
  llama.cpp worker's first reply costs seconds, once); the app only attaches.
- in_process: today's app with its own Runtime (`--in-process`): it loads the model in a
  worker of its own. No service runs meanwhile (it would hold a second copy).

For each: ready (launch to the model's state being "ready" on the app's status bar, when
a message sent is answered at once) and first_token (launch to the first reply text on
screen, the message sent right at ready); paint_to_ready is the part after the app's
first frame, first_frame the part before it, and warm_newest_conversation the launch to
the conversation of the reply the warm service just finished being on screen (for warm: connecting, the model's state and settings over the socket; the
rest of ready is Python and Textual starting, the same for all three). A round runs cold, warm, then in_process, so
each round is a pair for the ratios; medians over rounds.
Ratios are named *_ratio as ours over theirs, higher is better:
in_process_over_warm_ready_ratio = in_process ready / warm ready (how many times sooner a
warm attach can send), likewise for first token and for cold.

    python bench/service_start.py --quick    # 3 rounds; one JSON object on stdout
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from bench.stats import pct  # noqa: E402


# -- the probe: one app, run as `python bench/service_start.py --probe service|inproc` ----
async def _probe(in_process: bool) -> None:
    from tui.cli import build_app

    app = build_app(in_process=in_process)
    async with app.run_test(headless=True, size=(100, 30)) as pilot:
        print(f"PAINT {time.monotonic()}", flush=True)  # mounted: the first frame is out
        from tui.widgets.status_bar import StatusBar

        bar = app.main.query_one(StatusBar)
        opened = None  # when the conversation start-up opens (warm: the newest reply's) shows
        while app.runtime.model.state != "ready" or getattr(bar, "opening", False):
            if app.runtime.model.state == "failed":
                print(f"FAILED {app.runtime.model.error}", flush=True)
                return
            if opened is None and app.main.chat.views:
                opened = time.monotonic()
            await pilot.pause(0.005)
        print(f"READY {time.monotonic()}", flush=True)
        if not hasattr(bar, "opening"):  # an llmdeck before issue 48: it may open later
            for _ in range(400):
                if app.main.chat.views:
                    break
                await pilot.pause(0.005)
        if opened is None and app.main.chat.views:
            opened = time.monotonic()
        if opened is not None:
            print(f"OPEN {opened}", flush=True)
        app.main.send("Say hello.")
        while not any(v.role == "assistant" and v.content for v in app.main.chat.views):
            await pilot.pause(0.002)
        print(f"TOKEN {time.monotonic()}", flush=True)
        if app.main.turn is not None:
            app.main.turn.cancel()  # the service would go on generating into the next run
        for _ in range(200):
            if app.main.turn is None:
                break
            await pilot.pause(0.01)
        await app.runtime.close()
    os._exit(0)


# -- the parent ------------------------------------------------------------------------
def _run_probe(kind: str, env: dict[str, str]) -> tuple[float, float, float, float, float]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--probe", kind],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    marks = {}
    for line in proc.stdout.splitlines():
        word, _, value = line.partition(" ")
        if word in ("PAINT", "READY", "TOKEN", "OPEN"):
            marks[word] = float(value)
        if word == "FAILED":
            raise SystemExit(f"{kind}: the model failed to load: {value}")
    if "TOKEN" not in marks:
        raise SystemExit(f"{kind} probe ended early:\n{proc.stdout}\n{proc.stderr[-2000:]}")
    opened = (marks["OPEN"] - start) * 1000 if "OPEN" in marks else float("nan")
    return ((marks["READY"] - start) * 1000, (marks["TOKEN"] - start) * 1000,
            (marks["READY"] - marks["PAINT"]) * 1000, (marks["PAINT"] - start) * 1000, opened)


WARM_REPLIES = """
import asyncio
from core.events import TextDelta
from core.service import RemoteRuntime, connect

async def main():
    rt = RemoteRuntime(await connect("bench"))
    await rt.start()
    for _ in range(3):  # each worker's first reply is slow (~8 s here): a warm service has
        turn = await rt.start_turn(None, "Say hello.")  # answered before
        async for event in turn.events():
            if isinstance(event, TextDelta) and event.text:
                break
        await rt.cancel_turn(turn.turn_id)
        await asyncio.sleep(0.5)
    await rt.close()

asyncio.run(main())
"""


def _llmdeck(env: dict[str, str], *args: str) -> str:
    return subprocess.run([sys.executable, "-m", "tui.cli", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120).stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probe", choices=("service", "inproc"), help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    if args.probe:
        asyncio.run(_probe(args.probe == "inproc"))
        return 0
    rounds = 3 if args.quick else args.rounds
    home = Path(tempfile.mkdtemp(prefix="llmdeck-bench-start-"))
    env = {**os.environ, "LLMDECK_HOME": str(home), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(ROOT), "LLMDECK_IN_PROCESS": ""}
    try:
        subprocess.run([sys.executable, "-m", "tui.cli", "models", "restore-default"], env=env,
                       cwd=ROOT, capture_output=True, timeout=600, check=True)
        _run_probe("inproc", env)  # untimed: bytecode and page cache, as an installed app
        runs: dict[str, list[tuple[float, ...]]] = {"cold": [], "warm": [], "in_process": []}
        for _ in range(rounds):
            runs["cold"].append(_run_probe("service", env))  # starts the service
            subprocess.run([sys.executable, "-c", WARM_REPLIES], env=env, cwd=ROOT,
                           capture_output=True, timeout=300, check=True)
            runs["warm"].append(_run_probe("service", env))  # attaches to it
            _llmdeck(env, "service", "stop")
            runs["in_process"].append(_run_probe("inproc", env))
    finally:
        _llmdeck(env, "service", "stop")
        shutil.rmtree(home, ignore_errors=True)
    out: dict[str, object] = {"rounds": rounds, "model": "bundled Gemma 3 270M GGUF (llama.cpp)"}
    for name, pairs in runs.items():
        out[f"{name}_ready_p50_ms"] = round(pct([p[0] for p in pairs], 0.5), 1)
        out[f"{name}_first_token_p50_ms"] = round(pct([p[1] for p in pairs], 0.5), 1)
        out[f"{name}_paint_to_ready_p50_ms"] = round(pct([p[2] for p in pairs], 0.5), 1)
        out[f"{name}_first_frame_p50_ms"] = round(pct([p[3] for p in pairs], 0.5), 1)
    # warm: launch to the newest conversation on screen (the reply the service just
    # finished opens at start; issue 48)
    out["warm_newest_conversation_p50_ms"] = round(pct([p[4] for p in runs["warm"]], 0.5), 1)
    for what, index in (("ready", 0), ("first_token", 1)):
        for ours in ("warm", "cold"):
            ratios = [i[index] / o[index] for o, i in zip(runs[ours], runs["in_process"],
                                                          strict=True)]
            out[f"in_process_over_{ours}_{what}_ratio"] = round(pct(ratios, 0.5), 2)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
