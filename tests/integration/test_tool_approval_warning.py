"""Without the sandbox's walls, the approval dialog says what is at stake (issue 37, item 6).

With LLMDECK_SANDBOX_JAIL=0 the code would run with the person's full rights, so python
asks before every run (even with "ask before Python runs" off) and the dialog says so."""

from __future__ import annotations

import json

import pytest

from core.config import Settings
from tests.fixtures.tui import scripted_app, wait_until


async def test_the_approval_dialog_says_the_code_runs_with_full_rights_without_walls(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMDECK_SANDBOX_JAIL", "0")
    call = ("Let me.\n<tool_call>\n"
            + json.dumps({"name": "python", "arguments": {"code": "1"}}) + "\n</tool_call>")
    app = scripted_app(Settings(python_asks=False), replies=[call, "Done."],
                       template="{{ '<tool_call>' }}")
    async with app.run_test(size=(100, 34)) as pilot:
        await wait_until(pilot, lambda: app.runtime.model.state == "ready")
        await pilot.press(*"go", "enter")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "ToolApprovalScreen", 60)
        assert "full rights" in str(app.screen.query_one("#approval-warning").render())
        await pilot.press("n")
        await wait_until(pilot, lambda: app.main.turn is None, 60)
