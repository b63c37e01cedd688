"""The server's edge bounds (core.server.limits) and its connection cap, without a server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.engines.base import GenerationRequest
from core.server.limits import (
    MAX_NESTING,
    check_numbers,
    check_prompt_size,
    check_shape,
    load_body,
    too_large,
)
from core.server.wire import ApiError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("raw", "words"), [
    (b'{"a": NaN}', "not finite"), (b'{"a": -Infinity}', "not finite"), (b'{"a": 1e400}', "1e400"),
    (b"\xff", "not UTF-8"), (b"{", "not valid JSON"), (b"[" * 100_000, "nested more than"),
])
def test_load_body_refuses_what_is_not_finite_utf8_json(raw: bytes, words: str) -> None:
    with pytest.raises(ApiError) as info:
        load_body(raw)
    assert info.value.status == 400 and words in info.value.message


def test_nesting_is_bounded_and_named() -> None:
    ok: object = 1
    for _ in range(MAX_NESTING - 1):
        ok = [ok]
    check_shape({"x": ok})
    with pytest.raises(ApiError) as info:
        check_shape({"x": [ok]})
    assert "more than 64 levels" in info.value.message


def test_a_surrogate_is_named_by_its_path_and_a_bad_key_is_shown_escaped() -> None:
    with pytest.raises(ApiError) as info:
        check_shape({"messages": [{"role": "user", "content": ["ok", "b\udc80"]}]})
    assert info.value.param == "messages[0].content[1]" and "(U+DC80) at character 1" in info.value.message
    with pytest.raises(ApiError) as info:
        check_shape({"k\ud800" * 30: 1})
    assert "\\ud800" in info.value.message and len(info.value.message) < 400
    json.dumps(info.value.body(), ensure_ascii=False).encode()  # the refusal itself is sendable


def test_integer_parameters_are_bounded_and_floats_finite() -> None:
    check_numbers({"max_tokens": 2**31 - 1, "seed": 2**63 - 1, "top_k": 0})
    for body in ({"max_tokens": 2**31}, {"top_k": -(2**40)}, {"seed": -1}, {"temperature": float("nan")}):
        with pytest.raises(ApiError):
            check_numbers(body)


def test_prompt_size_is_bounded_in_characters() -> None:
    def req(text: str) -> GenerationRequest:
        return GenerationRequest("r", ({"role": "user", "content": text},))

    check_prompt_size(req("a" * (64 * 100 - 10)), 100)
    with pytest.raises(ApiError) as info:
        check_prompt_size(req("a" * 64 * 100), 100)
    assert info.value.code == "context_length_exceeded"


def test_413_names_the_size_when_known() -> None:
    assert "is 40,000,000 bytes" in too_large(40_000_000).message
    assert "larger than that" in too_large(None).message


def test_the_connection_cap_raises_a_short_descriptor_limit_and_fits_under_it() -> None:
    code = ("import resource\n"
            "from core.server.connections import ServeLimits\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (300, 400))\n"
            "print(ServeLimits(max_connections=512).connection_cap(),"
            " resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
            "print(ServeLimits(max_connections=4).connection_cap())\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["144", "400", "4"]  # soft raised to the hard 400, 256 kept for the rest
