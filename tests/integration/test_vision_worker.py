"""The vision worker on a tiny random-weight LLaVA (mlx-vlm, CPU): it loads on the first
caption, streams pieces, unloads after its idle timeout (the process exits) and loads again
on the next image; a broken image fails that request alone (issue 23)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core.model_files import is_vlm_dir
from core.vision import prepare_image
from core.vision.worker import VisionError, VisionWorker
from tests.fixtures.images import make_image
from tests.fixtures.vlm_models import build_tiny_llava
from tests.helpers.procs import wait_gone

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def tiny_vlm(tmp_path_factory) -> Path:
    return build_tiny_llava(tmp_path_factory.mktemp("vlm") / "tiny-llava")


async def test_load_on_first_use_caption_idle_unload_reload_and_cancel(tiny_vlm: Path,
                                                                tmp_path: Path) -> None:
    assert is_vlm_dir(tiny_vlm) and not is_vlm_dir(tmp_path)
    stored = prepare_image(make_image(tmp_path / "p.png"), max_bytes=1 << 20, folder=tmp_path)
    worker = VisionWorker(tiny_vlm, idle_s=0.5)
    assert worker.state == "unloaded" and worker.status().pid is None
    pieces: list[str] = []
    try:
        task = asyncio.ensure_future(worker.caption([stored.path], "Describe it.",
                                                    max_tokens=8, on_delta=pieces.append))
        await asyncio.sleep(0.05)
        assert worker.state == "loading"
        caption = await task
        assert caption and caption == "".join(pieces) and len(pieces) >= 2
        first_pid = worker.pid
        assert first_pid is not None and worker.status().state == "ready"
        # A broken stored file fails that request; the worker stays loaded.
        with pytest.raises(VisionError) as err:
            await worker.caption([str(tmp_path / "gone.png")], "Describe it.", max_tokens=4)
        assert "could not describe the image" in err.value.message
        assert worker.pid == first_pid
        # Idle past the timeout: the process exits, its memory goes back.
        deadline = asyncio.get_running_loop().time() + 10
        while worker.state != "unloaded" and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        assert worker.state == "unloaded" and wait_gone([first_pid], 2) == []
        again = await worker.caption([stored.path], "Describe it.", max_tokens=8)
        assert again == caption, "greedy decoding of the same image gives the same caption"
        assert worker.loads == 2 and worker.pid != first_pid
        # Cancelling a caption mid-decode stops the process (a cancel, not a failure).
        second_pid = worker.pid
        task = asyncio.ensure_future(worker.caption([stored.path], "Describe it.",
                                                    max_tokens=4000))
        while not worker._pending:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert wait_gone([second_pid], 5) == []
        assert worker.state == "unloaded" and worker.error is None
    finally:
        await worker.shutdown()
    assert worker.pid is None


async def test_a_folder_that_is_not_a_model_fails_to_load_with_a_sentence(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llava"}')
    worker = VisionWorker(tmp_path)
    try:
        with pytest.raises(VisionError) as err:
            await worker.caption([str(tmp_path / "x.png")], "Describe it.")
        assert err.value.code == "LOAD_FAILED" and "could not be loaded" in err.value.message
        assert worker.state == "failed" and worker.status().error
    finally:
        await worker.shutdown()


async def test_a_text_model_gets_the_caption_made_once(tiny_vlm: Path, tmp_path: Path) -> None:
    from core.events import TextDelta
    from core.vision.captions import HEADER
    from tests.fixtures.docs_runtime import scripted_runtime

    rt = scripted_runtime(reply="It is a flag.")
    await rt.start()
    try:
        photo = make_image(tmp_path / "flag.png")
        [attached] = await rt.attach(None, [photo])
        cid = attached.conversation_id
        # No vision model set: the model is told an image is there, and why not described.
        turn = await rt.start_turn(cid, "What is this?")
        sent = turn.request.messages[-1]["content"]
        assert sent.startswith(HEADER) and "- flag.png (64×48): not described (no vision " \
            "model is set (vision_model in the config file))" in sent
        [e async for e in turn.events()]
        assert not [w for w in rt.worker_status() if w.worker_id == "vision#1"]
        rt.settings.vision_model = str(tiny_vlm)
        rows = [w for w in rt.worker_status() if w.worker_id == "vision#1"]
        assert rows and rows[0].state == "unloaded" and rows[0].pid is None
        turn = await rt.start_turn(cid, "And now?")
        sent = turn.request.messages[-1]["content"]
        worker = rt.chat.captioner.worker
        caption = attached.image.captions["tiny-llava"]  # kept in the image's sidecar
        assert f"- flag.png (64×48): {caption}\n" in sent and sent.endswith("And now?")
        text = "".join([e.text async for e in turn.events() if isinstance(e, TextDelta)])
        assert text == "It is a flag."  # the chat goes on
        [row] = [w for w in rt.worker_status() if w.worker_id == "vision#1"]
        assert row.state == "ready" and row.pid == worker.pid and row.model.startswith("tiny")
        # The caption is stored with the image: the next turn, and the same picture
        # attached to another chat, reuse it.
        turn = await rt.start_turn(cid, "Once more?")
        assert caption in turn.request.messages[-1]["content"]
        [e async for e in turn.events()]
        [again] = await rt.attach(None, [photo])
        turn = await rt.start_turn(again.conversation_id, "What is it?")
        assert caption in turn.request.messages[-1]["content"]
        [e async for e in turn.events()]
        assert worker.requests == 1 and worker.loads == 1
    finally:
        await rt.close()
    assert worker.pid is None


async def test_a_vision_chat_model_gets_the_image_itself(tiny_vlm: Path, tmp_path: Path) -> None:
    from core.config import Settings
    from core.events import Done, TextDelta
    from core.runtime import Runtime

    rt = Runtime(Settings(model=str(tiny_vlm), context_size=2048))
    await rt.start()
    try:
        assert await rt.ensure_model(), rt.model.error
        assert rt.model.info["engine"] == "mlx-vlm" and rt.model.info["vision"] is True
        [attached] = await rt.attach(None, [make_image(tmp_path / "flag.png")])
        rt.settings.sampling.max_tokens = 6
        turn = await rt.start_turn(attached.conversation_id, "What is this?")
        parts = turn.request.messages[-1]["content"]
        assert parts[0] == {"type": "image", "path": attached.image.path}
        assert parts[-1]["type"] == "text" and parts[-1]["text"].endswith("What is this?")
        events = [e async for e in turn.events()]
        assert any(isinstance(e, TextDelta) for e in events)
        assert isinstance(events[-1], Done) and events[-1].finish_reason == "length"
        assert rt.chat.captioner.worker is None, "no caption is made for a model that sees"
    finally:
        await rt.close()

