"""Running a reply's fenced Python blocks in the sandbox (F8) and asking for a fix (F9).

A topic of its own beside the chat screen: it finds the blocks of the focused (or the
newest) reply, runs them one by one as stored tool messages, and remembers the failure
that F9 turns into a message for the model. The screen keeps the keys and the busy gate.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from textual.dom import DOMNode

from tui.widgets.chat_view import ChatView
from tui.widgets.composer import Composer
from tui.widgets.message_view import MessageView

if TYPE_CHECKING:
    from core.wire.tools import RunResult


class CodeScreen(Protocol):
    """What running code needs from the screen that shows the chat (MainScreen)."""

    conversation_id: str | None

    @property
    def focused(self) -> DOMNode | None: ...
    @property
    def runtime(self) -> Any: ...
    @property
    def chat(self) -> ChatView: ...
    @property
    def composer(self) -> Composer: ...

    def run_worker(self, work: Coroutine[Any, Any, Any], *, group: str, exclusive: bool) -> Any: ...
    def notify(self, message: str, **options: Any) -> None: ...
    async def at_newest(self) -> None: ...


class CodeRuns:
    """F8 and F9 on the chat screen; `failed_run` is the code and result F9 fixes."""

    def __init__(self, screen: CodeScreen) -> None:
        self.screen = screen
        self.failed_run: tuple[str, RunResult] | None = None  # (code, result) for F9 "fix"

    def run_focused(self) -> None:
        """Run the blocks of the focused message, or of the newest reply that has some."""
        from core.wire.tools import python_blocks  # the tools package: not before the first frame

        screen = self.screen
        node = screen.focused
        while node is not None and not isinstance(node, MessageView):
            node = node.parent
        view = node or next((v for v in reversed(screen.chat.views)
                             if v.role == "assistant" and python_blocks(v.content)), None)
        blocks = python_blocks(view.content) if isinstance(view, MessageView) else []
        if not blocks or screen.conversation_id is None:
            screen.notify("No Python code block to run here; focus a message with one (ctrl+up).",
                          timeout=4)
            return
        screen.run_worker(self._run(blocks), group="code-run", exclusive=True)

    async def _run(self, blocks: list[str]) -> None:
        """Run each block in order as a visible, stored tool message; stop at a failure."""
        from tui.widgets.tool_card import ToolCard

        screen = self.screen
        cid = screen.conversation_id
        assert cid is not None
        await screen.at_newest()
        for code in blocks:
            view = await screen.chat.add_message(MessageView("tool", tool_results=[
                {"id": "running", "name": "python", "arguments": {"code": code}, "state": "running"}]))
            run = await screen.runtime.run_python(cid, code)
            view.message_id = run.message_id
            card = view.query_one(ToolCard)
            card.state, card.result = run.record["state"], run.record["content"]
            screen.chat.scroll_end(animate=False)
            if not run.result.ok:
                self.failed_run = (code, run.result)
                screen.notify("The code failed; F9 puts it and the error in the composer.",
                              severity="warning", timeout=6)
                return
        self.failed_run = None

    def fix(self) -> None:
        """Put the failed code and its error in the composer, for the model to fix."""
        screen = self.screen
        if self.failed_run is None:
            screen.notify("Nothing to fix: no code run has failed.", timeout=3)
            return
        from core.wire.tools import fix_prompt

        code, result = self.failed_run
        screen.composer.load_text(fix_prompt(code, result))
        screen.composer.focus()
