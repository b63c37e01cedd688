"""Ctrl+P finds what the README names: a new user typing "mcp", "sandbox" or "python"
got "No matches found" (MCP servers live in settings, the sandbox behind F8), and the
models were listed by file ("Model: gemma-3-270m-q4_k_m.gguf"), not by their one id."""

from __future__ import annotations

import pytest
from textual.command import CommandList, CommandPalette

from tests.fixtures.tui import scripted_app, wait_ready, wait_until

pytestmark = pytest.mark.timeout(120)


def hits(app) -> list[str]:  # noqa: ANN001
    found = app.screen.query_one(CommandList)
    prompts = [found.get_option_at_index(i).prompt for i in range(found.option_count)]
    return [getattr(p, "plain", "") for p in prompts]  # "No matches found" is not text


async def test_the_palette_finds_mcp_the_sandbox_and_models_by_id() -> None:
    app = scripted_app()
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_ready(pilot)
        for word, want in (("mcp", "MCP servers"), ("sandbox", "Python sandbox"),
                           ("python", "Python sandbox"), ("gemma3:270m", "Model: gemma3:270m")):
            await pilot.press("ctrl+p")
            await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette))
            await pilot.press(*word)
            await wait_until(pilot, lambda w=want: any(w in h for h in hits(app)))
            await pilot.press("escape")
            await wait_until(pilot, lambda: not isinstance(app.screen, CommandPalette))
