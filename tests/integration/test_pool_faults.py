"""Worker pool under faults, with real processes (the scripted engine keeps them fast)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from core.config import Settings
from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.events import Done, Error, TextDelta
from core.runtime import Runtime
from core.workers.pool import WorkerPool
from tests.helpers.procs import wait_gone

LONG = "word " * 400


def spec(**options) -> ModelSpec:
    return ModelSpec(path="scripted", engine="scripted", options=tuple(options.items()))


def request(rid: str, session: str | None = None, max_tokens: int = 512) -> GenerationRequest:
    return GenerationRequest(rid, ({"role": "user", "content": "hi"},),
                             SamplingParams(max_tokens=max_tokens), session_id=session)


async def test_kill_9_mid_stream_fails_fast_keeps_partial_and_respawns() -> None:
    s = spec(reply=LONG, tokens_per_s=200)
    rt = Runtime(Settings(), model_spec=s)
    await rt.start()
    assert await rt.ensure_model()
    turn = await rt.start_turn(None, "stream a lot")
    seen: list = []
    killed_at = None
    async for event in turn.events():
        seen.append(event)
        if killed_at is None and sum(isinstance(e, TextDelta) for e in seen) == 40:
            await asyncio.sleep(0.3)  # let a store flush happen
            os.kill(rt.pool.pids()[0], signal.SIGKILL)
            killed_at = time.monotonic()
        if isinstance(event, Error):
            assert time.monotonic() - killed_at < 2.0  # fast, with room for a loaded CI box
    errors = [e for e in seen if isinstance(e, Error)]
    assert errors and errors[0].code == "WORKER_CRASHED"
    assert seen[-1] == Done("error")
    messages = await rt.messages(turn.conversation_id)
    reply = messages[-1]
    assert reply.role == "assistant" and reply.status == "partial"
    assert reply.content and reply.content == "".join(e.text for e in seen if isinstance(e, TextDelta))

    # respawned: the next request works
    for _ in range(100):
        if rt.pool.status()[0].state in ("idle", "ready"):
            break
        await asyncio.sleep(0.05)
    status = rt.pool.status()[0]
    assert status.restarts == 1 and status.state == "idle"
    turn2 = await rt.start_turn(turn.conversation_id, "again")
    events = [e async for e in turn2.events()]
    assert events[-1] == Done("stop")
    await rt.close()


async def test_restart_budget_marks_the_model_failed_with_a_reason() -> None:
    pool = WorkerPool(max_restarts=2, restart_window_s=60)
    await pool.load("m", spec())
    for _ in range(3):
        pid = pool.pids()[0]
        os.kill(pid, signal.SIGKILL)
        for _ in range(200):
            await asyncio.sleep(0.05)
            st = pool.status()[0]
            if st.state == "failed" or (st.pid != pid and st.state == "idle"):
                break
    st = pool.status()[0]
    assert st.state == "failed"
    assert "crashed 3 times" in (st.error or "")
    events = [e async for e in pool.generate("m", request("r"))]
    assert isinstance(events[0], Error) and events[-1] == Done("error")
    await pool.shutdown()


async def test_hanging_load_times_out_with_a_clear_error() -> None:
    pool = WorkerPool(load_timeout_s=1.5)
    started = time.monotonic()
    try:
        await pool.load("m", spec(hang_load_s=60))
    except Exception as exc:  # WorkerLoadError
        assert "did not finish loading within 2 s" in str(exc)
        assert getattr(exc, "code", "") == "TIMEOUT"
    else:
        raise AssertionError("load should time out")
    assert time.monotonic() - started < 10
    assert pool.pids() == []
    await pool.shutdown()


async def test_requests_wait_visibly_when_the_worker_is_full() -> None:
    pool = WorkerPool()
    await pool.load("m", spec(reply=LONG, tokens_per_s=500, max_concurrency=1))

    async def run(rid: str) -> list:
        return [e async for e in pool.generate("m", request(rid, max_tokens=100))]

    tasks = [asyncio.ensure_future(run(f"r{i}")) for i in range(3)]
    await asyncio.sleep(0.05)
    st = pool.status()[0]
    assert st.active == 1 and st.queued == 2 and st.state == "busy"
    results = await asyncio.gather(*tasks)
    assert all(r[-1] == Done("length") for r in results)
    assert pool.status()[0].queued == 0
    await pool.shutdown()


async def test_sessions_stick_to_their_worker_and_new_ones_spread() -> None:
    pool = WorkerPool()
    await pool.load("m", spec(reply="ok " * 50, tokens_per_s=1000, max_concurrency=1), replicas=2)
    a = asyncio.ensure_future(_drain(pool, request("a1", "A")))
    b = asyncio.ensure_future(_drain(pool, request("b1", "B")))
    await asyncio.gather(a, b)
    wa, wb = pool.worker_for_session("m", "A"), pool.worker_for_session("m", "B")
    assert wa and wb and wa != wb  # least-loaded spread
    await _drain(pool, request("a2", "A"))
    assert pool.worker_for_session("m", "A") == wa  # affinity
    await pool.shutdown()


async def test_cancel_ends_the_stream_with_cancelled() -> None:
    pool = WorkerPool()
    await pool.load("m", spec(reply=LONG, tokens_per_s=200))
    events = []
    async for event in pool.generate("m", request("r")):
        events.append(event)
        if len(events) == 5:
            pool.cancel("r")
    assert events[-1] == Done("cancelled")
    assert len([e for e in events if isinstance(e, TextDelta)]) < 100
    await pool.shutdown()


async def test_idle_model_is_unloaded_and_reloads_on_demand() -> None:
    pool = WorkerPool(idle_unload_s=0.5)
    await pool.load("m", spec(reply="hi"))
    pids = pool.pids()
    await _drain(pool, request("r1"))
    for _ in range(200):
        await asyncio.sleep(0.05)
        if not pool.pids():
            break
    assert pool.pids() == [] and wait_gone(pids, 2) == []
    events = await _drain(pool, request("r2"))
    assert events[-1] == Done("stop")
    await pool.shutdown()


def test_app_process_killed_mid_stream_leaves_no_worker(tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(
        "import asyncio, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
        "from core.workers.pool import WorkerPool\n"
        "from core.engines.base import GenerationRequest, ModelSpec, SamplingParams\n"
        "async def main():\n"
        "    pool = WorkerPool()\n"
        "    s = ModelSpec('scripted', 'scripted', options=(('reply', 'x ' * 5000), ('tokens_per_s', 100)))\n"
        "    await pool.load('m', s, replicas=2)\n"
        "    print(*pool.pids(), flush=True)\n"
        "    r = GenerationRequest('r', ({'role': 'user', 'content': 'hi'},), SamplingParams(max_tokens=5000))\n"
        "    async for _ in pool.generate('m', r):\n"
        "        pass\n"
        "if __name__ == '__main__':\n"
        "    asyncio.run(main())\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2
    time.sleep(0.5)  # streaming now
    proc.kill()
    proc.wait()
    assert wait_gone(pids, 5) == []


async def _drain(pool: WorkerPool, req: GenerationRequest) -> list:
    return [e async for e in pool.generate("m", req)]


async def test_runtime_setting_unloads_an_idle_model_and_the_next_turn_reloads_it() -> None:
    rt = Runtime(Settings(idle_unload_minutes=0.01), model_spec=spec(reply="hello"))
    await rt.start()
    turn = await rt.start_turn(None, "hi")
    assert [e async for e in turn.events()][-1] == Done("stop")
    for _ in range(200):
        await asyncio.sleep(0.05)
        if not rt.pool.pids():
            break
    assert rt.pool.pids() == []  # memory given back
    turn = await rt.start_turn(turn.conversation_id, "again")
    assert [e async for e in turn.events()][-1] == Done("stop")
    await rt.close()
