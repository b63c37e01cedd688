"""POST /v1/completions through the official openai client (`client.completions.create`):
raw text in and out (no chat template, no reasoning or tool-call parsing), legacy logprobs,
streamed and not, on the tiny MLX fixture model, the bundled Gemma on llama.cpp and the
scripted engine; and the clear 400s for what it does not take."""

from __future__ import annotations

import json
import random
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from core.config import RemoteEndpoint, Settings
from core.engines.base import ModelSpec
from tests.fixtures.hostile_text import hostile_strings
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir
from tests.fixtures.serve import PLAIN_REPLY, ServerThread, scripted_spec, served
from tests.helpers.http_raw import exchange, post_bytes

PROMPT = "Once upon a time, a cat"


@pytest.fixture(scope="module")
def scripted_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    settings = Settings()  # a remote model is listed (never reached: chat only)
    settings.remotes = [RemoteEndpoint(name="peer", url="http://127.0.0.1:9/v1", models=["big"])]
    yield from served(scripted_spec(reply=PLAIN_REPLY), tmp_path_factory.mktemp("home"),
                      settings=settings)


@pytest.fixture(scope="module")
def scripted(scripted_server: ServerThread) -> OpenAI:
    return OpenAI(base_url=scripted_server.url, api_key="x", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("tiny-completions"), QWEN3_SHAPE)


@pytest.fixture(scope="module")
def tiny(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    spec = ModelSpec(str(tiny_dir), "mlx", context_size=256,
                     options=(("max_concurrency", 4), ("warmup_batch_sizes", (1,))))
    for srv in served(spec, tmp_path_factory.mktemp("home"), served_name="tiny"):
        yield OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=60)


def check_legacy_logprobs(logprobs: Any, text: str, alternatives: int, start: int) -> None:
    """The legacy shape, consistent with the text: tokens spell it, offsets count from
    the prompt's start, each top dict holds the alternatives and the sampled token."""
    assert "".join(logprobs.tokens) == text
    assert len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == len(logprobs.tokens)
    offsets = [start]
    for token in logprobs.tokens[:-1]:
        offsets.append(offsets[-1] + len(token))
    assert logprobs.text_offset == offsets
    for token, logprob, top in zip(logprobs.tokens, logprobs.token_logprobs,
                                   logprobs.top_logprobs, strict=True):
        assert logprob <= 0 and top[token] == pytest.approx(logprob)
        # Tokens that are parts of one character all read "\ufffd": one key for them all.
        assert alternatives <= len(top) <= alternatives + 1 or "\ufffd" in top


def merged(chunks: list[Any]) -> Any:
    """The legacy logprobs of a stream's chunks, joined into one object of the same shape."""
    out = SimpleNamespace(tokens=[], token_logprobs=[], top_logprobs=[], text_offset=[])
    for chunk in chunks:
        logprobs = chunk.choices[0].logprobs
        if logprobs is not None:
            for field in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
                getattr(out, field).extend(getattr(logprobs, field))
    return out


def test_scripted_text_comes_back_raw_with_echo_stop_and_usage(scripted: OpenAI) -> None:
    reply = scripted.completions.create(model="scripted", prompt=PROMPT, max_tokens=100)
    choice = reply.choices[0]
    assert reply.object == "text_completion" and reply.id.startswith("cmpl-")
    assert choice.text == PLAIN_REPLY  # <think> kept: a completion is never parsed
    assert choice.finish_reason == "stop" and choice.logprobs is None
    assert reply.usage.prompt_tokens == len(PROMPT) // 4  # the scripted engine's count
    echoed = scripted.completions.create(model="scripted", prompt=[PROMPT], echo=True,
                                         stop=["Hello"], max_tokens=100)
    assert echoed.choices[0].text == PROMPT + "<think>Short answer.</think>"
    short = scripted.completions.create(model="scripted", prompt=PROMPT, max_tokens=2)
    assert short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 2
    chunks = list(scripted.completions.create(model="scripted", prompt=PROMPT, stream=True, echo=True,
                                              stream_options={"include_usage": True}))
    assert chunks[0].choices[0].text == PROMPT
    assert "".join(c.choices[0].text for c in chunks if c.choices) == PROMPT + PLAIN_REPLY
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == reply.usage.completion_tokens


def _completion_metrics(server: ServerThread) -> dict[str, float]:
    """The /metrics figures of the /v1/completions route, read with prometheus_client's
    own parser (0 where the route has no sample yet)."""
    from prometheus_client.parser import text_string_to_metric_families

    page = httpx.get(server.url.removesuffix("/v1") + "/metrics", timeout=10)
    assert page.status_code == 200, page.text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(page.text):
        for sample in family.samples:
            if sample.labels.get("route") == "/v1/completions" and "le" not in sample.labels:
                key = sample.name + ":" + sample.labels.get("status", "")
                out[key] = out.get(key, 0) + sample.value
    return out


def test_completions_are_metered_like_chat(scripted_server: ServerThread,
                                           scripted: OpenAI) -> None:
    """The route shares chat's request lifecycle, so its tokens and first-token times
    reach /metrics (before, only its request count did)."""
    before = _completion_metrics(scripted_server)
    scripted.completions.create(model="scripted", prompt=PROMPT, max_tokens=100)
    list(scripted.completions.create(model="scripted", prompt=PROMPT, stream=True))
    after = _completion_metrics(scripted_server)

    def grew(name: str) -> float:
        return after.get(name, 0) - before.get(name, 0)

    assert grew("llmdeck_requests_total:200") == 2
    assert grew("llmdeck_generation_tokens_total:") > 0
    assert grew("llmdeck_prompt_tokens_total:") == 2 * (len(PROMPT) // 4)
    assert grew("llmdeck_time_to_first_token_seconds_count:") == 2


@pytest.mark.parametrize(("kwargs", "param", "words"), [
    ({"prompt": ["one", "two"]}, "prompt", "one prompt per request"),
    ({"prompt": [1, 2, 3]}, "prompt", "token ids is not supported"),
    ({"prompt": [[1, 2], [3]]}, "prompt", "token ids is not supported"),
    ({"prompt": ""}, "prompt", "is empty"),
    ({"prompt": PROMPT, "suffix": "the end."}, "suffix", "not supported"),
    ({"prompt": PROMPT, "n": 2}, "n", "Only n=1"),
    ({"prompt": PROMPT, "best_of": 3}, "best_of", "best_of=1"),
    ({"prompt": PROMPT, "logprobs": 21}, "logprobs", "from 0 to 20"),
    ({"prompt": PROMPT, "logprobs": 2, "echo": True}, "echo", "not supported"),
    ({"prompt": PROMPT, "temperature": 3}, "temperature", "between 0 and 2"),
    ({"prompt": PROMPT, "frequency_penalty": 5}, "frequency_penalty", "between -2 and 2"),
    ({"prompt": "x" * (4096 * 64 + 1)}, "prompt", "Send a shorter prompt"),
])
def test_what_completions_do_not_take_is_a_clear_400(scripted: OpenAI, kwargs: dict[str, Any],
                                                     param: str, words: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        scripted.completions.create(model="scripted", max_tokens=4, **kwargs)
    assert info.value.status_code == 400
    assert info.value.body["param"] == param and words in info.value.body["message"]


def test_missing_prompt_unknown_model_and_a_remote_model(scripted: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="'prompt' is required"):
        scripted.post("/completions", body={"model": "scripted"}, cast_to=object)
    with pytest.raises(openai.NotFoundError, match="not served here"):
        scripted.completions.create(model="nope", prompt=PROMPT)
    with pytest.raises(openai.BadRequestError, match="chat/completions only") as info:
        scripted.completions.create(model="peer/big", prompt=PROMPT)
    assert info.value.body["code"] == "unsupported_model"
    assert scripted.completions.create(model="scripted", prompt=PROMPT).choices[0].text


FIELDS = ["model", "prompt", "echo", "logprobs", "suffix", "best_of", "n", "stop", "stream",
          "stream_options", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed",
          "logit_bias", "presence_penalty", "frequency_penalty", "user"]


def hostile_bodies(n: int, seed: int) -> Iterator[bytes]:
    """Completion bodies with hostile values in 1-4 fields (hostile text, huge and
    non-finite numbers, wrong types, nested lists and objects)."""
    rng = random.Random(seed)
    texts = [text for _, text in hostile_strings(200, seed) if len(text) < 4000]

    def value(depth: int = 0) -> Any:
        pool = [lambda: None, lambda: rng.choice([True, False]), lambda: rng.randint(-3, 25),
                lambda: rng.choice([2**31, 2**63, 10**40, -(2**70)]),
                lambda: rng.choice([float("nan"), float("inf"), 1e308, -0.0]),
                lambda: rng.uniform(-100, 100), lambda: rng.choice(texts), lambda: ""]
        if depth < 2:
            pool += [lambda: [value(depth + 1) for _ in range(rng.randint(0, 3))],
                     lambda: {rng.choice(FIELDS + ["0", "300"]): value(depth + 1)}]
        return rng.choice(pool)()

    for _ in range(n):
        body: dict[str, Any] = {"model": "scripted", "prompt": "hi", "max_tokens": 4}
        for _ in range(rng.randint(1, 4)):
            body[rng.choice(FIELDS)] = value()
        yield post_bytes("/v1/completions", json.dumps(body).encode())


def test_300_hostile_completion_bodies_get_no_5xx_and_the_worker_stays(
        scripted_server: ServerThread, scripted: OpenAI) -> None:
    [pid] = scripted_server.runtime.pool.pids()
    host, port = scripted_server.handle.host, scripted_server.handle.port
    bodies = list(hostile_bodies(300, seed=22))  # seeds 1-3 x 3,000 by hand: no 5xx either
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda data: exchange(host, port, data, timeout=30), bodies))
    statuses = [reply.status for reply in replies]
    bad = [(status, data[-200:], reply.body[:200]) for status, data, reply
           in zip(statuses, bodies, replies, strict=True)
           if status >= 500 or status == 0 or (status >= 400 and "error" not in reply.json())]
    assert not bad, bad[:5]
    assert statuses.count(200) > 20 and statuses.count(400) > 100  # both kinds were reached
    assert scripted_server.runtime.pool.pids() == [pid]
    assert scripted_server.runtime.pool.status()[0].restarts == 0
    assert scripted.completions.create(model="scripted", prompt=PROMPT).choices[0].text == PLAIN_REPLY


def _poll(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_client_that_hangs_up_cancels_its_completion() -> None:
    # 500 pieces at 20 a second: 25 s of generation if nobody stopped it
    srv = ServerThread(scripted_spec(tokens_per_s=20, reply="slow " * 400))
    try:
        active = lambda: srv.runtime.worker_status()[0].active  # noqa: E731
        for stream in (False, True):
            body = json.dumps({"model": "scripted", "prompt": PROMPT, "max_tokens": 1000,
                               "stream": stream}).encode()
            sock = socket.create_connection((srv.handle.host, srv.handle.port))
            sock.sendall(post_bytes("/v1/completions", body))
            assert _poll(lambda: active() == 1, 30)
            if stream:  # the stream has begun: its first chunk arrived (the headers may
                sock.settimeout(30)  # come in a read of their own)
                got = b""
                while b"text_completion" not in got:
                    piece = sock.recv(65536)
                    assert piece, f"the stream closed before its first chunk: {got!r}"
                    got += piece
            sock.close()
            assert _poll(lambda: active() == 0, 15), f"stream={stream}: still generating"
    finally:
        srv.close()


@pytest.mark.slow
def test_mlx_raw_prompt_with_logprobs_streamed_and_not(tiny: OpenAI, tiny_dir: Path) -> None:
    from tokenizers import Tokenizer

    reply = tiny.completions.create(model="tiny", prompt=PROMPT, max_tokens=6, temperature=0,
                                    logprobs=5)
    choice = reply.choices[0]
    # Raw text: exactly the prompt's own tokens, no chat template around them.
    raw_ids = Tokenizer.from_file(str(tiny_dir / "tokenizer.json")).encode(PROMPT).ids
    assert reply.usage.prompt_tokens == len(raw_ids)
    chat = tiny.chat.completions.create(model="tiny", max_tokens=1,
                                        messages=[{"role": "user", "content": PROMPT}])
    assert chat.usage.prompt_tokens > reply.usage.prompt_tokens
    assert reply.usage.completion_tokens == len(choice.logprobs.tokens)
    check_legacy_logprobs(choice.logprobs, choice.text, 5, len(PROMPT))
    for logprob, top in zip(choice.logprobs.token_logprobs, choice.logprobs.top_logprobs, strict=True):
        assert logprob == pytest.approx(max(top.values()), abs=1e-5)  # greedy takes the best
    chunks = list(tiny.completions.create(model="tiny", prompt=PROMPT, max_tokens=6, temperature=0,
                                          logprobs=5, stream=True))
    # (Not compared token for token with the reply above: the second request reuses the
    # cached prompt, and logits computed in another shape may differ in their last bits.)
    streamed = merged(chunks)
    check_legacy_logprobs(streamed, "".join(c.choices[0].text for c in chunks), 5, len(PROMPT))
    finishes = [c.choices[0].finish_reason for c in chunks]
    assert set(finishes[:-1]) == {None}
    assert finishes[-1] == ("length" if len(streamed.tokens) == 6 else "stop")
    # Past the context (256 tokens) once tokenised, though short enough in characters to
    # be tokenised at all: the engine's refusal, said about a prompt.
    with pytest.raises(openai.BadRequestError) as info:
        tiny.completions.create(model="tiny", prompt="cat sat on the mat " * 200, max_tokens=2)
    assert info.value.body["code"] == "context_length_exceeded"
    assert info.value.body["param"] == "prompt"
    assert info.value.body["message"].startswith("The prompt is ")
    assert "Send a shorter prompt" in info.value.body["message"]
    after = tiny.completions.create(model="tiny", prompt=PROMPT, max_tokens=2, temperature=0)
    assert after.usage.completion_tokens >= 1  # the worker goes on


@pytest.mark.slow
def test_mlx_completions_honour_seed_bias_penalties_and_top_k(tiny: OpenAI) -> None:
    def ask(**kw: Any) -> Any:
        return tiny.completions.create(model="tiny", prompt=PROMPT, **{"max_tokens": 8, **kw})

    hot = {"temperature": 1.5}
    assert ask(seed=5, **hot).choices[0].text == ask(seed=5, **hot).choices[0].text
    forced = ask(temperature=0, logit_bias={"300": 100}, max_tokens=4, logprobs=0)
    assert len(set(forced.choices[0].logprobs.tokens)) == 1  # one token, four times
    first = forced.choices[0].logprobs
    assert first.top_logprobs[0] == {first.tokens[0]: pytest.approx(0, abs=1e-3)}  # logprobs=0
    # top_k=1 keeps only the most likely token, however hot: every sampled token is the
    # best of its alternatives (within this one request, so no cache effects).
    top1 = ask(seed=3, logprobs=3, frequency_penalty=1.0, presence_penalty=0.5, **hot,
               extra_body={"top_k": 1, "min_p": 0.0, "frequency_context_size": 16}).choices[0].logprobs
    for logprob, top in zip(top1.token_logprobs, top1.top_logprobs, strict=True):
        assert logprob == pytest.approx(max(top.values()), abs=1e-5)
    with pytest.raises(openai.BadRequestError, match="vocabulary has 512 tokens"):
        ask(logit_bias={"999999": 5})


@pytest.fixture(scope="module")
def gemma(bundled_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    spec = ModelSpec(path=str(bundled_gguf), engine="llamacpp", context_size=512)
    for srv in served(spec, tmp_path_factory.mktemp("home"), served_name="gemma",
                      settings=Settings(replicas=1)):
        yield OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=120)


@pytest.mark.slow
def test_llamacpp_raw_prompt_with_logprobs_streamed_and_not(gemma: OpenAI, bundled_gguf: Path) -> None:
    from llama_cpp import Llama

    prompt = "The capital of France is"
    vocab = Llama(str(bundled_gguf), vocab_only=True, verbose=False)
    raw_ids = vocab.tokenize(prompt.encode(), add_bos=True, special=True)
    reply = gemma.completions.create(model="gemma", prompt=prompt, max_tokens=8, temperature=0,
                                     logprobs=5)
    choice = reply.choices[0]
    assert reply.usage.prompt_tokens == len(raw_ids)  # BOS + the text, no turn markup
    assert choice.text.strip() and reply.usage.completion_tokens == len(choice.logprobs.tokens)
    check_legacy_logprobs(choice.logprobs, choice.text, 5, len(prompt))
    chunks = list(gemma.completions.create(model="gemma", prompt=prompt, max_tokens=8,
                                           temperature=0, logprobs=5, stream=True,
                                           stream_options={"include_usage": True}))
    streamed = merged(chunks[:-1])
    check_legacy_logprobs(streamed, "".join(c.choices[0].text for c in chunks[:-1]), 5, len(prompt))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(streamed.tokens)
    assert chunks[-1].usage.prompt_tokens == len(raw_ids)
