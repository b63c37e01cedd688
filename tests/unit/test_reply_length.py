"""A reply's length: by default the room left in the context, a setting still caps it
(issue 46, item 1), for the app and every API dialect."""

from __future__ import annotations

import pytest

from core import settings_rules as rules
from core.config import Sampling, Settings
from core.engines.base import ROOM_LEFT, GenerationRequest, SamplingParams
from core.openai_wire import request_body
from core.server.wire import parse_sampling

HI = [{"role": "user", "content": "hi"}]


def test_the_app_default_is_the_room_left_in_the_context() -> None:
    settings = Settings()
    assert settings.sampling.max_tokens == 0  # shown blank: no cap of its own
    assert settings.sampling.to_params().max_tokens == ROOM_LEFT


def test_a_setting_still_caps_the_reply() -> None:
    assert Sampling(max_tokens=300).to_params().max_tokens == 300


def test_an_api_request_without_max_tokens_gets_the_room_left() -> None:
    assert parse_sampling({"model": "m", "messages": HI}, Sampling()).max_tokens == ROOM_LEFT
    asked = parse_sampling({"model": "m", "messages": HI, "max_tokens": 40}, Sampling())
    assert asked.max_tokens == 40


def test_a_blank_max_tokens_field_means_no_cap() -> None:
    assert rules.max_tokens("", 4096) == 0
    assert rules.max_tokens("0", 4096) == 0
    with pytest.raises(rules.Refused, match="less than the context"):
        rules.max_tokens("4096", 4096)


def test_a_remote_is_not_sent_a_cap_it_was_not_given() -> None:
    open_ended = GenerationRequest("r", tuple(HI), SamplingParams(max_tokens=ROOM_LEFT))
    assert "max_tokens" not in request_body(open_ended, "m")
    capped = GenerationRequest("r", tuple(HI), SamplingParams(max_tokens=64))
    assert request_body(capped, "m")["max_tokens"] == 64


def test_a_remote_reply_without_a_cap_is_still_bounded() -> None:
    from core.remote.reading import OPEN_ENDED_TOKENS, ReplyBounds

    bounds = ReplyBounds.for_max_tokens(ROOM_LEFT)
    assert bounds.max_tokens == OPEN_ENDED_TOKENS and bounds.seconds < 600 + OPEN_ENDED_TOKENS
