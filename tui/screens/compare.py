"""Compare: the composer's message to the chat model and a second model, both replies
streaming side by side (each with its stats line: TTFT, tok/s), then one kept.

The work is core.runtime.compare's (both models in the pool, both replies stored under one user
message); this screen only shows it. Keys: Esc backs out while the second model loads
(the text goes back to the composer) and stops both replies while they stream;
afterwards 1 keeps the left reply and 2 the right one, and Esc closes keeping the left
(the chat model's). The other reply stays as a sibling branch of the kept one, so the
chat's [ and ] step to it. The screen dismisses with a CompareOutcome the main screen
turns into the conversation it shows (or the refusal it tells, with the text given back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from core.events import Done, Error, ReasoningDelta, TextDelta, Usage
from core.wire.compare import LEFT, RIGHT, CompareRefused
from tui.screens.model_picker import ModelChoice
from tui.terminal_text import visible
from tui.widgets.message_view import MessageView
from tui.widgets.quiet_footer import QuietFooter

if TYPE_CHECKING:
    from core.runtime import Comparison, ModelSpec

KEEP_HINT = "1 keeps the left reply · 2 keeps the right · esc closes (the left stays the reply)"


@dataclass(frozen=True)
class CompareOutcome:
    """What the comparison left: the conversation and the kept reply, or, when it did not
    run (refused, or Esc while the second model loaded), `text` for the composer."""

    conversation_id: str | None
    kept_id: str | None = None
    refused: str | None = None
    text: str = ""


class CompareScreen(Screen[CompareOutcome]):
    """Two replies to one message, side by side."""

    BINDINGS = [
        Binding("escape", "stop_or_close", "Stop · close"),
        Binding("1", "keep(0)", "Keep left"),
        Binding("2", "keep(1)", "Keep right"),
    ]

    def __init__(self, conversation_id: str | None, text: str,
                 other: ModelChoice | ModelSpec, label: str) -> None:
        super().__init__()
        self.conversation_id = conversation_id
        self.text = text
        self.other = other
        self.label = label
        self.comparison: Comparison | None = None
        self.streamed = False  # both replies have ended (the keep keys work from then on)

    def compose(self) -> ComposeResult:
        yield Static(visible(f"Compare · {self.text.strip().splitlines()[0][:200]}"),
                     id="compare-question", markup=False)
        with Horizontal(id="compare-columns"):
            for side, label in ((LEFT, self.app.runtime.model_state().label), (RIGHT, self.label)):  # type: ignore[attr-defined]
                with Vertical(classes="compare-side", id=f"compare-side-{side}"):
                    yield Static(visible(f"{side + 1}  {label}"), classes="compare-model",
                                 markup=False)
                    with VerticalScroll(classes="compare-scroll"):
                        yield MessageView("assistant")
        yield Static(f"Loading {visible(self.label)} beside the chat model…",
                     id="compare-hint", markup=False)
        yield QuietFooter()

    @property
    def views(self) -> list[MessageView]:
        return list(self.query(MessageView))

    def on_mount(self) -> None:
        for view in self.views:
            view.can_focus = False  # the keys here act on the comparison, not a message
        self._run()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "keep":
            return self.streamed and self.comparison is not None
        return True

    @work(exclusive=True, group="compare")
    async def _run(self) -> None:
        runtime = self.app.runtime  # type: ignore[attr-defined]
        other = self.other
        try:
            if isinstance(other, ModelChoice):
                other = await runtime.spec_for(other.path, other.engine,  # the service's
                                               runtime.settings.context_size, other.bundled)
            result = await runtime.compare(self.conversation_id, self.text, other, self.label)
        except Exception as exc:  # a full disk while unpacking, a store failure: say so
            why = getattr(exc, "message", None) or str(exc)  # WorkerLoadError has a sentence
            result = CompareRefused(f"Could not start the comparison: {why}")
        if isinstance(result, CompareRefused):
            self.dismiss(CompareOutcome(self.conversation_id, refused=result.message,
                                        text=self.text))
            return
        self.comparison = result
        self.query_one("#compare-hint", Static).update("streaming both · esc stops both")
        views = self.views
        remote = runtime.model_is_remote()
        async for item in result.events():
            view, event = views[item.side], item.event
            if isinstance(event, TextDelta):
                await view.append_text(event.text)
            elif isinstance(event, ReasoningDelta):
                await view.append_reasoning(event.text)
            elif isinstance(event, Usage):
                view.set_usage(event)
            elif isinstance(event, Error):
                view.show_error(event, remote=remote and item.side == LEFT)
            elif isinstance(event, Done):
                if event.finish_reason == "cancelled":
                    view.set_status("stopped")
                await view.finish()
        self.streamed = True
        self.query_one("#compare-hint", Static).update(KEEP_HINT)
        self.refresh_bindings()

    def action_stop_or_close(self) -> None:
        if self.comparison is None:  # still loading the second model: back out, text kept
            self.workers.cancel_group(self, "compare")
            self.dismiss(CompareOutcome(self.conversation_id, text=self.text))
            return
        if not self.streamed:
            self.comparison.cancel()
            return
        self.action_keep(LEFT)

    @work(exclusive=True, group="compare-keep")
    async def action_keep(self, side: int) -> None:
        comparison = self.comparison
        if comparison is None or not self.streamed:
            return
        try:
            kept = await comparison.keep(side)
        except Exception as exc:  # the reply was not saved (a full disk): tell, stay open
            self.notify(str(exc), title="Not kept", severity="error", timeout=8)
            return
        self.dismiss(CompareOutcome(comparison.conversation_id, kept_id=kept))


# -- the chat screen's side (moved out of tui/screens/main.py, kept under 700 lines) -------
BUSY = "A reply is still streaming; press Esc to stop it first."


def start_compare(screen: Any) -> None:
    """Ctrl+T on the chat screen: pick the second model, then compare the composer's text."""
    text = screen.composer.text
    if screen.busy or screen.composer.editing_id is not None:
        screen.notify(BUSY if screen.busy else "Finish or cancel the edit first (esc).")
        return
    if not text.strip():
        screen.notify("Type the message to compare first, then ctrl+t picks the second model.",
                      timeout=5)
        return

    def _picked(choice: ModelChoice | None) -> None:
        if choice is not None:
            screen.composer.load_text("")
            screen.app.push_screen(CompareScreen(screen.conversation_id, text, choice, choice.id),
                                   screen._compared)

    from tui.screens.model_picker import ModelPickerScreen

    screen.app.push_screen(ModelPickerScreen("Compare with which model?  (enter picks it · "
                                             "esc cancels)", on_current=False), _picked)


async def take_outcome(screen: Any, outcome: CompareOutcome) -> None:
    """What the comparison left: the text back in the composer when nothing was sent (and
    the refusal said), else the conversation with the kept reply opened."""
    if outcome.kept_id is None and outcome.text:
        screen.composer.restore(outcome.text)
        if outcome.refused:
            screen.notify(outcome.refused, title="Compare", severity="error", timeout=12)
        return
    if outcome.conversation_id is not None:
        with screen.store_errors("Compare"):
            await screen.open_conversation(outcome.conversation_id)
            await screen.refresh_sidebar()
    screen.composer.focus()
