"""UI benchmark: how the TUI keeps up with a fast stream, and how fast it starts.

Stream phase (in this process, Textual's headless driver): the scripted engine, in its
real worker process, streams N tokens at a fixed rate (default 5,000 at 1,000 tok/s; one
8-character token per engine step, each carrying its number, e.g. "  w00042"). Meanwhile a
key is typed into the composer every 50 ms through the driver, as a terminal would send
it. Every frame the compositor hands to the driver is also turned into the terminal byte
stream a real terminal would get (headless Textual skips that step; we do it so its cost
counts), and kept with its time.

- key_latency_p50_ms / p95_ms: a key sent by the driver, to the first frame painted with
  the composer holding that character (target p95 <= 50 ms).
- token_lateness_p50_ms / p95_ms: each token's emission time in the worker (the engine's
  emission log, time.monotonic(), one clock for both processes) to the first painted frame
  whose bytes show that token's number or a later one (target: none later than 100 ms,
  so max <= 100 ms).
- app_cpu_us_per_token: CPU time of this process (UI loop, store thread, frame encoding)
  from the first token to the end, per token.

Start phase (subprocesses, median of N, bare and ours alternating): time from exec of a
fresh Python to (a) the first frame painted and (b) interactive. "Ours" is the app with
its own Runtime (tui.cli.build_app in process, as the tests and `--in-process` run it:
Settings.load, Runtime, LlmdeckApp, a loopback service; then the model preload in a worker)
with a database of 10,000 conversations; interactive = composer focused and the sidebar
showing the newest conversations. "Client" is what the `llmdeck` command starts: the
service's client, with this home's service already running (client_start_vs_bare; its
sidebar comes over the socket). "Bare" is a Textual app with a Static, an Input and a
Footer, run the same way; interactive = its Input focused. Both run with compiled bytecode,
as an installed app does (one untimed run of each writes it first). start_vs_bare is ours/bare
for interactive and first_paint_vs_bare for the first frame (lower is better, target <= 2).
`--start-only` runs this phase alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from bench.stats import pct  # noqa: E402

TOKEN_CHARS = 8
KEY_EVERY_S = 0.05


def token_text(i: int) -> str:
    """Token i, exactly TOKEN_CHARS characters, its number readable on screen; a paragraph
    every 60 tokens like prose."""
    return (f"\n\nw{i:05d}" if i % 60 == 59 else f"  w{i:05d}")


# -- start-up probes (run as `python bench/ui.py --probe bare|ours`) -----------------------
def probe(kind: str) -> None:
    """Run one app headless; print PAINT <t> at its first frame and READY <t> when
    interactive (time.monotonic()), then leave without shutdown work."""
    from textual.app import App

    state = {"painted": False}
    original = App._display

    def report(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def timed_display(self, screen, renderable) -> None:  # noqa: ANN001
        original(self, screen, renderable)
        if renderable is None:
            return
        now = time.monotonic()
        if not state["painted"]:
            state["painted"] = True
            report(f"PAINT {now}")
        if self.bench_ready():
            report(f"READY {now}")
            os._exit(0)

    App._display = timed_display  # type: ignore[method-assign]
    if kind == "bare":
        from textual.widgets import Footer, Input, Static

        class Bare(App):
            def compose(self):  # noqa: ANN202
                yield Static("bare")
                yield Input(id="i")
                yield Footer()

            def on_mount(self) -> None:
                self.query_one(Input).focus()

            def bench_ready(self) -> bool:
                return self.focused is not None

        Bare().run(headless=True, size=(120, 40))
        return
    from tui.cli import build_app

    # "ours": the app with its own Runtime (in process, as the tests run it); "client": what
    # the `llmdeck` command starts, the service's client, with the home's service running.
    app = build_app(in_process=kind == "ours")

    def ours_ready() -> bool:
        main = getattr(app, "main", None)
        if main is None or not main.is_mounted:
            return False
        return main.query_one("#conversations").option_count > 1 and main.composer.has_focus

    app.bench_ready = ours_ready  # type: ignore[attr-defined]
    app.run(headless=True, size=(120, 40))


def seed_db(conversations: int) -> None:
    """A history of `conversations` chats with two messages each, via executemany."""
    import uuid

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


def start_once(kind: str) -> tuple[float, float]:
    """(first paint, interactive) in ms from exec, for one fresh process."""
    import subprocess

    env = os.environ.copy()
    # As installed: pip compiles an installed package's bytecode, so the probes may write
    # theirs (to a cache folder of this run, not into the repo) even where the environment
    # says PYTHONDONTWRITEBYTECODE; the untimed warm-up runs write it.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(Path(os.environ["LLMDECK_HOME"]) / "pycache")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--probe", kind],
                          capture_output=True, text=True, timeout=120, env=env)
    marks = dict(line.split() for line in proc.stdout.splitlines() if line[:5] in ("PAINT", "READY"))
    if "READY" not in marks:
        raise RuntimeError(f"{kind} probe never became interactive: {proc.stderr[-2000:]}")
    return (float(marks["PAINT"]) - t0) * 1000, (float(marks["READY"]) - t0) * 1000


def start_phase(conversations: int, repeats: int) -> dict[str, object]:
    import statistics

    from core import paths
    from core.config import Settings

    seed_db(conversations)
    # The model the `llmdeck` command preloads: the scripted engine, in a worker process.
    settings = Settings(model="scripted", engine="scripted")
    settings.save(paths.config_path())
    runs: dict[str, list[tuple[float, float]]] = {"bare": [], "ours": []}
    for kind in ("bare", "ours"):  # warm the OS file cache for both before timing
        start_once(kind)
    for _ in range(repeats):
        for kind in ("bare", "ours"):
            runs[kind].append(start_once(kind))
    runs.update(client_runs(repeats, runs["bare"]))
    med = {k: (statistics.median(p for p, _ in v), statistics.median(r for _, r in v))
           for k, v in runs.items()}
    return {
        "client_first_paint_ms": round(med["client"][0], 1),
        "client_start_ms": round(med["client"][1], 1),
        "client_start_vs_bare": round(med["client"][1] / med["bare"][1], 2),
        "conversations_in_db": conversations,
        "start_repeats": repeats,
        "start_first_paint_ms": round(med["ours"][0], 1),
        "start_ms": round(med["ours"][1], 1),
        "bare_first_paint_ms": round(med["bare"][0], 1),
        "bare_start_ms": round(med["bare"][1], 1),
        "first_paint_vs_bare": round(med["ours"][0] / med["bare"][0], 2),
        "start_vs_bare": round(med["ours"][1] / med["bare"][1], 2),
    }


def client_runs(repeats: int, bare: list[tuple[float, float]]) -> dict[str, list]:
    """The service's client (`llmdeck` as a person runs it) against this home's running
    service: its sidebar comes over the socket. Bare runs again in between (added to
    `bare`), so both sides see the same moments of a shared box."""
    import subprocess

    service = [sys.executable, "-m", "tui.cli", "service"]
    subprocess.run([*service, "start"], check=True, capture_output=True, timeout=120)
    try:
        start_once("client")  # its bytecode, untimed
        client = []
        for _ in range(repeats):
            client.append(start_once("client"))
            bare.append(start_once("bare"))
        return {"client": client}
    finally:
        subprocess.run([*service, "stop"], capture_output=True, timeout=60)


# -- stream phase ----------------------------------------------------------------------------
async def wait_for(predicate, timeout: float = 60.0, step: float = 0.002) -> None:  # noqa: ANN001
    import asyncio

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(step)


async def stream_run(tokens: int, rate: float, emit_log: Path) -> dict[str, object]:
    import re
    import threading
    from importlib import import_module

    import_module("tui")  # first: its Textual settings apply only before Textual is imported
    from textual import events
    from textual._compositor import CompositorUpdate

    from core.config import Settings
    from core.engines.base import ModelSpec
    from core.runtime import Runtime
    from tui.app import LlmdeckApp

    reply = "".join(token_text(i) for i in range(tokens))
    spec = ModelSpec(path="scripted", engine="scripted", context_size=1 << 22,
                     options=(("reply", reply), ("chunk_chars", TOKEN_CHARS),
                              ("tokens_per_s", rate), ("label", "bench"),
                              ("emit_log", str(emit_log))))
    settings = Settings()
    settings.sampling.max_tokens = tokens + 10
    app = LlmdeckApp(Runtime(settings, model_spec=spec))
    frames: list[tuple[float, str, int]] = []  # (time, terminal bytes, composer chars)
    original = app._display

    def timed_display(screen, renderable) -> None:  # noqa: ANN001
        original(screen, renderable)
        if renderable is None or not isinstance(renderable, CompositorUpdate):
            return
        # What a real terminal driver would be sent (headless Textual skips this work).
        data = renderable.render_segments(app.console)
        frames.append((time.monotonic(), data, len(app.main.composer.text)))

    app._display = timed_display  # type: ignore[method-assign]
    sent: list[tuple[float, int]] = []  # (time, composer chars once this key lands)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(lambda: app.runtime.model.state == "ready")
        await pilot.press(*"go")
        driver = app._driver
        assert driver is not None
        driver.send_message(events.Key("enter", None))
        await wait_for(lambda: app.main.turn is not None and app.main.composer.text == "")
        await wait_for(lambda: any(v.content for v in app.main.chat.views if v.role == "assistant"))
        cpu0 = time.process_time()
        t_first = time.monotonic()
        stop = threading.Event()

        def typist() -> None:
            """Keys on a fixed 50 ms timeline from a thread, the way a terminal driver's
            input thread hands them over (Driver.process_message), whatever the loop does."""
            due = time.monotonic()
            while not stop.is_set():
                sent.append((time.monotonic(), len(sent) + 1))
                driver.process_message(events.Key("x", "x"))
                due += KEY_EVERY_S
                stop.wait(max(0.0, due - time.monotonic()))

        thread = threading.Thread(target=typist, daemon=True)
        thread.start()
        await wait_for(lambda: app.main.turn is None, timeout=tokens / rate * 10 + 60, step=0.01)
        stop.set()
        thread.join()
        cpu = time.process_time() - cpu0
        stream_s = time.monotonic() - t_first
        await pilot.pause(0.3)
    # Keys: first frame at or after the send whose composer holds that many characters.
    key_lat: list[float] = []
    for t_sent, count in sent:
        hit = next((f for f in frames if f[0] >= t_sent and f[2] >= count), None)
        if hit is not None:
            key_lat.append((hit[0] - t_sent) * 1000)
    # Tokens: the highest token number painted so far, frame by frame.
    emitted = json.loads(emit_log.read_text().splitlines()[-1])
    number = re.compile(r"w(\d{5})")
    shown = -1
    lateness: list[float] = []
    for t, data, _ in frames:
        found = [int(n) for n in number.findall(data)]
        top = max(found) if found else -1
        while shown < top:
            shown += 1
            if shown < len(emitted):
                lateness.append(max(0.0, (t - emitted[shown]) * 1000))
    # The latest tokens, to tell a stall (one moment, several neighbours late) from noise:
    # (token, seconds after the first emission, lateness ms).
    worst = sorted(range(len(lateness)), key=lambda i: -lateness[i])[:5]
    worst_tokens = [(i, round(emitted[i] - emitted[0], 3), round(lateness[i], 1)) for i in worst]
    span = emitted[-1] - emitted[0] if len(emitted) > 1 else 0.0
    return {
        "tokens": tokens,
        "rate_tok_s": rate,
        "engine_emitted": len(emitted),
        "engine_rate_tok_s": round((len(emitted) - 1) / span, 1) if span else None,
        "tokens_on_screen": shown + 1,
        "keys_sent": len(sent),
        "keys_timed": len(key_lat),
        "key_latency_p50_ms": round(pct(key_lat, 0.5), 2),
        "key_latency_p95_ms": round(pct(key_lat, 0.95), 2),
        "key_latency_max_ms": round(max(key_lat), 2) if key_lat else None,
        "token_lateness_p50_ms": round(pct(lateness, 0.5), 2),
        "token_lateness_p95_ms": round(pct(lateness, 0.95), 2),
        "token_lateness_max_ms": round(max(lateness), 2) if lateness else None,
        "token_lateness_worst": worst_tokens,
        "app_cpu_us_per_token": round(cpu / max(1, tokens) * 1e6, 1),
        "app_cpu_share": round(cpu / stream_s, 3) if stream_s else None,
        "frames": len(frames),
        "stream_s": round(stream_s, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="CI size: 2,000 tokens, 3 start-ups each")
    parser.add_argument("--tokens", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--start-only", action="store_true",
                        help="only the start phase (skips the stream phase), to iterate on start-up")
    parser.add_argument("--stream-only", action="store_true",
                        help="only the stream phase (skips the start phase), to iterate on it")
    parser.add_argument("--probe", choices=("bare", "ours", "client"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        probe(args.probe)
        return 0
    import asyncio
    import tempfile

    if args.quick:
        args.tokens, args.repeats = 2000, 3
    home = Path(tempfile.mkdtemp(prefix="llmdeck-bench-ui-"))
    os.environ["LLMDECK_HOME"] = str(home)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    result: dict[str, object] = {"bench": "ui", "quick": args.quick}
    targets: dict[str, float] = {"start_vs_bare": 2.0}
    if args.start_only:
        result["start_only"] = True
    else:
        result.update(asyncio.run(stream_run(args.tokens, args.rate, home / "emitted.jsonl")))
        targets = {"key_latency_p95_ms": 50, "token_lateness_p95_ms": 100,
                   "token_lateness_max_ms": 100, **targets}
    if args.stream_only:
        targets.pop("start_vs_bare")
    else:
        result.update(start_phase(args.conversations, args.repeats))
    result["targets"] = targets
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
