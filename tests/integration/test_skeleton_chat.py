"""The walking skeleton end to end in-process: real GGUF, real worker, real SQLite."""

from __future__ import annotations

from pathlib import Path

from core import paths
from core.config import Settings
from core.events import Done, Error, TextDelta, Usage
from core.runtime import Runtime
from tests.helpers.procs import wait_gone


def _settings(model: Path) -> Settings:
    s = Settings(model=str(model), context_size=1024)
    s.sampling.max_tokens = 24
    s.sampling.temperature = 0.0
    return s


async def test_chat_streams_from_the_bundled_model_and_is_saved(bundled_gguf: Path) -> None:
    rt = Runtime(_settings(bundled_gguf))
    await rt.start()
    turn = await rt.start_turn(None, "Say hello in one short sentence.")
    events = [e async for e in turn.events()]
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text.strip(), events
    assert isinstance(events[-1], Done) and events[-1].finish_reason in ("stop", "length")
    usage = [e for e in events if isinstance(e, Usage)]
    assert usage and usage[0].prompt_tokens > 0 and usage[0].completion_tokens > 0
    pids = rt.pool.pids()
    assert pids, "the model must run in a worker process"
    await rt.close()
    assert wait_gone(pids, 5) == []

    # A new runtime (an app restart) finds the conversation and both messages.
    rt2 = Runtime(_settings(bundled_gguf))
    await rt2.start(preload=False)
    conversations = await rt2.list_conversations()
    assert [c.id for c in conversations] == [turn.conversation_id]
    messages = await rt2.messages(turn.conversation_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[0].content == "Say hello in one short sentence."
    assert messages[1].content == text
    assert messages[1].status == "complete"
    await rt2.close()


async def test_second_turn_reuses_the_prefix_on_the_same_worker(bundled_gguf: Path) -> None:
    rt = Runtime(_settings(bundled_gguf))
    await rt.start()
    first = await rt.start_turn(None, "Name a colour.")
    [e async for e in first.events()]
    second = await rt.start_turn(first.conversation_id, "Name another one.")
    usage = [e async for e in second.events() if isinstance(e, Usage)][0]
    assert usage.cached_tokens > 0
    await rt.close()


async def test_missing_model_gives_a_clear_error_and_keeps_the_message(tmp_path: Path) -> None:
    missing = tmp_path / "gone.gguf"
    rt = Runtime(_settings(missing))
    await rt.start()
    turn = await rt.start_turn(None, "Is anyone there?")
    events = [e async for e in turn.events()]
    errors = [e for e in events if isinstance(e, Error)]
    assert errors and "not found" in errors[0].message and str(missing) in errors[0].message
    assert events[-1] == Done("error")
    messages = await rt.messages(turn.conversation_id)
    assert messages[0].content == "Is anyone there?"  # nothing typed is lost
    await rt.close()


async def test_corrupt_gguf_is_reported_as_corrupt(tmp_path: Path, bundled_gguf: Path) -> None:
    broken = tmp_path / "broken.gguf"
    with bundled_gguf.open("rb") as src:
        broken.write_bytes(src.read(4096))  # a truncated download
    rt = Runtime(_settings(broken))
    await rt.start()
    turn = await rt.start_turn(None, "hi")
    errors = [e async for e in turn.events() if isinstance(e, Error)]
    assert errors and errors[0].code in ("MODEL_CORRUPT", "LOAD_FAILED")
    assert "corrupt" in errors[0].message or "truncated" in errors[0].message
    await rt.close()


async def test_first_run_provisions_the_bundled_model_under_llmdeck_home(llmdeck_home: Path) -> None:
    from core import bundled

    rt = Runtime(Settings())
    await rt.start()
    assert await rt.ensure_model()
    assert bundled.bundled_chat_target().is_file()
    assert str(bundled.bundled_chat_target()).startswith(str(llmdeck_home))
    assert Settings.load().model == str(bundled.bundled_chat_target())
    assert paths.db_path().is_file() and str(paths.db_path()).startswith(str(llmdeck_home))
    await rt.close()


async def test_conversation_text_never_reaches_the_logs(bundled_gguf: Path) -> None:
    secret = "my-unique-secret-phrase-4711"
    rt = Runtime(_settings(bundled_gguf))
    await rt.start()
    turn = await rt.start_turn(None, f"Remember {secret} please.")
    reply = "".join([e.text async for e in turn.events() if isinstance(e, TextDelta)])
    await rt.close()
    logs = list(paths.log_dir().rglob("*"))
    assert logs, "workers write their diagnostics to the log folder"
    for log in logs:
        if log.is_file():
            data = log.read_text(errors="replace")
            assert secret not in data
            assert not reply.strip() or reply.strip()[:40] not in data
