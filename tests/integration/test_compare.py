"""Compare (issue 31, item 5): one message to two models at once through the real pool
and store; the kept reply is the conversation's reply, the other a sibling branch of it.

The scripted engine (real worker processes, replies at a known pace) pins the flow down
cheaply; two real small models (a random-weight MLX model and the bundled Gemma GGUF on
llama.cpp) show it with real engines, and a budget too small for the second model gives
the pool's refusal as a sentence.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core import paths, presets
from core.config import Settings
from core.engines.base import ModelSpec
from core.events import Done, Error, TextDelta, Usage
from core.runtime import Runtime
from core.runtime.compare import LEFT, RIGHT, CompareRefused, Comparison, start_compare
from core.store import Store
from core.workers import memory_budget as mb
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir

pytestmark = pytest.mark.timeout(240)


def scripted(label: str, reply: str, **options: object) -> ModelSpec:
    opts = {"reply": reply, "fixed_timing": True, "label": label, **options}
    return ModelSpec(path="scripted", engine="scripted", context_size=4096,
                     options=tuple(opts.items()))


async def run_through(comparison: Comparison) -> dict[int, list]:
    seen: dict[int, list] = {LEFT: [], RIGHT: []}
    async for item in comparison.events():
        seen[item.side].append(item.event)
    return seen


def stored(cid: str) -> list:
    with Store.open(paths.db_path()) as store:
        return store.messages(cid, limit=50)


def siblings(message_id: str) -> list[str]:
    with Store.open(paths.db_path()) as store:
        return [m.id for m in store.branches(message_id)]


async def test_both_replies_stream_and_the_kept_one_is_the_reply() -> None:
    rt = Runtime(Settings(), model_spec=scripted("left-model", "Left says Paris."))
    await rt.start()
    try:
        comparison = await start_compare(rt, None, "Capital of France?",
                                         scripted("right-model", "Right says PARIS!"), "right-model")
        assert isinstance(comparison, Comparison)
        seen = await run_through(comparison)
        for side, want in ((LEFT, "Left says Paris."), (RIGHT, "Right says PARIS!")):
            events = seen[side]
            assert "".join(e.text for e in events if isinstance(e, TextDelta)) == want
            assert events[-1] == Done("stop")
            usage = next(e for e in events if isinstance(e, Usage))
            assert (usage.ttft_ms, usage.decode_tps) == (12.0, 100.0)  # the stats line's numbers
        left, right = comparison.sides
        assert left.label == "left-model" and right.label == "right-model"

        kept = await comparison.keep(RIGHT)
        messages = stored(comparison.conversation_id)
        assert [(m.role, m.content) for m in messages] == [
            ("user", "Capital of France?"), ("assistant", "Right says PARIS!")]
        assert messages[-1].id == kept and messages[-1].model == "right-model"
        assert sorted(siblings(kept)) == sorted([left.message_id, right.message_id])
        assert messages[-1].parent_id == messages[0].id

        # The chat's branch key steps to the other answer, and back.
        assert await rt.step_branch(kept, -1) or await rt.step_branch(kept, 1)
        assert stored(comparison.conversation_id)[-1].content == "Left says Paris."
    finally:
        await rt.close()


async def test_the_second_model_answers_with_its_own_preset() -> None:
    settings = Settings(system_prompt="Chat prompt.")
    settings.sampling.temperature = 0.7
    presets.save(presets.model_key(None, "right-model"),
                 presets.Preset(sampling={"temperature": 0.2}, system_prompt="Right prompt."))
    rt = Runtime(settings, model_spec=scripted("left-model", "L"))
    await rt.start()
    try:
        comparison = await start_compare(rt, None, "hi", scripted("right-model", "R"),
                                         "right-model")
        assert isinstance(comparison, Comparison)
        await run_through(comparison)
        left, right = (side.request for side in comparison.sides)
        assert (left.sampling.temperature, left.messages[0]["content"]) == (0.7, "Chat prompt.")
        assert (right.sampling.temperature, right.messages[0]["content"]) == (0.2, "Right prompt.")
        assert rt.settings.system_prompt == "Chat prompt."  # the chat's settings stay
    finally:
        await rt.close()


async def test_stop_ends_both_replies_and_keeps_what_streamed() -> None:
    long_reply = "word " * 400
    rt = Runtime(Settings(), model_spec=scripted("left-model", long_reply, tokens_per_s=100.0))
    await rt.start()
    try:
        comparison = await start_compare(rt, None, "Talk a lot.",
                                         scripted("right-model", long_reply, tokens_per_s=100.0),
                                         "right-model")
        assert isinstance(comparison, Comparison)
        seen: dict[int, list] = {LEFT: [], RIGHT: []}
        async for item in comparison.events():
            seen[item.side].append(item.event)
            if sum(isinstance(e, TextDelta) for e in seen[RIGHT]) == 3:
                comparison.cancel()  # Esc
        for side in (LEFT, RIGHT):
            assert seen[side][-1] == Done("cancelled")
            assert 0 < len(comparison.sides[side].text) < len(long_reply)
        with Store.open(paths.db_path()) as store:
            for side in comparison.sides:
                message = store.get_message(side.message_id)
                assert message.status == "stopped" and message.content == side.text
        assert comparison.finished
    finally:
        await rt.close()


async def test_an_empty_message_or_the_same_model_is_refused_with_a_sentence() -> None:
    rt = Runtime(Settings(), model_spec=scripted("left-model", "hi"))
    await rt.start()
    try:
        refused = await start_compare(rt, None, "   ", scripted("r", "x"), "r")
        assert isinstance(refused, CompareRefused) and "Type the message" in refused.message
        rt.settings.model = "/models/same.gguf"
        same = ModelSpec(path="/models/same.gguf", engine="llamacpp", context_size=512)
        refused = await start_compare(rt, None, "hello", same, "same")
        assert isinstance(refused, CompareRefused) and "choose another" in refused.message
    finally:
        await rt.close()


async def test_a_model_loaded_already_is_compared_without_a_second_copy() -> None:
    rt = Runtime(Settings(), model_spec=scripted("left-model", "L"))
    await rt.start()
    try:
        right = scripted("right-model", "R")
        await rt.pool.load("api", right, label="right-model")  # as the API would have
        comparison = await start_compare(rt, None, "hi", right, "right-model")
        assert isinstance(comparison, Comparison)
        seen = await run_through(comparison)
        assert "".join(e.text for e in seen[RIGHT] if isinstance(e, TextDelta)) == "R"
        assert sorted(rt.pool.loaded()) == ["api", "chat"]  # no "compare" copy
    finally:
        await rt.close()


async def test_a_client_of_the_engine_service_is_told_how_to_compare() -> None:
    from tui.service_runtime import ServiceRuntime

    refused = await start_compare(ServiceRuntime(Settings()), None, "hi",
                                  scripted("right-model", "R"), "right-model")
    assert isinstance(refused, CompareRefused) and "--in-process" in refused.message


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("compare") / "tiny-qwen3", QWEN3_SHAPE, seed=3)


@pytest.mark.slow
async def test_two_real_models_the_kept_one_is_the_reply_the_other_a_branch(
        tiny_qwen: Path, bundled_gguf: Path) -> None:
    settings = Settings(model=str(bundled_gguf), engine="llamacpp", context_size=512, replicas=1)
    settings.sampling.temperature = 0.0
    settings.sampling.max_tokens = 8
    rt = Runtime(settings)
    await rt.start()
    try:
        other = ModelSpec(str(tiny_qwen), "mlx", context_size=512)
        comparison = await start_compare(rt, None, "Say hello.", other, "tiny-qwen3")
        assert isinstance(comparison, Comparison), comparison
        seen = await run_through(comparison)
        for side in (LEFT, RIGHT):
            assert seen[side][-1] in (Done("stop"), Done("length")), seen[side][-3:]
            assert not any(isinstance(e, Error) for e in seen[side])
            assert any(isinstance(e, Usage) for e in seen[side])
        assert sorted(rt.pool.loaded()) == ["chat", "compare"]  # side by side in the pool

        kept = await comparison.keep(LEFT)
        left, right = comparison.sides
        messages = stored(comparison.conversation_id)
        assert messages[-1].id == kept == left.message_id
        assert messages[-1].content == left.text and messages[-1].model == left.label
        assert right.message_id in siblings(kept) and right.message_id != kept
        with Store.open(paths.db_path()) as store:
            assert store.get_message(right.message_id).model == "tiny-qwen3"
    finally:
        await rt.close()


async def test_a_second_model_the_budget_cannot_hold_is_refused_with_its_numbers(
        tiny_qwen: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(mb.ENV_BUDGET_MB, "0.001")
    rt = Runtime(Settings(), model_spec=scripted("left-model", "hi"))
    await rt.start()
    try:
        other = ModelSpec(str(tiny_qwen), "mlx", context_size=512)
        refused = await start_compare(rt, None, "Say hello.", other, "tiny-qwen3")
        assert isinstance(refused, CompareRefused)
        assert "budget" in refused.message and "needs" in refused.message, refused.message
        assert rt.pool.loaded() == ["chat"]
        assert stored_conversations() == 0  # nothing saved for a comparison that never ran
    finally:
        await rt.close()


def stored_conversations() -> int:
    with Store.open(paths.db_path()) as store:
        return len(store.list_conversations(10))
