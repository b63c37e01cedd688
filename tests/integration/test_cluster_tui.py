"""A two-rank ring cluster on loopback as the app's model (issue 35): picked in F5, started by
the app (mlx.launch, mlx-lm's server on two local CPU ranks, a tiny random model), answering
a chat through the same remote backend code, shown in F4 with each host, rank, state and
endpoint; stopped by its idle time (every pid checked gone), started again by the next
message, and stopped when the app quits. A cluster start is ~10-20 s on 2 cores: slow.
"""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path

import psutil
import pytest
from rich.console import Console

from core import paths
from core.config import ClusterConfig, Settings
from core.engines.base import ModelSpec
from core.runtime import Runtime
from core.store import Store
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir
from tests.fixtures.tui import send, wait_ready, wait_until
from tui.app import LlmdeckApp
from tui.widgets.message_view import MessageView

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

IDLE_MINUTES = 0.1  # 6 s


def cluster_pids() -> list[int]:
    state = json.loads((paths.data_dir() / "clusters" / "loop.json").read_text())
    return [state["launcher_pid"], *(r["pid"] for r in state["ranks"])]


def running(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def last_reply(conversation_id: str) -> str:
    with Store.open(paths.db_path()) as store:
        return store.messages(conversation_id)[-1].content


async def test_a_loopback_cluster_picked_in_f5_chats_shows_in_f4_and_stops_when_idle(
        tmp_path: Path) -> None:
    model = build_model_dir(tmp_path / "tiny", QWEN3_SHAPE)
    settings = Settings()
    settings.sampling.max_tokens = 16
    settings.sampling.temperature = 0.0
    settings.clusters = [ClusterConfig(name="loop", model=str(model), hosts=["127.0.0.1"] * 2,
                                       python=sys.executable, idle_minutes=IDLE_MINUTES)]
    spec = ModelSpec(path="scripted", engine="scripted", context_size=4096,
                     options=(("reply", "ok"), ("label", "scripted-test")))
    app = LlmdeckApp(Runtime(settings, model_spec=spec))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_ready(pilot)
        await pilot.press("f5")
        await wait_until(pilot, lambda: any(c.path == "cluster:loop"
                                            for c in getattr(pilot.app.screen, "choices", [])))
        screen = pilot.app.screen
        index = next(i for i, c in enumerate(screen.choices) if c.path == "cluster:loop")
        screen.query_one("OptionList").highlighted = index
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.runtime.model.label == "cluster:loop"
                         and app.runtime.model.state == "ready", timeout=150)
        assert app.runtime.model.info["engine"] == "cluster"
        pids = cluster_pids()
        assert len(running(pids)) == 3  # mlx.launch and two ranks

        await send(pilot, "Count to ten: one two three")
        reply = last_reply(app.main.conversation_id)
        assert reply.strip(), "the cluster's reply is empty"
        assert "scripted" not in reply and reply != "ok"

        await pilot.press("f4")
        await pilot.pause(1.5)
        from tui.widgets.worker_pane import WorkerPane

        console = Console(width=120, record=True, file=io.StringIO())
        console.print(app.main.query_one(WorkerPane).content)
        pane = console.export_text()
        assert "cluster loop: up (ring, tensor)" in pane, pane
        assert "127.0.0.1  0     up" in pane and "127.0.0.1  1     up" in pane, pane
        assert "http://127.0.0.1:" in pane, pane  # rank 0's endpoint

        # the idle time: every rank stops, checked by pid
        backend = app.runtime.local.backend
        assert running(pids) == pids  # F4 and its refreshes are no requests: still up
        await wait_until(pilot, lambda: not running(pids), timeout=IDLE_MINUTES * 60 + 20)
        # not before its time: from the end of the last reply (the backend's own clock)
        assert time.monotonic() - backend.idle.last >= IDLE_MINUTES * 60
        assert not app.runtime.local.backend.ready()

        # the next message starts it again (the model line says so) and answers
        before = len(app.main.query(MessageView))
        await pilot.press(*"Count to ten: one two three", "enter")
        await wait_until(pilot, lambda: len(app.main.query(MessageView)) >= before + 2
                         and app.main.turn is None, timeout=150)
        assert app.runtime.model.state == "ready", app.runtime.model.error
        again = cluster_pids()
        assert set(again).isdisjoint(pids) and len(running(again)) == 3
        second = last_reply(app.main.conversation_id)
        assert second.strip() and second != reply  # a new reply, to the longer conversation
    # quitting the app stops every rank
    deadline = time.monotonic() + 15
    while running(again) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running(again) == []
