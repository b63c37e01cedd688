"""The work the client did itself, now asked of the service (issue 47, item 4), seen from
the app: the bundled model unpacked by the service (its failure a sentence, the current
model staying), and the hub's "Download finished" naming the model by its one id
(issue 45, item 2), not by its file."""

from __future__ import annotations

import pytest

from tests.fakes.hub_repos import GGUF_REPO, catalog_files_fixture, fake_hub_fixture  # noqa: F401
from tests.fakes.hub_server import FakeHub
from tests.fixtures.hub_screen import SIZE, hub_app, open_repo, open_with_results
from tests.fixtures.tui import scripted_app, wait_ready, wait_until
from tui.screens.model_picker import ModelChoice

pytestmark = pytest.mark.timeout(240)


def _notices(app) -> list[str]:  # noqa: ANN001
    return [str(n.message) for n in app._notifications]


async def test_a_bundled_pick_the_disk_cannot_take_is_a_sentence_and_the_model_stays(
        monkeypatch) -> None:
    import core.bundled

    def full_disk(overwrite: bool = False):  # noqa: ANN202
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(core.bundled, "provision_bundled_chat", full_disk)
    app = scripted_app()
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_ready(pilot)
        before = app.runtime.model_state().label
        app.use_model(ModelChoice("gemma3:270m-q4_k_m", "Gemma", "/nowhere/gemma.gguf",
                                  "llamacpp", True))
        await wait_until(pilot, lambda: any("Could not unpack" in n for n in _notices(app)))
        said = next(n for n in _notices(app) if "Could not unpack" in n)
        assert "No space left on device" in said and "free some space" in said
        assert app.runtime.model_state().label == before  # the current model stays
        assert app.runtime.local.settings.model is None


async def test_download_finished_names_the_model_by_its_id(fake_hub: FakeHub) -> None:
    app = hub_app()
    async with app.run_test(size=SIZE) as pilot:
        await open_with_results(pilot)
        await open_repo(pilot, GGUF_REPO)
        await pilot.press("d")
        await wait_until(pilot, lambda: any("is ready" in n for n in _notices(app)), timeout=60)
        said = next(n for n in _notices(app) if "is ready" in n)
        models = await app.runtime.local_models()
        model = next(m for m in models if m.repo_id == GGUF_REPO)
        assert model.model_id and said.startswith(f"{model.model_id} is ready"), said
        assert "Q4_K_M.gguf" not in said


async def test_the_services_memory_stages_reach_the_app() -> None:
    """"Context is 70% full: summarising…" is said by the service's chat context; it is
    pushed to its clients (topic "memory") and shows in the app's attachment bar, for the
    open conversation only (it never showed in a client: nobody pushed it)."""
    from tui.widgets.attachments import AttachmentBar

    app = scripted_app()
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_ready(pilot)
        bar = app.main.query_one(AttachmentBar)
        service_side = app.runtime.local.chat.listeners  # the in-process service's Runtime

        def stage(cid: str, what: str) -> None:
            for listener in list(service_side):
                listener(cid, what)

        stage("c1", "summarising")
        await wait_until(pilot, lambda: "summarising" in str(bar.notice.render()))
        assert bar.notice.display
        stage("c1", "done")
        await wait_until(pilot, lambda: not bar.notice.display)
        app.main.conversation_id = "open-one"
        said: list[str] = []
        say = bar.say
        bar.say = lambda text, kind="warning": (said.append(text), say(text, kind))
        stage("another", "summarising")  # another client's conversation: not said here
        stage("open-one", "describing photo.png…")  # pushed after it, on the same socket
        await wait_until(pilot, lambda: "photo.png" in str(bar.notice.render()))
        assert said == ["photo.png…"]
