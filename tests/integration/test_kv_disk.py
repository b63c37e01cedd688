"""KV caches on disk across worker restarts (issue 33): real worker processes through the
pool, a small random-weight MLX model and the bundled GGUF; the cache folder is the
test's own LLMDECK_HOME."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import paths
from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.events import Done, TextDelta, Usage
from core.workers.pool import WorkerPool
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir

SYSTEM = {"role": "system", "content": "You are a careful assistant. Answer briefly. " * 25}
FIRST = {"role": "user", "content": "Count to ten, then name three colours."}
NEXT = {"role": "user", "content": "Again."}
# The template's tokens around the new user message: <|im_end|>\n<|im_start|>user\n ...
# <|im_end|>\n<|im_start|>assistant\n
FRAME = 12


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("kv-disk") / "tiny-qwen3", QWEN3_SHAPE, seed=3)


def _spec(model: Path, gb: float = 0.05) -> ModelSpec:
    return ModelSpec(str(model), "mlx", context_size=1024,
                     options=(("warmup_batch_sizes", (1,)), ("kv_disk_gb", gb)))


async def _turn(spec: ModelSpec, messages: list[dict], rid: str, max_tokens: int = 16,
                ) -> tuple[str, Usage]:
    """One turn on a freshly started worker, which is shut down after it (a restart)."""
    pool = WorkerPool()
    try:
        await pool.load("m", spec)
        text, usage = [], None
        request = GenerationRequest(rid, tuple(messages), SamplingParams(temperature=0.0, max_tokens=max_tokens),
                                    session_id="s")
        async for event in pool.generate("m", request):
            if isinstance(event, TextDelta):
                text.append(event.text)
            elif isinstance(event, Usage):
                usage = event
            elif isinstance(event, Done):
                assert event.finish_reason in ("stop", "length")
        assert usage is not None
        return "".join(text), usage
    finally:
        await pool.shutdown()


def _files() -> list[Path]:
    return sorted((paths.cache_dir() / "kv").rglob("*.kv"))


async def test_a_restarted_worker_reuses_the_history_from_disk(tiny_qwen3: Path, llmdeck_home: Path) -> None:
    spec = _spec(tiny_qwen3)
    reply, first = await _turn(spec, [SYSTEM, FIRST], "t1")
    assert first.cached_tokens == 0
    assert _files(), "the first turn's cache was written before the worker exited"
    second_messages = [SYSTEM, FIRST, {"role": "assistant", "content": reply}, NEXT]
    _, second = await _turn(spec, second_messages, "t2")
    # every token of the history is reused: only the new message and its frame are fed
    assert second.cached_tokens >= second.prompt_tokens - FRAME, second
    for f in _files():
        assert f.stat().st_mode & 0o777 == 0o600
    # off (kv_disk_gb = 0): a restart prefills everything again, and nothing is written
    for f in _files():
        f.unlink()
    _, off = await _turn(_spec(tiny_qwen3, gb=0), second_messages, "t3")
    assert off.cached_tokens == 0 and not _files()


async def test_a_corrupted_cache_file_is_skipped_removed_and_the_answer_is_the_same(
        tiny_qwen3: Path, llmdeck_home: Path) -> None:
    spec = _spec(tiny_qwen3)
    reply, _ = await _turn(spec, [SYSTEM, FIRST], "t1")
    second_messages = [SYSTEM, FIRST, {"role": "assistant", "content": reply}, NEXT]
    files = _files()
    assert files
    for f in files:  # one flipped byte in the middle of the keys and values
        data = bytearray(f.read_bytes())
        data[len(data) * 3 // 4] ^= 0x10
        f.write_bytes(bytes(data))
    damaged, usage = await _turn(spec, second_messages, "t2")
    assert usage.cached_tokens == 0
    assert not any(f.exists() for f in files)
    for f in _files():  # the second turn's own cache replaced them
        f.unlink()
    clean, reference = await _turn(_spec(tiny_qwen3, gb=0), second_messages, "t3")
    assert reference.cached_tokens == 0
    assert damaged == clean


async def test_each_turn_writes_only_its_new_tokens_and_a_restart_loads_the_chain(
        tiny_qwen3: Path, llmdeck_home: Path) -> None:
    """Turn 2 writes a link holding only its new tokens (named after turn 1's file); a
    restarted worker's turn 3 loads both and reuses the whole history. A flipped byte in
    the link: the chain is ignored and removed, and the answer is the same."""
    spec = _spec(tiny_qwen3)
    reply1, _ = await _turn(spec, [SYSTEM, FIRST], "t1")
    first = {f: f.stat().st_size for f in _files()}
    assert first
    second = [SYSTEM, FIRST, {"role": "assistant", "content": reply1}, NEXT]
    reply2, _ = await _turn(spec, second, "t2")
    links = [f for f in _files() if f not in first]
    assert len(links) == 1 and links[0].name.count(".") == 2, links
    assert links[0].name.split(".")[1] in {f.name.split(".")[0] for f in first}
    assert links[0].stat().st_size < min(first.values()) / 2  # not the whole prefix again
    assert links[0].stat().st_mode & 0o777 == 0o600
    third = [*second, {"role": "assistant", "content": reply2},
             NEXT]
    answer, usage = await _turn(spec, third, "t3")
    assert usage.cached_tokens >= usage.prompt_tokens - FRAME, usage
    for f in _files():  # only the first two turns' chain: damage its link
        if f not in first and f != links[0]:
            f.unlink()
    data = bytearray(links[0].read_bytes())
    data[-7] ^= 0x10
    links[0].write_bytes(bytes(data))
    damaged, usage = await _turn(spec, third, "t4")
    assert usage.cached_tokens == 0, usage
    assert not links[0].exists() and not any(f.exists() for f in first)
    # The same start: random weights leave near-ties that a fresh prefill and one over a
    # loaded cache may break apart several tokens on (float drift, not damage: a damaged
    # chain read as KV would differ from the first token).
    assert damaged[:24] == answer[:24], (damaged, answer)


async def test_a_restarted_llama_cpp_worker_loads_the_sequence_state_from_disk(
        bundled_gguf: Path, llmdeck_home: Path) -> None:
    spec = ModelSpec(str(bundled_gguf), "llamacpp", context_size=1024, options=(("kv_disk_gb", 0.5),))
    reply, first = await _turn(spec, [SYSTEM, FIRST], "t1", max_tokens=4)
    assert first.cached_tokens == 0 and _files()
    second_messages = [SYSTEM, FIRST, {"role": "assistant", "content": reply}, NEXT]
    _, second = await _turn(spec, second_messages, "t2", max_tokens=4)
    # the base transcript re-renders the reply as text: reuse runs at least through
    # the first turn's prompt
    assert second.cached_tokens >= first.prompt_tokens, (first, second)


def test_a_thinking_models_next_turn_prefills_only_the_new_message(
        tiny_qwen3: Path, tmp_path: Path, llmdeck_home: Path) -> None:
    """Under a Qwen3-style template (earlier turns lose their <think> block) each reply is
    kept as the next turn renders it: a turn prefills only the person's new message.
    Before, it prefilled the previous answer again too (the cache held the reasoning)."""
    import json
    import shutil

    from bench.kvdisk import QWEN3_THINKING, run
    from core.engines.kv_next_turn import reply_content
    from core.engines.mlx import MlxEngine

    model = tmp_path / "thinking"
    shutil.copytree(tiny_qwen3, model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["chat_template"] = QWEN3_THINKING
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    engine = MlxEngine(ModelSpec(str(model), "mlx", context_size=2048,
                                 options=(("warmup_batch_sizes", (1,)), ("kv_disk_gb", 0.05))))
    try:
        messages = [SYSTEM]
        for turn in range(3):
            question = f"Question {turn}: count to ten, then name three colours."
            messages.append({"role": "user", "content": question})
            forced = (f"<think>Turn {turn}. The user wants a count and some colours; "
                      f"one two three four five.</think>Red, green and blue ({turn}).")
            raw, usage = run(engine, messages, max_tokens=120,
                             schema=json.dumps({"enum": [forced]}))
            if turn:
                new = len(engine._tokenizer.encode(question))
                assert usage.prompt_tokens - usage.cached_tokens <= new + FRAME, (turn, usage)
            messages.append({"role": "assistant", "content": reply_content(raw, "qwen3")})
            while engine.has_work():  # the idle steps that build the next-turn cache
                engine.step()
    finally:
        engine.close()


def test_opening_a_conversation_warms_its_cache_before_the_person_sends(
        tiny_qwen3: Path, llmdeck_home: Path) -> None:
    """A new engine (a restarted worker) told that a conversation was opened loads its
    stored chain into memory in idle time: the next turn reuses the history even with
    the files gone by then. Before, nothing could be warmed (no `warm`)."""
    from bench.kvdisk import run
    from core.engines.mlx import MlxEngine

    def engine() -> MlxEngine:
        return MlxEngine(ModelSpec(str(tiny_qwen3), "mlx", context_size=1024,
                                   options=(("warmup_batch_sizes", (1,)), ("kv_disk_gb", 0.05))))

    first = engine()
    try:
        reply, _ = run(first, [SYSTEM, FIRST], max_tokens=16)
    finally:
        first.close()  # finishes the next-turn cache and its write
    assert _files()
    history = [SYSTEM, FIRST, {"role": "assistant", "content": reply}]
    later = engine()
    try:
        assert later.warm(GenerationRequest("open", tuple(history)))
        while later.has_work():  # the idle steps: nothing was sent yet
            later.step()
        assert not later.warm(GenerationRequest("open", tuple(history)))  # memory has it now
        for f in _files():
            f.unlink()
        _, usage = run(later, [*history, NEXT], max_tokens=4)
        assert usage.cached_tokens >= usage.prompt_tokens - FRAME, usage
    finally:
        later.close()
