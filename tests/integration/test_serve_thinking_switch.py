"""The dialects' thinking switches reach the model's chat template on `llmdeck serve`:
Anthropic's `thinking: {type: "disabled"}`, Ollama's `think: false` and OpenAI's
`reasoning_effort: "none"` (chat; `reasoning.effort` in Responses) turn a model's
thinking off (Qwen3's enable_thinking: its prompt ends in an empty think block, so the
model spends no tokens reasoning), "enabled" / true / a level turn it on. Before, the
first two only hid the reasoning the model still wrote, and the third was dropped.

Seen from outside through each real client: the prompt's token count, which grows by the
empty think block only when thinking is off (in Anthropic's usage, the sum of input_tokens
and the cache's reads and writes, which it reports apart). The model is the tiny random-weight
Qwen3-shaped MLX model with the switch in its template (tests/fixtures/thinking_models).
"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import ollama
import pytest

from core.engines.base import ModelSpec
from tests.fixtures.serve import ServerThread, served
from tests.fixtures.thinking_models import build_thinking_model_dir

pytestmark = pytest.mark.timeout(240)
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    folder = build_thinking_model_dir(tmp_path_factory.mktemp("thinker"))
    spec = ModelSpec(str(folder), "mlx", context_size=1024,
                     options=(("warmup_batch_sizes", (1,)), ("kv_disk_gb", 0)))
    yield from served(spec, tmp_path_factory.mktemp("thinker-home"), served_name="thinker")


def test_anthropics_thinking_switch_reaches_the_template(server: ServerThread) -> None:
    client = anthropic.Anthropic(base_url=server.url.removesuffix("/v1"), api_key="x",
                                 max_retries=0, timeout=60)

    def prompt_tokens(**kwargs: object) -> int:
        reply = client.messages.create(model="thinker", max_tokens=2, messages=HI, **kwargs)
        # Anthropic reports the prompt in parts: input_tokens are those not read from the
        # cache. The second request reuses the first's cached prefix, so only the sum is
        # the prompt's length.
        usage = reply.usage
        return (usage.input_tokens + (usage.cache_read_input_tokens or 0)
                + (usage.cache_creation_input_tokens or 0))

    on = prompt_tokens(thinking={"type": "enabled", "budget_tokens": 1024})
    off = prompt_tokens(thinking={"type": "disabled"})
    assert off - on >= 2, (on, off)  # the empty think block, rendered only when off
    assert prompt_tokens() == on  # absent: the model's default (this one thinks)
    with pytest.raises(anthropic.BadRequestError, match="thinking"):
        prompt_tokens(thinking={"type": "sometimes"})


def test_ollamas_think_reaches_the_template(server: ServerThread) -> None:
    client = ollama.Client(host=server.url.removesuffix("/v1"), timeout=60)

    def prompt_tokens(**kwargs: object) -> int:
        reply = client.chat(model="thinker", messages=HI, options={"num_predict": 2}, **kwargs)
        return reply.prompt_eval_count

    on, off = prompt_tokens(think=True), prompt_tokens(think=False)
    assert off - on >= 2, (on, off)
    assert prompt_tokens() == on


def test_openais_reasoning_effort_none_turns_thinking_off(server: ServerThread) -> None:
    """Chat's `reasoning_effort` and the Responses API's `reasoning.effort`: "none" is
    off, a level is on (a switch has two states), absent is the model's default."""
    import openai

    client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=60)

    def chat_tokens(**kwargs: object) -> int:
        reply = client.chat.completions.create(model="thinker", messages=HI, max_tokens=2,
                                               **kwargs)
        return reply.usage.prompt_tokens

    on, off = chat_tokens(reasoning_effort="high"), chat_tokens(reasoning_effort="none")
    assert off - on >= 2, (on, off)
    assert chat_tokens() == on

    def responses_tokens(**kwargs: object) -> int:
        reply = client.responses.create(model="thinker", input="Hi", max_output_tokens=2,
                                        **kwargs)
        return reply.usage.input_tokens

    assert responses_tokens(reasoning={"effort": "none"}) == off
    assert responses_tokens(reasoning={"effort": "low"}) == on
    with pytest.raises(openai.BadRequestError, match="reasoning_effort"):
        chat_tokens(reasoning_effort="extreme")
