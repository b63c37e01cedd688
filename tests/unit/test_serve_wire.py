"""The OpenAI wire format both ways, remote settings and the serve command's refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.config import RemoteEndpoint, Sampling, Settings
from core.engines.base import GenerationRequest
from core.events import Error
from core.openai_wire import error_event_for, request_body
from core.remote import remote_models
from core.remote.refs import remote_model_string, remote_ref
from core.server.cli import main as serve_main
from core.server.handle import is_loopback
from core.server.wire import ApiError, parse_chat

HI = [{"role": "user", "content": "hi"}]


def test_parse_chat_maps_openai_fields_onto_the_request() -> None:
    call = parse_chat({
        "model": "m", "stream": True, "stream_options": {"include_usage": True},
        "messages": [{"role": "developer", "content": [{"type": "text", "text": "be brief"}]},
                     *HI,
                     {"role": "assistant", "content": None, "tool_calls": [
                         {"id": "c1", "type": "function",
                          "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
                     {"role": "tool", "tool_call_id": "c1", "content": "2"}],
        "temperature": 0.2, "max_completion_tokens": 7, "stop": "END", "seed": 3, "user": "s1",
    }, Sampling())
    r = call.request
    assert (call.model, call.stream, call.include_usage) == ("m", True, True)
    assert r.messages[0] == {"role": "system", "content": "be brief"}
    assert r.messages[2]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    assert r.messages[3]["tool_call_id"] == "c1"
    assert (r.sampling.temperature, r.sampling.max_tokens, r.sampling.stop, r.sampling.seed) == (0.2, 7, ("END",), 3)
    assert r.session_id == "s1"


def test_unset_sampling_falls_back_to_the_app_settings() -> None:
    defaults = Sampling(temperature=0.3, max_tokens=99)
    r = parse_chat({"model": "m", "messages": HI}, defaults).request
    assert (r.sampling.temperature, r.sampling.max_tokens) == (0.3, 99)


def test_tool_choice_none_sends_no_tools() -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert parse_chat({"model": "m", "messages": HI, "tools": tools}, Sampling()).request.tools
    assert parse_chat({"model": "m", "messages": HI, "tools": tools, "tool_choice": "none"},
                      Sampling()).request.tools == ()


@pytest.mark.parametrize(("body", "param"), [
    ({"messages": HI}, "model"),
    ({"model": "m", "messages": "hi"}, "messages"),
    ({"model": "m", "messages": HI, "max_tokens": 1.5}, "max_tokens"),
    ({"model": "m", "messages": HI, "seed": "x"}, "seed"),
    ({"model": "m", "messages": HI, "stream": "yes"}, "stream"),
    ({"model": "m", "messages": HI, "temperature": True}, "temperature"),
    ({"model": "m", "messages": HI, "min_p": 2}, "min_p"),
])
def test_bad_bodies_name_the_parameter(body: dict, param: str) -> None:
    with pytest.raises(ApiError) as info:
        parse_chat(body, Sampling())
    assert info.value.status == 400 and info.value.param == param
    assert param in info.value.message


def test_defaults_that_sdks_send_for_unsupported_fields_are_accepted() -> None:
    call = parse_chat({"model": "m", "messages": HI, "presence_penalty": 0, "frequency_penalty": 0.0,
                       "logprobs": False, "top_logprobs": None, "response_format": {"type": "text"},
                       "logit_bias": {}}, Sampling())
    assert call.request.sampling.repetition_penalty == Sampling().repetition_penalty


@pytest.mark.parametrize(("extra", "param", "words"), [
    ({"presence_penalty": 2.5}, "presence_penalty", "between -2 and 2"),
    ({"frequency_penalty": -3}, "frequency_penalty", "between -2 and 2"),
    ({"frequency_penalty": "high"}, "frequency_penalty", "a number"),
    ({"presence_context_size": 0}, "presence_context_size", "between 1 and"),
    ({"repetition_context_size": 1.5}, "repetition_context_size", "an integer"),
    ({"logprobs": "yes"}, "logprobs", "true or false"),
    ({"top_logprobs": 3}, "top_logprobs", "needs logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "between 0 and 20"),
    ({"logit_bias": {"50256": 101}}, "logit_bias", "between -100 and 100"),
    ({"logit_bias": {"fifty": 1}}, "logit_bias", "token ids"),
    ({"logit_bias": {"-3": 1}}, "logit_bias", "0 or more"),
    ({"logit_bias": {"5": "up"}}, "logit_bias", "numbers from -100"),
    ({"logit_bias": [5]}, "logit_bias", "an object"),
    ({"response_format": {"type": "xml"}}, "response_format", "'xml' is not supported"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format", "schema as an object"),
    ({"response_format": "json"}, "response_format", "must be an object"),
])
def test_fields_we_cannot_honour_are_400_not_ignored(extra: dict, param: str, words: str) -> None:
    with pytest.raises(ApiError) as info:
        parse_chat({"model": "m", "messages": HI, **extra}, Sampling())
    assert info.value.status == 400 and info.value.param == param
    assert words in info.value.message


def test_sampling_fields_reach_the_request() -> None:
    call = parse_chat({"model": "m", "messages": HI, "presence_penalty": 0.5, "frequency_penalty": -1,
                       "presence_context_size": 8, "logit_bias": {"7": -100, "9": 2.5}, "seed": 3,
                       "logprobs": True, "top_logprobs": 20, "min_p": 0.1, "top_k": 5}, Sampling())
    s = call.request.sampling
    assert (s.presence_penalty, s.frequency_penalty, s.presence_context_size) == (0.5, -1.0, 8)
    assert s.logit_bias == ((7, -100.0), (9, 2.5)) and s.seed == 3
    assert (s.logprobs, s.top_logprobs, s.min_p, s.top_k) == (True, 20, 0.1, 5)
    assert s.json_schema is None


@pytest.mark.parametrize(("fmt", "schema"), [
    ({"type": "json_object"}, {"type": "object"}),
    ({"type": "json_schema", "json_schema": {"name": "p", "strict": True,
                                             "schema": {"type": "array"}}}, {"type": "array"}),
])
def test_response_format_becomes_the_enforced_schema(fmt: dict, schema: dict) -> None:
    s = parse_chat({"model": "m", "messages": HI, "response_format": fmt}, Sampling()).request.sampling
    assert json.loads(s.json_schema) == schema


def test_request_body_sends_history_tool_calls_as_json_strings() -> None:
    request = GenerationRequest("r", (
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "name": "f", "arguments": {"x": 1}}]},
    ))
    body = request_body(request, "remote-model")
    call = body["messages"][0]["tool_calls"][0]
    assert call == {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}
    assert body["stream_options"] == {"include_usage": True} and body["model"] == "remote-model"


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "f"}}])
def test_tool_choice_is_read_and_sent_on_to_a_remote(choice: object) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    request = parse_chat({"model": "m", "messages": HI, "tools": tools, "tool_choice": choice},
                         Sampling()).request
    assert request.tool_choice == "required"
    assert request.tool_name == (None if choice == "required" else "f")
    assert request_body(request, "remote")["tool_choice"] == choice
    free = parse_chat({"model": "m", "messages": HI, "tools": tools, "tool_choice": "auto"},
                      Sampling()).request
    assert free.tool_choice == "auto" and "tool_choice" not in request_body(free, "remote")


@pytest.mark.parametrize(("body", "words"), [
    ({"tool_choice": "required"}, "needs 'tools'"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function", "function": {"name": "g"}}}, "not among the offered"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": 3}, "must be"),
])
def test_bad_tool_choices_are_400s_naming_it(body: dict, words: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_chat({"model": "m", "messages": HI, **body}, Sampling())
    assert words in str(err.value.body()) and err.value.body()["error"]["param"] == "tool_choice"


@pytest.mark.parametrize(("status", "body", "code", "words"), [
    (400, {"error": {"message": "bad temperature", "code": None}}, "BAD_REQUEST", "bad temperature"),
    (400, {"error": {"message": "too long", "code": "context_length_exceeded"}}, "CONTEXT_OVERFLOW", "too long"),
    (401, {"error": {"message": "no"}}, "LOAD_FAILED", "API key"),
    (500, {"error": {"message": "worker died", "code": "worker_crashed"}}, "WORKER_CRASHED", "worker died"),
    (502, "<html>bad gateway</html>", "INTERNAL", "HTTP 502"),
    (429, {"error": "busy"}, "INTERNAL", "try again"),
])
def test_remote_errors_become_event_codes(status: int, body: object, code: str, words: str) -> None:
    event = error_event_for(status, body, "The remote 'gpu'")
    assert isinstance(event, Error) and event.code == code and words in event.message
    assert event.message.startswith("The remote 'gpu' answered")


def test_remote_refs_round_trip() -> None:
    assert remote_ref(remote_model_string("gpu", "org/qwen3-32b")) == ("gpu", "org/qwen3-32b")
    assert remote_ref("/models/qwen.gguf") is None and remote_ref("remote:gpu") is None
    assert remote_ref(None) is None


def test_remotes_load_from_settings_and_bad_entries_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        '[[remotes]]\nname = "gpu"\nurl = "http://gpu:8000/v1"\napi_key_env = "GPU_KEY"\n'
        'models = ["qwen3-32b", "llama-70b"]\n'
        '[[remotes]]\nname = "broken"\nurl = "gpu:8000"\n'
        '[[remotes]]\nname = "typo"\nurl = "http://x/v1"\napikey = "k"\n', encoding="utf-8")
    settings = Settings.load(path)
    assert [r.name for r in settings.remotes] == ["gpu"]
    assert len(settings.problems) == 2 and "broken" in settings.problems[0]
    assert [m.model_string for m in remote_models(settings)] == ["remote:gpu/qwen3-32b", "remote:gpu/llama-70b"]
    settings.save(path)
    assert Settings.load(path).remotes == settings.remotes


def test_api_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_KEY", "from-env")
    assert RemoteEndpoint("gpu", "http://x/v1", api_key="file", api_key_env="GPU_KEY").key() == "from-env"
    assert RemoteEndpoint("gpu", "http://x/v1", api_key="file").key() == "file"


def test_loopback_detection() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "127.5.5.5"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "192.168.1.2", "::", "example.com"))


def test_serve_refuses_public_bind_without_key(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("LLMDECK_API_KEY", raising=False)
    assert serve_main(["--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "without an API key" in err and "127.0.0.1" in err


def test_a_dropped_remote_is_not_promised_a_worker_restart() -> None:
    """A remote or cluster that drops mid-request: the API error keeps its own advice and
    does not claim the server restarts anything (issue 32, item 7, at the server's edge)."""
    from core.events import Error
    from core.server.wire import api_error_for

    error = api_error_for(Error("WORKER_CRASHED", "The remote at http://gpu-box:8000 closed the "
                                "connection mid-reply; check that it is running, then retry."))
    assert error.status == 500 and "gpu-box" in error.message
    assert "the server restarts" not in error.message and "retry" in error.message
