"""The idle stop of a cluster started on demand (core.cluster.on_demand.IdleStop) with real
asyncio time, and idle_minutes in [[clusters]]. The real cluster stopping by pid after its
idle time is in tests/integration/test_cluster_tui.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

from core.cluster.on_demand import IdleStop
from core.config import ClusterConfig, Settings


class Stops:
    def __init__(self) -> None:
        self.count = 0

    async def __call__(self) -> None:
        self.count += 1


async def test_stops_once_after_the_idle_time() -> None:
    stops = Stops()
    idle = IdleStop(0.6, stops)
    idle.start()
    await asyncio.sleep(0.3)
    assert stops.count == 0 and not idle.stopped
    await asyncio.sleep(0.8)
    assert stops.count == 1 and idle.stopped
    await asyncio.sleep(0.5)
    assert stops.count == 1  # once


async def test_a_request_in_flight_is_never_cut_and_resets_the_clock() -> None:
    stops = Stops()
    idle = IdleStop(0.5, stops)
    idle.start()
    idle.begin()
    await asyncio.sleep(1.2)  # a reply longer than the idle time
    assert stops.count == 0
    idle.end()
    await asyncio.sleep(0.3)  # idle time counts from the reply's end
    assert stops.count == 0
    await asyncio.sleep(0.6)
    assert stops.count == 1


async def test_zero_never_stops_and_cancel_ends_the_watch() -> None:
    stops = Stops()
    never = IdleStop(0.0, stops)
    never.start()
    await asyncio.sleep(0.4)
    assert stops.count == 0
    soon = IdleStop(0.3, stops)
    soon.start()
    await soon.close()
    await asyncio.sleep(0.6)
    assert stops.count == 0


def _settings(tmp_path: Path, extra: str) -> Settings:
    path = tmp_path / "config.toml"
    path.write_text('[[clusters]]\nname = "loop"\nhosts = ["127.0.0.1", "127.0.0.1"]\n'
                    f'model = "/m"\n{extra}', encoding="utf-8")
    return Settings.load(path)


def test_idle_minutes_defaults_reads_and_refuses(tmp_path: Path) -> None:
    assert ClusterConfig(name="a", model="/m", hosts=["127.0.0.1", "127.0.0.1"]).idle_minutes == 15
    settings = _settings(tmp_path, "idle_minutes = 0.5\n")
    assert settings.cluster("loop").idle_minutes == 0.5
    for bad in ("-1", "1e9", "nan", '"10m"'):
        settings = _settings(tmp_path, f"idle_minutes = {bad}\n")
        assert settings.cluster("loop") is None, bad
        assert any("idle_minutes" in p for p in settings.problems), settings.problems


async def test_close_waits_for_a_stop_under_way() -> None:
    ended = asyncio.Event()

    async def slow_stop() -> None:
        await asyncio.sleep(1.0)
        ended.set()

    idle = IdleStop(0.2, slow_stop)
    idle.start()
    for _ in range(50):  # until the stop has begun
        if idle.stopped:
            break
        await asyncio.sleep(0.05)
    assert idle.stopped and not ended.is_set()
    await idle.close()
    assert ended.is_set()  # not cut halfway


async def test_a_request_after_the_idle_stop_is_a_sentence_not_a_lost_connection() -> None:
    from core.cluster.backend import ClusterBackend
    from core.cluster.on_demand import OnDemandClusterBackend
    from core.cluster.serving import ClusterRun
    from core.config import RemoteEndpoint
    from core.engines.base import GenerationRequest
    from core.events import Done, Error
    from core.remote.client import RemoteBackend

    cfg = ClusterConfig(name="loop", model="/m", hosts=["127.0.0.1", "127.0.0.1"], idle_minutes=2)
    run = ClusterRun("loop", None, "http://127.0.0.1:9/v1")  # nothing listens there
    inner = ClusterBackend(RemoteBackend(RemoteEndpoint("cluster:loop", run.url), "m"), "loop",
                           run.ended)
    backend = OnDemandClusterBackend(cfg, run, inner)
    backend.idle.stopped = True  # as the idle stop leaves it
    assert not backend.ready()
    events = [e async for e in backend.generate(GenerationRequest(request_id="r1", messages=[]))]
    assert isinstance(events[0], Error) and isinstance(events[-1], Done)
    assert "stopped after 2 minutes with no request; send the message again" in events[0].message
    await backend.close()
