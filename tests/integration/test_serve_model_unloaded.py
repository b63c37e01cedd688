"""A request whose model is unloaded under it (the app beside the server loaded another
one) ends at once: a 503 that says why before any output, the stream's error event after
it, and the server answers the next request. Real server, openai client, real worker."""

from __future__ import annotations

import threading
import time

import openai
import pytest
from openai import OpenAI

from tests.fixtures.serve import ServerThread, scripted_spec

HI = [{"role": "user", "content": "Tell me a long story."}]


@pytest.mark.timeout(120)
def test_a_request_whose_model_is_unloaded_is_a_503_not_a_hang() -> None:
    srv = ServerThread(scripted_spec(reply="word " * 400, tokens_per_s=20, chunk_chars=5))
    try:
        client = OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=30)

        def unload_soon() -> None:
            time.sleep(1.0)
            srv.call(srv.runtime.pool.unload(srv.runtime.model_key))

        threading.Thread(target=unload_soon, daemon=True).start()
        started = time.monotonic()
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="scripted", messages=HI, max_tokens=1000)
        assert caught.value.status_code == 503 and "unloaded" in caught.value.message
        assert time.monotonic() - started < 15  # the reply would take 80 s
        assert srv.call(srv.runtime.reload_model())  # what a switch in the app does next
        threading.Thread(target=unload_soon, daemon=True).start()
        stream = client.chat.completions.create(model="scripted", messages=HI, max_tokens=1000,
                                                stream=True)
        with pytest.raises(openai.APIError, match="unloaded"):
            for _ in stream:
                pass
        assert srv.call(srv.runtime.reload_model())
        again = client.chat.completions.create(model="scripted", messages=HI, max_tokens=3)
        assert again.choices[0].message.content
    finally:
        srv.close()
