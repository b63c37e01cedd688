"""UI benchmark: how the TUI keeps up with a fast stream, and how fast it starts.

Runs under Textual's headless driver with the scripted engine (in its real worker
process) streaming N tokens at a fixed rate. A paint is timed where the compositor hands
its update to the driver (App._display), so "on screen" means "rendered for the terminal".

Figures (one JSON object on stdout):
- key_latency_p50_ms / key_latency_p95_ms: a key typed into the composer while the reply
  streams, to the first paint that shows it (target p95 <= 50 ms).
- token_lateness_p95_ms: each token's first paint against its due time at the engine's
  rate, anchored at the first token (target <= 100 ms).
- app_cpu_us_per_token: CPU time of the app process (UI loop + store thread) per token.
- start_ms / bare_start_ms / start_vs_bare: from constructing the app to interactive
  (conversation list filled, composer focused) with a DB of 10,000 conversations, next to
  a bare Textual app with an Input, in the same process (ratio: lower is better, target <= 2).
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
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def seed_db(conversations: int) -> None:
    """A history of `conversations` chats with two messages each, via executemany."""
    from core import paths
    from core.store import Store

    now = time.time()
    with Store.open(paths.db_path()) as store, store._write() as conn:
        conv_rows, msg_rows = [], []
        for i in range(conversations):
            cid, q, a = uuid.uuid4().hex, uuid.uuid4().hex, uuid.uuid4().hex
            t = now - (conversations - i)
            conv_rows.append((cid, f"Conversation {i} about topic {i % 97}", "auto", "bench", t, t, a))
            msg_rows.append((q, cid, None, "user", f"Question {i} on topic {i % 97}?", t))
            msg_rows.append((a, cid, q, "assistant", f"Answer {i}: it depends on {i % 13}.", t))
        conn.executemany(
            "INSERT INTO conversations (id, title, title_source, model, created_at, updated_at, "
            "active_leaf_id) VALUES (?, ?, ?, ?, ?, ?, ?)", conv_rows)
        conn.executemany(
            "INSERT INTO messages (id, conversation_id, parent_id, role, content, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)", msg_rows)


async def wait_for(predicate, timeout: float = 60.0, step: float = 0.002) -> None:
    deadline = time.perf_counter() + timeout
    while not predicate():
        if time.perf_counter() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(step)


async def start_time_ours() -> float:
    from core.config import Settings
    from core.runtime import Runtime
    from tui.app import LlmdeckApp

    t0 = time.perf_counter()
    app = LlmdeckApp(Runtime(Settings()), preload=False)
    async with app.run_test(size=(120, 40)):
        await wait_for(lambda: hasattr(app, "main") and app.main.is_mounted
                       and app.main.query_one("#conversations").option_count > 1
                       and app.main.composer.has_focus)
        elapsed = time.perf_counter() - t0
    return elapsed * 1000


async def start_time_bare() -> float:
    from textual.app import App
    from textual.widgets import Footer, Input, Static

    class Bare(App):
        def compose(self):
            yield Static("bare")
            yield Input(id="i")
            yield Footer()

        def on_mount(self) -> None:
            self.query_one(Input).focus()

    t0 = time.perf_counter()
    app = Bare()
    async with app.run_test(size=(120, 40)):
        await wait_for(lambda: app.is_mounted and app.query_one(Input).has_focus)
        elapsed = time.perf_counter() - t0
    return elapsed * 1000


async def stream_run(tokens: int, rate: float) -> dict[str, float]:
    from textual import events

    from core.config import Settings
    from core.engines.base import ModelSpec
    from core.runtime import Runtime
    from tui.app import LlmdeckApp
    from tui.widgets.message_view import MessageView

    chunk = 4
    # 4 characters a token, words and paragraphs like prose (a paragraph every 60 tokens).
    reply = "".join(("\n\n" if i % 60 == 59 else " ") + f"w{i % 100:02d}" for i in range(tokens))
    spec = ModelSpec(path="scripted", engine="scripted", context_size=1 << 20,
                     options=(("reply", reply), ("chunk_chars", chunk), ("tokens_per_s", rate),
                              ("label", "bench")))
    settings = Settings()
    settings.sampling.max_tokens = tokens + 10
    app = LlmdeckApp(Runtime(settings, model_spec=spec))
    paints: list[tuple[float, int, int]] = []  # (time, reply chars shown, composer chars)
    state = {"reply": None}
    original = app._display

    def timed_display(screen, renderable) -> None:
        original(screen, renderable)
        if renderable is None:
            return
        view = state["reply"]
        shown = len(view.body.source) if view is not None else 0
        paints.append((time.perf_counter(), shown, len(app.main.composer.text)))

    app._display = timed_display  # type: ignore[method-assign]
    key_lat: list[float] = []
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(lambda: app.runtime.model.state == "ready")
        await pilot.press(*"go", "enter")
        await wait_for(lambda: len(app.main.query(MessageView)) >= 2)
        state["reply"] = list(app.main.query(MessageView))[-1]
        cpu0 = time.process_time()
        await wait_for(lambda: state["reply"].content)
        t_stream = time.perf_counter()
        # Type while it streams: one key every 50 ms, each timed to the paint that shows it.
        while app.main.turn is not None:
            before = len(app.main.composer.text)
            t0 = time.perf_counter()
            app.main.composer.post_message(events.Key("x", "x"))
            try:
                await wait_for(lambda b=before, s=t0: any(p[2] > b and p[0] >= s for p in paints[-50:]),
                               timeout=5, step=0.001)
            except TimeoutError:
                break
            hit = next(p for p in paints if p[2] > before and p[0] >= t0)
            key_lat.append((hit[0] - t0) * 1000)
            await asyncio.sleep(0.05)
        await wait_for(lambda: app.main.turn is None, timeout=120)
        cpu = time.process_time() - cpu0
        stream_s = time.perf_counter() - t_stream
        await pilot.pause(0.2)
        shown_total = len(state["reply"].body.source)
    # Token lateness: first paint showing token i vs. anchor + i / rate.
    firsts: list[tuple[int, float]] = []
    seen = 0
    for t, shown, _ in paints:
        count = shown // chunk
        if count > seen:
            firsts.append((count, t))
            seen = count
    lateness: list[float] = []
    if firsts:
        anchor = firsts[0][1]
        prev = 0
        for count, t in firsts:
            for i in range(prev, count):
                lateness.append(max(0.0, (t - (anchor + i / rate)) * 1000))
            prev = count
    return {
        "tokens": tokens,
        "tokens_on_screen": shown_total // chunk,
        "rate_tok_s": rate,
        "key_latency_p50_ms": round(pct(key_lat, 0.5), 2),
        "key_latency_p95_ms": round(pct(key_lat, 0.95), 2),
        "keys_timed": len(key_lat),
        "token_lateness_p50_ms": round(pct(lateness, 0.5), 2),
        "token_lateness_p95_ms": round(pct(lateness, 0.95), 2),
        "app_cpu_us_per_token": round(cpu / max(1, tokens) * 1e6, 1),
        "paints": len(paints),
        "stream_s": round(stream_s, 2),
    }


async def main_async(args: argparse.Namespace) -> dict[str, object]:
    result: dict[str, object] = {"bench": "ui", "quick": args.quick}
    result.update(await stream_run(args.tokens, args.rate))
    seed_db(args.conversations)
    ours, bare = [], []
    for _ in range(args.repeats):
        bare.append(await start_time_bare())
        ours.append(await start_time_ours())
    result["conversations_in_db"] = args.conversations
    result["start_ms"] = round(statistics.median(ours), 1)
    result["bare_start_ms"] = round(statistics.median(bare), 1)
    result["start_vs_bare"] = round(result["start_ms"] / result["bare_start_ms"], 2)  # type: ignore[operator]
    result["targets"] = {"key_latency_p95_ms": 50, "token_lateness_p95_ms": 100, "start_vs_bare": 2.0}
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI size: 2,000 tokens, 1 start each")
    parser.add_argument("--tokens", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.quick:
        args.tokens, args.repeats = 2000, 2
    home = tempfile.mkdtemp(prefix="llmdeck-bench-ui-")
    os.environ["LLMDECK_HOME"] = home
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(json.dumps(asyncio.run(main_async(args))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
