"""A GGUF chat model with its mmproj sees images through llama.cpp (issue 23): the bundled
Gemma 3 270M with a tiny random-weight projector written by the `gguf` package, in real
worker processes. An attached image goes into the prompt as its image tokens and a reply
streams (runtime and the real app); the same image at the same place is reused from the
cache; a corrupt image or too many images fail their request with a sentence and the chat
goes on; a projector made for another model, or damaged, is a load failure that says why;
`llmdeck serve` takes image_url parts for it; the prompt never reaches the output."""

from __future__ import annotations

import base64
import io
import subprocess
import sys
import textwrap
from pathlib import Path

import openai
import pytest

from core.config import Settings
from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.engines.base_prompt import base_format
from core.engines.llama_vision import MARKER, with_markers
from core.events import Done, Error, TextDelta, Usage
from core.runtime import Runtime
from tests.fixtures.gguf_vision import gguf_with_projector, image_tokens
from tests.fixtures.images import make_corrupt, make_image, picture
from tests.fixtures.serve import ROOT, ServerThread

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def seeing_gemma(bundled_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return gguf_with_projector(tmp_path_factory.mktemp("gguf-vision"), bundled_gguf)


def expected_prompt_tokens(model: Path, messages: tuple[dict, ...]) -> int:
    """The prompt's length counted independently of the engine: the base transcript
    tokenised around the image marker by llama.cpp's own tokenizer, plus the image's
    tokens (one per patch of the tiny projector)."""
    from llama_cpp import Llama

    text = base_format(None).render(with_markers(messages))
    before, after = text.split(MARKER)
    vocab = Llama(model_path=str(model), vocab_only=True, verbose=False)
    try:
        return (len(vocab.tokenize(before.encode(), add_bos=True, special=False))
                + image_tokens()
                + len(vocab.tokenize(after.encode(), add_bos=False, special=False)))
    finally:
        vocab.close()


async def test_an_attached_image_goes_into_the_prompt_and_a_corrupt_one_fails_alone(
        seeing_gemma: Path, tmp_path: Path) -> None:
    s = Settings(model=str(seeing_gemma), context_size=1024, replicas=1)
    s.sampling.temperature = 0.0
    s.sampling.max_tokens = 3
    rt = Runtime(s)
    await rt.start()
    try:
        assert await rt.ensure_model(), rt.model.error
        assert rt.model.info["vision"] is True
        assert rt.model.info["mmproj"].endswith("mmproj-gemma-3-270m-q4_k_m-f16.gguf")
        [attached] = await rt.attach(None, [make_image(tmp_path / "flag.png")])
        cid = attached.conversation_id
        turn = await rt.start_turn(cid, "What is in the picture?")
        assert turn.request.messages[-1]["content"][0] == {"type": "image",
                                                           "path": attached.image.path}
        events = [e async for e in turn.events()]
        assert any(isinstance(e, TextDelta) and e.text for e in events), events
        assert isinstance(events[-1], Done) and events[-1].finish_reason in ("stop", "length")
        usage = next(e for e in events if isinstance(e, Usage))
        assert usage.prompt_tokens == expected_prompt_tokens(seeing_gemma, turn.request.messages)
        assert rt.chat.captioner.worker is None, "no caption is made for a model that sees"

        # A corrupt picture (as a damaged stored file would be) fails that request alone,
        # with a sentence; so do more images than the context holds, refused before any is
        # encoded. The worker and the chat go on.
        broken = make_corrupt(tmp_path / "broken.png")
        request = GenerationRequest("broken", ({"role": "user", "content": [
            {"type": "image", "path": str(broken)}, {"type": "text", "text": "What is it?"}]},),
            SamplingParams(temperature=0.0, max_tokens=4))
        failed = [e async for e in rt.backend.generate(request)]
        assert isinstance(failed[0], Error) and failed[0].code == "BAD_REQUEST", failed
        assert "broken.png could not be read" in failed[0].message
        assert isinstance(failed[-1], Done) and failed[-1].finish_reason == "error"
        many = GenerationRequest("many", ({"role": "user", "content": [
            *[{"type": "image", "path": attached.image.path}] * 70,
            {"type": "text", "text": "All of them?"}]},), SamplingParams(max_tokens=2))
        refused = [e async for e in rt.backend.generate(many)]
        assert isinstance(refused[0], Error) and refused[0].code == "CONTEXT_OVERFLOW", refused
        assert "more than this model's context of 1024" in refused[0].message
        # The next turn carries the image again (with the newest message).
        after = await rt.start_turn(cid, "Describe it once more.")
        events = [e async for e in after.events()]
        assert any(isinstance(e, TextDelta) and e.text for e in events), events
        assert isinstance(events[-1], Done) and events[-1].finish_reason != "error"
        usage = next(e for e in events if isinstance(e, Usage))
        assert usage.prompt_tokens == expected_prompt_tokens(seeing_gemma, after.request.messages)

        # The same image at the same place: its positions are reused, not encoded again.
        def ask(rid: str) -> GenerationRequest:
            return GenerationRequest(rid, ({"role": "user", "content": [
                {"type": "image", "path": attached.image.path},
                {"type": "text", "text": "Once more?"}]},), SamplingParams(temperature=0.0,
                                                                           max_tokens=1))
        first = [e async for e in rt.backend.generate(ask("same-1"))]
        second = [e async for e in rt.backend.generate(ask("same-2"))]
        u1, u2 = (next(e for e in evs if isinstance(e, Usage)) for evs in (first, second))
        assert u1.prompt_tokens == u2.prompt_tokens
        assert u2.cached_tokens == u2.prompt_tokens - 1  # all but the last text token
    finally:
        await rt.close()


@pytest.mark.parametrize(("damage", "reason"), [
    ("width", "mismatch between text model (n_embd = 640) and mmproj (n_embd = 512)"),
    ("truncated", "failed to seek for tensor"),
])
async def test_a_projector_that_cannot_serve_the_model_is_a_load_failure_that_says_why(
        bundled_gguf: Path, tmp_path: Path, damage: str, reason: str) -> None:
    width = 512 if damage == "width" else 640
    model = gguf_with_projector(tmp_path / damage, bundled_gguf, text_embd=width)
    if damage == "truncated":
        projector = next(model.parent.glob("mmproj-*.gguf"))
        projector.write_bytes(projector.read_bytes()[:-4096])
    rt = Runtime(Settings(model=str(model), context_size=512, replicas=1))
    await rt.start()
    try:
        assert not await rt.ensure_model()
        error = rt.model.error or ""
        assert "mmproj-gemma-3-270m-q4_k_m-f16.gguf could not be loaded" in error, error
        assert reason in error and "move it out of the folder" in error, error
    finally:
        await rt.close()


def test_serve_takes_image_url_parts_for_a_gguf_model_with_its_projector(
        seeing_gemma: Path, tmp_path: Path) -> None:
    buf = io.BytesIO()
    picture(64, 48).save(buf, format="PNG")
    url = f"data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}"
    question = {"type": "text", "text": "What is in the picture?"}
    # Gemma's chat turns rendered by the Jinja formatter (the template path, where the
    # runtime test above takes the base transcript's).
    spec = ModelSpec(str(seeing_gemma), "llamacpp", context_size=1024,
                     options=(("base_format", "turns"),))
    srv = ServerThread(spec, served_name="gemma-sees")
    try:
        client = openai.OpenAI(base_url=srv.url, api_key="x")
        plain = client.chat.completions.create(
            model="gemma-sees", messages=[{"role": "user", "content": [question]}],
            max_tokens=3, temperature=0.0)
        stream = client.chat.completions.create(
            model="gemma-sees", max_tokens=4, temperature=0.0, stream=True,
            stream_options={"include_usage": True},
            messages=[{"role": "user", "content": [
                question, {"type": "image_url", "image_url": {"url": url}}]}])
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        usage = next(c.usage for c in chunks if c.usage)
        assert text and usage.completion_tokens == 4
        assert usage.prompt_tokens >= plain.usage.prompt_tokens + image_tokens()
    finally:
        srv.close()


def test_the_prompt_never_reaches_the_process_output(seeing_gemma: Path, tmp_path: Path) -> None:
    """libmtmd logs every prompt piece it tokenises ("add_text: ..."); the engine keeps its
    error lines only, so a conversation with an image never reaches stdout or stderr. Run
    in a child process, as the worker runs it."""
    photo = make_image(tmp_path / "secret.png")
    script = textwrap.dedent(f"""
        from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
        from core.engines.llamacpp import LlamaCppEngine
        engine = LlamaCppEngine(ModelSpec({str(seeing_gemma)!r}, "llamacpp", 512))
        engine.submit(GenerationRequest("r", ({{"role": "user", "content": [
            {{"type": "image", "path": {str(photo)!r}}},
            {{"type": "text", "text": "Whisper the launch code 7731"}}]}},),
            SamplingParams(temperature=0.0, max_tokens=2)))
        events = []
        while engine.has_work():
            for _, batch in engine.step():
                events += batch
        engine.close()
        print("FINISH", events[-1].finish_reason)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=240)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-2000:]
    assert "FINISH stop" in output or "FINISH length" in output, output[-2000:]
    assert "7731" not in output and "launch code" not in output and "add_text" not in output


async def test_the_app_puts_an_attached_image_in_the_models_prompt(seeing_gemma: Path,
                                                                  tmp_path: Path) -> None:
    """The real app, driven by keys: /attach, then a question; the GGUF model with its
    projector gets the picture itself (the stored reply's prompt holds its tokens)."""
    from tests.fixtures.tui import wait_until
    from tests.snapshots.test_docs_snapshots import command, send
    from tui.app import LlmdeckApp
    from tui.widgets.attachments import AttachmentBar

    s = Settings(model=str(seeing_gemma), context_size=1024, replicas=1)
    s.sampling.temperature = 0.0
    s.sampling.max_tokens = 4
    app = LlmdeckApp(Runtime(s))
    photo = make_image(tmp_path / "flag.png")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.runtime.model.state == "ready", 120)
        assert app.runtime.model.info["vision"] is True
        await command(pilot, f"/attach {photo}")
        bar = app.main.query_one(AttachmentBar)
        await wait_until(pilot, lambda: bar.chips == ["flag.png"], 60)
        await send(pilot, "What is in the picture?")
        cid = app.main.conversation_id
        reply = app.runtime.local.store_handle.messages(cid)[-1]
        assert reply.role == "assistant" and reply.content, reply
        sent = ({"role": "user", "content": [{"type": "image", "path": "stored.png"},
                                              {"type": "text", "text": "What is in the picture?"}]},)
        assert reply.usage["prompt_tokens"] == expected_prompt_tokens(seeing_gemma, sent)
        assert app.runtime.local.chat.captioner.worker is None
