"""tui.service_runtime.ServiceRuntime against a real service process: what the app reads
without waiting (the model, the worker table, @doc mentions) comes from the service."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.helpers import service_proc as svc
from tui.service_runtime import POLL_S, ServiceRuntime


async def test_the_apps_sync_reads_come_from_the_service(llmdeck_home: Path) -> None:
    with svc.no_service_left(llmdeck_home):
        svc.start(*svc.scripted_args(reply="hi"))
        notes = llmdeck_home / "notes.txt"
        notes.write_text("Some notes about llamas.\n")
        one, two = ServiceRuntime(), ServiceRuntime()
        await one.start()
        await two.start()
        try:
            for _ in range(300):  # the service's preload, told by its "model" pushes
                if one.model.state == "ready":
                    break
                await asyncio.sleep(0.1)
            assert one.model.label == "scripted" and one.model.state == "ready"
            results = await one.attach(None, [notes])
            cid = results[0].conversation_id
            said = one.check_mentions(cid, "what do @doc(notes.txt) and @doc(nope) say?")
            assert [a.alias for a in said.resolved] == ["notes.txt"]
            assert [m.alias for m in said.unresolved] == ["nope"] and not said.ok
            # Another client knows the conversation's attachments once it has listed them
            # (the app lists them as it opens the conversation).
            assert not two.check_mentions(cid, "@doc(notes.txt)").ok
            await two.attachments(cid)
            assert two.check_mentions(cid, "@doc(notes.txt)").ok
            await asyncio.sleep(POLL_S * 3)
            assert any(w.model and "scripted" in str(w.model) for w in one.worker_status())
        finally:
            await one.close()
            await two.close()


async def test_a_call_asked_before_the_connection_is_up_waits_for_it() -> None:
    """A screen may ask the service before the app's first connection is up (the hub's
    recommended list, opened while a loaded box still connects): the call waits for the
    connection and is answered, never an AttributeError in the screen's worker (the suite
    saw one at -n 3)."""
    from core.config import Settings
    from core.engines.base import ModelSpec
    from core.runtime import Runtime

    local = Runtime(Settings(), model_spec=ModelSpec("scripted", "scripted", options=(("reply", "ok"),)))
    rt = ServiceRuntime(local=local)
    try:
        early = asyncio.ensure_future(rt.local_models())  # asked before start() connects
        await asyncio.sleep(0)
        assert not early.done()
        await rt.start(preload=False)
        assert isinstance(await asyncio.wait_for(early, 10), list)
    finally:
        await rt.close()
