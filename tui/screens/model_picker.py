"""Pick a local model to chat with. The list is read off the loop (it stats files and
checks headers), and the choice is handed back to the caller to load."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from tui.terminal_text import visible


@dataclass(frozen=True)
class ModelChoice:
    """What the picker hands back: enough to load the model."""

    id: str
    name: str
    path: str
    engine: str | None
    bundled: bool
    base_model: bool = False  # no chat template: prompted as a transcript, answers plainly


async def load_choices(runtime: Any) -> tuple[list[ModelChoice], list[tuple[str, str]]]:
    """Valid local models and (name, problem) for the invalid ones, as the runtime lists
    them (the service reads the model folders, never the client)."""
    ok: list[ModelChoice] = []
    bad: list[tuple[str, str]] = []
    for m in await runtime.local_models():
        if m.role != "chat" and m.source != "bundled":
            continue
        if m.valid:
            ok.append(ModelChoice(m.model_id or m.id, m.name, str(m.path), m.engine, m.source == "bundled",
                                  m.base_model))
        else:
            bad.append((m.name, m.problem or "invalid"))
    return ok, bad


def cluster_choices(settings: object) -> list[ModelChoice]:
    """The [[clusters]] entries (issue 35): picking one starts it (core.cluster) and chats
    with its rank 0; its engine column reads "cluster"."""
    return [ModelChoice(f"cluster:{c.name}", f"cluster:{c.name}", f"cluster:{c.name}", "cluster",
                        False) for c in getattr(settings, "clusters", [])]


def current_choice(choices: list[ModelChoice], workers: list, current: str) -> ModelChoice | None:
    """The model the chat runs now when the local list lacks it (`llmdeck --model
    ~/elsewhere/model`, a folder outside the models folder): /api/tags and F4 name it, so
    the picker does too, and Enter on it keeps it rather than leaving no way back to it."""
    if not current or any(in_use(c, current) for c in choices):
        return None
    w = next((w for w in workers if getattr(w, "model", None) == current
              and getattr(w, "path", "")), None)
    if w is None:
        return None
    return ModelChoice(current, Path(w.path).name, str(w.path), w.engine or None, False)


def in_use(choice: ModelChoice, current: str) -> bool:
    """True when `choice` is the model the chat runs now (its label is `current`)."""
    return bool(current) and (choice.id == current or choice.name in current
                              or current in choice.path)


def start_row(choices: list[ModelChoice], current: str) -> int:
    """Where the cursor opens: on the model in use (Enter keeps it, a look down the list
    starts from it), else on the first row."""
    return next((i for i, c in enumerate(choices) if in_use(c, current)), 0)


def choice_label(choice: ModelChoice, current: str, loaded: bool = False) -> Text:
    """● marks the model in use; "loaded" one the pool holds already (picking it answers
    at once: several models stay loaded). One line: the file comes last, where a narrow
    picker cuts it with … (themes/dialogs.tcss) rather than wrap the row."""
    text = Text("● " if in_use(choice, current) else "  ", style="bold")
    text.append(visible(choice.id), style="bold")  # the one id (issue 45), its file last
    text.append(f"  {choice.engine or '?'}", style="dim")
    if choice.base_model:
        text.append("  base model", style="italic dim")
    if loaded:
        text.append("  loaded", style="italic")
    if choice.name != choice.id:
        text.append(f"  {visible(choice.name)}", style="dim")
    return text


def loaded_paths(workers: list) -> set[str]:
    """The files and folders of the models the pool holds now (WorkerStatus.path)."""
    return {str(Path(w.path).expanduser()) for w in workers
            if getattr(w, "path", "") and w.state in ("idle", "busy")}


class ModelPickerScreen(ModalScreen[ModelChoice | None]):
    """Lists local models; Enter picks, Esc cancels."""

    DEFAULT_CLASSES = "dialog-screen"

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, prompt: str = "Choose a model  (enter loads · esc cancels)", *,
                 on_current: bool = True) -> None:
        super().__init__()
        self.prompt = prompt  # what Enter does here (compare picks its second model)
        self.on_current = on_current  # the cursor opens on the model in use (F5), else row 1

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog picker"):
            yield Static(self.prompt, classes="dialog-text")
            yield OptionList(Option(Text("Looking for models…", style="dim"), disabled=True),
                             id="models")
            yield Static("", id="model-problems", classes="dialog-hint", markup=False)

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()
        self._load()

    @work(exclusive=True)
    async def _load(self) -> None:
        runtime = self.app.runtime  # type: ignore[attr-defined]
        choices, bad = await load_choices(runtime)
        choices += cluster_choices(runtime.settings)
        extra = None
        try:  # F5 only: compare asks for a second model, never this one
            if self.on_current:
                extra = current_choice(choices, runtime.worker_status(),
                                       runtime.model_state().label)
        except Exception:  # noqa: BLE001 - the pool is shutting down: the list as it is
            pass
        self._show(([extra] if extra else []) + choices, bad)

    def _show(self, choices: list[ModelChoice], bad: list[tuple[str, str]]) -> None:
        self.choices = choices
        options = self.query_one(OptionList)
        options.clear_options()
        runtime = self.app.runtime  # type: ignore[attr-defined]
        current = runtime.model_state().label
        try:
            loaded = loaded_paths(runtime.worker_status())
        except Exception:  # noqa: BLE001 - the pool is shutting down: mark nothing loaded
            loaded = set()
        for i, c in enumerate(choices):
            label = choice_label(c, current, str(Path(c.path).expanduser()) in loaded)
            options.add_option(Option(label, id=str(i)))
        if not choices:
            options.add_option(Option(Text("No local models: `llmdeck models pull` fetches one.",
                                           style="dim"), disabled=True))
        else:
            options.highlighted = start_row(choices, current) if self.on_current else 0
        problems = self.query_one("#model-problems", Static)
        problems.update(visible("\n".join(f"✖ {n}: {why}" for n, why in bad)))
        problems.display = bool(bad)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(self.choices[int(event.option.id or 0)])

    def action_cancel(self) -> None:
        self.dismiss(None)
