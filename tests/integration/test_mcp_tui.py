"""MCP servers driven through the app (Textual pilot): a scripted model in a worker
process asks for the fixture server's tools (a real SDK server over stdio), the approval
dialog is answered with keys, Esc stops a hanging call, the F4 pane shows the server, the
settings screen adds, turns off and removes servers by keyboard, prompts are slash commands
and resources attach like files."""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path

from core import paths
from core.config import McpServerConfig, Settings
from core.vision.captions import HEADER
from tests.fixtures.tui import scripted_app, service_turn, type_burst, wait_until
from tests.integration.test_mcp_servers import http_url  # noqa: F401 - the HTTP fixture server
from tui.screens.main import MainScreen
from tui.widgets.image_card import ImageCard
from tui.widgets.tool_card import ToolCard
from tui.widgets.worker_pane import WorkerPane

SIZE = (110, 40)
HERMES = "{{ '<tool_call>' }}"
FIXTURE = str(Path(__file__).resolve().parents[1] / "fixtures" / "mcp_server.py")
SLOW = 60.0


def tool_call(name: str, arguments: dict) -> str:
    return f"Asking.\n<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def fixture_settings(**kw) -> Settings:
    return Settings(mcp_servers=[McpServerConfig("fixture", command=sys.executable, args=[FIXTURE],
                                                 **kw)])


def app_with(replies: list[str], **kw):
    return scripted_app(fixture_settings(**kw), replies=replies, template=HERMES)


def pane_text(pane: WorkerPane) -> str:
    from rich.console import Console

    console = Console(width=140, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(pane.content)
    return console.export_text()


def cards(app) -> list[ToolCard]:
    return list(app.main.query(ToolCard))


async def ask(pilot, text: str) -> None:
    app = pilot.app
    await wait_until(pilot, lambda: app.runtime.model.state == "ready")
    await type_burst(pilot, text)
    await pilot.press("enter")


async def until_asked(pilot) -> None:
    await wait_until(pilot, lambda: pilot.app.screen.__class__.__name__ == "ToolApprovalScreen", SLOW)


async def test_approved_and_denied_calls_with_cards_results_fed_back_and_the_f4_row() -> None:
    app = app_with([tool_call("fixture.echo", {"text": "hi"}), "It said hi.",
                    tool_call("fixture.tally", {}), "Fine, not counted."])
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, "Echo hi")
        await until_asked(pilot)
        turn = service_turn(app)
        assert app.screen.query_one("#always"), "MCP tools offer always-allow"
        await pilot.press("y")
        await wait_until(pilot, lambda: app.main.turn is None, SLOW)
        card = cards(app)[-1]
        assert (card.tool_name, card.state, card.result) == ("fixture.echo", "done", "echo: hi")
        fed = turn.request.messages[-1]
        assert (fed["role"], fed["name"], fed["content"]) == ("tool", "fixture.echo", "echo: hi")

        await ask(pilot, "Count")
        await until_asked(pilot)
        await pilot.press("n")
        await wait_until(pilot, lambda: app.main.turn is None, SLOW)
        assert (cards(app)[-1].state, cards(app)[-1].result) == ("denied", "denied by user")
        stored = await app.runtime.messages(app.main.conversation_id)
        results = [r for m in stored if m.role == "tool" for r in m.tool_results]
        assert [(r["name"], r["state"]) for r in results] == [("fixture.echo", "done"),
                                                              ("fixture.tally", "denied")]

        await pilot.press("f4")
        pane = app.main.query_one(WorkerPane)
        await wait_until(pilot, lambda: "mcp fixture · 8 tools" in pane_text(pane))
        row = next(line for line in pane_text(pane).splitlines() if "mcp fixture" in line)
        assert row.split()[5:7] == ["ready", "0.0"], row
        from core.workers.status_file import format_table, read_status  # `llmdeck workers`

        await wait_until(pilot, lambda: any(w.engine == "mcp" for w in read_status()[0]))
        table = format_table(read_status()[0])
        line = next(x for x in table.splitlines() if x.startswith("mcp:fixture"))
        assert "mcp fixture · 8 tools" in line and " ready " in line
        pid = app.runtime.local.tools.mcp.connections["fixture"].pid
        assert pid is not None and os.path.exists(f"/proc/{pid}")
    assert not os.path.exists(f"/proc/{pid}"), "quitting left the MCP server running"


async def test_an_http_server_image_result_is_an_attached_image_card_and_a_broken_one_fails(
        http_url) -> None:  # noqa: F811 - the module fixture imported above
    settings = Settings(mcp_servers=[McpServerConfig("web", url=http_url)])
    app = scripted_app(settings, template=HERMES, replies=[
        tool_call("web.picture", {}), "A red dot.",
        tool_call("web.picture", {"broken": True}), "It broke."])
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, "Draw")
        await until_asked(pilot)
        turn = service_turn(app)
        await pilot.press("y")
        await wait_until(pilot, lambda: app.main.turn is None, SLOW)
        card = cards(app)[-1]
        assert (card.tool_name, card.state) == ("web.picture", "done")
        assert card.result == "[image web.picture.png, 1×1, attached to the chat]"
        shown = list(card.query(ImageCard))
        assert [c.alias for c in shown] == ["web.picture.png"], "the image card sits in the tool card"
        images = await app.runtime.images(app.main.conversation_id)
        assert [(a.alias, a.image.path) for a in images] == [("web.picture.png", shown[0].image.path)]
        fed = turn.request.messages[-1]  # the scripted model reads no pixels: the caption notice
        assert fed["role"] == "tool" and fed["content"].startswith(card.result)
        assert f"{HEADER}\n- web.picture.png (1×1): not described" in fed["content"]

        await ask(pilot, "Again, broken")
        await until_asked(pilot)
        await pilot.press("y")
        await wait_until(pilot, lambda: app.main.turn is None, SLOW)
        card = cards(app)[-1]
        assert card.state == "failed" and not card.query(ImageCard)
        assert card.result.startswith("web.picture returned an image (image/png) that could not "
                                      "be shown: web.picture.png could not be read as PNG")
        assert "It broke." in app.main.chat.views[-1].content, "the chat went on"
        assert len(await app.runtime.images(app.main.conversation_id)) == 1
        await app.main.open_conversation(app.main.conversation_id)  # reopened: the card is kept
        kids = list(app.main.chat.children)
        reopened = [i for i, w in enumerate(kids) if isinstance(w, ImageCard)]
        assert len(reopened) == 1 and kids[reopened[0]].alias == "web.picture.png"
        after = kids[reopened[0] + 1]  # just before the results of the call that made it
        assert getattr(after, "role", None) == "tool" and after.query(ToolCard)


async def test_a_model_that_sees_gets_an_mcp_image_as_an_image_part(http_url) -> None:  # noqa: F811
    settings = Settings(mcp_servers=[McpServerConfig("web", url=http_url)])
    app = scripted_app(settings, template=HERMES, vision=True,  # reports vision; reads no pixels
                       replies=[tool_call("web.picture", {}), "A red dot."])
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, "Draw")
        await until_asked(pilot)
        turn = service_turn(app)
        await pilot.press("y")
        await wait_until(pilot, lambda: app.main.turn is None, SLOW)
        path = cards(app)[-1].query_one(ImageCard).image.path
        fed = turn.request.messages[-1]
        assert fed["role"] == "tool" and fed["content"] == [
            {"type": "image", "path": path},
            {"type": "text", "text": "[image web.picture.png, 1×1, attached to the chat]"}]


async def test_a_hanging_call_stops_with_esc_and_a_crash_fails_only_the_call() -> None:
    app = app_with([tool_call("fixture.hang", {}), tool_call("fixture.crash", {}),  # Esc: no follow-up
                    "The server fell over; try again later."])
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, "Wait forever")
        await until_asked(pilot)
        await pilot.press("y")
        await wait_until(pilot, lambda: cards(app) and cards(app)[-1].state == "running")
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.main.turn is None, SLOW)
        assert (cards(app)[-1].state, cards(app)[-1].result) == ("failed", "cancelled by user")

        await ask(pilot, "Crash it")
        await until_asked(pilot)
        await pilot.press("y")
        await wait_until(pilot, lambda: app.main.turn is None, SLOW)
        card = cards(app)[-1]
        assert card.state == "failed"
        assert card.result.startswith("MCP server fixture stopped during the call to fixture.crash")
        views = app.main.chat.views
        assert views[-1].role == "assistant" and "fell over" in views[-1].content, "the chat went on"
        def row():  # noqa: ANN202 - the client's worker table lags the service by a poll
            return next(r for r in app.runtime.worker_status() if r.worker_id == "mcp:fixture")

        await wait_until(pilot, lambda: row().state != "ready", SLOW)
        assert (row().state, row().error) == ("crashed", "the server stopped during a call")


async def test_prompts_are_slash_commands_and_resources_attach_like_files() -> None:
    app = app_with(["Noted."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.runtime.model.state == "ready")
        await pilot.press("/")  # starts the servers in the background
        hint = app.main.query_one("#slash-hint")
        await wait_until(pilot, lambda: "/fixture.review" in str(hint.render()), SLOW)  # no key needed
        await type_burst(pilot, "fixture.rev")
        await pilot.press("tab")
        assert app.main.composer.text == "/fixture.review "
        await type_burst(pilot, "the roof")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.main.composer.text.startswith("Please review"))
        assert app.main.composer.text == "Please review the roof carefully and list three risks."
        app.main.composer.load_text("")
        await type_burst(pilot, "/attach mcp:fixture:notes://today")
        await pilot.press("enter")
        bar = app.main.query_one("#attachment-bar")
        await wait_until(pilot, lambda: bar.chips == ["today.txt"], SLOW)
        rt = app.runtime.local  # the service's store, read directly
        docs = await rt.store_call(rt.store_handle.attachments, app.main.conversation_id)
        assert [d.alias for d in docs] == ["today.txt"] and "plumber" in docs[0].text


async def test_settings_add_turn_off_and_remove_servers_by_keyboard() -> None:
    app = app_with(["Hi."])
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.runtime.model.state == "ready")
        await pilot.press("f3")
        await wait_until(pilot, lambda: app.screen.__class__.__name__ == "SettingsScreen")
        screen = app.screen
        screen.query_one("#mcp-new-name").focus()
        await type_burst(pilot, "my web")
        await pilot.press("tab")
        await type_burst(pilot, "http://h/mcp")
        await pilot.press("enter")
        await pilot.pause(0.1)
        why = screen.query_one("#why-mcp")
        assert str(why.render()) == ("✖ MCP server name 'my web' must be letters, digits, _ or - "
                                     "(it prefixes the tool names, as in name.tool).")
        screen.query_one("#mcp-new-name").focus()
        await pilot.press("end", *["backspace"] * 4)  # "my"
        screen.query_one("#mcp-new-target").focus()
        await pilot.press("enter")  # Enter in the URL field adds
        await wait_until(pilot, lambda: screen.query("#mcp-on-my"))
        assert not why.display
        screen.query_one("#mcp-on-fixture").focus()
        await pilot.press("space")  # turn fixture off
        screen.query_one("#mcp-rm-my").focus()
        await pilot.press("enter")  # and remove "my" again
        await wait_until(pilot, lambda: not screen.query("#mcp-on-my"))
        screen.query_one("#mcp-new-name").focus()
        await type_burst(pilot, "notes")
        await pilot.press("tab")
        await type_burst(pilot, "uvx notes -d '/a b'")
        await pilot.press("enter")
        await wait_until(pilot, lambda: screen.query("#mcp-on-notes"))
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))
    saved = tomllib.loads(paths.config_path().read_text())["mcp_servers"]
    assert [(s["name"], s["enabled"]) for s in saved] == [("fixture", False), ("notes", True)]
    assert saved[1]["command"] == "uvx" and saved[1]["args"] == ["notes", "-d", "/a b"]
    loaded = Settings.load()
    assert [m.name for m in loaded.mcp_servers] == ["fixture", "notes"] and not loaded.problems
