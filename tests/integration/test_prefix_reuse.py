"""The prompt cache is reused end to end: later turns, regenerate, edit, a shared system prompt.

A real MLX worker (random-weight qwen3-shaped folder) behind `llmdeck serve`, driven by
the official openai client, and the same Runtime driven as the TUI drives it. Every check
reads the cached-token count the engine reports (usage.prompt_tokens_details.cached_tokens
over HTTP, Usage.cached_tokens in the Runtime) and compares it with the prompt it belongs to.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from core.config import Settings
from core.engines.base import ModelSpec
from core.events import Usage
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir
from tests.fixtures.serve import ServerThread

pytestmark = pytest.mark.slow

SYSTEM = "You are a careful assistant. " + "Answer briefly and count when asked. " * 30
# The template's tokens around one message: <|im_end|>\n<|im_start|>user\n ... assistant\n
FRAME = 10


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    model = build_model_dir(tmp_path_factory.mktemp("prefix") / "tiny-qwen3", QWEN3_SHAPE)
    spec = ModelSpec(str(model), "mlx", context_size=4096,
                     options=(("max_concurrency", 4), ("warmup_batch_sizes", (1,)), ("label", "tiny")))
    settings = Settings(context_size=4096)
    settings.sampling.temperature = 0.0
    settings.sampling.max_tokens = 12
    settings.tools_enabled = False
    srv = ServerThread(spec, settings=settings, served_name="tiny")
    yield srv
    srv.close()


def _tokens(srv: ServerThread, text: str) -> int:
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(Path(srv.runtime.model.info["path"]) / "tokenizer.json"))
    return len(tok.encode(text))


def _chat(client: OpenAI, messages: list[dict[str, str]]) -> tuple[str, Any]:
    reply = client.chat.completions.create(model="tiny", messages=messages, max_tokens=12,
                                           temperature=0.0)
    return reply.choices[0].message.content or "", reply.usage


def test_serve_reuses_the_cache_for_later_turns_regenerate_edit_and_a_shared_system_prompt(
        server: ServerThread, llmdeck_home: Path) -> None:
    with OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=120) as client:
        system = {"role": "system", "content": "HTTP. " + SYSTEM}
        history = [system, {"role": "user", "content": "Count to three."}]
        a1, t1 = _chat(client, history)
        history += [{"role": "assistant", "content": a1}, {"role": "user", "content": "And to five?"}]
        a2, t2 = _chat(client, history)
        # The next turn prefills only what is new: turn 1's whole prompt comes from the cache.
        assert t1.prompt_tokens_details.cached_tokens < 8  # nothing of it was seen before
        assert t2.prompt_tokens_details.cached_tokens >= t1.prompt_tokens

        # Regenerate: the very same prompt again; all of it but the token fed for logits.
        _, regen = _chat(client, history)
        assert regen.prompt_tokens == t2.prompt_tokens
        assert regen.prompt_tokens_details.cached_tokens == t2.prompt_tokens - 1

        # Edit and resend the last message: reused up to where the edited message starts.
        edited_text = "Count to nine instead, please, slowly."
        edited = history[:-1] + [{"role": "user", "content": edited_text}]
        _, edit = _chat(client, edited)
        assert edit.prompt_tokens_details.cached_tokens >= t2.prompt_tokens_details.cached_tokens
        assert edit.prompt_tokens - edit.prompt_tokens_details.cached_tokens \
            <= _tokens(server, edited_text) + FRAME

        # A second conversation with the same system prompt reuses the first one's.
        user = "Another chat: name a colour."
        _, other = _chat(client, [system, {"role": "user", "content": user}])
        assert other.prompt_tokens - other.prompt_tokens_details.cached_tokens \
            <= _tokens(server, user) + FRAME
        assert other.prompt_tokens_details.cached_tokens >= _tokens(server, system["content"])


async def _turn_usage(turn: Any) -> Usage:
    usage = None
    async for event in turn.events():
        if isinstance(event, Usage):
            usage = event
    assert usage is not None
    return usage


def test_runtime_reuses_the_cache_for_later_turns_regenerate_edit_and_a_shared_system_prompt(
        server: ServerThread) -> None:
    rt = server.runtime
    rt.settings.system_prompt = "Runtime. " + SYSTEM

    async def flow() -> dict[str, Usage]:
        first = await rt.start_turn(None, "Count to three.")
        u1 = await _turn_usage(first)
        cid = first.conversation_id
        second = await rt.start_turn(cid, "And to five?")
        u2 = await _turn_usage(second)
        regen = await _turn_usage(await rt.regenerate(cid, second.user_message_id))
        edit = await _turn_usage(await rt.edit_and_resend(cid, second.user_message_id,
                                                          "Count to nine instead, please, slowly."))
        other = await _turn_usage(await rt.start_turn(None, "Another chat: name a colour."))
        return {"u1": u1, "u2": u2, "regen": regen, "edit": edit, "other": other}

    u = server.call(flow())
    assert u["u1"].cached_tokens < 8
    assert u["u2"].cached_tokens >= u["u1"].prompt_tokens
    assert u["regen"].prompt_tokens == u["u2"].prompt_tokens
    assert u["regen"].cached_tokens == u["u2"].prompt_tokens - 1
    assert u["edit"].cached_tokens >= u["u2"].cached_tokens
    assert u["edit"].prompt_tokens - u["edit"].cached_tokens \
        <= _tokens(server, "Count to nine instead, please, slowly.") + FRAME
    assert u["other"].prompt_tokens - u["other"].cached_tokens \
        <= _tokens(server, "Another chat: name a colour.") + FRAME
    assert u["other"].cached_tokens >= _tokens(server, rt.settings.system_prompt)


def test_a_finished_burst_is_indexed_before_the_engine_goes_idle(tmp_path: Path) -> None:
    """The caches of a batch that ended together are split and indexed while the worker is
    idle, not during the next request's admission (that added 3-20 ms to a lone TTFT)."""
    from core.engines.base import GenerationRequest, SamplingParams
    from core.engines.mlx import MlxEngine

    model = build_model_dir(tmp_path / "tiny", QWEN3_SHAPE)
    engine = MlxEngine(ModelSpec(str(model), "mlx", context_size=2048,
                                 options=(("warmup_batch_sizes", (1,)), ("max_concurrency", 16))))
    try:
        params = SamplingParams(temperature=0.0, max_tokens=6)
        for i in range(16):
            engine.submit(GenerationRequest(f"burst-{i}", (
                {"role": "user", "content": f"Burst {i}: " + "count " * (10 + i)},), params))
        while engine.has_work():
            engine.step()
        assert engine._prefix.pending == 0 and not engine._unsaved
        assert len(engine._prefix) >= 8  # the burst's caches are there to be reused
    finally:
        engine.close()
