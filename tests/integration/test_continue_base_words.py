"""g on a base model's cut reply, on the real engine: the continuation keeps the space
between the two words it joins. A base model's transcript prompt drops a reply's leading
whitespace ("Assistant:" leaves a space), and the engines drop it from a continued reply
too, so "a big, black," went on as "a big, black,fluffy" (seen with the bundled Gemma).
The engines (core/engines/llamacpp.py, mlx/admission.py) no longer trim a continued
reply's leading space (request.reply_prefix set)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import Settings
from core.engines.base import ModelSpec
from core.events import TextDelta
from core.runtime import Runtime

pytestmark = pytest.mark.slow
PREFIX = "A dog is a big, black,"


async def test_a_continued_base_reply_keeps_the_space_between_words(bundled_gguf: Path) -> None:
    settings = Settings(context_size=512)
    settings.sampling.temperature = 0.0
    settings.sampling.max_tokens = 6
    rt = Runtime(settings, model_spec=ModelSpec(str(bundled_gguf), "llamacpp", context_size=512))
    await rt.start()
    try:
        turn = await rt.start_turn(None, "Describe what a dog looks like, in detail please.")
        [e async for e in turn.events()]
        cid, mid = turn.conversation_id, turn.assistant_message_id
        await rt.store_call(rt.store_handle.update_message, mid, content=PREFIX, status="cut")
        more = await rt.continue_reply(cid, mid)
        text = "".join([e.text async for e in more.events() if isinstance(e, TextDelta)])
        assert text and text[0].isspace(), repr(text)
        stored = (await rt.messages(cid))[-1]
        assert stored.content.startswith(PREFIX + " "), stored.content
    finally:
        await rt.close()
