"""PromptRead: the prompt's count before the prefill, sent only when a request asks
(Anthropic's message_start), and able to cross the service's socket like any event."""

from __future__ import annotations

from core.engines.base import GenerationRequest, ModelSpec
from core.engines.scripted import ScriptedEngine
from core.events import PromptRead
from core.service.codec import decode, encode
from tests.fixtures.engines import drain


def test_it_crosses_the_codec() -> None:
    assert decode(encode([PromptRead(120, 100)])) == [PromptRead(120, 100)]


def test_an_engine_sends_it_only_when_asked() -> None:
    engine = ScriptedEngine(ModelSpec("s", "scripted", options=(("reply", "Hi."),)))
    ask = ({"role": "user", "content": "Count me."},)
    engine.submit(GenerationRequest("plain", ask))
    engine.submit(GenerationRequest("asked", ask, report_prompt=True))
    events = drain(engine)
    assert not any(isinstance(e, PromptRead) for e in events["plain"])
    assert events["asked"][0] == PromptRead(engine._prompt_tokens(GenerationRequest("x", ask)), 0)


def test_the_scripted_engines_replies_for_keep_side_requests_off_the_turn() -> None:
    """(The scripted engine's replies_for, which the opencode test uses for its title.)"""
    engine = ScriptedEngine(ModelSpec("s", "scripted", options=(
        ("replies", ["first", "second"]), ("replies_for", [["title generator", "A title"]]))))

    def reply(text: str, rid: str) -> str:
        engine.submit(GenerationRequest(rid, ({"role": "system", "content": text},)))
        return "".join(getattr(e, "text", "") for e in drain(engine)[rid])

    assert reply("You are an agent.", "a") == "first"
    assert reply("You are a title generator.", "t") == "A title"
    assert reply("You are an agent.", "b") == "second"
